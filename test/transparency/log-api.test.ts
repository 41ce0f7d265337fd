// The /log endpoints of the real service (SQLite + SoftHSM) with entries made by real signing: checkpoints verified
// with node:crypto against the published vkey, every inclusion proof and the consistency proofs between
// checkpoints verified by the independent RFC 9162 implementation in test/helpers; tenants see only their own
// entries' bytes; errors are ErrorResponses.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseTilePath } from '../../src/api/routes/log.js';
import { buildApp } from '../../src/app.js';
import {
  leavesOfEntries,
  logGet,
  parseVkey,
  publishCheckpoint,
  type Vkey,
  verifyCheckpoint,
} from '../helpers/log-client.js';
import { refLeaf, refRoot, refVerifyConsistency, refVerifyInclusion } from '../helpers/rfc9162-verify.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let signerA: string;
let signerB: string;
let vkey: Vkey;
const digest = (m: string) => createHash('sha256').update(m).digest('base64');

async function sign(token: string, tenant: string, m: string) {
  const r = await callAction(svc.app, token, 'sign', {
    tenant_id: tenant,
    algorithm: 'ECDSA_SHA_256',
    hash: digest(m),
  });
  expect(r.status).toBe(200);
}

/** The leaves as the audit log defines them, from the rows (not from the service's tree). */
async function leavesFromRows() {
  return leavesOfEntries(await svc.store.audit.read(0, 100_000));
}

beforeAll(async () => {
  svc = await startTestService({
    log: { checkpointEveryEntries: 1_000_000, checkpointEverySeconds: 3600, public: false, intervalMs: 20 },
  });
  for (const t of ['la', 'lb']) {
    expect(
      (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: t, key_spec: 'ECC_NIST_P256' })).status,
    ).toBe(201);
  }
  signerA = await svc.apiKey('signer', 'la');
  signerB = await svc.apiKey('signer', 'lb');
  const pk = await logGet(svc.app, '/log/public-key', signerA);
  expect(pk.status).toBe(200);
  expect(pk.type).toMatch(/^text\/plain/);
  vkey = parseVkey(pk.text);
});
afterAll(async () => svc?.close());

