// The service's Prometheus metrics (prom-client). Counting on the request path costs a few Map lookups and an
// increment: label children are made once per label combination and kept, so no label object is built per request.
// Pending approvals, the audit chain's length, the key store's fault counters and the event deliveries still to make
// are read on scrape.
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client';
import type { KeyStore, KeyStores } from '../keys/key-store.js';
import type { Store } from '../store/store.js';

export type SignOutcome = 'signed' | 'denied' | 'pending' | 'failed';

/** Seconds; from a P-256 signature on the event loop (~0.1 ms) to an RSA-4096 one on a busy machine. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

export class ServiceMetrics {
  readonly registry = new Registry();
  private readonly signatures: Counter<'outcome' | 'algorithm' | 'tenant'>;
  private readonly signDuration: Histogram<'outcome'>;
  private readonly httpDuration: Histogram<'method' | 'route' | 'status'>;
  private readonly keyStoreErrors: Counter<'fault'>;
  private readonly storeErrors: Counter<'fault'>;
  private readonly deliveryAttempts: Counter<'format' | 'outcome'>;
  private readonly logIntegrityFailures: Counter;
  private readonly prunedRows: Counter<'table'>;
  /** tenant -> outcome -> algorithm -> counter child. */
  private readonly signatureChildren = new Map<string, Map<string, Map<string, Counter.Internal>>>();
  private readonly signDurationChildren = new Map<string, Histogram.Internal<'outcome'>>();
  /** route -> method -> status -> histogram child. */
  private readonly httpChildren = new Map<string, Map<string, Map<number, Histogram.Internal<string>>>>();

  /** `storeGauges: false`: the store's gauges are another process's to report (storeGauges below). */
  constructor(sources: { store: Store; keyStore: KeyStore | KeyStores; storeGauges?: boolean }) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'signbridge_' });
    this.signatures = new Counter({
      name: 'signbridge_signatures_total',
      help: 'Signing requests by outcome (signed, denied, pending = waiting for approval, failed), algorithm, tenant',
      labelNames: ['outcome', 'algorithm', 'tenant'],
      registers,
    });
    this.signDuration = new Histogram({
      name: 'signbridge_sign_duration_seconds',
      help: 'Time from the policy decision to the outcome of a signing request (policy, key store, audit commit)',
      labelNames: ['outcome'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.httpDuration = new Histogram({
      name: 'signbridge_http_request_duration_seconds',
      help: 'HTTP requests by method, route (the pattern, not the URL) and status',
      labelNames: ['method', 'route', 'status'],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    this.keyStoreErrors = new Counter({
      name: 'signbridge_key_store_errors_total',
      help: 'Requests answered key_store_unavailable, by the PKCS#11 fault behind them',
      labelNames: ['fault'],
      registers,
    });
    this.storeErrors = new Counter({
      name: 'signbridge_store_errors_total',
      help: 'Requests answered store_unavailable, by the SQLite error behind them',
      labelNames: ['fault'],
      registers,
    });
    this.deliveryAttempts = new Counter({
      name: 'signbridge_event_delivery_attempts_total',
      help: 'Event delivery attempts by subscription format and outcome (delivered, retry, gone, failed)',
      labelNames: ['format', 'outcome'],
      registers,
    });
    const faults = () => sources.keyStore.faults;
    new Counter({
      name: 'signbridge_key_store_faults_total',
      help: 'Token faults the key store saw (lost sessions, login or handles; device errors)',
      registers,
      collect() {
        this.reset();
        this.inc(faults()?.seen ?? 0);
      },
    });
    new Counter({
      name: 'signbridge_key_store_recoveries_total',
      help: 'Times the key store re-opened its sessions and logged in again after a token fault',
      registers,
      collect() {
        this.reset();
        this.inc(faults()?.recovered ?? 0);
      },
    });
    this.prunedRows = new Counter({
      name: 'signbridge_pruned_rows_total',
      help: 'Rows the pruner deleted (docs/deployment.md, Retention), by table',
      labelNames: ['table'],
      registers,
    });
    this.logIntegrityFailures = new Counter({
      name: 'signbridge_log_integrity_failures_total',
      help: 'Times the transparency log refused to extend or sign its tree (a rewritten or damaged audit log)',
      registers,
    });
    if (sources.storeGauges !== false) storeGauges(sources.store, registers);
  }

  /** The transparency log refused to extend or sign its tree. */
  logIntegrityFailure(): void {
    this.logIntegrityFailures.inc();
  }

  signOutcome(outcome: SignOutcome, algorithm: string, tenantId: string, seconds: number): void {
    let byOutcome = this.signatureChildren.get(tenantId);
    if (!byOutcome) {
      byOutcome = new Map();
      this.signatureChildren.set(tenantId, byOutcome);
    }
    let byAlgorithm = byOutcome.get(outcome);
    if (!byAlgorithm) {
      byAlgorithm = new Map();
      byOutcome.set(outcome, byAlgorithm);
    }
    let counter = byAlgorithm.get(algorithm);
    if (!counter) {
      counter = this.signatures.labels(outcome, algorithm, tenantId);
      byAlgorithm.set(algorithm, counter);
    }
    counter.inc();
    let duration = this.signDurationChildren.get(outcome);
    if (!duration) {
      duration = this.signDuration.labels(outcome);
      this.signDurationChildren.set(outcome, duration);
    }
    duration.observe(seconds);
  }

  httpRequest(method: string, route: string, status: number, seconds: number): void {
    let byMethod = this.httpChildren.get(route);
    if (!byMethod) {
      byMethod = new Map();
      this.httpChildren.set(route, byMethod);
    }
    let byStatus = byMethod.get(method);
    if (!byStatus) {
      byStatus = new Map();
      byMethod.set(method, byStatus);
    }
    let histogram = byStatus.get(status);
    if (!histogram) {
      histogram = this.httpDuration.labels(method, route, String(status));
      byStatus.set(status, histogram);
    }
    histogram.observe(seconds);
  }

  /** One delivery attempt's outcome (the event dispatcher's onOutcome). */
  eventDelivery(format: string, outcome: string): void {
    this.deliveryAttempts.labels(format, outcome).inc();
  }

  /** What one pruning pass deleted (src/retention/pruner.ts). */
  pruned(counts: { deliveries: number; events: number; requests: number; idempotencyKeys: number }): void {
    this.prunedRows.labels('event_deliveries').inc(counts.deliveries);
    this.prunedRows.labels('event_outbox').inc(counts.events);
    this.prunedRows.labels('pending_requests').inc(counts.requests);
    this.prunedRows.labels('sign_idempotency').inc(counts.idempotencyKeys);
  }

  keyStoreUnavailable(fault: string): void {
    this.keyStoreErrors.labels(fault).inc();
  }

  storeUnavailable(fault: string): void {
    this.storeErrors.labels(fault).inc();
  }
}

/**
 * What the store holds, read on scrape: deliveries still to make, paused subscriptions, pending approvals, the log's
 * and the audit chain's lengths. Once per instance: a request worker leaves them to its primary (src/workers/).
 */
function storeGauges(store: Store, registers: Registry[]): void {
  new Gauge({
    name: 'signbridge_event_deliveries_pending',
    help: 'Event deliveries still to make (due, waiting for a retry, or kept by a paused subscription)',
    registers,
    async collect() {
      this.set(await store.events.countPendingDeliveries());
    },
  });
  new Gauge({
    name: 'signbridge_webhook_subscriptions_paused',
    help: 'Event subscriptions paused after failing (410 Gone, 24 h of failures, or too many failures in a row)',
    registers,
    async collect() {
      this.set((await store.events.listSubscriptions()).filter((s) => s.pausedAt !== null).length);
    },
  });
  new Gauge({
    name: 'signbridge_pending_approvals',
    help: 'Signing requests waiting for an approval or a security review',
    registers,
    async collect() {
      this.set((await store.stats()).pendingApprovals);
    },
  });
  new Gauge({
    name: 'signbridge_log_tree_size',
    help: 'Entries in the transparency log tree (integrated audit entries)',
    registers,
    async collect() {
      this.set((await store.log.state()).treeSize);
    },
  });
  new Gauge({
    name: 'signbridge_log_checkpoint_age_seconds',
    help: 'Seconds since the latest checkpoint of the transparency log was signed (absent: none yet)',
    registers,
    async collect() {
      const latest = await store.log.latestCheckpoint();
      if (latest) this.set((Date.now() - Date.parse(latest.createdAt)) / 1000);
    },
  });
  new Gauge({
    name: 'signbridge_audit_chain_length',
    help: 'Entries in the hash-chained audit log',
    registers,
    async collect() {
      this.set((await store.stats()).auditEntries);
    },
  });
}
