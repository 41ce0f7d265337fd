// PostgreSQL advisory-lock keys, shared by the stores that coordinate instances (postgres-store.ts, log-store.ts).
import { createHash } from 'node:crypto';

/**
 * A stable 64-bit advisory-lock key from a name (first 8 bytes of its SHA-256): the same in every instance and every
 * release, unlike hashtext(), an undocumented internal function.
 */
export function advisoryLockKey(name: string): bigint {
  return createHash('sha256').update(name).digest().readBigInt64BE(0);
}
