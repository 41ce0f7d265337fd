// Instances starting at once on one PostgreSQL database each make the statement timeout their role's default in
// it (postgres-store.ts, applyStatementTimeoutDefault). In a CI run three instances raced: two ALTER ROLEs inserted
// the same pg_db_role_setting row and one instance failed its start on the unique index. This is that start, with
// more instances at once, on databases where the setting does not exist yet.
import { afterAll, describe, expect, it } from 'vitest';
import { openPostgresStore, type PostgresStore } from '../../src/store/postgres/postgres-store.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';

const stores: PostgresStore[] = [];
afterAll(async () => {
  for (const s of stores) await s.close();
});

describe.skipIf(testPostgresUrl() === undefined)(
  'the statement timeout default, set by instances starting at once',
  () => {
    it('succeeds in every instance, every time, and the role ends up with the value', async () => {
      for (let round = 0; round < 5; round++) {
        // A new database each round: its role setting does not exist yet, as on a first start.
        const url = createTestDatabase(`stdef${round}`);
        const instances = Array.from({ length: 6 }, () =>
          openPostgresStore(url, { statementTimeoutMs: 30_000 + round }),
        );
        stores.push(...instances);
        const results = await Promise.allSettled(instances.map((s) => s.applyStatementTimeoutDefault()));
        expect(results.filter((r) => r.status === 'rejected')).toEqual([]);
        const probe = openPostgresStore(url);
        stores.push(probe);
        const { rows } = await (
          probe as unknown as { pool: { query(q: string): Promise<{ rows: unknown[] }> } }
        ).pool.query("SELECT setting FROM pg_settings WHERE name = 'statement_timeout'");
        expect(rows).toEqual([{ setting: String(30_000 + round) }]);
      }
    });
  },
);
