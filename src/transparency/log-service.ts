// The transparency log of one service instance (docs/transparency.md): the log key, the background integrator and
// checkpoint publisher, and the proofs the /log endpoints serve. Every instance runs one; on PostgreSQL they take
// turns (LogStore.asIntegrator), so all of them extend and sign one tree.
import { randomBytes, verify } from 'node:crypto';
import type { KeyStores } from '../keys/key-store.js';
import type { Sealer } from '../keys/sealer.js';
import type { LogKeyRecord, LogReader, LogStore, LogWrites, StoredCheckpoint } from '../store/log/log-store.js';
import { LogRaceError } from '../store/log/log-store.js';
import { formatCheckpoint } from './checkpoint.js';
import { InclusionWaiters } from './inclusion-waiters.js';
import { LogIntegrityError, leafBytesOfRow, planIntegration } from './log-integrator.js';
import { consistencyProof, inclusionProof, type NodeSource, rootAt } from './merkle.js';
import { createSealedEd25519Key, ED25519_LOG_KEY_SPEC, signWithSealedEd25519Key } from './sealed-ed25519-key.js';
import {
  ed25519NoteKey,
  formatMultiSignedNote,
  type NoteKey,
  type NoteSigning,
  noteDigest,
  noteKey,
  verifierKey,
} from './signed-note.js';
import { TileNodeSource, tileId, tilesNeeded } from './tiles.js';
import { type Checkpoint, CheckpointError, openCheckpoint } from './verify/checkpoint.js';
import { EMPTY_ROOT, leafHash, verifyConsistency } from './verify/merkle.js';
import { validKeyName } from './verify/note.js';
import { WitnessedWaiters } from './witnessed-waiters.js';
import type { WitnessSettings } from './witnesses/witness-settings.js';

export interface LogSettings {
  /** The checkpoints' origin line; default `signbridge/<public URL host>`, else `signbridge/log-<random>`. */
  origin?: string;
  /** Publish once this many entries were added since the last checkpoint. */
  checkpointEveryEntries: number;
  /** ... or once the last checkpoint is this old and entries were added since. */
  checkpointEverySeconds: number;
  /** Serve /log/* without an API key. */
  public: boolean;
  /**
   * Entries appended per store write (default 512): the integrator hashes on the event loop, so a batch is a pause
   * of requests (~10-20 ms at 512); requests run between batches.
   */
  batchSize?: number;
  /** The witnesses each new checkpoint is sent to (log.witnesses). */
  witnesses?: WitnessSettings[];
  /**
   * How soon the integrator takes entries this process committed, and how often it looks while entries arrive
   * (default 250 ms); 0: this instance does not integrate in the
   * background and leaves it to another instance (it still serves, and still publishes on demand).
   */
  intervalMs?: number;
}

/** Entries per integration batch (LogSettings.batchSize). */
export const DEFAULT_BATCH = 512;

export const LOG_DEFAULTS = {
  checkpointEveryEntries: 1000,
  checkpointEverySeconds: 1,
  public: false,
  intervalMs: 250,
} as const;

export interface LogServiceOptions {
  store: LogStore;
  keyStores: KeyStores;
  /**
   * Seals the log's Ed25519 key (the key stores' sealer: a PKCS#11 token). Without one (AWS KMS alone) the
   * checkpoints carry the ECDSA line only.
   */
  sealer?: Sealer | undefined;
  settings: LogSettings;
  /** The service's public URL: the default origin is named after its host. */
  publicUrl?: string;
  now?: () => Date;
  /** Told of every refusal to extend or sign the log (logged as an error and counted by the caller). */
  onIntegrityFailure?: (message: string) => void;
  onError?: (message: string) => void;
  /**
   * Told once per key (ECDSA, then Ed25519), by the instance whose key became the log's key: the caller records it
   * in the audit log (the log's own entries then commit to the keys that sign them).
   */
  onKeyCreated?: (record: LogKeyRecord, verifierKey: string) => Promise<void>;
  /** Told of each checkpoint this instance published, once committed (the witnesses are sent it). */
  onPublished?: (checkpoint: StoredCheckpoint) => void;
  /**
   * Another process integrates for this one (a request worker's primary): nudge() tells it instead, since this
   * process's integrator never starts.
   */
  integratesElsewhere?: () => void;
  /**
   * The witnesses a request waiting for a witnessed checkpoint waits for (`Prefer: wait-for-log=witnessed`): by
   * their key names. Default: every configured witness; the app leaves out those that refuse this log.
   */
  witnessesToAwait?: () => readonly string[];
}

