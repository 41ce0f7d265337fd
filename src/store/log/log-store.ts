// The transparency log's state (docs/transparency.md): the tree's size, its tiles, the signed checkpoints and the
// log key. Plain Kysely, so SQLite and PostgreSQL share it like the rest of KyselyStore (migration 0018).
//
// One integrator at a time extends the tree: on PostgreSQL under a transaction-scoped advisory lock taken with
// pg_try_advisory_xact_lock (an instance that finds it held skips its turn; a session lock would stay on a server
// connection that PgBouncer in transaction mode hands to others), on SQLite without a lock (one service per file).
// Either way the write is a compare-and-set on log_state.tree_size and on the newest checkpoint's size, so two
// integrators that raced anyway cannot both extend the tree or both publish.
import { type Kysely, sql, type Transaction } from 'kysely';
import type { KeySpec } from '../../crypto/algorithms.js';
import type { KeyStoreKind } from '../../keys/key-store.js';
import type { AuditRow } from '../audit/audit-chain.js';
import { expandAuditRows, type StoredAuditRow, type WordTables } from '../audit/audit-rows.js';
import type { PartContext } from '../part-context.js';
import { advisoryLockKey } from '../postgres/advisory-lock.js';
import type { Tile, TileKey } from '../records/tiles.js';
import { tileId } from '../records/tiles.js';

export interface LogTables {
  audit_log: StoredAuditRow;
  /** Read only: the words of packed entries (migration 0032), to rebuild them. */
  audit_words: WordTables['audit_words'];
  log_state: { id: number; tree_size: number | string; chain_hash: string; updated_at: string };
  log_tiles: { level: number; idx: number | string; hashes: Buffer };
  log_checkpoints: { tree_size: number | string; root_hash: string; note: string; created_at: string };
  log_keys: {
    id: string;
    origin: string;
    key_store: string;
    key_ref: string;
    key_spec: string;
    public_key_pem: string;
    created_at: string;
  };
}

export interface LogState {
  /** Entries in the tree: seq 1 .. treeSize. */
  treeSize: number;
  /** The audit chain's hash of entry treeSize (the genesis hash for an empty tree). */
  chainHash: string;
}

export interface StoredCheckpoint {
  treeSize: number;
  rootHash: Buffer;
  /** The signed note, as served. */
  note: string;
  createdAt: string;
}

/**
 * The log's two keys: `ecdsa`, the P-256 key in the key store that signed every checkpoint from the first, and
 * `ed25519`, the key the standard verifiers and the witness network accept (one row each in log_keys).
 */
export type LogKeyRole = 'ecdsa' | 'ed25519';

export interface LogKeyRecord {
  /** The checkpoints' origin line and the signed-note key name. */
  origin: string;
  keyStore: KeyStoreKind;
  keyRef: string;
  /** ECC_NIST_P256 (ecdsa), ECC_NIST_EDWARDS25519 (ed25519: the private key sealed, src/transparency/). */
  keySpec: KeySpec | 'ECC_NIST_EDWARDS25519';
  publicKeyPem: string;
  createdAt: string;
}

/** What an integration read its plan from, and what it writes. */
export interface LogReader {
  state(): Promise<LogState>;
  tiles(keys: readonly TileKey[]): Promise<Map<string, Buffer>>;
  auditRows(afterSeq: number, limit: number): Promise<AuditRow[]>;
  latestCheckpoint(): Promise<StoredCheckpoint | undefined>;
}

export interface LogWrites {
  /** The state the plan was made on; the write fails if it changed meanwhile. */
  from: LogState;
  /** The new state, when the tree grew. */
  to?: LogState;
  tiles: readonly Tile[];
  /** A checkpoint to publish, made on `previousCheckpointSize` (null: the first). */
  checkpoint?: Omit<StoredCheckpoint, 'rootHash'> & { rootHash: Buffer };
  previousCheckpointSize?: number | null;
}

/** Another integrator extended the tree or published between this one's reads and its write. */
export class LogRaceError extends Error {}

const INTEGRATOR_LOCK = advisoryLockKey('signbridge transparency log integrator');
/** log_keys.id per role: 'log' is the row the ECDSA key always had. */
const LOG_KEY_IDS: Record<LogKeyRole, string> = { ecdsa: 'log', ed25519: 'log-ed25519' };
const FULL_TILE_BYTES = 256 * 32;

