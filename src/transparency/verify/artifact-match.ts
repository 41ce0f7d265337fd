// What ties a proved entry to the user's artifact: the entry must be the tenant's, record a signature (outcome
// "signed"), and name the digest that was signed (details.hash) or the signature's SHA-256
// (details.signature_sha256). The inclusion proof says the entry is in the log; only these checks say the entry is
// about this artifact, whatever the service answered to the look-up. A signature of a batch is an item of its
// batch's entry: the item, verified against the entry's root, names the digest and the signature instead.
import type { VerifiedBatchItem } from './batch-item.js';
import type { LogEntry } from './entry.js';
import { InclusionError } from './inclusion-bundle.js';
import { strictBase64 } from './note.js';

export interface ArtifactExpectation {
  tenant?: string;
  /** The signed digest, base64 (as `sign` sent it). */
  digest?: string;
  /** SHA-256 of the signature, hex, in each form it may be logged in (the file's bytes; raw ECDSA r‖s as DER). */
  signatureSha256s?: readonly string[];
}

export function checkEntryFor(entry: LogEntry, expected: ArtifactExpectation, item?: VerifiedBatchItem): void {
  if (expected.tenant !== undefined && entry.tenantId !== expected.tenant) {
    throw new InclusionError(`the entry is tenant ${entry.tenantId ?? '(none)'}'s, not ${expected.tenant}'s`);
  }
  if (expected.digest === undefined && expected.signatureSha256s === undefined) return;
  if (entry.outcome !== 'signed') {
    throw new InclusionError(`the entry records ${entry.action} → ${entry.outcome}, not a signature`);
  }
  if (item !== undefined) {
    checkItemFor(item, expected);
    return;
  }
  if (expected.digest !== undefined) {
    const want = strictBase64(expected.digest);
    const got = typeof entry.details.hash === 'string' ? strictBase64(entry.details.hash) : undefined;
    if (want === undefined) throw new InclusionError('--digest is not standard base64');
    if (got === undefined || !got.equals(want)) {
      throw new InclusionError(
        `the entry's digest (details.hash ${String(entry.details.hash)}) is not ${expected.digest}`,
      );
    }
  }
  if (expected.signatureSha256s !== undefined) {
    const got = entry.details.signature_sha256;
    if (typeof got !== 'string') {
      throw new InclusionError(
        'the entry does not name its signature (no details.signature_sha256: it was written before the signature, as the in-process daemon does); prove it with --digest instead',
      );
    }
    if (!expected.signatureSha256s.some((want) => want.toLowerCase() === got.toLowerCase())) {
      throw new InclusionError(
        `the entry names signature ${got}, not this file's SHA-256 ${expected.signatureSha256s.join(' (or as DER ')}${expected.signatureSha256s.length > 1 ? ')' : ''}`,
      );
    }
  }
}

/** A batch item's digest and signature hash against what the user has. */
function checkItemFor(item: VerifiedBatchItem, expected: ArtifactExpectation): void {
  if (expected.digest !== undefined) {
    const want = strictBase64(expected.digest);
    if (want === undefined) throw new InclusionError('--digest is not standard base64');
    if (!item.digest.equals(want)) {
      throw new InclusionError(`the batch item's digest (${item.digest.toString('base64')}) is not ${expected.digest}`);
    }
  }
  if (expected.signatureSha256s !== undefined) {
    const got = item.signatureSha256.toString('hex');
    if (!expected.signatureSha256s.some((want) => want.toLowerCase() === got)) {
      throw new InclusionError(
        `the batch item names signature ${got}, not this file's SHA-256 ${expected.signatureSha256s.join(' (or as DER ')}${expected.signatureSha256s.length > 1 ? ')' : ''}`,
      );
    }
  }
}
