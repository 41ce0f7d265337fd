// The /v1 signing API's conformance, with its two clients: the `signbridge` CLI (`signbridge sign FILE` and
// `signbridge digest FILE`, the real CLI against a real service process: SoftHSM for RSA and EC, the software key
// store for ML-DSA and SM2) and the daemon's remote upstream (daemon/upstream/remote-upstream.ts, what the PKCS#11
// module's signatures go through: pkcs11_sign and get_public_key over HTTP). Every signature is checked by a
// verifier that owes nothing to the signing path: ML-DSA over the whole file (node:crypto on Node 24, noble on Node
// 20, through the thin src/crypto/ml-dsa-verify.ts), `openssl pkeyutl` with KMS's distinguishing ID for SM2,
// `openssl dgst` for RSA and EC, node:crypto for the upstream's. Approval (202) with --request-id and --wait; the
// errors a user meets, and those the upstream maps to the daemon's wire statuses.
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash, constants as cryptoConstants, verify as cryptoVerify, randomBytes } from 'node:crypto';
import { closeSync, existsSync, openSync, readFileSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RemoteUpstream } from '../../daemon/upstream/remote-upstream.js';
import { UpstreamError } from '../../daemon/upstream/upstream.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { type MlDsaLevel, mlDsaLevel, verifyMlDsa } from '../../src/crypto/ml-dsa-verify.js';
import { parseMlDsaSpki } from '../../src/crypto/spki.js';
import { WireStatus } from '../../wire/wire.js';
import { keySource } from '../daemon/helpers.js';
import { CLI, createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { loginEnv, startCli } from '../helpers/cli-child.js';
import { makeTempDir } from '../helpers/service.js';

const dir = makeTempDir('sb-sign-file-');
const dataDir = join(dir, 'data');
let server: ServerProcess;
const signers = new Map<string, string>();
const publicKeys = new Map<string, string>();
let approver: string;

const SPECS: { spec: KeySpec; algorithm?: string }[] = [
  { spec: 'ML_DSA_44' },
  { spec: 'ML_DSA_65' },
  { spec: 'ML_DSA_87' },
  { spec: 'SM2' },
  { spec: 'RSA_2048', algorithm: 'RSASSA_PSS_SHA_384' },
  { spec: 'ECC_NIST_P384' },
];
const tenantOf = (spec: string) => `file-${spec.toLowerCase().replaceAll('_', '-')}`;

/** A file bigger than the CLI's 1 MiB read chunk, so the streamed path takes several chunks. */
const artifact = join(dir, 'artifact.bin');
writeFileSync(artifact, Buffer.concat([randomBytes(3 * 1024 * 1024 + 17), Buffer.from('end of the artifact\n')]));

beforeAll(async () => {
  const policy = join(dir, 'policy.yaml');
  writeFileSync(policy, 'version: 1\nrules:\n  environments: { requireApproval: [production] }\n');
  server = await startServerProcess(['--data-dir', dataDir], { SIGNBRIDGE_POLICY_FILE: policy });
  const operator = createApiKeyCli(dataDir, 'operator');
  for (const { spec } of SPECS) {
    const tenant = tenantOf(spec);
    const created = await postAction(server.url, 'create_tenant', operator, { tenant_id: tenant, key_spec: spec });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    signers.set(spec, createApiKeyCli(dataDir, 'signer', tenant));
    const pub = await postAction(server.url, 'get_public_key', signers.get(spec) as string, { tenant_id: tenant });
    publicKeys.set(spec, pub.body.public_key_pem as string);
  }
  approver = createApiKeyCli(dataDir, 'approver', tenantOf('ML_DSA_65'));
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

/** The CLI as a build host runs it: service URL and key from the environment, nothing from the developer's. */
function cliEnv(spec: KeySpec): NodeJS.ProcessEnv {
  return { ...loginEnv(dir), SIGNBRIDGE_SERVICE_URL: server.url, SIGNBRIDGE_API_KEY: signers.get(spec) as string };
}

function openssl(args: string[]): string {
  try {
    return execFileSync('openssl', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    return `failed: ${(err as { stderr?: string }).stderr ?? err}`;
  }
}

/** Verifies `signature` over the file with a verifier that owes nothing to signbridge. */
function verifyIndependently(spec: KeySpec, file: string, signature: Buffer): boolean {
  const pem = publicKeys.get(spec) as string;
  const pemFile = join(dir, `${spec}.pub.pem`);
  writeFileSync(pemFile, pem);
  const sigFile = join(dir, `${spec}.check.sig`);
  writeFileSync(sigFile, signature);
  if (spec.startsWith('ML_DSA')) {
    const der = Buffer.from(pem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
    const raw = parseMlDsaSpki(der)?.publicKey ?? Buffer.alloc(0);
    return verifyMlDsa(mlDsaLevel(spec) as MlDsaLevel, raw, { message: readFileSync(file) }, signature);
  }
  if (spec === 'SM2') {
    const out = openssl([
      'pkeyutl',
      '-verify',
      '-pubin',
      '-inkey',
      pemFile,
      '-rawin',
      '-digest',
      'sm3',
      '-pkeyopt',
      'distid:1234567812345678',
      '-in',
      file,
      '-sigfile',
      sigFile,
    ]);
    return out.includes('Signature Verified Successfully');
  }
  const pss = spec.startsWith('RSA') ? ['-sigopt', 'rsa_padding_mode:pss', '-sigopt', 'rsa_pss_saltlen:digest'] : [];
  // Both SPECS rows of these families sign SHA-384 (RSASSA_PSS_SHA_384, P-384's own ECDSA_SHA_384).
  return openssl(['dgst', '-sha384', '-verify', pemFile, ...pss, '-signature', sigFile, file]).includes('Verified OK');
}

describe.each(SPECS.map((s) => [s.spec, s.algorithm]))('%s', (spec, algorithm) => {
  it('`signbridge sign FILE` signs, verifies and writes FILE.sig; an independent verifier accepts it', () => {
    const file = join(dir, `${spec}.bin`);
    writeFileSync(file, readFileSync(artifact));
    const res = runCli(
      ['sign', '--tenant', tenantOf(spec), file, ...(algorithm ? ['--algorithm', algorithm] : [])],
      cliEnv(spec),
    );
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toMatch(/verified, written to .*\.bin\.sig/);
    const signature = readFileSync(`${file}.sig`);
    expect(verifyIndependently(spec, file, signature)).toBe(true);
    // The verifier really checks: one changed byte in the file and it refuses.
    const other = join(dir, `${spec}.other.bin`);
    writeFileSync(other, Buffer.concat([readFileSync(file), Buffer.from('x')]));
    expect(verifyIndependently(spec, other, signature)).toBe(false);
  });

  it('`signbridge digest FILE` prints the sign request whose signature verifies over the file', async () => {
    const res = runCli(
      ['digest', '--tenant', tenantOf(spec), artifact, ...(algorithm ? ['--algorithm', algorithm] : [])],
      cliEnv(spec),
    );
    expect(res.code, res.stderr).toBe(0);
    const body = JSON.parse(res.stdout) as Record<string, string>;
    expect(body).toMatchObject({ action: 'sign', tenant_id: tenantOf(spec) });
    const expected = spec.startsWith('ML_DSA') ? 'ML_DSA_SHAKE_256' : spec === 'SM2' ? 'SM2DSA' : undefined;
    expect(body.algorithm).toBe(expected ?? algorithm ?? 'ECDSA_SHA_384');
    const { action: _action, ...rest } = body;
    const signed = await postAction(server.url, 'sign', signers.get(spec) as string, rest);
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    expect(verifyIndependently(spec, artifact, Buffer.from(signed.body.signature as string, 'base64'))).toBe(true);
  });
});

describe('many files', () => {
  const spec: KeySpec = 'ECC_NIST_P384';
  const tenant = tenantOf(spec);

  it('are signed in one sign_batch request, each FILE.sig verified independently; an unreadable one fails alone', () => {
    const files = Array.from({ length: 5 }, (_, i) => join(dir, `many-${i}.bin`));
    for (const [i, f] of files.entries()) writeFileSync(f, `release part ${i}\n${randomBytes(64).toString('hex')}`);
    const missing = join(dir, 'many-missing.bin');
    const res = runCli(['sign', '--tenant', tenant, ...files.slice(0, 2), missing, ...files.slice(2)], cliEnv(spec));
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/many-missing\.bin: .*ENOENT/);
    expect(res.stderr).toMatch(/signed 5 of 6 files \(1 batch request\)/);
    for (const f of files) expect(verifyIndependently(spec, f, readFileSync(`${f}.sig`))).toBe(true);
    // Each file has its own signature: another file's does not verify.
    expect(verifyIndependently(spec, files[0] as string, readFileSync(`${files[1]}.sig`))).toBe(false);

    const withOut = runCli(
      ['sign', '--tenant', tenant, ...files.slice(0, 2), '--out', join(dir, 'x.sig')],
      cliEnv(spec),
    );
    expect(withOut.code).toBe(1);
    expect(withOut.stderr).toMatch(/--out names one signature file/);
  });

  it('200 ML-DSA-87 files: an answer of 1.2 MB of signatures is read whole, every signature verified', () => {
    const mlDsa: KeySpec = 'ML_DSA_87';
    const files = Array.from({ length: 200 }, (_, i) => join(dir, `pq-${i}.bin`));
    for (const [i, f] of files.entries()) writeFileSync(f, `post-quantum part ${i}\n`);
    const res = runCli(['sign', '--tenant', tenantOf(mlDsa), ...files], cliEnv(mlDsa));
    expect(res.code, res.stderr.slice(-500)).toBe(0);
    expect(res.stderr).toMatch(/signed 200 of 200 files \(1 batch request\)/);
    for (const f of [files[0], files[199]] as string[]) {
      expect(verifyIndependently(mlDsa, f, readFileSync(`${f}.sig`))).toBe(true);
    }
  });
});

describe('a large file', () => {
  it('is streamed: a 1 GiB file is signed and verified by a process that never holds it (max RSS far below 1 GiB)', () => {
    const spec: KeySpec = 'ECC_NIST_P384';
    const big = join(dir, 'big.bin');
    closeSync(openSync(big, 'w'));
    truncateSync(big, 1024 ** 3); // sparse: no disk space, but 1 GiB to read
    // python3 reports the child's peak resident set (KiB) after it exits.
    const measure = [
      '-c',
      'import resource,subprocess,sys; r=subprocess.run(sys.argv[1:]); ' +
        'print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(r.returncode)',
      process.execPath,
      CLI,
      'sign',
      '--tenant',
      tenantOf(spec),
      big,
    ];
    const res = spawnSync('python3', measure, { encoding: 'utf8', env: { ...process.env, ...cliEnv(spec) } });
    expect(res.status, res.stderr).toBe(0);
    const maxRssKiB = Number(res.stdout.trim());
    expect(maxRssKiB).toBeGreaterThan(0);
    expect(maxRssKiB).toBeLessThan(300 * 1024);
    expect(readFileSync(`${big}.sig`).length).toBeGreaterThan(64);
  });
});

describe('approval', () => {
  const spec: KeySpec = 'ML_DSA_65';
  const tenant = tenantOf(spec);
  const approve = (requestId: string, decision = 'approve') =>
    postAction(server.url, 'approve_sign', approver, { tenant_id: tenant, request_id: requestId, decision });

  it('a 202 prints the request id and exits 3; --request-id collects the signature once approved', async () => {
    const file = join(dir, 'prod.bin');
    writeFileSync(file, 'a production release\n');
    const asked = runCli(['sign', '--tenant', tenant, file, '--environment', 'production'], cliEnv(spec));
    expect(asked.code, asked.stderr).toBe(3);
    const requestId = asked.stdout.trim();
    expect(requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(asked.stderr).toContain(`--request-id ${requestId}`);
    expect(existsSync(`${file}.sig`)).toBe(false);

    const early = runCli(['sign', '--tenant', tenant, file, '--request-id', requestId], cliEnv(spec));
    expect(early.code).toBe(3);
    expect((await approve(requestId)).status).toBe(200);
    const collected = runCli(['sign', '--tenant', tenant, file, '--request-id', requestId], cliEnv(spec));
    expect(collected.code, collected.stderr).toBe(0);
    expect(verifyIndependently(spec, file, readFileSync(`${file}.sig`))).toBe(true);
  });

  it('a held batch of files is one request: its id printed (exit 3), approved once, --request-id collects every file', async () => {
    const files = [0, 1, 2].map((i) => join(dir, `many-prod-${i}.bin`));
    for (const f of files) writeFileSync(f, `production ${f}\n`);
    const asked = runCli(['sign', '--tenant', tenant, ...files, '--environment', 'production'], cliEnv(spec));
    expect(asked.code, asked.stderr).toBe(3);
    const requestId = asked.stdout.trim();
    expect(requestId).toMatch(/^[0-9a-f-]{36}$/);
    expect(asked.stderr).toContain(`request ${requestId} (3 files) is waiting`);
    expect(asked.stderr).toContain(`${files.join(' ')} --request-id ${requestId}`);
    for (const f of files) expect(existsSync(`${f}.sig`)).toBe(false);

    const early = runCli(['sign', '--tenant', tenant, ...files, '--request-id', requestId], cliEnv(spec));
    expect(early.code, early.stderr).toBe(3);
    expect((await approve(requestId)).status).toBe(200);
    // Collected with the files in another order: the service releases the batch only against the same digests.
    const reordered = runCli(
      ['sign', '--tenant', tenant, ...[...files].reverse(), '--request-id', requestId],
      cliEnv(spec),
    );
    expect(reordered.code).toBe(1);
    expect(reordered.stderr).toMatch(/hash_mismatch/);
    // With --log-proof the collection asks for the log proofs too (Prefer: wait-for-log), kept beside each signature.
    const collected = runCli(
      ['sign', '--tenant', tenant, ...files, '--request-id', requestId, '--log-proof'],
      cliEnv(spec),
    );
    expect(collected.code, collected.stderr).toBe(0);
    expect(collected.stderr).toMatch(/signed 3 of 3 files \(1 batch request\); 3 log proofs written/);
    for (const f of files) {
      expect(verifyIndependently(spec, f, readFileSync(`${f}.sig`))).toBe(true);
      expect(readFileSync(`${f}.sig.tlog-proof`, 'utf8').startsWith('c2sp.org/tlog-proof@v1\n')).toBe(true);
    }
  });

  it('--wait on a held batch waits for its one approval, then writes every signature', async () => {
    const files = [0, 1].map((i) => join(dir, `many-wait-${i}.bin`));
    for (const f of files) writeFileSync(f, `waited ${f}\n`);
    const cli = startCli(
      ['sign', '--tenant', tenant, ...files, '--environment', 'production', '--wait', '--poll-interval', '0.2'],
      cliEnv(spec),
    );
    await cli.waitForStderr(/request (\S+) \(2 files\) is waiting/);
    const requestId = /request (\S+) \(2 files\) is waiting/.exec(cli.stderr())?.[1] as string;
    expect((await approve(requestId)).status).toBe(200);
    const done = await cli.done;
    expect(done.code, done.stderr).toBe(0);
    for (const f of files) expect(verifyIndependently(spec, f, readFileSync(`${f}.sig`))).toBe(true);
  });

  it('--wait shows progress, then writes the signature once an approver approves', async () => {
    const file = join(dir, 'prod-wait.bin');
    writeFileSync(file, 'another production release\n');
    const cli = startCli(
      ['sign', '--tenant', tenant, file, '--environment', 'production', '--wait', '--poll-interval', '0.2'],
      cliEnv(spec),
    );
    await cli.waitForStderr(/request (\S+) is waiting/);
    const requestId = /request (\S+) is waiting/.exec(cli.stderr())?.[1] as string;
    await cli.waitForStderr(/waiting for \S+: pending_approval/);
    expect((await approve(requestId)).status).toBe(200);
    const done = await cli.done;
    expect(done.code, done.stderr).toBe(0);
    expect(verifyIndependently(spec, file, readFileSync(`${file}.sig`))).toBe(true);
  });

  it('--wait ends with the reason and a non-zero exit when the request is rejected', async () => {
    const file = join(dir, 'prod-rejected.bin');
    writeFileSync(file, 'a release nobody wants\n');
    const cli = startCli(
      ['sign', '--tenant', tenant, file, '--environment', 'production', '--wait', '--poll-interval', '0.2'],
      cliEnv(spec),
    );
    await cli.waitForStderr(/request (\S+) is waiting/);
    const requestId = /request (\S+) is waiting/.exec(cli.stderr())?.[1] as string;
    expect((await approve(requestId, 'reject')).status).toBe(200);
    const done = await cli.done;
    expect(done.code).toBe(1);
    expect(done.stderr).toContain('request_rejected');
    expect(existsSync(`${file}.sig`)).toBe(false);
  });
});

describe('errors', () => {
  const spec: KeySpec = 'SM2';
  const tenant = tenantOf(spec);

  it('an algorithm the key does not take names the allowed ones, and nothing is signed', () => {
    const res = runCli(['sign', '--tenant', tenant, artifact, '--algorithm', 'ECDSA_SHA_256'], cliEnv(spec));
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('--algorithm ECDSA_SHA_256 cannot be used with a SM2 key; allowed: SM2DSA');
  });

  it('a missing file, no service, no key: a message and exit 1', () => {
    const missing = runCli(['sign', '--tenant', tenant, join(dir, 'nope.bin')], cliEnv(spec));
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('nope.bin: ENOENT');
    const noService = runCli(['digest', '--tenant', tenant, artifact], { ...loginEnv(dir) });
    expect(noService.code).toBe(1);
    expect(noService.stderr).toContain('no service: pass --service-url URL');
    const noKey = runCli(['digest', '--tenant', tenant, artifact], {
      ...loginEnv(dir),
      SIGNBRIDGE_SERVICE_URL: server.url,
    });
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toContain('no API key');
  });

  it('another tenant than the key allows: the service refusal, not retryable', () => {
    const res = runCli(['sign', '--tenant', tenantOf('ML_DSA_44'), artifact], cliEnv(spec));
    expect(res.code).toBe(1);
    expect(res.stderr).toMatch(/signbridge sign: forbidden: /);
    expect(res.stderr).not.toContain('try again');
  });

  it('a service that cannot be reached says to try again', () => {
    const res = runCli(['digest', '--tenant', tenant, artifact], {
      ...cliEnv(spec),
      SIGNBRIDGE_SERVICE_URL: 'http://127.0.0.1:1',
    });
    expect(res.code).toBe(1);
    expect(res.stderr).toContain('cannot reach the service');
    expect(res.stderr).toContain('(temporary: try again)');
  });
});

describe("the daemon's remote upstream (pkcs11_sign over HTTP)", () => {
  const ec = tenantOf('ECC_NIST_P384');
  const rsa = tenantOf('RSA_2048');
  const message = Buffer.from('an object file the module signs');
  const digest = createHash('sha384').update(message).digest();
  let upstream: RemoteUpstream;
  beforeAll(() => {
    upstream = new RemoteUpstream({
      url: server.url,
      tenantApiKeys: new Map([
        [ec, keySource(signers.get('ECC_NIST_P384') as string)],
        [rsa, keySource(signers.get('RSA_2048') as string)],
        // A key of another tenant: what a daemon configured with the wrong key sends.
        [tenantOf('SM2'), keySource(signers.get('ECC_NIST_P384') as string)],
      ]),
      timeoutMs: 15_000,
    });
  });
  afterAll(() => upstream?.close());

  it('reads the public key and signs a digest with P-384 and RSA PSS, each verified by node:crypto', async () => {
    const ecKey = await upstream.getPublicKey(ec);
    expect(ecKey.publicKeyPem).toBe(publicKeys.get('ECC_NIST_P384'));
    const ecSigned = await upstream.pkcs11Sign({
      tenantId: ec,
      digest,
      keySpec: 'ECC_NIST_P384',
      pss: false,
      keyId: ecKey.keyId,
      context: {},
    });
    expect(ecSigned).toMatchObject({ kind: 'signed', keyId: ecKey.keyId, algorithm: 'ECDSA_SHA_384' });
    if (ecSigned.kind !== 'signed') return;
    expect(cryptoVerify('sha384', message, ecKey.publicKeyPem, ecSigned.signature)).toBe(true);

    const rsaKey = await upstream.getPublicKey(rsa);
    const rsaSigned = await upstream.pkcs11Sign({ tenantId: rsa, digest, keySpec: 'RSA_2048', pss: true, context: {} });
    expect(rsaSigned).toMatchObject({ kind: 'signed', algorithm: 'RSASSA_PSS_SHA_384' });
    if (rsaSigned.kind !== 'signed') return;
    const pss = { key: rsaKey.publicKeyPem, padding: cryptoConstants.RSA_PKCS1_PSS_PADDING, saltLength: 48 };
    expect(cryptoVerify('sha384', message, pss, rsaSigned.signature)).toBe(true);
  });

  it("maps the refusals a module meets to wire statuses: another tenant's key, a tenant with no key, bad input", async () => {
    const refusal = (promise: Promise<unknown>) =>
      promise.then(
        (value) => ({ value }),
        (error: unknown) => (error instanceof UpstreamError ? { status: error.status } : { error: String(error) }),
      );
    const wrongKey = await refusal(
      upstream.pkcs11Sign({ tenantId: tenantOf('SM2'), digest, keySpec: 'SM2', pss: false, context: {} }),
    );
    const noKey = await refusal(upstream.getPublicKey('nobody-configured'));
    const shortDigest = await refusal(
      upstream.pkcs11Sign({ tenantId: ec, digest: Buffer.alloc(7), keySpec: 'ECC_NIST_P384', pss: false, context: {} }),
    );
    // The service's 403 for a key of another tenant; no key configured for the tenant; a digest no hash makes.
    expect(wrongKey).toEqual({ status: WireStatus.FORBIDDEN });
    expect(noKey).toEqual({ status: WireStatus.UNAUTHENTICATED });
    expect(shortDigest).toEqual({ status: WireStatus.BAD_REQUEST });
  });
});
