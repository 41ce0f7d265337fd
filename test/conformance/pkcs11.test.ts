// The PKCS#11 door's conformance: end to end through the real module, as a PKCS#11 application uses it. pkcs11-tool
// (OpenSC) loads libsignbridge-pkcs11.so, which talks to the daemon, which talks to the service (this file's SoftHSM
// token) over HTTP; openssl verifies what comes out. The round trip (slots, objects by CKA_ID, ECDSA and RSA
// signatures), the errors a tool reads (a key the token does not hold, a mechanism the key does not take, a policy
// denial, a revoked API key, a key rotated under the tool: CKR_KEY_CHANGED), and pkcs11-tool's own retry of a
// signature held for approval (issue 21). OpenSSL's pkcs11 provider and engine through the module are
// test/tools/openssl-provider.test.ts and openssl-engine.test.ts; the CKR codes in depth, test/tools/pkcs11-tool.test.ts.
import { execFile } from 'node:child_process';
import { createPublicKey } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openUpstream, type RunningDaemon } from '../../daemon/daemon.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import type { PolicyEngine } from '../../src/policy/policy.js';
import { ensurePeercredBuilt, remoteConfig, startTestDaemon, tempDir } from '../daemon/helpers.js';
import { runCliAsync } from '../helpers/cli.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const run = promisify(execFile);
// SIGNBRIDGE_TEST_PKCS11_MODULE: a module built elsewhere (e.g. a sanitizer build) instead of build/native.
const MODULE = process.env.SIGNBRIDGE_TEST_PKCS11_MODULE ?? MODULE_PATH;
const built = existsSync(MODULE);

const TENANTS: Record<string, KeySpec> = {
  'e2e-p256': 'ECC_NIST_P256',
  'e2e-p521': 'ECC_NIST_P521',
  'e2e-rsa': 'RSA_2048',
  'e2e-rotated': 'ECC_NIST_P256',
  'e2e-k256': 'ECC_SECG_P256K1',
  'e2e-ed25519': 'ECC_NIST_EDWARDS25519',
};

/** Tenants whose key the service rotates once, just before its signer reads the current key (its test seam). */
const rotateInTheWindow = new Set<string>();

const policy: PolicyEngine = {
  async evaluate(input) {
    if (input.project === 'release') {
      return { outcome: 'pending_approval', rule: 'release-approval', reason: 'releases need an approver' };
    }
    if (input.project === 'blocked') {
      return { outcome: 'deny', rule: 'vulnerable', reason: 'blocked project', vulnId: 'CVE-2099-1' };
    }
    return { outcome: 'allow', rule: 'test', reason: 'test' };
  },
};

// The test command builds the module (scripts/setup.sh); a missing module is a failure, never a silent skip.
if (!built) throw new Error(`the PKCS#11 module is not built (${MODULE}): run scripts/setup.sh`);

