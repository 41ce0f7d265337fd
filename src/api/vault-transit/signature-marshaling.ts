// Vault's signature strings: `vault:v<N>:<base64>`, N the key version that signed. `asn1` (the default) carries the
// signature as the key type encodes it (DER for ECDSA and SM2) in standard base64; `jws` carries ECDSA and SM2 as
// fixed-width r||s (RFC 7518 section 3.4) and any signature in unpadded URL-safe base64, as Vault does.
import { EC_FIELD_BYTES, type KeySpec, keyInfo } from '../../crypto/algorithms.js';
import { ecdsaDerToRaw, ecdsaRawToDer } from '../../crypto/der.js';
import { VaultError } from './errors.js';

export const MARSHALING_ALGORITHMS = ['asn1', 'jws'] as const;
export type Marshaling = (typeof MARSHALING_ALGORITHMS)[number];

/** Bytes of r (and of s) in a JWS signature: the curve order's size. */
function rawWidth(spec: KeySpec): number | undefined {
  const info = keyInfo(spec);
  if (info.family === 'sm2') return 32;
  if (info.family !== 'ec') return undefined;
  return EC_FIELD_BYTES[info.curve];
}

export function marshalSignature(spec: KeySpec, version: number, signature: Buffer, marshaling: Marshaling): string {
  if (marshaling === 'asn1') return `vault:v${version}:${signature.toString('base64')}`;
  const width = rawWidth(spec);
  const bytes = width === undefined ? signature : ecdsaDerToRaw(signature, width);
  return `vault:v${version}:${bytes.toString('base64url')}`;
}

const SIGNATURE_PATTERN = /^vault:v([1-9][0-9]{0,8}):([A-Za-z0-9+/_-]+={0,2})$/;

/** The key version of a `vault:v<N>:...` string (it picks the key to verify with) and its encoded signature. */
export function parseSignature(text: string): { version: number; encoded: string } {
  const match = SIGNATURE_PATTERN.exec(text);
  if (!match) throw new VaultError(400, ['invalid signature: expected vault:v<version>:<base64>']);
  return { version: Number(match[1]), encoded: match[2] as string };
}

/** The signature as the service made it (DER for ECDSA and SM2), whatever the marshaling. */
export function decodeSignature(spec: KeySpec, encoded: string, marshaling: Marshaling): Buffer {
  const bytes = Buffer.from(encoded, marshaling === 'jws' ? 'base64url' : 'base64');
  const width = rawWidth(spec);
  if (marshaling === 'asn1' || width === undefined) return bytes;
  if (bytes.length !== 2 * width) {
    throw new VaultError(400, [`invalid signature: a jws signature of a ${spec} key has ${2 * width} bytes`]);
  }
  return ecdsaRawToDer(bytes);
}
