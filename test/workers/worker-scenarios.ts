// A real `signbridge server --workers 2` (a primary and two request workers behind one address) on SQLite or
// PostgreSQL, signed through concurrently: one audit chain, distinct log indexes, every answered signature in its
// entry, a velocity limit that holds exactly across the workers, a held request continued through another worker
// than the one that approved it, a worker killed with -9 under load (nothing it answered lost, the service serves
// on, the primary starts another), SIGTERM draining, and no worker outliving a primary killed with -9. Every wait
// is for a condition; the deadlines only report a hang.
import { createHash, createPublicKey, randomBytes, verify } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ActionResult,
  exportAudit,
  postAction,
  runCli,
  type ServerProcess,
  startServerProcess,
} from '../helpers/cli.js';
import { answeredBy, isRunning, postOnFreshConnection, readyWorkerPids } from '../helpers/fresh-connection.js';
import { parseVkey, verifyCheckpoint } from '../helpers/log-client.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { refLeaf, refVerifyInclusion } from '../helpers/rfc9162-verify.js';
import { makeTempDir } from '../helpers/service.js';
import { until, waitFor } from '../helpers/wait.js';

const VELOCITY_MAX = 40;
const POLICY = `version: 1
rules:
  environments:
    requireApproval: [production]
tenants:
  vel:
    velocity: { perTenant: { max: ${VELOCITY_MAX}, windowSeconds: 3600 } }
`;

/** A signature a client received, with what it signed. */
interface Received {
  message: string;
  digest: string;
  signature: string;
  logIndex: number;
}

