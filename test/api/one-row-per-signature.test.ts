// Issue 46, one row per signature: a signature made at once (`sign`) writes its `signed` audit entry and nothing
// else: no signatures row, no signature_lookups row (migration 0030). Counted over every table of the database,
// before and after, on each way the store commits: SQLite on the event loop (the entry follows the signature, its
// hash in the INSERT), SQLite with its writer thread (the entry written ahead, its hash set by a later commit's
// UPDATE of the same row) and PostgreSQL (signbridge_group_commit_v6). The entry is then found by its signature, as
// `audit prove --signature` finds it (resolveLogEntry). The background passes (log integrator, dispatcher) are off:
// they write the log's tiles and events later, not for one signature.
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import { KeyStores } from '../../src/keys/key-store.js';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { SoftwareKeyStore } from '../../src/keys/software/software-key-store.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { resolveLogEntry } from '../../src/transparency/entry-lookup.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { callAction, makeTempDir } from '../helpers/service.js';

type Variant = 'sqlite' | 'sqlite-writer-thread' | 'postgres';
const variants: Variant[] = ['sqlite', 'sqlite-writer-thread', ...(testPostgresUrl() ? (['postgres'] as const) : [])];

/** Polls `check` until it holds (the hash of an entry written ahead rides along with a later commit). */
async function until(check: () => Promise<boolean>, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe.each(variants)('one row per signature (%s)', (variant) => {
  let store: KyselyStore;
  let keyStores: KeyStores;
  let app: Awaited<ReturnType<typeof buildApp>>;
  let signer: string;

  beforeAll(async () => {
    const dataDir = makeTempDir();
    store =
      variant === 'postgres'
        ? openPostgresStore(createTestDatabase('onerow'))
        : openSqliteStore(join(dataDir, 'signbridge.db'), {
            ...(variant === 'sqlite-writer-thread' && { writerThread: { spinMs: 0 } }),
          });
    await store.migrate();
    expect(store.signatures.writesOnThread).toBe(variant === 'sqlite-writer-thread');
    const keyStore = Pkcs11KeyStore.open(embeddedSoftHsmOptions(dataDir));
    keyStores = new KeyStores([keyStore, new SoftwareKeyStore(keyStore, keyStore.description)]);
    app = await buildApp({ store, keyStore: keyStores, background: false });
    await app.ready();
    const operator = (await createApiKey(store, 'operator', null, 'test')).token;
    const made = await callAction(app, operator, 'create_tenant', { tenant_id: 'one', key_spec: 'ECC_NIST_P256' });
    expect(made.status).toBe(201);
    signer = (await createApiKey(store, 'signer', 'one', 'test')).token;
  });
  afterAll(async () => {
    await app?.close();
    await keyStores?.close();
    await store?.close();
  });

  /** Rows of every table of the database. */
  async function rowsPerTable(): Promise<Record<string, number>> {
    const db = store.database;
    const tables = (
      variant === 'postgres'
        ? await sql<{ name: string }>`SELECT table_name AS name FROM information_schema.tables
                                       WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`.execute(db)
        : await sql<{ name: string }>`SELECT name FROM sqlite_master WHERE type = 'table'`.execute(db)
    ).rows.map((r) => r.name);
    const counts: Record<string, number> = {};
    for (const table of tables) {
      const { rows } = await sql<{ n: number | string }>`SELECT count(*) AS n FROM ${sql.table(table)}`.execute(db);
      counts[table] = Number(rows[0]?.n);
    }
    return counts;
  }

  function added(before: Record<string, number>, after: Record<string, number>): Record<string, number> {
    return Object.fromEntries(
      Object.keys(after)
        .filter((t) => after[t] !== before[t])
        .map((t) => [t, (after[t] ?? 0) - (before[t] ?? 0)]),
    );
  }

  it('a signature made at once adds one row to the database: its `signed` entry, found by its signature', async () => {
    const hash = createHash('sha256').update(`one row ${variant}`).digest('base64');
    // A first signature: what the first request of a process writes once (caches) stays out of the count.
    expect((await callAction(app, signer, 'sign', { tenant_id: 'one', algorithm: 'ECDSA_SHA_256', hash })).status).toBe(
      200,
    );
    const before = await rowsPerTable();
    const res = await callAction(app, signer, 'sign', { tenant_id: 'one', algorithm: 'ECDSA_SHA_256', hash });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const index = Number(res.headers['signbridge-log-index']);
    const signatureSha256 = createHash('sha256')
      .update(Buffer.from(res.body.signature as string, 'base64'))
      .digest();
    // The hash is on the entry's own row: in its INSERT, or (written ahead) by a later commit's UPDATE.
    await until(async () => (await store.audit.seqOfSignature('one', signatureSha256)) === index + 1);
    expect(added(before, await rowsPerTable())).toEqual({ audit_log: 1 });
    expect(await resolveLogEntry(store, 'one', { signature_sha256: signatureSha256.toString('hex') })).toEqual({
      index,
    });
    const [entry] = await store.audit.read(index, 1);
    expect(entry).toMatchObject({ seq: index + 1, outcome: 'signed', action: 'sign' });
    expect(entry?.details).toMatchObject({ hash, algorithm: 'ECDSA_SHA_256' });
    expect(typeof entry?.details.signature_id).toBe('string');
    // Its record, as the tests read records, is the entry.
    expect((await store.signatures.list('one', 1))[0]).toMatchObject({ id: entry?.details.signature_id, hash });
  });
});
