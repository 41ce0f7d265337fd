// The in-process upstream with an Ed25519 tenant: SIGN's DATA (wire protocol version 2, the module's CKM_EDDSA)
// reaches the service's own signer as the message (pure Ed25519, recorded under its SHA-512), through the daemon's
// coalescing upstream, which sends a message alone. Its own file: one SoftHSM per process (in-process.test.ts).
import { createHash, createPublicKey, verify } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DaemonConfig } from '../../daemon/config.js';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { InProcessUpstream } from '../../daemon/upstream/in-process-upstream.js';
import { DaemonClient } from '../../wire/client.js';
import { WireStatus } from '../../wire/wire.js';
import { makeTempDir } from '../helpers/service.js';
import { ensurePeercredBuilt, startTestDaemon, tempSocketPath } from './helpers.js';

let dataDir: string;
let daemon: RunningDaemon;
let keyId: string;
let pem: string;

beforeAll(async () => {
  ensurePeercredBuilt();
  dataDir = makeTempDir();
  const setup = await InProcessUpstream.open({ dataDir });
  // (widened as in in-process.test.ts: createTenant takes an audit actor)
  const createTenant = setup.signing.createTenant.bind(setup.signing) as unknown as (
    tenant: string,
    spec: string,
    actor: string,
  ) => Promise<{ key: { id: string; publicKeyPem: string } }>;
  const { key } = await createTenant('local-ed25519', 'ECC_NIST_EDWARDS25519', 'test');
  keyId = key.id;
  pem = key.publicKeyPem;
  await setup.close();
  const config: DaemonConfig = {
    socketPath: tempSocketPath(),
    certificateDir: join(dataDir, 'certificates'),
    logLevel: 'silent',
    upstream: { type: 'in-process', dataDir },
    tenants: [{ tenantId: 'local-ed25519', label: 'local-ed25519', certificates: {} }],
    cacheTtlMs: 60_000,
    approvalWaitMs: 5_000,
    sbomMaxBytes: 1024 * 1024,
  };
  daemon = await startTestDaemon(config);
});
afterAll(async () => {
  await daemon?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe('in-process upstream, Ed25519', () => {
  it('SIGN with DATA: pure Ed25519 over the message by the local key store, verified with node:crypto', async () => {
    const { client, hello } = await DaemonClient.open(daemon.socketPath);
    expect(hello).toMatchObject({ type: 'HELLO_OK', version: 2 });
    const list = await client.request({ type: 'LIST' });
    if (list.type !== 'LIST_OK') throw new Error(JSON.stringify(list));
    expect(list.tokens[0]?.keys[0]?.keySpec).toBe('ECC_NIST_EDWARDS25519');
    const message = Buffer.from('a certificate TBS, built locally');
    const sign = {
      type: 'SIGN' as const,
      tenant: 'local-ed25519',
      keyId: ckaIdFor(keyId),
      algorithm: 'ED25519_SHA_512',
      digest: createHash('sha512').update(message).digest(),
      data: message,
    };
    const res = await client.request(sign);
    if (res.type !== 'SIGN_OK') throw new Error(JSON.stringify(res));
    expect(res.signature).toHaveLength(64);
    expect(verify(null, message, createPublicKey(pem), res.signature)).toBe(true);
    // Past the bound: BAD_REQUEST from the daemon, before the signer.
    const long = Buffer.alloc(4097, 1);
    const refused = await client.request({ ...sign, data: long, digest: createHash('sha512').update(long).digest() });
    expect(refused).toMatchObject({ type: 'ERROR', status: WireStatus.BAD_REQUEST });
    client.close();
  });
});
