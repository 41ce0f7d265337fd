// p11-kit through the module, against the real daemon and service: `signbridge p11-kit register` writes the
// registration, `p11-kit list-modules` shows the module and one token per tenant, pkcs11-tool loaded with p11-kit's
// proxy module signs through it, `unregister` removes it. The commands are the snippets of docs/clients.md.
//
// p11-kit never reads per-user registrations in a program running as root. So when the tests run as root, the
// per-user part runs as `nobody`, with its own daemon (a daemon serves only its own user and root), and root
// registers with --system (written to /etc/pkcs11/modules for the length of one test, and always removed).
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { MODULE_FILE, registrationDir, SYSTEM_MODULES_DIR, userConfigIgnored } from '../../src/cli/p11-kit.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { packagePath } from '../../src/paths.js';
import { CLI, createApiKeyCli, runCli } from '../helpers/cli.js';
import { docSnippet, runSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor, waitForSocket } from '../module/harness.js';

const SPECS: KeySpec[] = ['RSA_2048', 'ECC_NIST_P256', 'ECC_NIST_P384'];
const TENANTS = SPECS.map(tenantFor);
const RSA_TENANT = tenantFor('RSA_2048');
const asRoot = process.getuid?.() === 0;
const NOBODY = { uid: 65534, gid: 65534 };
const SYSTEM_FILE = join(SYSTEM_MODULES_DIR, MODULE_FILE);

let stack: Stack;
/** The build user's world: home, socket, working folder; owned by that user. */
let user: { root: string; home: string; configHome: string; work: string; bin: string; socket: string };
let userDaemon: ChildProcess | undefined;
let wroteSystemFile = false;

/**
 * As root, the per-user part runs as nobody, who must be able to read this checkout (the CLI, its dependencies
 * and the module). A checkout under a private folder (e.g. /root) cannot be; then that part is reported as
 * skipped, with the reason, and the system-wide part still runs.
 */
function nobodyCannotRead(): string | undefined {
  if (!asRoot) return undefined;
  const paths = [
    process.execPath,
    CLI,
    packagePath('dist', 'src', 'cli', 'main.js'),
    MODULE_PATH,
    packagePath('node_modules', 'commander', 'package.json'),
  ];
  const r = spawnSync(
    'setpriv',
    [
      '--reuid=65534',
      '--regid=65534',
      '--clear-groups',
      'sh',
      '-c',
      'for f in "$@"; do test -r "$f" || { echo "$f"; exit 1; }; done',
      'sh',
      ...paths,
    ],
    { encoding: 'utf8' },
  );
  return r.status === 0 ? undefined : `nobody cannot read ${r.stdout.trim() || 'this checkout'}`;
}
const userPartBlocked = nobodyCannotRead();
if (userPartBlocked) process.stderr.write(`p11-kit per-user test skipped: ${userPartBlocked}\n`);

