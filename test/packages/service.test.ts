// The service tarball, built by `npm run package`: extracted to a temp folder and run through its own launcher
// (`bin/signbridge server --data-dir`) with no checkout on the PATH: its Node 24 runs its dist/ with node_modules
// built for that Node (better-sqlite3 is per ABI), on the embedded default (SQLite + SoftHSM). A tenant is created
// and a signature made over HTTP, verified here. The hardened system unit it carries is checked, and verified
// with systemd-analyze (PID 1 here is not systemd: the unit is never started).
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { createHash, createPublicKey, verify } from 'node:crypto';
import { existsSync, readFileSync, readlinkSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postAction } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';
import { tenantFor } from '../module/harness.js';
import {
  ensurePackage,
  type InstalledStack,
  installedEnv,
  mb,
  RSA,
  run,
  runOk,
  SYSTEM_PATH,
  servedBy,
  signWithPkcs11Tool,
  sizeOf,
  startInstalledStack,
  VERSION,
} from './helpers.js';

let top: string;
let dataDir: string;
let env: NodeJS.ProcessEnv;
let server: ChildProcess | undefined;
let url = '';
let output = '';

const launcher = () => join(top, 'bin', 'signbridge');

/** The launcher's `admin api-key create`, as an operator runs it on the service host. */
function apiKey(role: string, tenant?: string): string {
  const args = ['admin', 'api-key', 'create', '--data-dir', dataDir, '--role', role];
  return runOk(launcher(), [...args, ...(tenant ? ['--tenant', tenant] : [])], env, dataDir).stdout.trim();
}

beforeAll(async () => {
  const tarball = ensurePackage('service');
  const dir = makeTempDir('sb-service-pkg-');
  execFileSync('tar', ['-xzf', tarball, '-C', dir]);
  top = join(dir, `signbridge-service-${VERSION}-linux-x64`);
  dataDir = join(dir, 'data');
  env = installedEnv(join(dir, 'home'), { SIGNBRIDGE_LOG_LEVEL: 'info' });
  console.log(`signbridge-service tarball: ${mb(sizeOf(tarball))}, extracted ${mb(sizeOf(top))}`);
  server = spawn(launcher(), ['server', '--listen', '127.0.0.1:0', '--data-dir', dataDir], { env, cwd: dir });
  const started = new Promise<string>((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const m = /signbridge server listening on (http:\/\/\S+)/.exec(output);
      if (m) resolve(m[1] as string);
    };
    server?.stdout?.on('data', onData);
    server?.stderr?.on('data', onData);
    server?.once('exit', (code) => reject(new Error(`the service exited with ${code}:\n${output}`)));
  });
  url = await started;
}, 900_000);

afterAll(async () => {
  const s = server;
  if (s && s.exitCode === null && s.signalCode === null) {
    await new Promise<void>((resolve) => {
      s.once('exit', () => resolve());
      s.kill('SIGTERM');
    });
  }
});

describe('the service tarball', () => {
  it('carries the launcher, Node 24, the app with production node_modules, and the unit', () => {
    for (const f of [
      'bin/signbridge',
      'node/bin/node',
      'app/package.json',
      'app/bin/signbridge.js',
      'app/dist/src/cli/main.js',
      'app/dist/wire/codec.js',
      'app/src/store/audit/audit-hash.cjs',
      'app/src/keys/pkcs11/pkcs11-sign-worker.cjs',
      'app/src/keys/software/software-sign-worker.mjs',
      'app/softhsm-config/softhsm2.conf.template',
      'app/node_modules/better-sqlite3/package.json',
      'app/node_modules/fastify/package.json',
      'app/native/peercred.node',
      'app/native/libsignbridge-pkcs11.so',
      'app/src/keys/native/ml-dsa/build/Release/ml_dsa_sign.node',
      'app/dist/src/signbridge-layout.json',
      'systemd/signbridge.service',
      'README.md',
    ]) {
      expect(existsSync(join(top, f)), f).toBe(true);
    }
    expect(statSync(launcher()).mode & 0o111).toBe(0o111);
    expect(runOk(join(top, 'node', 'bin', 'node'), ['--version'], env).stdout).toMatch(/^v24\./);
    // The native ML-DSA signer loads into that Node and finds ML-DSA in its OpenSSL (src/keys/software/ml-dsa-addon.ts).
    const mlDsaAddon = join(top, 'app', 'src', 'keys', 'native', 'ml-dsa', 'build', 'Release', 'ml_dsa_sign.node');
    const described = runOk(
      join(top, 'node', 'bin', 'node'),
      ['-p', `JSON.stringify(require(${JSON.stringify(mlDsaAddon)}).describe())`],
      env,
    );
    expect(JSON.parse(described.stdout)).toMatchObject({ mlDsa: true });
    // No development packages: no test runner, no compiler of TypeScript, no browser driver.
    for (const dev of ['vitest', 'typescript', 'playwright-core', 'esbuild', '@biomejs']) {
      expect(existsSync(join(top, 'app', 'node_modules', dev)), dev).toBe(false);
    }
  });

  it('runs on its own Node, from its own folder (no checkout path in the process)', () => {
    const pid = server?.pid as number;
    expect(readlinkSync(`/proc/${pid}/exe`)).toBe(join(top, 'node', 'bin', 'node'));
    const cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    expect(resolve(cmdline[1] as string)).toBe(join(top, 'app', 'bin', 'signbridge.js'));
    expect(env.PATH).toBe(SYSTEM_PATH);
  });

  it('creates a tenant and signs over HTTP; the signature verifies with the tenant public key', async () => {
    const operator = apiKey('operator');
    const created = await postAction(url, 'create_tenant', operator, { tenant_id: 'pkg', key_spec: 'ECC_NIST_P256' });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const signer = apiKey('signer', 'pkg');
    const message = Buffer.from('signed by the service from its tarball\n');
    const hash = createHash('sha256').update(message).digest('base64');
    const signed = await postAction(url, 'sign', signer, { tenant_id: 'pkg', algorithm: 'ECDSA_SHA_256', hash });
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    const pub = await postAction(url, 'get_public_key', signer, { tenant_id: 'pkg' });
    const key = createPublicKey(pub.body.public_key_pem as string);
    const signature = Buffer.from(signed.body.signature as string, 'base64');
    expect(verify('sha256', message, key, signature)).toBe(true);
    expect(verify('sha256', Buffer.from('another message'), key, signature)).toBe(false);
    // The audit chain the launcher's admin command walks holds the signature.
    expect(runOk(launcher(), ['admin', 'audit', 'verify', '--data-dir', dataDir], env).status).toBe(0);
  });
});

