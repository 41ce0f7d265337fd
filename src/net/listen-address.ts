// HOST:PORT as the listen settings take it (listen, metrics.listen and their environment variables).
import { ConfigError } from '../config-error.js';

export function parseListen(value: string, setting = 'listen'): { host: string; port: number } {
  const m = /^(\[[0-9a-fA-F:]+\]|[^:]+):(\d{1,5})$/.exec(value);
  const port = m ? Number(m[2]) : Number.NaN;
  if (!m || port > 65535) throw new ConfigError(`${setting} must be HOST:PORT (e.g. 127.0.0.1:8080), got "${value}"`);
  return { host: (m[1] as string).replace(/^\[|\]$/g, ''), port };
}