/** The checkpoint a waiting request is answered against, and whether every awaited witness cosigned it. */
export interface LoggedCheckpoint {
  checkpoint: StoredCheckpoint;
  witnessed: boolean;
}

/** Recent checkpoints a witnessed wait looks among (witnesses cosign the newest, so a few suffice). */
const WITNESSED_CANDIDATES = 16;

/** The serving side of a proof: the tree size it is in, and the checkpoint that commits to that size. */
export interface InclusionAnswer {
  index: number;
  treeSize: number;
  leafHash: Buffer;
  /** The leaf's bytes (the entry's canonical JSON) and its tenant, for the route to show or withhold. */
  entry: Buffer;
  tenantId: string | null;
  proof: Buffer[];
  checkpoint: StoredCheckpoint;
}

/** log.origin names another log than the one recorded: a configuration error that stops the start. */
export class LogOriginError extends Error {}

/** Not in the log (yet), or no checkpoint of that size: the route's 404. */
export class LogNotFoundError extends Error {}

function defaultOrigin(publicUrl: string | undefined): string {
  if (publicUrl && !publicUrl.includes('{')) {
    try {
      const host = new URL(publicUrl).host;
      if (host && validKeyName(`signbridge/${host}`)) return `signbridge/${host}`;
    } catch {
      // not a URL: fall through
    }
  }
  return `signbridge/log-${randomBytes(6).toString('hex')}`;
}

/** The longest wait of an idle integrator between passes (as the event dispatcher's idlePollMaxMs). */
const IDLE_MAX_MS = 15_000;

export class LogService {
  private key?: NoteKey;
  private record?: LogKeyRecord;
  /** The Ed25519 key, once made or read (ensureKey), when there is a sealer. */
  private ed25519?: { key: NoteKey; record: LogKeyRecord; sealer: Sealer };
  private timer: NodeJS.Timeout | undefined;
  /** When `timer` fires (Date.now() time), for nudge(). */
  private timerAt: number | undefined;
  /** The background loop's step, once start() ran. */
  private tick: (() => void) | undefined;
  /** Entries were committed while a pass ran: the next pass comes after one interval, not a back-off. */
  private nudged = false;
  /** When the checkpoint of entries integrated but not yet published is due (planCheckpoint), if any. */
  private checkpointDueAt: number | undefined;
  /** Whether the current pass integrated anything (the background loop backs off while it does not). */
  private grew = false;
  private running: Promise<void> | undefined;
  private stopped = false;
  /** The last refusal reported, so that a problem that persists is logged once, not every pass. */
  private lastProblem: string | undefined;
  private readonly now: () => Date;

  /** Requests waiting for their entry to be in a checkpoint (checkpointWhenLogged). */
  private readonly waiters: InclusionWaiters;
  /** ... and for a checkpoint of it that the witnesses cosigned (checkpointWhenLogged with `witnessed`). */
  private readonly witnessedWaiters: WitnessedWaiters;

  constructor(private readonly opts: LogServiceOptions) {
    this.now = opts.now ?? (() => new Date());
    this.waiters = new InclusionWaiters(async () => (await opts.store.latestCheckpoint())?.treeSize ?? 0);
    const configured = (opts.settings.witnesses ?? []).map((w) => w.key.name);
    this.witnessedWaiters = new WitnessedWaiters(
      (minSize) => opts.store.recentCheckpoints(minSize, WITNESSED_CANDIDATES),
      opts.witnessesToAwait ?? (() => configured),
    );
  }

