// Requests counted per client in a window: the trial's and the TSA's per-address limits, the device flow's start
// and wrong-code limits, and the policy's signing velocity all count here, each under keys of its own (the table
// is still called trial_counters, after its first user).
import { StorePart } from '../store-context.js';

/**
 * The longest window a counter may have (trial.windowSeconds and the policy's velocity windows are capped to it):
 * older rows are swept.
 */
export const COUNT_WINDOW_MAX_MS = 7 * 24 * 3600 * 1000;

export interface RequestCount {
  count: number;
  windowStartMs: number;
}

export class RequestCountStore extends StorePart {
  /**
   * Counts one request of `client` (or `by` of them: a batch of signatures), atomically, in a window of `windowMs` that starts at the client's first
   * request (a window that has ended starts again at `nowMs`). Returns the count including this request and when
   * the window started. Windows that ended are deleted.
   */
  async count(client: string, nowMs: number, windowMs: number, by = 1): Promise<RequestCount> {
    const ended = nowMs - windowMs;
    return this.db.transaction().execute(async (tx) => {
      // This client's window, if it has ended; other limiters keep theirs (their windows differ: the device-flow
      // start limit's is a minute, the trial's an hour). Rows no limiter can still need go too (windows are at
      // most COUNT_WINDOW_MAX_MS).
      await tx
        .deleteFrom('trial_counters')
        .where((eb) =>
          eb.or([
            eb.and([eb('client', '=', client), eb('window_start', '<=', ended)]),
            eb('window_start', '<=', nowMs - COUNT_WINDOW_MAX_MS),
          ]),
        )
        .execute();
      // One statement, so two instances counting the same address at once both count (no lost update).
      const row = await tx
        .insertInto('trial_counters')
        .values({ client, window_start: nowMs, count: by })
        .onConflict((oc) =>
          oc.column('client').doUpdateSet((eb) => ({
            count: eb('trial_counters.count', '+', by),
          })),
        )
        .returning(['count', 'window_start'])
        .executeTakeFirstOrThrow();
      return { count: Number(row.count), windowStartMs: Number(row.window_start) };
    });
  }

  /** The count `count` kept for `client` in the window that is open at `nowMs` (0 if none), unchanged. */
  async read(client: string, nowMs: number, windowMs: number): Promise<number> {
    const row = await this.db
      .selectFrom('trial_counters')
      .select('count')
      .where('client', '=', client)
      .where('window_start', '>', nowMs - windowMs)
      .executeTakeFirst();
    return Number(row?.count ?? 0);
  }
}
