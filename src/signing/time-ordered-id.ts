// Ids for signature records, ordered by the time they were made.

import { randomUUID } from 'node:crypto';

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix time in ms, then random bits. Signature records get these so that each one
 * lands at the end of the id index instead of on a random page of it (random ids dirtied one more page per
 * signature in every group commit). The random part comes from randomUUID(), which Node draws from a pooled
 * buffer; the uuid package's v7() asks the OS-backed generator for 16 bytes per id, ~9 us on the event loop.
 */
export function timeOrderedId(ms: number): string {
  const time = ms.toString(16).padStart(12, '0');
  // randomUUID(): xxxxxxxx-xxxx-4xxx-Vxxx-xxxxxxxxxxxx; keep what follows the version digit (V is the variant).
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${randomUUID().slice(15)}`;
}
