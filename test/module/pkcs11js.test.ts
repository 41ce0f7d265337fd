// The built module loaded by pkcs11js, against a real daemon and service (child processes) and SoftHSM keys:
// every mechanism with every key spec, verified with node:crypto; multi-part; size queries; precise CKR codes
// for bad input; concurrent signing; a daemon restart between two signatures.
import { createHash, createPublicKey, verify } from 'node:crypto';
import pkcs11js from 'pkcs11js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { type KeySpec, keyInfo } from '../../src/crypto/algorithms.js';
import { DIGEST_INFO_PREFIX } from '../../src/crypto/encoding.js';
import { ckr } from '../helpers/ckr.js';
import { type Stack, startStack, tenantFor } from './harness.js';

const SPECS: KeySpec[] = ['RSA_2048', 'RSA_3072', 'ECC_NIST_P256', 'ECC_NIST_P384', 'ECC_NIST_P521'];
const P = pkcs11js;
let stack: Stack;
let lib: pkcs11js.PKCS11;
const sessions = new Map<string, { session: Buffer; key: Buffer; slot: Buffer }>();

beforeAll(async () => {
  stack = await startStack(SPECS);
  process.env.SIGNBRIDGE_SOCKET = stack.socketPath;
  lib = new P.PKCS11();
  lib.load(MODULE_PATH);
  lib.C_Initialize({ flags: P.CKF_OS_LOCKING_OK });
  for (const slot of lib.C_GetSlotList(true)) {
    const label = lib.C_GetTokenInfo(slot).label.trim();
    const session = lib.C_OpenSession(slot, P.CKF_SERIAL_SESSION);
    lib.C_FindObjectsInit(session, [{ type: P.CKA_CLASS, value: P.CKO_PRIVATE_KEY }]);
    const [key] = lib.C_FindObjects(session, 10);
    lib.C_FindObjectsFinal(session);
    if (key) sessions.set(label, { session, key, slot });
  }
}, 180_000);

afterAll(async () => {
  try {
    lib?.C_Finalize();
  } catch {
    // already finalised by a failing test
  }
  await stack?.close();
});

type Hash = 'sha256' | 'sha384' | 'sha512';
const CKM_HASH: Record<Hash, number> = { sha256: P.CKM_SHA256, sha384: P.CKM_SHA384, sha512: P.CKM_SHA512 };
const MGF: Record<Hash, number> = { sha256: P.CKG_MGF1_SHA256, sha384: P.CKG_MGF1_SHA384, sha512: P.CKG_MGF1_SHA512 };
const LEN: Record<Hash, number> = { sha256: 32, sha384: 48, sha512: 64 };
const pss = (h: Hash) => ({ type: P.CK_PARAMS_RSA_PSS, hashAlg: CKM_HASH[h], mgf: MGF[h], saltLen: LEN[h] });

interface Case {
  name: string;
  mechanism: pkcs11js.Mechanism;
  /** What C_Sign gets, from the message. */
  input: (message: Buffer) => Buffer;
  verify: (pem: string, message: Buffer, sig: Buffer) => boolean;
}

function rsaCases(): Case[] {
  const cases: Case[] = [];
  for (const h of ['sha256', 'sha384', 'sha512'] as Hash[]) {
    const digest = (m: Buffer) => createHash(h).update(m).digest();
    const v1 = (pem: string, m: Buffer, s: Buffer) => verify(h, m, createPublicKey(pem), s);
    const vPss = (pem: string, m: Buffer, s: Buffer) =>
      verify(h, m, { key: createPublicKey(pem), padding: 6, saltLength: LEN[h] }, s);
    const bits = h.slice(3);
    cases.push(
      {
        name: `CKM_RSA_PKCS (${h} DigestInfo)`,
        mechanism: { mechanism: P.CKM_RSA_PKCS },
        input: (m) => Buffer.concat([DIGEST_INFO_PREFIX[h], digest(m)]),
        verify: v1,
      },
      {
        name: `CKM_SHA${bits}_RSA_PKCS`,
        mechanism: { mechanism: (P as unknown as Record<string, number>)[`CKM_SHA${bits}_RSA_PKCS`] as number },
        input: (m) => m,
        verify: v1,
      },
      {
        name: `CKM_RSA_PKCS_PSS (${h})`,
        mechanism: { mechanism: P.CKM_RSA_PKCS_PSS, parameter: pss(h) },
        input: digest,
        verify: vPss,
      },
      {
        name: `CKM_SHA${bits}_RSA_PKCS_PSS`,
        mechanism: {
          mechanism: (P as unknown as Record<string, number>)[`CKM_SHA${bits}_RSA_PKCS_PSS`] as number,
          parameter: pss(h),
        },
        input: (m) => m,
        verify: vPss,
      },
    );
  }
  return cases;
}

