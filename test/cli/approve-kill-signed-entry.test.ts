// Issue 44: an approval's signature and the request's move to `approved` were two commits. A `kill -9` between
// them left the request in `signing` with its `signed` entry already in the log: the approver's retry got 409 for
// about two minutes, then the request was signed a second time (two `signed` entries and two signatures for one
// approval). The reproduction, as the issue ran it: a real `signbridge server` process, a poll of its database that
// sends SIGKILL the moment the request's `signed` entry exists, a restart on the same data, and the approver's
// retry. Now both go in one commit, so the poll never sees the entry without the request `approved` (read in one
// statement, one snapshot), and the retry gets 200 with the first signature at once. On SQLite (the data dir's
// database; also with two request workers, whose writes the primary commits) and on PostgreSQL. A held batch the
// same way: its signatures, their batch entry with its items (issue 46) and the request's results are one commit
// too; and a sign_batch signed at once, killed the moment its entry exists, has all its items with it. Every wait is
// for a condition, with a deadline only for a hang.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { exportAudit, postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { isRunning, readyWorkerPids } from '../helpers/fresh-connection.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';
import { until, waitFor } from '../helpers/wait.js';

/**
 * What the poll reads, in one statement: the request's status, its `signed` entries and their batch items, from one
 * snapshot.
 */
const SNAPSHOT_SQL =
  'SELECT (SELECT status FROM pending_requests WHERE id = $id) AS status, ' +
  "(SELECT count(*) FROM audit_log WHERE action = 'approve_sign' AND outcome = 'signed' " +
  'AND CAST(details AS TEXT) LIKE $pattern) AS signed, ' +
  "(SELECT count(*) FROM batch_items b JOIN audit_log a ON a.seq = b.batch_seq WHERE a.action = 'approve_sign' " +
  "AND a.outcome = 'signed' AND CAST(a.details AS TEXT) LIKE $pattern) AS items";

/** A sign_batch signed at once, read in one statement: the tenant's batch entries and their items. */
const AT_ONCE_SQL =
  "SELECT (SELECT count(*) FROM audit_log WHERE action = 'sign_batch' AND outcome = 'signed') AS signed, " +
  "(SELECT count(*) FROM batch_items b JOIN audit_log a ON a.seq = b.batch_seq WHERE a.action = 'sign_batch') AS items";

interface Snapshot {
  status: string;
  signed: number;
  items: number;
}

/** Reads the request's snapshot from the service's database, as often as the event loop lets it. */
interface DatabasePoll {
  read(requestId: string): Promise<Snapshot>;
  /** The sign_batch entries signed at once and their items. */
  atOnce(): Promise<{ signed: number; items: number }>;
  /** The signatures rows of a digest (none since migration 0030), and the batch items of it. */
  signatures(hash: string): Promise<number>;
  items(hash: string): Promise<number>;
  close(): Promise<void>;
}

function sqlitePoll(path: string): DatabasePoll {
  const db = new Database(path, { readonly: true, fileMustExist: true });
  const statement = db.prepare(SNAPSHOT_SQL.replaceAll('$id', '@id').replaceAll('$pattern', '@pattern'));
  return {
    read: async (requestId) => {
      const row = statement.get({ id: requestId, pattern: `%${requestId}%` }) as Snapshot;
      return { status: row.status, signed: Number(row.signed), items: Number(row.items) };
    },
    atOnce: async () => {
      const row = db.prepare(AT_ONCE_SQL).get() as { signed: number; items: number };
      return { signed: Number(row.signed), items: Number(row.items) };
    },
    signatures: async (hash) =>
      Number(db.prepare('SELECT count(*) AS n FROM signatures WHERE hash = ?').pluck().get(hash)),
    items: async (hash) =>
      Number(
        db.prepare('SELECT count(*) AS n FROM batch_items WHERE digest = ?').pluck().get(Buffer.from(hash, 'base64')),
      ),
    close: async () => {
      db.close();
    },
  };
}

function postgresPoll(url: string): DatabasePoll {
  const client = new pg.Client({ connectionString: url });
  const connected = client.connect();
  const text = SNAPSHOT_SQL.replaceAll('$id', '$1').replaceAll('$pattern', '$2');
  return {
    read: async (requestId) => {
      await connected;
      const { rows } = await client.query<Snapshot>(text, [requestId, `%${requestId}%`]);
      const row = rows[0] as Snapshot;
      return { status: row.status, signed: Number(row.signed), items: Number(row.items) };
    },
    atOnce: async () => {
      await connected;
      const row = (await client.query<{ signed: string; items: string }>(AT_ONCE_SQL)).rows[0];
      return { signed: Number(row?.signed), items: Number(row?.items) };
    },
    items: async (hash) => {
      await connected;
      const { rows } = await client.query<{ n: string }>('SELECT count(*) AS n FROM batch_items WHERE digest = $1', [
        Buffer.from(hash, 'base64'),
      ]);
      return Number(rows[0]?.n);
    },
    signatures: async (hash) => {
      await connected;
      const { rows } = await client.query<{ n: string }>('SELECT count(*) AS n FROM signatures WHERE hash = $1', [
        hash,
      ]);
      return Number(rows[0]?.n);
    },
    close: () => client.end(),
  };
}

