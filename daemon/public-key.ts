// A tenant's public key as the module needs it: the SubjectPublicKeyInfo (DER) from the service's PEM, and for
// ML-DSA also the raw key (CKA_VALUE; μ starts with SHAKE256 of it). node:crypto reads RSA, EC (secp256k1 too) and
// Ed25519 keys; Node 20 cannot read ML-DSA or SM2 keys, so those are parsed by src/crypto/spki.ts and checked against
// the key spec.
import { createPublicKey } from 'node:crypto';
import { keyInfo } from '../src/crypto/algorithms.js';
import { parseMlDsaSpki, parseSm2Spki } from '../src/crypto/spki.js';
import type { PublicKeyInfo } from './upstream/upstream.js';

export interface PublicKeyParts {
  /** SubjectPublicKeyInfo, DER. */
  spki: Buffer;
  /** ML-DSA only: the raw public key, as FIPS 204 encodes it (1,312 / 1,952 / 2,592 bytes). */
  rawPublicKey?: Buffer;
}

/** Throws an Error saying what is wrong when the PEM is not a key of the spec the service names. */
export function publicKeyParts(key: PublicKeyInfo): PublicKeyParts {
  const family = keyInfo(key.keySpec).family;
  if (family === 'rsa' || family === 'ec') {
    return { spki: createPublicKey(key.publicKeyPem).export({ type: 'spki', format: 'der' }) };
  }
  if (family === 'ed25519') {
    const ed = createPublicKey(key.publicKeyPem);
    if (ed.asymmetricKeyType !== 'ed25519')
      throw new Error(`an ${ed.asymmetricKeyType} key where the service says ${key.keySpec}`);
    return { spki: ed.export({ type: 'spki', format: 'der' }) };
  }
  const spki = pemBody(key.publicKeyPem);
  if (family === 'sm2') {
    if (!parseSm2Spki(spki)) throw new Error('not an SM2 SubjectPublicKeyInfo');
    return { spki };
  }
  const parsed = parseMlDsaSpki(spki);
  if (!parsed) throw new Error('not an ML-DSA SubjectPublicKeyInfo');
  if (parsed.spec !== key.keySpec) throw new Error(`an ${parsed.spec} key where the service says ${key.keySpec}`);
  return { spki, rawPublicKey: parsed.publicKey };
}

function pemBody(pem: string): Buffer {
  const m = /-----BEGIN PUBLIC KEY-----([A-Za-z0-9+/=\s]+)-----END PUBLIC KEY-----/.exec(pem);
  if (!m?.[1]) throw new Error('not a PEM PUBLIC KEY');
  return Buffer.from(m[1].replace(/\s+/g, ''), 'base64');
}