  /**
   * A published checkpoint that holds entry `index`, waiting up to `timeoutMs` in all for one (the integrator is
   * nudged): the first that holds it; with `witnessed`, the newest that every awaited witness cosigned, or when
   * none did within the wait (or there is no witness to wait for), the latest, with `witnessed: false`. Undefined
   * when no checkpoint held the entry in time.
   */
  async checkpointWhenLogged(
    index: number,
    timeoutMs: number,
    witnessed = false,
  ): Promise<LoggedCheckpoint | undefined> {
    const deadline = Date.now() + timeoutMs;
    this.nudge();
    const size = await this.waiters.until(index, timeoutMs);
    if (size === undefined) return undefined;
    if (!witnessed) return { checkpoint: await this.checkpoint(size), witnessed: false };
    const cosigned = await this.witnessedWaiters.until(index, deadline - Date.now());
    if (cosigned) return { checkpoint: cosigned, witnessed: true };
    return { checkpoint: await this.checkpoint(), witnessed: false };
  }

  /** This process stored a witness's cosignature: requests waiting for a witnessed checkpoint look now. */
  witnessCosigned(): void {
    this.witnessedWaiters.cosigned();
  }

  get settings(): LogSettings {
    return this.opts.settings;
  }

  /** The log key, made in the key store on first start (once across instances). */
  async ensureKey(): Promise<NoteKey> {
    if (this.key) return this.key;
    const { store, keyStores, settings } = this.opts;
    let record = await store.getKey();
    if (!record) {
      const keyStore = keyStores.forNewKey('ECC_NIST_P256');
      const created = await keyStore.createKey('ECC_NIST_P256', 'signbridge transparency log');
      record = await store.putKeyIfAbsent({
        origin: settings.origin ?? defaultOrigin(this.opts.publicUrl),
        keyStore: keyStore.kind,
        keyRef: created.keyRef,
        keySpec: 'ECC_NIST_P256',
        publicKeyPem: created.publicKeyPem,
        createdAt: this.now().toISOString(),
      });
      // Another instance recorded its key first: ours is not needed.
      if (record.keyRef !== created.keyRef) await keyStore.destroyKey(created.keyRef).catch(() => undefined);
      else await this.opts.onKeyCreated?.(record, verifierKey(noteKey(record.origin, record.publicKeyPem)));
    }
    if (settings.origin !== undefined && settings.origin !== record.origin) {
      throw new LogOriginError(
        `log.origin is "${settings.origin}" but this log's checkpoints are signed for "${record.origin}" ` +
          '(the origin names the log and cannot change; remove log.origin or set it to the recorded one)',
      );
    }
    const key = noteKey(record.origin, record.publicKeyPem);
    // The Ed25519 key is made or read before this.key is set (which is what lets a pass sign): with a sealer to keep
    // it, no checkpoint is signed without its line.
    if (this.opts.sealer) await this.ensureEd25519Key(this.opts.sealer, record.origin);
    this.record = record;
    this.key = key;
    return key;
  }

  /**
   * The Ed25519 key of the log of `origin`, made on the first start that has a sealer (an installation from before
   * it gets its key then; its older checkpoints keep their ECDSA line only).
   */
  private async ensureEd25519Key(sealer: Sealer, origin: string): Promise<void> {
    if (this.ed25519) return;
    const { store } = this.opts;
    let record = await store.getKey('ed25519');
    if (!record) {
      const created = await createSealedEd25519Key(sealer, origin);
      record = await store.putKeyIfAbsent(
        {
          origin,
          keyStore: 'software',
          keyRef: created.keyRef,
          keySpec: ED25519_LOG_KEY_SPEC,
          publicKeyPem: created.publicKeyPem,
          createdAt: this.now().toISOString(),
        },
        'ed25519',
      );
      // Another instance recorded its key first: ours was only ever in memory.
      if (record.keyRef === created.keyRef) {
        await this.opts.onKeyCreated?.(record, verifierKey(ed25519NoteKey(origin, record.publicKeyPem)));
      }
    }
    this.ed25519 = { key: ed25519NoteKey(record.origin, record.publicKeyPem), record, sealer };
  }

  /** The ECDSA verifier key: the one every checkpoint carries. */
  async verifierKey(): Promise<string> {
    return verifierKey(await this.ensureKey());
  }

  /** The Ed25519 verifier key, or undefined when the log has none (no sealer). */
  async ed25519VerifierKey(): Promise<string | undefined> {
    await this.ensureKey();
    return this.ed25519 && verifierKey(this.ed25519.key);
  }

