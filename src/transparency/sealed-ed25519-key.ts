// The log's Ed25519 key (docs/transparency.md): a software key whose private half exists only sealed by the key
// stores' sealer (an AES key that never leaves the PKCS#11 token), as the software key store keeps ML-DSA and SM2
// keys. The key stores hold no Ed25519 spec of their own for the log to use, and a checkpoint is one signature a
// second or less, so the key is unsealed for each signature and dropped. The sealed blob is the key reference: its
// row in log_keys (role `ed25519`) holds everything. The aad binds it to its purpose and the log's origin, so a blob
// copied into another row or another log does not open.
import { createPrivateKey, generateKeyPairSync, sign } from 'node:crypto';
import type { Sealer } from '../keys/sealer.js';

const KEY_REF_PREFIX = 'sealed-ed25519:v1:';

/** What log_keys.key_spec says of it (AWS KMS's name for the spec). */
export const ED25519_LOG_KEY_SPEC = 'ECC_NIST_EDWARDS25519';

function aad(origin: string): Buffer {
  return Buffer.from(`signbridge transparency log Ed25519 key\n${origin}`, 'utf8');
}

export interface SealedEd25519Key {
  keyRef: string;
  publicKeyPem: string;
}

/** A new key for the log of `origin`, its private half sealed. */
export async function createSealedEd25519Key(sealer: Sealer, origin: string): Promise<SealedEd25519Key> {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const pkcs8 = privateKey.export({ format: 'der', type: 'pkcs8' });
  try {
    const sealed = await sealer.seal(pkcs8, aad(origin));
    return {
      keyRef: `${KEY_REF_PREFIX}${sealed.toString('base64')}`,
      publicKeyPem: publicKey.export({ format: 'pem', type: 'spki' }).toString(),
    };
  } finally {
    pkcs8.fill(0);
  }
}

/** Ed25519 (pure, RFC 8032) over `message` with the sealed key; throws when the blob does not open. */
export async function signWithSealedEd25519Key(
  sealer: Sealer,
  keyRef: string,
  origin: string,
  message: Buffer,
): Promise<Buffer> {
  if (!keyRef.startsWith(KEY_REF_PREFIX)) throw new Error('not a sealed Ed25519 log key reference');
  const pkcs8 = await sealer.unseal(Buffer.from(keyRef.slice(KEY_REF_PREFIX.length), 'base64'), aad(origin));
  try {
    return sign(null, message, createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' }));
  } finally {
    pkcs8.fill(0);
  }
}