function toCheckpoint(r: LogTables['log_checkpoints']): StoredCheckpoint {
  return {
    treeSize: Number(r.tree_size),
    rootHash: Buffer.from(r.root_hash, 'base64'),
    note: r.note,
    createdAt: r.created_at,
  };
}

/** Reads on a connection or in a transaction. */
class Reader implements LogReader {
  constructor(protected readonly db: Kysely<LogTables>) {}

  async state(): Promise<LogState> {
    const r = await this.db.selectFrom('log_state').selectAll().where('id', '=', 1).executeTakeFirstOrThrow();
    return { treeSize: Number(r.tree_size), chainHash: r.chain_hash };
  }

  async tiles(keys: readonly TileKey[]): Promise<Map<string, Buffer>> {
    const out = new Map<string, Buffer>();
    if (keys.length === 0) return out;
    const rows = await this.db
      .selectFrom('log_tiles')
      .selectAll()
      .where((eb) => eb.or(keys.map((k) => eb.and([eb('level', '=', k.level), eb('idx', '=', k.index)]))))
      .execute();
    for (const r of rows) out.set(tileId(r.level, Number(r.idx)), Buffer.from(r.hashes));
    return out;
  }

  async auditRows(afterSeq: number, limit: number): Promise<AuditRow[]> {
    const rows = await this.db
      .selectFrom('audit_log')
      .selectAll()
      .where('seq', '>', afterSeq)
      .orderBy('seq')
      .limit(limit)
      .execute();
    return (await expandAuditRows(this.db, rows)).map((r) => ({ ...r, seq: Number(r.seq) }));
  }

  async latestCheckpoint(): Promise<StoredCheckpoint | undefined> {
    const r = await this.db
      .selectFrom('log_checkpoints')
      .selectAll()
      .orderBy('tree_size', 'desc')
      .limit(1)
      .executeTakeFirst();
    return r && toCheckpoint(r);
  }
}

export class LogStore extends Reader {
  private readonly postgres: boolean;

  constructor(ctx: PartContext<LogTables>) {
    super(ctx.db);
    this.postgres = ctx.postgres;
  }

  /** The checkpoint of exactly `treeSize` entries, if one was published. */
  async checkpointAt(treeSize: number): Promise<StoredCheckpoint | undefined> {
    const r = await this.db
      .selectFrom('log_checkpoints')
      .selectAll()
      .where('tree_size', '=', treeSize)
      .executeTakeFirst();
    return r && toCheckpoint(r);
  }

  /**
   * The newest `limit` published checkpoints of at least `minSize` entries, newest first (a request waiting for a
   * witnessed checkpoint of its entry looks among them: src/transparency/witnessed-waiters.ts).
   */
  async recentCheckpoints(minSize: number, limit: number): Promise<StoredCheckpoint[]> {
    const rows = await this.db
      .selectFrom('log_checkpoints')
      .selectAll()
      .where('tree_size', '>=', minSize)
      .orderBy('tree_size', 'desc')
      .limit(limit)
      .execute();
    return rows.map(toCheckpoint);
  }