  /** Starts the background integrator (idempotent). */
  start(): void {
    const interval = this.interval();
    if (this.timer || this.stopped || interval === 0) return;
    // An idle integrator backs off, doubling its wait up to IDLE_MAX_MS: a pass every interval kept a pooled
    // connection busy for good, and behind PgBouncer in session mode (one server connection per client connection)
    // the instances then held every server connection and an admin command got none (seen in CI). Entries this
    // process commits wake it at once (nudge), and entries not yet in a checkpoint bring it back when one is due.
    let wait = interval;
    const tick = () => {
      this.timer = undefined;
      this.grew = false;
      this.nudged = false;
      this.checkpointDueAt = undefined;
      this.running = this.pass()
        .then(() => undefined)
        .catch((err) => this.opts.onError?.(`transparency log: ${(err as Error).message}`))
        .finally(() => {
          this.running = undefined;
          wait =
            this.grew || this.nudged
              ? interval
              : Math.min(Math.max(wait * 2, interval), Math.max(interval, IDLE_MAX_MS));
          const untilCheckpoint = this.checkpointDueAt !== undefined ? this.checkpointDueAt - Date.now() : wait;
          this.schedule(Math.max(0, Math.min(wait, untilCheckpoint)));
        });
    };
    this.tick = tick;
    this.schedule(0);
  }

  /**
   * Entries were committed by this process: integrate them within one interval (Tessera's batching: what arrives
   * meanwhile goes into the same batch), however long the idle back-off had the integrator sleeping.
   */
  nudge(): void {
    if (this.opts.integratesElsewhere && !this.stopped) {
      this.opts.integratesElsewhere();
      return;
    }
    if (this.stopped || !this.tick) return;
    if (this.running) {
      this.nudged = true;
      return;
    }
    const soon = Date.now() + this.interval();
    if (this.timerAt !== undefined && this.timerAt <= soon) return;
    this.schedule(this.interval());
  }

  private interval(): number {
    return this.opts.settings.intervalMs ?? LOG_DEFAULTS.intervalMs;
  }

  private schedule(ms: number): void {
    clearTimeout(this.timer);
    if (this.stopped || !this.tick) return;
    this.timerAt = Date.now() + ms;
    this.timer = setTimeout(this.tick, ms).unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.waiters.stop();
    this.witnessedWaiters.stop();
    clearTimeout(this.timer);
    await this.running;
  }

  /**
   * One pass: integrate everything waiting, batch by batch, publishing a checkpoint whenever one is due (at least
   * every checkpointEveryEntries entries) in the same turn as the integrator; with `force`, one at the end whatever
   * its age, waiting for another instance's turn if need be.
   */
  async pass(force = false): Promise<StoredCheckpoint | undefined> {
    await this.ensureKey();
    const { batchSize = DEFAULT_BATCH, checkpointEveryEntries } = this.opts.settings;
    let published: StoredCheckpoint | undefined;
    let told: StoredCheckpoint | undefined;
    try {
      for (;;) {
        if (this.stopped) return published;
        let outcome: 'written' | 'idle' | 'busy';
        try {
          outcome = await this.opts.store.asIntegrator(async (session) => {
            const grown = await planIntegration(session, batchSize, checkpointEveryEntries);
            if (grown) {
              await session.apply(grown);
              this.grew = true;
            }
            const caughtUp = !grown?.full;
            const checkpoint = await this.planCheckpoint(session, force && caughtUp);
            if (checkpoint) {
              await session.apply(checkpoint);
              published = checkpoint.checkpoint;
            }
            // A batch that was not full caught up with the log: the rest waits for the next pass, so that under
            // load the integrator takes batches of an interval's entries instead of chasing the head with tiny
            // ones (each batch has a fixed cost: its reads and the rewrite of the edge tiles).
            return caughtUp ? 'idle' : 'written';
          }, force);
        } catch (err) {
          if (err instanceof LogRaceError) continue; // another integrator moved first: plan again on its result
          throw err;
        }
        // Committed now: the requests waiting for it can read it.
        if (published && published !== told) {
          told = published;
          this.waiters.published(published.treeSize);
          this.opts.onPublished?.(published);
        }
        // 'busy': another instance is integrating, and publishes what is due. This one looks again after one
        // interval, not a back-off: that pass may have ended before this instance's newest entries committed.
        if (outcome === 'busy') this.grew = true;
        if (outcome !== 'written') break;
        // Let requests in between two batches: the integrator hashes on the event loop.
        await new Promise((resolve) => setImmediate(resolve));
      }
      this.lastProblem = undefined;
      return published;
    } catch (err) {
      if (err instanceof LogIntegrityError) this.reportIntegrity(err.message);
      throw err;
    }
  }

