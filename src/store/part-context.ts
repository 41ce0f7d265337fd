// What every part of the store is built from (kysely-store.ts builds them all the same way): the database's Kysely
// instance, seen through the tables the part declares next to it (its own `XTables`), and which dialect it is. The
// parts that read the signing path's cache or write events take the whole store's context (store-context.ts),
// which is one of these over every table.
import type { Kysely } from 'kysely';

export interface PartContext<Tables> {
  readonly db: Kysely<Tables>;
  /** True on PostgreSQL, where a query must be written otherwise (JSON expressions, SKIP LOCKED, advisory locks). */
  readonly postgres: boolean;
}

/**
 * `db` (or a transaction on it) seen through `Tables`, a slice of its tables `From`. Kysely's types are invariant in
 * the database (a transaction's callback receives a `Transaction<From>`), so a `Kysely<From>` is no `Kysely<Tables>`
 * even where `From` has every table of `Tables`. The constraint `From extends Tables` makes the view sound (every
 * table and column the part names is one the database has, with its type); this is the store's one cast between
 * table sets.
 */
export function narrowTables<Tables, From extends Tables>(db: Kysely<From>): Kysely<Tables> {
  return db as unknown as Kysely<Tables>;
}

/** The context of a part that declares its own tables: the same database and dialect, seen through `Tables`. */
export function partContext<Tables, From extends Tables>(ctx: PartContext<From>): PartContext<Tables> {
  return { db: narrowTables<Tables, From>(ctx.db), postgres: ctx.postgres };
}
