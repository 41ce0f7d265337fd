// The bounds on what each process of a service with request workers holds (src/workers/memory-bounds.ts): the
// workers' young generation, a worker replaced once its resident set stays above the limit (never before the fresh
// one listens), and the primary's key store without signing threads.
import type { Worker } from 'node:cluster';
import { EventEmitter } from 'node:events';
import { describe, expect, it } from 'vitest';
import {
  primaryKeyStore,
  READINGS_ABOVE,
  ResidentSetWatch,
  replaceWorker,
  workerExecArgv,
} from '../../src/workers/memory-bounds.js';

describe('workerExecArgv', () => {
  it("adds V8's semi-space size to the primary's own flags", () => {
    expect(workerExecArgv(['--enable-source-maps'], undefined, 16)).toEqual([
      '--enable-source-maps',
      '--max-semi-space-size=16',
    ]);
  });

  it('adds nothing for 0 (V8 chooses)', () => {
    expect(workerExecArgv(['--enable-source-maps'], '', 0)).toEqual(['--enable-source-maps']);
  });

  it("leaves an operator's own choice alone, on the command line or in NODE_OPTIONS", () => {
    expect(workerExecArgv(['--max-semi-space-size=64'], undefined, 16)).toEqual(['--max-semi-space-size=64']);
    expect(workerExecArgv(['--max-semi-space-size', '64'], undefined, 16)).toEqual(['--max-semi-space-size', '64']);
    expect(workerExecArgv([], '--trace-warnings  --max-semi-space-size=8', 16)).toEqual([]);
    // A flag that only starts alike is not that choice.
    expect(workerExecArgv(['--max-semi-space-sizes=1'], undefined, 16)).toContain('--max-semi-space-size=16');
  });
});

describe('ResidentSetWatch', () => {
  const MB = 2 ** 20;
  const watching = (readings: number[]) => {
    const fired: number[] = [];
    const watch = new ResidentSetWatch(
      300,
      (rssMb) => fired.push(rssMb),
      () => (readings.shift() ?? 0) * MB,
    );
    return { watch, fired };
  };

  it(`asks once, after ${READINGS_ABOVE} readings in a row above the limit`, () => {
    const { watch, fired } = watching([310, 320, 330, 340, 350]);
    for (let i = 0; i < 5; i++) watch.check();
    expect(READINGS_ABOVE).toBe(3);
    expect(fired).toEqual([330]);
  });

  it('starts counting again after a reading at or below the limit (a burst is not a leak)', () => {
    const { watch, fired } = watching([310, 320, 300, 310, 320, 290, 400, 400]);
    for (let i = 0; i < 8; i++) watch.check();
    expect(fired).toEqual([]);
  });

  it('never asks below the limit', () => {
    const { watch, fired } = watching(Array(50).fill(299));
    for (let i = 0; i < 50; i++) watch.check();
    expect(fired).toEqual([]);
  });
});

describe('replaceWorker', () => {
  class FakeWorker extends EventEmitter {
    dead = false;
    isDead() {
      return this.dead;
    }
  }
  const asWorker = (w: FakeWorker) => w as unknown as Worker;
  const listensOn = (worker: Worker, then: () => void) => (worker as unknown as FakeWorker).once('listening', then);

  it('retires the old worker only once the fresh one listens', () => {
    const old = new FakeWorker();
    const fresh = new FakeWorker();
    const retired: unknown[] = [];
    const got = replaceWorker(
      asWorker(old),
      () => asWorker(fresh),
      listensOn,
      (w) => retired.push(w),
    );
    expect(got).toBe(fresh);
    expect(retired).toEqual([]);
    fresh.emit('listening');
    expect(retired).toEqual([old]);
  });

  it('keeps the old worker while the fresh one never listens, and leaves one that died alone', () => {
    const retired: unknown[] = [];
    replaceWorker(
      asWorker(new FakeWorker()),
      () => asWorker(new FakeWorker()),
      listensOn,
      (w) => retired.push(w),
    );
    expect(retired).toEqual([]);
    const old = new FakeWorker();
    const fresh = new FakeWorker();
    replaceWorker(
      asWorker(old),
      () => asWorker(fresh),
      listensOn,
      (w) => retired.push(w),
    );
    old.dead = true;
    fresh.emit('listening');
    expect(retired).toEqual([]);
  });
});

describe('primaryKeyStore', () => {
  it('gives the primary no signing threads, whatever the workers have', () => {
    expect(primaryKeyStore({ type: 'softhsm', signThreads: 4 })).toEqual({ type: 'softhsm', signThreads: 0 });
    expect(primaryKeyStore({ type: 'pkcs11', module: '/m.so', tokenLabel: 't', pin: '1' })).toMatchObject({
      signThreads: 0,
    });
    expect(primaryKeyStore({ type: 'aws-kms', legacy: { type: 'softhsm' } })).toEqual({
      type: 'aws-kms',
      legacy: { type: 'softhsm', signThreads: 0 },
    });
    expect(primaryKeyStore({ type: 'aws-kms' })).toEqual({ type: 'aws-kms' });
  });
});