const stores = [
  { name: 'SQLite', postgres: false, workers: 0, enabled: true },
  // A request worker signs; the primary commits its write (src/workers/) and is the process killed.
  { name: 'SQLite with two request workers', postgres: false, workers: 2, enabled: true },
  { name: 'PostgreSQL', postgres: true, workers: 0, enabled: testPostgresUrl() !== undefined },
] as const;

const started: ServerProcess[] = [];
afterAll(async () => {
  for (const server of started) await server.stop('SIGKILL');
});

/** A service on its own data (and database), started again as often as a test kills it. */
async function standUp(store: (typeof stores)[number]) {
  const dir = makeTempDir();
  const dataDir = join(dir, 'data');
  const policyFile = join(dir, 'policy.yaml');
  writeFileSync(policyFile, 'version: 1\nrules:\n  environments:\n    requireApproval: [production]\n');
  const database = store.postgres ? createTestDatabase('approve_kill') : undefined;
  const storeArgs = ['--data-dir', dataDir, ...(database ? ['--database', database] : [])];
  const start = async () => {
    const server = await startServerProcess(
      [...storeArgs, ...(store.workers ? ['--workers', String(store.workers)] : [])],
      { SIGNBRIDGE_POLICY_FILE: policyFile },
    );
    started.push(server);
    return server;
  };
  const apiKey = (role: string, tenant?: string) => {
    const made = runCli([
      'admin',
      'api-key',
      'create',
      ...storeArgs,
      '--role',
      role,
      ...(tenant ? ['--tenant', tenant] : []),
    ]);
    expect(made.code, made.stderr).toBe(0);
    return made.stdout.trim();
  };
  const first = await start();
  const operator = apiKey('operator');
  const made = await postAction(first.url, 'create_tenant', operator, { tenant_id: 'k9s', key_spec: 'ECC_NIST_P256' });
  expect(made.status, JSON.stringify(made.body)).toBe(201);
  const signer = apiKey('signer', 'k9s');
  const approver = apiKey('approver', 'k9s');
  const pem = (await postAction(first.url, 'get_public_key', approver, { tenant_id: 'k9s' })).body
    .public_key_pem as string;
  const poll = database ? postgresPoll(database) : sqlitePoll(join(dataDir, 'signbridge.db'));
  return { first, start, storeArgs, signer, approver, pem, poll };
}

/**
 * Sends the approval and kills the service with SIGKILL the moment the request's first `signed` entry is in its
 * database; answers what that read saw. The approver's answer may never come.
 */
