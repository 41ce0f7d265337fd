// A log from before the Ed25519 key (its checkpoints signed with the ECDSA key alone) gets its Ed25519 key on its
// first start after the upgrade: the checkpoints signed before keep their one line, the next ones carry both, and the
// log goes on extending the tree it signed (the new checkpoint is checked against the old one's ECDSA line). Without a
// sealer (AWS KMS alone) there is no Ed25519 key and the vkey endpoint says so. LogService runs directly on the test
// service's store and token, once without the sealer (as before the upgrade) and once with it.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LogService } from '../../src/transparency/log-service.js';
import { openCheckpoint } from '../../src/transparency/verify/checkpoint.js';
import { parseSignedNote, parseVerifierKey } from '../../src/transparency/verify/note.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const SETTINGS = { checkpointEveryEntries: 1_000_000, checkpointEverySeconds: 3600, public: false, intervalMs: 0 };

let svc: TestService;
let signer: string;

async function sign(message: string): Promise<void> {
  const r = await callAction(svc.app, signer, 'sign', {
    tenant_id: 'up',
    algorithm: 'ECDSA_SHA_256',
    hash: createHash('sha256').update(message).digest('base64'),
  });
  expect(r.status).toBe(200);
}

beforeAll(async () => {
  // No `log` option: the app runs no log of its own; the two LogServices below are the log before and after.
  svc = await startTestService();
  expect(
    (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'up', key_spec: 'ECC_NIST_P256' })).status,
  ).toBe(201);
  signer = await svc.apiKey('signer', 'up');
});
afterAll(async () => svc?.close());

describe('a log from before the Ed25519 key', () => {
  it('gets its Ed25519 key on the first start with a sealer; older checkpoints keep their ECDSA line alone', async () => {
    const before = new LogService({ store: svc.store.log, keyStores: svc.keyStores, settings: SETTINGS });
    await sign('before the upgrade');
    const old = await before.checkpointNow();
    expect(parseSignedNote(old.note).signatures).toHaveLength(1);
    expect(await before.ed25519VerifierKey()).toBeUndefined();
    const ecdsa = parseVerifierKey(await before.verifierKey());
    await before.stop();

    const after = new LogService({
      store: svc.store.log,
      keyStores: svc.keyStores,
      sealer: svc.keyStore,
      settings: SETTINGS,
    });
    expect(await after.verifierKey()).toBe(ecdsa.vkey);
    const ed25519 = parseVerifierKey((await after.ed25519VerifierKey()) as string);
    expect(ed25519.name).toBe(ecdsa.name);
    await sign('after the upgrade');
    const next = await after.checkpointNow();
    expect(next.treeSize).toBeGreaterThan(old.treeSize);
    const signatures = parseSignedNote(next.note).signatures;
    expect(signatures.map((s) => s.keyId)).toEqual([ecdsa.keyId, ed25519.keyId]);
    expect(openCheckpoint(next.note, ed25519).size).toBe(next.treeSize);
    expect(openCheckpoint(next.note, ecdsa).size).toBe(next.treeSize);
    // The checkpoint signed before stays as it was: the ECDSA key verifies it, the Ed25519 key finds no line.
    expect((await after.checkpoint(old.treeSize)).note).toBe(old.note);
    expect(openCheckpoint(old.note, ecdsa).size).toBe(old.treeSize);
    expect(() => openCheckpoint(old.note, ed25519)).toThrow(/not signed by/);

    // Another start finds the key it made: the same vkey, no second key.
    const again = new LogService({
      store: svc.store.log,
      keyStores: svc.keyStores,
      sealer: svc.keyStore,
      settings: SETTINGS,
    });
    expect(await again.ed25519VerifierKey()).toBe(ed25519.vkey);
    await after.stop();
    await again.stop();
  });
});