  /** Publishes now: everything written so far is integrated and a checkpoint of the new size signed (if it grew). */
  async checkpointNow(): Promise<StoredCheckpoint> {
    await this.pass(true);
    const latest = await this.opts.store.latestCheckpoint();
    if (!latest) throw new Error('no checkpoint could be published');
    return latest;
  }

  private reportIntegrity(message: string): void {
    if (message === this.lastProblem) return;
    this.lastProblem = message;
    this.opts.onIntegrityFailure?.(message);
  }

  /** The checkpoint to publish now, if one is due (or `force`d), signed and checked; undefined otherwise. */
  private async planCheckpoint(session: LogReader, force: boolean): Promise<LogWrites | undefined> {
    const key = await this.ensureKey();
    const { settings } = this.opts;
    const state = await session.state();
    const previous = await session.latestCheckpoint();
    const size = state.treeSize;
    if (previous && previous.treeSize >= size) return undefined;
    if (!previous && size === 0 && !force) return undefined;
    const ageS = previous ? (this.now().getTime() - Date.parse(previous.createdAt)) / 1000 : Number.POSITIVE_INFINITY;
    const due =
      force ||
      !previous ||
      size - previous.treeSize >= settings.checkpointEveryEntries ||
      ageS >= settings.checkpointEverySeconds;
    if (!due) {
      // In the service's clock (a test's may be another), then as a timer's.
      const dueIn = settings.checkpointEverySeconds * 1000 - ageS * 1000;
      const dueAt = Date.now() + Math.max(1, dueIn);
      this.checkpointDueAt = Math.min(this.checkpointDueAt ?? dueAt, dueAt);
      return undefined;
    }
    const root = await this.checkedRoot(session, key, previous, size);
    const text = formatCheckpoint({ origin: key.name, size, root });
    // ECDSA first: verifiers, pinned keys and tlog-proof files from before the Ed25519 key read the same note.
    const signings: NoteSigning[] = [{ key, signature: await this.sign(key, text) }];
    if (this.ed25519) signings.push({ key: this.ed25519.key, signature: await this.signEd25519(text) });
    const note = formatMultiSignedNote(text, signings);
    return {
      from: state,
      tiles: [],
      checkpoint: { treeSize: size, rootHash: root, note, createdAt: this.now().toISOString() },
      previousCheckpointSize: previous?.treeSize ?? null,
    };
  }

  /**
   * The root of the tree of `size`, checked to extend the last signed checkpoint: that checkpoint's signature
   * verifies with the log key, and a consistency proof from its size to `size`, built from the stored tiles,
   * verifies against its root. Otherwise LogIntegrityError: a fork is never signed.
   */
  private async checkedRoot(
    reader: LogReader,
    key: NoteKey,
    previous: StoredCheckpoint | undefined,
    size: number,
  ): Promise<Buffer> {
    const m = previous?.treeSize ?? 0;
    const tiles = await reader.tiles(
      tilesNeeded((src) => {
        rootAt(src, size);
        consistencyProof(src, m, size);
      }),
    );
    let root: Buffer;
    let proof: Buffer[];
    try {
      const src = new TileNodeSource(tiles);
      root = size === 0 ? EMPTY_ROOT : rootAt(src, size);
      proof = consistencyProof(src, m, size);
    } catch (err) {
      throw new LogIntegrityError(`the stored tiles cannot give the tree of ${size}: ${(err as Error).message}`);
    }
    if (!previous) return root;
    // Read as a client reads it: signed by the log key, its origin the key's name.
    let body: Checkpoint | undefined;
    try {
      body = openCheckpoint(previous.note, key.verifier);
    } catch (err) {
      if (!(err instanceof CheckpointError)) throw err;
    }
    if (!body || body.size !== previous.treeSize || !body.root.equals(previous.rootHash)) {
      throw new LogIntegrityError(
        `the stored checkpoint of size ${previous.treeSize} is not one this log signed: refusing to sign another`,
      );
    }
    if (!verifyConsistency(m, size, body.root, root, proof)) {
      throw new LogIntegrityError(
        `the tree of ${size} is not consistent with the signed checkpoint of ${m} (the log was rewritten): ` +
          'refusing to sign it',
      );
    }
    return root;
  }

