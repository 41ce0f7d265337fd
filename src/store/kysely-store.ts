// The Store contract on Kysely, composed of one part per concern (tenant-store.ts, api-key-store.ts, ...). SQL
// dialects differ only in how the Kysely instance is made and in the signing path's reads and group commit, which
// sqlite-store.ts and postgres-store.ts do their own way (the hooks below); every other query lives in the parts
// once.
import { randomInt } from 'node:crypto';
import { type Kysely, type MigrationProvider, Migrator, PostgresAdapter } from 'kysely';
import { AccessCache } from './access-cache.js';
import { AuditStore } from './audit/audit-store.js';
import { lookupRowOf, type SignatureLookup, SignatureStore } from './audit/signature-store.js';
import { GroupCommit, type Write, type WriteBatch } from './commit/group-commit.js';
import { RequestCountStore } from './counters/request-count-store.js';
import { EventStore, type EventTables } from './events/event-store.js';
import { LogStore, type LogTables } from './log/log-store.js';
import { MIGRATIONS } from './migrations.js';
import { partContext } from './part-context.js';
import { ApiKeyStore } from './people/api-key-store.js';
import { PeopleStore, type PeopleTables } from './people/people-store.js';
import { WorkloadStore, type WorkloadStoreTables } from './people/workload-store.js';
import type { ApiKeyRecord } from './records/api-key.js';
import type { EventKind } from './records/event-kinds.js';
import { PENDING_STATUSES } from './records/signing-request.js';
import type { KeyRecord } from './records/tenant-key.js';
import { IdempotencyStore } from './requests/idempotency-store.js';
import { SigningRequestStore } from './requests/signing-request-store.js';
import { RetentionStore } from './retention/retention-store.js';
import type { Store } from './store.js';
import { StoreContext } from './store-context.js';
import type { Database } from './tables.js';
import { KeyImportStore } from './tenants/key-import-store.js';
import { TenantStore } from './tenants/tenant-store.js';
import { TsaStore, type TsaTables } from './tsa/tsa-store.js';
import { ExceptionStore } from './vulnerabilities/exception-store.js';
import { VulnerabilityStore } from './vulnerabilities/vulnerability-store.js';

const provider: MigrationProvider = { getMigrations: async () => MIGRATIONS };

/** Big enough to need pages of its own (overflow pages), so the probe allocates as a batch of signatures would. */
const HEARTBEAT_PAD = Buffer.alloc(3 * 4096, 0x5a);

export interface KyselyStoreOptions {
  /**
   * One group-commit batch in flight at a time (group-commit.ts says why); PostgreSQL sets it, SQLite commits
   * synchronously.
   */
  serialFlushes?: boolean;
}

export abstract class KyselyStore implements Store {
  readonly tenants: TenantStore;
  readonly keyImports: KeyImportStore;
  readonly apiKeys: ApiKeyStore;
  readonly requests: SigningRequestStore;
  readonly exceptions: ExceptionStore;
  readonly audit: AuditStore;
  readonly signatures: SignatureStore;
  readonly requestCounts: RequestCountStore;
  readonly idempotency: IdempotencyStore;
  readonly vulnerabilities: VulnerabilityStore;
  readonly people: PeopleStore;
  readonly workload: WorkloadStore;
  readonly events: EventStore;
  readonly tsa: TsaStore;
  readonly log: LogStore;
  readonly retention: RetentionStore;
  /** The signing path's two reads, answered from memory until a change may have happened (access-cache.ts). */
  protected readonly access = new AccessCache(() => this.readCacheEpoch());
  private readonly groupCommit: GroupCommit;

