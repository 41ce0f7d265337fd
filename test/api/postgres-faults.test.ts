// PostgreSQL stopped and started again while signatures are under way (a restart, a failover): requests get 503
// store_unavailable with Retry-After while it is down, never a 500 and never a signature without its record and
// audit entry; the service recovers by itself when the database is back. Its own cluster (it is stopped here).
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChainVerifier } from '../../src/store/audit/audit-chain.js';
import { type PostgresCluster, postgresBinDir, startPostgresCluster } from '../helpers/postgres.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { until, waitFor } from '../helpers/wait.js';

const enabled = postgresBinDir() !== undefined;
let cluster: PostgresCluster;
let svc: TestService;
let signer: string;

beforeAll(async () => {
  if (!enabled) return;
  cluster = await startPostgresCluster();
  svc = await startTestService({}, { database: cluster.createDatabase('faults') });
  expect(
    (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'pgf', key_spec: 'ECC_NIST_P256' })).status,
  ).toBe(201);
  signer = await svc.apiKey('signer', 'pgf');
});
afterAll(async () => {
  await svc?.close();
  cluster?.stop();
});

const sign = (i: number) =>
  callAction(svc.app, signer, 'sign', {
    tenant_id: 'pgf',
    algorithm: 'ECDSA_SHA_256',
    hash: createHash('sha256').update(`artifact ${i}`).digest('base64'),
  });

describe.skipIf(!enabled)('PostgreSQL down and up again under load', () => {
  it('answers 503 with Retry-After while down, signs nothing unrecorded, and recovers without a restart', async () => {
    let i = 0;
    let stop = false;
    const statuses = new Map<number, number>();
    const handedOut: string[] = [];
    const load = Array.from({ length: 8 }, async () => {
      while (!stop) {
        const n = i++;
        const res = await sign(n);
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        if (res.status === 200) handedOut.push(res.body.signature as string);
        else {
          expect(res.status, JSON.stringify(res.body)).toBe(503);
          expect(res.body.error).toBe('store_unavailable');
          expect(res.headers['retry-after']).toBe('5');
          await new Promise((r) => setTimeout(r, 50));
        }
      }
    });
    // Progress is counted, never timed: signatures before the fault, refusals during it.
    await waitFor('signatures before the database stops', () => (statuses.get(200) ?? 0) >= 50);
    cluster.pause();
    const ready = await svc.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(503);
    await waitFor('refusals while the database is down', () => (statuses.get(503) ?? 0) >= 8);
    cluster.resume();
    // Back by itself: the pool opens new connections on the next requests.
    const after = await until('signing to work again', async () => {
      const res = await sign(-1);
      return res.status === 200 ? res : undefined;
    });
    expect(after.status).toBe(200);
    const afterwards = statuses.get(200) ?? 0;
    await waitFor('the load to sign again', () => (statuses.get(200) ?? 0) >= afterwards + 20);
    stop = true;
    await Promise.all(load);
    expect(statuses.get(503) ?? 0).toBeGreaterThan(0);
    expect(statuses.get(200) ?? 0).toBeGreaterThan(0);
    expect([...statuses.keys()].sort()).toEqual([200, 503]);
    // Ready again by itself (its write probe's last answer is kept for up to a second).
    await until('/readyz to answer 200 again', async () =>
      (await svc.app.inject({ method: 'GET', url: '/readyz' })).statusCode === 200 ? true : undefined,
    );
    // Every signature handed out has its record and its entry, and the chain is whole.
    const records = await svc.store.signatures.list('pgf', 100_000);
    expect(records.length).toBe(handedOut.length + 1);
    const entries = await svc.store.audit.read(0, 100_000);
    const verifier = new ChainVerifier();
    expect(entries.map((e) => verifier.check(e)).filter(Boolean)).toEqual([]);
    expect(entries.filter((e) => e.outcome === 'signed')).toHaveLength(records.length);
  });
});
