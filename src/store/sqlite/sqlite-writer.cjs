// The SQLite store's writer thread (sqlite-store.ts: writerThread). The signing path writes a signature's record
// and audit entry ahead of the signature; committing them on the event loop put the commit (about 0.1 ms, most
// of it system calls) after the signature on every request's critical path. Here they are committed on a
// connection of this thread's own while the event loop signs, and the caller hands the signature out only once
// this thread says the batch is durable.
//
// Batches form by themselves: everything queued when a commit ends goes into the next one (up to batchMax). After
// a commit the thread keeps taking messages synchronously for spinMs before it goes back to waiting: on a VM whose
// idle vCPUs halt, waking a sleeping thread costs 0.1-0.3 ms, more than the commit it would make (the same
// reasoning as the event loop's busy polling, src/busy-poll.ts).
// Plain CommonJS so it runs the same from the TypeScript sources (tests) and from dist/.
'use strict';
const { performance } = require('node:perf_hooks');
const { parentPort, receiveMessageOnPort, workerData } = require('node:worker_threads');
const Database = require(workerData.betterSqlite3Path);
const { chainAuditRows } = require(workerData.auditHashPath);
const { compactRow, hashHex } = require(workerData.entryPackingPath);
const { sqliteWords } = require(workerData.auditWordsPath);

const { path, busyTimeoutMs, spinMs, batchMax, chainRaceAttempts, gateStates } = workerData;
const { OPEN, COMMITTING, WORD_GATE, WORD_COMMITS, WORD_WAKE, WORD_GONE, WORD_COMMITS_PER_PASS } = gateStates;
/** The commit gate shared with the checkpointer thread (sqlite-threads.ts: CommitGate); absent without one. */
const gate = workerData.gate ? new Int32Array(workerData.gate) : undefined;

const db = new Database(path, { fileMustExist: true });
db.pragma(`busy_timeout = ${busyTimeoutMs}`);
db.pragma('synchronous = NORMAL');
// Checkpoints are the checkpointer thread's (or, without one, the event loop connection's) business.
if (workerData.noAutoCheckpoint) db.pragma('wal_autocheckpoint = 0');

// Prepared on the first commit: the store migrates the database after this thread started.
let writeBatch;
/** The packed entries' dictionary (audit-words.cjs), on this thread's connection. */
let words;
function prepare() {
  words = sqliteWords(db);
  const insertSignature = db.prepare(
    'INSERT INTO signatures (id, tenant_id, key_id, algorithm, hash, caller, created_at) ' +
      'VALUES (@id, @tenant_id, @key_id, @algorithm, @hash, @caller, @created_at)',
  );
  const headRow = db.prepare('SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1');
  const head = () => {
    const row = headRow.get();
    return row && { seq: row.seq, hash: hashHex(row.hash) };
  };
  // An entry with its signature's SHA-256 (migration 0030; null when not known yet), stored compactly (0032).
  const insertAudit = db.prepare(
    'INSERT INTO audit_log (seq, at, tenant_id, actor, action, outcome, details, prev_hash, hash, signature_sha256, ' +
      'packed, digest) VALUES (@seq, @at, @tenant_id, @actor, @action, @outcome, @details, @prev_hash, @hash, ' +
      '@signature_sha256, @packed, @digest)',
  );
  const insertEvent = db.prepare(
    'INSERT INTO event_outbox (id, tenant_id, type, timestamp, data, order_key, fanned_out) ' +
      'VALUES (@id, @tenant_id, @type, @timestamp, @data, @order_key, @fanned_out)',
  );
  // The hash of a signature whose entry was written ahead of it, set on that entry's row; a hash sent again after a
  // failed batch that carried it (sqlite-store.ts) changes nothing.
  const setSignatureHash = db.prepare(
    'UPDATE audit_log SET signature_sha256 = @signature_sha256 WHERE seq = @seq AND signature_sha256 IS NULL',
  );
  // An approval's request, completed by its signature's write (group-commit.ts: RequestCompletion).
  const completeRequest = db.prepare(
    "UPDATE pending_requests SET status = 'approved', signature = @signature, updated_at = @updated_at, " +
      "signed_seq = @signed_seq, batch = coalesce(@batch, batch) WHERE id = @id AND status = 'signing'",
  );
  // A batch entry's item (migration 0029), on the seq of its entry.
  const insertBatchItem = db.prepare(
    'INSERT INTO batch_items (batch_seq, item_index, digest, signature_sha256) ' +
      'VALUES (@batch_seq, @item_index, @digest, @signature_sha256)',
  );
  const batchItem = (item, seq) =>
    insertBatchItem.run({
      batch_seq: seq,
      item_index: item.item_index,
      digest: Buffer.from(item.digest, 'hex'),
      signature_sha256: Buffer.from(item.signature_sha256, 'hex'),
    });
  // The idempotency record of the request an entry answers (migration 0033): group-commit.ts's
  // UPSERT_IDEMPOTENCY_SQL, which this CommonJS thread cannot import.
  const upsertIdempotency = db.prepare(
    'INSERT INTO sign_idempotency (caller_id, idem_key, fingerprint, reply, created_at, updated_at, log_seq) ' +
      'VALUES (@caller_id, @idem_key, @fingerprint, @reply, @created_at, @created_at, @log_seq) ' +
      'ON CONFLICT (caller_id, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, reply = excluded.reply, ' +
      'created_at = excluded.created_at, updated_at = excluded.updated_at, log_seq = excluded.log_seq ' +
      'WHERE sign_idempotency.created_at < @expired_before ' +
      'OR (sign_idempotency.reply IS NULL AND sign_idempotency.updated_at < @stale_before)',
  );
  const hashOf = (lookup) => (lookup ? Buffer.from(lookup.signature_sha256, 'hex') : null);
  // IMMEDIATE: the write lock is taken before the chain's head is read (sqlite-store.ts says why).
  // Returns the seq of the batch's first audit entry; the others follow in the writes' order.
  return db.transaction((writes) => {
    const audits = [];
    const hashes = [];
    for (const w of writes) {
      if (w.signature) insertSignature.run(w.signature);
      if (w.audit) {
        audits.push(w.audit);
        hashes.push(w.lookup?.signature_sha256);
      }
      // Several signatures with their entries, all or none (group-commit.ts: records).
      if (w.records) {
        for (const r of w.records) {
          if (r.signature) insertSignature.run(r.signature);
          audits.push(r.audit);
          hashes.push(r.lookup?.signature_sha256);
        }
      }
      // Hashes of signatures whose entries were committed ahead earlier, riding along (sqlite-store.ts).
      if (w.lookups) {
        for (const row of w.lookups) setSignatureHash.run({ seq: row.audit_seq, signature_sha256: hashOf(row) });
      }
    }
    if (audits.length === 0) {
      for (const w of writes) if (w.events) for (const row of w.events) insertEvent.run(row);
      return undefined;
    }
    const rows = chainAuditRows(head(), audits);
    for (let n = 0; n < rows.length; n++) {
      insertAudit.run(compactRow(rows[n], audits[n].details, hashes[n], words));
    }
    let i = 0;
    for (const w of writes) {
      const first = i;
      if (w.audit) {
        if (w.batchItems) for (const item of w.batchItems) batchItem(item, rows[i].seq);
        if (w.idempotency) upsertIdempotency.run({ ...w.idempotency, log_seq: rows[i].seq });
        i++;
      }
      i += w.records?.length ?? 0;
      if (w.completes && i > first) completeRequest.run(completedRequestRow(w.completes, rows[first].seq));
    }
    // Events told of by these writes (signature.denied): in the same transaction as their audit entries.
    for (const w of writes) if (w.events) for (const row of w.events) insertEvent.run(row);
    return rows[0].seq;
  }).immediate;
}

