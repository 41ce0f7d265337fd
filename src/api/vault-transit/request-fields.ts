// The fields of Vault's transit sign and verify requests, as Vault documents them, and how each becomes what
// signbridge signs: the hash (URL suffix or body), the RSA scheme, the marshaling, the key version, the input (or a
// batch of inputs). Unknown fields are let through as Vault lets them (hvac's verify sends `name`); a known field of
// the wrong type is a 400 from the schema, a value signbridge does not support a 400 naming what it supports.
import { createHash } from 'node:crypto';
import { Type } from '@sinclair/typebox';
import { type HashName, type KeySpec, keyInfo, type SigningAlgorithm } from '../../crypto/algorithms.js';
import { mlDsaPublicKey, sm2PublicPoint } from '../../crypto/file-representative.js';
import { mlDsaMu, sm2Digest } from '../../crypto/message-representatives.js';
import type { KeyRecord } from '../../store/store.js';
import { VaultError } from './errors.js';
import { parseSaltLength, type SaltLength } from './pss-salt.js';
import { MARSHALING_ALGORITHMS, type Marshaling } from './signature-marshaling.js';

/** Vault's names of the hashes signbridge signs with (Vault also has sha1, sha2-224, sha3-*, none). */
const HASHES = { 'sha2-256': 'sha256', 'sha2-384': 'sha384', 'sha2-512': 'sha512' } as const;
export type VaultHash = keyof typeof HASHES;
export const SIGNATURE_ALGORITHMS = ['pss', 'pkcs1v15'] as const;
type RsaScheme = (typeof SIGNATURE_ALGORITHMS)[number];

/** The most inputs one batch may carry: each is a signing request of its own (policy, audit entry, log entry). */
export const MAX_BATCH_ITEMS = 100;

/**
 * A bool as Vault decodes one (weakly: the vault CLI sends every `key=value` as a string): true or false, or a string
 * Go's strconv.ParseBool takes ("" is false).
 */
const TRUE_WORDS = ['1', 't', 'T', 'TRUE', 'true', 'True'];
const FALSE_WORDS = ['', '0', 'f', 'F', 'FALSE', 'false', 'False'];
const VaultBool = (description: string) =>
  Type.Union([Type.Boolean(), Type.Unsafe<string>({ type: 'string', enum: [...TRUE_WORDS, ...FALSE_WORDS] })], {
    description,
  });
const isTrue = (value: boolean | string | undefined) => value === true || TRUE_WORDS.includes(value as string);

const Base64Input = Type.String({ description: 'base64 of the data (or, with prehashed, of its digest)' });
const common = {
  hash_algorithm: Type.Optional(
    Type.String({ description: 'sha2-256 (default), sha2-384 or sha2-512; also the URL suffix' }),
  ),
  prehashed: Type.Optional(VaultBool('input is already the digest (ML-DSA: mu, SM2: e)')),
  signature_algorithm: Type.Optional(Type.String({ description: 'RSA keys: pss (default) or pkcs1v15' })),
  salt_length: Type.Optional(
    Type.Union([Type.String(), Type.Integer()], {
      description: 'RSA PSS: auto (default: the longest the key allows; verify: any), hash, or a number of bytes',
    }),
  ),
  marshaling_algorithm: Type.Optional(Type.String({ description: 'asn1 (default) or jws' })),
  context: Type.Optional(Type.String({ description: 'accepted and ignored: signbridge keys are not derived' })),
};

export const SignBody = Type.Object(
  {
    input: Type.Optional(Base64Input),
    // A number or its digits as a string: cosign's Vault signer sends "0", and Vault's decoder takes both.
    key_version: Type.Optional(
      Type.Union([Type.Integer({ minimum: 0 }), Type.String({ pattern: '^[0-9]{1,9}$' })], {
        description: '0 or absent: the latest; signbridge signs only with the latest (a number, or its digits)',
      }),
    ),
    batch_input: Type.Optional(
      Type.Array(
        Type.Object({
          input: Base64Input,
          context: Type.Optional(Type.String()),
          reference: Type.Optional(Type.String({ maxLength: 256, description: 'echoed in its batch result' })),
        }),
        { minItems: 1, maxItems: MAX_BATCH_ITEMS },
      ),
    ),
    ...common,
  },
  { title: 'VaultTransitSignRequest' },
);

export const VerifyBody = Type.Object(
  {
    input: Type.Optional(Base64Input),
    signature: Type.Optional(Type.String({ description: 'vault:v<N>:<base64>, as sign returned it' })),
    batch_input: Type.Optional(
      Type.Array(
        Type.Object({
          input: Base64Input,
          signature: Type.String(),
          context: Type.Optional(Type.String()),
          reference: Type.Optional(Type.String({ maxLength: 256 })),
        }),
        { minItems: 1, maxItems: MAX_BATCH_ITEMS },
      ),
    ),
    ...common,
  },
  { title: 'VaultTransitVerifyRequest' },
);

export interface SchemeFields {
  hash_algorithm?: string;
  prehashed?: boolean | string;
  signature_algorithm?: string;
  salt_length?: string | number;
  marshaling_algorithm?: string;
}

/** How every input of one request is signed or verified. */
export interface Scheme {
  hash: VaultHash;
  prehashed: boolean;
  rsa: RsaScheme;
  /** RSA PSS's salt length, as asked (pss-salt.ts). */
  salt: SaltLength;
  marshaling: Marshaling;
}

