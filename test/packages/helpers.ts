// What the package tests share: where `npm run package` puts the packages (built here when missing), a PATH with
// no checkout on it, and a running service + daemon where the daemon is the one a package installed.
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { packagePath } from '../../src/paths.js';
import { makeTempDir } from '../helpers/service.js';
import { type Stack, startStack, tenantFor, waitForSocket } from '../module/harness.js';

export const VERSION = (JSON.parse(readFileSync(packagePath('package.json'), 'utf8')) as { version: string }).version;
export const PACKAGES_DIR = packagePath('dist', 'packages');
export const DEB = join(PACKAGES_DIR, `signbridge-client_${VERSION}_amd64.deb`);
export const NPM_TARBALL = join(PACKAGES_DIR, `signbridge-client-${VERSION}.tgz`);
export const SERVICE_TARBALL = join(PACKAGES_DIR, `signbridge-service-${VERSION}-linux-x64.tar.gz`);
export const OCI_IMAGE = join(PACKAGES_DIR, `signbridge-service-${VERSION}-linux-x64.oci.tar`);

/** The system's folders only: nothing of this checkout (no node_modules/.bin, no bin/signbridge.js shim). */
export const SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

const TARGETS = { deb: DEB, npm: NPM_TARBALL, service: SERVICE_TARBALL, oci: OCI_IMAGE } as const;

/**
 * The test command runs `npm run package` first; a test run on its own builds what is missing (minutes: the .deb
 * compresses a Node binary, the service tarball compiles native addons for Node 24, the OCI image installs Debian
 * packages from the mirror).
 */
export function ensurePackage(target: keyof typeof TARGETS): string {
  const file = TARGETS[target];
  if (!existsSync(file)) {
    execFileSync('bash', [packagePath('packaging', 'build-packages.sh'), target], { stdio: 'inherit' });
  }
  if (!existsSync(file)) throw new Error(`npm run package did not write ${file}`);
  return file;
}

/** A clean environment for an installed program: system PATH, a private HOME, no signbridge settings. */
export function installedEnv(home: string, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!k.startsWith('SIGNBRIDGE_') && !k.startsWith('npm_') && !k.startsWith('VITEST') && k !== 'NODE_OPTIONS') {
      env[k] = v;
    }
  }
  mkdirSync(home, { recursive: true });
  return { ...env, PATH: SYSTEM_PATH, HOME: home, XDG_CONFIG_HOME: join(home, '.config'), ...extra };
}

export interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

export function run(cmd: string, args: string[], env: NodeJS.ProcessEnv, cwd?: string): Run {
  const r = spawnSync(cmd, args, { env, cwd, encoding: 'utf8', timeout: 300_000 });
  if (r.error) throw r.error;
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

export function runOk(cmd: string, args: string[], env: NodeJS.ProcessEnv, cwd?: string): Run {
  const r = run(cmd, args, env, cwd);
  if (r.status !== 0) {
    throw new Error(
      `${cmd} ${args.join(' ')} exited with ${r.status}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`,
    );
  }
  return r;
}

export const RSA = 'RSA_2048' as const;
export const EC = 'ECC_NIST_P256' as const;

/** The checkout's service with two tenants (RSA-2048, P-256), served by the daemon of an installed package. */
export interface InstalledStack {
  stack: Stack;
  /** Environment for the installed programs and the tools that load the module: SIGNBRIDGE_SOCKET set. */
  env: NodeJS.ProcessEnv;
  work: string;
  daemonLog(): string;
  close(): Promise<void>;
}

/**
 * The service and its tenants come from the checkout (test/module/harness.ts); the checkout's daemon is stopped
 * and `signbridgeCommand daemon` (an installed program) serves the same configuration and socket instead, so every
 * signature below goes through the installed daemon.
 */
export async function startInstalledStack(signbridgeCommand: string): Promise<InstalledStack> {
  const stack = await startStack([RSA, EC]);
  await stack.stopDaemon();
  const work = makeTempDir('sb-pkg-');
  const env = installedEnv(join(work, 'home'), { SIGNBRIDGE_SOCKET: stack.socketPath });
  let log = '';
  const daemon: ChildProcess = spawn(signbridgeCommand, ['daemon', '--config', join(stack.dir, 'daemon.yaml')], {
    env,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  daemon.stderr?.on('data', (d: Buffer) => {
    log += d.toString();
  });
  const exited = new Promise<void>((resolve) => daemon.once('exit', () => resolve()));
  try {
    await Promise.race([
      waitForSocket(stack.socketPath, 120_000),
      exited.then(() => {
        throw new Error(`the installed daemon exited:\n${log}`);
      }),
    ]);
  } catch (err) {
    daemon.kill('SIGKILL');
    await stack.close();
    throw err;
  }
  return {
    stack,
    env,
    work,
    daemonLog: () => log,
    async close() {
      await stopProcess(daemon, 'the installed daemon');
      await stopProcess(stack.server.child, 'the service');
    },
  };
}

/**
 * SIGTERM, then SIGKILL if the process is still there after `graceMs` (cleanup only: no test asserts on how fast a
 * process stops, but a cleanup must not hang the run; seen once under heavy load on a shared machine).
 */
export async function stopProcess(child: ChildProcess, what: string, graceMs = 30_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(true), graceMs);
  });
  if (await Promise.race([exited.then(() => false), late])) {
    console.warn(`${what} (pid ${child.pid}) did not stop within ${graceMs / 1000} s of SIGTERM: SIGKILL`);
    child.kill('SIGKILL');
    await exited;
  }
  clearTimeout(timer);
}

