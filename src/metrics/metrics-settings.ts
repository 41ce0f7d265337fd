// Where Prometheus /metrics is served (the config file's `metrics`, SIGNBRIDGE_METRICS_LISTEN; docs/configuration.md).
import { type Static, Type } from '@sinclair/typebox';
import { parseListen } from '../net/listen-address.js';

/** The environment variables the metrics settings read. */
export const METRICS_ENV = ['SIGNBRIDGE_METRICS_LISTEN'] as const;

/** Prometheus /metrics on a listener of its own (docs/configuration.md); off unless enabled. */
export const MetricsConfigSchema = Type.Object(
  { enabled: Type.Optional(Type.Boolean()), listen: Type.Optional(Type.String({ minLength: 1 })) },
  { additionalProperties: false },
);
export type MetricsConfigFile = Static<typeof MetricsConfigSchema>;

/** The default /metrics address: loopback, the port Prometheus exporters of this kind commonly use. */
export const DEFAULT_METRICS_LISTEN = '127.0.0.1:9464';

/**
 * SIGNBRIDGE_METRICS_LISTEN (HOST:PORT, or "off") wins over the file's `metrics` block; without either, /metrics is
 * not served: it needs no API key, so an operator chooses where it listens.
 */
export function metricsSetting(
  env: NodeJS.ProcessEnv,
  file: MetricsConfigFile | undefined,
): { metrics?: { host: string; port: number } } {
  const envListen = env.SIGNBRIDGE_METRICS_LISTEN;
  if (envListen !== undefined && envListen !== '') {
    return envListen === 'off' ? {} : { metrics: parseListen(envListen, 'SIGNBRIDGE_METRICS_LISTEN') };
  }
  if (!file || file.enabled === false || (file.enabled === undefined && file.listen === undefined)) return {};
  return { metrics: parseListen(file.listen ?? DEFAULT_METRICS_LISTEN, 'metrics.listen') };
}