describe(`pkcs11-tool -> ${MODULE} -> daemon -> service`, () => {
  let svc: TestService;
  let daemon: RunningDaemon;
  const keys = new Map<string, { keyId: string; pemFile: string }>();
  let dir: string;
  let url: string;
  const pendingIds: string[] = [];
  // Asynchronous child processes: the daemon and the service answer from this process.
  const tool = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    run('pkcs11-tool', ['--module', MODULE, ...args], {
      env: { ...process.env, SIGNBRIDGE_SOCKET: daemon.socketPath, ...env },
      encoding: 'utf8',
      timeout: 30_000,
    });
  const verify = async (hash: string, tenant: string, sig: string, extra: string[] = []) => {
    const pub = keys.get(tenant)?.pemFile as string;
    const args = ['dgst', `-${hash}`, '-verify', pub, '-signature', sig, ...extra, join(dir, 'msg')];
    return (await run('openssl', args, { encoding: 'utf8' })).stdout.trim();
  };
  const id = (tenant: string) => ckaIdFor(keys.get(tenant)?.keyId as string).toString('hex');

  beforeAll(async () => {
    ensurePeercredBuilt();
    dir = tempDir('sbd-e2e-');
    svc = await startTestService({
      policy,
      beforeSigningKeyRead: async (tenantId) => {
        if (!rotateInTheWindow.delete(tenantId)) return;
        const admin = await svc.apiKey('admin', tenantId);
        const rotated = await callAction(svc.app, admin, 'rotate_key', { tenant_id: tenantId });
        if (rotated.status !== 200) throw new Error(`rotate_key in the window: ${JSON.stringify(rotated.body)}`);
      },
    });
    url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
    const tenants = [];
    for (const [tenant, spec] of Object.entries(TENANTS)) {
      const created = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
      expect(created.status).toBe(201);
      const signer = await svc.apiKey('signer', tenant);
      const pub = await callAction(svc.app, signer, 'get_public_key', { tenant_id: tenant });
      const pemFile = join(dir, `${tenant}.pem`);
      writeFileSync(
        pemFile,
        createPublicKey(pub.body.public_key_pem as string).export({ type: 'spki', format: 'pem' }),
      );
      keys.set(tenant, { keyId: pub.body.key_id as string, pemFile });
      tenants.push({ tenantId: tenant, label: `${tenant} token`, apiKey: signer });
    }
    const config = remoteConfig(url, tenants);
    // Watch the upstream for pending requests, so that the test can approve them like a person would.
    const upstream = await openUpstream(config);
    const original = upstream.pkcs11Sign.bind(upstream);
    upstream.pkcs11Sign = async (input) => {
      const result = await original(input);
      if (result.kind === 'pending') pendingIds.push(result.requestId);
      return result;
    };
    daemon = await startTestDaemon(config, { upstream });
    writeFileSync(join(dir, 'msg'), 'signed through the module');
  });
  afterAll(async () => {
    await daemon?.close();
    await svc?.close();
  });

  it('lists every tenant as a token and its key by CKA_ID', async () => {
    const slots = await tool(['--list-slots']);
    for (const tenant of Object.keys(TENANTS)) expect(slots.stdout).toContain(`${tenant} token`);
    const objects = await tool(['--list-objects', '--token-label', 'e2e-p256 token']);
    expect(objects.stdout.toLowerCase()).toContain(id('e2e-p256'));
  });

  it('ECDSA P-256, P-521 and secp256k1 over a digest; openssl verifies', async () => {
    for (const [tenant, hash] of [
      ['e2e-p256', 'sha256'],
      ['e2e-p521', 'sha512'],
      ['e2e-k256', 'sha256'],
    ] as const) {
      const digest = join(dir, `${tenant}.digest`);
      await run('openssl', ['dgst', `-${hash}`, '-binary', '-out', digest, join(dir, 'msg')]);
      const sig = join(dir, `${tenant}.sig`);
      const args = ['--token-label', `${tenant} token`, '--sign', '--id', id(tenant), '-m', 'ECDSA'];
      await tool([...args, '--signature-format', 'openssl', '--input-file', digest, '--output-file', sig]);
      expect(await verify(hash, tenant, sig)).toBe('Verified OK');
    }
  });

  it("secp256k1 is shown as CKK_EC with SEC 2's curve OID in CKA_EC_PARAMS", async () => {
    const objects = await tool(['--list-objects', '--type', 'pubkey', '--token-label', 'e2e-k256 token']);
    expect(objects.stdout).toMatch(/EC_POINT\s+256 bits/);
    // pkcs11-tool prints CKA_EC_PARAMS as hex: the DER OBJECT IDENTIFIER 1.3.132.0.10.
    expect(objects.stdout.toLowerCase()).toContain('06052b8104000a');
  });

  it('Ed25519 is CKK_EC_EDWARDS with CKM_EDDSA; pkcs11-tool -m EDDSA signs the file itself, openssl pkeyutl -rawin verifies', async () => {
    const label = 'e2e-ed25519 token';
    const objects = await tool(['--list-objects', '--type', 'pubkey', '--token-label', label]);
    expect(objects.stdout).toMatch(/Public Key Object; EC_EDWARDS/);
    expect(objects.stdout.toLowerCase()).toContain(id('e2e-ed25519'));
    const mechanisms = await tool(['--list-mechanisms', '--token-label', label]);
    expect(mechanisms.stdout).toMatch(/EDDSA.*sign/);
    expect(mechanisms.stdout).not.toMatch(/ECDSA|RSA-PKCS/);
    const sig = join(dir, 'ed25519.sig');
    const args = ['--token-label', label, '--sign', '--id', id('e2e-ed25519'), '-m', 'EDDSA'];
    await tool([...args, '--input-file', join(dir, 'msg'), '--output-file', sig]);
    expect(readFileSync(sig)).toHaveLength(64);
    const pub = keys.get('e2e-ed25519')?.pemFile as string;
    const verified = await run(
      'openssl',
      ['pkeyutl', '-verify', '-pubin', '-inkey', pub, '-rawin', '-in', join(dir, 'msg'), '-sigfile', sig],
      { encoding: 'utf8' },
    );
    expect(verified.stdout).toContain('Signature Verified Successfully');
    // `signbridge status` (protocol version 2) lists the key, with no note.
    const status = await runCliAsync(['status', '--socket', daemon.socketPath, '--json']);
    expect(status.code, status.stderr).toBe(0);
    const report = JSON.parse(status.stdout) as { tokens: Array<{ tenant: string; note?: string; keys: unknown[] }> };
    const ed = report.tokens.find((t) => t.tenant === 'e2e-ed25519');
    expect(ed?.keys).toHaveLength(1);
    expect(ed?.note).toBeUndefined();
  });

  it('Ed25519: a message past 4,096 bytes is CKR_DATA_LEN_RANGE, and nothing reaches the service', async () => {
    const signedEntries = async () =>
      (await svc.store.audit.read(0, 100_000)).filter((e) => e.tenantId === 'e2e-ed25519' && e.outcome === 'signed')
        .length;
    const before = await signedEntries();
    const big = join(dir, 'ed25519-big');
    writeFileSync(big, Buffer.alloc(4097, 0x61));
    const args = ['--token-label', 'e2e-ed25519 token', '--sign', '--id', id('e2e-ed25519'), '-m', 'EDDSA'];
    const out = await run('pkcs11-tool', ['--module', MODULE, ...args, '--input-file', big], {
      env: { ...process.env, SIGNBRIDGE_SOCKET: daemon.socketPath },
      encoding: 'utf8',
      timeout: 30_000,
    }).then(
      () => 'signed',
      (err: { stdout?: string; stderr?: string }) => `${err.stdout ?? ''}${err.stderr ?? ''}`,
    );
    expect(out).toMatch(/CKR_DATA_LEN_RANGE/);
    // pkcs11-tool signs a file in parts: the part that passes the bound is refused.
    expect(out).toMatch(/more than 4096 bytes of input for CKM_EDDSA/);
    expect(await signedEntries()).toBe(before);
  });

  it('RSA PKCS#1 v1.5 and PSS, hashed by the module; openssl verifies', async () => {
    const base = ['--token-label', 'e2e-rsa token', '--sign', '--id', id('e2e-rsa'), '--input-file', join(dir, 'msg')];
    await tool([...base, '-m', 'SHA256-RSA-PKCS', '--output-file', join(dir, 'rsa.sig')]);
    expect(await verify('sha256', 'e2e-rsa', join(dir, 'rsa.sig'))).toBe('Verified OK');
    await tool([...base, '-m', 'SHA384-RSA-PKCS-PSS', '--output-file', join(dir, 'pss.sig')]);
    const pss = ['-sigopt', 'rsa_padding_mode:pss', '-sigopt', 'rsa_pss_saltlen:auto'];
    expect(await verify('sha384', 'e2e-rsa', join(dir, 'pss.sig'), pss)).toBe('Verified OK');
  });

  /** pkcs11-tool's output when it fails (stdout and stderr), or 'signed' when it did not. */
  const failure = (args: string[], env: NodeJS.ProcessEnv = {}) =>
    tool(args, env).then(
      () => 'signed',
      (err: { stderr?: string; stdout?: string }) => `${err.stdout ?? ''}${err.stderr ?? ''}`,
    );

  it('a key id the token does not hold, and a mechanism the key does not take: refused, nothing signed', async () => {
    const signedBefore = (await svc.store.signatures.list('e2e-p256', 100)).length;
    const digest = join(dir, 'refused.digest');
    await run('openssl', ['dgst', '-sha256', '-binary', '-out', digest, join(dir, 'msg')]);
    const out = ['--input-file', digest, '--output-file', join(dir, 'refused.sig')];
    const absent = await failure([
      '--token-label',
      'e2e-p256 token',
      '--sign',
      '--id',
      'deadbeef',
      '-m',
      'ECDSA',
      ...out,
    ]);
    expect(absent).toMatch(/[Pp]rivate key not found/);
    const rsaOnEc = await failure([
      '--token-label',
      'e2e-p256 token',
      '--sign',
      '--id',
      id('e2e-p256'),
      '-m',
      'SHA256-RSA-PKCS',
      ...out,
    ]);
    expect(rsaOnEc).toMatch(/CKR_MECHANISM_INVALID|CKR_KEY_TYPE_INCONSISTENT/);
    expect((await svc.store.signatures.list('e2e-p256', 100)).length).toBe(signedBefore);
  });

  it("a policy denial reaches the tool as CKR_FUNCTION_REJECTED, with the service's reason in the module log", async () => {
    const digest = join(dir, 'deny.digest');
    await run('openssl', ['dgst', '-sha256', '-binary', '-out', digest, join(dir, 'msg')]);
    const args = ['--token-label', 'e2e-p256 token', '--sign', '--id', id('e2e-p256'), '-m', 'ECDSA'];
    const failed = await tool([...args, '--input-file', digest, '--output-file', join(dir, 'deny.sig')], {
      SIGNBRIDGE_PROJECT: 'blocked',
      SIGNBRIDGE_LOG: 'error',
    }).then(
      () => undefined,
      (err: { stderr?: string; stdout?: string }) => `${err.stdout ?? ''}${err.stderr ?? ''}`,
    );
    // pkcs11-tool prints 0x200 without a name for CKR_FUNCTION_REJECTED.
    expect(failed).toMatch(/CKR_FUNCTION_REJECTED|rv = unknown PKCS11 error \(0x200\)/);
    expect(failed).toMatch(/policy_denied: vulnerable: blocked project \(vuln_id CVE-2099-1\)/);
  });

  it('without SIGNBRIDGE_LOG, a policy denial still tells the person why: one line on stderr; =off silences it', async () => {
    const digest = join(dir, 'deny.digest');
    await run('openssl', ['dgst', '-sha256', '-binary', '-out', digest, join(dir, 'msg')]);
    const args = ['--token-label', 'e2e-p256 token', '--sign', '--id', id('e2e-p256'), '-m', 'ECDSA'];
    const deny = (log: string) =>
      tool([...args, '--input-file', digest, '--output-file', join(dir, 'deny.sig')], {
        SIGNBRIDGE_PROJECT: 'blocked',
        SIGNBRIDGE_LOG: log,
      }).then(
        () => ({ stdout: '', stderr: 'signed although denied' }),
        (err: { stderr?: string; stdout?: string }) => ({ stdout: err.stdout ?? '', stderr: err.stderr ?? '' }),
      );
    const unset = await deny('');
    const lines = unset.stderr.split('\n').filter((l) => l.startsWith('signbridge: '));
    // One line per refused request: pkcs11-tool asks twice (C_Sign, then C_SignUpdate + C_SignFinal).
    expect(lines.length, unset.stderr).toBeGreaterThanOrEqual(1);
    const requests = new Set<string>();
    for (const line of lines) {
      const m = line.match(
        /^signbridge: policy denied the signature for tenant e2e-p256: .*blocked project.* \(POLICY_DENIED, request ([0-9a-f-]{36})\)$/,
      );
      expect(m, line).not.toBeNull();
      requests.add(m?.[1] as string);
    }
    expect(requests.size).toBe(lines.length);
    expect(unset.stdout).not.toContain('signbridge:');
    const off = await deny('off');
    expect(off.stderr).toMatch(/unknown PKCS11 error \(0x200\)|CKR_FUNCTION_REJECTED/);
    expect(off.stderr).not.toContain('signbridge:');
  });

  it('a pending approval: C_Sign waits (POLL through the daemon) and returns the signature once approved', async () => {
    const digest = join(dir, 'approve.digest');
    await run('openssl', ['dgst', '-sha256', '-binary', '-out', digest, join(dir, 'msg')]);
    const sig = join(dir, 'approve.sig');
    const args = ['--token-label', 'e2e-p256 token', '--sign', '--id', id('e2e-p256'), '-m', 'ECDSA'];
    const signing = tool([...args, '--signature-format', 'openssl', '--input-file', digest, '--output-file', sig], {
      SIGNBRIDGE_PROJECT: 'release',
      SIGNBRIDGE_APPROVAL_TIMEOUT: '60',
      SIGNBRIDGE_POLL_INTERVAL_MS: '100',
    });
    const deadline = Date.now() + 20_000;
    while (pendingIds.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(pendingIds).toHaveLength(1);
    await new Promise((r) => setTimeout(r, 500)); // the module is polling now
    const approver = await svc.apiKey('approver', 'e2e-p256');
    const decided = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 'e2e-p256',
      request_id: pendingIds[0],
    });
    expect(decided.status, JSON.stringify(decided.body)).toBe(200);
    await signing;
    expect(await verify('sha256', 'e2e-p256', sig)).toBe('Verified OK');
  });
  // Issue 21's reproduction: pkcs11-tool retries by itself (C_Sign, then C_SignUpdate + C_SignFinal) when the
  // module gives up waiting (SIGNBRIDGE_APPROVAL_TIMEOUT); each retry opened a new pending request for the same
  // digest. Now the retry continues the request the first attempt opened.
  describe("pkcs11-tool's own retry of a signature held for approval", () => {
    /** pkcs11-tool signing `message`'s SHA-256; resolves with its stderr when it fails, its stdout when it signs. */
    const signDigest = async (message: string, approvalTimeout: string) => {
      const msg = join(dir, `${message}.msg`);
      writeFileSync(msg, message);
      const digest = join(dir, `${message}.digest`);
      await run('openssl', ['dgst', '-sha256', '-binary', '-out', digest, msg]);
      const sig = join(dir, `${message}.sig`);
      const args = ['--token-label', 'e2e-p256 token', '--sign', '--id', id('e2e-p256'), '-m', 'ECDSA'];
      const signed = tool([...args, '--signature-format', 'openssl', '--input-file', digest, '--output-file', sig], {
        SIGNBRIDGE_PROJECT: 'release',
        SIGNBRIDGE_APPROVAL_TIMEOUT: approvalTimeout,
        SIGNBRIDGE_POLL_INTERVAL_MS: '100',
      }).then(
        () => ({ ok: true, stderr: '' }),
        (err: { stderr?: string }) => ({ ok: false, stderr: err.stderr ?? '' }),
      );
      return { msg, sig, outcome: await signed, hash: readFileSync(digest).toString('base64') };
    };
    const requestsFor = (hash: string) =>
      svc.run<{ id: string; status: string }>(
        sql`SELECT id, status FROM pending_requests WHERE tenant_id = 'e2e-p256' AND hash = ${hash}`,
      );

    it("continues the first attempt's request; once approved, the next run gets the signature", async () => {
      const before = pendingIds.length;
      const timedOut = await signDigest('retried by pkcs11-tool', '1');
      expect(timedOut.outcome.ok).toBe(false);
      // Both attempts of the one run (C_Sign, then C_SignUpdate + C_SignFinal) gave up on the same request.
      const gaveUp = [...timedOut.outcome.stderr.matchAll(/not approved within 1 s .*\(request ([0-9a-f-]{36})\)/g)];
      expect(
        gaveUp.map((m) => m[1]),
        timedOut.outcome.stderr,
      ).toHaveLength(2);
      expect(new Set(gaveUp.map((m) => m[1])).size).toBe(1);
      const seen = pendingIds.slice(before);
      expect(new Set(seen)).toEqual(new Set([gaveUp[0]?.[1]]));
      expect(await requestsFor(timedOut.hash)).toEqual([{ id: seen[0], status: 'pending_approval' }]);

      const approver = await svc.apiKey('approver', 'e2e-p256');
      const decided = await callAction(svc.app, approver, 'approve_sign', {
        tenant_id: 'e2e-p256',
        request_id: seen[0],
      });
      expect(decided.status, JSON.stringify(decided.body)).toBe(200);
      const again = await signDigest('retried by pkcs11-tool', '60');
      expect(again.outcome.ok, again.outcome.stderr).toBe(true);
      const pub = keys.get('e2e-p256')?.pemFile as string;
      const checked = await run('openssl', ['dgst', '-sha256', '-verify', pub, '-signature', again.sig, again.msg], {
        encoding: 'utf8',
      });
      expect(checked.stdout.trim()).toBe('Verified OK');
      expect(await requestsFor(timedOut.hash)).toEqual([{ id: seen[0], status: 'approved' }]);
    });

    it('after a rejection, the next run is refused at once, without a new request', async () => {
      const before = pendingIds.length;
      const timedOut = await signDigest('rejected for pkcs11-tool', '1');
      expect(timedOut.outcome.ok).toBe(false);
      const requestId = pendingIds[before];
      const approver = await svc.apiKey('approver', 'e2e-p256');
      const decided = await callAction(svc.app, approver, 'approve_sign', {
        tenant_id: 'e2e-p256',
        request_id: requestId,
        decision: 'reject',
        reason: 'not a release commit',
      });
      expect(decided.status).toBe(200);
      const waitedBefore = pendingIds.length;
      const refused = await signDigest('rejected for pkcs11-tool', '60');
      expect(refused.outcome.ok).toBe(false);
      expect(refused.outcome.stderr).toMatch(/an approver rejected the signature .*not a release commit/);
      expect(refused.outcome.stderr).toContain(requestId);
      expect(pendingIds.length).toBe(waitedBefore); // the SIGN itself was refused: nothing waited
      expect(await requestsFor(timedOut.hash)).toEqual([{ id: requestId, status: 'rejected' }]);
    });
  });

  it("one tenant's revoked API key: its slot says why, the other token lists and signs in a new process", async () => {
    const created = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: 'e2e-revoked',
      key_spec: 'ECC_NIST_P256',
    });
    expect(created.status).toBe(201);
    const revoked = await svc.apiKey('signer', 'e2e-revoked');
    const id16 = /^sbk_([0-9a-f]{16})_/.exec(revoked)?.[1] as string;
    expect(await svc.store.apiKeys.revoke(id16, new Date().toISOString())).toBe(true);
    const own = await startTestDaemon(
      remoteConfig(url, [
        { tenantId: 'e2e-p256', label: 'e2e-p256 token', apiKey: await svc.apiKey('signer', 'e2e-p256') },
        { tenantId: 'e2e-revoked', label: 'e2e-revoked token', apiKey: revoked },
      ]),
    );
    try {
      const env = { SIGNBRIDGE_SOCKET: own.socketPath, SIGNBRIDGE_LOG: 'warn' };
      const slots = await tool(['--list-slots'], env);
      expect(slots.stdout).toContain('e2e-p256 token');
      expect(slots.stdout).toContain('signbridge e2e-revoked: UNAUTHENTICATED');
      expect(slots.stderr).toMatch(/tenant e2e-revoked\) has no keys: UNAUTHENTICATED: .*unauthorized/);
      const digest = join(dir, 'isolated.digest');
      await run('openssl', ['dgst', '-sha256', '-binary', '-out', digest, join(dir, 'msg')]);
      const sig = join(dir, 'isolated.sig');
      const args = ['--token-label', 'e2e-p256 token', '--sign', '--id', id('e2e-p256'), '-m', 'ECDSA'];
      await tool([...args, '--signature-format', 'openssl', '--input-file', digest, '--output-file', sig], env);
      expect(await verify('sha256', 'e2e-p256', sig)).toBe('Verified OK');
    } finally {
      await own.close();
    }
  });

  it('a key rotated after the tool found it and before the service signs: CKR_KEY_CHANGED, nothing signed', async () => {
    const digest = join(dir, 'rotated.digest');
    await run('openssl', ['dgst', '-sha256', '-binary', '-out', digest, join(dir, 'msg')]);
    const args = ['--token-label', 'e2e-rotated token', '--sign', '--id', id('e2e-rotated'), '-m', 'ECDSA'];
    const signedBefore = (await svc.store.signatures.list('e2e-rotated', 100)).length;
    rotateInTheWindow.add('e2e-rotated');
    const failed = await tool([...args, '--input-file', digest, '--output-file', join(dir, 'rotated.sig')], {
      SIGNBRIDGE_LOG: 'error',
    }).then(
      () => 'signed',
      (err: { stderr?: string; stdout?: string }) => `${err.stdout ?? ''}${err.stderr ?? ''}`,
    );
    expect(rotateInTheWindow.has('e2e-rotated'), 'the seam rotated').toBe(false);
    // C_Sign fails with CKR_KEY_CHANGED (0x65); pkcs11-tool then tries C_SignFinal, which the key no longer found
    // (the daemon dropped it from its cache) refuses too.
    expect(failed).toMatch(/SIGN failed: KEY_CHANGED: key_changed: key [0-9a-f-]+ is no longer tenant e2e-rotated's/);
    expect(failed).toMatch(/\(CKR 0x65\)/);
    expect((await svc.store.signatures.list('e2e-rotated', 100)).length).toBe(signedBefore);
    const entries = await svc.store.audit.read(0, 1_000_000);
    expect(entries.filter((e) => e.tenantId === 'e2e-rotated' && e.outcome === 'signed')).toEqual([]);
  });
});
