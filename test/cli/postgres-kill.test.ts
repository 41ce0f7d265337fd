// kill -9 of one of two instances while both sign under load, on one PostgreSQL database: the other keeps serving,
// and afterwards every signature a client received has its record and its audit entry, and the chain verifies.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

const enabled = testPostgresUrl() !== undefined;
let database: string;
const dataDir = makeTempDir();
let one: ServerProcess;
let two: ServerProcess;

beforeAll(async () => {
  if (!enabled) return;
  database = createTestDatabase('kill');
  [one, two] = await Promise.all([
    startServerProcess(['--data-dir', dataDir, '--database', database]),
    startServerProcess(['--data-dir', dataDir, '--database', database]),
  ]);
});
afterAll(async () => {
  await one?.stop('SIGKILL');
  await two?.stop();
});

const admin = (...args: string[]) => runCli(['admin', ...args, '--database', database]);

describe.skipIf(!enabled)('kill -9 of one instance under load', () => {
  it('loses no signature a client received: each has its record and entry, and the chain verifies', async () => {
    const operator = admin('api-key', 'create', '--role', 'operator').stdout.trim();
    expect(
      (await postAction(one.url, 'create_tenant', operator, { tenant_id: 'k9', key_spec: 'ECC_NIST_P256' })).status,
    ).toBe(201);
    const signer = admin('api-key', 'create', '--role', 'signer', '--tenant', 'k9').stdout.trim();
    const keyAdmin = admin('api-key', 'create', '--role', 'admin', '--tenant', 'k9').stdout.trim();
    const pem = (await postAction(two.url, 'get_public_key', keyAdmin, { tenant_id: 'k9' })).body
      .public_key_pem as string;
    const received: { message: string; signature: string }[] = [];
    let failedOnKilled = 0;
    let n = 0;
    let stop = false;
    const client = async (target: () => ServerProcess) => {
      while (!stop) {
        const message = `artifact ${n++}`;
        const hash = createHash('sha256').update(message).digest('base64');
        try {
          const res = await postAction(target().url, 'sign', signer, {
            tenant_id: 'k9',
            hash,
            algorithm: 'ECDSA_SHA_256',
          });
          expect(res.status, JSON.stringify(res.body)).toBe(200);
          received.push({ message, signature: res.body.signature as string });
        } catch (err) {
          if ((err as Error).name === 'AssertionError') throw err;
          failedOnKilled++; // the killed instance's connections fail; a real client retries elsewhere
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    };
    const clients = [
      ...Array.from({ length: 8 }, () => client(() => one)),
      ...Array.from({ length: 8 }, () => client(() => two)),
    ];
    // Progress is counted, never timed: both instances serve, then one dies, then the other serves on.
    await waitFor('signatures from both instances before the kill', () => received.length >= 100);
    const beforeKill = received.length;
    one.child.kill('SIGKILL');
    await waitFor(
      'the killed instance to fail its clients and the other to keep serving',
      () => failedOnKilled > 0 && received.length >= beforeKill + 100,
    );
    stop = true;
    await Promise.all(clients);
    expect(beforeKill).toBeGreaterThan(0);
    expect(failedOnKilled).toBeGreaterThan(0);
    expect(received.length).toBeGreaterThan(beforeKill); // the surviving instance kept serving
    // Every signature received verifies and has its record and entry.
    const key = createPublicKey(pem);
    for (const r of received.slice(0, 50)) {
      expect(verify('sha256', Buffer.from(r.message), key, Buffer.from(r.signature, 'base64'))).toBe(true);
    }
    const exported = admin('audit', 'export');
    expect(exported.code, exported.stderr).toBe(0);
    const signedHashes = new Set(
      exported.stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as { outcome: string; details: { hash?: string } })
        .filter((e) => e.outcome === 'signed')
        .map((e) => e.details.hash),
    );
    for (const r of received) {
      expect(signedHashes.has(createHash('sha256').update(r.message).digest('base64')), r.message).toBe(true);
    }
    const verified = admin('audit', 'verify');
    expect(verified.code, verified.stderr).toBe(0);
  });
});
