// How KMS opens EncryptedKeyMaterial (NOTES-NEXT-FEATURES §1.3): RSAES_OAEP_SHA_1/256 encrypt the PKCS#8 DER
// directly; RSA_AES_KEY_WRAP_SHA_1/256 are CKM_RSA_AES_KEY_WRAP: OAEP(K) || AES-KWP(K, PKCS#8 DER), the RSA block
// first (as long as the wrapping key's modulus), K a 256-bit AES key, KWP = RFC 5649 with its default AIV.
import { constants, createDecipheriv, type KeyObject, privateDecrypt } from 'node:crypto';

export const KMS_WRAPPING_ALGORITHMS = [
  'RSAES_OAEP_SHA_1',
  'RSAES_OAEP_SHA_256',
  'RSA_AES_KEY_WRAP_SHA_1',
  'RSA_AES_KEY_WRAP_SHA_256',
] as const;

/** The PKCS#8 DER inside, or undefined when the blob does not open (KMS: InvalidCiphertextException). */
export function unwrapKeyMaterial(algorithm: string, wrappingKey: KeyObject, blob: Buffer): Buffer | undefined {
  const oaepHash = algorithm.endsWith('SHA_256') ? 'sha256' : 'sha1';
  const oaep = (data: Buffer) =>
    privateDecrypt({ key: wrappingKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash }, data);
  try {
    if (algorithm.startsWith('RSAES_OAEP')) return oaep(blob);
    const rsaBytes = (wrappingKey.asymmetricKeyDetails?.modulusLength as number) / 8;
    const aesKey = oaep(blob.subarray(0, rsaBytes));
    if (aesKey.length !== 32) return undefined;
    const kwp = createDecipheriv('id-aes256-wrap-pad', aesKey, Buffer.from('A65959A6', 'hex'));
    return Buffer.concat([kwp.update(blob.subarray(rsaBytes)), kwp.final()]);
  } catch {
    return undefined;
  }
}
