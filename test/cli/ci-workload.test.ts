// Issue 22, end to end as a CI job would run it: a real `signbridge server` trusts the tests' local OIDC issuer
// (GitHub's protocol, HTTPS with its own CA), a child process with nothing but the issuer's two GitHub Actions
// variables (no API key anywhere) runs `signbridge daemon --ci`, and jarsigner signs a JAR through the module. The
// signature verifies, the audit log ties the signature to repository, ref and run; a job on a ref the rule does not
// allow is refused at start with the service's reason; a job the release tenant's policy refuses (a branch, where
// it signs tags only) fails in jarsigner with the reason the module prints; and with one-minute keys a key past its
// expiry is refused (401) while the daemon has renewed its own and still signs. Trust rules are added with
// `signbridge admin trust add`, as an admin does.
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { type CiIssuer, startCiIssuer } from '../helpers/ci-issuer.js';
import {
  CLI,
  createApiKeyCli,
  type ExportedAuditEntry,
  exportAudit,
  postAction,
  runCli,
  type ServerProcess,
  startServerProcess,
} from '../helpers/cli.js';
import { CLIENTS_DOC, runSnippet, runSnippetInBackground, runSnippetOk } from '../helpers/doc-snippets.js';
import { freePort } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';
import { waitForSocket } from '../module/harness.js';
import { certifyTenants, makeTestPki, type TestPki } from '../tools/pki.js';

const TENANT = 'ci-app';
const RELEASE_TENANT = 'ci-release';
/** Generous: one-minute keys, a 2-core machine shared with other work. */
const DEADLINE_MS = 180_000;

let issuer: CiIssuer;
let server: ServerProcess;
let dataDir: string;
let dir: string;
let pki: TestPki;
let jar: Buffer;
const children: ChildProcess[] = [];

