// Which log entry a verifier asks for: by its index, by the signature it got (SHA-256 of the raw signature bytes,
// hex) or by the artifact digest it had signed (base64). The /log/* routes call resolveLogIndex; the index of an
// entry is its audit seq - 1, the value of the Signbridge-Log-Index header on the signing response.
import { decodeBase64Field } from '../crypto/encoding.js';
import { ApiError } from '../errors.js';
import type { Store } from '../store/store.js';

export interface LogEntryQuery {
  index?: number;
  /** SHA-256 of the raw signature bytes (the decoded `signature` of the signing response), 64 hex characters. */
  signature_sha256?: string;
  /** The digest that was signed, base64 (standard or URL-safe, padded or not): 32, 48 or 64 bytes. */
  digest?: string;
}

const SHA256_HEX = /^[0-9a-fA-F]{64}$/;
const DIGEST_LENGTHS = [32, 48, 64];

/**
 * The index of the entry `query` names, within `tenantId`'s signatures: the index itself (the caller checks it
 * against the tree size), or the tenant's latest `signed` entry for the signature or the digest; undefined when
 * the tenant has none. Exactly one of the three must be given; anything malformed is 400 invalid_request.
 * Another tenant's signature or digest is not found (undefined), so a lookup says nothing about other tenants.
 */
export async function resolveLogIndex(
  store: Pick<Store, 'audit'>,
  tenantId: string,
  query: LogEntryQuery,
): Promise<number | undefined> {
  const given = (['index', 'signature_sha256', 'digest'] as const).filter((k) => query[k] !== undefined);
  if (given.length !== 1) {
    throw new ApiError(
      'invalid_request',
      `name the entry with exactly one of index, signature_sha256 or digest${given.length > 1 ? ` (got ${given.join(', ')})` : ''}`,
    );
  }
  if (query.index !== undefined) {
    const index = query.index;
    if (typeof index !== 'number' || !Number.isSafeInteger(index) || index < 0) {
      throw new ApiError('invalid_request', 'index must be a whole number, 0 or more');
    }
    return index;
  }
  if (query.signature_sha256 !== undefined) {
    const hex = query.signature_sha256;
    if (typeof hex !== 'string' || !SHA256_HEX.test(hex)) {
      throw new ApiError(
        'invalid_request',
        'signature_sha256 must be the SHA-256 of the raw signature bytes: 64 hexadecimal characters',
      );
    }
    return indexOf(await store.audit.seqOfSignature(tenantId, Buffer.from(hex, 'hex')));
  }
  const digest = digestOf(query.digest);
  // Signature records and audit entries hold the digest in standard base64, padded.
  return indexOf(await store.audit.seqOfDigest(tenantId, digest.toString('base64')));
}

function digestOf(value: unknown): Buffer {
  if (typeof value !== 'string') throw new ApiError('invalid_request', 'digest must be a base64 string');
  let bytes: Buffer;
  try {
    bytes = decodeBase64Field('digest', value);
  } catch (err) {
    // decodeBase64Field's code names the signing requests' hash field; here it is a query parameter.
    if (err instanceof ApiError) throw new ApiError('invalid_request', err.message);
    throw err;
  }
  if (!DIGEST_LENGTHS.includes(bytes.length)) {
    throw new ApiError(
      'invalid_request',
      `digest must be a 32-, 48- or 64-byte digest in base64; it decodes to ${bytes.length} bytes`,
    );
  }
  return bytes;
}

function indexOf(seq: number | undefined): number | undefined {
  return seq === undefined ? undefined : seq - 1;
}