describe('transparency log endpoints', () => {
  it('publishes checkpoints that verify with the vkey and commit to the audit rows', async () => {
    const sizes: number[] = [];
    for (let round = 0; round < 3; round++) {
      for (let i = 0; i <= round * 3; i++) await sign(i % 2 ? signerB : signerA, i % 2 ? 'lb' : 'la', `r${round} ${i}`);
      const published = await publishCheckpoint(svc.app, svc.operator);
      expect(published.status).toBe(200);
      const got = await logGet(svc.app, '/log/checkpoint', signerB);
      expect(got.status).toBe(200);
      expect(got.type).toBe('text/plain; charset=utf-8');
      expect(got.text).toBe(published.text);
      const cp = verifyCheckpoint(got.text, vkey);
      const leaves = await leavesFromRows();
      expect(cp.size).toBe(leaves.length);
      expect(cp.root.equals(refRoot(leaves))).toBe(true);
      sizes.push(cp.size);
    }
    expect(new Set(sizes).size).toBe(3);
  });

  it('records the log keys it began with in the audit log, once each: ECDSA, then Ed25519', async () => {
    const made = (await svc.store.audit.read(0, 100_000)).filter((e) => e.action === 'log_key_create');
    expect(made).toHaveLength(2);
    for (const entry of made) expect(entry).toMatchObject({ actor: 'service', outcome: 'created', tenantId: null });
    expect(made.map((e) => e.details.key_spec)).toEqual(['ECC_NIST_P256', 'ECC_NIST_EDWARDS25519']);
    expect(made.map((e) => e.details.origin)).toEqual([vkey.name, vkey.name]);
    expect(made[0]?.details.verifier_key).toBe((await logGet(svc.app, '/log/public-key', signerA)).text.trim());
    expect(made[1]?.details.verifier_key).toBe(
      (await logGet(svc.app, '/log/public-key?type=ed25519', signerA)).text.trim(),
    );
  });

  it('serves both vkeys: ECDSA by default (unchanged), Ed25519 on request, both ECDSA first with type=all', async () => {
    const ecdsa = (await logGet(svc.app, '/log/public-key?type=ecdsa', signerA)).text;
    expect(ecdsa).toBe((await logGet(svc.app, '/log/public-key', signerA)).text);
    const ed = await logGet(svc.app, '/log/public-key?type=ed25519', signerA);
    expect(ed.status).toBe(200);
    const [, name, id, b64] = /^([^+]+)\+([0-9a-f]{8})\+([A-Za-z0-9+/]{44})\n$/.exec(ed.text) ?? [];
    expect(name).toBe(vkey.name);
    // The C2SP key ID: SHA-256(name ‖ 0x0A ‖ 0x01 ‖ key)[:4].
    const typed = Buffer.from(b64 as string, 'base64');
    expect(typed[0]).toBe(0x01);
    const want = createHash('sha256')
      .update(Buffer.concat([Buffer.from(`${vkey.name}\n`), typed]))
      .digest()
      .subarray(0, 4);
    expect(id).toBe(want.toString('hex'));
    expect((await logGet(svc.app, '/log/public-key?type=all', signerA)).text).toBe(`${ecdsa}${ed.text}`);
    expect((await logGet(svc.app, '/log/public-key?type=rsa', signerA)).status).toBe(400);
  });

  it('signs every checkpoint with both keys: the ECDSA line first, then an Ed25519 line that verifies', async () => {
    await sign(signerA, 'la', 'both lines');
    expect((await publishCheckpoint(svc.app, svc.operator)).status).toBe(200);
    const note = (await logGet(svc.app, '/log/checkpoint', signerA)).text;
    const edLine = (await logGet(svc.app, '/log/public-key?type=ed25519', signerA)).text.trim();
    const [, edId, edKey] = /^[^+]+\+([0-9a-f]{8})\+(.+)$/.exec(edLine) as RegExpExecArray;
    const text = note.slice(0, note.lastIndexOf('\n\n') + 1);
    const lines = note
      .slice(text.length + 1)
      .trimEnd()
      .split('\n');
    expect(lines).toHaveLength(2);
    const raw = lines.map((l) => Buffer.from(l.split(' ')[2] as string, 'base64'));
    expect(raw[0]?.subarray(0, 4).equals(vkey.keyId)).toBe(true);
    expect(raw[1]?.subarray(0, 4).toString('hex')).toBe(edId);
    const publicKey = createPublicKey({
      key: {
        kty: 'OKP',
        crv: 'Ed25519',
        x: Buffer.from(edKey as string, 'base64')
          .subarray(1)
          .toString('base64url'),
      },
      format: 'jwk',
    });
    const ok = (t: string) => verify(null, Buffer.from(t), publicKey, raw[1]?.subarray(4) as Buffer);
    expect(ok(text)).toBe(true);
    expect(ok(text.replace(/\n\d+\n/, '\n999999\n'))).toBe(false);
  });

  it('serves an inclusion proof for every entry; the entry bytes only to its own tenant', async () => {
    const cp = verifyCheckpoint((await logGet(svc.app, '/log/checkpoint', signerA)).text, vkey);
    const rows = await svc.store.audit.read(0, 100_000);
    for (let index = 0; index < cp.size; index++) {
      const r = await logGet(svc.app, `/log/proof/inclusion?index=${index}`, signerA);
      expect(r.status).toBe(200);
      const body = r.json();
      expect(body.index).toBe(index);
      expect(body.tree_size).toBe(cp.size);
      expect(verifyCheckpoint(body.checkpoint, vkey).root.equals(cp.root)).toBe(true);
      const leaf = Buffer.from(body.leaf_hash, 'base64');
      const proof = body.proof.map((h: string) => Buffer.from(h, 'base64'));
      expect(refVerifyInclusion(leaf, index, cp.size, proof, cp.root)).toBe(true);
      if (rows[index]?.tenantId === 'la') {
        expect(refLeaf(Buffer.from(body.entry, 'base64')).equals(leaf)).toBe(true);
        expect(JSON.parse(Buffer.from(body.entry, 'base64').toString()).seq).toBe(index + 1);
      } else {
        expect(body.entry).toBeUndefined();
      }
    }
  });

  it('finds an entry by digest= in the forms docs/transparency.md shows: percent-encoded or URL-safe base64', async () => {
    let m = 0;
    while (!digest(`plus ${m}`).includes('+')) m++; // a digest whose base64 has a '+', which a query reads as a space
    const hash = digest(`plus ${m}`);
    await sign(signerA, 'la', `plus ${m}`);
    expect((await publishCheckpoint(svc.app, svc.operator)).status).toBe(200);
    const urlSafe = hash.replaceAll('+', '-').replaceAll('/', '_').replace(/=+$/, '');
    const found = [];
    for (const query of [encodeURIComponent(hash), urlSafe]) {
      const r = await logGet(svc.app, `/log/proof/inclusion?digest=${query}`, signerA);
      expect(r.status, r.text).toBe(200);
      found.push(r.json().index);
    }
    expect(found[0]).toBe(found[1]);
    expect((await logGet(svc.app, `/log/proof/inclusion?digest=${hash}`, signerA)).status).not.toBe(200);
  });

  it('proves older checkpoints consistent with newer ones, and inclusion in an older checkpoint', async () => {
    // The integrator published the first one by itself (a log's first entries), the test three more.
    const all = await svc.run<{ tree_size: number; note: string }>(
      sql`SELECT tree_size, note FROM log_checkpoints ORDER BY tree_size`,
    );
    expect(all.length).toBeGreaterThanOrEqual(3);
    const cps = all.map((r) => verifyCheckpoint(r.note, vkey));
    for (const [i, older] of cps.entries()) {
      for (const newer of cps.slice(i)) {
        const r = await logGet(svc.app, `/log/proof/consistency?from=${older.size}&to=${newer.size}`, signerA);
        expect(r.status).toBe(200);
        const proof = r.json().proof.map((h: string) => Buffer.from(h, 'base64'));
        expect(refVerifyConsistency(older.size, newer.size, older.root, newer.root, proof)).toBe(true);
      }
      const inOld = await logGet(svc.app, `/log/proof/inclusion?index=0&tree_size=${older.size}`, signerA);
      expect(inOld.status).toBe(200);
      expect(inOld.json().checkpoint).toBe(all[i]?.note);
    }
  });

  it('answers bad or unknown requests with ErrorResponses', async () => {
    const size = verifyCheckpoint((await logGet(svc.app, '/log/checkpoint', signerA)).text, vkey).size;
    const cases: Array<[string, number, string]> = [
      [`/log/proof/inclusion?index=${size}`, 404, 'not_found'],
      [`/log/proof/inclusion?index=0&tree_size=${size + 1000}`, 404, 'not_found'],
      ['/log/proof/inclusion?index=-1', 400, 'invalid_request'],
      ['/log/proof/inclusion?index=abc', 400, 'invalid_request'],
      ['/log/proof/inclusion', 400, 'invalid_request'],
      ['/log/proof/inclusion?index=0&extra=1', 400, 'invalid_request'],
      ['/log/proof/consistency?from=3&to=2', 400, 'invalid_request'],
      [`/log/proof/consistency?from=1&to=${size + 1000}`, 404, 'not_found'],
    ];
    for (const [url, status, error] of cases) {
      const r = await logGet(svc.app, url, signerA);
      expect({ url, status: r.status, error: r.json().error }).toEqual({ url, status, error });
      expect(typeof r.json().reason).toBe('string');
    }
    // Not public by default: a key is needed; a signer may not publish on demand.
    expect((await logGet(svc.app, '/log/checkpoint')).status).toBe(401);
    expect((await publishCheckpoint(svc.app, signerA)).status).toBe(403);
  });

  it('serves tlog-tiles tiles: the leaf hashes of the latest checkpoint give its root', async () => {
    const cp = verifyCheckpoint((await logGet(svc.app, '/log/checkpoint', signerA)).text, vkey);
    expect(cp.size).toBeLessThan(256);
    const res = await svc.app.inject({
      method: 'GET',
      url: `/log/tile/0/000.p/${cp.size}`,
      headers: { authorization: `Bearer ${signerA}` },
    });
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toBe('application/octet-stream');
    const raw = res.rawPayload;
    expect(raw.length).toBe(cp.size * 32);
    const leaves = Array.from({ length: cp.size }, (_, i) => raw.subarray(i * 32, (i + 1) * 32));
    expect(refRoot(leaves).equals(cp.root)).toBe(true);
    expect((await logGet(svc.app, '/log/tile/0/000', signerA)).status).toBe(404);
    expect((await logGet(svc.app, '/log/tile/0/1', signerA)).status).toBe(400);
    expect(parseTilePath('2/x001/x234/067.p/8')).toEqual({ level: 2, index: 1_234_067, width: 8 });
    expect(parseTilePath('0/000.p/256')).toBeUndefined();
  });

  it('keeps its origin: a configured origin that differs from the recorded one stops the start', async () => {
    const other = await buildApp({
      store: svc.store,
      keyStore: svc.keyStores,
      log: {
        checkpointEveryEntries: 10,
        checkpointEverySeconds: 10,
        public: false,
        intervalMs: 0,
        origin: 'other/log',
      },
    });
    await expect(other.ready()).rejects.toThrow(/log.origin is "other\/log" but this log's checkpoints are signed for/);
    await other.close().catch(() => undefined);
  });

  it('is in the OpenAPI document', async () => {
    const doc = (await svc.app.inject({ method: 'GET', url: '/api/openapi.json' })).json();
    for (const path of ['/log/checkpoint', '/log/public-key', '/log/proof/inclusion', '/log/proof/consistency']) {
      expect(doc.paths[path]?.get, path).toBeDefined();
    }
    expect(doc.paths['/log/checkpoint'].post).toBeDefined();
  });
});

describe('a public log', () => {
  let pub: TestService;
  beforeAll(async () => {
    pub = await startTestService({
      log: { checkpointEveryEntries: 1, checkpointEverySeconds: 3600, public: true, intervalMs: 20 },
    });
    await callAction(pub.app, pub.operator, 'create_tenant', { tenant_id: 'pa', key_spec: 'ECC_NIST_P256' });
  });
  afterAll(async () => pub?.close());

  it('serves checkpoints and proofs without a key, entries without their bytes; publishes by itself', async () => {
    const key = parseVkey((await logGet(pub.app, '/log/public-key')).text);
    // checkpointEveryEntries: 1 — the integrator publishes without being asked.
    let r = await logGet(pub.app, '/log/checkpoint');
    for (let i = 0; i < 100 && r.status !== 200; i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      r = await logGet(pub.app, '/log/checkpoint');
    }
    expect(r.status).toBe(200);
    const cp = verifyCheckpoint(r.text, key);
    expect(cp.size).toBeGreaterThanOrEqual(1);
    const proof = (await logGet(pub.app, '/log/proof/inclusion?index=0')).json();
    expect(proof.entry).toBeUndefined();
    expect(proof.leaf_hash).toBeTypeOf('string');
    // A wrong key is still refused.
    expect((await logGet(pub.app, '/log/checkpoint', 'sb_wrong')).status).toBe(401);
  });
});
