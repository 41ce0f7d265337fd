// Witnessed checkpoints: the real service (SQLite, SoftHSM, its integrator at the defaults) with log.witnesses
// naming three witnesses written in the test from the C2SP specs (test/helpers/tlog-witness.ts): an Ed25519
// cosigner, an ML-DSA-44 cosigner, and one that recorded another history of this log and so refuses it as a fork.
// The service sends each checkpoint per tlog-witness (learning each witness's size from its 409, then a consistency
// proof), stores the cosignatures with the checkpoint and serves them; `signbridge audit prove` and `audit watch`
// with --witness-policy (C2SP tlog-policy) pass when the quorum is met and fail, naming it, when it is not.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseWitnessPolicy } from '../../src/transparency/verify/witness-policy.js';
import { witnessSettings } from '../../src/transparency/witnesses/witness-settings.js';
import { runCliAsync } from '../helpers/cli.js';
import { logGet } from '../helpers/log-client.js';
import { callAction, makeTempDir, type TestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';
import {
  honestAndForkedWitnesses,
  startWitnessedService,
  type WitnessedService,
} from '../helpers/witnessed-service.js';

const TENANT = 'wit';
const { ed, pq, forked, all } = honestAndForkedWitnesses();
const dir = makeTempDir('sb-witnesses-');
let svc: TestService;
let url: string;
let vkey: string;
let signer: string;
let warnings: string[];
let stand: WitnessedService;

async function sign(i: number): Promise<number> {
  const r = await callAction(svc.app, signer, 'sign', {
    tenant_id: TENANT,
    algorithm: 'ECDSA_SHA_256',
    hash: createHash('sha256').update(`artifact ${i}`).digest('base64'),
  });
  expect(r.status).toBe(200);
  return Number(r.headers['signbridge-log-index']);
}

/** The latest checkpoint once it carries a line of each named witness (asked again until then, up to 2 min). */
async function checkpointCosignedBy(names: string[], minSize: number): Promise<string> {
  for (let i = 0; i < 600; i++) {
    const note = (await logGet(svc.app, '/log/checkpoint', signer)).text;
    const size = Number(note.split('\n')[1]);
    if (size >= minSize && names.every((n) => note.includes(`\u2014 ${n} `))) return note;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  throw new Error(`no checkpoint of size ${minSize} or more cosigned by ${names.join(', ')}`);
}

function policyFile(name: string, quorumLines: string): string {
  const file = join(dir, name);
  writeFileSync(
    file,
    `# the log and its witnesses\nlog ${vkey}\n\n` +
      `witness ed ${ed.vkey} ${ed.url}\nwitness pq ${pq.vkey}\nwitness forked ${forked.vkey}\n${quorumLines}\n`,
  );
  return file;
}

beforeAll(async () => {
  // `ed` trusts the log's Ed25519 key, as a witness of the public network would; the others the ECDSA key.
  stand = await startWitnessedService(TENANT, all, { listen: true, trust: 'after-404', ed25519: [ed] });
  ({ svc, url, vkey, signer, warnings } = stand);
}, 120_000);
afterAll(async () => stand?.close());

describe('witnesses', () => {
  it('sends each new checkpoint to every witness; their cosignatures are served with it; a forked witness refuses', async () => {
    let last = 0;
    for (let i = 0; i < 5; i++) last = await sign(i);
    const note = await checkpointCosignedBy([ed.name, pq.name], last + 1);
    expect(note).not.toContain(forked.name);
    expect(ed.cosignedSize).toBeGreaterThanOrEqual(last + 1);
    expect(pq.cosignedSize).toBeGreaterThanOrEqual(last + 1);
    // Before it trusted the log key a witness answered 404 (unknown log); the service tried again with the next
    // checkpoint, and from then on each was cosigned.
    expect(ed.statuses[0]).toBe(404);
    expect(ed.statuses.at(-1)).toBe(200);
    // The forked one told its own size (409, text/x.tlog.size), was sent a consistency proof from it, and refused
    // that proof (422) or, at its own size, the other root (409): it never cosigned, and the service said so. Its
    // exchanges run beside the honest witnesses' and may end after their cosignatures: waited for, not assumed.
    const afterTrust = () => forked.statuses.filter((s) => s !== 404);
    await waitFor('the forked witness to refuse after telling its size', () =>
      afterTrust()
        .slice(1)
        .some((s) => s === 422 || s === 409),
    );
    expect(afterTrust()[0]).toBe(409);
    expect(forked.statuses).not.toContain(200);
    await waitFor('the service to say the forked witness holds another history', () =>
      warnings.some((w) => w.includes('witness.test/forked') && /another history|another root/.test(w)),
    );
    // The note stays a valid checkpoint for the log's own verifiers: its signatures first (ECDSA, then Ed25519: the
    // witnesses were sent both and verified the one they know), then the cosignatures.
    const lines = note
      .slice(note.indexOf('\n\n') + 2)
      .trimEnd()
      .split('\n');
    expect(lines[0]?.startsWith(`\u2014 ${vkey.split('+')[0]} `)).toBe(true);
    expect(lines[1]?.startsWith(`\u2014 ${vkey.split('+')[0]} `)).toBe(true);
    expect(lines).toHaveLength(4);
  });

  it('audit prove and audit watch pass with a quorum of the two honest witnesses and fail when it needs the third', async () => {
    const index = await sign(100);
    await checkpointCosignedBy([ed.name, pq.name], index + 1);
    const env = { SIGNBRIDGE_API_KEY: signer, HOME: dir };
    const met = policyFile('two.policy', 'group honest all ed pq\nquorum honest');
    const proved = await runCliAsync(
      ['audit', 'prove', '--service-url', url, '--tenant', TENANT, '--index', String(index), '--witness-policy', met],
      env,
    );
    expect(proved.code, proved.stderr).toBe(0);
    expect(proved.stderr).toMatch(/witnessed: cosigned by ed, pq; quorum all of \(ed, pq\)|quorum 2 of \(ed, pq\) met/);
    expect(proved.stderr).not.toMatch(/warning: no --public-key/);

    const unmet = policyFile('three.policy', 'group everyone all ed pq forked\nquorum everyone');
    const refused = await runCliAsync(
      ['audit', 'prove', '--service-url', url, '--tenant', TENANT, '--index', String(index), '--witness-policy', unmet],
      env,
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /not witnessed as the policy requires: it needs 3 of \(ed, pq, forked\), cosigned by ed, pq/,
    );

    const state = join(dir, 'watch.json');
    const watch = (policy: string) =>
      runCliAsync(
        ['audit', 'watch', '--service-url', url, '--state', state, '--once', '--witness-policy', policy],
        env,
      );
    expect((await watch(met)).code).toBe(0);
    const watchUnmet = await watch(unmet);
    expect(watchUnmet.code).toBe(1);
    expect(watchUnmet.stderr).toMatch(/not witnessed as the policy requires/);
  }, 240_000);

  it('a witness that answers 503 is tried again with back-off, and then cosigns', async () => {
    const before = pq.statuses.length;
    pq.failNext = 2;
    const index = await sign(200);
    await checkpointCosignedBy([pq.name], index + 1);
    const since = pq.statuses.slice(before);
    expect(since.slice(0, 2)).toEqual([503, 503]);
    expect(since.at(-1)).toBe(200);
    expect(warnings.some((w) => w.includes('witness.test/ml-dsa-44') && /HTTP 503.*trying again/.test(w))).toBe(true);
  });

  it('reads tlog-policy strictly', () => {
    const good = `log ${vkey}\nwitness ed ${ed.vkey}\nwitness pq ${pq.vkey}\ngroup g 1 ed pq\nquorum g\n`;
    expect(parseWitnessPolicy(good).witnesses.size).toBe(2);
    expect(parseWitnessPolicy('quorum none\n').quorum).toEqual({ kind: 'none' });
    expect(() => parseWitnessPolicy(`witness ed ${ed.vkey}\n`)).toThrow(/no quorum line/);
    expect(() => parseWitnessPolicy('quorum x\n')).toThrow(
      /line 1: the quorum x is not a witness or group defined above/,
    );
    expect(() => parseWitnessPolicy(`witness ed ${ed.vkey}\nwitness ed2 ${ed.vkey}\nquorum ed\n`)).toThrow(
      /line 2: the same key is listed twice/,
    );
    expect(() => parseWitnessPolicy(`witness ed ${ed.vkey}\ngroup g 2 ed\nquorum g\n`)).toThrow(/threshold must be/);
    expect(() => parseWitnessPolicy(`witness ed ${ed.vkey}\ngroup g any ed ed\nquorum g\n`)).toThrow(/listed twice/);
    expect(() => parseWitnessPolicy(`witness none ${ed.vkey}\nquorum none\n`)).toThrow(/name none is already taken/);
    expect(() => parseWitnessPolicy(`witness ed ${vkey}\nquorum ed\n`)).toThrow(/not a cosignature key of type 0x04/);
    expect(() => parseWitnessPolicy('quorum none\nquorum none\n')).toThrow(/a second quorum line/);
  });

  it('refuses a witness configuration it cannot use, naming it', () => {
    expect(() => witnessSettings([{ url: 'ftp://w', key: ed.vkey }])).toThrow(/must be http\(s\)/);
    expect(() => witnessSettings([{ url: ed.url, key: vkey }])).toThrow(/log.witnesses\[0\].key: .*0x04/);
    expect(() => witnessSettings([{ url: ed.url, key: ed.vkey, name: 'other' }])).toThrow(
      /is named witness.test\/ed25519/,
    );
    expect(() =>
      witnessSettings([
        { url: ed.url, key: ed.vkey },
        { url: pq.url, key: ed.vkey },
      ]),
    ).toThrow(/listed twice/);
  });
});
