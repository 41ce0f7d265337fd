// The key store recovers by itself from a real token fault. The token is SoftHSM behind the fault-injecting
// PKCS#11 shim (test/native/fault_shim.c): "close" closes every real SoftHSM session, so the token really logs the
// service out and really forgets every session and object handle, as an HSM that restarted or was unplugged does.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../src/app.js';
import { createApiKey } from '../../src/auth/api-keys.js';
import { Pkcs11KeyStore, type Pkcs11KeyStoreOptions } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { ServiceMetrics } from '../../src/metrics/service-metrics.js';
import { allowAll, type PolicyEngine } from '../../src/policy/policy.js';
import { SigningService } from '../../src/signing/signing-service.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { FAULT_SHIM, useFaultShim } from '../helpers/fault-shim.js';
import { parseExposition, sample } from '../helpers/metrics.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { callAction, makeTempDir } from '../helpers/service.js';

const dir = makeTempDir('sb-faults-');
const fault = useFaultShim(dir);

const store = openSqliteStore(join(dir, 'signbridge.db'));
const hsm: Pkcs11KeyStoreOptions = { ...embeddedSoftHsmOptions(dir), modulePath: FAULT_SHIM, sessions: 2 };
// Tenant "denied" is refused by the policy, to count a denial in the metrics.
const policy: PolicyEngine = {
  async evaluate(input) {
    return input.tenantId.startsWith('denied')
      ? { outcome: 'deny', rule: 'test', reason: 'this tenant may not sign' }
      : { outcome: 'allow', rule: 'test', reason: 'allowed' };
  },
};
const message = Buffer.from('signed while the token comes and goes');
const hash = createHash('sha256').update(message).digest('base64');

beforeAll(async () => {
  expect(existsSync(FAULT_SHIM), `${FAULT_SHIM} is built by scripts/setup.sh (cmake)`).toBe(true);
  fault('');
  await store.migrate();
});
afterAll(async () => store.close());

async function until<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

