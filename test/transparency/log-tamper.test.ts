// The log must never sign a rewritten history: an audit row edited before it was integrated, a history rewritten
// with its chain recomputed (as someone with database access could), and a damaged tile each make the service
// refuse to extend or sign the tree, and the last good checkpoint stays the latest. An entry edited after it was
// logged is served with the tree's leaf hash, so a verifier's own hash of the entry shows the edit.
import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { canonicalJson, entryHash } from '../../src/store/audit/audit-chain.js';
import { logGet, parseVkey, publishCheckpoint, verifyCheckpoint } from '../helpers/log-client.js';
import { refLeaf, refVerifyInclusion } from '../helpers/rfc9162-verify.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let signer: string;
let n = 0;
const refusals: string[] = [];

async function sign() {
  const hash = createHash('sha256').update(`m${n++}`).digest('base64');
  const r = await callAction(svc.app, signer, 'sign', { tenant_id: 'tt', algorithm: 'ECDSA_SHA_256', hash });
  expect(r.status).toBe(200);
}

const state = async () =>
  (await svc.run<{ tree_size: number | string }>(sql`SELECT tree_size FROM log_state WHERE id = 1`))[0]?.tree_size;
const checkpoints = async () =>
  (await svc.run<{ n: number | string }>(sql`SELECT count(*) AS n FROM log_checkpoints`))[0]?.n;

beforeEach(async () => {
  refusals.length = 0;
  // The integrator runs only when asked (POST /log/checkpoint): the test decides what it sees.
  svc = await startTestService({
    log: { checkpointEveryEntries: 1, checkpointEverySeconds: 1, public: false, intervalMs: 3_600_000 },
    logger: {
      level: 'error',
      stream: { write: (line: string) => void (line.includes('"transparencyLog":"refused"') && refusals.push(line)) },
    } as never,
  });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'tt', key_spec: 'ECC_NIST_P256' });
  signer = await svc.apiKey('signer', 'tt');
  for (let i = 0; i < 5; i++) await sign();
  expect((await publishCheckpoint(svc.app, svc.operator)).status).toBe(200);
});
afterEach(async () => svc?.close());

async function expectRefused(good: { size: unknown; checkpoints: unknown }) {
  const r = await publishCheckpoint(svc.app, svc.operator);
  expect(r.status).toBe(500);
  expect(await state()).toEqual(good.size);
  expect(await checkpoints()).toEqual(good.checkpoints);
  expect(refusals.length).toBeGreaterThan(0);
}

