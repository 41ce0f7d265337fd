// `signbridge admin member|person` and person CI keys, run as the real CLI against a store in a temp data dir, or
// with SIGNBRIDGE_TEST_STORE=postgres against a database of the run's PostgreSQL cluster (`--database`; the test
// command's PostgreSQL pass runs this file too).
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkApiKey } from '../../src/auth/api-keys.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { runCli, runCliAsync } from '../helpers/cli.js';
import { createTestDatabase } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';

let dataDir: string;
const database = process.env.SIGNBRIDGE_TEST_STORE === 'postgres' ? createTestDatabase('people') : undefined;
const cli = (...args: string[]) =>
  runCli(['admin', ...args, '--data-dir', dataDir, ...(database ? ['--database', database] : [])]);
// For a test that runs the CLI many times in a row without holding the worker's event loop (test/helpers/cli.ts).
const cliAsync = (...args: string[]) =>
  runCliAsync(['admin', ...args, '--data-dir', dataDir, ...(database ? ['--database', database] : [])]);

async function withStore<T>(fn: (store: KyselyStore) => Promise<T>): Promise<T> {
  const store = database ? openPostgresStore(database) : openSqliteStore(join(dataDir, 'signbridge.db'));
  await store.migrate();
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

const signIn = (subject: string, email: string) =>
  withStore((store) =>
    store.people.signIn(
      { issuer: 'https://idp.example', subject, email, emailVerified: true, name: null },
      new Date().toISOString(),
      [],
    ),
  );

beforeAll(async () => {
  dataDir = makeTempDir();
  // A tenant row is all these commands need (no signing here): its key record points at nothing.
  await withStore((store) =>
    store.tenants.create('acme', {
      id: 'key-1',
      tenantId: 'acme',
      version: 1,
      keySpec: 'ECC_NIST_P256',
      keyRef: 'none',
      publicKeyPem: '',
      createdAt: new Date().toISOString(),
      keyStore: 'pkcs11',
      origin: 'generated',
      materialExpiresAt: null,
    }),
  );
});
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

describe('admin member / person / api-key --for-email', () => {
  it('invites by email, and the first sign-in with that verified email claims the role', async () => {
    const added = cli('member', 'add', '--tenant', 'acme', '--email', 'Erin@Example.com', '--role', 'signer');
    expect(added.code, added.stderr).toBe(0);
    expect(added.stderr).toContain('invited erin@example.com');
    expect(cli('member', 'list').stdout).toMatch(/^acme\tsigner\terin@example.com \(invited\)\tactive\t/m);
    const again = cli('member', 'add', '--tenant', 'acme', '--email', 'erin@example.com', '--role', 'signer');
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('already has role signer');

    const erin = await signIn('erin-sub', 'erin@example.com');
    expect(cli('member', 'list', '--tenant', 'acme').stdout).toMatch(/^acme\tsigner\terin@example.com\tactive\t/m);
    expect(await withStore((s) => s.people.rolesIn(erin.id, 'acme'))).toEqual(['signer']);
  });

  it('bad input: a clear message, exit 1, nothing changed', async () => {
    const before = (await cliAsync('member', 'list')).stdout;
    for (const [args, message] of [
      [['--tenant', 'acme', '--role', 'signer'], /exactly one of --email or --subject/],
      [['--tenant', 'acme', '--subject', 'nobody', '--role', 'signer'], /nobody with subject nobody/],
      [['--tenant', 'nope', '--email', 'x@example.com', '--role', 'signer'], /no tenant nope/],
      [['--tenant', 'acme', '--email', 'x@example.com', '--role', 'root'], /--role must be one of/],
      [['--tenant', 'acme', '--email', 'x@example.com', '--role', 'operator'], /omit --tenant/],
    ] as const) {
      const res = await cliAsync('member', 'add', ...args);
      expect(res.code, args.join(' ')).toBe(1);
      expect(res.stderr).toMatch(message);
    }
    expect((await cliAsync('member', 'list')).stdout).toBe(before);
  });

  it('a CI key for a person: explicit expiry, within their roles, listed with its owner; removed with the role', async () => {
    const noExpiry = cli(
      'api-key',
      'create',
      '--for-email',
      'erin@example.com',
      '--role',
      'signer',
      '--tenant',
      'acme',
    );
    expect(noExpiry.code).toBe(1);
    expect(noExpiry.stderr).toContain('needs --expires-in');
    const notHers = cli(
      'api-key',
      'create',
      '--for-email',
      'erin@example.com',
      '--role',
      'approver',
      '--tenant',
      'acme',
      '--expires-in',
      '90d',
    );
    expect(notHers.code).toBe(1);
    expect(notHers.stderr).toContain('has no role approver');

    const made = cli(
      'api-key',
      'create',
      '--for-email',
      'erin@example.com',
      '--role',
      'signer',
      '--tenant',
      'acme',
      '--expires-in',
      '90d',
    );
    expect(made.code, made.stderr).toBe(0);
    const token = made.stdout.trim();
    const id = token.slice(4, 20);
    const line = cli('api-key', 'list')
      .stdout.split('\n')
      .find((l) => l.startsWith(id)) as string;
    expect(line).toMatch(/\tsigner\tacme\tactive\t.*\terin@example.com\texpires /);
    const expiresAt = Date.parse(/expires (\S+)/.exec(line)?.[1] as string);
    expect(expiresAt - Date.now()).toBeGreaterThan(89 * 86_400_000);
    expect('record' in (await withStore((s) => checkApiKey(s, token)))).toBe(true);

    const removed = cli('member', 'remove', '--tenant', 'acme', '--email', 'erin@example.com', '--role', 'signer');
    expect(removed.code, removed.stderr).toBe(0);
    expect(removed.stderr).toContain('revoked 1 API key');
    expect(cli('api-key', 'list').stdout).toMatch(new RegExp(`^${id}\\tsigner\\tacme\\trevoked `, 'm'));
    expect(await withStore((s) => checkApiKey(s, token))).toEqual({ problem: 'API key is invalid or revoked' });
  });

  it('disabling a person stops their keys; enabling brings them back', async () => {
    await signIn('frank-sub', 'frank@example.com');
    expect(cli('member', 'add', '--tenant', 'acme', '--subject', 'frank-sub', '--role', 'approver').code).toBe(0);
    const token = cli(
      'api-key',
      'create',
      '--for-email',
      'frank@example.com',
      '--role',
      'approver',
      '--tenant',
      'acme',
      '--expires-in',
      '12h',
    ).stdout.trim();
    const disabled = cli('person', 'disable', '--email', 'frank@example.com');
    expect(disabled.code, disabled.stderr).toBe(0);
    expect(cli('person', 'list').stdout).toMatch(/\tfrank@example.com\tfrank-sub\thttps:\/\/idp.example\tdisabled /);
    expect(await withStore((s) => checkApiKey(s, token))).toEqual({ problem: 'API key belongs to a disabled person' });
    expect(cli('person', 'enable', '--email', 'frank@example.com').code).toBe(0);
    expect('record' in (await withStore((s) => checkApiKey(s, token)))).toBe(true);
  });
});
