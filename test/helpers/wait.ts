// Waiting on a condition, never on the clock: a test says what it waits for, and how long it waits is only a
// deadline for reporting a hang (generous, so that a loaded 2-core CI machine is never mistaken for a failure).

const POLL_MS = 50;
export const DEFAULT_WAIT_MS = 60_000;

/** Polls `probe` until it returns a value other than undefined; throws naming `what` after `timeoutMs`. */
export async function until<T>(
  what: string,
  probe: () => Promise<T | undefined> | T | undefined,
  timeoutMs = DEFAULT_WAIT_MS,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting after ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

/** Waits until `condition()` holds. */
export async function waitFor(what: string, condition: () => boolean, timeoutMs = DEFAULT_WAIT_MS): Promise<void> {
  await until(what, () => (condition() ? true : undefined), timeoutMs);
}
