// The Debian package of the build-host client, built by `npm run package`: its control data and files, then
// installed on this machine with dpkg (as root) and used from the installed paths only: /usr/bin/signbridge, the
// module in p11-kit's folder, the daemon it carries against a service from the checkout, pkcs11-tool and OpenSSL
// signing through the installed module, p11-kit listing it; then removed and purged.
// The only test file that runs dpkg -i (the machine's package database is global state); afterAll purges even
// when a test failed.
import { execFileSync, spawnSync } from 'node:child_process';
import { createPublicKey, X509Certificate } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTempDir } from '../helpers/service.js';
import { tenantFor } from '../module/harness.js';
import {
  EC,
  ensurePackage,
  type InstalledStack,
  installedEnv,
  mb,
  RSA,
  run,
  runOk,
  SYSTEM_PATH,
  servedBy,
  signWithOpenssl,
  signWithPkcs11Tool,
  sizeOf,
  startInstalledStack,
} from './helpers.js';

const PACKAGE = 'signbridge-client';
const MODULE = '/usr/lib/x86_64-linux-gnu/pkcs11/libsignbridge-pkcs11.so';
const SIGNBRIDGE = '/usr/bin/signbridge';
const EXPECTED_FILES = [
  SIGNBRIDGE,
  '/usr/lib/signbridge-client/node',
  '/usr/lib/signbridge-client/signbridge.mjs',
  '/usr/lib/signbridge-client/signbridge-layout.json',
  '/usr/lib/signbridge-client/peercred.node',
  MODULE,
  '/usr/share/p11-kit/modules/signbridge.module',
  '/usr/lib/systemd/user/signbridge-daemon.service',
  '/usr/share/doc/signbridge-client/copyright',
];
// What a build host must not be made to install for the client.
const FORBIDDEN_DEPENDS =
  /chromium|openjdk|default-jdk|java|postgresql|pgbouncer|build-essential|\bgcc\b|\bg\+\+|cmake|libssl-dev|nodejs|npm|softhsm/;

let deb: string;
let extracted: string;
let stack: InstalledStack | undefined;
/** The running stack; throws (failing the test) when beforeAll could not start it. */
const S = (): InstalledStack => {
  if (!stack) throw new Error('the installed stack did not start (see beforeAll)');
  return stack;
};

/** dpkg, waiting while another dpkg/apt run holds the lock (another job on this machine may be installing). */
function dpkg(args: string[]) {
  for (let attempt = 0; ; attempt++) {
    const r = spawnSync('dpkg', args, { encoding: 'utf8', env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });
    const locked = /lock/i.test(r.stderr) && /dpkg (frontend )?lock|locked/i.test(r.stderr);
    if (r.status === 0 || !locked || attempt >= 120) return r;
    execFileSync('sleep', ['5']);
  }
}

/** dpkg-query's format for one field (written so that no one reads it as a template placeholder). */
const field = (name: string) => '-f=$' + '{' + name + '}';