async function approveAndKill(
  store: (typeof stores)[number],
  server: ServerProcess,
  approver: string,
  requestId: string,
  poll: DatabasePoll,
): Promise<Snapshot> {
  const workerPids = store.workers
    ? await until('the request workers to be ready', () => {
        const pids = readyWorkerPids(server);
        return pids.length >= store.workers ? pids : undefined;
      })
    : [];
  const lost = postAction(server.url, 'approve_sign', approver, { tenant_id: 'k9s', request_id: requestId }).catch(
    (err: Error) => err,
  );
  let seen: Snapshot;
  const deadline = Date.now() + 60_000;
  for (;;) {
    seen = await poll.read(requestId);
    if (seen.signed > 0) break;
    if (Date.now() > deadline) throw new Error(`no signed entry for ${requestId} after 60 s:\n${server.output()}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
  server.child.kill('SIGKILL');
  await server.stop();
  await lost;
  // A killed primary's workers end by themselves (worker-scenarios.ts); the restart waits for them.
  await waitFor('the request workers to end', () => workerPids.every((pid) => !isRunning(pid)));
  return seen;
}

const digestOf = (message: string) => createHash('sha256').update(message).digest('base64');

/** The request's approve_sign entries, through `admin audit export`. */
function approvalEntries(storeArgs: string[], requestId: string) {
  return exportAudit(storeArgs).filter(
    (e) => e.action === 'approve_sign' && (e.details as Record<string, unknown>).request_id === requestId,
  );
}

describe.each(stores)('an approval killed the moment its signed entry exists ($name)', (store) => {
  it.skipIf(!store.enabled)(
    'never shows the entry with the request in signing; the retry gets 200, the first signature, one entry',
    async () => {
      const { first, start, storeArgs, signer, approver, pem, poll } = await standUp(store);
      const message = `release ${store.name}`;
      const sign = { tenant_id: 'k9s', algorithm: 'ECDSA_SHA_256', hash: digestOf(message) };
      const held = await postAction(first.url, 'sign', signer, { ...sign, environment: 'production' });
      expect(held.status, JSON.stringify(held.body)).toBe(202);
      const requestId = held.body.request_id as string;

      const seen = await approveAndKill(store, first, approver, requestId, poll);
      // The entry and the request's completion are one commit: no snapshot has one without the other.
      expect(seen).toEqual({ status: 'approved', signed: 1, items: 0 });

      const restarted = await start();
      const retried = await postAction(restarted.url, 'approve_sign', approver, {
        tenant_id: 'k9s',
        request_id: requestId,
      });
      expect(retried.status, JSON.stringify(retried.body)).toBe(200);
      expect(retried.body).toMatchObject({ request_id: requestId, status: 'approved' });
      const signature = Buffer.from(retried.body.signature as string, 'base64');
      expect(verify('sha256', Buffer.from(message), createPublicKey(pem), signature)).toBe(true);
      // The requester collects the same signature.
      const collected = await postAction(restarted.url, 'sign', signer, { ...sign, request_id: requestId });
      expect(collected.status, JSON.stringify(collected.body)).toBe(200);
      expect(collected.body.signature).toBe(retried.body.signature);
      await restarted.stop();

      const entries = approvalEntries(storeArgs, requestId);
      expect(entries.map((e) => e.outcome)).toEqual(['signed']);
      expect(entries[0]?.details.signature_sha256).toBe(createHash('sha256').update(signature).digest('hex'));
      // The one `signed` entry is the signature's record (migration 0030): no signatures row is written.
      expect(await poll.signatures(digestOf(message))).toBe(0);
      await poll.close();
    },
    120_000,
  );

  it.skipIf(!store.enabled)(
    'a held batch: its signed entry with all its items and the request approved, or none; the requester collects each once',
    async () => {
      const { first, start, storeArgs, signer, approver, pem, poll } = await standUp(store);
      const messages = Array.from({ length: 20 }, (_, i) => `batch ${store.name} ${i}`);
      const hashes = messages.map(digestOf);
      const held = await postAction(first.url, 'sign_batch', signer, {
        tenant_id: 'k9s',
        algorithm: 'ECDSA_SHA_256',
        hashes,
        environment: 'production',
      });
      expect(held.status, JSON.stringify(held.body)).toBe(202);
      const requestId = held.body.request_id as string;

      const seen = await approveAndKill(store, first, approver, requestId, poll);
      expect(seen).toEqual({ status: 'approved', signed: 1, items: messages.length });

      const restarted = await start();
      const retried = await postAction(restarted.url, 'approve_sign', approver, {
        tenant_id: 'k9s',
        request_id: requestId,
      });
      expect(retried.status, JSON.stringify(retried.body)).toBe(200);
      expect(retried.body).toMatchObject({ request_id: requestId, status: 'approved' });
      const collected = await postAction(restarted.url, 'sign_batch', signer, {
        tenant_id: 'k9s',
        hashes,
        request_id: requestId,
      });
      expect(collected.status, JSON.stringify(collected.body)).toBe(200);
      const results = collected.body.results as Array<{ signature: string; log_index: number }>;
      expect(results).toHaveLength(messages.length);
      await restarted.stop();

      const entries = approvalEntries(storeArgs, requestId);
      expect(entries.map((e) => e.outcome)).toEqual(['signed']);
      expect(entries[0]?.details.batch).toMatchObject({ id: requestId, signed: messages.length });
      for (const [i, r] of results.entries()) {
        const signature = Buffer.from(r.signature, 'base64');
        expect(verify('sha256', Buffer.from(messages[i] as string), createPublicKey(pem), signature)).toBe(true);
        // Each result names the batch's one entry, whose item holds its digest once.
        expect(r.log_index + 1).toBe(entries[0]?.seq);
        expect(await poll.items(hashes[i] as string)).toBe(1);
      }
      await poll.close();
    },
    120_000,
  );

  it.skipIf(!store.enabled)(
    'a sign_batch killed the moment its entry exists: the entry with all its items, never a part of them',
    async () => {
      const { first, storeArgs, signer, poll } = await standUp(store);
      const hashes = Array.from({ length: 200 }, (_, i) => digestOf(`at once ${store.name} ${i}`));
      if (store.workers) {
        await until('the request workers to be ready', () => {
          const pids = readyWorkerPids(first);
          return pids.length >= store.workers ? pids : undefined;
        });
      }
      const lost = postAction(first.url, 'sign_batch', signer, {
        tenant_id: 'k9s',
        algorithm: 'ECDSA_SHA_256',
        hashes,
      }).catch((err: Error) => err);
      let seen: { signed: number; items: number };
      const deadline = Date.now() + 60_000;
      for (;;) {
        seen = await poll.atOnce();
        if (seen.signed > 0 || seen.items > 0) break;
        if (Date.now() > deadline) throw new Error(`no sign_batch entry after 60 s:\n${first.output()}`);
        await new Promise((resolve) => setImmediate(resolve));
      }
      first.child.kill('SIGKILL');
      await first.stop();
      await lost;
      // One commit: the entry and its 200 items together, in the snapshot and in the chain after the kill.
      expect(seen).toEqual({ signed: 1, items: hashes.length });
      const entries = exportAudit(storeArgs).filter((e) => e.action === 'sign_batch' && e.outcome === 'signed');
      expect(entries).toHaveLength(1);
      expect(entries[0]?.details.batch).toMatchObject({ size: hashes.length, signed: hashes.length });
      for (const hash of hashes.slice(0, 5)) expect(await poll.items(hash)).toBe(1);
      await poll.close();
    },
    120_000,
  );
});