beforeAll(async () => {
  stack = await startStack(SPECS);
  const root = mkdtempSync('/tmp/sb-p11kit-user-');
  user = {
    root,
    home: join(root, 'home'),
    configHome: join(root, 'home', 'xdg-config'),
    work: join(root, 'work'),
    bin: join(root, 'bin'),
    socket: asRoot ? join(root, 'run', 'daemon.sock') : stack.socketPath,
  };
  for (const d of [user.home, user.work, user.bin]) mkdirSync(d);
  // `signbridge` on the user's PATH (the shared shim folder of doc-snippets.ts is private to root).
  writeFileSync(
    join(user.bin, 'signbridge'),
    `#!/bin/sh\nexec "${process.execPath}" "${packagePath('bin', 'signbridge.js')}" "$@"\n`,
    { mode: 0o755 },
  );
  if (!asRoot || userPartBlocked) return;
  // A daemon for nobody, with API keys for the same tenants, readable only by nobody.
  mkdirSync(join(root, 'keys'));
  const tenants = TENANTS.map((t) => {
    writeFileSync(join(root, 'keys', t), `${createApiKeyCli(join(stack.dir, 'data'), 'signer', t)}\n`, { mode: 0o600 });
    return `  - id: ${t}\n    apiKeyFile: keys/${t}`;
  });
  writeFileSync(
    join(root, 'daemon.yaml'),
    `socket: ${user.socket}\nlogLevel: warn\nservice:\n  url: ${stack.server.url}\ntenants:\n${tenants.join('\n')}\n`,
  );
  for (const p of [
    '',
    'home',
    'work',
    'bin',
    'bin/signbridge',
    'keys',
    'daemon.yaml',
    ...TENANTS.map((t) => `keys/${t}`),
  ]) {
    chownSync(join(root, p), NOBODY.uid, NOBODY.gid);
  }
  chmodSync(root, 0o700);
  userDaemon = spawn(process.execPath, [CLI, 'daemon', '--config', join(root, 'daemon.yaml')], {
    ...NOBODY,
    env: { ...process.env, HOME: user.home },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  await waitForSocket(user.socket);
});

afterAll(async () => {
  if (userDaemon && userDaemon.exitCode === null) {
    const d = userDaemon;
    await new Promise<void>((resolve) => {
      d.once('exit', () => resolve());
      d.kill('SIGTERM');
    });
  }
  if (wroteSystemFile) rmSync(SYSTEM_FILE, { force: true });
  if (user) rmSync(user.root, { recursive: true, force: true });
  await stack?.close();
});

/** The environment of the build user's shell: a private HOME and XDG_CONFIG_HOME, the user's daemon. */
const userEnv = (extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv => ({
  ...process.env,
  PATH: `${user.bin}:${process.env.PATH ?? ''}`,
  HOME: user.home,
  XDG_CONFIG_HOME: user.configHome,
  SIGNBRIDGE_SOCKET: user.socket,
  ...extra,
});

/** Runs a snippet of docs/clients.md as the build user (nobody when the tests run as root), like runSnippet. */
function runAsUser(id: string, extra: NodeJS.ProcessEnv = {}) {
  const r = spawnSync('bash', ['-euo', 'pipefail', '-c', docSnippet(id)], {
    cwd: user.work,
    env: userEnv(extra),
    encoding: 'utf8',
    timeout: 60_000,
    ...(asRoot ? NOBODY : {}),
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

function runAsUserOk(id: string, extra: NodeJS.ProcessEnv = {}) {
  const r = runAsUser(id, extra);
  if (r.code !== 0)
    throw new Error(`snippet ${id} exited with ${r.code}\n--- stdout\n${r.stdout}\n--- stderr\n${r.stderr}`);
  return r;
}

/** `p11-kit list-modules` as the build user (or root). */
function listModules(env: NodeJS.ProcessEnv, asUser: boolean): string {
  const r = spawnSync('p11-kit', ['list-modules'], { env, encoding: 'utf8', ...(asUser && asRoot ? NOBODY : {}) });
  expect(r.status).toBe(0);
  return r.stdout;
}

/** The lines of `p11-kit list-modules` output that describe our module (from its name to the next module). */
function ourModule(listing: string): string | undefined {
  const start = listing.search(/^signbridge: /m);
  if (start < 0) return undefined;
  const rest = listing.slice(start);
  const next = rest.search(/\n\S/);
  return next < 0 ? rest : rest.slice(0, next + 1);
}

/** openssl verifies file.sig over file.txt in `dir` with the service's public key of `tenant`. */
function verifiedByServiceKey(dir: string, tenant: string): boolean {
  writeFileSync(join(dir, `${tenant}.pem`), stack.publicKeys.get(tenant) as string);
  const r = spawnSync(
    'openssl',
    ['dgst', '-sha256', '-verify', `${tenant}.pem`, '-signature', 'file.sig', 'file.txt'],
    {
      cwd: dir,
      encoding: 'utf8',
    },
  );
  return r.status === 0 && r.stdout.includes('Verified OK');
}

describe('p11-kit, per-user registration', () => {
  it.skipIf(userPartBlocked)(
    'register: list-modules shows the module and a token per tenant; the proxy module signs; unregister removes it',
    () => {
      const file = join(user.configHome, 'pkcs11', 'modules', MODULE_FILE);
      expect(ourModule(listModules(userEnv(), true))).toBeUndefined();

      const registered = runAsUserOk('p11-kit-register');
      expect(registered.stdout).toContain(`wrote ${file}:`);
      // $XDG_CONFIG_HOME wins over ~/.config, as in p11-kit.
      expect(existsSync(join(user.home, '.config'))).toBe(false);
      expect(readFileSync(file, 'utf8')).toMatch(new RegExp(`^module: ${MODULE_PATH}$[\\s\\S]*^critical: no$`, 'm'));
      const ours = ourModule(registered.stdout);
      expect(ours?.startsWith(`signbridge: ${MODULE_PATH}\n`)).toBe(true);
      for (const tenant of TENANTS) expect(ours).toContain(`\n    token: ${tenant}\n`);

      writeFileSync(join(user.work, 'file.txt'), `signed through p11-kit-proxy.so, ${Date.now()}\n`);
      rmSync(join(user.work, 'file.sig'), { force: true });
      runAsUserOk('p11-kit-proxy-sign', { TOKEN: RSA_TENANT });
      expect(verifiedByServiceKey(user.work, RSA_TENANT)).toBe(true);
      expect(verifiedByServiceKey(user.work, tenantFor('ECC_NIST_P256'))).toBe(false);

      const removed = runAsUserOk('p11-kit-unregister');
      expect(removed.stdout).toContain(`removed ${file}`);
      expect(existsSync(file)).toBe(false);
      expect(ourModule(listModules(userEnv(), true))).toBeUndefined();
      // Without the registration the proxy module has no such token.
      const unsigned = runAsUser('p11-kit-proxy-sign', { TOKEN: RSA_TENANT });
      expect(unsigned.code).not.toBe(0);
      const again = runAsUser('p11-kit-unregister');
      expect(again.code).toBe(1);
      expect(again.stderr).toContain('nothing to remove');
    },
  );
});

describe('p11-kit, system-wide registration', () => {
  const rootEnv = () => ({ SIGNBRIDGE_SOCKET: stack.socketPath, TOKEN: RSA_TENANT });

  if (asRoot) {
    it('as root, register without --system refuses (p11-kit would ignore the file) and says why', () => {
      const r = runCli(['p11-kit', 'register'], { HOME: user.home });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('ignores per-user registrations in programs running as root; use --system');
      expect(existsSync(join(user.home, '.config'))).toBe(false);
    });

    it('register --system: root sees the tokens through p11-kit and its proxy; unregister --system', () => {
      expect(existsSync(SYSTEM_FILE), `${SYSTEM_FILE} exists already; this test would replace it`).toBe(false);
      const dir = mkdtempSync(join(stack.dir, 'p11kit-system-'));
      wroteSystemFile = true;
      const registered = runSnippetOk('p11-kit-register-system', dir, rootEnv());
      expect(registered.stdout).toContain(`wrote ${SYSTEM_FILE}:`);
      const ours = ourModule(registered.stdout);
      expect(ours?.startsWith(`signbridge: ${MODULE_PATH}\n`)).toBe(true);
      for (const tenant of TENANTS) expect(ours).toContain(`\n    token: ${tenant}\n`);

      writeFileSync(join(dir, 'file.txt'), `signed through p11-kit-proxy.so as root, ${Date.now()}\n`);
      runSnippetOk('p11-kit-proxy-sign', dir, rootEnv());
      expect(verifiedByServiceKey(dir, RSA_TENANT)).toBe(true);

      expect(runSnippetOk('p11-kit-unregister-system', dir, rootEnv()).stdout).toContain(`removed ${SYSTEM_FILE}`);
      expect(existsSync(SYSTEM_FILE)).toBe(false);
      expect(ourModule(listModules({ ...process.env, ...rootEnv() }, false))).toBeUndefined();
      expect(runSnippet('p11-kit-proxy-sign', dir, rootEnv()).code).not.toBe(0);
    });
  } else {
    it('register --system needs root, and says so', () => {
      const r = runCli(['p11-kit', 'register', '--system']);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('--system needs root');
    });
  }
});

describe('where p11-kit looks, as register computes it', () => {
  it('the user folder: $XDG_CONFIG_HOME/pkcs11/modules, else ~/.config/pkcs11/modules', () => {
    expect(registrationDir('user', { HOME: '/h', XDG_CONFIG_HOME: '/x' })).toBe('/x/pkcs11/modules');
    expect(registrationDir('user', { HOME: '/h', XDG_CONFIG_HOME: '' })).toBe('/h/.config/pkcs11/modules');
    expect(registrationDir('system', { HOME: '/h' })).toBe(SYSTEM_MODULES_DIR);
  });

  it('per-user files are ignored with user-config: none in pkcs11.conf or P11_KIT_NO_USER_CONFIG', () => {
    const dir = mkdtempSync(join(stack.dir, 'p11kit-conf-'));
    const conf = join(dir, 'pkcs11.conf');
    expect(userConfigIgnored({}, conf)).toBeUndefined(); // no file: p11-kit merges
    writeFileSync(conf, '# comment\nuser-config: merge\n');
    expect(userConfigIgnored({}, conf)).toBeUndefined();
    writeFileSync(conf, 'user-config: none\n');
    expect(userConfigIgnored({}, conf)).toBe(`${conf} says user-config: none`);
    expect(userConfigIgnored({ P11_KIT_NO_USER_CONFIG: '1' }, join(dir, 'missing'))).toBe(
      'P11_KIT_NO_USER_CONFIG is set',
    );
  });
});
