// A store that cannot write (SQLite's own SQLITE_FULL, through PRAGMA max_page_count on the store's connection):
// requests are told to retry (503 store_unavailable, Retry-After), /readyz says not ready while /healthz stays up,
// and everything works again, without a restart, once there is room.
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { startMetricsServer } from '../../src/metrics/metrics-server.js';
import { ServiceMetrics } from '../../src/metrics/service-metrics.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { parseExposition, sample } from '../helpers/metrics.js';
import { callAction, makeTempDir } from '../helpers/service.js';

const dir = makeTempDir('sb-store-faults-');
const store = openSqliteStore(join(dir, 'signbridge.db'));
const sqlite = (store as unknown as { sqlite: BetterSqlite3.Database }).sqlite;
const keyStore = Pkcs11KeyStore.open({ ...embeddedSoftHsmOptions(dir), signThreads: 1 });
const metrics = new ServiceMetrics({ store, keyStore });
let app: Awaited<ReturnType<typeof buildApp>>;
let signer: string;
const hash = createHash('sha256').update('full disk').digest('base64');

beforeAll(async () => {
  await store.migrate();
  app = await buildApp({ store, keyStore, metrics });
  const operator = (await createApiKey(store, 'operator', null, 'op')).token;
  expect(
    (await callAction(app, operator, 'create_tenant', { tenant_id: 'full', key_spec: 'ECC_NIST_P256' })).status,
  ).toBe(201);
  signer = (await createApiKey(store, 'signer', 'full', 'ci')).token;
});
afterAll(async () => {
  await app?.close();
  await keyStore.close();
  await store.close();
});

const sign = () => callAction(app, signer, 'sign', { tenant_id: 'full', algorithm: 'ECDSA_SHA_256', hash });
const readyz = async () => {
  const res = await app.inject({ method: 'GET', url: '/readyz' });
  return { status: res.statusCode, body: res.json() as Record<string, string> };
};

async function until<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

it('a full database answers 503 store_unavailable with Retry-After, is not ready, and recovers without a restart', async () => {
  expect((await sign()).status).toBe(200);
  expect((await readyz()).status).toBe(200);
  // Not one page more: SQLite answers SQLITE_FULL once the free pages are used up.
  sqlite.pragma(`max_page_count = ${sqlite.pragma('page_count', { simple: true })}`);
  let full: Awaited<ReturnType<typeof sign>> | undefined;
  for (let i = 0; i < 5000 && !full; i++) {
    const res = await sign();
    if (res.status !== 200) full = res;
  }
  expect(full?.status).toBe(503);
  expect(full?.body).toMatchObject({ error: 'store_unavailable' });
  expect(String(full?.body.reason)).toMatch(/SQLITE_FULL/);
  expect(full?.headers['retry-after']).toBe('5');
  // Every request meanwhile is told to retry; none is a 500.
  for (let i = 0; i < 3; i++) expect((await sign()).status).toBe(503);
  const notReady = await until('readyz sees the full store', async () => {
    const r = await readyz();
    return r.status === 503 ? r : undefined;
  });
  expect(notReady.body).toMatchObject({ status: 'not_ready', store: 'unavailable', key_store: 'ok' });
  expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);

  sqlite.pragma('max_page_count = 1073741823');
  await until('readyz sees room again', async () => ((await readyz()).status === 200 ? true : undefined));
  expect((await sign()).status).toBe(200);
});

it('serves the counters on a metrics listener of its own, without an API key', async () => {
  const server = await startMetricsServer(metrics.registry, { host: '127.0.0.1', port: 0 });
  try {
    const res = await fetch(server.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const samples = parseExposition(await res.text());
    expect(sample(samples, 'signbridge_store_errors_total', { fault: 'SQLITE_FULL' })?.value).toBeGreaterThanOrEqual(4);
    const signed = sample(samples, 'signbridge_signatures_total', { outcome: 'signed', tenant: 'full' })?.value;
    expect(signed).toBe((await store.signatures.list('full', 100_000)).length);
    expect(sample(samples, 'signbridge_pending_approvals')?.value).toBe(0);
    expect(sample(samples, 'signbridge_audit_chain_length')?.value).toBe((await store.stats()).auditEntries);
    expect(sample(samples, 'signbridge_process_cpu_seconds_total')).toBeDefined();
    expect((await fetch(server.url.replace('/metrics', '/v1/sign'))).status).toBe(404);
  } finally {
    await server.close();
  }
});

it('two processes on one data dir (the service and an in-process daemon) probe at once without failing each other', async () => {
  const other = openSqliteStore(join(dir, 'signbridge.db'));
  try {
    for (let i = 0; i < 20; i++) await Promise.all([store.probeWrite(), other.probeWrite()]);
    expect(sqlite.prepare('SELECT count(*) AS n FROM store_heartbeat').get()).toEqual({ n: 0 });
  } finally {
    await other.close();
  }
});
