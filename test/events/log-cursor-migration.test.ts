// Migrations 0028 and 0031 (issue 46) on a database written by the version before each. 0028: an existing
// subscription's cursor into the audit log starts at the log's head, after the entries whose events the old version
// wrote into the outbox. The old version's rows are written as it wrote them (`signed` entries and their outbox row,
// not yet fanned out); then the new store's dispatcher sends the old event from the outbox and the new signatures'
// from the log: each signature told of once across the upgrade, none lost, none twice. 0031: the same for batches
// (below). On SQLite, and on PostgreSQL when the run has a cluster.
import { createHash } from 'node:crypto';
import type { Kysely } from 'kysely';
import { describe, expect, it } from 'vitest';
import { EventDispatcher } from '../../src/events/dispatcher.js';
import type { SubscriptionRecord } from '../../src/store/events/event-store.js';
import type { KyselyStore } from '../../src/store/kysely-store.js';
import type { Database } from '../../src/store/tables.js';
import { migrateTo, type OldVersionDatabase, oldVersionBackends } from '../helpers/old-version-database.js';
import { subscriptionRecord } from '../helpers/subscription-record.js';

const BEFORE = '0027_approval_one_commit';

const backends = oldVersionBackends('migration_0028');

const details = (n: number) => ({
  key_id: 'e2c1b0a9-8f7e-4d6c-b5a4-938271605f4e',
  algorithm: 'ECDSA_SHA_256',
  hash: createHash('sha256').update(`upgrade ${n}`).digest('base64'),
  rule: 'default-allow',
  reason: 'no rule objected',
  key_store: 'pkcs11',
  signature_id: `sig-${n}`,
  signature_sha256: '00'.repeat(32),
});

/** The database as the version that ends at `migration` left it, holding `sub`: a handle on it, to write more. */
async function oldVersionWith(
  backend: OldVersionDatabase,
  migration: string,
  sub: SubscriptionRecord,
): Promise<Kysely<Database>> {
  const old = backend.raw();
  await migrateTo(old, migration);
  // A fresh, active subscription: the columns it sets, no failures yet; the others keep their default (null).
  const { id, tenantId, url, format, secret, createdAt, createdBy } = sub;
  await old
    .insertInto('webhook_subscriptions')
    .values({
      id,
      tenant_id: tenantId,
      url,
      format,
      secret,
      created_at: createdAt,
      created_by: createdBy,
      failures_in_a_row: 0,
    })
    .execute();
  return old;
}

/** The signature_id of each event a dispatcher sends from `store` (two passes: the outbox, then the log), sorted. */
async function signatureIdsTold(store: KyselyStore): Promise<string[]> {
  const sent: string[] = [];
  const dispatcher = new EventDispatcher(store, async (claim) => {
    sent.push(String((claim.event.data as Record<string, unknown>).signature_id));
    return { outcome: 'delivered', status: 200 };
  });
  await dispatcher.runOnce();
  await dispatcher.runOnce();
  return sent.sort();
}

