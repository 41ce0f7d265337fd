// The key the module was shown is the key that signs, through the daemon against the real service over HTTP: the
// daemon's pkcs11_sign carries the listed key as key_id (coalesced: sign_batch's key_id), and a rotation between
// the module's LIST and the signer reading the key (the service's beforeSigningKeyRead seam rotates there) signs
// nothing: ERROR KEY_CHANGED to the module, no `signed` entry; listed again, the new key signs. RSA, P-256 and ML-DSA
// (the daemon's token leaves SM2 keys out). On today's main the service signed with the new key and audited it, and
// the daemon answered KEY_NOT_FOUND only afterwards.

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { CoalescingUpstream, DEFAULT_COALESCING } from '../../daemon/upstream/coalescing-upstream.js';
import { RemoteUpstream } from '../../daemon/upstream/remote-upstream.js';
import { DaemonClient } from '../../wire/client.js';
import { WireStatus } from '../../wire/wire.js';
import {
  expectCoalescedRefused,
  type KeyChangedCase,
  keyChangedTenants,
  listedKeyId,
  signedState,
} from '../helpers/key-changed.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, keySource, remoteConfig, startTestDaemon } from './helpers.js';

const TENANTS = keyChangedTenants('rk');

let svc: TestService;
let url: string;
let daemon: RunningDaemon;
const signers = new Map<string, string>();
const admins = new Map<string, string>();
/** Tenants whose key the service's seam rotates once, just before its signer reads the current key. */
const rotateInTheWindow = new Set<string>();

beforeAll(async () => {
  ensurePeercredBuilt();
  svc = await startTestService({
    beforeSigningKeyRead: async (tenantId) => {
      if (!rotateInTheWindow.delete(tenantId)) return;
      const rotated = await callAction(svc.app, admins.get(tenantId), 'rotate_key', { tenant_id: tenantId });
      if (rotated.status !== 200) throw new Error(`rotate_key in the window: ${JSON.stringify(rotated.body)}`);
    },
  });
  url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
  for (const [tenant, { spec }] of Object.entries(TENANTS)) {
    const made = await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: spec });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    signers.set(tenant, await svc.apiKey('signer', tenant));
    admins.set(tenant, await svc.apiKey('admin', tenant));
  }
  daemon = await startTestDaemon(
    remoteConfig(
      url,
      Object.keys(TENANTS).map((tenantId) => ({ tenantId, apiKey: signers.get(tenantId) as string })),
    ),
  );
}, 120_000);
afterAll(async () => {
  await daemon?.close();
  await svc?.close();
});

describe('daemon over HTTP: a key rotated between the module listing it and the service signing', () => {
  it('SIGN is ERROR KEY_CHANGED, nothing signed or audited as signed; listed again, the new key signs', async () => {
    const { client } = await DaemonClient.open(daemon.socketPath);
    try {
      for (const [tenant, { algorithm, digestBytes }] of Object.entries(TENANTS)) {
        const listed = await listedKeyId(client, tenant);
        const before = await signedState(svc.store, tenant);
        const digest = Buffer.alloc(digestBytes, 3);
        rotateInTheWindow.add(tenant);
        const res = await client.request({ type: 'SIGN', tenant, keyId: ckaIdFor(listed), algorithm, digest });
        expect(rotateInTheWindow.has(tenant), 'the seam rotated').toBe(false);
        expect(res, tenant).toMatchObject({ type: 'ERROR', status: WireStatus.KEY_CHANGED });
        expect(await signedState(svc.store, tenant)).toEqual(before);
        const current = await listedKeyId(client, tenant);
        expect(current).not.toBe(listed);
        const again = await client.request({ type: 'SIGN', tenant, keyId: ckaIdFor(current), algorithm, digest });
        expect(again.type, `${tenant}: ${JSON.stringify(again)}`).toBe('SIGN_OK');
      }
    } finally {
      client.close();
    }
  });

  it('coalesced (pkcs11_sign alone, then sign_batch) with a key_id rotated away: every caller gets KEY_CHANGED, nothing is signed', async () => {
    const remote = new RemoteUpstream({
      url,
      tenantApiKeys: new Map([...signers].map(([tenant, token]) => [tenant, keySource(token)])),
      timeoutMs: 15_000,
    });
    // Which key_id each sign_batch carried: at least some of the calls go out together.
    const batchKeyIds: Array<string | undefined> = [];
    const signBatch = remote.signBatch.bind(remote);
    remote.signBatch = (input) => {
      batchKeyIds.push(input.keyId);
      return signBatch(input);
    };
    const coalescer = new CoalescingUpstream(remote, DEFAULT_COALESCING);
    try {
      for (const tenant of Object.keys(TENANTS)) {
        const listed = (await remote.getPublicKey(tenant)).keyId;
        // Rotated for real before the calls (the seam would catch one lane only: a call that read the key before
        // the rotation was committed rightly signs with the key it named).
        const rotated = await callAction(svc.app, admins.get(tenant), 'rotate_key', { tenant_id: tenant });
        expect(rotated.status).toBe(200);
        const before = await signedState(svc.store, tenant);
        await expectCoalescedRefused(coalescer, tenant, TENANTS[tenant] as KeyChangedCase, listed);
        expect(await signedState(svc.store, tenant)).toEqual(before);
        expect(batchKeyIds.length, `${tenant}: a sign_batch went out`).toBeGreaterThan(0);
        expect(batchKeyIds.every((id) => id === listed)).toBe(true);
        batchKeyIds.length = 0;
      }
    } finally {
      await coalescer.close();
    }
  });
});
