// Where state lives (the config file's `store`, --database, SIGNBRIDGE_DATABASE_URL, SIGNBRIDGE_DATABASE_WAIT_SECONDS;
// docs/configuration.md, docs/deployment.md): SQLite in the data dir, or PostgreSQL.
import { isAbsolute, join } from 'node:path';
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { ConfigError } from '../config-error.js';
import { postgresUrlProblem, redactUrl } from './postgres/postgres-store.js';

/** The environment variables the store's settings read. */
export const STORE_ENV = ['SIGNBRIDGE_DATABASE_URL', 'SIGNBRIDGE_DATABASE_WAIT_SECONDS'] as const;

const SqliteStoreConfig = Type.Object(
  { type: Type.Literal('sqlite'), path: Type.Optional(Type.String()) },
  { additionalProperties: false },
);
const PostgresStoreConfig = Type.Object(
  {
    type: Type.Literal('postgres'),
    /** postgres://user:password@host:port/db?sslmode=require; SIGNBRIDGE_DATABASE_URL wins over it. */
    url: Type.Optional(Type.String({ minLength: 1 })),
    poolSize: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
    /** Cancels a statement that runs longer (default 30000; docs/deployment.md says how it is set). */
    statementTimeoutMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 3_600_000 })),
  },
  { additionalProperties: false },
);

/** The config file's `store` block. */
export const StoreConfigSchema = Type.Union([SqliteStoreConfig, PostgresStoreConfig]);
export type StoreConfigFile = Static<typeof StoreConfigSchema>;

export type StoreConfig =
  | { type: 'sqlite'; path: string }
  | {
      type: 'postgres';
      url: string;
      poolSize?: number;
      statementTimeoutMs?: number;
      /** How long a starting process waits for a server it cannot reach (SIGNBRIDGE_DATABASE_WAIT_SECONDS, 30). */
      waitSeconds?: number;
    };

/** --database (a postgres:// URL or sqlite:<file>) over SIGNBRIDGE_DATABASE_URL; undefined: the file decides. */
export function databaseUrlSetting(flag: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  return flag ?? env.SIGNBRIDGE_DATABASE_URL;
}

/** Whether the service runs on PostgreSQL (a URL that is neither postgres: nor sqlite: is refused by storeSetting). */
export function isOnPostgres(databaseUrl: string | undefined, file: StoreConfigFile | undefined): boolean {
  return (databaseUrl !== undefined && !databaseUrl.startsWith('sqlite:')) || file?.type === 'postgres';
}

/** The store block checked against the variant its `type` names, as keyStoreError does for keyStore. */
export function storeError(block: unknown): string | undefined {
  const type = (block as { type?: unknown } | null)?.type;
  const variant = [SqliteStoreConfig, PostgresStoreConfig].find((v) => v.properties.type.const === type);
  if (!variant) return '/store/type must be one of sqlite, postgres';
  const error = [...Value.Errors(variant, block)][0];
  return error && `/store${error.path} ${error.message}`;
}

/**
 * Where state lives: SQLite in the data dir (the default), or PostgreSQL when a URL is given (--database,
 * SIGNBRIDGE_DATABASE_URL, or store.type postgres in the file). `sqlite:<file>` names a SQLite file explicitly.
 * On PostgreSQL, SIGNBRIDGE_DATABASE_WAIT_SECONDS sets how long a start waits for the server.
 */
export function storeSetting(
  url: string | undefined,
  file: StoreConfigFile | undefined,
  dataDir: string,
  env: NodeJS.ProcessEnv,
): StoreConfig {
  const store = storeLocation(url, file, dataDir);
  if (store.type === 'postgres' && env.SIGNBRIDGE_DATABASE_WAIT_SECONDS !== undefined) {
    const raw = env.SIGNBRIDGE_DATABASE_WAIT_SECONDS;
    if (!/^\d{1,3}$/.test(raw) || Number(raw) > 600) {
      throw new ConfigError(`SIGNBRIDGE_DATABASE_WAIT_SECONDS must be whole seconds from 0 to 600, got "${raw}"`);
    }
    store.waitSeconds = Number(raw);
  }
  return store;
}

function storeLocation(url: string | undefined, file: StoreConfigFile | undefined, dataDir: string): StoreConfig {
  const sqliteAt = (path: string): StoreConfig => ({
    type: 'sqlite',
    path: isAbsolute(path) ? path : join(dataDir, path),
  });
  const postgresAt = (from: string, at: string) => {
    const problem = postgresUrlProblem(at);
    if (problem) throw new ConfigError(`the database URL (${from}) ${problem}; got "${redactUrl(at)}"`);
  };
  if (url !== undefined) {
    if (/^postgres(ql)?:\/\//.test(url)) {
      postgresAt('--database or SIGNBRIDGE_DATABASE_URL', url);
      return { type: 'postgres', url, ...(file?.type === 'postgres' && postgresTuning(file)) };
    }
    if (url.startsWith('sqlite:') && url.length > 'sqlite:'.length) return sqliteAt(url.slice('sqlite:'.length));
    throw new ConfigError(
      'the database must be a postgres://user:password@host:port/dbname URL (or sqlite:<file>); got ' +
        `"${url.replace(/\/\/[^@/]*@/, '//***@')}" (from --database or SIGNBRIDGE_DATABASE_URL)`,
    );
  }
  if (file?.type === 'postgres') {
    if (!file.url) throw new ConfigError('store.type postgres needs store.url or SIGNBRIDGE_DATABASE_URL');
    postgresAt('store.url', file.url);
    return { type: 'postgres', url: file.url, ...postgresTuning(file) };
  }
  return sqliteAt(file?.path ?? 'signbridge.db');
}

/** The file's pool size and statement timeout, which apply whichever source gave the URL. */
function postgresTuning(file: { poolSize?: number; statementTimeoutMs?: number }) {
  return {
    ...(file.poolSize !== undefined && { poolSize: file.poolSize }),
    ...(file.statementTimeoutMs !== undefined && { statementTimeoutMs: file.statementTimeoutMs }),
  };
}