export function describeRequestWorkers(store: 'sqlite' | 'postgres'): void {
  const enabled = store === 'sqlite' || testPostgresUrl() !== undefined;
  describe.skipIf(!enabled)(`two request workers on ${store}`, () => {
    const dir = makeTempDir();
    const dataDir = join(dir, 'data');
    const policyFile = join(dir, 'policy.yaml');
    let database: string | undefined;
    let server: ServerProcess;
    const storeArgs = () => ['--data-dir', dataDir, ...(database ? ['--database', database] : [])];
    const start = () =>
      startServerProcess([...storeArgs(), '--workers', '2'], {
        SIGNBRIDGE_POLICY_FILE: policyFile,
        SIGNBRIDGE_METRICS_LISTEN: '127.0.0.1:0',
      });
    const admin = (...args: string[]) => {
      const res = runCli(['admin', ...args, ...storeArgs()]);
      if (res.code !== 0) throw new Error(`admin ${args.join(' ')}: ${res.stderr}`);
      return res.stdout.trim();
    };
    const pems = new Map<string, string>();
    let operator: string;

    beforeAll(async () => {
      writeFileSync(policyFile, POLICY);
      if (store === 'postgres') database = createTestDatabase('workers');
      server = await start();
      operator = admin('api-key', 'create', '--role', 'operator');
    });
    afterAll(async () => {
      await server?.stop('SIGKILL');
    });

    const tenant = async (id: string) => {
      const made = await postAction(server.url, 'create_tenant', operator, {
        tenant_id: id,
        key_spec: 'ECC_NIST_P256',
      });
      expect(made.status, JSON.stringify(made.body)).toBe(201);
      const signer = admin('api-key', 'create', '--role', 'signer', '--tenant', id);
      const approver = admin('api-key', 'create', '--role', 'approver', '--tenant', id);
      const pem = (await postAction(server.url, 'get_public_key', approver, { tenant_id: id })).body.public_key_pem;
      pems.set(id, pem as string);
      return { signer, approver };
    };

    const sign = (base: string, signer: string, id: string, digest: string, extra: object = {}) =>
      postAction(base, 'sign', signer, { tenant_id: id, algorithm: 'ECDSA_SHA_256', hash: digest, ...extra });

    const received = (res: ActionResult, message: string): Received => ({
      message,
      digest: digestOf(message),
      signature: res.body.signature as string,
      logIndex: Number(res.headers.get('signbridge-log-index')),
    });

    /**
     * Every signature received verifies under the tenant's key, its log index is its own, and the audit entry at
     * that index is the `signed` entry of its digest; the chain verifies.
     */
    const expectRecorded = (id: string, signatures: Received[]) => {
      const key = createPublicKey(pems.get(id) as string);
      for (const r of signatures) {
        const ok = verify(
          'sha256',
          Buffer.from(r.message),
          { key, dsaEncoding: 'der' },
          Buffer.from(r.signature, 'base64'),
        );
        expect(ok, `signature over ${r.digest}`).toBe(true);
      }
      expect(new Set(signatures.map((r) => r.logIndex)).size, 'distinct log indexes').toBe(signatures.length);
      const bySeq = new Map(exportAudit(storeArgs()).map((e) => [e.seq, e]));
      for (const r of signatures) {
        const entry = bySeq.get(r.logIndex + 1);
        expect(entry, `the entry at log index ${r.logIndex}`).toMatchObject({ tenant_id: id, outcome: 'signed' });
        expect((entry?.details as { hash?: string }).hash).toBe(r.digest);
      }
      expect(runCli(['admin', 'audit', 'verify', ...storeArgs()]).code).toBe(0);
    };

    it('signs through every worker with keys made through different workers one after another', async () => {
      // SoftHSM's index of the token: a worker that made a key right after another worker made one saw only its own
      // until it read the token again (Pkcs11KeyStore.mayRescanFor).
      const ids = ['made-a', 'made-b', 'made-c'];
      // The keys first: an admin command between the creations and the signatures changed the token, and every
      // worker read it again.
      const signerOf = new Map(ids.map((id) => [id, admin('api-key', 'create', '--role', 'signer', '--tenant', id)]));
      for (const id of ids) {
        const made = await postOnFreshConnection(server.url, 'create_tenant', operator, {
          tenant_id: id,
          key_spec: 'ECC_NIST_P256',
        });
        expect(made.status, JSON.stringify(made.body)).toBe(201);
      }
      // Signed at once, each key through consecutive fresh connections (so through both workers).
      const answers = [];
      for (const id of ids) {
        for (let i = 0; i < 4; i++) {
          const res = await postOnFreshConnection(server.url, 'sign', signerOf.get(id) as string, {
            tenant_id: id,
            algorithm: 'ECDSA_SHA_256',
            hash: digestOf(`${id} ${i}`),
          });
          answers.push({ id, res });
        }
      }
      for (const { res } of answers) expect(res.status, JSON.stringify(res.body)).toBe(200);
      for (const id of ids) {
        const by = new Set<number>();
        for (const { res } of answers.filter((a) => a.id === id)) {
          by.add(await answeredBy(server, res.headers['x-request-id'] as string));
        }
        expect(by.size, `${id} signed by both workers`).toBe(2);
      }
    });

    it('signs through both workers at once: one chain, distinct log indexes, each signature in its entry', async () => {
      const { signer } = await tenant('many');
      const signatures: Received[] = [];
      const client = async () => {
        for (let i = 0; i < 12; i++) {
          const message = randomBytes(16).toString('hex');
          const res = await postOnFreshConnectionOrPooled(server.url, signer, 'many', digestOf(message), i);
          expect(res.status, JSON.stringify(res.body)).toBe(200);
          signatures.push(received(res, message));
        }
      };
      await Promise.all(Array.from({ length: 16 }, client));
      expect(signatures).toHaveLength(16 * 12);
      expectRecorded('many', signatures);
      // Both workers answered: the log names each request's process.
      const answering = new Set(
        server
          .output()
          .split('\n')
          .filter((l) => l.includes('"msg":"request completed"'))
          .map((l) => /"pid":(\d+)/.exec(l)?.[1]),
      );
      expect([...answering].sort()).toEqual((await bothReady(server)).map(String).sort());
    });

    it('counts the signatures of both workers once in /metrics, and the store gauges once', async () => {
      const metricsUrl = /signbridge metrics on (http:\/\/\S+)/.exec(server.output())?.[1] as string;
      const text = await (await fetch(metricsUrl)).text();
      const signed = /signbridge_signatures_total\{[^}]*outcome="signed"[^}]*tenant="many"[^}]*\} (\d+)/.exec(text);
      expect(Number(signed?.[1])).toBe(16 * 12);
      const chain = text.split('\n').filter((l) => l.startsWith('signbridge_audit_chain_length '));
      expect(chain).toEqual([`signbridge_audit_chain_length ${exportAudit(storeArgs()).length}`]);
    });

    it("serves a key rotated through one worker from every worker's next request", async () => {
      const { signer } = await tenant('rot');
      const keyAdmin = admin('api-key', 'create', '--role', 'admin', '--tenant', 'rot');
      // Both workers read (and cache) the first key.
      const first = new Set<number>();
      for (let i = 0; first.size < 2; i++) {
        const res = await postOnFreshConnection(server.url, 'sign', signer, {
          tenant_id: 'rot',
          algorithm: 'ECDSA_SHA_256',
          hash: digestOf(`before ${i}`),
        });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        first.add(await answeredBy(server, res.headers['x-request-id'] as string));
      }
      const rotated = await postOnFreshConnection(server.url, 'rotate_key', keyAdmin, { tenant_id: 'rot' });
      expect(rotated.status, JSON.stringify(rotated.body)).toBe(200);
      const pem = (await postAction(server.url, 'get_public_key', keyAdmin, { tenant_id: 'rot' })).body.public_key_pem;
      const after = new Set<number>();
      for (let i = 0; after.size < 2; i++) {
        const message = `after ${i}`;
        const res = await postOnFreshConnection(server.url, 'sign', signer, {
          tenant_id: 'rot',
          algorithm: 'ECDSA_SHA_256',
          hash: digestOf(message),
        });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        expect(res.body.key_id).toBe(rotated.body.key_id);
        const signature = Buffer.from(res.body.signature as string, 'base64');
        expect(verify('sha256', Buffer.from(message), createPublicKey(pem as string), signature)).toBe(true);
        after.add(await answeredBy(server, res.headers['x-request-id'] as string));
      }
    });

    it('signs batches through both workers at once into the one chain, each batch one entry with its items', async () => {
      const { signer } = await tenant('batch');
      const batches = Array.from({ length: 6 }, (_, b) => Array.from({ length: 25 }, (_, i) => `batch ${b}.${i}`));
      const answers = await Promise.all(
        batches.map((messages) =>
          postOnFreshConnection(server.url, 'sign_batch', signer, {
            tenant_id: 'batch',
            algorithm: 'ECDSA_SHA_256',
            hashes: messages.map(digestOf),
          }),
        ),
      );
      const all: Received[] = [];
      const by = new Set<number>();
      for (const [b, res] of answers.entries()) {
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        by.add(await answeredBy(server, res.headers['x-request-id'] as string));
        const results = res.body.results as Array<{ signature: string; log_index: number }>;
        for (const [i, r] of results.entries()) {
          const message = batches[b]?.[i] as string;
          all.push({ message, digest: digestOf(message), signature: r.signature, logIndex: r.log_index });
        }
      }
      expect(by.size, 'both workers signed batches').toBe(2);
      expect(all).toHaveLength(150);
      // Each batch is one `signed` entry (issue 46) holding its 25 signatures as items; the chain verifies.
      const key = createPublicKey(pems.get('batch') as string);
      for (const r of all) {
        const signature = Buffer.from(r.signature, 'base64');
        expect(verify('sha256', Buffer.from(r.message), { key, dsaEncoding: 'der' }, signature)).toBe(true);
      }
      const indexes = new Set(all.map((r) => r.logIndex));
      expect(indexes.size, 'one log index a batch').toBe(6);
      const bySeq = new Map(exportAudit(storeArgs()).map((e) => [e.seq, e]));
      for (const index of indexes) {
        const entry = bySeq.get(index + 1);
        expect(entry, `the entry at log index ${index}`).toMatchObject({ tenant_id: 'batch', outcome: 'signed' });
        expect((entry?.details as { batch: Record<string, unknown> }).batch).toMatchObject({ size: 25, signed: 25 });
      }
      expect(runCli(['admin', 'audit', 'verify', ...storeArgs()]).code).toBe(0);
    });

    it("answers Prefer: wait-for-log from either worker with the proof the primary's integrator published", async () => {
      const { signer } = await tenant('proofs');
      const vkeyLine = await (
        await fetch(`${server.url}/log/public-key`, { headers: { authorization: `Bearer ${signer}` } })
      ).text();
      const vkey = parseVkey(vkeyLine.trim());
      const by = new Set<number>();
      for (let i = 0; by.size < 2; i++) {
        const message = `proved ${i}`;
        const res = await postOnFreshConnection(
          server.url,
          'sign',
          signer,
          { tenant_id: 'proofs', algorithm: 'ECDSA_SHA_256', hash: digestOf(message) },
          { prefer: 'wait-for-log; wait=30' },
        );
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        expect(res.headers['preference-applied']).toBe('wait-for-log');
        by.add(await answeredBy(server, res.headers['x-request-id'] as string));
        // The proof (c2sp.org/tlog-proof) is of this signature's own entry, under a checkpoint the log key signed.
        const proof = res.body.log_proof as string;
        const cut = proof.indexOf('\n\n');
        const lines = proof.slice(0, cut).split('\n');
        const index = Number(res.headers['signbridge-log-index']);
        expect(lines[0]).toBe('c2sp.org/tlog-proof@v1');
        expect(lines[2]).toBe(`index ${index}`);
        const extra = Buffer.from((lines[1] as string).slice('extra '.length), 'base64');
        expect(JSON.parse(extra.toString())).toMatchObject({
          tenant_id: 'proofs',
          outcome: 'signed',
          details: { hash: digestOf(message) },
        });
        const checkpoint = verifyCheckpoint(proof.slice(cut + 2), vkey);
        const path = lines.slice(3).map((l) => Buffer.from(l, 'base64'));
        expect(refVerifyInclusion(refLeaf(extra), index, checkpoint.size, path, checkpoint.root)).toBe(true);
      }
    });

    it('holds a velocity limit exactly across the workers', async () => {
      const { signer } = await tenant('vel');
      const statuses = await Promise.all(
        Array.from({ length: 100 }, (_, i) =>
          sign(server.url, signer, 'vel', digestOf(`vel ${i}`)).then((r) => r.status),
        ),
      );
      expect(statuses.filter((s) => s === 200)).toHaveLength(VELOCITY_MAX);
      expect(statuses.filter((s) => s === 429)).toHaveLength(100 - VELOCITY_MAX);
    });

    it('continues a held request through another worker than the one that approved it', async () => {
      const { signer, approver } = await tenant('held');
      const digest = digestOf('release 1.0');
      const request = { tenant_id: 'held', algorithm: 'ECDSA_SHA_256', hash: digest, environment: 'production' };
      const held = await postOnFreshConnection(server.url, 'sign', signer, request);
      expect(held.status, JSON.stringify(held.body)).toBe(202);
      const requestId = held.body.request_id as string;
      const approved = await postOnFreshConnection(server.url, 'approve_sign', approver, {
        tenant_id: 'held',
        request_id: requestId,
      });
      expect(approved.status, JSON.stringify(approved.body)).toBe(200);
      const approvedBy = await answeredBy(server, approved.headers['x-request-id'] as string);
      // The primary hands each new connection to the next worker: one of the next few is the other worker.
      const collected = await until('a collect answered by the other worker', async () => {
        const res = await postOnFreshConnection(server.url, 'sign', signer, { ...request, request_id: requestId });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        const by = await answeredBy(server, res.headers['x-request-id'] as string);
        return by !== approvedBy ? res : undefined;
      });
      expect(collected.body.signature).toBe(approved.body.signature);
      expectRecorded('held', [
        {
          message: 'release 1.0',
          digest,
          signature: collected.body.signature as string,
          logIndex: Number(collected.headers['signbridge-log-index']),
        },
      ]);
    });

    it('loses nothing a worker answered when it is killed with -9 under load; the service serves on', async () => {
      const { signer } = await tenant('k9');
      const [victim, survivor] = await bothReady(server);
      const signatures: Received[] = [];
      const failures: string[] = [];
      let stop = false;
      const client = async () => {
        while (!stop) {
          const message = randomBytes(16).toString('hex');
          try {
            const res = await sign(server.url, signer, 'k9', digestOf(message));
            expect(res.status, JSON.stringify(res.body)).toBe(200);
            signatures.push(received(res, message));
          } catch (err) {
            if ((err as Error).name === 'AssertionError') throw err;
            failures.push((err as Error).message); // a connection of the killed worker; a real client retries
            await new Promise((r) => setTimeout(r, 20));
          }
        }
      };
      const clients = Array.from({ length: 16 }, client);
      await waitFor('signatures before the kill', () => signatures.length >= 100);
      const beforeKill = signatures.length;
      process.kill(victim as number, 'SIGKILL');
      await waitFor('the primary to start another worker', () => readyWorkerPids(server).length === 3);
      await waitFor('signatures after the kill', () => signatures.length >= beforeKill + 200);
      stop = true;
      await Promise.all(clients);
      expect(isRunning(victim as number)).toBe(false);
      expect(isRunning(survivor as number)).toBe(true);
      expectRecorded('k9', signatures);
    });

    it('drains on SIGTERM: requests in flight are answered, the workers and the primary end', async () => {
      const { signer } = await tenant('term');
      const workers = readyWorkerPids(server).filter(isRunning);
      expect(workers).toHaveLength(2);
      const signatures: Received[] = [];
      const refused: number[] = [];
      let stop = false;
      const client = async () => {
        while (!stop) {
          const message = randomBytes(16).toString('hex');
          try {
            const res = await sign(server.url, signer, 'term', digestOf(message));
            if (res.status === 200) signatures.push(received(res, message));
            else refused.push(res.status);
          } catch {
            return; // no longer listening
          }
        }
      };
      const clients = Array.from({ length: 8 }, client);
      await waitFor('signatures before SIGTERM', () => signatures.length >= 50);
      const exited = server.stop('SIGTERM');
      expect(await exited).toBe(0);
      stop = true;
      await Promise.all(clients);
      // Refused while closing: 503 with Retry-After, never anything else.
      expect(refused.filter((s) => s !== 503)).toEqual([]);
      for (const pid of workers) expect(isRunning(pid), `worker ${pid}`).toBe(false);
      expectRecorded('term', signatures);
    });

    it('ends the workers with a primary killed with -9', async () => {
      server = await start();
      const workers = await bothReady(server);
      await server.stop('SIGKILL');
      await waitFor('the workers to end', () => workers.every((pid) => !isRunning(pid)));
    });
  });
}

const digestOf = (message: string) => createHash('sha256').update(message).digest('base64');

/** The two workers' pids, once both said they are ready (their log lines may follow the primary's). */
function bothReady(server: ServerProcess): Promise<number[]> {
  return until('both workers ready', () => {
    const pids = readyWorkerPids(server);
    return pids.length >= 2 ? pids.slice(-2) : undefined;
  });
}

/** Half the requests on connections of their own (spread over the workers), half on the client's pooled ones. */
async function postOnFreshConnectionOrPooled(
  base: string,
  signer: string,
  id: string,
  digest: string,
  i: number,
): Promise<ActionResult> {
  const body = { tenant_id: id, algorithm: 'ECDSA_SHA_256', hash: digest };
  if (i % 2 === 0) return postAction(base, 'sign', signer, body);
  const res = await postOnFreshConnection(base, 'sign', signer, body);
  const headers = new Headers();
  for (const [name, value] of Object.entries(res.headers)) if (typeof value === 'string') headers.set(name, value);
  return { status: res.status, headers, body: res.body };
}
