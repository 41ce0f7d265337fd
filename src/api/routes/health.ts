// /healthz: the process answers (liveness; it never looks at the stores, so a restart is not asked for a fault
// that passes by itself). /readyz: the service can do its work now, so a load balancer sends requests elsewhere
// while it cannot: the store commits a real write (Store.probeWrite) and the key store can sign (KeyStore.ping,
// which also brings a token back that lost its sessions).
import type { FastifyInstance } from 'fastify';
import type { KeyStore, KeyStores } from '../../keys/key-store.js';
import type { Store } from '../../store/store.js';
import type { ClockTrust } from '../../tsa/clock-trust.js';

/** The write probe runs at most this often; readiness checks in between get its last answer. */
const WRITE_PROBE_INTERVAL_MS = 1000;

export interface HealthOptions {
  store: Store;
  keyStore: KeyStore | KeyStores;
  /** The TSA's clock check: time-stamping needs a trusted clock, so an untrusted one makes the service not ready. */
  clock?: ClockTrust;
  /** Whether any TSA identity exists: without one an untrusted clock stops nothing, so it is shown but not fatal. */
  tsaInUse?: () => Promise<boolean>;
}

export async function healthRoutes(app: FastifyInstance, opts: HealthOptions): Promise<void> {
  const probe = cachedFor(WRITE_PROBE_INTERVAL_MS, () => opts.store.probeWrite());
  app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { schema: { hide: true } }, async (request, reply) => {
    const checks = await Promise.allSettled([probe(), opts.keyStore.ping()]);
    const [store, keyStore] = checks.map((c) => (c.status === 'fulfilled' ? 'ok' : 'unavailable'));
    // Only while a TSA identity exists is time-stamping part of the service's job: then the clock counts (`none`
    // is trusted but says so: a TSA whose clock nobody checks is for tests and trials).
    const inUse = opts.clock !== undefined && ((await opts.tsaInUse?.().catch(() => true)) ?? true);
    const clock = inUse ? opts.clock?.verdict : undefined;
    const clockStatus =
      clock === undefined
        ? undefined
        : !clock.trusted
          ? 'unavailable'
          : opts.clock?.check === 'none'
            ? 'unchecked'
            : 'ok';
    const clockFatal = clockStatus === 'unavailable';
    const ready = store === 'ok' && keyStore === 'ok' && !clockFatal;
    if (!ready) {
      const reasons = checks.map((c) => (c.status === 'rejected' ? String(c.reason?.message ?? c.reason) : 'ok'));
      request.log.warn(
        { store: reasons[0], keyStore: reasons[1], ...(clock && !clock.trusted && { clock: clock.reason }) },
        'not ready',
      );
    }
    return reply.code(ready ? 200 : 503).send({
      status: ready ? 'ready' : 'not_ready',
      store,
      key_store: keyStore,
      ...(clock && {
        time_source: clockStatus,
        time_source_detail: clock.trusted ? clock.source : clock.reason,
      }),
    });
  });
}

/** `run`, started at most once per `ms`; callers meanwhile share the last (or the running) attempt's outcome. */
function cachedFor(ms: number, run: () => Promise<void>): () => Promise<void> {
  let last: { at: number; result: Promise<void> } | undefined;
  return () => {
    const now = Date.now();
    if (!last || now - last.at >= ms) {
      const result = run();
      result.catch(() => undefined); // read by the callers; a failure must not go unhandled
      last = { at: now, result };
    }
    return last.result;
  };
}
