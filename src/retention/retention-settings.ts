// How long finished rows are kept, and how the pruner deletes them (docs/deployment.md, "Retention";
// docs/configuration.md, `retention.*`). The windows here are lower bounds the operator chooses; the pruner never
// goes below what the contract itself needs (src/retention/pruner.ts, effectiveWindows).

export interface RetentionSettings {
  /** Off: nothing is ever deleted (the tables grow for ever). */
  enabled: boolean;
  /**
   * Finished deliveries, and events whose deliveries are all finished, are kept this long after the event
   * (default: the dispatcher's retry window, 24 h). Never less than the retry window.
   */
  eventsMs: number;
  /**
   * Signing requests decided for good (approved, rejected, expired, denied) are kept this long after the decision
   * (default 7 days): a client may still collect the answer with `request_id`. Never less than the retry window of
   * approvals (a retried `sign` gets a decided request's outcome within it), nor the 24 hours an Idempotency-Key is
   * remembered (a replayed 202 names the request to collect).
   */
  requestsMs: number;
  /** Rows one DELETE statement removes at most (default 1000). */
  batchRows: number;
  /** Batches one pass deletes at most per kind of row (default 100), so a pass that catches up ends too. */
  batchesPerPass: number;
  /** Time between two passes of one instance (default 60 s). */
  intervalMs: number;
}

export const RETENTION_DEFAULTS: RetentionSettings = {
  enabled: true,
  eventsMs: 24 * 3600_000,
  requestsMs: 7 * 24 * 3600_000,
  batchRows: 1000,
  batchesPerPass: 100,
  intervalMs: 60_000,
};
