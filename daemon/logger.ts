// pino to stderr (stdout stays clean for `status` and scripting). API keys never reach a log line: they live
// only in ApiKeySource and the Authorization header, and these paths are redacted as a second guard.
import pino, { type Logger } from 'pino';

export const DAEMON_REDACT_PATHS = ['apiKey', '*.apiKey', 'authorization', '*.authorization', 'headers.authorization'];

export function createDaemonLogger(level: string): Logger {
  return pino(
    { name: 'signbridge-daemon', level, redact: { paths: DAEMON_REDACT_PATHS, censor: '[redacted]' } },
    pino.destination({ fd: 2, sync: false }),
  );
}

export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
