// Key import into a PKCS#11 token (SoftHSM 2.6.1 by default), with the private key unwrapped inside the token
// wherever the token can do it (NOTES-NEXT-FEATURES §1.5, measured):
//   RSA_AES_KEY_WRAP_SHA_1    C_UnwrapKey(OAEP-SHA-1) -> AES session key -> C_UnwrapKey(CKM_AES_KEY_WRAP_PAD)
//   RSA_AES_KEY_WRAP_SHA_256  C_Decrypt(CKM_RSA_X_509) + OAEP-SHA-256 decoded here -> C_CreateObject(AES session key)
//                             -> C_UnwrapKey(CKM_AES_KEY_WRAP_PAD): the AES key is here for microseconds, the
//                             private key never
//   RSAES_OAEP_SHA_1          C_UnwrapKey(OAEP-SHA-1) straight to the private key
//   RSAES_OAEP_SHA_256        no in-token path (SoftHSM's OAEP is SHA-1 only, and its RSA-AES unwrap too): the
//                             EC key is decrypted here, put in the token with C_CreateObject and zeroed (docs/keys.md)
// The wrapping key pair is made in the token per get_import_params: the private half sensitive, never
// extractable, able only to decrypt/unwrap; the public half a session object, read once and gone.
// For the software key store (ML-DSA, SM2) the material must reach this process: unwrapToProcess.
import { createDecipheriv, createPublicKey, randomBytes } from 'node:crypto';
import * as graphene from 'graphene-pk11';
import pkcs11js from 'pkcs11js';
import { EC_CURVE_OID, EC_FIELD_BYTES, type KeySpec, keyInfo } from '../../crypto/algorithms.js';
import { encodeObjectIdentifier } from '../../crypto/object-identifier.js';
import { ApiError } from '../../errors.js';
import type { CreatedKey, WrappingAlgorithm, WrappingKeySpec } from '../key-store.js';
import type { Pkcs11KeyStore } from '../pkcs11/pkcs11-key-store.js';
import { recoverEcPublicKey } from './ec-public-key.js';
import { isKeyWrap, oaepHashOf } from './import-rules.js';
import { OaepDecodeError, oaepDecode } from './oaep.js';
import { ecPrivateScalar, identifyKeyMaterial, KeyMaterialError, publicKeyOf } from './pkcs8.js';

const KEY_REF_PREFIX = 'pkcs11:id=';
const WRAPPING_BITS: Record<WrappingKeySpec, number> = { RSA_2048: 2048, RSA_3072: 3072, RSA_4096: 4096 };
/** RFC 5649's alternative initial value, which every AWS-style client (openssl -iv A65959A6, Node) uses. */
const KWP_IV = Buffer.from('A65959A6', 'hex');

const CURVE_NAMES: Record<string, string> = {
  '06082a8648ce3d030107': 'ECC_NIST_P256',
  '06052b81040022': 'ECC_NIST_P384',
  '06052b81040023': 'ECC_NIST_P521',
  '06052b8104000a': 'ECC_SECG_P256K1',
  '06082a811ccf5501822d': 'SM2',
};

const OAEP_SHA1: pkcs11js.Mechanism = {
  mechanism: pkcs11js.CKM_RSA_PKCS_OAEP,
  parameter: {
    type: pkcs11js.CK_PARAMS_RSA_OAEP,
    hashAlg: pkcs11js.CKM_SHA_1,
    mgf: pkcs11js.CKG_MGF1_SHA1,
    source: 1, // CKZ_DATA_SPECIFIED, empty label
  } as pkcs11js.RsaOAEP,
};
const KWP: pkcs11js.Mechanism = { mechanism: pkcs11js.CKM_AES_KEY_WRAP_PAD };
const RAW_RSA: pkcs11js.Mechanism = { mechanism: pkcs11js.CKM_RSA_X_509 };

/** A CK_ULONG attribute value (8 bytes on 64-bit Linux). */
const ulong = (b: Buffer) => (b.length === 8 ? Number(b.readBigUInt64LE()) : b.readUIntLE(0, b.length));
const idOf = (keyRef: string) => Buffer.from(keyRef.slice(KEY_REF_PREFIX.length), 'hex');

/**
 * SoftHSM answers a ciphertext that does not decrypt with CKR_GENERAL_ERROR, which the key store otherwise takes
 * for a token fault (re-open, 503). A session that still answers says the token is fine: then it was the input.
 */
function sessionAlive(session: graphene.Session): boolean {
  try {
    session.lib.C_GetSessionInfo(session.handle);
    return true;
  } catch {
    return false;
  }
}

