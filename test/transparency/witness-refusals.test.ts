// Witnesses that refuse the log, with the real service (SQLite, SoftHSM) and witnesses written from the C2SP specs
// (test/helpers/tlog-witness.ts): one that has cosigned far more entries than the log has (it saw another history,
// or the log was restored from an old backup) and one that holds another root at a size the log has passed. Each
// new checkpoint is still sent to both (docs/transparency.md, "Witnesses": "tries with the next checkpoint"), each
// condition is warned about once however many checkpoints repeat it, and a witness whose operator resets it
// cosigns the next checkpoint. A witness only a few entries ahead is sent `old` its own size, with the proof from
// there, once the log has passed it.
import { createHash, randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { logGet, publishCheckpoint } from '../helpers/log-client.js';
import { callAction, type TestService } from '../helpers/service.js';
import { TestWitness } from '../helpers/tlog-witness.js';
import { until, waitFor } from '../helpers/wait.js';
import { forkedWitness, startWitnessedService, type WitnessedService } from '../helpers/witnessed-service.js';

const TENANT = 'refusals';
const AHEAD_SIZE = 1_000_000;
// It cosigned a million entries of "this log": far more than the log has.
const ahead = new TestWitness({
  name: 'witness.test/ahead',
  kind: 'ed25519',
  seed: { size: AHEAD_SIZE, root: randomBytes(32) },
});
// It cosigned one entry with another root: every consistency proof from there fails (422).
const forked = forkedWitness();
// Honest at first; later given a history of its own a few entries ahead of the log (the third test).
const near = new TestWitness({ name: 'witness.test/near', kind: 'ed25519' });
const all = [ahead, forked, near];
let svc: TestService;
let signer: string;
let warnings: string[];
let stand: WitnessedService;

const warned = (witness: TestWitness, pattern: RegExp) =>
  warnings.filter((w) => w.includes(witness.name) && pattern.test(w));

/** A signature, then a checkpoint published at once; its size. */
async function signAndPublish(i: number): Promise<number> {
  const r = await callAction(svc.app, signer, 'sign', {
    tenant_id: TENANT,
    algorithm: 'ECDSA_SHA_256',
    hash: createHash('sha256').update(`refused ${i}`).digest('base64'),
  });
  expect(r.status).toBe(200);
  const published = await publishCheckpoint(svc.app, svc.operator);
  expect(published.status).toBe(200);
  return Number(published.text.split('\n')[1]);
}

beforeAll(async () => {
  // Trusted once each has answered a checkpoint with 404 (unknown log), as in witnesses.test.ts.
  stand = await startWitnessedService(TENANT, all, { trust: 'after-404' });
  ({ svc, signer, warnings } = stand);
}, 120_000);
afterAll(async () => stand?.close());

describe('witnesses that refuse the log', () => {
  it('are sent every new checkpoint, and each condition is warned about once', async () => {
    const sizes: number[] = [];
    for (let i = 0; i < 4; i++) {
      const size = await signAndPublish(i);
      sizes.push(size);
      // The feed sends the newest checkpoint it has: this one, or a later one of the background integrator.
      await waitFor(
        `both witnesses sent a checkpoint of ${size} entries or more`,
        () => all.every((w) => w.requests.some((r) => r.size >= size)),
        30_000,
      );
    }
    // The witness ahead of the log was asked with each checkpoint (old 0: the size it told, a million, is more
    // than any checkpoint of this log can be sent from), and told its size each time.
    const askedAhead = ahead.requests.filter((r) => r.size >= (sizes[0] as number));
    expect(new Set(askedAhead.map((r) => r.size)).size).toBeGreaterThanOrEqual(4);
    expect(askedAhead.every((r) => r.old === 0)).toBe(true);
    expect(ahead.statuses.filter((s) => s === 409).length).toBeGreaterThanOrEqual(4);
    expect(ahead.statuses).not.toContain(400);
    // The forked one was sent a consistency proof from the size it told (1) with each checkpoint, and refused each.
    const askedForked = forked.requests.filter((r) => r.size >= (sizes[0] as number));
    expect(new Set(askedForked.map((r) => r.size)).size).toBeGreaterThanOrEqual(4);
    expect(askedForked.filter((r) => r.old === 1).length).toBeGreaterThanOrEqual(4);
    expect(forked.statuses.filter((s) => s === 422).length).toBeGreaterThanOrEqual(4);
    // Each condition once, not once per checkpoint.
    expect(warned(ahead, /more than this log's/)).toHaveLength(1);
    expect(warned(ahead, /fork.*restored from an older backup/)).toHaveLength(1);
    expect(warned(forked, /another history|another root/)).toHaveLength(1);
  });

  it('a witness reset by its operator cosigns the next checkpoint, and the service says so once', async () => {
    ahead.reset();
    const size = await signAndPublish(100);
    await waitFor(
      'the reset witness to cosign a checkpoint of this log',
      () => (ahead.cosignedSize ?? 0) >= size,
      30_000,
    );
    const cosigned = await until('the checkpoint it cosigned served with its cosignature', async () => {
      const res = await logGet(svc.app, `/log/proof/inclusion?index=0&tree_size=${ahead.cosignedSize}`, svc.operator);
      const checkpoint = res.status === 200 ? (res.json().checkpoint as string) : '';
      return checkpoint.includes(`\u2014 ${ahead.name} `) ? checkpoint : undefined;
    });
    expect(cosigned).not.toContain(`\u2014 ${forked.name} `);
    await waitFor('the service to say it cosigns again', () => warned(ahead, /cosigns again/).length === 1);
    // The forked witness still refuses, still warned about once.
    expect(warned(forked, /another history|another root/)).toHaveLength(1);
  });
  it('a witness a few entries ahead is asked with old 0 until the log passes its size, then with old its size', async () => {
    const current = Number((await logGet(svc.app, '/log/checkpoint', signer)).text.split('\n')[1]);
    const witnessSize = current + 10;
    const from = near.requests.length;
    near.reset({ size: witnessSize, root: randomBytes(32) });
    let size = current;
    while (size < witnessSize + 2) {
      size = await signAndPublish(size + 1000);
      const published = size;
      await waitFor(
        `the near witness sent a checkpoint of ${published} entries or more`,
        () => near.requests.some((r) => r.size >= published),
        30_000,
      );
    }
    const since = near.requests.slice(from);
    // The first request still carried the size it had cosigned; it answered with the larger one.
    const below = since.slice(1).filter((r) => r.size < witnessSize);
    const past = since.filter((r) => r.size >= witnessSize);
    expect(below.length).toBeGreaterThanOrEqual(1);
    expect(below.every((r) => r.old === 0)).toBe(true);
    expect(past.length).toBeGreaterThanOrEqual(1);
    expect(past.every((r) => r.old === witnessSize)).toBe(true);
    expect(near.statuses).not.toContain(400);
    await waitFor(
      'the refusal of the proof from its size',
      () => warned(near, /holds another root|refused the consistency proof/).length > 0,
    );
    expect(warned(near, /more than this log's/)).toHaveLength(1);
    expect(warned(near, /holds another root|refused the consistency proof/)).toHaveLength(1);
  });
});
