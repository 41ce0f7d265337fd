// The daemon's side of `signbridge login` in isolation: the login files (atomic, private), the key re-read after a
// rename that keeps size and mtime, the metadata tied to its key, expiry refused and warned about (a clock the test
// sets), and the key catalog following the login's tenant.
import { chmodSync, readdirSync, renameSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { describe, expect, it, vi } from 'vitest';
import { apiKeyFromFile } from '../../daemon/credentials.js';
import { KeyCatalog } from '../../daemon/key-catalog.js';
import {
  defaultLoginFiles,
  type LoginFiles,
  preparePrivateDir,
  readLoginMetadata,
  removeLogin,
  writeLogin,
} from '../../daemon/login-files.js';
import { LoginSession } from '../../daemon/login-session.js';
import type { Upstream } from '../../daemon/upstream/upstream.js';
import { tempDir } from './helpers.js';

const KEY_A = `sbk_${'a'.repeat(16)}_${'A'.repeat(43)}`;
const KEY_B = `sbk_${'b'.repeat(16)}_${'B'.repeat(43)}`;

function files(): LoginFiles {
  return defaultLoginFiles({ XDG_CONFIG_HOME: join(tempDir('sbd-ls-'), 'config') });
}
function signIn(f: LoginFiles, key: string, tenant: string, expiresAt: string | null) {
  writeLogin(f, key, {
    service_url: 'https://signbridge.example.com',
    tenant_id: tenant,
    roles: ['signer'],
    email: 'alice@example.com',
    expires_at: expiresAt,
    created_at: '2026-01-01T00:00:00.000Z',
  });
}
function capture() {
  const lines: Array<{ level: number; msg: string }> = [];
  const log = pino({ level: 'info' }, { write: (s: string) => lines.push(JSON.parse(s)) });
  return { log, lines };
}

describe('login files', () => {
  it('are private: folder 0700, files 0600, no temp files left; a wider folder of ours is tightened', () => {
    const f = files();
    preparePrivateDir(f.dir);
    writeFileSync(join(f.dir, 'keep'), 'x');
    // A folder that exists with group/other bits (a shared ~/.config/signbridge) is tightened, not refused.
    chmodSync(f.dir, 0o755);
    signIn(f, KEY_A, 'acme', null);
    expect(statSync(f.dir).mode & 0o777).toBe(0o700);
    expect(statSync(f.keyFile).mode & 0o777).toBe(0o600);
    expect(statSync(f.metadataFile).mode & 0o777).toBe(0o600);
    expect(readdirSync(f.dir).sort()).toEqual(['api-key', 'keep', 'login.json']);
    expect(readLoginMetadata(f)?.tenant_id).toBe('acme');
    expect(removeLogin(f)).toBe(true);
    expect(readLoginMetadata(f)).toBeUndefined();
    expect(removeLogin(f)).toBe(false);
  });

  it('a login.json that is not ours is an error, not "signed out"', () => {
    const f = files();
    preparePrivateDir(f.dir);
    writeFileSync(f.metadataFile, '{"tenant_id": 1}');
    expect(() => readLoginMetadata(f)).toThrow(/lacks service_url/);
  });
});

describe('apiKeyFromFile', () => {
  it('reads a key replaced by rename even when size and mtime stay the same', async () => {
    const dir = tempDir('sbd-ls-');
    const path = join(dir, 'api-key');
    writeFileSync(path, `${KEY_A}\n`, { mode: 0o600 });
    const stamp = new Date('2026-01-01T00:00:00Z'); // whole seconds, so both files can carry exactly this mtime
    utimesSync(path, stamp, stamp);
    const source = apiKeyFromFile(path);
    expect(source.get()).toBe(KEY_A);
    writeFileSync(join(dir, 'next'), `${KEY_B}\n`, { mode: 0o600 });
    utimesSync(join(dir, 'next'), stamp, stamp);
    renameSync(join(dir, 'next'), path);
    expect(statSync(path).mtimeMs).toBe(stamp.getTime());
    // Seen when the watch on its folder tells (or within a second: daemon/credentials.ts).
    await vi.waitFor(() => expect(source.get()).toBe(KEY_B), { timeout: 5000 });
  });
});

describe('LoginSession', () => {
  it('refuses an expired key with a message naming `signbridge login`, and a missing one likewise', () => {
    let now = Date.parse('2026-06-01T10:00:00Z');
    const f = files();
    signIn(f, KEY_A, 'acme', '2026-06-01T12:00:00.000Z');
    const session = new LoginSession(f, { now: () => now });
    const source = session.apiKeySource();
    expect(source.get()).toBe(KEY_A);
    expect(source.renewHint).toMatch(/signbridge login/);
    now = Date.parse('2026-06-01T12:00:00Z');
    expect(() => source.get()).toThrow(
      /the API key from `signbridge login` \(tenant acme, alice@example\.com\) expired at 2026-06-01T12:00:00\.000Z: run `signbridge login --service-url https:\/\/signbridge\.example\.com`/,
    );
    removeLogin(f);
    expect(() => source.get()).toThrow(/not signed in \(no key at .*api-key\): run `signbridge login`/);
  });

  it('ignores metadata that belongs to another key (a login half-replaced)', () => {
    const f = files();
    signIn(f, KEY_A, 'acme', '2000-01-01T00:00:00.000Z');
    writeFileSync(f.keyFile, `${KEY_B}\n`, { mode: 0o600 });
    const session = new LoginSession(f);
    expect(session.metadata()).toBeUndefined();
    expect(session.apiKeySource().get()).toBe(KEY_B); // the expired metadata is not this key's
  });

  it('warns once at 1 h and once at 10 min before the expiry, and once when it has passed', () => {
    let now = Date.parse('2026-06-01T08:00:00Z');
    const f = files();
    signIn(f, KEY_A, 'acme', '2026-06-01T12:00:00.000Z');
    const { log, lines } = capture();
    const session = new LoginSession(f, { now: () => now });
    session.watch(log);
    session.stop();
    const warnings = () => lines.filter((l) => l.level >= 40).map((l) => l.msg);
    expect(warnings()).toEqual([]);
    now = Date.parse('2026-06-01T11:05:00Z');
    session.check();
    session.check();
    expect(warnings()).toEqual([expect.stringMatching(/expires in 55 min: run `signbridge login` to renew it/)]);
    now = Date.parse('2026-06-01T11:52:00Z');
    session.check();
    session.check();
    expect(warnings()).toHaveLength(2);
    expect(warnings()[1]).toMatch(/expires in 8 min/);
    now = Date.parse('2026-06-01T12:00:01Z');
    session.check();
    session.check();
    expect(warnings()).toHaveLength(3);
    expect(warnings()[2]).toMatch(/has expired: run `signbridge login`/);
    // A new login is a new key: its warnings start over.
    signIn(f, KEY_B, 'acme', '2026-06-01T12:30:00.000Z');
    session.check();
    expect(warnings()).toHaveLength(4);
    expect(warnings()[3]).toMatch(/expires in 30 min/);
  });

  it('the key catalog follows the login to another tenant', async () => {
    const f = files();
    signIn(f, KEY_A, 'acme', null);
    const session = new LoginSession(f);
    const asked: string[] = [];
    const upstream = {
      description: 'test',
      async getPublicKey(tenantId: string) {
        asked.push(tenantId);
        throw new Error('not needed');
      },
    } as unknown as Upstream;
    const initial = [{ tenantId: 'acme', label: 'acme', certificates: {} }];
    const catalog = new KeyCatalog({
      upstream,
      tenants: initial,
      ttlMs: 60_000,
      log: pino({ level: 'silent' }),
      tenantSource: () => session.tenants(initial),
    });
    expect(catalog.tenantList.map((t) => t.tenantId)).toEqual(['acme']);
    signIn(f, KEY_B, 'beta', null);
    expect(catalog.tenantList.map((t) => t.tenantId)).toEqual(['beta']);
    expect(catalog.tenant('acme')).toBeUndefined();
    await expect(catalog.current('acme')).rejects.toThrow(/not exposed/);
    removeLogin(f);
    expect(catalog.tenantList.map((t) => t.tenantId)).toEqual(['acme']); // signed out: the start's tenants
    expect(asked).toEqual([]);
  });
});
