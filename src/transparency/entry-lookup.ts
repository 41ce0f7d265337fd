// Which log entry a verifier asks for: by its index, by the signature it got (SHA-256 of the raw signature bytes,
// hex) or by the artifact digest it had signed (base64). The /log/* routes call resolveLogEntry; the index of an
// entry is its audit seq - 1, the value of the Signbridge-Log-Index header on the signing response. A signature of
// a batch (issue 46) is an item of its batch's entry: the lookup names the entry and the item's index in the batch.
import { decodeBase64Field } from '../crypto/encoding.js';
import { ApiError } from '../errors.js';
import type { Store } from '../store/store.js';

export interface LogEntryQuery {
  index?: number;
  /** With `index`: the item of a batch entry, by its index in the sign_batch request. */
  item?: number;
  /** SHA-256 of the raw signature bytes (the decoded `signature` of the signing response), 64 hex characters. */
  signature_sha256?: string;
  /** The digest that was signed, base64 (standard or URL-safe, padded or not): 32, 48 or 64 bytes. */
  digest?: string;
}

const SHA256_HEX = /^[0-9a-fA-F]{64}$/;
const DIGEST_LENGTHS = [32, 48, 64];

/** An entry of the log, and for a signature of a batch, its item (its index in the batch's request). */
export interface LogEntryRef {
  index: number;
  item?: number;
}

/**
 * The entry `query` names, within `tenantId`'s signatures: the index itself (the caller checks it against the tree
 * size) with the item asked for, or the tenant's latest `signed` entry for the signature (a signature of a batch:
 * its batch entry and item) or the digest (signatures signed one by one, and batches signed before issue 46, whose
 * entries name their digest); undefined when the tenant has none. Exactly one of the three must be given; anything
 * malformed is 400 invalid_request. Another tenant's signature or digest is not found (undefined), so a lookup says
 * nothing about other tenants.
 */
export async function resolveLogEntry(
  store: Pick<Store, 'audit' | 'signatures'>,
  tenantId: string,
  query: LogEntryQuery,
): Promise<LogEntryRef | undefined> {
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
    const item = query.item;
    if (item === undefined) return { index };
    if (typeof item !== 'number' || !Number.isSafeInteger(item) || item < 0) {
      throw new ApiError('invalid_request', 'item must be a whole number, 0 or more');
    }
    return { index, item };
  }
  if (query.item !== undefined) throw new ApiError('invalid_request', 'item goes with index: the batch entry');
  if (query.signature_sha256 !== undefined) {
    const hex = query.signature_sha256;
    if (typeof hex !== 'string' || !SHA256_HEX.test(hex)) {
      throw new ApiError(
        'invalid_request',
        'signature_sha256 must be the SHA-256 of the raw signature bytes: 64 hexadecimal characters',
      );
    }
    const sha256 = Buffer.from(hex, 'hex');
    // A signature signed alone (or in a batch before issue 46) has its own entry; one of a batch is an item.
    const [alone, inBatch] = await Promise.all([
      store.audit.seqOfSignature(tenantId, sha256),
      store.signatures.batchItemOfSignature(tenantId, sha256),
    ]);
    // Both (the same bytes signed alone and in a batch: RSA PKCS#1 v1.5 is deterministic): the later entry.
    if (inBatch !== undefined && (alone === undefined || inBatch.seq > alone)) {
      return { index: inBatch.seq - 1, item: inBatch.index };
    }
    return refOf(alone);
  }
  const digest = digestOf(query.digest);
  // Signature records and audit entries hold the digest in standard base64, padded.
  return refOf(await store.audit.seqOfDigest(tenantId, digest.toString('base64')));
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

function refOf(seq: number | undefined): LogEntryRef | undefined {
  return seq === undefined ? undefined : { index: seq - 1 };
}
