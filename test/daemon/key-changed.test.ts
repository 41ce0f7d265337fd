// The key the module was shown is the key that signs, through the daemon (in-process upstream, over its socket with
// DaemonClient): the daemon sends the key id it listed as pkcs11_sign's (or, coalesced, sign_batch's) key_id, so a
// key rotated after the module listed it (the daemon's catalog still holding it) signs nothing: the module gets
// ERROR KEY_CHANGED (CKR_KEY_CHANGED) and the audit log has no `signed` entry; listed again, the new key signs. RSA,
// P-256 and ML-DSA (the daemon's token leaves SM2 keys out). On today's main the service signed with the new key, the
// daemon noticed only afterwards (KEY_NOT_FOUND) and the signature was audited as made.
// Its own test file: one SoftHSM per process, and this file must not also start a test service.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DaemonConfig } from '../../daemon/config.js';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { CoalescingUpstream, DEFAULT_COALESCING } from '../../daemon/upstream/coalescing-upstream.js';
import { InProcessUpstream } from '../../daemon/upstream/in-process-upstream.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { DaemonClient } from '../../wire/client.js';
import { WireStatus } from '../../wire/wire.js';
import {
  expectCoalescedRefused,
  type KeyChangedCase,
  keyChangedTenants,
  listedKeyId,
  signedState,
} from '../helpers/key-changed.js';
import { makeTempDir } from '../helpers/service.js';
import { ensurePeercredBuilt, startTestDaemon, tempSocketPath } from './helpers.js';

const TENANTS = keyChangedTenants('kc');

let dataDir: string;
let daemon: RunningDaemon;

beforeAll(async () => {
  ensurePeercredBuilt();
  dataDir = makeTempDir();
  const setup = await InProcessUpstream.open({ dataDir });
  for (const [tenant, { spec }] of Object.entries(TENANTS)) await setup.signing.createTenant(tenant, spec, 'test');
  await setup.close();
  const config: DaemonConfig = {
    socketPath: tempSocketPath(),
    certificateDir: join(dataDir, 'certificates'),
    logLevel: 'silent',
    upstream: { type: 'in-process', dataDir },
    tenants: Object.keys(TENANTS).map((tenant) => ({ tenantId: tenant, label: tenant, certificates: {} })),
    // Long enough that the catalog still holds the listed key when the service rotates it.
    cacheTtlMs: 600_000,
    approvalWaitMs: 5_000,
    sbomMaxBytes: 1024 * 1024,
  };
  daemon = await startTestDaemon(config);
});
afterAll(async () => {
  await daemon?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

const inProcess = () => daemon.upstream as InProcessUpstream;

/** The tenant's signed state, read from the daemon's database as another process would. */
async function signedStateOf(tenant: string): Promise<{ signatures: number; signedEntries: number }> {
  const store = openSqliteStore(join(dataDir, 'signbridge.db'));
  try {
    return await signedState(store, tenant);
  } finally {
    await store.close();
  }
}

describe('daemon: a key rotated after the module listed it', () => {
  it('SIGN is ERROR KEY_CHANGED with nothing signed or audited as signed; listed again, the new key signs', async () => {
    const { client } = await DaemonClient.open(daemon.socketPath);
    try {
      for (const [tenant, { algorithm, digestBytes }] of Object.entries(TENANTS)) {
        const listed = await listedKeyId(client, tenant);
        const rotated = await inProcess().signing.rotateKey(tenant, 'test');
        const before = await signedStateOf(tenant);
        const digest = Buffer.alloc(digestBytes, 7);
        const res = await client.request({ type: 'SIGN', tenant, keyId: ckaIdFor(listed), algorithm, digest });
        expect(res, tenant).toMatchObject({ type: 'ERROR', status: WireStatus.KEY_CHANGED });
        if (res.type === 'ERROR') expect(res.message).toContain('key_changed');
        expect(await signedStateOf(tenant)).toEqual(before);
        // The refusal dropped the catalog's entry: LIST shows the new key, and it signs.
        expect(await listedKeyId(client, tenant)).toBe(rotated.key.id);
        const again = await client.request({
          type: 'SIGN',
          tenant,
          keyId: ckaIdFor(rotated.key.id),
          algorithm,
          digest,
        });
        expect(again.type, `${tenant}: ${JSON.stringify(again)}`).toBe('SIGN_OK');
      }
    } finally {
      client.close();
    }
  });

  it('coalesced into sign_batch, every caller is refused KEY_CHANGED and nothing is signed', async () => {
    const coalescer = new CoalescingUpstream(inProcess(), DEFAULT_COALESCING);
    for (const tenant of Object.keys(TENANTS)) {
      const old = (await inProcess().getPublicKey(tenant)).keyId;
      await inProcess().signing.rotateKey(tenant, 'test');
      const before = await signedStateOf(tenant);
      await expectCoalescedRefused(coalescer, tenant, TENANTS[tenant] as KeyChangedCase, old);
      expect(await signedStateOf(tenant)).toEqual(before);
    }
  });
});