  constructor(
    protected readonly db: Kysely<Database>,
    readonly description: string,
    options: KyselyStoreOptions = {},
  ) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    // Every part is built from the one context: the parts that declare their own tables see the database through
    // them (part-context.ts), the others through all of them.
    const ctx = new StoreContext(db, postgres, this.access, () => this.events);
    // A write there changed whether some API key works (a person disabled, a membership and its keys gone).
    this.people = new PeopleStore(partContext<PeopleTables, Database>(ctx), () => this.access.forget());
    this.workload = new WorkloadStore(partContext<WorkloadStoreTables, Database>(ctx));
    this.tsa = new TsaStore(partContext<TsaTables, Database>(ctx));
    this.events = new EventStore(partContext<EventTables, Database>(ctx), (write) => this.access.changing(write));
    this.log = new LogStore(partContext<LogTables, Database>(ctx));
    this.retention = new RetentionStore(partContext<unknown, Database>(ctx));
    // The dialect's hooks, bound once: the signing path calls them without a closure per call.
    this.tenants = new TenantStore(ctx, (tenantId) => this.readCurrentKey(tenantId));
    this.apiKeys = new ApiKeyStore(ctx, (id) => this.readApiKey(id));
    this.keyImports = new KeyImportStore(ctx);
    this.requests = new SigningRequestStore(ctx);
    this.exceptions = new ExceptionStore(ctx);
    this.requestCounts = new RequestCountStore(ctx);
    this.idempotency = new IdempotencyStore(ctx);
    this.vulnerabilities = new VulnerabilityStore(ctx);
    this.groupCommit = new GroupCommit((writes) => this.commitWrites(writes), options.serialFlushes ?? false);
    // The transparency log's integrator is told of entries this process committed (AuditStore.onAppended).
    const enqueue = (write: Write) => {
      const committed = this.enqueue(write);
      if (write.audit === undefined) return committed;
      return committed.then((seq) => {
        this.audit.onAppended?.();
        return seq;
      });
    };
    this.audit = new AuditStore(ctx, enqueue);
    this.signatures = new SignatureStore(ctx, {
      enqueue,
      recordLookup: (lookup) => this.writeSignatureLookup(lookup),
      onThread: () => this.commitsOnThread,
    });
  }

  /**
   * The Kysely instance, for `admin migrate`'s copy of every table row for row (move-store.ts), which goes by the
   * table names it reads from the source rather than through the parts.
   */
  get database(): Kysely<Database> {
    return this.db;
  }

  /** Cache reads and misses, for tests and diagnostics. */
  get cacheStats(): { hits: number; misses: number } {
    return this.access.stats;
  }

  /** Migration 0006's counter, read once per event-loop turn by the access cache. */
  protected readCacheEpoch(): number | Promise<number> {
    return this.readCacheEpochRow();
  }

  private async readCacheEpochRow(): Promise<number> {
    const row = await this.db.selectFrom('cache_epoch').select('n').where('id', '=', 1).executeTakeFirstOrThrow();
    return Number(row.n);
  }

  async migrate(): Promise<void> {
    await this.migrateOn(this.db);
  }

  /** Runs the pending migrations on `db` (PostgresStore.migrate passes one connection of its own). */
  protected async migrateOn(db: Kysely<Database>): Promise<void> {
    const { error, results } = await new Migrator({
      db,
      provider,
    }).migrateToLatest();
    if (error) {
      const failed = results?.find((r) => r.status === 'Error')?.migrationName;
      // The cause stays attached: a connection that failed before any migration ran is a store fault to wait out.
      const what = failed ? `store migration ${failed} failed` : 'cannot open the store';
      throw new Error(`${what}: ${String(error)}`, { cause: error });
    }
  }

  background(): Store {
    return this;
  }

  async ping(): Promise<void> {
    await this.db.selectFrom('tenants').select('id').limit(1).execute();
  }

  async stats(): Promise<{ pendingApprovals: number; auditEntries: number }> {
    const pending = await this.db
      .selectFrom('pending_requests')
      .select((eb) => eb.fn.countAll<number>().as('n'))
      .where('status', 'in', PENDING_STATUSES)
      .executeTakeFirst();
    // seq counts from 1 without gaps: the head's seq is the chain's length.
    const head = await this.db.selectFrom('audit_log').select('seq').orderBy('seq', 'desc').limit(1).executeTakeFirst();
    return { pendingApprovals: Number(pending?.n ?? 0), auditEntries: head?.seq ?? 0 };
  }

  /**
   * Commits a row of a few pages and deletes it again (two write transactions). A rolled-back write proves
   * nothing: a full disk shows only when pages are allocated and the commit reaches the file.
   */
  async probeWrite(): Promise<void> {
    // A row of its own: another process on the same data dir (an in-process daemon) may probe at the same moment.
    const id = randomInt(1, 2 ** 31 - 1); // an integer column: 32 bits on PostgreSQL
    await this.db
      .insertInto('store_heartbeat')
      .values({ id, at: new Date().toISOString(), pad: HEARTBEAT_PAD })
      .execute();
    await this.db.deleteFrom('store_heartbeat').where('id', '=', id).execute();
  }

  async close(): Promise<void> {
    await this.db.destroy();
  }

  /**
   * Whether a subscription of the tenant (paused or not) wants events of this kind: answered from the store's exact
   * cache (access-cache.ts), so a subscription made anywhere counts from the first request after it committed.
   */
  async wantsEvent(tenantId: string, kind: EventKind): Promise<boolean> {
    const wanted = await this.access.eventKinds(tenantId, (id) => this.events.subscribedKinds(id));
    return wanted !== undefined && (wanted.all || wanted.kinds.has(kind));
  }

  // The dialect's hooks: what the SQLite store (prepared statements, a writer thread) and the PostgreSQL store
  // (one function call per group commit) do their own way.

  /** The database read behind tenants.currentKey's cache. */
  protected readCurrentKey(tenantId: string): KeyRecord | undefined | Promise<KeyRecord | undefined> {
    return this.tenants.readCurrentKeyRow(tenantId);
  }

  /** The database read behind apiKeys.get's cache. */
  protected readApiKey(id: string): ApiKeyRecord | undefined | Promise<ApiKeyRecord | undefined> {
    return this.apiKeys.readApiKeyRow(id);
  }

  /** Hands a write (an audit entry, signatures' hashes, what goes with them) to the group commit. */
  protected enqueue(write: Write): Promise<number | undefined> {
    return this.groupCommit.enqueue(write);
  }

  /** The hash of a signature whose entry was written ahead of it: set with the next group commit on the event loop. */
  protected writeSignatureLookup(lookup: SignatureLookup): Promise<void> {
    return this.enqueue({ lookups: [lookupRowOf(lookup)] }).then(() => undefined);
  }

  /** Group commits run on the event loop here (the SQLite store may hand them to a writer thread). */
  protected get commitsOnThread(): boolean {
    return false;
  }

  /**
   * One group-commit batch in one transaction: the signature records, then the audit entries chained on the log's
   * head. Each store writes it its own way (SQLite with prepared statements, PostgreSQL in one function call).
   */
  protected abstract commitWrites(writes: WriteBatch): Promise<number | undefined>;
}