describe('its systemd system unit', () => {
  const unit = () => readFileSync(join(top, 'systemd', 'signbridge.service'), 'utf8');

  it('runs as its own user with a private state folder and the hardening of docs/deployment.md', () => {
    const text = unit();
    for (const line of [
      'User=signbridge',
      'StateDirectory=signbridge',
      'StateDirectoryMode=0700',
      'UMask=0077',
      'NoNewPrivileges=yes',
      'ProtectSystem=strict',
      'ProtectHome=yes',
      'PrivateTmp=yes',
      'PrivateDevices=yes',
      'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6',
      'SystemCallFilter=@system-service',
      'CapabilityBoundingSet=',
      'ExecStart=/opt/signbridge/bin/signbridge server --data-dir /var/lib/signbridge',
    ]) {
      expect(text).toMatch(new RegExp(`^${line.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'));
    }
    // V8 writes machine code at run time: MemoryDenyWriteExecute would kill the service.
    expect(text).not.toMatch(/^MemoryDenyWriteExecute=/m);
  });

  it("caps the primary's young generation with NODE_OPTIONS that the tarball's own Node accepts", () => {
    // Node refuses a flag it does not know in NODE_OPTIONS (exit 9) before it runs anything: the unit's line is run
    // with the tarball's runtime as systemd would give it, and Node starts under it. (What it saves, the primary's
    // 128 MB young generation capped at 16 MB, is measured by bench/memory-soak.ts: docs/benchmarks.md.)
    const line = /^Environment=NODE_OPTIONS=(.+)$/m.exec(unit())?.[1];
    expect(line).toBe('--max-semi-space-size=8');
    const r = run(join(top, 'node', 'bin', 'node'), ['-p', 'process.env.NODE_OPTIONS'], {
      ...process.env,
      NODE_OPTIONS: line as string,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout.trim()).toBe('--max-semi-space-size=8');
  });

  it('systemd-analyze verify accepts it (ExecStart pointed at the extracted tarball)', () => {
    if (run('systemd-analyze', ['--version'], { ...process.env, PATH: SYSTEM_PATH }).status !== 0) {
      console.log('systemd-analyze is not installed: unit not verified');
      return;
    }
    const copy = join(makeTempDir('sb-unit-'), 'signbridge.service');
    writeFileSync(copy, unit().replaceAll('/opt/signbridge/', `${top}/`));
    const r = run('systemd-analyze', ['verify', copy], { ...process.env, PATH: SYSTEM_PATH });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/Unknown (key|section)|not executable|Failed to parse/i);
  });
});

describe('its daemon (issue 31: `signbridge daemon` from the tarball refused to start without the addon)', () => {
  // The tarball's launcher runs `signbridge daemon` against a service from the checkout (startInstalledStack);
  // status, module-path and a pkcs11-tool signature through the tarball's own module show it serves.
  let stack: InstalledStack | undefined;
  const S = () => stack as InstalledStack;
  beforeAll(async () => {
    stack = await startInstalledStack(launcher());
  }, 900_000);
  afterAll(async () => {
    await stack?.close();
  });

  it('starts and serves the socket; status reaches it and lists the tenants', () => {
    expect(servedBy(S())).toBe(true);
    const out = runOk(launcher(), ['status'], S().env, S().work).stdout;
    expect(out).toMatch(/^daemon: +reachable at /m);
    expect(out).toContain(`(tenant ${tenantFor(RSA)})`);
  });

  it('module-path names the module in the tarball; pkcs11-tool signs through it and openssl verifies', () => {
    const module = runOk(launcher(), ['module-path'], S().env).stdout.trim();
    expect(module).toBe(join(top, 'app', 'native', 'libsignbridge-pkcs11.so'));
    const r = signWithPkcs11Tool(S(), module);
    expect(r.verified).toBe(true);
    expect(r.tampered).toBe(false);
  });
});