describe('a tampered audit log', () => {
  it('an entry edited before it was integrated: refused until it is put back', async () => {
    const good = { size: await state(), checkpoints: await checkpoints() };
    await sign();
    const [row] = await svc.run<{ seq: number; details: string }>(
      sql`SELECT seq, details FROM audit_log ORDER BY seq DESC LIMIT 1`,
    );
    await svc.run(sql`UPDATE audit_log SET details = ${'{"hash":"forged"}'} WHERE seq = ${row?.seq}`);
    await expectRefused(good);
    expect(refusals.join('')).toMatch(/does not match its chain hash/);
    await svc.run(sql`UPDATE audit_log SET details = ${row?.details} WHERE seq = ${row?.seq}`);
    expect((await publishCheckpoint(svc.app, svc.operator)).status).toBe(200);
  });

  it('a logged history rewritten with its chain recomputed: refused; the edited entry fails a verifier', async () => {
    const good = { size: await state(), checkpoints: await checkpoints() };
    const rows = await svc.store.audit.read(0, 1000);
    const target = rows[2];
    if (!target) throw new Error('no entry 3');
    // Rewrite entry 3 and re-chain everything after it, as an attacker with database access could.
    let prev = target.prevHash;
    for (const e of rows.slice(2)) {
      const details = e.seq === target.seq ? { ...e.details, forged: true } : e.details;
      const hash = entryHash(e.seq, prev, { ...e, details });
      await svc.run(
        sql`UPDATE audit_log SET details = ${JSON.stringify(details)}, prev_hash = ${prev}, hash = ${hash} WHERE seq = ${e.seq}`,
      );
      prev = hash;
    }
    await sign(); // chained on the rewritten head
    await expectRefused(good);
    expect(refusals.join('')).toMatch(/history rewritten/);

    // The proof for entry 3 still carries the tree's leaf hash; the entry served now hashes to something else.
    const vkey = parseVkey((await logGet(svc.app, '/log/public-key', signer)).text);
    const body = (await logGet(svc.app, `/log/proof/inclusion?index=${target.seq - 1}`, signer)).json();
    const cp = verifyCheckpoint(body.checkpoint, vkey);
    const leaf = Buffer.from(body.leaf_hash, 'base64');
    const proof = body.proof.map((h: string) => Buffer.from(h, 'base64'));
    expect(refVerifyInclusion(leaf, target.seq - 1, cp.size, proof, cp.root)).toBe(true);
    const served = Buffer.from(body.entry, 'base64');
    expect(refLeaf(served).equals(leaf)).toBe(false);
    expect(JSON.parse(served.toString()).details.forged).toBe(true);
  });

  it('a damaged tile: the new tree is not consistent with the signed checkpoint, so it is not signed', async () => {
    const good = { size: await state(), checkpoints: await checkpoints() };
    const [tile] = await svc.run<{ hashes: Buffer }>(sql`SELECT hashes FROM log_tiles WHERE level = 0 AND idx = 0`);
    const damaged = Buffer.from(tile?.hashes ?? []);
    damaged[0] = (damaged[0] ?? 0) ^ 0xff;
    await svc.run(sql`UPDATE log_tiles SET hashes = ${damaged} WHERE level = 0 AND idx = 0`);
    await sign();
    const r = await publishCheckpoint(svc.app, svc.operator);
    expect(r.status).toBe(500);
    // The entry was integrated (its chain is fine) but no checkpoint was signed over the damaged tree.
    expect(await checkpoints()).toEqual(good.checkpoints);
    expect(refusals.join('')).toMatch(/not consistent with the signed checkpoint/);
  });

  it('a forged latest checkpoint row: not signed by the log key, so nothing is signed on top of it', async () => {
    const good = await checkpoints();
    await svc.run(sql`UPDATE log_checkpoints SET note = replace(note, 'signbridge', 'forged')`);
    await sign();
    expect((await publishCheckpoint(svc.app, svc.operator)).status).toBe(500);
    expect(await checkpoints()).toEqual(good);
    expect(refusals.join('')).toMatch(/not one this log signed/);
  });
});

describe('rows as older versions stored them', () => {
  it('details in the key order JSON.stringify left them (before they were stored canonical) integrate into the same leaf', async () => {
    await sign();
    const [row] = await svc.run<{ seq: number | string; details: string }>(
      sql`SELECT seq, details FROM audit_log ORDER BY seq DESC LIMIT 1`,
    );
    if (!row) throw new Error('no entry');
    // As the service stores them now: canonical JSON, or packed (migration 0032, details '0') on SQLite.
    const [entry] = await svc.store.audit.read(Number(row.seq) - 1, 1);
    const details = entry?.details as Record<string, unknown>;
    expect([canonicalJson(details), '0']).toContain(row.details);
    // The same content in another key order: the chain hash (over canonical JSON) still holds, but the row's texts
    // put together are no longer the leaf, so the integrator takes the parsing way.
    const older = JSON.stringify(Object.fromEntries(Object.entries(details).reverse()));
    expect(older).not.toBe(canonicalJson(details));
    await svc.run(sql`UPDATE audit_log SET details = ${older} WHERE seq = ${row.seq}`);
    expect((await publishCheckpoint(svc.app, svc.operator)).status).toBe(200);
    expect(refusals).toEqual([]);

    const vkey = parseVkey((await logGet(svc.app, '/log/public-key', signer)).text);
    const body = (await logGet(svc.app, `/log/proof/inclusion?index=${Number(row.seq) - 1}`, signer)).json();
    const cp = verifyCheckpoint(body.checkpoint, vkey);
    const leaf = Buffer.from(body.leaf_hash, 'base64');
    const served = Buffer.from(body.entry, 'base64');
    expect(refLeaf(served).equals(leaf)).toBe(true);
    expect(JSON.parse(served.toString()).details).toEqual(details);
    const proof = body.proof.map((h: string) => Buffer.from(h, 'base64'));
    expect(refVerifyInclusion(leaf, Number(row.seq) - 1, cp.size, proof, cp.root)).toBe(true);
  });
});
