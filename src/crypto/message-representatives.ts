// What a caller signs for the two key types whose `hash` is not a plain digest of the file (docs/keys.md):
// ML-DSA's μ (FIPS 204, what KMS calls EXTERNAL_MU) and SM2's e = SM3(Z_A || M) with KMS's distinguishing ID.
import { createHash } from 'node:crypto';
import { shake256 } from '@noble/hashes/sha3.js';
import { ML_DSA_MU_BYTES, SM2_DISTINGUISHING_ID } from './algorithms.js';

/**
 * μ = SHAKE256(SHAKE256(pk, 64) || 0x00 || 0x00 || M, 64): pure ML-DSA with an empty context (FIPS 204 Algorithm 2,
 * then 7 line 6). `chunks` lets a large file stream through.
 */
export function mlDsaMu(publicKey: Uint8Array, chunks: Iterable<Uint8Array>): Buffer {
  const h = shake256.create({ dkLen: ML_DSA_MU_BYTES });
  h.update(shake256(publicKey, { dkLen: 64 }));
  h.update(new Uint8Array([0, 0]));
  for (const chunk of chunks) h.update(chunk);
  return Buffer.from(h.digest());
}

/** The SM2 curve's a, b and base point (GB/T 32918.5), as Z_A hashes them. */
const SM2_CURVE = Buffer.from(
  'FFFFFFFEFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF00000000FFFFFFFFFFFFFFFC' +
    '28E9FA9E9D9F5E344D5A9E4BCF6509A7F39789F515AB8F92DDBCBD414D940E93' +
    '32C4AE2C1F1981195F9904466A39C9948FE30BBFF2660BE1715A4589334C74C7' +
    'BC3736A2F4F6779C59BDCEE36B692153D0A9877CC62A474002DF32E52139F0A0',
  'hex',
);

/** Z_A = SM3(ENTL || ID || a || b || xG || yG || xA || yA); `point` is the public key 04 || x || y. */
export function sm2Za(point: Buffer, id = SM2_DISTINGUISHING_ID): Buffer {
  if (point.length !== 65 || point[0] !== 4) throw new Error('an SM2 public key is the 65-byte point 04 || x || y');
  const entl = Buffer.alloc(2);
  entl.writeUInt16BE(Buffer.byteLength(id) * 8);
  return createHash('sm3').update(entl).update(id).update(SM2_CURVE).update(point.subarray(1)).digest();
}

/** e = SM3(Z_A || M), the 32 bytes an SM2 `sign` takes (KMS MessageType DIGEST). */
export function sm2Digest(point: Buffer, chunks: Iterable<Uint8Array>): Buffer {
  const h = createHash('sm3').update(sm2Za(point));
  for (const chunk of chunks) h.update(chunk);
  return h.digest();
}
