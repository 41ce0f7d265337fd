// A setup file for every test file (vitest.config.ts): says which test held the worker's event loop for long.
// Vitest's worker reports each test to the main process over RPC with a 60 s answer time-out; a test that blocks
// its worker's loop (a long synchronous child process, a synchronous native call) for longer makes that report
// time out, an "unhandled error" with no test named. This names it in the log, so the test can be made to yield.
import { beforeEach, expect } from 'vitest';

// The real clock, taken before any test can install fake timers (which replace Date).
const realNow = Date.now;
const TICK_MS = 1000;
const REPORT_BLOCK_MS = 20_000;
let current = '(before the first test: collection or beforeAll)';
let last = realNow();

beforeEach(() => {
  current = expect.getState().currentTestName ?? '(unnamed test)';
});

setInterval(() => {
  const now = realNow();
  const blocked = now - last - TICK_MS;
  if (blocked > REPORT_BLOCK_MS) {
    process.stderr.write(
      `[loop-watch] ${expect.getState().testPath ?? ''}: the event loop was held ${(blocked / 1000).toFixed(1)} s in or after "${current}"\n`,
    );
  }
  last = now;
}, TICK_MS).unref();
