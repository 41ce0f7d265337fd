// What a client sends as `hash` to sign a file with a given key: a SHA-2 digest for RSA and EC, ML-DSA's μ (which
// needs the public key), SM2's SM3(Z_A || M) (which needs the public point). The file is read in chunks, so a 2 GB
// artifact never sits in memory. Used by `signbridge digest` and `signbridge sign` (docs/keys.md).

import { createHash } from 'node:crypto';
import { closeSync, openSync, readSync } from 'node:fs';
import {
  algorithmInfo,
  algorithmsForKey,
  defaultAlgorithm,
  type KeySpec,
  keyInfo,
  type SigningAlgorithm,
} from './algorithms.js';
import { mlDsaMu, sm2Digest } from './message-representatives.js';
import { parseMlDsaSpki, parseSm2Spki } from './spki.js';

const CHUNK_BYTES = 1024 * 1024;

/** The file's bytes, one chunk at a time (the same buffer each time: a consumer must use it before the next). */
export function* fileChunks(path: string): Generator<Uint8Array> {
  const fd = openSync(path, 'r');
  try {
    const buf = Buffer.allocUnsafe(CHUNK_BYTES);
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) return;
      yield buf.subarray(0, n);
    }
  } finally {
    closeSync(fd);
  }
}

export class RepresentativeError extends Error {}

export interface PublicKeyOf {
  keySpec: KeySpec;
  /** SubjectPublicKeyInfo, PEM (as get_public_key returns it). */
  publicKeyPem: string;
}

/** The algorithm to name: the one asked for (it must fit the key), else the key's default. */
export function chooseAlgorithm(spec: KeySpec, asked?: string): SigningAlgorithm {
  const allowed = algorithmsForKey(spec);
  if (asked === undefined) return defaultAlgorithm(spec);
  if (!(allowed as string[]).includes(asked)) {
    throw new RepresentativeError(
      `--algorithm ${asked} cannot be used with a ${spec} key; allowed: ${allowed.join(', ')}`,
    );
  }
  return asked as SigningAlgorithm;
}

export function spkiDer(pem: string): Buffer {
  return Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
}

/** ML-DSA's raw public key (μ starts with SHAKE256 of it). */
export function mlDsaPublicKey(key: PublicKeyOf): Buffer {
  const parsed = parseMlDsaSpki(spkiDer(key.publicKeyPem));
  if (!parsed || parsed.spec !== key.keySpec) {
    throw new RepresentativeError(`the service's public key is not an ${key.keySpec} SubjectPublicKeyInfo`);
  }
  return parsed.publicKey;
}

/** SM2's public point 04 || x || y (Z_A hashes it). */
export function sm2PublicPoint(key: PublicKeyOf): Buffer {
  const point = parseSm2Spki(spkiDer(key.publicKeyPem));
  if (!point) throw new RepresentativeError("the service's public key is not an SM2 SubjectPublicKeyInfo");
  return point;
}

/** The `hash` to send for `path` signed by `key` with `algorithm` (checked against the key by chooseAlgorithm). */
export function fileRepresentative(path: string, key: PublicKeyOf, algorithm: SigningAlgorithm): Buffer {
  const info = keyInfo(key.keySpec);
  if (info.family === 'ml-dsa') return mlDsaMu(mlDsaPublicKey(key), fileChunks(path));
  if (info.family === 'sm2') return sm2Digest(sm2PublicPoint(key), fileChunks(path));
  const alg = algorithmInfo(algorithm);
  if (alg.family === 'ml-dsa' || alg.family === 'sm2') {
    throw new RepresentativeError(`${algorithm} does not fit a ${key.keySpec} key`);
  }
  if (alg.hash === 'message') {
    throw new RepresentativeError(`${algorithm} signs the file itself, not a hash; use ED25519_PH_SHA_512`);
  }
  // SHA-2 for RSA and ECDSA; SHA-512 for Ed25519ph.
  const hash = createHash(alg.hash);
  for (const chunk of fileChunks(path)) hash.update(chunk);
  return hash.digest();
}