function ecCases(h: Hash): Case[] {
  const v = (pem: string, m: Buffer, s: Buffer) =>
    verify(h, m, { key: createPublicKey(pem), dsaEncoding: 'ieee-p1363' }, s);
  const bits = h.slice(3);
  return [
    {
      name: `CKM_ECDSA (${h} digest)`,
      mechanism: { mechanism: P.CKM_ECDSA },
      input: (m) => createHash(h).update(m).digest(),
      verify: v,
    },
    {
      name: `CKM_ECDSA_SHA${bits}`,
      mechanism: { mechanism: (P as unknown as Record<string, number>)[`CKM_ECDSA_SHA${bits}`] as number },
      input: (m) => m,
      verify: v,
    },
  ];
}

const casesFor = (spec: KeySpec): Case[] => {
  const info = keyInfo(spec);
  // An EC key signs every SHA-2 digest, whatever its curve (TLS 1.2 hands a P-384 key SHA-256).
  return info.family === 'rsa' ? rsaCases() : (['sha256', 'sha384', 'sha512'] as const).flatMap(ecCases);
};

describe('every mechanism with every key spec', () => {
  const all = SPECS.flatMap((spec) => casesFor(spec).map((c) => [spec, c.name, c] as const));
  it.each(all)('%s: %s signs single-part, node:crypto verifies', (spec, _name, c) => {
    const { session, key } = sessions.get(tenantFor(spec)) ?? expect.fail(`no token for ${spec}`);
    const message = Buffer.from(`module ${spec} ${c.name}`);
    lib.C_SignInit(session, c.mechanism, key);
    const sig = lib.C_Sign(session, c.input(message), Buffer.alloc(1024));
    expect(c.verify(stack.publicKeys.get(tenantFor(spec)) as string, message, sig)).toBe(true);
    if (keyInfo(spec).family === 'ec')
      expect(sig.length).toBe(
        { 'P-256': 64, 'P-384': 96, 'P-521': 132 }[(keyInfo(spec) as { curve: 'P-256' | 'P-384' | 'P-521' }).curve],
      );
  });

  it.each(SPECS)('%s: hash-and-sign mechanisms also sign multi-part (C_SignUpdate/C_SignFinal)', (spec) => {
    const { session, key } = sessions.get(tenantFor(spec)) ?? expect.fail();
    const c = casesFor(spec).find((x) => x.name.startsWith('CKM_SHA') || x.name.startsWith('CKM_ECDSA_SHA')) as Case;
    const parts = [Buffer.from('first part, '), Buffer.from(''), Buffer.from('second part')];
    lib.C_SignInit(session, c.mechanism, key);
    for (const p of parts) lib.C_SignUpdate(session, p);
    const sig = lib.C_SignFinal(session, Buffer.alloc(1024));
    expect(c.verify(stack.publicKeys.get(tenantFor(spec)) as string, Buffer.concat(parts), sig)).toBe(true);
  });
});