  /**
   * Adds a witness's cosignature line (signed-note line, with its newline) to the checkpoint of `treeSize`, unless
   * a line of the same key (`sameKey`) is there already; served
   * with the checkpoint from then on. False when there is no such checkpoint.
   */
  async addCosignature(treeSize: number, line: string, sameKey: (existingLine: string) => boolean): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      let read = tx.selectFrom('log_checkpoints').select('note').where('tree_size', '=', treeSize);
      // Another instance may add its witness's line at the same moment: the row is held until the commit.
      if (this.postgres) read = read.forUpdate();
      const row = await read.executeTakeFirst();
      if (!row) return false;
      if (row.note.split('\n').some(sameKey)) return true;
      await tx
        .updateTable('log_checkpoints')
        .set({ note: `${row.note}${line}` })
        .where('tree_size', '=', treeSize)
        .execute();
      return true;
    });
  }

  /** One audit entry by seq (the leaf at index seq - 1). */
  async auditRow(seq: number): Promise<AuditRow | undefined> {
    const r = await this.db.selectFrom('audit_log').selectAll().where('seq', '=', seq).executeTakeFirst();
    if (!r) return undefined;
    const [row] = await expandAuditRows(this.db, [r]);
    return row && { ...row, seq: Number(row.seq) };
  }

  async getKey(role: LogKeyRole = 'ecdsa'): Promise<LogKeyRecord | undefined> {
    const r = await this.db.selectFrom('log_keys').selectAll().where('id', '=', LOG_KEY_IDS[role]).executeTakeFirst();
    return (
      r && {
        origin: r.origin,
        keyStore: r.key_store as KeyStoreKind,
        keyRef: r.key_ref,
        keySpec: r.key_spec as LogKeyRecord['keySpec'],
        publicKeyPem: r.public_key_pem,
        createdAt: r.created_at,
      }
    );
  }

  /** Records the log key unless another instance recorded one first; returns the one that is recorded. */
  async putKeyIfAbsent(k: LogKeyRecord, role: LogKeyRole = 'ecdsa'): Promise<LogKeyRecord> {
    await this.db
      .insertInto('log_keys')
      .values({
        id: LOG_KEY_IDS[role],
        origin: k.origin,
        key_store: k.keyStore,
        key_ref: k.keyRef,
        key_spec: k.keySpec,
        public_key_pem: k.publicKeyPem,
        created_at: k.createdAt,
      })
      .onConflict((oc) => oc.column('id').doNothing())
      .execute();
    return (await this.getKey(role)) as LogKeyRecord;
  }

  /**
   * Runs `work` as the log's only integrator. 'busy': another instance is integrating (PostgreSQL), unless `wait`
   * says to wait for it. On PostgreSQL the work runs in one transaction holding the lock (its reads, and its writes
   * through session.apply, which then commit together); on SQLite it reads outside any transaction and each apply is
   * a short transaction of its own, so the store's writer thread is never held up by the hashing.
   */
  async asIntegrator<T>(work: (session: LogSession) => Promise<T>, wait = false): Promise<T | 'busy'> {
    if (this.postgres) {
      return this.db.transaction().execute(async (tx) => {
        if (wait) {
          await sql`SELECT pg_advisory_xact_lock(${INTEGRATOR_LOCK})`.execute(tx);
        } else {
          const { rows } = await sql<{
            locked: boolean;
          }>`SELECT pg_try_advisory_xact_lock(${INTEGRATOR_LOCK}) AS locked`.execute(tx);
          if (!rows[0]?.locked) return 'busy' as const;
        }
        return work(Object.assign(new Reader(tx), { apply: (w: LogWrites) => applyWrites(tx, w) }));
      });
    }
    return work(
      Object.assign(new Reader(this.db), {
        apply: (w: LogWrites) => this.db.transaction().execute((tx) => applyWrites(tx, w)),
      }),
    );
  }
}

/** An integrator's reads and writes (LogStore.asIntegrator). */
export interface LogSession extends LogReader {
  apply(writes: LogWrites): Promise<void>;
}

async function applyWrites(tx: Transaction<LogTables>, w: LogWrites): Promise<void> {
  if (w.to) {
    const moved = await tx
      .updateTable('log_state')
      .set({ tree_size: w.to.treeSize, chain_hash: w.to.chainHash, updated_at: new Date().toISOString() })
      .where('id', '=', 1)
      .where('tree_size', '=', w.from.treeSize)
      .executeTakeFirst();
    if (Number(moved.numUpdatedRows) !== 1) throw new LogRaceError('another integrator extended the tree first');
  }
  for (const t of w.tiles) {
    await tx
      .insertInto('log_tiles')
      .values({ level: t.level, idx: t.index, hashes: t.hashes })
      // A full tile is never rewritten; a right-edge tile grows.
      .onConflict((oc) =>
        oc
          .columns(['level', 'idx'])
          .doUpdateSet({ hashes: (eb) => eb.ref('excluded.hashes') })
          .where(sql<boolean>`length(log_tiles.hashes) < ${FULL_TILE_BYTES}`),
      )
      .execute();
  }
  if (w.checkpoint) {
    const latest = await tx
      .selectFrom('log_checkpoints')
      .select('tree_size')
      .orderBy('tree_size', 'desc')
      .limit(1)
      .executeTakeFirst();
    const latestSize = latest ? Number(latest.tree_size) : null;
    if (latestSize !== (w.previousCheckpointSize ?? null)) {
      throw new LogRaceError('another instance published a checkpoint first');
    }
    await tx
      .insertInto('log_checkpoints')
      .values({
        tree_size: w.checkpoint.treeSize,
        root_hash: w.checkpoint.rootHash.toString('base64'),
        note: w.checkpoint.note,
        created_at: w.checkpoint.createdAt,
      })
      .execute();
  }
}
