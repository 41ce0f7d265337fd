// Two service instances on one PostgreSQL database, both running the integrator while both sign: one tree, one key,
// and every checkpoint (whichever instance signed it) consistent with the one before, verified with node:crypto and
// the independent RFC 9162 verifier. The instances share one key store (as they share one HSM or KMS in production).
import { createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { canonicalJson } from '../../src/store/audit/audit-chain.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import { LOG_DEFAULTS, type LogSettings } from '../../src/transparency/log-service.js';
import { leavesOfEntries, logGet, parseVkey, publishCheckpoint, verifyCheckpoint } from '../helpers/log-client.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { refRoot, refVerifyConsistency } from '../helpers/rfc9162-verify.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const enabled = testPostgresUrl() !== undefined;
const settings: LogSettings = {
  checkpointEveryEntries: 7,
  checkpointEverySeconds: 3600,
  public: false,
  intervalMs: 5,
  batchSize: 16,
};

let a: TestService;
let storeB: KyselyStore;
let b: FastifyInstance;

describe.skipIf(!enabled)('transparency log on PostgreSQL, two instances', () => {
  beforeAll(async () => {
    a = await startTestService({ log: settings }, { database: createTestDatabase('log') });
    storeB = await a.openSameStore();
    b = await buildApp({ store: storeB, keyStore: a.keyStores, log: settings });
    await b.ready();
  });
  afterAll(async () => {
    await b?.close();
    await storeB?.close();
    await a?.close();
  });

  it('both instances extend one tree and sign checkpoints consistent with each other', async () => {
    await callAction(a.app, a.operator, 'create_tenant', { tenant_id: 'pg', key_spec: 'ECC_NIST_P256' });
    const signer = await a.apiKey('signer', 'pg');
    const sign = async (app: FastifyInstance, i: number) => {
      const hash = createHash('sha256').update(`pg ${i}`).digest('base64');
      const r = await callAction(app, signer, 'sign', { tenant_id: 'pg', algorithm: 'ECDSA_SHA_256', hash });
      expect(r.status).toBe(200);
    };
    // Both instances sign at once, in waves, while both integrators run.
    for (let wave = 0; wave < 6; wave++) {
      await Promise.all(Array.from({ length: 20 }, (_, i) => sign(i % 2 ? b : a.app, wave * 100 + i)));
    }
    expect((await publishCheckpoint(b, a.operator)).status).toBe(200);
    expect((await publishCheckpoint(a.app, a.operator)).status).toBe(200);

    const vkeyA = (await logGet(a.app, '/log/public-key', signer)).text;
    expect((await logGet(b, '/log/public-key', signer)).text).toBe(vkeyA);
    const vkey = parseVkey(vkeyA);
    const edVkeyA = (await logGet(a.app, '/log/public-key?type=ed25519', signer)).text;
    expect((await logGet(b, '/log/public-key?type=ed25519', signer)).text).toBe(edVkeyA);
    // One row per key: ECDSA and Ed25519.
    expect((await a.run<{ n: string }>(sql`SELECT count(*) AS n FROM log_keys`))[0]?.n).toBe('2');
    // One instance made each key and recorded it; the other's key was not needed and is not in the record.
    const made = (await a.store.audit.read(0, 100_000)).filter((e) => e.action === 'log_key_create');
    // (In either order: the instance that lost the ECDSA race may make the Ed25519 key before the winner records its.)
    expect(made.map((e) => e.details.verifier_key).sort()).toEqual([vkeyA.trim(), edVkeyA.trim()].sort());

    const rows = await a.run<{ tree_size: string; note: string }>(
      sql`SELECT tree_size, note FROM log_checkpoints ORDER BY tree_size`,
    );
    // checkpointEveryEntries 7 over 120+ entries: many checkpoints, made by whichever instance integrated.
    expect(rows.length).toBeGreaterThan(5);
    const cps = rows.map((r) => verifyCheckpoint(r.note, vkey));
    for (const [i, cp] of cps.entries()) {
      expect(cp.size).toBe(Number(rows[i]?.tree_size));
      const prev = cps[i - 1];
      if (!prev) continue;
      expect(cp.size).toBeGreaterThan(prev.size);
      // Published at least every checkpointEveryEntries entries.
      expect(cp.size - prev.size).toBeLessThanOrEqual(settings.checkpointEveryEntries);
      const from = i % 2 ? a.app : b; // each instance's proofs, against the other's checkpoints too
      const proof = (await logGet(from, `/log/proof/consistency?from=${prev.size}&to=${cp.size}`, signer))
        .json()
        .proof.map((h: string) => Buffer.from(h, 'base64'));
      expect(refVerifyConsistency(prev.size, cp.size, prev.root, cp.root, proof), `${prev.size} -> ${cp.size}`).toBe(
        true,
      );
    }
    // The latest commits to exactly the audit rows, in seq order.
    const latest = cps[cps.length - 1];
    const entries = await a.store.audit.read(0, 100_000);
    expect(latest?.size).toBe(entries.length);
    const leaves = leavesOfEntries(entries);
    expect(latest?.root.equals(refRoot(leaves))).toBe(true);
    // The group-commit function stores details as the canonical JSON it was given, from which the integrator
    // rebuilds each leaf without parsing (src/store/audit/audit-hash.cjs, leafJsonOfRow).
    const stored = await a.run<{ details: string }>(sql`SELECT details FROM audit_log ORDER BY seq`);
    expect(stored.map((r) => r.details)).toEqual(entries.map((e) => canonicalJson(e.details)));
    expect((await logGet(a.app, '/log/checkpoint', signer)).text).toBe(
      (await logGet(b, '/log/checkpoint', signer)).text,
    );
  });
});

describe.skipIf(!enabled)('inclusion in about a second, two instances at the defaults', () => {
  let first: TestService;
  let store2: KyselyStore;
  let second: FastifyInstance;
  beforeAll(async () => {
    first = await startTestService({ log: { ...LOG_DEFAULTS } }, { database: createTestDatabase('logwait') });
    store2 = await first.openSameStore();
    second = await buildApp({ store: store2, keyStore: first.keyStores, log: { ...LOG_DEFAULTS } });
    await second.ready();
  });
  afterAll(async () => {
    await second?.close();
    await store2?.close();
    await first?.close();
  });

  it('a signature on either instance with Prefer: wait-for-log is answered with its proof, whichever integrates', async () => {
    await callAction(first.app, first.operator, 'create_tenant', { tenant_id: 'pw', key_spec: 'ECC_NIST_P256' });
    const signer = await first.apiKey('signer', 'pw');
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (i % 2 ? second : first.app).inject({
          method: 'POST',
          url: '/v1/sign',
          headers: { authorization: `Bearer ${signer}`, prefer: 'wait-for-log, wait=30' },
          payload: {
            action: 'sign',
            tenant_id: 'pw',
            algorithm: 'ECDSA_SHA_256',
            hash: createHash('sha256').update(`pw ${i}`).digest('base64'),
          },
        }),
      ),
    );
    for (const res of answers) {
      expect(res.statusCode).toBe(200);
      expect(res.headers['preference-applied']).toBe('wait-for-log');
      const proof = res.json().log_proof as string;
      expect(proof).toMatch(
        new RegExp(`^c2sp.org/tlog-proof@v1\nextra \\S+\nindex ${res.headers['signbridge-log-index']}\n`),
      );
    }
  });
});