function oneOf<T extends string>(field: string, value: string | undefined, allowed: readonly T[], fallback: T): T {
  if (value === undefined) return fallback;
  if ((allowed as readonly string[]).includes(value)) return value as T;
  throw new VaultError(400, [`unsupported ${field} "${value}"; signbridge supports ${allowed.join(', ')}`]);
}

/** The body's choices, the URL's hash suffix winning over the body's (Vault reads the suffix first). */
export function schemeOf(body: SchemeFields, urlHash: string | undefined): Scheme {
  return {
    hash: oneOf('hash_algorithm', urlHash ?? body.hash_algorithm, Object.keys(HASHES) as VaultHash[], 'sha2-256'),
    prehashed: isTrue(body.prehashed),
    rsa: oneOf('signature_algorithm', body.signature_algorithm, SIGNATURE_ALGORITHMS, 'pss'),
    salt: parseSaltLength(body.salt_length),
    marshaling: oneOf('marshaling_algorithm', body.marshaling_algorithm, MARSHALING_ALGORITHMS, 'asn1'),
  };
}

/** The hash of the scheme, by signbridge's name. */
export const hashNameOf = (scheme: Scheme): HashName => HASHES[scheme.hash];

/**
 * signbridge's algorithm for a key spec and the scheme (hash and RSA scheme apply only where the key has them). An
 * `ed25519` key signs pure Ed25519 over the input, as Vault's does: Vault's hash_algorithm does not apply to it
 * (Vault ignores it), and `prehashed` is refused (Ed25519ph is not Vault's ed25519 signature). secp256k1 has no
 * Vault key type: refused as Vault refuses a key type it cannot sign with.
 */
export function algorithmFor(spec: KeySpec, scheme: Scheme): SigningAlgorithm {
  const info = keyInfo(spec);
  if (info.family === 'ml-dsa') return 'ML_DSA_SHAKE_256';
  if (info.family === 'sm2') return 'SM2DSA';
  if (info.family === 'ed25519') {
    if (scheme.prehashed) {
      throw new VaultError(400, [
        'prehashed is not supported for key type ed25519: Vault signs an ed25519 input as the message itself ' +
          '(pure Ed25519); send the message with prehashed false',
      ]);
    }
    return 'ED25519_SHA_512';
  }
  if (info.family === 'ec' && info.curve === 'secp256k1') {
    throw new VaultError(400, [
      `key type ${VAULT_SECP256K1_TYPE} does not support signing: Vault transit has no secp256k1 key type; sign ` +
        "with this key through signbridge's AWS KMS API (ECDSA_SHA_256) or POST /v1/sign",
    ]);
  }
  const bits = HASHES[scheme.hash].slice(3);
  if (info.family === 'ec') return `ECDSA_SHA_${bits}` as SigningAlgorithm;
  return (scheme.rsa === 'pss' ? `RSASSA_PSS_SHA_${bits}` : `RSASSA_PKCS1_V1_5_SHA_${bits}`) as SigningAlgorithm;
}

const STRICT_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** `input` as bytes: standard padded base64, as Vault requires (it refuses anything else). */
export function decodeInput(field: string, value: string): Buffer {
  if (!STRICT_BASE64.test(value)) throw new VaultError(400, [`unable to decode ${field} as base64`]);
  return Buffer.from(value, 'base64');
}

/** The name signbridge's keys/<name> gives a secp256k1 key, for which Vault itself has no key type. */
export const VAULT_SECP256K1_TYPE = 'ecdsa-secp256k1';

/**
 * What the key signs for `input`: the message itself for an ed25519 key (pure Ed25519, as Vault signs it; the signing
 * entry point records its SHA-512), else the digest-like representative below.
 */
export function signingInputOf(
  key: KeyRecord,
  scheme: Scheme,
  input: Buffer,
): { digest: Buffer } | { message: Buffer } {
  if (keyInfo(key.keySpec).family === 'ed25519') return { message: input };
  return { digest: representativeOf(key, scheme, input) };
}

/**
 * What the key signs for `input`: with prehashed, the input itself (a digest, ML-DSA's μ, SM2's e; its length is
 * checked by the signing service); else its digest, μ from the public key and the message, or SM3(Z_A || M).
 */
export function representativeOf(key: KeyRecord, scheme: Scheme, input: Buffer): Buffer {
  if (scheme.prehashed) return input;
  const info = keyInfo(key.keySpec);
  if (info.family === 'ml-dsa') return mlDsaMu(mlDsaPublicKey(key), [input]);
  if (info.family === 'sm2') return sm2Digest(sm2PublicPoint(key), [input]);
  return createHash(HASHES[scheme.hash]).update(input).digest();
}

/** 0 or absent: the latest. signbridge signs only with a tenant's current key; another version is refused. */
export function checkKeyVersion(given: number | string | undefined, current: KeyRecord): void {
  const asked = given === undefined ? undefined : Number(given);
  if (asked === undefined || asked === 0 || asked === current.version) return;
  throw new VaultError(400, [
    `key_version ${asked} cannot sign: signbridge signs only with the latest version of key ${current.tenantId} ` +
      `(${current.version}); send key_version ${current.version}, 0 or none (older versions still verify)`,
  ]);
}
