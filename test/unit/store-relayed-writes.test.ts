// Relayed writes are part of the Store contract (src/store/store.ts: commitRelayedWrite), so the primary of a service
// with request workers (src/workers/primary.ts) finds its database's single writer without knowing the dialect: the
// SQLite store commits a write handed over in its own group commit and answers with its entry's seq; the PostgreSQL
// store has no such method, since every process there commits its own.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { AuditEntryInput } from '../../src/store/records/audit-entry.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Store } from '../../src/store/store.js';
import { createTestDatabase } from '../helpers/postgres.js';

const dirs: string[] = [];
const stores: Store[] = [];
afterAll(async () => {
  for (const s of stores) await s.close();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const entry = (n: number): AuditEntryInput => ({
  at: new Date().toISOString(),
  tenantId: null,
  actor: 'service',
  action: 'service_start',
  outcome: 'started',
  details: { worker: n },
});

describe('relayed writes in the Store contract', () => {
  it('the SQLite store commits a relayed write in its group commit and answers with the entry seq', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-relay-'));
    dirs.push(dir);
    const sqlite = openSqliteStore(join(dir, 'state.db'));
    stores.push(sqlite);
    await sqlite.migrate();
    const store: Store = sqlite;
    expect(store.commitRelayedWrite).toBeTypeOf('function');
    // Two writes of one turn, as a worker's message brings them: one group commit, consecutive seqs.
    const seqs = await Promise.all([
      store.commitRelayedWrite?.({ audit: entry(1) }),
      store.commitRelayedWrite?.({ audit: entry(2) }),
    ]);
    expect(seqs).toEqual([1, 2]);
    const written = await store.audit.read(0, 10);
    expect(written.map((e) => e.details)).toEqual([{ worker: 1 }, { worker: 2 }]);
  });

  it('the PostgreSQL store relays nothing: each process commits its own', async () => {
    const store: Store = openPostgresStore(createTestDatabase('relayed_writes'));
    stores.push(store);
    expect(store.commitRelayedWrite).toBeUndefined();
  });
});
