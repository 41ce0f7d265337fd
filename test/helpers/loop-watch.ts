// A setup file for every test file (vitest.config.ts): says which test held the worker's event loop for long.
// Vitest's worker reports each test to the main process over RPC with a 60 s answer time-out; a test that blocks
// its worker's loop (a long synchronous child process, a synchronous native call) for longer makes that report
// time out, an "unhandled error" with no test named. This names it in the log, so the test can be made to yield.
import { afterEach, beforeEach, expect } from 'vitest';

// The real clock and setImmediate, taken before any test can install fake timers (which replace both).
const realNow = Date.now;
const realSetImmediate = setImmediate;
const TICK_MS = 1000;
const REPORT_BLOCK_MS = 20_000;
let current = '(before the first test: collection or beforeAll)';
let last = realNow();

beforeEach(() => {
  current = expect.getState().currentTestName ?? '(unnamed test)';
});

// One turn of the event loop after each test. A file of synchronous tests (runCli, execFileSync of a signing tool)
// otherwise never turns the loop between them (awaits settle as microtasks), so their times add up into one hold
// that can pass the 60 s report time-out although no test takes long; with this turn only one test's own time counts.
afterEach(() => new Promise<void>((resolve) => realSetImmediate(resolve)));

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