// Each way the key store signs: on signing threads only, on the event loop or a thread, on libuv's pool.
describe.each([
  { mode: 'signing threads', signThreads: 2, inlineBelowMs: 0 },
  { mode: 'inline or threads', signThreads: 2, inlineBelowMs: 100 },
  { mode: 'no threads', signThreads: 0, inlineBelowMs: 0 },
])('$mode', ({ mode, signThreads, inlineBelowMs }) => {
  const tenant = mode.replaceAll(' ', '-');
  let keyStore: Pkcs11KeyStore;
  let metrics: ServiceMetrics;
  let app: Awaited<ReturnType<typeof buildApp>>;
  let signer: string;
  let publicKey: string;

  beforeAll(async () => {
    fault('');
    keyStore = Pkcs11KeyStore.open({ ...hsm, signThreads, inlineBelowMs });
    metrics = new ServiceMetrics({ store, keyStore });
    app = await buildApp({ store, keyStore, policy, metrics });
    const operator = (await createApiKey(store, 'operator', null, 'op')).token;
    const created = await callAction(app, operator, 'create_tenant', { tenant_id: tenant, key_spec: 'ECC_NIST_P256' });
    expect(created.status).toBe(201);
    signer = (await createApiKey(store, 'signer', tenant, 'ci')).token;
    publicKey = (await callAction(app, signer, 'get_public_key', { tenant_id: tenant })).body.public_key_pem as string;
  });
  afterAll(async () => {
    fault('');
    await app?.close();
    await keyStore?.close();
  });

  const sign = () => callAction(app, signer, 'sign', { tenant_id: tenant, algorithm: 'ECDSA_SHA_256', hash });
  const verifies = (signature: unknown) =>
    verify(
      'sha256',
      message,
      { key: createPublicKey(publicKey), dsaEncoding: 'der' },
      Buffer.from(String(signature), 'base64'),
    );

  it('a token that lost every session, the login and the handles is re-opened and the same request signs', async () => {
    for (let i = 0; i < 3; i++) expect((await sign()).status).toBe(200); // handles cached, cost measured
    // The next C_SignInit answers CKR_DEVICE_REMOVED after SoftHSM closed every session for real.
    fault('1 0x32 C_SignInit close');
    const res = await sign();
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(verifies(res.body.signature)).toBe(true);
    expect(keyStore.faults).toEqual({ seen: 1, recovered: 1 });
    // Every later request signs too (before the fix: CKR_SESSION_HANDLE_INVALID / CKR_OBJECT_HANDLE_INVALID).
    for (let i = 0; i < 5; i++) expect((await sign()).status).toBe(200);
    expect(keyStore.faults.seen).toBe(1);
  });

  it('while the token is away: 503 key_store_unavailable with Retry-After, the outage audited, not ready; back without a restart', async () => {
    const auditBefore = (await store.stats()).auditEntries;
    const events: string[] = [];
    keyStore.onEvent = (message) => events.push(message);
    fault('-1 0x32 * close');
    const res = await sign();
    expect(res.status).toBe(503);
    expect(res.body).toMatchObject({ error: 'key_store_unavailable' });
    expect(String(res.body.reason)).toMatch(/CKR_DEVICE_REMOVED/);
    expect(res.headers['retry-after']).toBe('5');
    let refused = 1;
    // The outage's start is in the log; the refused request is counted in it, not written on its own.
    const during = await store.audit.read(auditBefore, 100);
    expect(during.map((e) => `${e.action}/${e.outcome}`)).toEqual(['key_store_outage/started']);
    expect(during[0]).toMatchObject({ tenantId: null, actor: 'service' });
    expect(during[0]?.details).toMatchObject({ fault: 'CKR_DEVICE_REMOVED', key_store: keyStore.description });

    const ready = await app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(503);
    expect(ready.json()).toMatchObject({ key_store: 'unavailable', store: 'ok' });
    expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200);
    // Still away: every request is told to retry, none is a 500.
    for (let i = 0; i < 3; i++) expect((await sign()).status).toBe(503);
    refused += 3;

    fault('');
    const back = await until('signing resumes', async () => {
      const r = await sign();
      if (r.status === 200) return r;
      expect(r.status).toBe(503);
      refused++;
      return undefined;
    });
    expect(verifies(back.body.signature)).toBe(true);
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    // Its end, with every request refused meanwhile counted; no sign_failed entry for any of them.
    const entries = await store.audit.read(auditBefore, 100);
    expect(entries.map((e) => `${e.action}/${e.outcome}`)).toEqual([
      'key_store_outage/started',
      'key_store_outage/ended',
      'sign/signed',
    ]);
    expect(entries[1]?.details).toMatchObject({
      fault: 'CKR_DEVICE_REMOVED',
      started_at: entries[0]?.details.started_at,
      refused,
    });
    expect(Date.parse(String(entries[1]?.details.ended_at))).toBeGreaterThanOrEqual(
      Date.parse(String(entries[0]?.details.started_at)),
    );
    // Said once each, not once per request: the fault, that the token stays away, that it is back.
    expect(events).toEqual([
      expect.stringMatching(/^token fault CKR_DEVICE_REMOVED/),
      expect.stringMatching(/^the token cannot be re-opened yet \(CKR_DEVICE_REMOVED\)/),
      expect.stringMatching(/^key store re-opened after CKR_DEVICE_REMOVED/),
    ]);
    expect(keyStore.faults.recovered).toBeGreaterThanOrEqual(2);
  });

  it('/readyz notices a token that lost its sessions and login, and re-opens it before anyone signs', async () => {
    const recovered = keyStore.faults.recovered;
    fault('1 0x30 C_GetSessionInfo close');
    const ready = await app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(200);
    expect(keyStore.faults.recovered).toBeGreaterThan(recovered);
    const res = await sign();
    expect(res.status).toBe(200);
    expect(verifies(res.body.signature)).toBe(true);
  });

  it('an operation that still fails after a good re-open fails alone: the token is not marked away', async () => {
    fault('-1 0x30 C_SignInit');
    const res = await sign();
    expect(res.status).toBe(503);
    expect(String(res.body.reason)).toMatch(/CKR_DEVICE_ERROR/);
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
    fault('');
    // At once, not after a back-off: nothing is left in a failed state.
    expect((await sign()).status).toBe(200);
  });

  it('a C_Sign that fails (CKR_FUNCTION_FAILED) fails that signature alone; the same sessions sign on', async () => {
    // The shim answers without calling SoftHSM's C_Sign, so SoftHSM's operation stays active in that session, as on
    // a token that does not end an operation on error: before the fix every later signature on that session (a
    // thread's, or one of the pool's) failed with CKR_OPERATION_ACTIVE.
    fault('1 0x6 C_Sign');
    const failed = await sign();
    fault('');
    expect(failed.status).toBe(500);
    for (let i = 0; i < 8; i++) {
      const res = await sign();
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(verifies(res.body.signature)).toBe(true);
    }
    // Concurrently too, so that every thread and every session of the pool signs at least once.
    const burst = await Promise.all(Array.from({ length: 16 }, () => sign()));
    expect(burst.map((r) => r.status)).toEqual(Array(16).fill(200));
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  });

  it('counts signatures, denials, failures and key-store errors in /metrics', async () => {
    const operator = (await createApiKey(store, 'operator', null, 'op')).token;
    const deniedTenant = `denied-${tenant}`;
    await callAction(app, operator, 'create_tenant', { tenant_id: deniedTenant, key_spec: 'ECC_NIST_P256' });
    const deniedSigner = (await createApiKey(store, 'signer', deniedTenant, 'ci')).token;
    const denied = await callAction(app, deniedSigner, 'sign', {
      tenant_id: deniedTenant,
      algorithm: 'ECDSA_SHA_256',
      hash,
    });
    expect(denied.status).toBe(403);

    const samples = parseExposition(await metrics.registry.metrics());
    const signatures = (outcome: string, t: string) =>
      sample(samples, 'signbridge_signatures_total', { outcome, tenant: t, algorithm: 'ECDSA_SHA_256' })?.value;
    expect(signatures('signed', tenant)).toBeGreaterThanOrEqual(11);
    expect(signatures('failed', tenant)).toBeGreaterThanOrEqual(4);
    expect(signatures('denied', deniedTenant)).toBe(1);
    expect(signatures('signed', deniedTenant)).toBeUndefined();
    expect(
      sample(samples, 'signbridge_key_store_errors_total', { fault: 'CKR_DEVICE_REMOVED' })?.value,
    ).toBeGreaterThanOrEqual(4);
    expect(sample(samples, 'signbridge_key_store_recoveries_total')?.value).toBe(keyStore.faults.recovered);
    expect(
      sample(samples, 'signbridge_sign_duration_seconds_count', { outcome: 'signed' })?.value,
    ).toBeGreaterThanOrEqual(11);
    expect(sample(samples, 'signbridge_audit_chain_length')?.value).toBe((await store.stats()).auditEntries);
    expect(
      sample(samples, 'signbridge_http_request_duration_seconds_count', { route: '/v1/sign', status: '503' })?.value,
    ).toBeGreaterThanOrEqual(4);
  });
});