function installedStatus(): string {
  const r = spawnSync('dpkg-query', ['-W', field('db:Status-Status'), PACKAGE], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.trim() : 'unknown';
}

function purge() {
  if (installedStatus() !== 'unknown' && installedStatus() !== 'not-installed') dpkg(['--purge', PACKAGE]);
}

/** The package that owns a library path; with merged /usr, dpkg may know it under /lib or under /usr/lib. */
function ownerOf(path: string): string | undefined {
  const bare = path.replace(/^\/usr\//, '/');
  for (const candidate of [path, bare, `/usr${bare}`]) {
    const r = spawnSync('dpkg', ['-S', candidate], { encoding: 'utf8' });
    if (r.status === 0) return r.stdout.split(':')[0];
  }
  return undefined;
}

/** The control fields of the .deb. */
function control(): Record<string, string> {
  const text = execFileSync('dpkg-deb', ['-f', deb], { encoding: 'utf8' });
  const fields: Record<string, string> = {};
  let last = '';
  for (const line of text.split('\n')) {
    const m = /^([A-Za-z-]+):\s*(.*)$/.exec(line);
    if (m) {
      last = m[1] as string;
      fields[last] = m[2] as string;
    } else if (line.startsWith(' ') && last) fields[last] += `\n${line}`;
  }
  return fields;
}

beforeAll(async () => {
  if (process.getuid?.() !== 0) throw new Error('the .deb test installs a package: run it as root');
  deb = ensurePackage('deb');
  extracted = makeTempDir('sb-deb-x-');
  execFileSync('dpkg-deb', ['-x', deb, extracted]);
  // A run that died before its afterAll may have left the package installed.
  purge();
  const r = dpkg(['-i', deb]);
  if (r.status !== 0) throw new Error(`dpkg -i ${deb} failed:\n${r.stdout}\n${r.stderr}`);
  stack = await startInstalledStack(SIGNBRIDGE);
}, 900_000);

afterAll(async () => {
  await stack?.close();
  if (process.getuid?.() === 0) purge();
}, 300_000);

describe('the .deb before installation (dpkg-deb -I / -c)', () => {
  it('is for amd64, named and versioned as the repository, with a description', () => {
    const f = control();
    expect(f.Package).toBe(PACKAGE);
    expect(f.Architecture).toBe('amd64');
    expect(deb.endsWith(`${PACKAGE}_${f.Version}_amd64.deb`)).toBe(true);
    expect(f.Description).toMatch(/PKCS#11 module/);
    expect(execFileSync('dpkg-deb', ['-I', deb], { encoding: 'utf8' })).toContain('Depends:');
  });

  it('depends on no browser, JDK, database, compiler or system Node', () => {
    const depends = control().Depends ?? '';
    expect(depends).not.toMatch(FORBIDDEN_DEPENDS);
    const names = depends.split(',').map((d) => d.trim().split(/[\s(]/)[0]);
    expect(names).toEqual(expect.arrayContaining(['libc6', 'libssl3']));
  });

  it('depends on the package of every shared library its programs and libraries load (NEEDED)', () => {
    const names = new Set((control().Depends ?? '').split(',').map((d) => d.trim().split(/[\s(]/)[0]));
    const elves = execFileSync('find', [extracted, '-type', 'f'], { encoding: 'utf8' })
      .split('\n')
      .filter((f) => f && readFileSync(f).subarray(0, 4).toString('latin1') === '\x7fELF');
    expect(elves.length).toBeGreaterThanOrEqual(3); // node, peercred.node, the module
    const ldconfig = execFileSync('ldconfig', ['-p'], { encoding: 'utf8' });
    const missing: string[] = [];
    for (const elf of elves) {
      const needed = [...execFileSync('objdump', ['-p', elf], { encoding: 'utf8' }).matchAll(/NEEDED\s+(\S+)/g)].map(
        (m) => m[1] as string,
      );
      for (const lib of needed) {
        const path = new RegExp(
          `\\s${lib.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} \\(libc6,x86-64[^)]*\\) => (\\S+)`,
        ).exec(ldconfig)?.[1];
        const owner = path ? ownerOf(path) : lib.startsWith('ld-linux') ? 'libc6' : undefined;
        if (!owner || !names.has(owner)) missing.push(`${elf.slice(extracted.length)} needs ${lib} (${owner})`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('asks for a libc6 at least as new as the newest GLIBC_ symbol version its files use', () => {
    const declared = /libc6 \(>= ([0-9.]+)\)/.exec(control().Depends ?? '')?.[1];
    expect(declared).toBeDefined();
    const versions = execFileSync('find', [extracted, '-type', 'f'], { encoding: 'utf8' })
      .split('\n')
      .filter((f) => f && readFileSync(f).subarray(0, 4).toString('latin1') === '\x7fELF')
      // node's dynamic symbol table is megabytes: let grep reduce it to the versions.
      .flatMap((f) =>
        execFileSync('bash', ['-c', 'objdump -T "$1" | grep -o "GLIBC_[0-9.]*" | sort -u', '_', f], {
          encoding: 'utf8',
        }).split('\n'),
      )
      .filter(Boolean)
      .map((v) => v.slice('GLIBC_'.length));
    const newer = (a: string, b: string) => {
      const [x, y] = [a.split('.').map(Number), b.split('.').map(Number)];
      for (let i = 0; i < Math.max(x.length, y.length); i++)
        if ((x[i] ?? 0) !== (y[i] ?? 0)) return (x[i] ?? 0) > (y[i] ?? 0);
      return false;
    };
    const newest = versions.reduce((a, b) => (newer(b, a) ? b : a), '0');
    expect(newer(newest, declared as string), `newest GLIBC_${newest}, Depends libc6 (>= ${declared})`).toBe(false);
  });

  it('holds the module where p11-kit and OpenSSL look, the p11-kit registration, the user unit and the client', () => {
    const listing = execFileSync('dpkg-deb', ['-c', deb], { encoding: 'utf8' });
    for (const file of EXPECTED_FILES) expect(listing).toContain(` .${file}\n`);
    expect(statSync(join(extracted, SIGNBRIDGE)).mode & 0o111).toBe(0o111);
    expect(readFileSync(join(extracted, '/usr/share/p11-kit/modules/signbridge.module'), 'utf8')).toMatch(
      /^module: libsignbridge-pkcs11\.so$/m,
    );
    const unit = readFileSync(join(extracted, '/usr/lib/systemd/user/signbridge-daemon.service'), 'utf8');
    expect(unit).toMatch(/^ExecStart=\/usr\/bin\/signbridge daemon$/m);
    expect(unit).toMatch(/^WantedBy=default\.target$/m);
    // No conffiles: nothing under /etc.
    expect(listing).not.toMatch(/ \.\/etc\//);
    const f = control();
    const installedKb = Number(f['Installed-Size']);
    console.log(
      `signbridge-client .deb: ${mb(statSync(deb).size)} file, Installed-Size ${mb(installedKb * 1024)} ` +
        `(measured ${mb(sizeOf(join(extracted, 'usr')))})`,
    );
    expect(installedKb * 1024).toBeGreaterThan(sizeOf(join(extracted, 'usr')) * 0.9);
  });
});

describe('installed with dpkg -i, used from the installed paths', () => {
  it('dpkg knows the package and its files', () => {
    expect(installedStatus()).toBe('installed');
    const files = execFileSync('dpkg', ['-L', PACKAGE], { encoding: 'utf8' }).split('\n');
    for (const file of EXPECTED_FILES) {
      expect(files).toContain(file);
      expect(existsSync(file)).toBe(true);
    }
  });

  it('signbridge module-path prints the installed module', () => {
    const stack = S();
    const out = runOk(SIGNBRIDGE, ['module-path'], stack.env, stack.work).stdout;
    expect(out).toBe(`${MODULE}\n`);
  });

  it('signbridge --help lists the client commands and no service commands', () => {
    const stack = S();
    const out = runOk(SIGNBRIDGE, ['--help'], stack.env, stack.work).stdout;
    for (const c of ['daemon', 'status', 'login', 'logout', 'module-path', 'cert', 'key', 'sign', 'digest', 'audit']) {
      expect(out).toMatch(new RegExp(`^  ${c}\\b`, 'm'));
    }
    expect(out).toMatch(/^ {2}openssl-config\b/m);
    expect(out).toMatch(/^ {2}p11-kit\b/m);
    expect(out).not.toMatch(/^ {2}(server|admin)\b/m);
  });

  it('runs on the Node it carries, not the system one', () => {
    const stack = S();
    const out = runOk('/usr/lib/signbridge-client/node', ['--version'], stack.env).stdout;
    expect(out).toMatch(/^v24\./);
    expect(readFileSync(SIGNBRIDGE, 'utf8')).toContain('/usr/lib/signbridge-client/node');
  });

  it('signbridge status: the installed daemon is up and exposes both tenants', () => {
    const stack = S();
    expect(servedBy(stack)).toBe(true);
    const out = runOk(SIGNBRIDGE, ['status'], stack.env, stack.work).stdout;
    expect(out).toMatch(/^daemon: +reachable at /m);
    expect(out).toMatch(/^service: +reachable$/m);
    expect(out).toContain(`(tenant ${tenantFor(RSA)})`);
    expect(out).toContain(`(tenant ${tenantFor(EC)})`);
  });

  it('pkcs11-tool signs through the installed module and daemon; openssl verifies the signature', () => {
    const stack = S();
    const r = signWithPkcs11Tool(stack, MODULE);
    expect(r.verified).toBe(true);
    expect(r.tampered).toBe(false);
  });

  it('OpenSSL (pkcs11-provider, `signbridge openssl-config`) signs through the installed module', () => {
    const stack = S();
    if (!existsSync('/usr/lib/x86_64-linux-gnu/ossl-modules/pkcs11.so')) {
      throw new Error('pkcs11-provider is not installed (scripts/setup.sh installs it from bookworm-backports)');
    }
    const r = signWithOpenssl(stack, SIGNBRIDGE);
    expect(r.config).toContain(`pkcs11-module-path = ${MODULE}`);
    expect(r.verified).toBe(true);
    expect(r.tampered).toBe(false);
  });

  it('signbridge cert self-signed makes a certificate through the installed daemon, signed by the tenant key', () => {
    const stack = S();
    const dir = makeTempDir('sb-deb-cert-');
    const args = ['cert', 'self-signed', '--tenant', tenantFor(EC), '--subject', '/CN=signbridge package test'];
    runOk(SIGNBRIDGE, [...args, '--days', '1', '--out', 'self.pem'], stack.env, dir);
    const cert = new X509Certificate(readFileSync(join(dir, 'self.pem')));
    const key = createPublicKey(stack.stack.publicKeys.get(tenantFor(EC)) as string);
    expect(cert.publicKey.equals(key)).toBe(true);
    expect(cert.verify(key)).toBe(true);
  });

  it('signbridge sign signs a file over the HTTP API with the RSA tenant key; openssl verifies it', () => {
    const stack = S();
    const dir = makeTempDir('sb-deb-sign-');
    writeFileSync(join(dir, 'file.txt'), 'signed by the installed signbridge sign\n');
    writeFileSync(join(dir, 'service.pem'), stack.stack.publicKeys.get(tenantFor(RSA)) as string);
    const keyFile = join(stack.stack.dir, 'keys', tenantFor(RSA));
    runOk(
      SIGNBRIDGE,
      [
        'sign',
        '--tenant',
        tenantFor(RSA),
        '--service-url',
        stack.stack.server.url,
        '--api-key-file',
        keyFile,
        'file.txt',
      ],
      stack.env,
      dir,
    );
    const r = run(
      'openssl',
      ['dgst', '-sha256', '-verify', 'service.pem', '-signature', 'file.txt.sig', 'file.txt'],
      stack.env,
      dir,
    );
    expect(r.stdout).toContain('Verified OK');
  });

  it('p11-kit lists the module from the package registration, with the daemon tokens', () => {
    const stack = S();
    // Only the system registration: no per-user p11-kit configuration of this machine's root interferes.
    const out = runOk('p11-kit', ['list-modules'], { ...stack.env, P11_KIT_NO_USER_CONFIG: '1' }).stdout;
    const block = out.split(/\n(?=\S)/).find((b) => b.startsWith('signbridge: '));
    expect(block, out).toMatch(/^signbridge: libsignbridge-pkcs11\.so\n/);
    expect(block).toContain(`token: ${tenantFor(RSA)}`);
  });

  it('systemd-analyze accepts the user unit', () => {
    if (spawnSync('systemd-analyze', ['--version']).status !== 0) return;
    const r = run('systemd-analyze', ['verify', '/usr/lib/systemd/user/signbridge-daemon.service'], {
      ...process.env,
      PATH: SYSTEM_PATH,
    });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stderr + r.stdout).not.toMatch(/signbridge-daemon\.service:\d+:|Unknown (key|section)|not executable/i);
  });
});

describe('removed with dpkg -r, then purged', () => {
  it('dpkg -r leaves none of its files (it has no configuration files to keep)', () => {
    if (installedStatus() !== 'installed') throw new Error('the package is not installed');
    const files = execFileSync('dpkg', ['-L', PACKAGE], { encoding: 'utf8' })
      .split('\n')
      .filter((f) => f && existsSync(f) && !statSync(f).isDirectory());
    expect(files).toEqual(expect.arrayContaining(EXPECTED_FILES));
    const r = dpkg(['-r', PACKAGE]);
    expect(r.status, r.stderr).toBe(0);
    for (const f of files) expect(existsSync(f), f).toBe(false);
    expect(existsSync('/usr/lib/signbridge-client')).toBe(false);
    // What may remain is dpkg's record of configuration files; with none, dpkg forgets the package at once.
    expect(['not-installed', 'config-files', 'unknown']).toContain(installedStatus());
    const conffiles = spawnSync('dpkg-query', ['-W', field('Conffiles'), PACKAGE], { encoding: 'utf8' }).stdout.trim();
    expect(conffiles).toBe('');
  });

  it('dpkg --purge forgets it; p11-kit no longer lists the module', () => {
    dpkg(['--purge', PACKAGE]);
    expect(['not-installed', 'unknown']).toContain(installedStatus());
    const env = installedEnv(makeTempDir('sb-deb-home-'), { P11_KIT_NO_USER_CONFIG: '1' });
    expect(runOk('p11-kit', ['list-modules'], env).stdout).not.toMatch(/^signbridge:/m);
    expect(readdirSync('/usr/lib/x86_64-linux-gnu/pkcs11')).not.toContain('libsignbridge-pkcs11.so');
  });
});