describe('size queries and buffers', () => {
  it('answers CKR_BUFFER_TOO_SMALL and keeps the operation, so the next call signs', () => {
    const { session, key } = sessions.get(tenantFor('RSA_2048')) ?? expect.fail();
    const message = Buffer.from('short buffer');
    lib.C_SignInit(session, { mechanism: P.CKM_SHA256_RSA_PKCS }, key);
    expect(ckr(() => lib.C_Sign(session, message, Buffer.alloc(16)))).toBe('CKR_BUFFER_TOO_SMALL');
    const sig = lib.C_Sign(session, message, Buffer.alloc(256));
    expect(verify('sha256', message, createPublicKey(stack.publicKeys.get(tenantFor('RSA_2048')) as string), sig)).toBe(
      true,
    );
    // The operation ended with that signature.
    expect(ckr(() => lib.C_Sign(session, message, Buffer.alloc(256)))).toBe('CKR_OPERATION_NOT_INITIALIZED');
  });
});

describe('bad input answered with precise CKR codes, before any network call', () => {
  it('refuses a mechanism of the wrong key type, and a hash the service does not sign (SHA-1)', () => {
    const ec = sessions.get(tenantFor('ECC_NIST_P384')) ?? expect.fail();
    expect(ckr(() => lib.C_SignInit(ec.session, { mechanism: P.CKM_SHA256_RSA_PKCS }, ec.key))).toMatch(
      /CKR_KEY_TYPE_INCONSISTENT|CKR_MECHANISM_INVALID/,
    );
    expect(ckr(() => lib.C_SignInit(ec.session, { mechanism: P.CKM_ECDSA_SHA1 }, ec.key))).toMatch(
      /CKR_MECHANISM_INVALID|CKR_KEY_FUNCTION_NOT_PERMITTED/,
    );
    const rsa = sessions.get(tenantFor('RSA_2048')) ?? expect.fail();
    expect(ckr(() => lib.C_SignInit(rsa.session, { mechanism: P.CKM_ECDSA }, rsa.key))).toMatch(
      /CKR_KEY_TYPE_INCONSISTENT|CKR_MECHANISM_INVALID/,
    );
  });

  it('refuses a bad DigestInfo for CKM_RSA_PKCS', () => {
    const rsa = sessions.get(tenantFor('RSA_2048')) ?? expect.fail();
    lib.C_SignInit(rsa.session, { mechanism: P.CKM_RSA_PKCS }, rsa.key);
    const sha1Info = Buffer.concat([Buffer.from('3021300906052b0e03021a05000414', 'hex'), Buffer.alloc(20, 1)]);
    expect(ckr(() => lib.C_Sign(rsa.session, sha1Info, Buffer.alloc(256)))).toMatch(
      /CKR_DATA_INVALID|CKR_DATA_LEN_RANGE/,
    );
    lib.C_SignInit(rsa.session, { mechanism: P.CKM_RSA_PKCS }, rsa.key);
    const truncated = Buffer.concat([DIGEST_INFO_PREFIX.sha256, Buffer.alloc(31, 1)]);
    expect(ckr(() => lib.C_Sign(rsa.session, truncated, Buffer.alloc(256)))).toMatch(
      /CKR_DATA_INVALID|CKR_DATA_LEN_RANGE/,
    );
  });

  it('refuses a CKM_ECDSA digest of the wrong size', () => {
    const ec = sessions.get(tenantFor('ECC_NIST_P256')) ?? expect.fail();
    lib.C_SignInit(ec.session, { mechanism: P.CKM_ECDSA }, ec.key);
    expect(ckr(() => lib.C_Sign(ec.session, Buffer.alloc(20, 1), Buffer.alloc(64)))).toMatch(
      /CKR_DATA_LEN_RANGE|CKR_DATA_INVALID/,
    );
  });

  it('refuses signing before C_SignInit, invalid sessions and invalid key handles', () => {
    const { session, slot } = sessions.get(tenantFor('ECC_NIST_P256')) ?? expect.fail();
    expect(ckr(() => lib.C_Sign(session, Buffer.alloc(32), Buffer.alloc(64)))).toBe('CKR_OPERATION_NOT_INITIALIZED');
    const bogusSession = Buffer.alloc(8, 0xee);
    expect(ckr(() => lib.C_SignInit(bogusSession, { mechanism: P.CKM_ECDSA }, Buffer.alloc(8, 1)))).toBe(
      'CKR_SESSION_HANDLE_INVALID',
    );
    expect(ckr(() => lib.C_SignInit(session, { mechanism: P.CKM_ECDSA }, Buffer.alloc(8, 0x7f)))).toMatch(
      /CKR_KEY_HANDLE_INVALID|CKR_OBJECT_HANDLE_INVALID/,
    );
    expect(ckr(() => lib.C_OpenSession(Buffer.alloc(8, 0x55), P.CKF_SERIAL_SESSION))).toBe('CKR_SLOT_ID_INVALID');
    expect(ckr(() => lib.C_GetTokenInfo(slot))).toBe('CKR_OK');
  });

  it('answers a second C_Initialize with CKR_CRYPTOKI_ALREADY_INITIALIZED', () => {
    expect(ckr(() => lib.C_Initialize())).toBe('CKR_CRYPTOKI_ALREADY_INITIALIZED');
  });
});

