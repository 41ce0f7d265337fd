// Key material of every kind as a client would bring it (PKCS#8 DER), and a signature through the service verified
// with the original public key by a verifier that owes nothing to the service (node:crypto, noble, openssl distid).
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import type { FastifyInstance } from 'fastify';
import { defaultAlgorithm, type KeySpec, type SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { ML_DSA_OID } from '../../src/crypto/spki.js';
import { signingInput as independentInput, verifiesIndependently } from './independent-verify.js';
import { callAction } from './service.js';

const ML_DSA = { ML_DSA_44: ml_dsa44, ML_DSA_65: ml_dsa65, ML_DSA_87: ml_dsa87 } as Record<string, typeof ml_dsa65>;
const work = mkdtempSync(join(tmpdir(), 'signbridge-import-'));

export interface Material {
  spec: KeySpec;
  /** PKCS#8 DER of the private key: what gets wrapped. */
  pkcs8: Buffer;
  /** The public half, PEM SubjectPublicKeyInfo. */
  publicKeyPem: string;
}

function tlv(tag: number, body: Buffer): Buffer {
  const len = body.length;
  const head = len < 0x80 ? [len] : len < 0x100 ? [0x81, len] : [0x82, len >> 8, len & 0xff];
  return Buffer.concat([Buffer.from([tag, ...head]), body]);
}

function pem(der: Buffer): string {
  return `-----BEGIN PUBLIC KEY-----\n${der
    .toString('base64')
    .match(/.{1,64}/g)
    ?.join('\n')}\n-----END PUBLIC KEY-----\n`;
}

/** ML-DSA PKCS#8 (RFC 9881) in the seed, expandedKey or both form. */
export function mlDsaMaterial(spec: KeySpec, form: 'seed' | 'expanded' | 'both' = 'seed'): Material {
  const seed = randomBytes(32);
  const { secretKey, publicKey } = (ML_DSA[spec] as typeof ml_dsa65).keygen(seed);
  const choice =
    form === 'seed'
      ? tlv(0x80, seed)
      : form === 'expanded'
        ? tlv(0x04, Buffer.from(secretKey))
        : tlv(0x30, Buffer.concat([tlv(0x04, seed), tlv(0x04, Buffer.from(secretKey))]));
  const pkcs8 = tlv(
    0x30,
    Buffer.concat([Buffer.from('020100', 'hex'), tlv(0x30, ML_DSA_OID[spec] as Buffer), tlv(0x04, choice)]),
  );
  const spki = tlv(
    0x30,
    Buffer.concat([tlv(0x30, ML_DSA_OID[spec] as Buffer), tlv(0x03, Buffer.concat([Buffer.from([0]), publicKey]))]),
  );
  return { spec, pkcs8, publicKeyPem: pem(spki) };
}

/** SM2 made by openssl genpkey, as a user would (PKCS#8 with the SM2 curve). */
export function sm2Material(): Material {
  const dir = mkdtempSync(join(work, 'sm2-'));
  execFileSync('openssl', ['genpkey', '-algorithm', 'SM2', '-out', join(dir, 'key.pem')]);
  execFileSync('openssl', [
    'pkcs8',
    '-topk8',
    '-nocrypt',
    '-outform',
    'DER',
    '-in',
    join(dir, 'key.pem'),
    '-out',
    join(dir, 'key.der'),
  ]);
  const publicKeyPem = execFileSync('openssl', ['pkey', '-in', join(dir, 'key.pem'), '-pubout']).toString();
  return { spec: 'SM2', pkcs8: readFileSync(join(dir, 'key.der')), publicKeyPem };
}

const CURVES: Partial<Record<KeySpec, string>> = {
  ECC_NIST_P256: 'P-256',
  ECC_NIST_P384: 'P-384',
  ECC_NIST_P521: 'P-521',
  ECC_SECG_P256K1: 'secp256k1',
};

/** Any of the twelve key specs. */
export function material(spec: KeySpec): Material {
  if (spec.startsWith('ML_DSA')) return mlDsaMaterial(spec);
  if (spec === 'SM2') return sm2Material();
  if (spec === 'ECC_NIST_EDWARDS25519') {
    const pair = generateKeyPairSync('ed25519');
    return {
      spec,
      pkcs8: pair.privateKey.export({ type: 'pkcs8', format: 'der' }),
      publicKeyPem: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
    };
  }
  const pair = spec.startsWith('RSA')
    ? generateKeyPairSync('rsa', { modulusLength: Number(spec.slice(4)) })
    : generateKeyPairSync('ec', { namedCurve: CURVES[spec] as string });
  return {
    spec,
    pkcs8: pair.privateKey.export({ type: 'pkcs8', format: 'der' }),
    publicKeyPem: pair.publicKey.export({ type: 'spki', format: 'pem' }).toString(),
  };
}

const message = Buffer.from('an artifact signed with an imported key\n');

function _spkiDer(p: string): Buffer {
  return Buffer.from(p.replace(/-----[^-]+-----|\s/g, ''), 'base64');
}

/** What a client sends as `hash` for `spec`, computed from the original public key. */
export function signingInput(spec: KeySpec, publicKeyPem: string): { hash: Buffer; algorithm: SigningAlgorithm } {
  const algorithm = spec.startsWith('RSA') ? 'RSASSA_PSS_SHA_256' : defaultAlgorithm(spec);
  return { hash: independentInput(publicKeyPem, algorithm, message), algorithm };
}

/** Verifies a signature over `message` with the original public key. */
export function verifiesWithOriginal(spec: KeySpec, publicKeyPem: string, signature: Buffer): boolean {
  return verifiesIndependently(spec, publicKeyPem, signingInput(spec, publicKeyPem).algorithm, message, signature);
}

/** Signs through the service with the tenant's current key; returns status and signature. */
export async function signWithTenant(
  app: FastifyInstance,
  signer: string,
  tenant: string,
  spec: KeySpec,
  publicKeyPem: string,
): Promise<{ status: number; signature: Buffer; body: Record<string, unknown> }> {
  const { hash, algorithm } = signingInput(spec, publicKeyPem);
  const res = await callAction(app, signer, 'sign', { tenant_id: tenant, hash: hash.toString('base64'), algorithm });
  return { status: res.status, signature: Buffer.from(String(res.body.signature ?? ''), 'base64'), body: res.body };
}

/** A fresh tenant (its first key generated, P-256) with an admin and a signer, on a test service. */
export async function newTenant(
  svc: { app: FastifyInstance; operator: string; apiKey(role: 'admin' | 'signer', tenant: string): Promise<string> },
  id: string,
): Promise<{ id: string; admin: string; signer: string }> {
  const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: id, key_spec: 'ECC_NIST_P256' });
  if (made.status !== 201) throw new Error(`create_tenant ${id}: ${JSON.stringify(made.body)}`);
  return { id, admin: await svc.apiKey('admin', id), signer: await svc.apiKey('signer', id) };
}

