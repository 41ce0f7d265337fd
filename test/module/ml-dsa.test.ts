// ML-DSA through the PKCS#11 module, end to end: the built module loaded by pkcs11js (raw PKCS#11 3.2 numbers: no
// client installable on Debian 12 knows them yet), a real daemon and service (the embedded default, whose software
// key store holds ML-DSA and SM2 keys). The module computes μ from the message; each signature is verified over the
// MESSAGE (node:crypto on Node 24, @noble/post-quantum on Node 20: src/crypto/ml-dsa-verify.ts), so the module's μ
// is checked by an implementation that never sees it. An SM2 tenant is left out of the token, and says why in the
// module's log and in `signbridge status`.
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ml_dsa44, ml_dsa65, ml_dsa87 } from '@noble/post-quantum/ml-dsa.js';
import pkcs11js from 'pkcs11js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { type MlDsaLevel, mlDsaLevel, verifyMlDsa } from '../../src/crypto/ml-dsa-verify.js';
import { parseMlDsaSpki } from '../../src/crypto/spki.js';
import { ckr } from '../helpers/ckr.js';
import { runCli } from '../helpers/cli.js';
import { docSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { makeTempDir } from '../helpers/service.js';
import { type Stack, startStack, tenantFor } from './harness.js';

/** PKCS#11 3.2 (OASIS, "ML-DSA"); pkcs11js 2.1 predates them. */
const CKK_ML_DSA = 0x4a;
const CKA_PARAMETER_SET = 0x61d;
const CKM_ML_DSA = 0x1d;
const CKH_HEDGE_REQUIRED = 1;
const CKH_DETERMINISTIC_REQUIRED = 2;
const CKP: Record<string, number> = { ML_DSA_44: 1, ML_DSA_65: 2, ML_DSA_87: 3 };

const ML_DSA = { ML_DSA_44: ml_dsa44, ML_DSA_65: ml_dsa65, ML_DSA_87: ml_dsa87 } as const;
type MlDsaSpec = keyof typeof ML_DSA;
const SPECS: MlDsaSpec[] = ['ML_DSA_44', 'ML_DSA_65', 'ML_DSA_87'];
const P = pkcs11js;
let stack: Stack;
let lib: pkcs11js.PKCS11;
let moduleLog: string;
const tokens = new Map<string, { slot: Buffer; session: Buffer; objects: Buffer[] }>();

/** CK_SIGN_ADDITIONAL_CONTEXT {hedgeVariant, pContext, ulContextLen} as x86-64 lays it out (pContext NULL). */
function signContext(hedge: number, contextLen = 0): Buffer {
  const b = Buffer.alloc(24);
  b.writeBigUInt64LE(BigInt(hedge), 0);
  b.writeBigUInt64LE(BigInt(contextLen), 16);
  return b;
}

const levelOf = (spec: MlDsaSpec): MlDsaLevel => mlDsaLevel(spec) as MlDsaLevel;

function rawKey(spec: MlDsaSpec): Buffer {
  const pem = stack.publicKeys.get(tenantFor(spec)) as string;
  const der = Buffer.from(pem.replace(/-----[A-Z ]+-----|\s/g, ''), 'base64');
  const parsed = parseMlDsaSpki(der);
  if (parsed?.spec !== spec) throw new Error(`${spec}: the service's public key is not an ${spec} SPKI`);
  return parsed.publicKey;
}

beforeAll(async () => {
  stack = await startStack([...SPECS, 'SM2'] as KeySpec[]);
  moduleLog = join(stack.dir, 'module.log');
  process.env.SIGNBRIDGE_SOCKET = stack.socketPath;
  process.env.SIGNBRIDGE_LOG = moduleLog;
  lib = new P.PKCS11();
  lib.load(MODULE_PATH);
  lib.C_Initialize({ flags: P.CKF_OS_LOCKING_OK });
  for (const slot of lib.C_GetSlotList(true)) {
    const label = lib.C_GetTokenInfo(slot).label.trim();
    const session = lib.C_OpenSession(slot, P.CKF_SERIAL_SESSION);
    lib.C_FindObjectsInit(session, []);
    const objects = lib.C_FindObjects(session, 10);
    lib.C_FindObjectsFinal(session);
    tokens.set(label, { slot, session, objects });
  }
}, 180_000);

afterAll(async () => {
  try {
    lib?.C_Finalize();
  } catch {
    // already finalised by a failing test
  }
  delete process.env.SIGNBRIDGE_LOG;
  await stack?.close();
});

function keyOf(spec: MlDsaSpec, cls: number): { session: Buffer; key: Buffer } {
  const t = tokens.get(tenantFor(spec));
  if (!t) throw new Error(`no token for ${spec}`);
  lib.C_FindObjectsInit(t.session, [
    { type: P.CKA_CLASS, value: cls },
    { type: P.CKA_KEY_TYPE, value: CKK_ML_DSA },
  ]);
  const [key] = lib.C_FindObjects(t.session, 2);
  lib.C_FindObjectsFinal(t.session);
  if (!key) throw new Error(`${spec}: no ML-DSA key of class ${cls}`);
  return { session: t.session, key };
}

describe('ML-DSA keys through the module', () => {
  it.each(SPECS)('%s: CKK_ML_DSA keys with CKA_PARAMETER_SET, the public key as CKA_VALUE, CKM_ML_DSA', (spec) => {
    const pub = keyOf(spec, P.CKO_PUBLIC_KEY);
    const [value, set] = lib.C_GetAttributeValue(pub.session, pub.key, [
      { type: P.CKA_VALUE },
      { type: CKA_PARAMETER_SET },
    ]);
    expect(Buffer.from(value?.value as Buffer).equals(rawKey(spec))).toBe(true);
    expect((set?.value as Buffer).readUInt32LE(0)).toBe(CKP[spec]);
    const priv = keyOf(spec, P.CKO_PRIVATE_KEY);
    expect(ckr(() => lib.C_GetAttributeValue(priv.session, priv.key, [{ type: P.CKA_VALUE }]))).toBe(
      'CKR_ATTRIBUTE_SENSITIVE',
    );
    const slot = tokens.get(tenantFor(spec))?.slot as Buffer;
    expect(lib.C_GetMechanismList(slot)).toContain(CKM_ML_DSA);
    const info = lib.C_GetMechanismInfo(slot, CKM_ML_DSA);
    expect([info.minKeySize, info.maxKeySize]).toEqual([1312, 2592]);
  });

  it.each(SPECS)('%s: signs a file single-part; verified over the message', (spec) => {
    const { session, key } = keyOf(spec, P.CKO_PRIVATE_KEY);
    const message = randomBytes(200_000);
    lib.C_SignInit(session, { mechanism: CKM_ML_DSA }, key);
    const sig = lib.C_Sign(session, message, Buffer.alloc(4627));
    expect(sig.length).toBe(ML_DSA[spec].lengths.signature);
    expect(verifyMlDsa(levelOf(spec), rawKey(spec), { message }, sig)).toBe(true);
    const longer = Buffer.concat([message, Buffer.from([0])]);
    expect(verifyMlDsa(levelOf(spec), rawKey(spec), { message: longer }, sig)).toBe(false);
  });

  it.each(SPECS)('%s: signs multi-part with CKH_HEDGE_REQUIRED; verified over the message', (spec) => {
    const { session, key } = keyOf(spec, P.CKO_PRIVATE_KEY);
    const message = randomBytes(3 * 1024 * 1024 + 5); // larger than a wire frame: only μ crosses the socket
    lib.C_SignInit(session, { mechanism: CKM_ML_DSA, parameter: signContext(CKH_HEDGE_REQUIRED) }, key);
    for (let off = 0; off < message.length; off += 100_003) {
      lib.C_SignUpdate(session, message.subarray(off, off + 100_003));
    }
    const sig = lib.C_SignFinal(session, Buffer.alloc(4627));
    expect(verifyMlDsa(levelOf(spec), rawKey(spec), { message }, sig)).toBe(true);
  });

  it('signs hedged, as CKH_HEDGE_REQUIRED promises: the same message twice gives two valid, different signatures', () => {
    const { session, key } = keyOf('ML_DSA_44', P.CKO_PRIVATE_KEY);
    const message = Buffer.from('the same message twice');
    const twice = [0, 1].map(() => {
      lib.C_SignInit(session, { mechanism: CKM_ML_DSA, parameter: signContext(CKH_HEDGE_REQUIRED) }, key);
      return lib.C_Sign(session, message, Buffer.alloc(4627));
    }) as [Buffer, Buffer];
    for (const sig of twice) expect(verifyMlDsa(44, rawKey('ML_DSA_44'), { message }, sig)).toBe(true);
    expect(twice[0].equals(twice[1])).toBe(false);
  });

  it('refuses a context and deterministic signing at C_SignInit, and another mechanism for an ML-DSA key', () => {
    const { session, key } = keyOf('ML_DSA_65', P.CKO_PRIVATE_KEY);
    expect(ckr(() => lib.C_SignInit(session, { mechanism: CKM_ML_DSA, parameter: signContext(0, 8) }, key))).toBe(
      'CKR_MECHANISM_PARAM_INVALID',
    );
    const deterministic = { mechanism: CKM_ML_DSA, parameter: signContext(CKH_DETERMINISTIC_REQUIRED) };
    expect(ckr(() => lib.C_SignInit(session, deterministic, key))).toBe('CKR_MECHANISM_PARAM_INVALID');
    expect(ckr(() => lib.C_SignInit(session, { mechanism: P.CKM_ECDSA }, key))).toBe('CKR_KEY_TYPE_INCONSISTENT');
    const log = readFileSync(moduleLog, 'utf8');
    expect(log).toContain('CKM_ML_DSA with a 8-byte context; the service signs ML-DSA with the empty context');
    expect(log).toContain('CKM_ML_DSA with CKH_DETERMINISTIC_REQUIRED');
  });
});

describe('the C client of docs/clients.md', () => {
  it('compiles, signs a file through the module, and the signature verifies over the file', () => {
    const dir = makeTempDir('sb-mldsa-c-');
    writeFileSync(join(dir, 'mldsa-sign.c'), docSnippet('ml-dsa-sign-c'));
    const file = randomBytes(300_000);
    writeFileSync(join(dir, 'release.tar'), file);
    runSnippetOk('ml-dsa-sign', dir, {
      MODULE: MODULE_PATH,
      TOKEN: tenantFor('ML_DSA_87'),
      SIGNBRIDGE_SOCKET: stack.socketPath,
      SIGNBRIDGE_LOG: 'off',
    });
    const sig = readFileSync(join(dir, 'release.tar.sig'));
    expect(sig.length).toBe(4627);
    expect(verifyMlDsa(87, rawKey('ML_DSA_87'), { message: file }, sig)).toBe(true);
  });
});

describe('an SM2 tenant', () => {
  it('is a token without keys, and the module log and `signbridge status` say why', () => {
    const t = tokens.get(tenantFor('SM2' as KeySpec));
    expect(t?.objects).toEqual([]);
    const why = 'SM2 has no PKCS#11 mechanism';
    expect(readFileSync(moduleLog, 'utf8')).toMatch(new RegExp(`token "${tenantFor('SM2' as KeySpec)}".*${why}`));
    const status = runCli(['status', '--socket', stack.socketPath, '--json']);
    const report = JSON.parse(status.stdout) as { tokens: Array<{ tenant: string; note?: string; keys: unknown[] }> };
    const sm2 = report.tokens.find((x) => x.tenant === tenantFor('SM2' as KeySpec));
    expect(sm2?.keys).toEqual([]);
    expect(sm2?.note).toContain(why);
    const text = runCli(['status', '--socket', stack.socketPath]).stdout;
    expect(text).toContain(
      `token "${tenantFor('SM2' as KeySpec)}" (tenant ${tenantFor('SM2' as KeySpec)}): no keys: key`,
    );
    // `signbridge cert` names the reason too, instead of guessing the tenant does not exist.
    const csr = runCli([
      'cert',
      'csr',
      '--tenant',
      tenantFor('SM2' as KeySpec),
      '--subject',
      '/CN=x',
      '--socket',
      stack.socketPath,
    ]);
    expect(csr.code).not.toBe(0);
    expect(csr.stderr).toContain(why);
    // The ML-DSA tokens are listed with their keys.
    for (const spec of SPECS) expect(text).toMatch(new RegExp(`key \\S+  ${spec}  CKA_ID`));
  });
});