describe('concurrency and resilience', () => {
  it('signs from many sessions at once (pkcs11js runs asynchronous C_Sign on several threads)', async () => {
    const spec: KeySpec = 'ECC_NIST_P256';
    const { slot, key } = sessions.get(tenantFor(spec)) ?? expect.fail();
    const pem = stack.publicKeys.get(tenantFor(spec)) as string;
    const results = await Promise.all(
      Array.from({ length: 16 }, (_, i) => {
        const session = lib.C_OpenSession(slot, P.CKF_SERIAL_SESSION);
        const message = Buffer.from(`parallel ${i}`);
        lib.C_SignInit(session, { mechanism: P.CKM_ECDSA_SHA256 }, key);
        return new Promise<boolean>((resolve, reject) => {
          lib.C_Sign(session, message, Buffer.alloc(64), (err, sig) => {
            lib.C_CloseSession(session);
            if (err) reject(err);
            else resolve(verify('sha256', message, { key: createPublicKey(pem), dsaEncoding: 'ieee-p1363' }, sig));
          });
        });
      }),
    );
    expect(results.every(Boolean)).toBe(true);
  });

  it('survives a daemon restart between two signatures without the client noticing', async () => {
    const { session, key } = sessions.get(tenantFor('ECC_NIST_P256')) ?? expect.fail();
    const pem = stack.publicKeys.get(tenantFor('ECC_NIST_P256')) as string;
    const signOnce = (m: string) => {
      lib.C_SignInit(session, { mechanism: P.CKM_ECDSA_SHA256 }, key);
      return verify(
        'sha256',
        Buffer.from(m),
        { key: createPublicKey(pem), dsaEncoding: 'ieee-p1363' },
        lib.C_Sign(session, Buffer.from(m), Buffer.alloc(64)),
      );
    };
    expect(signOnce('before restart')).toBe(true);
    await stack.stopDaemon();
    await stack.startDaemon();
    expect(signOnce('after restart')).toBe(true);
  });

  it('answers CKR_DEVICE_ERROR while the daemon is down, and signs again once it is back', async () => {
    const { session, key } = sessions.get(tenantFor('ECC_NIST_P256')) ?? expect.fail();
    await stack.stopDaemon();
    lib.C_SignInit(session, { mechanism: P.CKM_ECDSA_SHA256 }, key);
    expect(ckr(() => lib.C_Sign(session, Buffer.from('down'), Buffer.alloc(64)))).toBe('CKR_DEVICE_ERROR');
    await stack.startDaemon();
    lib.C_SignInit(session, { mechanism: P.CKM_ECDSA_SHA256 }, key);
    expect(lib.C_Sign(session, Buffer.from('up'), Buffer.alloc(64)).length).toBe(64);
  });
});

describe('pkcs11-tool conformance pass', () => {
  it('passes pkcs11-tool --test --login against the module', async () => {
    const { execFile } = await import('node:child_process');
    const { promisify } = await import('node:util');
    const out = await promisify(execFile)(
      'pkcs11-tool',
      ['--module', MODULE_PATH, '--test', '--login', '--pin', '1234'],
      {
        env: { ...process.env, SIGNBRIDGE_SOCKET: stack.socketPath },
        encoding: 'utf8',
        timeout: 120_000,
      },
    );
    expect(out.stdout).toMatch(/No errors/);
  });
});
