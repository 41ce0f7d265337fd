// Issue 31: the signature.signed event of a signature made at once is written in the transaction of its record and
// its `signed` audit entry (since issue 46 it is read from that entry: event-log-cursors.ts), after the key store returned the signature, on both ways the SQLite store commits: on
// the event loop (the service), and on its writer thread (the in-process daemon), where a record is otherwise
// written ahead of its signature and withdrawn if the key store fails. With an event the record follows the
// signature there too, so a failed signature leaves neither a record nor an event: every event names a signature
// that was recorded, every recorded signature has its event. The real SigningService, SQLite store and SoftHSM; the
// one failing signature comes from a wrapper around the real key store that refuses one digest, standing in for a
// token that fails that call (test/api/key-store-faults.test.ts injects real PKCS#11 faults).
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { EventBuilder } from '../../src/events/event-builder.js';
import type { KeyStore } from '../../src/keys/key-store.js';
import { Pkcs11KeyStore } from '../../src/keys/pkcs11/pkcs11-key-store.js';
import { embeddedSoftHsmOptions } from '../../src/keys/pkcs11/softhsm.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { SigningService } from '../../src/signing/signing-service.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { makeTempDir } from '../helpers/service.js';
import { subscriptionRecord } from '../helpers/subscription-record.js';

const REFUSED = createHash('sha256').update('the token fails this one').digest();
let close: (() => Promise<void>) | undefined;
// One token open at a time: closing one finalizes the PKCS#11 library for the whole process.
afterEach(async () => {
  await close?.();
  close = undefined;
});

describe.each(['event loop', 'writer thread'] as const)('signature.signed written with its record (%s)', (variant) => {
  it('writes one event per recorded signature, and none for a signature the key store failed', async () => {
    const dataDir = makeTempDir();
    const store = openSqliteStore(join(dataDir, 'signbridge.db'), {
      ...(variant === 'writer thread' && { writerThread: { spinMs: 0 } }),
    });
    await store.migrate();
    expect(store.signatures.writesOnThread).toBe(variant === 'writer thread');
    const token = Pkcs11KeyStore.open(embeddedSoftHsmOptions(dataDir));
    close = async () => {
      await token.close();
      await store.close();
    };
    const failing: KeyStore = {
      kind: token.kind,
      description: token.description,
      supports: (spec) => token.supports(spec),
      createKey: (spec, label) => token.createKey(spec, label),
      destroyKey: (keyRef) => token.destroyKey(keyRef),
      ping: () => token.ping(),
      close: async () => undefined,
      sign: (keyRef, spec, algorithm, digest) =>
        digest.equals(REFUSED)
          ? Promise.reject(new Error('CKR_DEVICE_ERROR (refused by the test)'))
          : token.sign(keyRef, spec, algorithm, digest),
    };
    const signing = new SigningService({
      store,
      keyStore: failing,
      policy: new RulesPolicyEngine(parsePolicyDocument('version: 1\n', 'allow-all')),
    });
    await signing.createTenant('we', 'ECC_NIST_P256', 'test');
    await store.events.addSubscription(
      subscriptionRecord({
        id: 'wh_00000000000000aa',
        tenantId: 'we',
        url: 'https://hooks.example.test/signed',
        eventKinds: ['signature.signed'],
        secret: null,
      }),
    );
    const sign = (digest: Buffer) =>
      signing.sign({ tenantId: 'we', callerId: 'k1', digest, algorithm: 'ECDSA_SHA_256', context: {} });
    const digests = Array.from({ length: 10 }, (_, i) => createHash('sha256').update(`artifact ${i}`).digest());
    const [made, refused] = await Promise.all([
      Promise.all(digests.map(sign)),
      sign(REFUSED).then(
        () => undefined,
        (err: Error) => err,
      ),
    ]);
    expect(refused?.message).toContain('CKR_DEVICE_ERROR');

    // Issue 46: the events are read from the `signed` entries (as the dispatcher reads them), none is an outbox row.
    expect((await store.events.readEvents(0, 1000)).filter((e) => e.type === 'signature.signed')).toEqual([]);
    const now = new Date().toISOString();
    const read = await store.events.leaseLogEntries(
      'test',
      { id: 'wh_00000000000000aa', tenantId: 'we' },
      now,
      now,
      1000,
    );
    const builder = new EventBuilder(store, undefined);
    const events = await Promise.all((read?.entries ?? []).map((entry) => builder.signedFromLog(entry)));
    const records = await store.signatures.list('we', 1000);
    expect(records.map((r) => r.id).sort()).toEqual(made.map((m) => (m.kind === 'signed' ? m.signatureId : '')).sort());
    expect(events.map((e) => e.data.signature_id).sort()).toEqual(records.map((r) => r.id).sort());
    for (const event of events) {
      const record = records.find((r) => r.id === event.data.signature_id);
      expect(event.data.digest).toBe(record?.hash);
      expect(event.data.request_id).toBeUndefined();
      expect(event.orderKey).toBeNull();
    }
    expect(events.some((e) => e.data.digest === REFUSED.toString('base64'))).toBe(false);
    const audit = (await store.audit.read(0, 1000)).filter((e) => e.action === 'sign');
    expect(audit.filter((e) => e.outcome === 'signed')).toHaveLength(10);
    expect(audit.filter((e) => e.outcome === 'sign_failed')).toHaveLength(1);
  });
});
