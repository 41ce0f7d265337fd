// A request worker's app (buildApp with `background: false`) runs no background passes of its own, so whatever it
// writes for them must wake them where they run, in its primary (src/workers/worker.ts sends the wake over IPC).
// Here the real app on SQLite and SoftHSM is built as a worker is, with the wake recorded: a new tenant's events wake
// the event dispatcher, a signature's audit entry and a `Prefer: wait-for-log` request wake the log integrator, and
// the worker's own integrator publishes nothing. (test/workers/*-workers.test.ts run the real primary and workers.)
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BackgroundPass } from '../../src/app.js';
import { LOG_DEFAULTS } from '../../src/transparency/log-service.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const woken: BackgroundPass[] = [];
let svc: TestService;

beforeAll(async () => {
  svc = await startTestService({
    log: { ...LOG_DEFAULTS },
    background: false,
    wakeBackground: (pass) => woken.push(pass),
  });
}, 60_000);
afterAll(async () => svc?.close());

describe('a request worker wakes its primary', () => {
  it("wakes the event dispatcher when it writes events (a new tenant's)", async () => {
    woken.length = 0;
    const created = await callAction(svc.app, svc.operator, 'create_tenant', {
      tenant_id: 'wk',
      key_spec: 'ECC_NIST_P256',
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    expect(woken).toContain('events');
  });

  it('wakes the log integrator for each committed signature, and for a request waiting for its proof', async () => {
    const signer = await svc.apiKey('signer', 'wk');
    woken.length = 0;
    const hash = createHash('sha256').update('woken').digest('base64');
    const signed = await callAction(svc.app, signer, 'sign', { tenant_id: 'wk', algorithm: 'ECDSA_SHA_256', hash });
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    expect(woken).toContain('log');

    woken.length = 0;
    // Nothing integrates in this process, so the wait runs out and the signature comes without a proof.
    const res = await svc.app.inject({
      method: 'POST',
      url: '/v1/sign',
      headers: { authorization: `Bearer ${signer}`, prefer: 'wait-for-log; wait=1' },
      payload: { action: 'sign', tenant_id: 'wk', algorithm: 'ECDSA_SHA_256', hash },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).not.toHaveProperty('log_proof');
    expect(woken.filter((p) => p === 'log').length).toBeGreaterThanOrEqual(2);
    const checkpoints = await svc.store.log.latestCheckpoint();
    expect(checkpoints, 'the worker published no checkpoint').toBeUndefined();
  });
});
