// Builds the real service (SQLite + a SoftHSM token made for this test file) in a fresh temp data dir.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { Kysely, RawBuilder } from 'kysely';
import { type AppOptions, buildApp } from '../../src/app.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import { KeyStores } from '../../src/keys/key-store.js';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { SoftwareKeyStore } from '../../src/keys/software/software-key-store.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import type { Role } from '../../src/store/records/roles.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { createTestDatabase } from './postgres.js';

export interface TestService {
  app: FastifyInstance;
  store: KyselyStore;
  keyStore: Pkcs11KeyStore;
  /** The token and the software key store beside it (ML-DSA, SM2), as the service opens them. */
  keyStores: KeyStores;
  dataDir: string;
  /** The PostgreSQL URL when the service runs there, else undefined (SQLite in dataDir). */
  database: string | undefined;
  /** The CLI's flags for this service's store: --data-dir DIR, and --database URL on PostgreSQL. */
  storeArgs: string[];
  /** Another connection to the same database, migrated: what a second process or instance would open. */
  openSameStore(): Promise<KyselyStore>;
  /** Runs one statement (Kysely's `sql` template, so parameters work on both databases) on the service's database. */
  run<T>(query: RawBuilder<T>): Promise<T[]>;
  operator: string;
  apiKey(role: Role, tenantId: string | null): Promise<string>;
  close(): Promise<void>;
}

export function makeTempDir(prefix = 'signbridge-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export interface TestStoreChoice {
  /** A postgres:// URL: the service runs on PostgreSQL there instead of SQLite in its data dir. */
  database?: string;
}

/**
 * The store a test service runs on: SQLite in its data dir, or PostgreSQL when asked (`database`), or for every
 * test service of a run with SIGNBRIDGE_TEST_STORE=postgres (the API tests run once on each: scripts/test.sh).
 */
async function openTestStore(dataDir: string, database: string | undefined): Promise<KyselyStore> {
  const store = database ? openPostgresStore(database) : openSqliteStore(join(dataDir, 'signbridge.db'));
  await store.migrate();
  return store;
}

export async function startTestService(
  options: Partial<AppOptions> = {},
  choice: TestStoreChoice = {},
): Promise<TestService> {
  const dataDir = makeTempDir();
  const database =
    choice.database ?? (process.env.SIGNBRIDGE_TEST_STORE === 'postgres' ? createTestDatabase('api') : undefined);
  const store = await openTestStore(dataDir, database);
  const keyStore = Pkcs11KeyStore.open(embeddedSoftHsmOptions(dataDir));
  const keyStores = new KeyStores([keyStore, new SoftwareKeyStore(keyStore, keyStore.description)]);
  const app = await buildApp({ store, keyStore: keyStores, ...options });
  await app.ready();
  const apiKey = async (role: Role, tenantId: string | null) =>
    (await createApiKey(store, role, tenantId, `test ${role}`)).token;
  return {
    app,
    store,
    keyStore,
    keyStores,
    dataDir,
    database,
    storeArgs: ['--data-dir', dataDir, ...(database ? ['--database', database] : [])],
    openSameStore: () => openTestStore(dataDir, database),
    run: async <T>(query: RawBuilder<T>) =>
      (await query.execute((store as unknown as { db: Kysely<unknown> }).db)).rows,
    operator: await apiKey('operator', null),
    apiKey,
    async close() {
      await app.close();
      await keyStores.close(); // the token and the software store's signing threads
      await store.close();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** POST a JSON body to /v1/<action> with a Bearer key; returns status and parsed body. */
export async function callAction(
  app: FastifyInstance,
  token: string | undefined,
  action: string,
  body: Record<string, unknown>,
): Promise<{ status: number; body: Record<string, unknown>; headers: Record<string, unknown> }> {
  const res = await app.inject({
    method: 'POST',
    url: `/v1/${action}`,
    headers: token ? { authorization: `Bearer ${token}` } : {},
    payload: { action, ...body },
  });
  return { status: res.statusCode, body: res.json(), headers: res.headers };
}