  private async sign(key: NoteKey, text: string): Promise<Buffer> {
    const record = this.record as LogKeyRecord;
    const signature = await this.opts.keyStores
      .forKey(record.keyStore)
      .sign(record.keyRef, 'ECC_NIST_P256', 'ECDSA_SHA_256', noteDigest(text));
    // A key store fault must not publish a checkpoint nobody can verify.
    if (!verify('sha256', Buffer.from(text, 'utf8'), key.publicKey, signature)) {
      throw new Error('the key store returned a log signature that does not verify');
    }
    return signature;
  }

  private async signEd25519(text: string): Promise<Buffer> {
    const { key, record, sealer } = this.ed25519 as NonNullable<LogService['ed25519']>;
    const message = Buffer.from(text, 'utf8');
    const signature = await signWithSealedEd25519Key(sealer, record.keyRef, record.origin, message);
    if (!verify(null, message, key.publicKey, signature)) {
      throw new Error('the sealed Ed25519 log key made a signature that does not verify');
    }
    return signature;
  }

  async latestCheckpoint(): Promise<StoredCheckpoint | undefined> {
    return this.opts.store.latestCheckpoint();
  }

  /** The checkpoint of exactly `size`, or the latest when size is undefined; LogNotFoundError when none. */
  async checkpoint(size?: number): Promise<StoredCheckpoint> {
    const found =
      size === undefined ? await this.opts.store.latestCheckpoint() : await this.opts.store.checkpointAt(size);
    if (!found) {
      throw new LogNotFoundError(
        size === undefined
          ? 'no checkpoint has been published yet'
          : `no checkpoint of tree size ${size} was published`,
      );
    }
    return found;
  }

  private async withTiles<T>(compute: (src: NodeSource) => T): Promise<T> {
    const tiles = await this.opts.store.tiles(tilesNeeded(compute));
    return compute(new TileNodeSource(tiles));
  }

  /**
   * Leaf `index` (audit seq index + 1) with its proof in the tree of a published checkpoint (default: the
   * latest). The leaf hash is the tree's; the entry bytes are the row's now: a verifier hashes them itself, so an
   * entry edited after it was logged shows (and is reported here too).
   */
  async inclusion(index: number, treeSize?: number): Promise<InclusionAnswer> {
    const checkpoint = await this.checkpoint(treeSize);
    if (index >= checkpoint.treeSize) {
      throw new LogNotFoundError(`entry ${index} is not in the tree of size ${checkpoint.treeSize} (not yet logged?)`);
    }
    const row = await this.opts.store.auditRow(index + 1);
    if (!row) throw new LogNotFoundError(`audit entry ${index + 1} is gone from the store`);
    const { leaf, proof } = await this.withTiles((src) => ({
      leaf: src.node(0, index),
      proof: inclusionProof(src, index, checkpoint.treeSize),
    }));
    const entry = leafBytesOfRow(row);
    if (!leafHash(entry).equals(leaf)) {
      this.reportIntegrity(`audit entry ${index + 1} was changed after it was logged (its leaf hash differs)`);
    }
    return { index, treeSize: checkpoint.treeSize, leafHash: leaf, entry, tenantId: row.tenant_id, proof, checkpoint };
  }

  /** The first `width` hashes of tile level/index (tlog-tiles); LogNotFoundError when the tree has fewer. */
  async tile(level: number, index: number, width: number): Promise<Buffer> {
    const hashes = (await this.opts.store.tiles([{ level, index }])).get(tileId(level, index));
    if (!hashes || hashes.length < width * 32) {
      throw new LogNotFoundError(`tile ${level}/${index} does not have ${width} hashes (yet)`);
    }
    return hashes.subarray(0, width * 32);
  }

  /** The consistency proof between two published (or at least integrated) sizes. */
  async consistency(from: number, to: number): Promise<Buffer[]> {
    const state = await this.opts.store.state();
    if (to > state.treeSize) throw new LogNotFoundError(`the tree has ${state.treeSize} entries, fewer than ${to}`);
    return this.withTiles((src) => consistencyProof(src, from, to));
  }
}
