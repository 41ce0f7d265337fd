// Sealing for the software key store (the Sealer half of the PKCS#11 key store): AES-256-GCM under an AES key
// that the token makes and keeps, sensitive and never extractable.
import * as graphene from 'graphene-pk11';
import pkcs11js from 'pkcs11js';
import { ApiError } from '../../errors.js';
import { tokenFault } from './pkcs11-faults.js';
import { sessionAnswers } from './token.js';

/** The token's AES key that seals the software key store's private keys (never a key ref: no key ref has no '='). */
export const SEALING_KEY_LABEL = 'signbridge-sealing-key';

function gcm(iv: Buffer, aad: Buffer): pkcs11js.Mechanism {
  return {
    mechanism: pkcs11js.CKM_AES_GCM,
    parameter: { type: pkcs11js.CK_PARAMS_AES_GCM, iv, aad, ivBits: 96, tagBits: 128 } as pkcs11js.AesGCM,
  };
}

/** The sealing key on the token; made when there is none and `create`, else key_not_found. */
export function findOrCreateSealingKey(session: graphene.Session, create: boolean): Buffer {
  const found = session.find({ class: graphene.ObjectClass.SECRET_KEY, label: SEALING_KEY_LABEL });
  if (found.length > 0) return found.items(0).handle;
  if (!create) throw new ApiError('key_not_found', 'the token holds no sealing key for the software key store');
  return session.generateKey(graphene.KeyGenMechanism.AES, {
    class: graphene.ObjectClass.SECRET_KEY,
    keyType: graphene.KeyType.AES,
    token: true,
    private: true,
    sensitive: true,
    extractable: false,
    encrypt: true,
    decrypt: true,
    label: SEALING_KEY_LABEL,
    valueLen: 32,
  }).handle;
}

/** Ciphertext || 16-byte tag of `plaintext` under `key`, with `iv` (12 bytes) and `aad`. */
export function gcmEncrypt(session: graphene.Session, key: Buffer, iv: Buffer, aad: Buffer, plaintext: Buffer): Buffer {
  const lib = session.lib;
  lib.C_EncryptInit(session.handle, gcm(iv, aad), key);
  return lib.C_Encrypt(session.handle, plaintext, Buffer.alloc(plaintext.length + 16));
}

/** Opens what gcmEncrypt made; throws when `body` or `aad` was altered (GCM tag). */
export function gcmDecrypt(session: graphene.Session, key: Buffer, iv: Buffer, aad: Buffer, body: Buffer): Buffer {
  const lib = session.lib;
  lib.C_DecryptInit(session.handle, gcm(iv, aad), key);
  try {
    return lib.C_Decrypt(session.handle, body, Buffer.alloc(body.length));
  } catch (err) {
    // SoftHSM answers a GCM tag mismatch with CKR_GENERAL_ERROR, which otherwise means a token fault (re-open,
    // 503): a session that still answers says it was the blob (an altered import token, say).
    if (tokenFault(err) && sessionAnswers(session)) throw new Error('the sealed blob or its aad was altered');
    throw err;
  }
}
