// The workload store (src/store/people/workload-store.ts) on SQLite and PostgreSQL: trust rules round-trip, a token is
// exchanged once, also when two instances race with it on one PostgreSQL database, and a workload key keeps the
// verified identity it was minted with.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createWorkloadApiKey, verifyApiKey } from '../../src/auth/api-keys.js';
import type { TrustRule } from '../../src/auth/workload/trust-rule.js';
import type { WorkloadIdentity } from '../../src/auth/workload/workload-identity.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';

const rule = (id: string, tenantId: string, createdAt: string): TrustRule => ({
  id,
  tenantId,
  issuer: 'https://token.actions.githubusercontent.com',
  audience: null,
  conditions: { repository_id: '42', ref: 'refs/tags/v*' },
  role: 'signer',
  keyMinutes: 15,
  maxTokenLifetimeS: 86_400,
  identityClaims: null,
  createdAt,
  createdBy: 'test',
});

const identity: WorkloadIdentity = {
  issuer: 'https://token.actions.githubusercontent.com',
  subject: 'repo:acme/app:ref:refs/tags/v1',
  kind: 'github',
  ruleId: 'tr_0000000000000001',
  tokenId: 'jti-1',
  facts: { project: 'acme/app', ref: 'refs/tags/v1', refProtected: true, runId: '9' },
  runUrl: 'https://github.com/acme/app/actions/runs/9',
};

const dirs: string[] = [];
const stores: Store[] = [];
afterAll(async () => {
  for (const s of stores) await s.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

async function sqlitePair(): Promise<[Store, Store]> {
  const dir = mkdtempSync(join(tmpdir(), 'sb-workload-'));
  dirs.push(dir);
  const store = await openSqliteStore(join(dir, 'state.db'));
  await store.migrate();
  stores.push(store);
  return [store, store];
}

async function postgresPair(): Promise<[Store, Store]> {
  const url = createTestDatabase('workload');
  const a = openPostgresStore(url);
  await a.migrate();
  const b = openPostgresStore(url);
  stores.push(a, b);
  return [a, b];
}

const backends: Array<[string, () => Promise<[Store, Store]>, boolean]> = [
  ['SQLite', sqlitePair, true],
  ['PostgreSQL', postgresPair, testPostgresUrl() !== undefined],
];

describe.each(backends)('workload store on %s', (_name, open, enabled) => {
  it.skipIf(!enabled)('keeps trust rules per tenant and issuer, oldest first, and removes them', async () => {
    const [a, b] = await open();
    await a.workload.addTrustRule(rule('tr_b', 't1', '2026-01-02T00:00:00.000Z'));
    await a.workload.addTrustRule(rule('tr_a', 't1', '2026-01-01T00:00:00.000Z'));
    await a.workload.addTrustRule({
      ...rule('tr_c', 't2', '2026-01-01T00:00:00.000Z'),
      issuer: 'https://gitlab.example',
    });
    expect((await b.workload.listTrustRules('t1')).map((r) => r.id)).toEqual(['tr_a', 'tr_b']);
    expect(await b.workload.listTrustRules('t2', 'https://token.actions.githubusercontent.com')).toEqual([]);
    expect(await b.workload.getTrustRule('tr_a')).toEqual(rule('tr_a', 't1', '2026-01-01T00:00:00.000Z'));
    expect((await b.workload.removeTrustRule('tr_a'))?.id).toBe('tr_a');
    expect(await a.workload.removeTrustRule('tr_a')).toBeUndefined();
    expect((await a.workload.listTrustRules()).map((r) => r.id).sort()).toEqual(['tr_b', 'tr_c']);
  });

  it.skipIf(!enabled)('lets a token be exchanged once, by one of two racing instances', async () => {
    const [a, b] = await open();
    const use = (tokenId: string) => ({
      issuer: 'https://issuer.example',
      tokenId,
      tenantId: 't1',
      usedAt: '2026-06-01T00:00:00.000Z',
      expiresAt: '2026-06-01T00:10:00.000Z',
    });
    const results = await Promise.all([a.workload.useToken(use('jti-race')), b.workload.useToken(use('jti-race'))]);
    expect(results.filter(Boolean)).toHaveLength(1);
    expect(await a.workload.useToken(use('jti-race'))).toBe(false);
    expect(await b.workload.useToken(use('jti-other'))).toBe(true);
    // After the token's exp its row goes: the same jti from a later token of the issuer is not refused forever.
    expect(
      await a.workload.useToken({
        ...use('jti-race'),
        usedAt: '2026-06-01T00:11:00.000Z',
        expiresAt: '2026-06-01T00:20:00.000Z',
      }),
    ).toBe(true);
  });

  it.skipIf(!enabled)('keeps the verified identity with a minted key', async () => {
    const [a, b] = await open();
    const now = new Date('2026-06-01T00:00:00.000Z');
    const minted = await createWorkloadApiKey(
      a,
      { tenantId: 't1', role: 'signer', expiresAt: new Date(now.getTime() + 15 * 60_000), identity },
      now,
    );
    const record = await verifyApiKey(b, minted.token, now);
    expect(record).toMatchObject({ tenantId: 't1', roles: ['signer'], createdVia: 'workload', workload: identity });
    expect(await verifyApiKey(b, minted.token, new Date(now.getTime() + 16 * 60_000))).toBeUndefined();
  });
});
