// Busy polling (src/busy-poll.ts): the loop keeps polling for the window after a touch and then sleeps; the
// window comes from SIGNBRIDGE_BUSY_POLL_MS or the config file, and bad values are refused by both configs.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DaemonConfigError, resolveDaemonConfig } from '../../daemon/config.js';
import {
  BusyPoll,
  busyPollSetting,
  CONTENTION_BACK_OFF_MS,
  CONTENTION_SAMPLE_MS,
  DEFAULT_BUSY_POLL_MS,
  MAX_BUSY_POLL_MS,
} from '../../src/busy-poll.js';
import { resolveConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/config-error.js';
import { makeTempDir } from '../helpers/service.js';

/**
 * A clock the test moves by hand: the poller's decisions depend only on it, never on how fast this machine runs
 * (a wall-clock window of a few ms is missed by any stall of a loaded CI machine).
 */
function manualClock() {
  let ms = 1_000;
  return {
    now: () => ms,
    advance(by: number) {
      ms += by;
    },
  };
}
const nextTurn = () => new Promise((resolve) => setImmediate(resolve));
/** The loop is kept polling: a setImmediate callback is always queued (what keeps epoll from sleeping). */
const immediateQueued = () => process.getActiveResourcesInfo().includes('Immediate');

describe('BusyPoll', () => {
  it('polls the loop for the window after a touch, then stops', async () => {
    const clock = manualClock();
    const poll = new BusyPoll(20, { now: clock.now });
    expect(poll.active).toBe(false);
    poll.touch();
    expect(poll.active).toBe(true);
    // Inside the window the poller re-queues itself every turn, however many turns pass.
    for (let turn = 0; turn < 50; turn++) {
      await nextTurn();
      expect(poll.active).toBe(true);
      expect(immediateQueued()).toBe(true);
    }
    clock.advance(19);
    await nextTurn();
    expect(poll.active).toBe(true);
    clock.advance(2); // past the window
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(false);
    expect(immediateQueued()).toBe(false); // nothing left to keep the loop awake
  });

  it('yields to busy signing threads: stops polling while they would need the core it takes, resumes after', async () => {
    const clock = manualClock();
    let busy = 1;
    const poll = new BusyPoll(50, { busyThreads: () => busy, cores: 2, now: clock.now });
    poll.touch();
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(false); // one thread busy on 2 cores: the loop sleeps instead of spinning
    busy = 0;
    poll.touch(); // the thread's answer arrives and the reply goes out
    await nextTurn();
    expect(poll.active).toBe(true);
    // With more cores the same busy thread leaves room to poll.
    const roomy = new BusyPoll(50, { busyThreads: () => 1, cores: 4, now: clock.now });
    roomy.touch();
    await nextTurn();
    expect(roomy.active).toBe(true);
    clock.advance(51);
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(false);
    expect(roomy.active).toBe(false);
  });

  it('polls while work is under way (begin/end), at most MAX_BUSY_POLL_MS, then the window after its end', async () => {
    const clock = manualClock();
    const poll = new BusyPoll(1, { now: clock.now });
    poll.begin();
    clock.advance(5);
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(true); // past the 1 ms window: held by the open work
    poll.end();
    await nextTurn();
    expect(poll.active).toBe(true); // the window after the end
    clock.advance(2);
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(false);

    poll.begin(); // never ended, as a request waiting minutes for an approval
    clock.advance(MAX_BUSY_POLL_MS - 1);
    await nextTurn();
    expect(poll.active).toBe(true);
    clock.advance(2);
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(false);
    poll.end();
  });

  it('waits on a second piece of work asleep: it needs a core elsewhere (the service), as a busy thread does', async () => {
    const clock = manualClock();
    const poll = new BusyPoll(1, { cores: 2, now: clock.now });
    poll.begin(); // one client's request at the service: the sequential client's wait, polled
    await nextTurn();
    expect(poll.active).toBe(true);
    poll.begin(); // a second client's request too: the service needs both cores
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(false);
    poll.end(); // one answered: back to one wait, polled again
    await nextTurn();
    expect(poll.active).toBe(true);
    poll.end();
    clock.advance(2);
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(false);
  });

  it('stops polling for a while when it does not get the CPU it spins for (the cores are oversubscribed)', async () => {
    const clock = manualClock();
    let cpuMs = 0;
    // A window long enough for samples to be taken while it lasts.
    const window = CONTENTION_SAMPLE_MS * 4;
    const poll = new BusyPoll(window, { now: clock.now, threadCpuMs: () => cpuMs, cores: 2 });
    poll.touch();
    // Running all the time it polls: it goes on.
    clock.advance(CONTENTION_SAMPLE_MS);
    cpuMs += CONTENTION_SAMPLE_MS;
    await nextTurn();
    expect(poll.active).toBe(true);
    // Preempted: a quarter of the wall time on the CPU.
    clock.advance(CONTENTION_SAMPLE_MS);
    cpuMs += CONTENTION_SAMPLE_MS / 4;
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(false);
    poll.touch(); // new work during the back-off: it sleeps
    await nextTurn();
    expect(poll.active).toBe(false);
    clock.advance(CONTENTION_BACK_OFF_MS);
    poll.touch(); // after it: polls again
    await nextTurn();
    expect(poll.active).toBe(true);
    clock.advance(window + 1);
    cpuMs += window + 1;
    await nextTurn();
    await nextTurn();
    expect(poll.active).toBe(false);
  });

  it('does nothing with a window of 0', () => {
    const off = new BusyPoll(0);
    off.touch();
    off.begin();
    expect(off.active).toBe(false);
    off.end();
    expect(off.active).toBe(false);
  });
});

describe('the busy-poll setting', () => {
  const err = (m: string) => new Error(m);
  it('takes the environment, else the config file, else the default', () => {
    expect(busyPollSetting(undefined, undefined, err)).toBe(DEFAULT_BUSY_POLL_MS);
    expect(busyPollSetting('', 2, err)).toBe(2);
    expect(busyPollSetting('0', 2, err)).toBe(0);
    expect(busyPollSetting('1.5', undefined, err)).toBe(1.5);
  });

  it.each(['abc', '-1', '11', '1e3', 'Infinity'])('refuses SIGNBRIDGE_BUSY_POLL_MS=%s in both configs', (value) => {
    const env = { SIGNBRIDGE_BUSY_POLL_MS: value };
    expect(() => busyPollSetting(value, undefined, err)).toThrow(/from 0 to 10/);
    expect(() => resolveConfig({ dataDir: makeTempDir(), env })).toThrow(ConfigError);
    expect(() => resolveConfig({ dataDir: makeTempDir(), env })).toThrow(/SIGNBRIDGE_BUSY_POLL_MS/);
    const daemon = () => resolveDaemonConfig({ inProcessDataDir: makeTempDir(), tenants: ['t'], env });
    expect(daemon).toThrow(DaemonConfigError);
    expect(daemon).toThrow(/SIGNBRIDGE_BUSY_POLL_MS/);
  });

  it('reads busyPollMs from the config files, and refuses one out of range', () => {
    const dir = makeTempDir();
    const good = join(dir, 'good.yaml');
    writeFileSync(good, `dataDir: ${dir}\nbusyPollMs: 0\n`);
    expect(resolveConfig({ configFile: good, env: {} }).busyPollMs).toBe(0);
    expect(resolveConfig({ dataDir: dir, env: {} }).busyPollMs).toBe(DEFAULT_BUSY_POLL_MS);
    // Off by default with the state in PostgreSQL, unless set.
    const database = 'postgres://signbridge@db.example/signbridge';
    expect(resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_DATABASE_URL: database } }).busyPollMs).toBe(0);
    expect(
      resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_DATABASE_URL: database, SIGNBRIDGE_BUSY_POLL_MS: '0.5' } })
        .busyPollMs,
    ).toBe(0.5);
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, `dataDir: ${dir}\nbusyPollMs: 50\n`);
    expect(() => resolveConfig({ configFile: bad, env: {} })).toThrow(/busyPollMs/);
  });
});
