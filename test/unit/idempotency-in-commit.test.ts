// Issue 46 (migration 0033): the idempotency record of a request that signs at once rides in the group commit of
// its `signed` entry, on every way a store commits (SQLite on the event loop; SQLite's writer thread,
// sqlite-writer.cjs, which repeats the statement; PostgreSQL's signbridge_group_commit_v8): on the entry's seq, a
// live record of the key kept (another instance answered it first), an expired one replaced.
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { IdempotencyRecordRow } from '../../src/store/commit/group-commit.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';

let close: (() => Promise<void>) | undefined;
afterEach(async () => {
  await close?.();
  close = undefined;
});

const entry = (n: number) => ({
  at: new Date().toISOString(),
  tenantId: 't',
  actor: 'k',
  action: 'pkcs11_sign' as const,
  outcome: 'signed' as const,
  details: { n },
});
const record = (reply: string, createdAt: string): IdempotencyRecordRow => ({
  caller_id: 'k',
  idem_key: 'build-1',
  fingerprint: 'f',
  reply,
  created_at: createdAt,
  expired_before: new Date(Date.parse(createdAt) - 24 * 3600_000).toISOString(),
  stale_before: new Date(Date.parse(createdAt) - 120_000).toISOString(),
});

const variants: Array<[string, () => KyselyStore]> = [
  ['SQLite, event loop', () => openSqliteStore(join(makeTempDir(), 'signbridge.db'))],
  [
    'SQLite, writer thread',
    () => openSqliteStore(join(makeTempDir(), 'signbridge.db'), { writerThread: { spinMs: 0 } }),
  ],
  ...(testPostgresUrl()
    ? [['PostgreSQL', () => openPostgresStore(createTestDatabase('idem_commit'))] as [string, () => KyselyStore]]
    : []),
];

describe.each(variants)('idempotency record in the group commit (%s)', (variant, open) => {
  it('is written on its entry seq; a live record is kept, an expired one replaced', async () => {
    const store = open();
    close = () => store.close();
    await store.migrate();
    expect(store.signatures.writesOnThread).toBe(variant.includes('writer thread'));
    const lookup = (at: string) => ({
      callerId: 'k',
      key: 'build-1',
      fingerprint: 'f',
      staleBefore: at,
      expiredBefore: new Date(Date.parse(at) - 24 * 3600_000).toISOString(),
    });
    const t0 = '2026-12-06T10:00:00.000Z';
    await store.audit.append(entry(0));
    const seq = await store.signatures.recordSigned(entry(1), undefined, undefined, undefined, record('first', t0));
    expect(seq).toBe(2);
    expect(await store.idempotency.look(lookup(t0))).toEqual({ state: 'done', reply: 'first', logSeq: 2 });
    // A second answer for the live key (another instance's, committed later) leaves the first.
    const t1 = '2026-12-06T10:00:01.000Z';
    await store.signatures.recordSigned(entry(2), undefined, undefined, undefined, record('second', t1));
    expect(await store.idempotency.look(lookup(t1))).toEqual({ state: 'done', reply: 'first', logSeq: 2 });
    // A day later the key is free again: a new answer replaces the expired record.
    const t2 = '2026-12-07T10:00:02.000Z';
    expect(await store.idempotency.look(lookup(t2))).toEqual({ state: 'absent' });
    const later = await store.signatures.recordSigned(entry(3), undefined, undefined, undefined, record('third', t2));
    expect(await store.idempotency.look(lookup(t2))).toEqual({ state: 'done', reply: 'third', logSeq: later });
  });
});