describe.each(backends)('migration 0028 on %s', (_name, make) => {
  it("starts an existing subscription's cursor at the log's head: each signature told of once across the upgrade", async () => {
    const backend = make();
    const sub = subscriptionRecord({ id: 'wh_upgrade00000001', tenantId: 'up' });
    const old = await oldVersionWith(backend, BEFORE, sub);
    // Three signatures the old version made: their `signed` entries, and the last one's event still in its outbox.
    let prev = '0'.repeat(64);
    for (const n of [1, 2, 3]) {
      const hash = createHash('sha256').update(`entry ${n}`).digest('hex');
      await old
        .insertInto('audit_log')
        .values({
          seq: n,
          at: new Date().toISOString(),
          tenant_id: 'up',
          actor: 'a1b2c3d4e5f60718',
          action: 'sign',
          outcome: 'signed',
          details: JSON.stringify(details(n)),
          prev_hash: prev,
          hash,
        })
        .execute();
      prev = hash;
    }
    await old
      .insertInto('event_outbox')
      .values({
        id: 'evt_oldversion0003',
        tenant_id: 'up',
        type: 'signature.signed',
        timestamp: new Date().toISOString(),
        data: JSON.stringify({ tenant_id: 'up', signature_id: 'sig-3' }),
        order_key: null,
        fanned_out: 0,
      })
      .execute();
    await old.destroy();

    const store = backend.store();
    try {
      await store.migrate();
      // Two signatures by the new version: entries only.
      for (const n of [4, 5]) {
        await store.audit.append({
          at: new Date().toISOString(),
          tenantId: 'up',
          actor: 'a1b2c3d4e5f60718',
          action: 'sign',
          outcome: 'signed',
          details: details(n),
        });
      }
      expect(await signatureIdsTold(store)).toEqual(['sig-3', 'sig-4', 'sig-5']);
      expect(await store.events.countPendingDeliveries()).toBe(0);
    } finally {
      await store.close();
    }
  });
});

// Migration 0031 (issue 46): a batch made at once is told of from the log too. The version before wrote each batched
// signature's event into the outbox; its batch entries after a cursor (a subscription behind the head) must not be
// told of again from the log, while a batch the new version makes is told of from the log only.
describe.each(backends)('migration 0031 on %s', (_name, make) => {
  it('reads only the batches made after it from the log: each batched signature told of once across the upgrade', async () => {
    const backend = make();
    const sub = subscriptionRecord({ id: 'wh_upgrade00000031', tenantId: 'ub' });
    const old = await oldVersionWith(backend, '0029_batch_items', sub);
    // The cursor behind the old version's batch: its entry, its two items, and their events still in the outbox.
    await old.insertInto('event_log_cursors').values({ subscription_id: sub.id, after_seq: 0 }).execute();
    await old
      .insertInto('audit_log')
      .values({
        seq: 1,
        at: new Date().toISOString(),
        tenant_id: 'ub',
        actor: 'a1b2c3d4e5f60718',
        action: 'sign_batch',
        outcome: 'signed',
        details: JSON.stringify({ ...details(1), hash: undefined, signature_id: 'old', batch: { size: 2 } }),
        prev_hash: '0'.repeat(64),
        hash: createHash('sha256').update('old batch').digest('hex'),
      })
      .execute();
    for (const index of [0, 1]) {
      await old
        .insertInto('batch_items')
        .values({
          batch_seq: 1,
          item_index: index,
          digest: createHash('sha256').update(`old ${index}`).digest(),
          signature_sha256: createHash('sha256').update(`old sig ${index}`).digest(),
        })
        .execute();
      await old
        .insertInto('event_outbox')
        .values({
          id: `evt_oldbatch000${index}`,
          tenant_id: 'ub',
          type: 'signature.signed',
          timestamp: new Date().toISOString(),
          data: JSON.stringify({ tenant_id: 'ub', signature_id: `old.${index}` }),
          order_key: null,
          fanned_out: 0,
        })
        .execute();
    }
    await old.destroy();

    const store = backend.store();
    try {
      await store.migrate();
      // A batch by the new version: its entry and items only.
      await store.signatures.recordBatch(
        {
          at: new Date().toISOString(),
          tenantId: 'ub',
          actor: 'a1b2c3d4e5f60718',
          action: 'sign_batch',
          outcome: 'signed',
          details: { ...details(2), hash: undefined, signature_id: 'new', batch: { size: 3 } },
        },
        [0, 1, 2].map((index) => ({
          index,
          digest: createHash('sha256').update(`new ${index}`).digest(),
          signatureSha256: createHash('sha256').update(`new sig ${index}`).digest(),
        })),
        [],
      );
      expect(await signatureIdsTold(store)).toEqual(['new.0', 'new.1', 'new.2', 'old.0', 'old.1']);
      expect(await store.events.countPendingDeliveries()).toBe(0);
    } finally {
      await store.close();
    }
  });
});