/** The installed daemon's own line, proving the socket is served by it and not by a leftover checkout daemon. */
export function servedBy(s: InstalledStack): boolean {
  return s.daemonLog().includes(`signbridge daemon listening on ${s.stack.socketPath}`);
}

/**
 * pkcs11-tool signs with the RSA tenant's key through `module`; OpenSSL verifies the signature with the public key
 * the service returned (and rejects it with one bit flipped). Returns the folder it worked in.
 */
export function signWithPkcs11Tool(s: InstalledStack, module: string): { verified: boolean; tampered: boolean } {
  const dir = makeTempDir('sb-pkg-p11tool-');
  writeFileSync(join(dir, 'file.txt'), 'signed by pkcs11-tool through an installed signbridge package\n');
  writeFileSync(join(dir, 'service.pem'), s.stack.publicKeys.get(tenantFor(RSA)) as string);
  runOk(
    'pkcs11-tool',
    [
      '--module',
      module,
      '--token-label',
      tenantFor(RSA),
      '--sign',
      '--mechanism',
      'SHA256-RSA-PKCS',
      '--input-file',
      'file.txt',
      '--output-file',
      'file.sig',
    ],
    s.env,
    dir,
  );
  const verify = () =>
    run('openssl', ['dgst', '-sha256', '-verify', 'service.pem', '-signature', 'file.sig', 'file.txt'], s.env, dir);
  const verified = verify().stdout.includes('Verified OK');
  const sig = readFileSync(join(dir, 'file.sig'));
  sig[sig.length - 1] = (sig[sig.length - 1] as number) ^ 1;
  writeFileSync(join(dir, 'file.sig'), sig);
  const tampered = verify().stdout.includes('Verified OK');
  return { verified, tampered };
}

/**
 * `signbridge openssl-config` from the installed program, then OpenSSL with pkcs11-provider signs with the P-256
 * tenant's key through the module it names; OpenSSL (without that configuration) verifies with the service's key.
 */
export function signWithOpenssl(
  s: InstalledStack,
  signbridgeCommand: string,
): { config: string; verified: boolean; tampered: boolean } {
  const dir = makeTempDir('sb-pkg-openssl-');
  writeFileSync(join(dir, 'file.txt'), 'signed by OpenSSL through an installed signbridge package\n');
  writeFileSync(join(dir, 'service.pem'), s.stack.publicKeys.get(tenantFor(EC)) as string);
  runOk(signbridgeCommand, ['openssl-config', '--out', 'signbridge-openssl.cnf'], s.env, dir);
  const config = readFileSync(join(dir, 'signbridge-openssl.cnf'), 'utf8');
  const uri = `pkcs11:token=${tenantFor(EC)};type=private`;
  runOk(
    'openssl',
    ['dgst', '-sha256', '-sign', uri, '-out', 'file.sig', 'file.txt'],
    { ...s.env, OPENSSL_CONF: join(dir, 'signbridge-openssl.cnf') },
    dir,
  );
  const verify = (file: string) =>
    run('openssl', ['dgst', '-sha256', '-verify', 'service.pem', '-signature', 'file.sig', file], s.env, dir);
  const verified = verify('file.txt').stdout.includes('Verified OK');
  writeFileSync(join(dir, 'other.txt'), 'another message\n');
  const tampered = verify('other.txt').stdout.includes('Verified OK');
  return { config, verified, tampered };
}

/** The size of a file or folder in bytes (du --apparent-size), for the sizes the tests print. */
export function sizeOf(path: string): number {
  return Number(execFileSync('du', ['-sb', path], { encoding: 'utf8' }).split('\t')[0]);
}

export const mb = (bytes: number) => `${(bytes / 1_000_000).toFixed(1)} MB`;
