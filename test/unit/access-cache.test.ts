// The signing path's exact cache (src/store/access-cache.ts) driven by an epoch source the test controls: a
// synchronous one (SQLite's) and an asynchronous one whose reads the test answers, in any order (PostgreSQL's,
// several connections). The stores' own tests check the same against real databases.
// Also the audit chain's split of an entry around its seq, which PostgreSQL's group commit hashes from.
import { setImmediate as nextTurn } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { AccessCache } from '../../src/store/access-cache.js';
import {
  canonicalJson,
  chainAuditRows,
  entryHash,
  entryHashParts,
  leafJson,
  leafJsonOfRow,
} from '../../src/store/audit/audit-chain.js';
import type { ApiKeyRecord, AuditContent } from '../../src/store/store.js';
import { apiKeyRecord } from '../helpers/store-records.js';

const apiKey = (id: string, revokedAt: string | null = null) => apiKeyRecord(id, { revokedAt });

/** An asynchronous epoch source: each read waits until the test answers it. */
function pendingEpochs() {
  const reads: Array<(n: number) => void> = [];
  const failures: Array<(err: Error) => void> = [];
  return {
    read: () =>
      new Promise<number>((resolve, reject) => {
        reads.push(resolve);
        failures.push(reject);
      }),
    get sent() {
      return reads.length;
    },
    answer(i: number, epoch: number) {
      reads[i]?.(epoch);
    },
    fail(i: number) {
      failures[i]?.(new Error('connection terminated'));
    },
  };
}

describe('AccessCache', () => {
  it('reads the epoch once per event-loop turn and answers from memory while it does not change', async () => {
    let epoch = 1;
    let epochReads = 0;
    let rowReads = 0;
    const cache = new AccessCache(() => {
      epochReads++;
      return epoch;
    });
    const read = (id: string) => {
      rowReads++;
      return apiKey(id);
    };
    await Promise.all([cache.apiKey('k', read), cache.apiKey('k', read), cache.apiKey('k', read)]);
    expect([epochReads, rowReads]).toEqual([1, 1]);
    await nextTurn();
    expect((await cache.apiKey('k', read))?.id).toBe('k');
    expect([epochReads, rowReads]).toEqual([2, 1]);
    // Another process raised the epoch: the next turn forgets and reads the row anew.
    epoch = 2;
    await nextTurn();
    await cache.apiKey('k', read);
    expect([epochReads, rowReads]).toEqual([3, 2]);
    expect(cache.stats).toEqual({ hits: 3, misses: 2 });
  });

  it('does not keep ids that do not exist (guessing cannot fill it)', async () => {
    let rowReads = 0;
    const cache = new AccessCache(() => 1);
    for (let i = 0; i < 3; i++) {
      const nothing = () => {
        rowReads++;
        return undefined;
      };
      expect(await cache.apiKey('nope', nothing)).toBeUndefined();
      await nextTurn();
    }
    expect(rowReads).toBe(3);
  });

  it('makes every lookup of a turn wait for that turn’s one epoch read (asynchronous source)', async () => {
    const epochs = pendingEpochs();
    const cache = new AccessCache(epochs.read);
    let rowReads = 0;
    const read = async (id: string) => {
      rowReads++;
      return apiKey(id);
    };
    const first = [cache.apiKey('k', read), cache.currentKey('t', async () => undefined)];
    expect(epochs.sent).toBe(1);
    await Promise.resolve();
    expect(rowReads).toBe(0); // nothing answered before the epoch is known
    epochs.answer(0, 7);
    await Promise.all(first);
    expect(rowReads).toBe(1);
    await nextTurn();
    const second = cache.apiKey('k', read);
    expect(epochs.sent).toBe(2);
    epochs.answer(1, 7);
    expect((await second)?.id).toBe('k');
    expect(rowReads).toBe(1);
  });

  it('does not keep a row read while the epoch changed, and ignores an older read that answers late', async () => {
    const epochs = pendingEpochs();
    const cache = new AccessCache(epochs.read);
    const rows = [apiKey('k'), apiKey('k', '2026-11-24T01:00:00.000Z')];
    let rowReads = 0;
    const read = async (id: string) => rows[Math.min(rowReads++, 1)] ?? apiKey(id);
    const a = cache.apiKey('k', read);
    epochs.answer(0, 1);
    expect((await a)?.revokedAt).toBeNull();
    await nextTurn();
    // Two turns' reads in flight on two connections; the newer answers first with the raised epoch.
    const b = cache.apiKey('k', read);
    await nextTurn();
    const c = cache.apiKey('k', read);
    epochs.answer(2, 2);
    expect((await c)?.revokedAt).not.toBeNull();
    epochs.answer(1, 1); // the older read, late: must not bring the old epoch (and the old row) back
    await b;
    await nextTurn();
    const d = cache.apiKey('k', read);
    epochs.answer(3, 2);
    expect((await d)?.revokedAt).not.toBeNull();
    expect(rowReads).toBe(2);
  });

  it('forgets on its own process’s writes, including a read that was under way during the write', async () => {
    let rowReads = 0;
    let release: () => void = () => undefined;
    const cache = new AccessCache(() => 1);
    const slowRead = (id: string) =>
      new Promise<ApiKeyRecord>((resolve) => {
        rowReads++;
        release = () => resolve(apiKey(id));
      });
    const during = cache.apiKey('k', slowRead);
    await cache.changing(async () => undefined);
    release();
    await during;
    await nextTurn();
    await cache.apiKey('k', async (id) => {
      rowReads++;
      return apiKey(id);
    });
    expect(rowReads).toBe(2); // the read that straddled the write was not kept
  });

  it('fails the turn’s lookups when the epoch cannot be read, and reads again on the next', async () => {
    const epochs = pendingEpochs();
    const cache = new AccessCache(epochs.read);
    const failed = cache.apiKey('k', async (id) => apiKey(id));
    epochs.fail(0);
    await expect(failed).rejects.toThrow(/connection terminated/);
    const again = cache.apiKey('k', async (id) => apiKey(id));
    expect(epochs.sent).toBe(2);
    epochs.answer(1, 1);
    expect((await again)?.id).toBe('k');
  });
});

