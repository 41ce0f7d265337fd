// Issue 44: the group commit completes an approved request in the transaction of its signatures (group-commit.ts:
// RequestCompletion). A one-digest request moves from `signing` to `approved` with its signature and the seq of its
// `signed` entry; a held batch's several records and entries (one write, all or none) with every digest's result on
// the seq of its own entry, also when other writes share the commit; a request no longer in `signing` is left as it
// is. The same cases on the three commit paths: SQLite on the event loop, SQLite's writer thread
// (sqlite-writer.cjs, the in-process daemon's), and PostgreSQL's signbridge_group_commit_v4 (migration 0027).
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { PendingRequestRecord, Store } from '../../src/store/store.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';
import { auditEntry, signatureRecord } from '../helpers/store-records.js';

const paths: Array<{ name: string; enabled: boolean; open: () => Store }> = [
  { name: 'SQLite', enabled: true, open: () => openSqliteStore(join(makeTempDir(), 'commit.db')) },
  {
    name: 'SQLite writer thread',
    enabled: true,
    open: () => openSqliteStore(join(makeTempDir(), 'thread.db'), { writerThread: { spinMs: 0 } }),
  },
  {
    name: 'PostgreSQL',
    enabled: testPostgresUrl() !== undefined,
    open: () => openPostgresStore(createTestDatabase('approval_commit')),
  },
];

const opened: Store[] = [];
afterAll(async () => {
  for (const store of opened) await store.close();
});

let n = 0;
/** A request claimed for signing by an approval (status `signing`), as approvals.ts leaves it. */
async function claimed(store: Store, batch?: string[]): Promise<string> {
  const id = `req-${++n}`;
  const at = new Date().toISOString();
  const record: PendingRequestRecord = {
    id,
    tenantId: 't1',
    keyId: 'k1',
    algorithm: 'ECDSA_SHA_256',
    hash: 'aGFzaA==',
    inputs: '{}',
    requester: 'signer',
    rule: 'r',
    reason: 'held',
    status: 'pending_approval',
    nextStages: [],
    decisions: [],
    signature: null,
    createdAt: at,
    expiresAt: at,
    updatedAt: at,
    continuationKey: id,
    ...(batch && { batch: { hashes: batch } }),
  };
  await store.requests.create(record);
  expect(await store.requests.update(id, 'pending_approval', { status: 'signing' })).toBe(true);
  return id;
}

const signed = (id: string) => ({ record: signatureRecord(id), audit: auditEntry('approver', n) });

describe.each(paths)('the approval commit ($name)', ({ enabled, open }) => {
  const ready = async () => {
    const store = open();
    opened.push(store);
    await store.migrate();
    return store;
  };

  it.skipIf(!enabled)('moves a one-digest request to approved with its signature and entry seq', async () => {
    const store = await ready();
    const id = await claimed(store);
    const updatedAt = new Date().toISOString();
    const [before, seq, after] = await Promise.all([
      store.signatures.record(signatureRecord(`${id}-before`), auditEntry('other', 0)),
      store.signatures.record(signatureRecord(`${id}-sig`), auditEntry('approver', 1), undefined, {
        id,
        signature: 'c2lnbmF0dXJl',
        updated_at: updatedAt,
      }),
      store.signatures.record(signatureRecord(`${id}-after`), auditEntry('other', 2)),
    ]);
    expect([before, after]).not.toContain(seq);
    expect(await store.requests.get('t1', id)).toMatchObject({
      status: 'approved',
      signature: 'c2lnbmF0dXJl',
      signedSeq: seq,
      updatedAt,
    });
    const [entry] = await store.audit.read((seq as number) - 1, 1);
    expect(entry).toMatchObject({ seq, actor: 'approver', details: { i: 1 } });
  });

  it.skipIf(!enabled)(
    "commits a batch's records and entries together, each result on its own entry's seq",
    async () => {
      const store = await ready();
      const id = await claimed(store, ['aA==', 'bA==', 'cA==']);
      const error = { code: 'key_store_unavailable', message: 'token away', retryable: true };
      const [, first] = await Promise.all([
        store.signatures.record(signatureRecord(`${id}-other`), auditEntry('other', 0)),
        store.signatures.recordAll([signed(`${id}-a`), signed(`${id}-c`)], [], {
          id,
          updated_at: new Date().toISOString(),
          batch: {
            hashes: ['aA==', 'bA==', 'cA=='],
            results: [
              { signature: 'YQ==', signature_id: `${id}-a`, entry: 0 },
              { error },
              { signature: 'Yw==', signature_id: `${id}-c`, entry: 1 },
            ],
          },
        }),
      ]);
      const seq = first as number;
      const request = await store.requests.get('t1', id);
      expect(request?.status).toBe('approved');
      expect(request?.batch).toEqual({
        hashes: ['aA==', 'bA==', 'cA=='],
        results: [
          { signature: 'YQ==', seq, signature_id: `${id}-a` },
          { error },
          { signature: 'Yw==', seq: seq + 1, signature_id: `${id}-c` },
        ],
      });
      expect((await store.audit.read(seq - 1, 2)).map((e) => e.actor)).toEqual(['approver', 'approver']);
      const records = (await store.signatures.list('t1', 1000)).map((r) => r.id);
      expect(records).toEqual(expect.arrayContaining([`${id}-a`, `${id}-c`]));
    },
  );

  it.skipIf(!enabled)('leaves a request that is no longer in signing as it is', async () => {
    const store = await ready();
    const id = await claimed(store);
    // The stuck-signing recovery moved it back meanwhile (held-requests.ts).
    expect(await store.requests.update(id, 'signing', { status: 'pending_approval' })).toBe(true);
    const seq = await store.signatures.record(signatureRecord(`${id}-late`), auditEntry('approver', 0), undefined, {
      id,
      signature: 'bGF0ZQ==',
      updated_at: new Date().toISOString(),
    });
    expect(seq).toBeGreaterThan(0);
    expect(await store.requests.get('t1', id)).toMatchObject({ status: 'pending_approval', signature: null });
  });
});
