// CKA_ID for a service key version. A UUID key id becomes its 16 raw bytes (so `pkcs11-tool -O` shows the
// service's key id in hex); any other id the first 16 bytes of its SHA-256. Short (libp11 breaks above ~100
// bytes) and stable: the same service key has the same CKA_ID on every host, and a rotation changes it.
import { createHash } from 'node:crypto';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export function ckaIdFor(serviceKeyId: string): Buffer {
  if (UUID.test(serviceKeyId)) return Buffer.from(serviceKeyId.replaceAll('-', ''), 'hex');
  return createHash('sha256').update(serviceKeyId, 'utf8').digest().subarray(0, 16);
}
