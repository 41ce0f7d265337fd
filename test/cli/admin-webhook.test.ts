// `signbridge admin webhook add|list|test|resume|remove`, run as the real CLI against a store in a temp data dir
// (or, with SIGNBRIDGE_TEST_STORE=postgres, a database of the run's cluster). The receiver is a real HTTP server
// on 127.0.0.1 that checks signatures with the Standard Webhooks reference library; the operator allows
// 127.0.0.1 with SIGNBRIDGE_WEBHOOK_ALLOW, as they would for an internal receiver. Without it, internal addresses
// and plain http are refused and nothing is saved.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { exportAudit, runCliAsync } from '../helpers/cli.js';
import { createTestDatabase } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';
import { keyRecord } from '../helpers/store-records.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

let dataDir: string;
const database = process.env.SIGNBRIDGE_TEST_STORE === 'postgres' ? createTestDatabase('webhook') : undefined;
const receiver = new WebhookReceiver();
const storeArgs = () => ['--data-dir', dataDir, ...(database ? ['--database', database] : [])];
const webhook = (env: NodeJS.ProcessEnv, ...args: string[]) =>
  runCliAsync(['admin', 'webhook', ...args, ...storeArgs()], env);
const allowed = { SIGNBRIDGE_WEBHOOK_ALLOW: '127.0.0.1' };

async function withStore<T>(fn: (store: KyselyStore) => Promise<T>): Promise<T> {
  const store = database ? openPostgresStore(database) : openSqliteStore(join(dataDir, 'signbridge.db'));
  await store.migrate();
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

beforeAll(async () => {
  dataDir = makeTempDir();
  await receiver.start();
  await withStore((store) =>
    store.tenants.create('acme', { ...keyRecord('key-1', 'acme'), keyRef: 'none', publicKeyPem: '' }),
  );
});
afterAll(async () => {
  await receiver.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

describe('admin webhook', () => {
  it(
    'refuses internal addresses, plain http and bad input unless the operator allowed them; nothing is saved',
    {
      timeout: 300_000,
    },
    async () => {
      const refusals: Array<[string[], RegExp]> = [
        [['--url', 'https://127.0.0.1/hook'], /127\.0\.0\.1.*(loopback|special)/i],
        [['--url', 'https://169.254.169.254/latest/meta-data'], /169\.254\.169\.254/],
        [['--url', 'https://10.1.2.3/hook'], /10\.1\.2\.3/],
        [['--url', 'https://localhost/hook'], /localhost/],
        // The IPv6 spellings issue 31 found accepted: IPv4-compatible, site-local and Teredo.
        [['--url', 'https://[::127.0.0.1]/hook'], /\[::7f00:1\] is a loopback.*IPv4-compatible/],
        [['--url', 'https://[fec0::1]/hook'], /\[fec0::1\] is a loopback.*site-local/],
        [['--url', 'https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook'], /Teredo \(2001::\/32\)/],
        [['--url', receiver.url], /https/i],
        [['--url', 'https://user:pw@hooks.example.com/x'], /user|password|credential/i],
        [['--url', 'https://hooks.example.com/x', '--event', 'signature.nope'], /unknown event kind signature\.nope/],
        [['--url', 'https://hooks.example.com/x', '--format', 'xml'], /format must be one of/],
        [['--url', 'mailto:not an address', '--format', 'email'], /mailto:ADDRESS/],
      ];
      for (const [args, message] of refusals) {
        const res = await webhook({}, 'add', '--tenant', 'acme', ...args);
        expect(res.code, args.join(' ')).not.toBe(0);
        expect(res.stderr, args.join(' ')).toMatch(message);
        expect(res.stdout).toBe('');
      }
      const other = await webhook(allowed, 'add', '--tenant', 'nobody', '--url', receiver.url);
      expect(other.code).not.toBe(0);
      expect(other.stderr).toMatch(/no tenant nobody/);
      expect(await withStore((s) => s.events.listSubscriptions())).toEqual([]);
    },
  );

  it(
    'adds (id and secret once), lists without the secret, tests, resumes and removes; all audited',
    {
      timeout: 300_000,
    },
    async () => {
      const added = await webhook(allowed, 'add', '--tenant', 'acme', '--url', receiver.url, '--event', 'key.rotated');
      expect(added.code, added.stderr).toBe(0);
      const [id, secret] = added.stdout.trim().split('\n');
      expect(id).toMatch(/^wh_[0-9a-f]{16}$/);
      expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]+={0,2}$/);
      receiver.secret = secret;

      const listed = await webhook({}, 'list', '--tenant', 'acme', '--json');
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).not.toContain(secret);
      expect(JSON.parse(listed.stdout)).toEqual([
        expect.objectContaining({
          id,
          tenant_id: 'acme',
          url: receiver.url,
          format: 'standard',
          events: ['key.rotated'],
          state: 'active',
        }),
      ]);

      // test: a webhook.test, signed, straight from the CLI.
      const tested = await webhook(allowed, 'test', id as string);
      expect(tested.code, tested.stderr).toBe(0);
      expect(tested.stderr).toMatch(/delivered \(HTTP 200\)/);
      const last = receiver.attempts.at(-1);
      expect(last?.type).toBe('webhook.test');
      expect(last?.signatureValid).toBe(true);
      // A receiver that fails: the command says so and exits non-zero.
      receiver.script.push({ status: 500, body: 'broken' });
      const failing = await webhook(allowed, 'test', id as string);
      expect(failing.code).toBe(1);
      expect(failing.stderr).toMatch(/not delivered: .*500.*retryable/);

      // A paused subscription shows why; resume brings it back.
      await withStore((s) =>
        s.events.pauseSubscription(id as string, 'the receiver answered 410 Gone', new Date().toISOString()),
      );
      const paused = await webhook({}, 'list', '--tenant', 'acme');
      expect(paused.stdout).toMatch(/paused since .*: the receiver answered 410 Gone/);
      const resumed = await webhook({}, 'resume', id as string);
      expect(resumed.code, resumed.stderr).toBe(0);
      expect(JSON.parse((await webhook({}, 'list', '--json')).stdout)[0].state).toBe('active');

      const removed = await webhook({}, 'remove', id as string);
      expect(removed.code, removed.stderr).toBe(0);
      const again = await webhook({}, 'remove', id as string);
      expect(again.code).not.toBe(0);
      expect(again.stderr).toMatch(new RegExp(`no subscription ${id}`));

      const outcomes = exportAudit(storeArgs())
        .filter((e) => e.action === 'webhook_subscription')
        .map((e) => e.outcome);
      expect(outcomes).toEqual(['added', 'resumed', 'removed']);
      // The secret is in no audit entry.
      expect(JSON.stringify(exportAudit(storeArgs()))).not.toContain(secret);
    },
  );
});
