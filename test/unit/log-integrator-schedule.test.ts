// When the transparency log's background integrator runs (src/transparency/log-service.ts, start/nudge): idle, it
// backs off up to 15 s between looks; entries this process committed bring it back within one interval (250 ms by
// default), and entries integrated but not yet in a checkpoint bring it back when the checkpoint is due. Fake
// timers and a pass that only counts itself: the schedule is what is tested (the passes themselves are tested with
// the real service in test/transparency/).
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LOG_DEFAULTS, LogService } from '../../src/transparency/log-service.js';

let passes: number;

function integrator(intervalMs: number = LOG_DEFAULTS.intervalMs): LogService {
  const log = new LogService({
    store: {} as never,
    keyStores: {} as never,
    settings: { ...LOG_DEFAULTS, intervalMs },
  });
  log.pass = async () => {
    passes++;
    return undefined;
  };
  return log;
}

beforeEach(() => {
  passes = 0;
  vi.useFakeTimers();
});
afterEach(() => vi.useRealTimers());

describe('the integrator schedule', () => {
  it('defaults to a 250 ms batch window and a checkpoint at most every second', () => {
    expect(LOG_DEFAULTS.intervalMs).toBe(250);
    expect(LOG_DEFAULTS.checkpointEverySeconds).toBe(1);
  });

  it('backs off while idle, and a nudge brings the next pass within one interval', async () => {
    const log = integrator();
    log.start();
    await vi.advanceTimersByTimeAsync(60_000);
    const idle = passes;
    // 0, 250, 750, 1750, 3750, 7750, 15750, then every 15 s: about 10 passes a minute, not 240.
    expect(idle).toBeLessThan(12);
    await vi.advanceTimersByTimeAsync(1_000);
    const before = passes;
    log.nudge();
    await vi.advanceTimersByTimeAsync(249);
    expect(passes).toBe(before);
    await vi.advanceTimersByTimeAsync(1);
    expect(passes).toBe(before + 1);
    // Several nudges in one window are one pass (the batch).
    log.nudge();
    log.nudge();
    await vi.advanceTimersByTimeAsync(250);
    expect(passes).toBe(before + 2);
    await log.stop();
  });

  it('a nudge during a pass makes the next one come after one interval, not the back-off', async () => {
    const log = integrator();
    let release: () => void = () => undefined;
    log.pass = () => {
      passes++;
      return new Promise((resolve) => {
        release = () => resolve(undefined);
      });
    };
    log.start();
    for (let i = 0; i < 8; i++) {
      await vi.advanceTimersByTimeAsync(16_000);
      release();
    }
    await vi.advanceTimersByTimeAsync(16_000); // a pass is running now
    const running = passes;
    log.nudge();
    release();
    await vi.advanceTimersByTimeAsync(250);
    expect(passes).toBe(running + 1);
    release();
    await log.stop();
  });

  it('comes back when a checkpoint falls due, whatever the back-off', async () => {
    const log = integrator();
    let dueIn: number | undefined;
    log.pass = async () => {
      passes++;
      // What planCheckpoint leaves when entries were integrated but their checkpoint is not due yet.
      if (dueIn !== undefined) (log as unknown as { checkpointDueAt: number }).checkpointDueAt = Date.now() + dueIn;
      return undefined;
    };
    log.start();
    await vi.advanceTimersByTimeAsync(60_000); // backed off to 15 s
    const before = passes;
    dueIn = 600;
    log.nudge();
    await vi.advanceTimersByTimeAsync(250);
    expect(passes).toBe(before + 1);
    dueIn = undefined;
    // The due checkpoint's pass, 600 ms later (not 500 ms: the doubled back-off).
    await vi.advanceTimersByTimeAsync(599);
    expect(passes).toBe(before + 1);
    await vi.advanceTimersByTimeAsync(1);
    expect(passes).toBe(before + 2);
    await log.stop();
  });

  it('does nothing with intervalMs 0 (another instance integrates), nudged or not', async () => {
    const log = integrator(0);
    log.start();
    log.nudge();
    await vi.advanceTimersByTimeAsync(60_000);
    expect(passes).toBe(0);
  });
});
