// C2SP tlog-cosignature (c2sp.org/tlog-cosignature): a witness's statement, as a signed-note line on a checkpoint,
// that it verified the checkpoint consistent with everything it saw of the log. Both kinds the spec defines:
// Ed25519 (vkey type 0x04; the message is "cosignature/v1", a time line and the checkpoint text) and ML-DSA-44
// (type 0x06; the message is the binary `subtree/v1` structure, which names the cosigner, the origin, the size and
// the root, and no extension lines). The signature is a timestamped_signature: a big-endian u64 POSIX time, then
// the signature. Verified with node:crypto (Ed25519) and @noble/post-quantum (ML-DSA-44, any Node version).
import { createHash, createPublicKey, verify } from 'node:crypto';
import { ml_dsa44 } from '@noble/post-quantum/ml-dsa.js';
import type { Checkpoint } from './checkpoint.js';
import { hex8, NoteError, parseSignedNote, strictBase64, validKeyName } from './note.js';

export const COSIGNATURE_ED25519 = 0x04;
export const COSIGNATURE_ML_DSA_44 = 0x06;

const KEY_BYTES = { [COSIGNATURE_ED25519]: 32, [COSIGNATURE_ML_DSA_44]: 1312 } as const;
const SIGNATURE_BYTES = { [COSIGNATURE_ED25519]: 64, [COSIGNATURE_ML_DSA_44]: 2420 } as const;
/** A cosignature dated later than this after the verifier's clock is refused (the spec allows refusing any). */
const FUTURE_SKEW_S = 600;

export type CosignatureType = typeof COSIGNATURE_ED25519 | typeof COSIGNATURE_ML_DSA_44;

export interface CosignerKey {
  name: string;
  keyId: number;
  type: CosignatureType;
  /** The raw public key (32 bytes Ed25519, 1312 bytes ML-DSA-44). */
  publicKey: Buffer;
  vkey: string;
}

export class CosignatureError extends Error {}

/** The key ID of a cosigner key: SHA-256(name || "\n" || type || key)[:4]. */
export function cosignerKeyId(name: string, type: CosignatureType, publicKey: Uint8Array): number {
  return createHash('sha256')
    .update(Buffer.concat([Buffer.from(`${name}\n`, 'utf8'), Buffer.from([type]), publicKey]))
    .digest()
    .readUInt32BE(0);
}

/** `<name>+<key ID>+<base64(0x04 ‖ Ed25519 key | 0x06 ‖ ML-DSA-44 key)>`, the key ID checked. */
export function parseCosignerKey(vkey: string): CosignerKey {
  const line = vkey.trim();
  const parts = /^([^+]+)\+([0-9a-fA-F]{8})\+(.+)$/.exec(line);
  if (!parts) throw new CosignatureError(`not a witness verifier key (<name>+<key ID>+<base64 key>): ${line}`);
  const [, name, idHex, encoded] = parts as unknown as [string, string, string, string];
  const bytes = strictBase64(encoded);
  if (!validKeyName(name)) throw new CosignatureError(`witness key name ${JSON.stringify(name)} is not a key name`);
  const type = bytes?.[0];
  if (bytes === undefined || (type !== COSIGNATURE_ED25519 && type !== COSIGNATURE_ML_DSA_44)) {
    throw new CosignatureError(`witness key ${name}: not a cosignature key of type 0x04 (Ed25519) or 0x06 (ML-DSA-44)`);
  }
  const publicKey = bytes.subarray(1);
  if (publicKey.length !== KEY_BYTES[type]) {
    throw new CosignatureError(`witness key ${name}: ${publicKey.length} key bytes, not ${KEY_BYTES[type]}`);
  }
  const keyId = cosignerKeyId(name, type, publicKey);
  if (keyId !== Number.parseInt(idHex, 16)) {
    throw new CosignatureError(`witness key ${name}: key ID ${idHex} does not match its key (${hex8(keyId)})`);
  }
  return { name, keyId, type, publicKey, vkey: line };
}

/** What a cosigner signs for `checkpoint` at `timestamp` (the spec's two messages). */
export function cosignedMessage(
  key: Pick<CosignerKey, 'name' | 'type'>,
  checkpoint: Checkpoint,
  timestamp: bigint,
): Buffer {
  if (key.type === COSIGNATURE_ED25519) {
    return Buffer.from(`cosignature/v1\ntime ${timestamp}\n${checkpoint.text}`, 'utf8');
  }
  const name = Buffer.from(key.name, 'utf8');
  const origin = Buffer.from(checkpoint.origin, 'utf8');
  if (name.length > 255 || origin.length > 255) throw new CosignatureError('a name or origin longer than 255 bytes');
  const u64 = (v: bigint) => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64BE(v);
    return b;
  };
  return Buffer.concat([
    Buffer.from('subtree/v1\n\0', 'latin1'),
    Buffer.from([name.length]),
    name,
    u64(timestamp),
    Buffer.from([origin.length]),
    origin,
    u64(0n),
    u64(BigInt(checkpoint.size)),
    checkpoint.root,
  ]);
}

function verifies(key: CosignerKey, message: Buffer, signature: Buffer): boolean {
  try {
    if (key.type === COSIGNATURE_ML_DSA_44) return ml_dsa44.verify(signature, message, key.publicKey);
    const publicKey = createPublicKey({
      key: { kty: 'OKP', crv: 'Ed25519', x: key.publicKey.toString('base64url') },
      format: 'jwk',
    });
    return verify(null, message, publicKey, signature);
  } catch {
    return false;
  }
}

/**
 * The time (POSIX seconds) of `key`'s valid cosignature on the checkpoint `note` (already opened as `checkpoint`
 * with the log's key), or undefined when the note has no line of that key. A line of the key that does not verify
 * is an error, as for the log's own signature: a witness's name on a note it did not sign is a lie worth telling.
 */
export function cosignatureTime(
  note: string,
  checkpoint: Checkpoint,
  key: CosignerKey,
  now = new Date(),
): number | undefined {
  let lines: ReturnType<typeof parseSignedNote>['signatures'];
  try {
    lines = parseSignedNote(note).signatures.filter((s) => s.name === key.name && s.keyId === key.keyId);
  } catch (err) {
    if (err instanceof NoteError) throw new CosignatureError(err.message);
    throw err;
  }
  let time: number | undefined;
  for (const line of lines) {
    if (line.signature.length !== 8 + SIGNATURE_BYTES[key.type]) {
      throw new CosignatureError(
        `the cosignature of ${key.name} is ${line.signature.length} bytes, not a timestamped signature`,
      );
    }
    const timestamp = line.signature.readBigUInt64BE(0);
    if (timestamp > 2n ** 63n - 1n || Number(timestamp) > now.getTime() / 1000 + FUTURE_SKEW_S) {
      throw new CosignatureError(`the cosignature of ${key.name} is dated in the future (${timestamp})`);
    }
    if (!verifies(key, cosignedMessage(key, checkpoint, timestamp), line.signature.subarray(8))) {
      throw new CosignatureError(`the cosignature of ${key.name}+${hex8(key.keyId)} does not verify`);
    }
    time = Math.max(time ?? 0, Number(timestamp));
  }
  return time;
}
