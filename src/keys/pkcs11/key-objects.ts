// The key store's key objects on the token: key references, the templates of a new key pair, finding a private key.
import * as graphene from 'graphene-pk11';
import { EC_CURVE_OID, type EcKeyInfo, type RsaKeyInfo } from '../../crypto/algorithms.js';
import { encodeObjectIdentifier } from '../../crypto/object-identifier.js';
import { ApiError } from '../../errors.js';
import { promisify } from './promisify.js';

const KEY_REF_PREFIX = 'pkcs11:id=';

/** The key reference of the key pair whose CKA_ID is `id`. */
export function keyRefOf(id: Buffer): string {
  return KEY_REF_PREFIX + id.toString('hex');
}

/** The CKA_ID that `keyRef` names. */
export function keyIdOf(keyRef: string): Buffer {
  return Buffer.from(keyRef.slice(KEY_REF_PREFIX.length), 'hex');
}

/** A new key pair on the token, both halves with CKA_ID `id` and CKA_LABEL `label` (generated on libuv's pool). */
export function generateKeyPair(
  session: graphene.Session,
  info: RsaKeyInfo | EcKeyInfo,
  id: Buffer,
  label: string,
): Promise<graphene.IKeyPair> {
  const common = { token: true, id, label };
  return info.family === 'rsa'
    ? promisify<graphene.IKeyPair>((cb) =>
        session.generateKeyPair(
          graphene.KeyGenMechanism.RSA,
          {
            ...common,
            keyType: graphene.KeyType.RSA,
            verify: true,
            modulusBits: info.bits,
            publicExponent: Buffer.from([1, 0, 1]),
          },
          privateTemplate(common, graphene.KeyType.RSA),
          cb,
        ),
      )
    : promisify<graphene.IKeyPair>((cb) =>
        session.generateKeyPair(
          graphene.KeyGenMechanism.EC,
          {
            ...common,
            keyType: graphene.KeyType.EC,
            verify: true,
            paramsEC: encodeObjectIdentifier(EC_CURVE_OID[info.curve]),
          },
          privateTemplate(common, graphene.KeyType.EC),
          cb,
        ),
      );
}

function privateTemplate(common: { token: boolean; id: Buffer; label: string }, keyType: graphene.KeyType) {
  return {
    ...common,
    keyType,
    private: true,
    sign: true,
    sensitive: true,
    extractable: false,
  };
}

/** The handle of the private key that `keyRef` names; key_not_found when the token holds none. */
export function findPrivateKeyHandle(session: graphene.Session, keyRef: string): Buffer {
  if (!keyRef.startsWith(KEY_REF_PREFIX)) throw new Error(`not a PKCS#11 key reference: ${keyRef}`);
  const found = session.find({ class: graphene.ObjectClass.PRIVATE_KEY, id: keyIdOf(keyRef) });
  if (found.length !== 1) {
    throw new ApiError('key_not_found', `the key store holds no private key for ${keyRef}`);
  }
  return found.items(0).handle;
}
