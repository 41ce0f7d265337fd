// Hooks that feed ServiceMetrics from the HTTP app: request latency by route, and the 503s that say a store or the
// key store cannot serve (by the fault behind them).
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../errors.js';
import type { ServiceMetrics } from '../metrics/service-metrics.js';
import { storeFault } from '../store/store-errors.js';

export function instrumentApp(app: FastifyInstance, metrics: ServiceMetrics): void {
  app.addHook('onResponse', (request, reply, done) => {
    // The route's pattern (/v1/:action), never the raw URL: unknown paths all count as one series.
    const route = request.routeOptions.url ?? 'unmatched';
    metrics.httpRequest(request.method, route, reply.statusCode, reply.elapsedTime / 1000);
    done();
  });
  app.addHook('onError', (_request, _reply, err, done) => {
    const stored = storeFault(err);
    if (stored) metrics.storeUnavailable(stored);
    else if (err instanceof ApiError && err.code === 'store_unavailable') metrics.storeUnavailable(faultIn(err));
    else if (err instanceof ApiError && err.code === 'key_store_unavailable') metrics.keyStoreUnavailable(faultIn(err));
    done();
  });
}

/** The CKR_ / SQLITE_ name an unavailable error carries in its reason (pkcs11-faults.ts, store-errors.ts). */
function faultIn(err: Error): string {
  return /\b(CKR|SQLITE)_[A-Z_]+/.exec(err.message)?.[0] ?? 'other';
}
