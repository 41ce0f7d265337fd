// A database as an older version left it, for the tests of a migration on data that version wrote: a Kysely handle
// on it (`raw`: rows written as the old code wrote them, and what the migration made read back), and the current
// store on the same database. SQLite in a fresh folder; PostgreSQL, a fresh database, when the run has a cluster.
import { Kysely, Migrator, PostgresDialect, SqliteDialect } from 'kysely';
import pg from 'pg';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { Database } from '../../src/store/tables.js';
import { createTestDatabase, testPostgresUrl } from './postgres.js';
import { makeTempDir } from './service.js';

export interface OldVersionDatabase {
  /** A handle of its own on the database (one connection); the caller destroys it. */
  raw(): Kysely<Database>;
  /** The current version's store on the same database, not yet migrated. */
  store(): KyselyStore;
  postgres: boolean;
}

/** `describe.each`'s table: SQLite, and PostgreSQL when the run has a cluster (its database named `databaseName`). */
export function oldVersionBackends(databaseName: string): Array<[string, () => OldVersionDatabase]> {
  const sqlite = (): OldVersionDatabase => {
    const path = `${makeTempDir()}/old.db`;
    return {
      raw: () => new Kysely<Database>({ dialect: new SqliteDialect({ database: openSqlite(path) }) }),
      store: () => openSqliteStore(path),
      postgres: false,
    };
  };
  const postgres = (): OldVersionDatabase => {
    const url = createTestDatabase(databaseName);
    return {
      raw: () =>
        new Kysely<Database>({
          dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }),
        }),
      store: () => openPostgresStore(url),
      postgres: true,
    };
  };
  return [
    ['SQLite', sqlite],
    ...(testPostgresUrl() ? [['PostgreSQL', postgres] as [string, () => OldVersionDatabase]] : []),
  ];
}

/** Migrates `db` up to and including `migration` (the version before the one under test); throws what failed. */
export async function migrateTo(db: Kysely<Database>, migration: string): Promise<void> {
  const { error } = await new Migrator({ db, provider: { getMigrations: async () => MIGRATIONS } }).migrateTo(
    migration,
  );
  if (error) throw error;
}
