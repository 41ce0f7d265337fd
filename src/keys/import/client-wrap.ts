// The client's half of key import, as an AWS KMS client does it (NOTES-NEXT-FEATURES §1.3-1.4): the PKCS#8 DER
// encrypted under the wrapping public key from get_import_params. Used by `signbridge key import`; all in Node,
// so no key ever sits on an openssl command line.
import { constants, createCipheriv, createPublicKey, publicEncrypt, randomBytes } from 'node:crypto';
import type { WrappingAlgorithm } from '../key-store.js';
import { isKeyWrap, oaepHashOf } from './import-rules.js';

const KWP_IV = Buffer.from('A65959A6', 'hex');

/** `wrappingPublicKey`: DER SubjectPublicKeyInfo (get_import_params public_key). */
export function wrapKeyMaterial(wrappingPublicKey: Buffer, algorithm: WrappingAlgorithm, pkcs8: Buffer): Buffer {
  const key = createPublicKey({ key: wrappingPublicKey, format: 'der', type: 'spki' });
  const oaep = (data: Buffer) =>
    publicEncrypt({ key, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: oaepHashOf(algorithm) }, data);
  if (!isKeyWrap(algorithm)) return oaep(pkcs8);
  const aes = randomBytes(32);
  try {
    const cipher = createCipheriv('id-aes256-wrap-pad', aes, KWP_IV);
    // RSA block first, then the AES key wrap (CKM_RSA_AES_KEY_WRAP's order).
    return Buffer.concat([oaep(aes), cipher.update(pkcs8), cipher.final()]);
  } finally {
    aes.fill(0);
  }
}