/** Polls every 250 ms: most probes here run a CLI command. */
async function until<T>(what: string, probe: () => T | undefined | Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + DEADLINE_MS;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

const audit = (): ExportedAuditEntry[] => exportAudit(['--data-dir', dataDir]);

/** Saves a trust rule as an admin does: `signbridge admin trust add`, which prints the rule's id. */
function addTrustRule(tenant: string, claims: Record<string, string>, keyMinutes: number): string {
  const res = runCli([
    'admin',
    'trust',
    'add',
    '--data-dir',
    dataDir,
    '--tenant',
    tenant,
    '--issuer',
    issuer.url,
    ...Object.entries(claims).flatMap(([name, pattern]) => ['--claim', `${name}=${pattern}`]),
    '--key-minutes',
    String(keyMinutes),
  ]);
  if (res.code !== 0) throw new Error(res.stderr);
  return res.stdout.trim();
}

/**
 * The CI job's environment: only what a GitHub-hosted runner gives a job with `permissions: id-token: write`, plus
 * the trust anchor of the tests' issuer (a real runner trusts GitHub's public CA) and private folders.
 */
function jobEnv(home: string): NodeJS.ProcessEnv {
  return {
    PATH: process.env.PATH,
    HOME: home,
    XDG_CONFIG_HOME: join(home, 'config'),
    RUNNER_TEMP: join(home, 'runner-temp'),
    NODE_EXTRA_CA_CERTS: issuer.caFile,
    ACTIONS_ID_TOKEN_REQUEST_URL: issuer.github.requestUrl,
    ACTIONS_ID_TOKEN_REQUEST_TOKEN: issuer.github.requestToken,
  };
}

/** A CLI command in the job's environment alone (not this process's); its stderr as it comes. */
function runInJob(args: string[], env: NodeJS.ProcessEnv) {
  const child = spawn(process.execPath, [CLI, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (c: Buffer) => {
    stdout += c.toString();
  });
  child.stderr?.on('data', (c: Buffer) => {
    stderr += c.toString();
  });
  const done = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return { child, done, stdout: () => stdout, stderr: () => stderr };
}

function newJob(name: string) {
  const home = join(dir, name);
  mkdirSync(join(home, 'runner-temp'), { recursive: true, mode: 0o700 });
  return { home, env: jobEnv(home), socket: join(makeTempDir('sbci-'), 'daemon.sock') };
}

function daemonArgs(socket: string, tenant = TENANT): string[] {
  return [
    'daemon',
    '--ci',
    '--service-url',
    server.url,
    '--tenant',
    tenant,
    '--socket',
    socket,
    '--cert-dir',
    join(dir, 'certificates'),
  ];
}

/**
 * jarsigner signs a fresh copy of the JAR through the module and the daemon at `socket`; returns its folder. The
 * tools run without blocking this process: the daemon may renew its key meanwhile, from the issuer served here.
 */
async function signJar(socket: string, keyId: string): Promise<string> {
  const work = makeTempDir('sbci-jar-');
  writeFileSync(join(work, 'app.jar'), jar);
  writeFileSync(join(work, 'root.pem'), readFileSync(pki.root));
  const env = { SIGNBRIDGE_SOCKET: socket, MODULE: MODULE_PATH, SLOT: '0', KEY_ID: keyId };
  await runSnippetInBackground('java-pkcs11-config', work, env, CLIENTS_DOC);
  await runSnippetInBackground('jarsigner-sign', work, env, CLIENTS_DOC);
  const verified = (await runSnippetInBackground('jarsigner-verify', work, env, CLIENTS_DOC)).stdout;
  expect(verified).toContain('jar verified.');
  return work;
}

const exchanges = (outcome: string) =>
  audit().filter((e) => e.action === 'workload_exchange' && e.outcome === outcome && e.tenant_id === TENANT);

let keyId: string;

beforeAll(async () => {
  issuer = await startCiIssuer();
  dir = makeTempDir('sb-ci-workload-');
  dataDir = join(dir, 'data');
  const port = await freePort();
  const policyFile = join(dir, 'policy.yaml');
  writeFileSync(
    policyFile,
    `version: 1\nrules: {}\ntenants:\n  ${RELEASE_TENANT}:\n    workload:\n      require: { ref: "refs/tags/v*" }\n`,
  );
  server = await startServerProcess(['--data-dir', dataDir, '--listen', `127.0.0.1:${port}`], {
    SIGNBRIDGE_LOG_LEVEL: 'warn',
    SIGNBRIDGE_POLICY_FILE: policyFile,
    SIGNBRIDGE_PUBLIC_URL: `http://127.0.0.1:${port}`,
    SIGNBRIDGE_WORKLOAD_ALLOW: '127.0.0.1',
    SIGNBRIDGE_WORKLOAD_CA_FILE: issuer.caFile,
  });
  const operator = createApiKeyCli(dataDir, 'operator');
  const created = await postAction(server.url, 'create_tenant', operator, {
    tenant_id: TENANT,
    key_spec: 'ECC_NIST_P256',
  });
  expect(created.status).toBe(201);
  // Main only, of acme/app pinned by id; one-minute keys so that the test sees a key expire and the daemon renew.
  addTrustRule(TENANT, { repository: 'acme/app', repository_id: '100200300', ref: 'refs/heads/main' }, 1);
  // The release tenant trusts every ref of the repository; its policy signs tags only (workload.require).
  const release = await postAction(server.url, 'create_tenant', operator, {
    tenant_id: RELEASE_TENANT,
    key_spec: 'ECC_NIST_P256',
  });
  expect(release.status).toBe(201);
  addTrustRule(RELEASE_TENANT, { repository_id: '100200300', event_name: 'push' }, 15);
  pki = makeTestPki(makeTempDir('sbci-pki-'));
  const build = makeTempDir('sbci-build-');
  writeFileSync(join(build, 'Hello.txt'), 'signed by a CI job through signbridge\n');
  execFileSync('jar', ['cf', 'app.jar', 'Hello.txt'], { cwd: build });
  jar = readFileSync(join(build, 'app.jar'));
}, DEADLINE_MS);

afterAll(async () => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
  await server?.stop();
  await issuer?.close();
});

describe('signbridge daemon --ci in a GitHub Actions job', () => {
  it(
    'signs a JAR with jarsigner through the module with no stored secret; the audit log shows repository, ref and run; the key is renewed before it expires',
    async () => {
      const job = newJob('job-main');
      const daemon = runInJob(daemonArgs(job.socket), job.env);
      await waitForSocket(job.socket, DEADLINE_MS);
      // The tenant's certificate, requested through this same daemon (`cert csr` signs with the workload key).
      certifyTenants(pki, job.socket, dir, [TENANT]);
      const pub = await until('the tenant key', async () => {
        const key = createApiKeyCli(dataDir, 'signer', TENANT);
        const res = await postAction(server.url, 'get_public_key', key, { tenant_id: TENANT });
        return res.status === 200 ? (res.body.key_id as string) : undefined;
      });
      keyId = pub;
      await signJar(job.socket, keyId);

      // `login --ci` in another step of the job: the key in a 0600 file in $RUNNER_TEMP, nothing secret printed.
      const login = runInJob(['login', '--ci', '--service-url', server.url, '--tenant', TENANT], job.env);
      expect(await login.done).toBe(0);
      const keyFile = join(job.home, 'runner-temp', 'signbridge', 'api-key');
      expect(statSync(keyFile).mode & 0o777).toBe(0o600);
      expect(statSync(join(job.home, 'runner-temp', 'signbridge')).mode & 0o777).toBe(0o700);
      const loginKey = readFileSync(keyFile, 'utf8').trim();
      expect(loginKey).toMatch(/^sbk_/);
      expect(login.stderr()).toContain(keyFile);
      expect(login.stdout() + login.stderr()).not.toContain(loginKey);
      expect(login.stdout() + login.stderr()).not.toContain(issuer.github.requestToken);
      const meta = JSON.parse(readFileSync(join(job.home, 'runner-temp', 'signbridge', 'login.json'), 'utf8'));
      expect(meta).toMatchObject({ tenant_id: TENANT, roles: ['signer'], email: null });
      const works = await postAction(server.url, 'sign', loginKey, {
        tenant_id: TENANT,
        algorithm: 'ECDSA_SHA_256',
        hash: Buffer.alloc(32, 7).toString('base64'),
      });
      expect(works.status).toBe(200);

      const issued = exchanges('issued');
      expect(issued.length).toBeGreaterThanOrEqual(1);
      const first = issued[0] as ExportedAuditEntry;
      expect(first.details).toMatchObject({
        issuer: issuer.url,
        subject: 'repo:acme/app:ref:refs/heads/main',
        project: 'acme/app',
        ref: 'refs/heads/main',
        run_id: '9000000001',
      });
      // The signatures were made with the exchanged key: their audit entries name it.
      const keyIds = new Set(issued.map((e) => e.details.api_key_id as string));
      const signed = audit().filter((e) => e.tenant_id === TENANT && e.outcome === 'signed');
      expect(signed.length).toBeGreaterThan(0);
      for (const entry of signed) {
        expect([...keyIds].some((id) => JSON.stringify(entry).includes(id))).toBe(true);
        // Who signed, as the service verified it: repository, ref, run and its page.
        expect(entry.details.workload).toMatchObject({
          issuer: issuer.url,
          project: 'acme/app',
          ref: 'refs/heads/main',
          run_id: '9000000001',
        });
      }

      // Nothing secret left the daemon: no token, no key on its output.
      const firstExpiry = Date.parse(first.details.expires_at as string);
      await until('the first key expired', () => (Date.now() > firstExpiry + 1000 ? true : undefined));
      // Renewed before the first key expired (at 2/3 of its minute), without a signature asking for it.
      const renewals = exchanges('issued');
      expect(renewals.length).toBeGreaterThanOrEqual(2);
      expect(Date.parse((renewals[1] as ExportedAuditEntry).at)).toBeLessThan(firstExpiry);
      await signJar(job.socket, keyId);
      expect(daemon.stderr()).toMatch(/renewed the key from the CI token exchange/);
      expect(daemon.stderr() + daemon.stdout()).not.toContain(issuer.github.requestToken);
      expect(daemon.stderr()).not.toContain('sbk_');

      // The key `login --ci` got at the start is past its expiry now: the service refuses it.
      const loginExpiry = Date.parse(meta.expires_at);
      await until('the login key expired', () => (Date.now() > loginExpiry + 1000 ? true : undefined));
      const refused = await postAction(server.url, 'sign', loginKey, {
        tenant_id: TENANT,
        algorithm: 'ECDSA_SHA_256',
        hash: Buffer.alloc(32, 7).toString('base64'),
      });
      expect(refused.status).toBe(401);
      expect(JSON.stringify(refused.body)).toMatch(/expired/);
      daemon.child.kill('SIGTERM');
      expect(await daemon.done).toBe(0);
    },
    3 * DEADLINE_MS,
  );

  it(
    'a job on a ref the rule does not allow is refused at start with the reason the service gives',
    async () => {
      const saved = { ...issuer.github.claims };
      issuer.github.claims.ref = 'refs/heads/feature';
      issuer.github.claims.sub = 'repo:acme/app:ref:refs/heads/feature';
      try {
        const job = newJob('job-feature');
        const daemon = runInJob(daemonArgs(job.socket), job.env);
        expect(await daemon.done).toBe(1);
        expect(daemon.stderr()).toMatch(
          /signbridge daemon --ci: the service refused the token exchange \(HTTP 400 invalid_grant\): .*ref/,
        );
        expect(daemon.stderr()).not.toContain(issuer.github.requestToken);
        const refusal = exchanges('refused').at(-1) as ExportedAuditEntry;
        expect(refusal.details.subject).toBe('repo:acme/app:ref:refs/heads/feature');
      } finally {
        issuer.github.claims = saved;
      }
    },
    DEADLINE_MS,
  );

  it(
    'the release tenant signs a tag; a job on a branch is refused by the policy, with the reason the module prints',
    async () => {
      const saved = { ...issuer.github.claims };
      try {
        issuer.github.claims = {
          ...saved,
          ref: 'refs/tags/v1.0.0',
          ref_type: 'tag',
          sub: 'repo:acme/app:ref:refs/tags/v1.0.0',
          run_id: '9000000002',
        };
        const tagJob = newJob('job-tag');
        // SIGNBRIDGE_CI=1 in the job's environment instead of --ci.
        const tagEnv = { ...tagJob.env, SIGNBRIDGE_CI: '1' };
        const tagArgs = daemonArgs(tagJob.socket, RELEASE_TENANT).filter((a) => a !== '--ci');
        const tagDaemon = runInJob(tagArgs, tagEnv);
        await waitForSocket(tagJob.socket, DEADLINE_MS);
        certifyTenants(pki, tagJob.socket, dir, [RELEASE_TENANT]);
        const signer = createApiKeyCli(dataDir, 'signer', RELEASE_TENANT);
        const pub = await postAction(server.url, 'get_public_key', signer, { tenant_id: RELEASE_TENANT });
        expect(pub.status).toBe(200);
        const releaseKeyId = pub.body.key_id as string;
        await signJar(tagJob.socket, releaseKeyId);

        // An admin revokes the daemon's key: the next signature gets 401, the daemon exchanges a new token at once
        // and signs with the new key (the job never sees the refusal).
        const releaseExchanges = () =>
          audit().filter(
            (e) => e.action === 'workload_exchange' && e.outcome === 'issued' && e.tenant_id === RELEASE_TENANT,
          );
        const before = releaseExchanges();
        const revoked = runCli([
          'admin',
          'api-key',
          'revoke',
          before.at(-1)?.details.api_key_id as string,
          '--data-dir',
          dataDir,
        ]);
        expect(revoked.code, revoked.stderr).toBe(0);
        await signJar(tagJob.socket, releaseKeyId);
        expect(releaseExchanges().length).toBe(before.length + 1);
        expect(tagDaemon.stderr()).toMatch(/the service refused the key; sending again with the new one/);

        // `signbridge sign --ci` in another step: exchanges in memory, signs the file over the HTTP API.
        const artifact = join(tagJob.home, 'artifact.bin');
        writeFileSync(artifact, 'release artifact\n');
        const signed = runInJob(['sign', '--service-url', server.url, '--tenant', RELEASE_TENANT, artifact], tagEnv);
        expect(await signed.done, signed.stderr()).toBe(0);
        expect(statSync(`${artifact}.sig`).size).toBeGreaterThan(0);
        expect(signed.stdout() + signed.stderr()).not.toContain('sbk_');
        expect(releaseExchanges().length).toBe(before.length + 2);
        tagDaemon.child.kill('SIGTERM');
        expect(await tagDaemon.done).toBe(0);

        // The same repository on a branch: the trust rule admits it, the policy does not sign branches.
        issuer.github.claims = { ...saved, run_id: '9000000003' };
        const branchJob = newJob('job-branch');
        const branchDaemon = runInJob(daemonArgs(branchJob.socket, RELEASE_TENANT), branchJob.env);
        await waitForSocket(branchJob.socket, DEADLINE_MS);
        const work = makeTempDir('sbci-jar-');
        writeFileSync(join(work, 'app.jar'), jar);
        const env = { SIGNBRIDGE_SOCKET: branchJob.socket, MODULE: MODULE_PATH, SLOT: '0', KEY_ID: releaseKeyId };
        runSnippetOk('java-pkcs11-config', work, env);
        const refused = runSnippet('jarsigner-sign', work, env);
        expect(refused.code).not.toBe(0);
        expect(refused.stdout + refused.stderr).toMatch(
          /signbridge: policy denied the signature for tenant ci-release: .*workload-facts: ref is "refs\/heads\/main"; workload.require wants ref to match "refs\/tags\/v\*"/,
        );
        const denied = audit().filter((e) => e.tenant_id === RELEASE_TENANT && e.outcome === 'denied');
        expect(denied.at(-1)?.details).toMatchObject({
          rule: 'workload-facts',
          workload: { project: 'acme/app', ref: 'refs/heads/main', run_id: '9000000003' },
        });
        branchDaemon.child.kill('SIGTERM');
        expect(await branchDaemon.done).toBe(0);
      } finally {
        issuer.github.claims = saved;
      }
    },
    2 * DEADLINE_MS,
  );

  it(
    'issue 31, one rule for empty token variables: an empty SIGNBRIDGE_ID_TOKEN counts as unset; a variable named with --id-token-env must hold the token',
    async () => {
      // The default variable passed on empty (a reusable workflow's unset input): GitHub's token request is used.
      const job = newJob('job-empty-default');
      const login = runInJob(['login', '--ci', '--service-url', server.url, '--tenant', TENANT], {
        ...job.env,
        SIGNBRIDGE_ID_TOKEN: '',
      });
      expect(await login.done, login.stderr()).toBe(0);
      expect(statSync(join(job.home, 'runner-temp', 'signbridge', 'login.json')).isFile()).toBe(true);

      // A variable the job names is the source: empty or unset, the command stops and says which, with GitHub's
      // variables right there, and writes nothing.
      for (const [name, value, said] of [
        ['empty-named', '', 'set but empty'],
        ['unset-named', undefined, 'not set'],
      ] as const) {
        const named = newJob(`job-${name}`);
        const env = { ...named.env, ...(value !== undefined && { SIGNBRIDGE_GITLAB_TOKEN: value }) };
        const refused = runInJob(
          [
            'login',
            '--ci',
            '--service-url',
            server.url,
            '--tenant',
            TENANT,
            '--id-token-env',
            'SIGNBRIDGE_GITLAB_TOKEN',
          ],
          env,
        );
        expect(await refused.done).toBe(1);
        expect(refused.stderr()).toContain(`--id-token-env SIGNBRIDGE_GITLAB_TOKEN: the variable is ${said}`);
        expect(() => statSync(join(named.home, 'runner-temp', 'signbridge', 'login.json'))).toThrow();
      }
    },
    DEADLINE_MS,
  );

  it(
    'says where it looked when the job has no ID token (no id-token: write permission)',
    async () => {
      const job = newJob('job-no-token');
      const { ACTIONS_ID_TOKEN_REQUEST_URL: _u, ACTIONS_ID_TOKEN_REQUEST_TOKEN: _t, ...env } = job.env;
      const daemon = runInJob(daemonArgs(job.socket), { ...env, GITHUB_ACTIONS: 'true' });
      expect(await daemon.done).toBe(1);
      expect(daemon.stderr()).toContain('no CI ID token found');
      expect(daemon.stderr()).toContain('SIGNBRIDGE_ID_TOKEN');
      expect(daemon.stderr()).toContain('ACTIONS_ID_TOKEN_REQUEST_URL');
      expect(daemon.stderr()).toContain('permissions: id-token: write');
    },
    DEADLINE_MS,
  );
});
