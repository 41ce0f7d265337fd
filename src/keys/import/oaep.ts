// RSAES-OAEP decoding (RFC 8017 §7.1.2 steps 3a-3g) for the block the token decrypted with raw RSA (CKM_RSA_X_509):
// SoftHSM 2.6.1 does OAEP only with SHA-1, so the SHA-256 wrapping algorithms are decoded here (NOTES §1.5). One
// error for every failure, whatever step it was, so the answer does not help an attacker (Manger's attack).
import { createHash, timingSafeEqual } from 'node:crypto';

export type OaepHash = 'sha1' | 'sha256';
const H_LEN: Record<OaepHash, number> = { sha1: 20, sha256: 32 };

export class OaepDecodeError extends Error {
  constructor() {
    super('decryption error');
  }
}

function mgf1(hash: OaepHash, seed: Buffer, length: number): Buffer {
  const out = Buffer.alloc(length);
  const counter = Buffer.alloc(4);
  for (let done = 0, i = 0; done < length; i++) {
    counter.writeUInt32BE(i);
    const block = createHash(hash).update(seed).update(counter).digest();
    done += block.copy(out, done);
  }
  return out;
}

/** `em`: the raw RSA decryption, exactly the modulus size. Returns the message; zero it when done. */
export function oaepDecode(hash: OaepHash, em: Buffer, label = Buffer.alloc(0)): Buffer {
  const hLen = H_LEN[hash];
  const k = em.length;
  if (k < 2 * hLen + 2) throw new OaepDecodeError();
  const maskedSeed = em.subarray(1, 1 + hLen);
  const maskedDb = em.subarray(1 + hLen);
  const seed = mgf1(hash, maskedDb, hLen);
  for (let i = 0; i < hLen; i++) seed[i] = (seed[i] as number) ^ (maskedSeed[i] as number);
  const db = mgf1(hash, seed, k - hLen - 1);
  for (let i = 0; i < db.length; i++) db[i] = (db[i] as number) ^ (maskedDb[i] as number);
  seed.fill(0);
  const lHash = createHash(hash).update(label).digest();
  let bad = em[0] === 0 ? 0 : 1;
  bad |= timingSafeEqual(db.subarray(0, hLen), lHash) ? 0 : 1;
  // The first 0x01 after the zero padding; scanned to the end whatever is found.
  let separator = -1;
  for (let i = hLen; i < db.length; i++) {
    const byte = db[i] as number;
    if (separator < 0 && byte === 1) separator = i;
    else if (separator < 0 && byte !== 0) bad |= 1;
  }
  if (separator < 0) bad |= 1;
  if (bad) {
    db.fill(0);
    throw new OaepDecodeError();
  }
  const message = Buffer.from(db.subarray(separator + 1));
  db.fill(0);
  return message;
}