it('a store committing on its writer thread (the in-process daemon) withdraws the record and writes sign_failed', async () => {
  fault('');
  const threaded = openSqliteStore(join(dir, 'daemon.db'), { writerThread: { spinMs: 0.2 } });
  const keyStore = Pkcs11KeyStore.open({ ...hsm, signThreads: 1 });
  try {
    await threaded.migrate();
    const signing = new SigningService({ store: threaded, keyStore, policy: allowAll });
    await signing.createTenant('daemon', 'ECC_NIST_P256', 'test');
    const digest = Buffer.from(hash, 'base64');
    const request = {
      action: 'pkcs11_sign' as const,
      tenantId: 'daemon',
      callerId: 'ci',
      digest,
      context: {},
      pss: false,
    };
    const before = (await threaded.stats()).auditEntries;
    fault('-1 0x30 * close');
    await expect(signing.pkcs11Sign(request)).rejects.toMatchObject({ code: 'key_store_unavailable' });
    // The record written ahead, the outage that began, and the withdrawal (which records this refusal itself).
    const [ahead, outage, failed, ...more] = await threaded.audit.read(before, 10);
    expect(more).toEqual([]);
    expect(outage).toMatchObject({ action: 'key_store_outage', outcome: 'started' });
    expect(ahead).toMatchObject({ action: 'pkcs11_sign', outcome: 'signed' });
    expect(failed).toMatchObject({ action: 'pkcs11_sign', outcome: 'sign_failed', tenantId: 'daemon', actor: 'ci' });
    expect(failed?.details.signature_id).toBe(ahead?.details.signature_id);
    expect(String(failed?.details.error)).toMatch(/CKR_DEVICE_ERROR/);
    expect(await threaded.signatures.list('daemon', 10)).toEqual([]);
  } finally {
    fault('');
    await keyStore.close();
    await threaded.close();
  }
});

// On PostgreSQL the periodic passes (event dispatcher and its sweeps, log integrator) run on a pool of their own
// (Store.background). A key store reports its outages to one listener, the last registered: it must be the request
// path's, which answers a refused request only after the outage's start entry is written (before the fix, the
// sweeps' own SigningService over the background pool took it).
it.skipIf(!testPostgresUrl())(
  'on PostgreSQL with event delivery, a refused request is answered after its outage is written',
  async () => {
    fault('');
    const store = openPostgresStore(createTestDatabase('faults_background'));
    await store.migrate();
    expect(store.background()).not.toBe(store);
    const keyStore = Pkcs11KeyStore.open({ ...hsm, signThreads: 0 });
    const listeners: unknown[] = [];
    const report = keyStore.reportOutages.bind(keyStore);
    keyStore.reportOutages = (listener) => {
      listeners.push(listener);
      report(listener);
    };
    const app = await buildApp({
      store,
      keyStore,
      policy: allowAll,
      eventDelivery: { deliver: async () => ({ outcome: 'delivered' }), sweeps: { everyMs: 50 } },
    });
    try {
      await app.ready();
      expect(listeners).toHaveLength(1);
      const operator = (await createApiKey(store, 'operator', null, 'op')).token;
      const created = await callAction(app, operator, 'create_tenant', { tenant_id: 'pg', key_spec: 'ECC_NIST_P256' });
      expect(created.status).toBe(201);
      const signer = (await createApiKey(store, 'signer', 'pg', 'ci')).token;
      const before = (await store.stats()).auditEntries;
      fault('-1 0x32 * close');
      const res = await callAction(app, signer, 'sign', { tenant_id: 'pg', algorithm: 'ECDSA_SHA_256', hash });
      expect(res.status).toBe(503);
      const during = await store.audit.read(before, 10);
      expect(during.map((e) => `${e.action}/${e.outcome}`)).toEqual(['key_store_outage/started']);
    } finally {
      fault('');
      await app.close();
      await keyStore.close();
      await store.close();
    }
  },
);