function invalidCiphertextOrFault(session: graphene.Session, err: unknown, why: string): Error {
  if (!sessionAlive(session)) return err instanceof Error ? err : new Error(String(err));
  return invalidCiphertext(why);
}

const invalidCiphertext = (why: string) =>
  new ApiError(
    'invalid_ciphertext',
    `encrypted_key_material does not decrypt under this import's wrapping key: ${why}`,
  );

export class Pkcs11Importer {
  constructor(private readonly token: Pkcs11KeyStore) {}

  /** A wrapping key pair in the token; returns its reference and the public half (DER SubjectPublicKeyInfo). */
  async makeWrappingKey(spec: WrappingKeySpec, label: string): Promise<{ keyRef: string; publicKey: Buffer }> {
    const id = randomBytes(16);
    return this.token.inSession(async (session) => {
      const pair = await new Promise<graphene.IKeyPair>((resolve, reject) =>
        session.generateKeyPair(
          graphene.KeyGenMechanism.RSA,
          {
            keyType: graphene.KeyType.RSA,
            token: false,
            encrypt: true,
            wrap: true,
            modulusBits: WRAPPING_BITS[spec],
            publicExponent: Buffer.from([1, 0, 1]),
          },
          {
            keyType: graphene.KeyType.RSA,
            token: true,
            private: true,
            sensitive: true,
            extractable: false,
            decrypt: true,
            unwrap: true,
            sign: false,
            id,
            label,
          },
          (err, value) => (err || !value ? reject(err ?? new Error('no key pair')) : resolve(value)),
        ),
      );
      const { modulus, publicExponent } = pair.publicKey.getAttribute({ modulus: null, publicExponent: null });
      session.lib.C_DestroyObject(session.handle, pair.publicKey.handle);
      const publicKey = createPublicKey({
        key: {
          kty: 'RSA',
          n: (modulus as Buffer).toString('base64url'),
          e: (publicExponent as Buffer).toString('base64url'),
        },
        format: 'jwk',
      }).export({ type: 'spki', format: 'der' });
      return { keyRef: KEY_REF_PREFIX + id.toString('hex'), publicKey };
    });
  }

  /** Removes a wrapping key (after a successful import, or when its parameters expired); gone already is fine. */
  async destroyWrappingKey(keyRef: string): Promise<void> {
    await this.token.inSession((session) => {
      session.destroy({ class: graphene.ObjectClass.PRIVATE_KEY, id: idOf(keyRef) });
    }, true);
  }

  /** Removes an imported key the service then could not record (best effort by the caller). */
  async destroyKey(keyRef: string): Promise<void> {
    await this.token.inSession((session) => {
      session.destroy({ id: idOf(keyRef) });
    }, true);
  }

  /**
   * Unwraps RSA or EC material into the token as a signing key (sensitive, never extractable, CKA_ID like a
   * generated key, so the key store's sign path finds it), checks it is a key of `spec`, and returns it with
   * its public half. On any refusal nothing stays in the token.
   */
  async importIntoToken(
    wrappingKeyRef: string,
    algorithm: WrappingAlgorithm,
    spec: KeySpec,
    blob: Buffer,
    label: string,
  ): Promise<CreatedKey> {
    const info = keyInfo(spec);
    if (info.family !== 'rsa' && info.family !== 'ec') throw new Error(`${spec} keys are not held by the token`);
    const id = randomBytes(16);
    const keyRef = KEY_REF_PREFIX + id.toString('hex');
    return this.token.inSession(async (session) => {
      const lib = session.lib;
      const h = session.handle;
      const wrappingKey = findWrappingKey(session, wrappingKeyRef);
      const template = privateKeyTemplate(info.family === 'rsa' ? pkcs11js.CKK_RSA : pkcs11js.CKK_EC, id, label);
      if (algorithm === 'RSAES_OAEP_SHA_256') {
        return this.createFromPlaintext(
          session,
          spec,
          oaepInProcess(session, wrappingKey, 'sha256', blob),
          template,
          keyRef,
        );
      }
      let handle: Buffer;
      let unwrapper: { key: Buffer; mechanism: pkcs11js.Mechanism };
      let wrapped: Buffer;
      let aesKey: Buffer | undefined;
      if (isKeyWrap(algorithm)) {
        const rsaBlock = blob.subarray(0, modulusBytes(session, wrappingKey));
        wrapped = blob.subarray(rsaBlock.length);
        if (wrapped.length < 16) throw invalidCiphertext('too short for an RSA block followed by an AES key wrap');
        aesKey = this.sessionAesKey(session, wrappingKey, oaepHashOf(algorithm), rsaBlock);
        unwrapper = { key: aesKey, mechanism: KWP };
      } else {
        wrapped = blob;
        unwrapper = { key: wrappingKey, mechanism: OAEP_SHA1 };
      }
      try {
        try {
          handle = lib.C_UnwrapKey(h, unwrapper.mechanism, unwrapper.key, wrapped, template);
        } catch (err) {
          throw this.whyNotUnwrapped(session, unwrapper, wrapped, spec, err);
        }
      } finally {
        if (aesKey) lib.C_DestroyObject(h, aesKey);
      }
      try {
        const publicKeyPem = checkAndReadPublicKey(session, handle, spec);
        return { keyRef, publicKeyPem };
      } catch (err) {
        lib.C_DestroyObject(h, handle);
        throw err;
      }
    });
  }

