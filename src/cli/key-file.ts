// A private key file as users have them: PEM or DER, PKCS#8 ("PRIVATE KEY") or traditional ("RSA PRIVATE KEY",
// "EC PRIVATE KEY"), for the ten key specs. Out comes the PKCS#8 DER that key import wraps, its key spec and the
// public half (DER SubjectPublicKeyInfo) that proves the import.
import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { type KeySpec, keyInfo } from '../crypto/algorithms.js';
import { mlDsaSpkiDer } from '../crypto/spki.js';
import {
  identifyKeyMaterial,
  KeyMaterialError,
  mlDsaKeyParts,
  publicKeyOf,
  sm2KeyParts,
} from '../keys/import/pkcs8.js';

export class KeyFileError extends Error {}

export interface KeyFile {
  spec: KeySpec;
  pkcs8: Buffer;
  /** DER SubjectPublicKeyInfo (SM2: the point is in it). */
  spki: Buffer;
}

const SM2_SPKI_PREFIX = Buffer.from('3059301306072a8648ce3d020106082a811ccf5501822d034200', 'hex');

export function readKeyFile(path: string): KeyFile {
  let raw: Buffer;
  try {
    raw = readFileSync(path);
  } catch (err) {
    throw new KeyFileError(`${path}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  const pkcs8 = toPkcs8(path, raw);
  let found: ReturnType<typeof identifyKeyMaterial>;
  try {
    found = identifyKeyMaterial(pkcs8);
  } catch (err) {
    if (err instanceof KeyMaterialError) throw new KeyFileError(`${path}: ${err.message}`);
    throw err;
  }
  if (!('spec' in found)) throw new KeyFileError(`${path} holds ${found.other}, which is none of the ten key specs`);
  return { spec: found.spec, pkcs8, spki: publicHalf(found.spec, pkcs8) };
}

function toPkcs8(path: string, raw: Buffer): Buffer {
  const text = raw.toString('latin1');
  const pem = /-----BEGIN ([A-Z0-9 ]+)-----([\s\S]*?)-----END \1-----/.exec(text);
  if (pem) {
    const label = pem[1] as string;
    if (label === 'ENCRYPTED PRIVATE KEY' || /Proc-Type: 4,ENCRYPTED/.test(pem[2] as string)) {
      throw new KeyFileError(`${path} is encrypted: decrypt it first (openssl pkcs8 -in ${path} -out plain.pem)`);
    }
    // PKCS#8 as it is (Node 20 cannot read ML-DSA); traditional RSA/EC keys converted by node:crypto.
    if (label === 'PRIVATE KEY') return Buffer.from((pem[2] as string).replace(/\s/g, ''), 'base64');
    if (label === 'RSA PRIVATE KEY' || label === 'EC PRIVATE KEY') {
      return createPrivateKey(pem[0]).export({ type: 'pkcs8', format: 'der' });
    }
    throw new KeyFileError(`${path} holds a PEM "${label}", not a private key`);
  }
  try {
    identifyKeyMaterial(raw);
    return raw;
  } catch {
    // not PKCS#8 DER: perhaps PKCS#1 or SEC 1
  }
  for (const type of ['pkcs1', 'sec1'] as const) {
    try {
      return createPrivateKey({ key: raw, format: 'der', type }).export({ type: 'pkcs8', format: 'der' });
    } catch {
      // try the next form
    }
  }
  throw new KeyFileError(`${path} is not a private key in PEM or DER (PKCS#8, PKCS#1 or SEC 1)`);
}

function publicHalf(spec: KeySpec, pkcs8: Buffer): Buffer {
  const family = keyInfo(spec).family;
  if (family === 'rsa' || family === 'ec') return publicKeyOf(pkcs8);
  const parts = family === 'sm2' ? sm2KeyParts(pkcs8) : mlDsaKeyParts(spec, pkcs8);
  parts.secret.fill(0);
  return family === 'sm2' ? Buffer.concat([SM2_SPKI_PREFIX, parts.publicKey]) : mlDsaSpkiDer(spec, parts.publicKey);
}