describe('audit entry hash parts', () => {
  const entries: AuditContent[] = [
    { at: '2026-11-24T00:00:00.000Z', tenantId: null, actor: 'a', action: 'sign', outcome: 'ok', details: {} },
    {
      at: '2026-11-24T00:00:00.000Z',
      tenantId: 'tenant "quoted" \\ back',
      actor: 'ключ 🔑',
      action: 'sign',
      outcome: 'ok',
      details: { seq: -1, tenant_id: 'x', nested: { z: [1, 'two', null], a: '\n\u0001' }, '"seq":': true },
    },
  ];

  it('puts seq between two parts that make the canonical JSON, and chains exactly as entryHash checks', () => {
    for (const e of entries) {
      const { before, after } = entryHashParts(e);
      for (const seq of [1, 42, 2147483647]) {
        const fields = {
          seq,
          at: e.at,
          tenant_id: e.tenantId,
          actor: e.actor,
          action: e.action,
          outcome: e.outcome,
          details: e.details,
        };
        expect(`${before}${seq}${after}`).toBe(canonicalJson(fields));
      }
    }
    const rows = chainAuditRows({ seq: 41, hash: 'f'.repeat(64) }, entries);
    rows.forEach((row, i) => {
      const e = entries[i] as AuditContent;
      expect(row.hash).toBe(entryHash(row.seq, row.prev_hash, e));
      // Details are stored as canonical JSON, so the integrator can rebuild the leaf from the row's texts.
      expect(row.details).toBe(canonicalJson(e.details));
      expect(leafJsonOfRow(row)).toBe(leafJson(row.seq, e));
    });
  });
});
