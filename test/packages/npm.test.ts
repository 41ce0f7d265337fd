// The npm package of the build-host client, built by `npm run package`: installed with `npm install -g` into fresh
// prefixes, offline, once with install scripts refused (--ignore-scripts), and used from that prefix only (no
// checkout on the PATH): module-path, status, the daemon it carries against a service from the checkout, a
// pkcs11-tool signature through its prebuilt module; then uninstalled. Also its contents: no dependencies to fetch.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
  servedBy,
  signWithOpenssl,
  signWithPkcs11Tool,
  sizeOf,
  startInstalledStack,
} from './helpers.js';

let tarball: string;
const prefixes: Record<'scripts' | 'noScripts', string> = { scripts: '', noScripts: '' };
let stack: InstalledStack | undefined;
const S = (): InstalledStack => {
  if (!stack) throw new Error('the stack with the npm-installed daemon did not start (see beforeAll)');
  return stack;
};

const bin = (prefix: string) => join(prefix, 'bin', 'signbridge');
const installedDir = (prefix: string) => join(prefix, 'lib', 'node_modules', 'signbridge-client');

/** npm install -g into a fresh prefix, offline (no registry is asked: the tarball has no dependencies). */
function npmInstall(extra: string[]): string {
  const prefix = makeTempDir('sb-npm-prefix-');
  const env = installedEnv(join(prefix, '.home'), { npm_config_cache: join(prefix, '.npm-cache') });
  runOk('npm', ['install', '-g', '--prefix', prefix, '--offline', '--no-audit', '--no-fund', ...extra, tarball], env);
  return prefix;
}

beforeAll(async () => {
  tarball = ensurePackage('npm');
  prefixes.scripts = npmInstall([]);
  prefixes.noScripts = npmInstall(['--ignore-scripts']);
  // The daemon of the install with scripts refused serves the signatures below.
  stack = await startInstalledStack(bin(prefixes.noScripts));
}, 900_000);

afterAll(async () => {
  await stack?.close();
});

describe('the npm tarball', () => {
  it('declares no dependencies and no install scripts, and carries the bundle, the prebuilt files and the sources', () => {
    const listing = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).split('\n');
    for (const f of [
      'package/package.json',
      'package/bin/signbridge.mjs',
      'package/bin/signbridge-layout.json',
      'package/prebuilt/linux-x64/libsignbridge-pkcs11.so',
      'package/prebuilt/linux-x64/peercred.node',
      'package/native-src/build.sh',
      'package/native-src/native/src/module.c',
      'package/native-src/peercred/peercred.cc',
    ]) {
      expect(listing).toContain(f);
    }
    const pkg = JSON.parse(
      execFileSync('tar', ['-xzOf', tarball, 'package/package.json'], { encoding: 'utf8' }),
    ) as Record<string, unknown>;
    expect(pkg.name).toBe('signbridge-client');
    expect(pkg.dependencies).toBeUndefined();
    expect(pkg.optionalDependencies).toBeUndefined();
    expect(pkg.peerDependencies).toBeUndefined();
    const scripts = (pkg.scripts ?? {}) as Record<string, string>;
    for (const hook of ['preinstall', 'install', 'postinstall', 'prepare']) expect(scripts[hook]).toBeUndefined();
    expect(pkg.bin).toEqual({ signbridge: 'bin/signbridge.mjs' });
    console.log(`signbridge-client npm tarball: ${mb(sizeOf(tarball))}`);
  });
});

describe.each([
  ['install scripts allowed', 'scripts'],
  ['install scripts refused (--ignore-scripts)', 'noScripts'],
] as const)('npm install -g --offline, %s', (_label, which) => {
  it('installs the command and nothing from the registry (no node_modules inside the package)', () => {
    const prefix = prefixes[which];
    expect(existsSync(bin(prefix))).toBe(true);
    expect(existsSync(join(installedDir(prefix), 'node_modules'))).toBe(false);
    console.log(`installed (${which}): ${mb(sizeOf(installedDir(prefix)))}`);
  });

  it('signbridge module-path prints the prebuilt module inside the prefix', () => {
    const prefix = prefixes[which];
    const out = runOk(bin(prefix), ['module-path'], S().env, S().work).stdout.trim();
    expect(out).toBe(join(installedDir(prefix), 'prebuilt', 'linux-x64', 'libsignbridge-pkcs11.so'));
    expect(existsSync(out)).toBe(true);
  });

  it('signbridge status reaches the daemon and lists the tenants', () => {
    const out = runOk(bin(prefixes[which]), ['status'], S().env, S().work).stdout;
    expect(out).toMatch(/^daemon: +reachable at /m);
    expect(out).toContain(`(tenant ${tenantFor(RSA)})`);
  });
});