/** The columns a completion sets, its write's first entry having `seq`: group-commit.ts's completedRequestRow. */
function completedRequestRow(c, seq) {
  const batch = c.batch && {
    hashes: c.batch.hashes,
    results: c.batch.results.map((r) =>
      'entry' in r ? { signature: r.signature, seq: seq + r.entry, signature_id: r.signature_id } : r,
    ),
  };
  return {
    id: c.id,
    updated_at: c.updated_at,
    signature: c.signature ?? null,
    signed_seq: c.signature !== undefined ? seq : null,
    batch: batch ? JSON.stringify(batch) : null,
  };
}

let stopping = false;

parentPort.on('message', (message) => {
  const queue = [];
  take(message, queue);
  run(queue);
});

function take(message, queue) {
  if (message === 'stop') stopping = true;
  else queue.push(message);
}

/** Commits what is queued, then keeps taking messages for spinMs before going back to the event loop. */
function run(queue) {
  let idleSince = performance.now();
  for (;;) {
    for (let m = receiveMessageOnPort(parentPort); m; m = receiveMessageOnPort(parentPort)) take(m.message, queue);
    if (queue.length > 0) {
      commit(queue.splice(0, batchMax));
      idleSince = performance.now();
    } else if (stopping) {
      db.close();
      process.exit(0);
    } else if (performance.now() - idleSince >= spinMs) {
      return;
    }
  }
}

function commit(writes) {
  const ids = writes.map((w) => w.id);
  for (let attempt = 1; ; attempt++) {
    try {
      writeBatch ??= prepare();
      enterGate();
      let firstSeq;
      try {
        firstSeq = writeBatch(writes);
        words.committed();
      } catch (err) {
        words.rolledBack();
        throw err;
      } finally {
        if (gate) {
          Atomics.add(gate, WORD_COMMITS, 1);
          Atomics.store(gate, WORD_GATE, OPEN);
        }
      }
      parentPort.postMessage({ type: 'done', ids, firstSeq });
      return;
    } catch (err) {
      const code = String(err?.code ?? '');
      // Another process appended to the chain between our read of its head and our write: read it anew.
      const chainRace =
        code.startsWith('SQLITE_BUSY') ||
        code === 'SQLITE_CONSTRAINT_PRIMARYKEY' ||
        code === 'SQLITE_CONSTRAINT_UNIQUE';
      if (chainRace && writes.some((w) => w.audit || w.records?.length) && attempt < chainRaceAttempts) continue;
      parentPort.postMessage({ type: 'failed', ids, message: err instanceof Error ? err.message : String(err), code });
      return;
    }
  }
}

/**
 * Asks for a checkpoint pass once half of the commits allowed between two passes landed, waits (this thread may
 * block) for it once all of them did, and waits while the checkpointer holds the gate for its short catch-up pass
 * (sqlite-threads.ts: CommitGate).
 */
function enterGate() {
  if (!gate) return;
  for (;;) {
    const count = Atomics.load(gate, WORD_COMMITS);
    const limit = Atomics.load(gate, WORD_COMMITS_PER_PASS);
    if (count < limit / 2 || Atomics.load(gate, WORD_GONE) === 1) break;
    Atomics.add(gate, WORD_WAKE, 1);
    Atomics.notify(gate, WORD_WAKE);
    if (count < limit) break;
    Atomics.wait(gate, WORD_COMMITS, count, 1000);
  }
  while (Atomics.compareExchange(gate, WORD_GATE, OPEN, COMMITTING) !== OPEN)
    Atomics.wait(gate, WORD_GATE, gateStates.CHECKPOINTING, 5);
}