/** get_import_params as a tenant admin. */
export function importParams(
  app: FastifyInstance,
  admin: string,
  tenantId: string,
  spec: KeySpec,
  wrappingAlgorithm: string,
  wrappingKeySpec: string,
  extra: Record<string, unknown> = {},
) {
  return callAction(app, admin, 'get_import_params', {
    tenant_id: tenantId,
    key_spec: spec,
    wrapping_algorithm: wrappingAlgorithm,
    wrapping_key_spec: wrappingKeySpec,
    ...extra,
  });
}

/** import_key as a tenant admin (KEY_MATERIAL_DOES_NOT_EXPIRE unless `body` says otherwise). */
export function importKeyMaterial(
  app: FastifyInstance,
  admin: string,
  tenantId: string,
  body: Record<string, unknown>,
) {
  return callAction(app, admin, 'import_key', {
    tenant_id: tenantId,
    expiration_model: 'KEY_MATERIAL_DOES_NOT_EXPIRE',
    ...body,
  });
}

/**
 * Wraps as the openssl commands of docs/keys.md do (OpenSSL 3.0: enc -id-aes256-wrap-pad, pkeyutl OAEP), for
 * material of any kind; the tests' own copy, with files in a temp folder.
 */
export function wrapWithOpenssl(wrappingPublicKey: Buffer, algorithm: string, pkcs8: Buffer): Buffer {
  const dir = mkdtempSync(join(work, 'wrap-'));
  const f = (name: string) => join(dir, name);
  writeFileSync(f('WrappingPublicKey.bin'), wrappingPublicKey);
  writeFileSync(f('key-material.bin'), pkcs8);
  const md = algorithm.endsWith('SHA_1') ? 'sha1' : 'sha256';
  const oaep = (input: string, output: string) =>
    execFileSync('openssl', [
      'pkeyutl',
      '-encrypt',
      '-in',
      f(input),
      '-out',
      f(output),
      '-inkey',
      f('WrappingPublicKey.bin'),
      '-keyform',
      'DER',
      '-pubin',
      '-pkeyopt',
      'rsa_padding_mode:oaep',
      '-pkeyopt',
      `rsa_oaep_md:${md}`,
      '-pkeyopt',
      `rsa_mgf1_md:${md}`,
    ]);
  if (algorithm.startsWith('RSAES_OAEP')) {
    oaep('key-material.bin', 'EncryptedKeyMaterial.bin');
    return readFileSync(f('EncryptedKeyMaterial.bin'));
  }
  execFileSync('openssl', ['rand', '-out', f('aes-key.bin'), '32']);
  execFileSync('openssl', [
    'enc',
    '-id-aes256-wrap-pad',
    '-K',
    readFileSync(f('aes-key.bin')).toString('hex'),
    '-iv',
    'A65959A6',
    '-in',
    f('key-material.bin'),
    '-out',
    f('key-material-wrapped.bin'),
  ]);
  oaep('aes-key.bin', 'aes-key-wrapped.bin');
  return Buffer.concat([readFileSync(f('aes-key-wrapped.bin')), readFileSync(f('key-material-wrapped.bin'))]);
}
