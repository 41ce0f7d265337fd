// Opens the configured store and key store: one factory for the service (src/server.ts), the in-process daemon
// (daemon/upstream/in-process-upstream.ts) and the admin commands, so that none of them imports another to get it.

import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { ServiceConfig } from './config/config.js';
import { ensurePrivateDir } from './fs-private.js';
import { AwsKmsKeyStore } from './keys/aws-kms/aws-kms-key-store.js';
import { type KeyStore, KeyStores } from './keys/key-store.js';
import type { Pkcs11Setting } from './keys/key-store-settings.js';
import { Pkcs11KeyStore } from './keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from './keys/pkcs11/softhsm.js';
import { SoftwareKeyStore } from './keys/software/software-key-store.js';
import { startStep } from './start-timing.js';
import {
  DEFAULT_STATEMENT_TIMEOUT_MS,
  openPostgresStore,
  type PostgresStore,
} from './store/postgres/postgres-store.js';
import { openSqliteStore, type SqliteStoreOptions } from './store/sqlite/sqlite-store.js';
import type { Store } from './store/store.js';
import { permanentConnectionProblem, storeFault } from './store/store-errors.js';

/**
 * The configured key store, with the software key store beside a PKCS#11 token: it holds the key specs the token
 * cannot (ML-DSA, SM2), sealed under a key in that token. On AWS KMS, which holds every key spec, new keys go to
 * KMS; a token that holds keys made before the move (the embedded SoftHSM token of this data dir, or the
 * configured `legacy` one) is opened behind it, so older tenants keep signing from where their keys are.
 */
export function openKeyStore(config: ServiceConfig): KeyStores {
  if (config.keyStore.type !== 'aws-kms') return new KeyStores(tokenAndSoftware(config.dataDir, config.keyStore));
  const { region, endpoint, aliasPrefix, requestTimeoutMs, maxAttempts, legacy } = config.keyStore;
  const kms = new AwsKmsKeyStore({
    ...(region !== undefined && { region }),
    ...(endpoint !== undefined && { endpoint }),
    ...(aliasPrefix !== undefined && { aliasPrefix }),
    ...(requestTimeoutMs !== undefined && { requestTimeoutMs }),
    ...(maxAttempts !== undefined && { maxAttempts }),
  });
  const older = legacy ?? (hasEmbeddedToken(config.dataDir) ? { type: 'softhsm' as const } : undefined);
  try {
    return new KeyStores([kms, ...(older ? tokenAndSoftware(config.dataDir, older) : [])]);
  } catch (err) {
    void kms.close();
    throw err;
  }
}

/** The service ran on the embedded default before: its SoftHSM token (and the keys in it) is in the data dir. */
function hasEmbeddedToken(dataDir: string): boolean {
  const tokens = join(dataDir, 'softhsm', 'tokens');
  return existsSync(tokens) && readdirSync(tokens).length > 0;
}

function tokenAndSoftware(dataDir: string, setting: Pkcs11Setting): KeyStore[] {
  const token = openPkcs11KeyStore(dataDir, setting);
  return [token, new SoftwareKeyStore(token, token.description)];
}

function openPkcs11KeyStore(dataDir: string, setting: Pkcs11Setting): Pkcs11KeyStore {
  if (setting.type === 'softhsm') {
    const { sessions, signThreads, inlineSignBelowMs } = setting;
    return Pkcs11KeyStore.open({
      ...embeddedSoftHsmOptions(dataDir),
      sessions: sessions ?? 8,
      ...(signThreads !== undefined && { signThreads }),
      ...(inlineSignBelowMs !== undefined && { inlineBelowMs: inlineSignBelowMs }),
    });
  }
  const { module, tokenLabel, pin, sessions, signThreads, inlineSignBelowMs } = setting;
  return Pkcs11KeyStore.open({
    modulePath: module,
    tokenLabel,
    pin,
    sessions: sessions ?? 8,
    ...(signThreads !== undefined && { signThreads }),
    ...(inlineSignBelowMs !== undefined && { inlineBelowMs: inlineSignBelowMs }),
  });
}

