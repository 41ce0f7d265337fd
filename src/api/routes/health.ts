// /healthz: the process answers (liveness; it never looks at the stores, so a restart is not asked for a fault
// that passes by itself). /readyz: the service can do its work now, so a load balancer sends requests elsewhere
// while it cannot: the store commits a real write (Store.probeWrite) and the key store can sign (KeyStore.ping,
// which also brings a token back that lost its sessions).
import type { FastifyInstance } from 'fastify';
import type { KeyStore, KeyStores } from '../../keys/key-store.js';
import type { Store } from '../../store/store.js';

/** The write probe runs at most this often; readiness checks in between get its last answer. */
const WRITE_PROBE_INTERVAL_MS = 1000;

export interface HealthOptions {
  store: Store;
  keyStore: KeyStore | KeyStores;
}

export async function healthRoutes(app: FastifyInstance, opts: HealthOptions): Promise<void> {
  const probe = cachedFor(WRITE_PROBE_INTERVAL_MS, () => opts.store.probeWrite());
  app.get('/healthz', { schema: { hide: true } }, async () => ({ status: 'ok' }));
  app.get('/readyz', { schema: { hide: true } }, async (request, reply) => {
    const checks = await Promise.allSettled([probe(), opts.keyStore.ping()]);
    const [store, keyStore] = checks.map((c) => (c.status === 'fulfilled' ? 'ok' : 'unavailable'));
    const ready = store === 'ok' && keyStore === 'ok';
    if (!ready) {
      const reasons = checks.map((c) => (c.status === 'rejected' ? String(c.reason?.message ?? c.reason) : 'ok'));
      request.log.warn({ store: reasons[0], keyStore: reasons[1] }, 'not ready');
    }
    return reply.code(ready ? 200 : 503).send({ status: ready ? 'ready' : 'not_ready', store, key_store: keyStore });
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