describe('the daemon from the npm install (scripts refused) serving the prebuilt module', () => {
  it('is the installed daemon that listens', () => {
    expect(servedBy(S())).toBe(true);
  });

  it('pkcs11-tool signs through the prebuilt module; openssl verifies the signature', () => {
    const module = runOk(bin(prefixes.noScripts), ['module-path'], S().env).stdout.trim();
    const r = signWithPkcs11Tool(S(), module);
    expect(r.verified).toBe(true);
    expect(r.tampered).toBe(false);
  });

  it('OpenSSL (pkcs11-provider, the installed `signbridge openssl-config`) signs through the prebuilt module', () => {
    const module = runOk(bin(prefixes.noScripts), ['module-path'], S().env).stdout.trim();
    const r = signWithOpenssl(S(), bin(prefixes.noScripts));
    expect(r.config).toContain(`pkcs11-module-path = ${module}`);
    expect(r.verified).toBe(true);
    expect(r.tampered).toBe(false);
  });
});

describe('the fallback build where no prebuilt file fits (native-src/build.sh, plain cmake)', () => {
  it('builds the module and the addon inside the package; the client then prefers them', () => {
    const dir = installedDir(prefixes.noScripts);
    runOk('sh', [join(dir, 'native-src', 'build.sh')], S().env);
    const module = runOk(bin(prefixes.noScripts), ['module-path'], S().env).stdout.trim();
    expect(module).toBe(join(dir, 'build', 'native', 'libsignbridge-pkcs11.so'));
    // The addon built against the shipped Node-API headers loads in Node and reads a socket's credentials.
    const addon = join(dir, 'build', 'peercred', 'peercred.node');
    const probe = `const a = require(${JSON.stringify(addon)}); const net = require('net');
      const srv = net.createServer((c) => { const p = a.getPeerCred(c._handle.fd); console.log(p.uid === process.getuid() ? 'ok' : 'bad'); c.destroy(); srv.close(); });
      srv.listen(${JSON.stringify(join(S().work, 'probe.sock'))}, () => net.connect(${JSON.stringify(join(S().work, 'probe.sock'))}));`;
    expect(runOk('node', ['-e', probe], S().env).stdout.trim()).toBe('ok');
    const r = signWithPkcs11Tool(S(), module);
    expect(r.verified).toBe(true);
    expect(r.tampered).toBe(false);
  }, 600_000); // a compile: no assumption about the machine's speed
});

describe('what the client packages leave out', () => {
  it('daemon --in-process says the package has no in-process mode instead of failing on a missing module', () => {
    const r = run(bin(prefixes.noScripts), ['daemon', '--in-process', join(S().work, 'data'), '--tenant', 'x'], {
      ...S().env,
      SIGNBRIDGE_SOCKET: join(S().work, 'in-process.sock'),
    });
    expect(r.status).toBe(1);
    expect(r.stderr).toContain('has no in-process mode');
  });

  it('has no server or admin command', () => {
    const r = run(bin(prefixes.noScripts), ['server', '--data-dir', join(S().work, 'data')], S().env);
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/unknown command 'server'/);
  });
});

describe('npm uninstall -g', () => {
  it.each(['scripts', 'noScripts'] as const)('removes the command and the package (%s)', (which) => {
    const prefix = prefixes[which];
    const env = installedEnv(join(prefix, '.home'), { npm_config_cache: join(prefix, '.npm-cache') });
    runOk('npm', ['uninstall', '-g', '--prefix', prefix, 'signbridge-client'], env);
    expect(existsSync(bin(prefix))).toBe(false);
    expect(existsSync(installedDir(prefix))).toBe(false);
  });
});

describe('the layout file of the tarball', () => {
  it('names the fallback build first and the prebuilt files second, relative to the bundle', () => {
    const layout = JSON.parse(
      execFileSync('tar', ['-xzOf', tarball, 'package/bin/signbridge-layout.json'], { encoding: 'utf8' }),
    ) as Record<string, string[]>;
    expect(layout.pkcs11Module).toEqual([
      '../build/native/libsignbridge-pkcs11.so',
      '../prebuilt/linux-x64/libsignbridge-pkcs11.so',
    ]);
    expect(layout.peercredAddon?.[1]).toBe('../prebuilt/linux-x64/peercred.node');
    expect(readFileSync(tarball).length).toBeGreaterThan(0);
  });
});