export interface OpenStoreOptions extends SqliteStoreOptions {
  /** Told while a PostgreSQL server cannot be reached yet (default: a warning on stderr). */
  onWait?: (message: string) => void;
  /**
   * For the service (and the in-process daemon): on PostgreSQL, its sessions get the configured statement timeout
   * and the role gets it as its default in the database (docs/deployment.md). Admin commands leave both alone.
   */
  service?: boolean;
}

/** Opens and migrates the configured store. A PostgreSQL server that is not reachable yet is waited for (below). */
export async function openStore(config: ServiceConfig, options: OpenStoreOptions = {}): Promise<Store> {
  ensurePrivateDir(config.dataDir);
  if (config.store.type === 'postgres') {
    const store = openPostgresStore(config.store.url, {
      ...(config.store.poolSize !== undefined && { poolSize: config.store.poolSize }),
      ...(options.service && { statementTimeoutMs: config.store.statementTimeoutMs ?? DEFAULT_STATEMENT_TIMEOUT_MS }),
    });
    try {
      startStep('database: migrating');
      await migrateWhenReachable(
        store,
        (config.store.waitSeconds ?? 30) * 1000,
        options.onWait ?? ((m) => process.stderr.write(`signbridge: ${m}\n`)),
      );
      startStep('database: migrated');
      if (options.service) await store.applyStatementTimeoutDefault();
      startStep('database: statement timeout default applied');
    } catch (err) {
      await store.close().catch(() => undefined);
      throw err;
    }
    return store;
  }
  const store = openSqliteStore(config.store.path, options);
  await store.migrate();
  return store;
}

/** Between two attempts to reach a PostgreSQL server that is not there yet (a restart, a failover). */
const DATABASE_RETRY_MS = 2_000;

/**
 * Migrates (which also proves the connection), retrying while the server cannot be reached, with a line of
 * progress each time; after `waitMs` (SIGNBRIDGE_DATABASE_WAIT_SECONDS, default 30 s), fails with what the last
 * attempt said. Any other error (bad password, missing database, a failed migration, a protocol error such as
 * PgBouncer's "unsupported startup parameter") fails at once, with the fix when we know it: waiting would not fix it.
 */
async function migrateWhenReachable(
  store: PostgresStore,
  waitMs: number,
  onWait: (message: string) => void,
): Promise<void> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      await store.migrate();
      return;
    } catch (err) {
      const cause = (err as { cause?: unknown }).cause;
      const permanent = permanentConnectionProblem(err) ?? permanentConnectionProblem(cause);
      const fault = permanent ? undefined : (storeFault(err) ?? storeFault(cause));
      const left = Math.ceil((deadline - Date.now()) / 1000);
      if (!fault || left <= 0) {
        const fix = permanent ? `; ${permanent}` : '';
        throw new Error(`cannot use the database ${store.description}: ${(err as Error).message}${fix}`);
      }
      onWait(`waiting for the database ${store.description} (${fault}); giving up in ${left} s`);
      await new Promise((r) => setTimeout(r, DATABASE_RETRY_MS));
    }
  }
}

/** How often the checkpointer thread of a long-running process checkpoints the WAL (sqlite-checkpointer.cjs). */
const CHECKPOINT_INTERVAL_MS = 200;

/**
 * The store and the key store of a data dir, opened together for a long-running signer (the service, the
 * in-process daemon): WAL checkpoints run on a thread of their own. The store is closed again if the key store
 * fails.
 */
export async function openStores(
  config: ServiceConfig,
  onStoreError: (message: string) => void = (message) => process.emitWarning(`SQLite store: ${message}`),
  options: Pick<SqliteStoreOptions, 'writerThread' | 'commitSink'> = {},
): Promise<{ store: Store; keyStore: KeyStores }> {
  const store = await openStore(config, {
    service: true,
    // A request worker's commits, and the WAL checkpoints with them, are its primary's (src/workers/).
    ...(options.commitSink
      ? { commitSink: options.commitSink }
      : { backgroundCheckpoints: { intervalMs: CHECKPOINT_INTERVAL_MS, onError: onStoreError } }),
    ...(options.writerThread && { writerThread: { onError: onStoreError, ...options.writerThread } }),
  });
  try {
    startStep('key store: opening');
    const keyStore = openKeyStore(config);
    startStep('key store: open');
    return { store, keyStore };
  } catch (err) {
    await store.close();
    throw err;
  }
}
