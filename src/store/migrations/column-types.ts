// Column types that differ between the two dialects, for the migrations that name them.
import { type Kysely, PostgresAdapter, sql } from 'kysely';

/** Bytes: SQLite's blob is PostgreSQL's bytea (the one type the migrations name that differs between the two). */
export function binaryType(db: Kysely<unknown>) {
  return db.getExecutor().adapter instanceof PostgresAdapter ? sql`bytea` : sql`blob`;
}
