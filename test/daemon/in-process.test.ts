// The in-process upstream: the service's own SigningService in the daemon, on a local SoftHSM token and SQLite.
// Its own test file: one SoftHSM per process, and this file must not also start a test service.
import { createPublicKey, verify } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DaemonConfig } from '../../daemon/config.js';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { CoalescingUpstream, DEFAULT_COALESCING } from '../../daemon/upstream/coalescing-upstream.js';
import { InProcessUpstream } from '../../daemon/upstream/in-process-upstream.js';
import { mlDsaMu } from '../../src/crypto/message-representatives.js';
import { verifyMlDsa } from '../../src/crypto/ml-dsa-verify.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { DaemonClient } from '../../wire/client.js';
import type { WireKey } from '../../wire/messages.js';
import { WireStatus } from '../../wire/wire.js';
import { digestOf } from '../helpers/crypto.js';
import { makeTempDir } from '../helpers/service.js';
import { ensurePeercredBuilt, startTestDaemon, tempSocketPath } from './helpers.js';

let dataDir: string;
let daemon: RunningDaemon;
const keyIds = new Map<string, string>();
const pems = new Map<string, string>();

beforeAll(async () => {
  ensurePeercredBuilt();
  dataDir = makeTempDir();
  // Provision tenants the way an operator would (the service's own code on the data dir), then close it: the
  // daemon opens the data dir itself from its configuration, as `signbridge daemon --in-process DIR` does.
  const setup = await InProcessUpstream.open({ dataDir });
  for (const [tenant, spec] of [
    ['local-rsa', 'RSA_2048'],
    ['local-p521', 'ECC_NIST_P521'],
    ['local-mldsa', 'ML_DSA_65'],
  ] as const) {
    // (bound and widened: the service's createTenant is gaining an audit `actor` argument)
    const createTenant = setup.signing.createTenant.bind(setup.signing) as unknown as (
      tenant: string,
      spec: string,
      actor: string,
    ) => Promise<{ key: { id: string; publicKeyPem: string } }>;
    const { key } = await createTenant(tenant, spec, 'test');
    keyIds.set(tenant, key.id);
    pems.set(tenant, key.publicKeyPem);
  }
  await setup.close();
  const config: DaemonConfig = {
    socketPath: tempSocketPath(),
    certificateDir: join(dataDir, 'certificates'),
    logLevel: 'silent',
    upstream: { type: 'in-process', dataDir },
    tenants: [
      { tenantId: 'local-rsa', label: 'local-rsa', certificates: {} },
      { tenantId: 'local-p521', label: 'local-p521', certificates: {} },
      { tenantId: 'local-mldsa', label: 'local-mldsa', certificates: {} },
      { tenantId: 'missing', label: 'missing', certificates: {} },
    ],
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

describe('in-process upstream', () => {
  it('describes itself as in-process on the PKCS#11 token', () => {
    expect(daemon.upstream.description).toMatch(/^in-process \(pkcs11:/);
  });

  it('LIST shows the local tenants; a tenant the store does not know is an empty token', async () => {
    const { client } = await DaemonClient.open(daemon.socketPath);
    const res = await client.request({ type: 'LIST' });
    if (res.type !== 'LIST_OK') throw new Error(JSON.stringify(res));
    const byTenant = new Map(res.tokens.map((t) => [t.tenant, t]));
    for (const tenant of ['local-rsa', 'local-p521']) {
      const [key] = byTenant.get(tenant)?.keys as [WireKey];
      expect(key.keyId).toEqual(ckaIdFor(keyIds.get(tenant) as string));
      expect(key.publicKey).toEqual(
        createPublicKey(pems.get(tenant) as string).export({ type: 'spki', format: 'der' }),
      );
    }
    expect(byTenant.get('missing')?.keys).toEqual([]);
    client.close();
  });

  it('signs RSA-PSS and P-521 ECDSA, verified with node:crypto', async () => {
    const { client } = await DaemonClient.open(daemon.socketPath);
    const message = Buffer.from('built locally');
    const rsa = await client.request({
      type: 'SIGN',
      tenant: 'local-rsa',
      keyId: ckaIdFor(keyIds.get('local-rsa') as string),
      algorithm: 'RSASSA_PSS_SHA_384',
      digest: digestOf('RSASSA_PSS_SHA_384', message),
    });
    if (rsa.type !== 'SIGN_OK') throw new Error(JSON.stringify(rsa));
    expect(
      verify(
        'sha384',
        message,
        { key: createPublicKey(pems.get('local-rsa') as string), padding: 6, saltLength: 48 },
        rsa.signature,
      ),
    ).toBe(true);
    for (let i = 0; i < 16; i++) {
      const m = Buffer.from(`p521 ${i}`);
      const ec = await client.request({
        type: 'SIGN',
        tenant: 'local-p521',
        keyId: ckaIdFor(keyIds.get('local-p521') as string),
        algorithm: 'ECDSA_SHA_512',
        digest: digestOf('ECDSA_SHA_512', m),
      });
      if (ec.type !== 'SIGN_OK') throw new Error(JSON.stringify(ec));
      expect(ec.signature.length).toBe(132);
      const key = createPublicKey(pems.get('local-p521') as string);
      expect(verify('sha512', m, { key, dsaEncoding: 'ieee-p1363' }, ec.signature)).toBe(true);
    }
    const missing = await client.request({
      type: 'SIGN',
      tenant: 'missing',
      keyId: Buffer.from([1]),
      algorithm: 'ECDSA_SHA_256',
      digest: Buffer.alloc(32),
    });
    expect(missing).toMatchObject({ type: 'ERROR', status: WireStatus.KEY_NOT_FOUND });
    client.close();
  });

  it('signs ML-DSA-65 from mu (the module computes it from the message); noble verifies over the message', async () => {
    const { client } = await DaemonClient.open(daemon.socketPath);
    const list = await client.request({ type: 'LIST' });
    if (list.type !== 'LIST_OK') throw new Error(JSON.stringify(list));
    const [key] = list.tokens.find((t) => t.tenant === 'local-mldsa')?.keys as [WireKey];
    expect(key.keySpec).toBe('ML_DSA_65');
    const pk = key.rawPublicKey as Buffer;
    expect(pk.length).toBe(1952);
    const message = Buffer.from('a post-quantum build artefact');
    const res = await client.request({
      type: 'SIGN',
      tenant: 'local-mldsa',
      keyId: key.keyId,
      algorithm: 'ML_DSA_SHAKE_256',
      digest: mlDsaMu(pk, [message]),
    });
    if (res.type !== 'SIGN_OK') throw new Error(JSON.stringify(res));
    expect(res.signature.length).toBe(3309);
    expect(verifyMlDsa(65, pk, { message }, res.signature)).toBe(true);
    client.close();
  });

  it("commits each signature's record and audit entry on the store's writer thread, linked by signature_id", async () => {
    expect((daemon.upstream as InProcessUpstream).writesOnThread).toBe(true);
    const { client } = await DaemonClient.open(daemon.socketPath);
    for (let i = 0; i < 3; i++) {
      const res = await client.request({
        type: 'SIGN',
        tenant: 'local-p521',
        keyId: ckaIdFor(keyIds.get('local-p521') as string),
        algorithm: 'ECDSA_SHA_512',
        digest: digestOf('ECDSA_SHA_512', Buffer.from(`linked ${i}`)),
      });
      expect(res.type).toBe('SIGN_OK');
    }
    client.close();
    // Read back on a connection of its own, as `signbridge admin audit` would.
    const store = openSqliteStore(join(dataDir, 'signbridge.db'));
    try {
      const records = await store.signatures.list('local-p521', 1000);
      const signed = (await store.audit.read(0, 1000)).filter(
        (e) => e.tenantId === 'local-p521' && e.outcome === 'signed',
      );
      expect(records.length).toBeGreaterThanOrEqual(19);
      expect(signed.map((e) => e.details.signature_id).sort()).toEqual(records.map((r) => r.id).sort());
      // Every signed entry names the door it came through: here the daemon's own process.
      for (const entry of signed) expect(entry.details.via).toEqual({ api: 'daemon-in-process', caller: entry.actor });
    } finally {
      await store.close();
    }
  });

  it('coalesces concurrent signatures into sign_batch in this process: each verifies, each batch one entry with its items', async () => {
    const inProcess = daemon.upstream as InProcessUpstream;
    // The coalescer the daemon puts in front of an upstream that can sign batches (coalesce is on by default).
    const coalescer = new CoalescingUpstream(inProcess, DEFAULT_COALESCING);
    const messages = Array.from({ length: 24 }, (_, i) => Buffer.from(`coalesced ${i}`));
    const results = await Promise.all(
      messages.map((m) =>
        coalescer.pkcs11Sign({
          tenantId: 'local-p521',
          digest: digestOf('ECDSA_SHA_512', m),
          keySpec: 'ECC_NIST_P521',
          pss: false,
          context: { project: 'coalesced' },
        }),
      ),
    );
    const key = createPublicKey(pems.get('local-p521') as string);
    const indexes = new Set<number>();
    for (const [i, res] of results.entries()) {
      if (res.kind !== 'signed') throw new Error(JSON.stringify(res));
      // As the service returns it (DER); the handler turns it into r||s for the module.
      expect(verify('sha512', messages[i] as Buffer, { key, dsaEncoding: 'der' }, res.signature)).toBe(true);
      indexes.add(res.logIndex as number);
    }
    const store = openSqliteStore(join(dataDir, 'signbridge.db'));
    try {
      const ours = messages.map((m) => digestOf('ECDSA_SHA_512', m).toString('base64'));
      const logged = (await store.audit.read(0, 100_000)).filter((e) => indexes.has(e.seq - 1));
      // The first ones went alone (coalesce.lanes), each with its own entry naming its digest; the
      // rest in batches (issue 46), each batch one `signed` entry whose items are its signatures, fewer entries
      // than signatures.
      const alone = logged.filter((e) => e.action !== 'sign_batch');
      for (const e of alone) expect(ours).toContain(e.details.hash);
      const batched = logged.filter((e) => e.action === 'sign_batch');
      expect(alone.length + batched.length).toBe(indexes.size);
      expect(batched.length).toBeGreaterThan(0);
      expect(indexes.size).toBeLessThan(24);
      let items = 0;
      for (const e of batched) {
        const got = await store.signatures.batchItems(e.seq);
        expect(got).toHaveLength((e.details.batch as { signed: number }).signed);
        for (const item of got) expect(ours).toContain(item.digest.toString('base64'));
        items += got.length;
      }
      expect(alone.length + items).toBe(24);
    } finally {
      await store.close();
    }
  });

  it('refuses a malformed batch whole, as the service does, signing nothing', async () => {
    const inProcess = daemon.upstream as InProcessUpstream;
    const err = await inProcess
      .signBatch({
        tenantId: 'local-p521',
        keySpec: 'ECC_NIST_P521',
        pss: false,
        context: {},
        digests: [Buffer.alloc(64, 1), Buffer.alloc(31, 2)],
      })
      .catch((e: unknown) => e);
    expect(err).toMatchObject({ status: WireStatus.BAD_REQUEST });
    expect(String((err as Error).message)).toMatch(/hashes\[1\]/);
  });
});