  /**
   * For the software key store: the PKCS#8 plaintext, decrypted by the token's wrapping key (raw RSA, OAEP decoded
   * here) and, for the RSA_AES algorithms, the AES key wrap opened here. The caller zeroes it.
   */
  async unwrapToProcess(wrappingKeyRef: string, algorithm: WrappingAlgorithm, blob: Buffer): Promise<Buffer> {
    return this.token.inSession((session) => {
      const wrappingKey = findWrappingKey(session, wrappingKeyRef);
      if (!isKeyWrap(algorithm)) return oaepInProcess(session, wrappingKey, oaepHashOf(algorithm), blob);
      const rsaBlock = blob.subarray(0, modulusBytes(session, wrappingKey));
      const aes = oaepInProcess(session, wrappingKey, oaepHashOf(algorithm), rsaBlock);
      try {
        return kwpDecrypt(aes, blob.subarray(rsaBlock.length));
      } finally {
        aes.fill(0);
      }
    });
  }

  /** The RSA block's AES key as a sensitive session object that can only unwrap. */
  private sessionAesKey(session: graphene.Session, wrappingKey: Buffer, hash: 'sha1' | 'sha256', rsaBlock: Buffer) {
    const lib = session.lib;
    const template: pkcs11js.Template = [
      { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
      { type: pkcs11js.CKA_KEY_TYPE, value: pkcs11js.CKK_AES },
      { type: pkcs11js.CKA_TOKEN, value: false },
      { type: pkcs11js.CKA_SENSITIVE, value: true },
      { type: pkcs11js.CKA_EXTRACTABLE, value: false },
      { type: pkcs11js.CKA_UNWRAP, value: true },
    ];
    if (hash === 'sha1') {
      try {
        return lib.C_UnwrapKey(session.handle, OAEP_SHA1, wrappingKey, rsaBlock, template);
      } catch (err) {
        throw invalidCiphertextOrFault(session, err, 'the RSA-OAEP block does not decrypt');
      }
    }
    const aes = oaepInProcess(session, wrappingKey, hash, rsaBlock);
    try {
      if (![16, 24, 32].includes(aes.length)) throw invalidCiphertext('the RSA-OAEP block does not hold an AES key');
      return lib.C_CreateObject(session.handle, [...template, { type: pkcs11js.CKA_VALUE, value: aes }]);
    } finally {
      aes.fill(0);
    }
  }

  /**
   * The unwrap failed: a tampered or foreign ciphertext (invalid_ciphertext), or material that is not a key of
   * `spec` (invalid_key_material, naming what it is). Told apart by unwrapping again into throwaway session
   * objects (sensitive, destroyed at once): as an opaque secret (does the ciphertext open at all?), then as the
   * other key type.
   */
  private whyNotUnwrapped(
    session: graphene.Session,
    unwrapper: { key: Buffer; mechanism: pkcs11js.Mechanism },
    wrapped: Buffer,
    spec: KeySpec,
    err: unknown,
  ): Error {
    if (!sessionAlive(session)) return err instanceof Error ? err : new Error(String(err));
    const probe = (template: pkcs11js.Template): Buffer | undefined => {
      try {
        return session.lib.C_UnwrapKey(session.handle, unwrapper.mechanism, unwrapper.key, wrapped, template);
      } catch {
        return undefined;
      }
    };
    const opaque = probe([
      { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_SECRET_KEY },
      { type: pkcs11js.CKA_KEY_TYPE, value: pkcs11js.CKK_GENERIC_SECRET },
      { type: pkcs11js.CKA_TOKEN, value: false },
      { type: pkcs11js.CKA_SENSITIVE, value: true },
      { type: pkcs11js.CKA_EXTRACTABLE, value: false },
    ]);
    if (!opaque) return invalidCiphertext('the token could not unwrap it');
    session.lib.C_DestroyObject(session.handle, opaque);
    const wanted = keyInfo(spec).family;
    const other = probe(
      privateKeyTemplate(wanted === 'rsa' ? pkcs11js.CKK_EC : pkcs11js.CKK_RSA, randomBytes(16), '', false),
    );
    let found = 'no RSA or EC private key in PKCS#8 DER (an ML-DSA or SM2 key goes to a key of that spec)';
    if (other) {
      found = describeTokenKey(session, other);
      session.lib.C_DestroyObject(session.handle, other);
    }
    return new ApiError('invalid_key_material', `the key material is not a ${spec} key: found ${found}`);
  }

  /** RSAES_OAEP_SHA_256: the decrypted PKCS#8 is checked and put in the token with C_CreateObject, then zeroed. */
  private createFromPlaintext(
    session: graphene.Session,
    spec: KeySpec,
    pkcs8: Buffer,
    template: pkcs11js.Template,
    keyRef: string,
  ): CreatedKey {
    let scalar: Buffer | undefined;
    try {
      const info = keyInfo(spec);
      checkMaterial(spec, pkcs8);
      if (info.family !== 'ec') throw new Error('only EC material comes without an AES key wrap');
      scalar = ecPrivateScalar(pkcs8, EC_FIELD_BYTES[info.curve]);
      session.lib.C_CreateObject(session.handle, [
        ...template,
        { type: pkcs11js.CKA_EC_PARAMS, value: encodeObjectIdentifier(EC_CURVE_OID[info.curve]) },
        { type: pkcs11js.CKA_VALUE, value: scalar },
      ]);
      return { keyRef, publicKeyPem: pem(publicKeyOf(pkcs8)) };
    } finally {
      scalar?.fill(0);
      pkcs8.fill(0);
    }
  }
}

/** Throws invalid_key_material unless the PKCS#8 DER is a key of `spec`. */
export function checkMaterial(spec: KeySpec, pkcs8: Buffer): void {
  let found: ReturnType<typeof identifyKeyMaterial>;
  try {
    found = identifyKeyMaterial(pkcs8);
  } catch (err) {
    if (err instanceof KeyMaterialError) throw new ApiError('invalid_key_material', err.message);
    throw err;
  }
  if ('spec' in found && found.spec === spec) return;
  const what = 'spec' in found ? found.spec : found.other;
  throw new ApiError('invalid_key_material', `the key material is not a ${spec} key: found ${what}`);
}

function pem(der: Buffer): string {
  return createPublicKey({ key: der, format: 'der', type: 'spki' }).export({ type: 'spki', format: 'pem' }).toString();
}

function privateKeyTemplate(keyType: number, id: Buffer, label: string, token = true): pkcs11js.Template {
  return [
    { type: pkcs11js.CKA_CLASS, value: pkcs11js.CKO_PRIVATE_KEY },
    { type: pkcs11js.CKA_KEY_TYPE, value: keyType },
    { type: pkcs11js.CKA_TOKEN, value: token },
    { type: pkcs11js.CKA_PRIVATE, value: true },
    { type: pkcs11js.CKA_SENSITIVE, value: true },
    { type: pkcs11js.CKA_EXTRACTABLE, value: false },
    { type: pkcs11js.CKA_SIGN, value: true },
    { type: pkcs11js.CKA_DECRYPT, value: false },
    { type: pkcs11js.CKA_ID, value: id },
    { type: pkcs11js.CKA_LABEL, value: label },
  ];
}

function findWrappingKey(session: graphene.Session, keyRef: string): Buffer {
  const found = session.find({ class: graphene.ObjectClass.PRIVATE_KEY, id: idOf(keyRef) });
  if (found.length !== 1) {
    throw new ApiError('invalid_import_token', 'the wrapping key of this import token is gone (used or expired)');
  }
  return found.items(0).handle;
}

function modulusBytes(session: graphene.Session, key: Buffer): number {
  const [attr] = session.lib.C_GetAttributeValue(session.handle, key, [{ type: pkcs11js.CKA_MODULUS }]);
  return (attr?.value as Buffer).length;
}

/** Raw RSA in the token, OAEP decoded here (the token's OAEP is SHA-1 only). */
function oaepInProcess(session: graphene.Session, key: Buffer, hash: 'sha1' | 'sha256', block: Buffer): Buffer {
  const lib = session.lib;
  const size = modulusBytes(session, key);
  if (block.length !== size) {
    throw invalidCiphertext(`the RSA block must be ${size} bytes (the wrapping key's size), got ${block.length}`);
  }
  let em: Buffer;
  try {
    lib.C_DecryptInit(session.handle, RAW_RSA, key);
    em = lib.C_Decrypt(session.handle, block, Buffer.alloc(size));
  } catch (err) {
    throw invalidCiphertextOrFault(session, err, 'the RSA block does not decrypt');
  }
  // Raw RSA drops leading zero bytes of the result on some tokens: put them back.
  const full = em.length === size ? em : Buffer.concat([Buffer.alloc(size - em.length), em]);
  try {
    return oaepDecode(hash, full);
  } catch (err) {
    if (err instanceof OaepDecodeError) throw invalidCiphertext(`RSA-OAEP (${hash}) decoding failed`);
    throw err;
  } finally {
    full.fill(0);
    em.fill(0);
  }
}

/** RFC 5649 unwrap with the AES key from the RSA block; a failed integrity check is a tampered ciphertext. */
function kwpDecrypt(aes: Buffer, wrapped: Buffer): Buffer {
  const cipher = { 16: 'id-aes128-wrap-pad', 24: 'id-aes192-wrap-pad', 32: 'id-aes256-wrap-pad' }[aes.length];
  if (!cipher) throw invalidCiphertext('the RSA-OAEP block does not hold an AES key');
  try {
    const d = createDecipheriv(cipher, aes, KWP_IV);
    return Buffer.concat([d.update(wrapped), d.final()]);
  } catch {
    throw invalidCiphertext('the AES key wrap (RFC 5649) failed its integrity check');
  }
}

/** Checks the unwrapped key against `spec` (type, size, curve) and returns its public key, PEM. */
function checkAndReadPublicKey(session: graphene.Session, handle: Buffer, spec: KeySpec): string {
  const info = keyInfo(spec);
  const found = describeTokenKey(session, handle);
  if (found !== spec)
    throw new ApiError('invalid_key_material', `the key material is not a ${spec} key: found ${found}`);
  const lib = session.lib;
  if (info.family === 'rsa') {
    const [n, e] = lib.C_GetAttributeValue(session.handle, handle, [
      { type: pkcs11js.CKA_MODULUS },
      { type: pkcs11js.CKA_PUBLIC_EXPONENT },
    ]);
    return createPublicKey({
      key: { kty: 'RSA', n: (n?.value as Buffer).toString('base64url'), e: (e?.value as Buffer).toString('base64url') },
      format: 'jwk',
    })
      .export({ type: 'spki', format: 'pem' })
      .toString();
  }
  if (info.family !== 'ec') throw new Error(`${spec} is not held by the token`);
  // The token keeps no public point with an unwrapped EC key (SoftHSM stores CKA_EC_PARAMS and CKA_VALUE only).
  return recoverEcPublicKey(info.curve, (digest) => {
    lib.C_SignInit(session.handle, { mechanism: pkcs11js.CKM_ECDSA }, handle);
    return lib.C_Sign(session.handle, digest, Buffer.alloc(2 * EC_FIELD_BYTES[info.curve]));
  });
}

/** What an unwrapped key is, as a key spec name when it is one ("RSA_3072", "ECC_NIST_P384", "SM2", ...). */
function describeTokenKey(session: graphene.Session, handle: Buffer): string {
  const lib = session.lib;
  const [type] = lib.C_GetAttributeValue(session.handle, handle, [{ type: pkcs11js.CKA_KEY_TYPE }]);
  const keyType = ulong(type?.value as Buffer);
  if (keyType === pkcs11js.CKK_RSA) {
    const [n] = lib.C_GetAttributeValue(session.handle, handle, [{ type: pkcs11js.CKA_MODULUS }]);
    const bits = (n?.value as Buffer).length * 8;
    return [2048, 3072, 4096].includes(bits) ? `RSA_${bits}` : `an RSA-${bits} key`;
  }
  if (keyType === pkcs11js.CKK_EC) {
    const [params] = lib.C_GetAttributeValue(session.handle, handle, [{ type: pkcs11js.CKA_EC_PARAMS }]);
    const hex = (params?.value as Buffer).toString('hex');
    return CURVE_NAMES[hex] ?? `an EC key with parameters ${hex}`;
  }
  return `a key of PKCS#11 type ${keyType}`;
}
