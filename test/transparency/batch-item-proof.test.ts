// A batch pays once (issue 46; docs/transparency.md, "A batch's items"), against the real service (SoftHSM, the log
// at its defaults; PostgreSQL with SIGNBRIDGE_TEST_STORE=postgres): a sign_batch of N writes one audit entry (one log
// leaf) and N batch_items rows, no signature record or lookup row; each signature's served proof is checked by a
// verifier written here from the doc alone (node:crypto for the item leaf, the independent RFC 9162 verifier of
// test/helpers for the paths, the checkpoint against the published vkey) and by the CLI's verifier, whole and as a
// tlog-proof file; a tampered item (in the proof, or in the store) fails; an entry of a batch signed before issue 46
// (one entry per signature) still proves as any single entry.
import { createHash, verify } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOG_DEFAULTS } from '../../src/transparency/log-service.js';
import { checkEntryFor } from '../../src/transparency/verify/artifact-match.js';
import {
  type InclusionBundleJson,
  InclusionError,
  parseInclusionBundle,
  verifyInclusionBundle,
} from '../../src/transparency/verify/inclusion-bundle.js';
import { parseVerifierKey } from '../../src/transparency/verify/note.js';
import {
  bundleToTlogProof,
  decodeTlogProof,
  encodeTlogProof,
  tlogProofToBundle,
} from '../../src/transparency/verify/tlog-proof.js';
import { logGet, parseVkey, type Vkey, verifyCheckpoint } from '../helpers/log-client.js';
import { refLeaf, refVerifyInclusion } from '../helpers/rfc9162-verify.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const TENANT = 'batches';
let svc: TestService;
let signer: string;
let vkeyLine: string;
let vkey: Vkey;
let publicKeyPem: string;

const sha256 = (...parts: Uint8Array[]) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
};
const digestOf = (m: string) => sha256(Buffer.from(m)).toString('base64');

interface ServedProof extends InclusionBundleJson {
  batch_item?: { index: number; position: number; digest: string; signature_sha256: string; proof: string[] };
}

async function count(table: string): Promise<number> {
  const rows = await svc.run(sql<{ n: number | string }>`SELECT count(*) AS n FROM ${sql.table(table)}`);
  return Number(rows[0]?.n);
}

async function signBatch(messages: string[]) {
  const res = await callAction(svc.app, signer, 'sign_batch', {
    tenant_id: TENANT,
    algorithm: 'ECDSA_SHA_256',
    hashes: messages.map(digestOf),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.results as Array<{ signature: string; log_index: number; signature_id: string }>;
}

/** Publishes a checkpoint now (the operator's on-demand checkpoint), so the latest entries are provable. */
async function checkpointNow(): Promise<void> {
  const res = await svc.app.inject({
    method: 'POST',
    url: '/log/checkpoint',
    headers: { authorization: `Bearer ${svc.operator}` },
  });
  expect(res.statusCode, res.body).toBe(200);
}

async function served(query: string): Promise<{ status: number; body: ServedProof }> {
  const got = await logGet(svc.app, `/log/proof/inclusion?${query}`, signer);
  return { status: got.status, body: JSON.parse(got.text) as ServedProof };
}

/**
 * The verifier of docs/transparency.md ("A batch's items" and the inclusion endpoint), written from the doc: true
 * when `proof` shows that `signature` (of `digest`) is an item of a batch entry in the log.
 */
function docVerifier(proof: ServedProof, signature: Buffer, digest: Buffer): boolean {
  const checkpoint = verifyCheckpoint(proof.checkpoint, vkey);
  if (checkpoint.size !== proof.tree_size || proof.entry === undefined || proof.batch_item === undefined) return false;
  const entryBytes = Buffer.from(proof.entry, 'base64');
  const leaf = refLeaf(entryBytes);
  if (!leaf.equals(Buffer.from(proof.leaf_hash, 'base64'))) return false;
  const path = proof.proof.map((h) => Buffer.from(h, 'base64'));
  if (!refVerifyInclusion(leaf, proof.index, proof.tree_size, path, checkpoint.root)) return false;
  const entry = JSON.parse(entryBytes.toString('utf8'));
  if (entry.outcome !== 'signed' || entry.seq !== proof.index + 1) return false;
  const { root, signed } = entry.details.batch as { root: string; signed: number };
  const item = proof.batch_item;
  const signatureSha256 = sha256(signature);
  if (signatureSha256.toString('hex') !== item.signature_sha256) return false;
  if (!digest.equals(Buffer.from(item.digest, 'base64'))) return false;
  // item leaf bytes = u32_be(index) ‖ u8(len(digest)) ‖ digest ‖ SHA-256(signature); leaf hash = SHA-256(0x00 ‖ …)
  const head = Buffer.alloc(5);
  head.writeUInt32BE(item.index, 0);
  head.writeUInt8(digest.length, 4);
  const itemLeaf = refLeaf(Buffer.concat([head, digest, signatureSha256]));
  const itemPath = item.proof.map((h) => Buffer.from(h, 'base64'));
  return refVerifyInclusion(itemLeaf, item.position, signed, itemPath, Buffer.from(root, 'base64'));
}

beforeAll(async () => {
  svc = await startTestService({ log: { ...LOG_DEFAULTS } });
  const created = await callAction(svc.app, svc.operator, 'create_tenant', {
    tenant_id: TENANT,
    key_spec: 'ECC_NIST_P256',
  });
  expect(created.status).toBe(201);
  signer = await svc.apiKey('signer', TENANT);
  publicKeyPem = (await callAction(svc.app, signer, 'get_public_key', { tenant_id: TENANT })).body
    .public_key_pem as string;
  vkeyLine = (await logGet(svc.app, '/log/public-key', signer)).text.trim();
  vkey = parseVkey(vkeyLine);
}, 60_000);
afterAll(async () => svc?.close());

describe('a batch pays once', () => {
  it('a batch of N is one audit entry and one log leaf, with N items and no record or lookup row per signature', async () => {
    const before = {
      entries: await count('audit_log'),
      items: await count('batch_items'),
      signatures: await count('signatures'),
      lookups: await count('signature_lookups'),
    };
    const messages = Array.from({ length: 13 }, (_, i) => `one entry ${i}`);
    const results = await signBatch(messages);
    expect(await count('audit_log')).toBe(before.entries + 1);
    expect(await count('batch_items')).toBe(before.items + 13);
    expect(await count('signatures')).toBe(before.signatures);
    expect(await count('signature_lookups')).toBe(before.lookups);
    expect(new Set(results.map((r) => r.log_index))).toEqual(new Set([before.entries]));
    // One leaf: the tree grows by one entry for the batch.
    await checkpointNow();
    const checkpoint = verifyCheckpoint((await logGet(svc.app, '/log/checkpoint', signer)).text, vkey);
    expect(checkpoint.size).toBe(before.entries + 1);
  });

  it('each signature proves by its served proof, checked by a verifier written from docs/transparency.md', async () => {
    const messages = Array.from({ length: 11 }, (_, i) => `provable ${i}`);
    const results = await signBatch(messages);
    await checkpointNow();
    const key = parseVerifierKey(vkeyLine);
    for (const [i, r] of results.entries()) {
      const signature = Buffer.from(r.signature, 'base64');
      expect(verify('sha256', Buffer.from(messages[i] as string), publicKeyPem, signature)).toBe(true);
      const digest = Buffer.from(digestOf(messages[i] as string), 'base64');
      // By the signature's SHA-256, and by the entry's index and the item (the number after the dot of its id).
      const bySignature = await served(`signature_sha256=${sha256(signature).toString('hex')}`);
      expect(bySignature.status, JSON.stringify(bySignature.body)).toBe(200);
      expect(bySignature.body.index).toBe(r.log_index);
      expect(bySignature.body.batch_item?.index).toBe(i);
      expect(r.signature_id.endsWith(`.${i}`)).toBe(true);
      const byItem = await served(`index=${r.log_index}&item=${i}`);
      expect(byItem.body).toEqual(bySignature.body);
      expect(docVerifier(bySignature.body, signature, digest)).toBe(true);
      // The CLI's verifier agrees, on the answer and on its tlog-proof file.
      const verified = verifyInclusionBundle(parseInclusionBundle(bySignature.body), key);
      expect(verified.item?.index).toBe(i);
      checkEntryFor(
        verified.entry,
        { tenant: TENANT, signatureSha256s: [sha256(signature).toString('hex')] },
        verified.item,
      );
      checkEntryFor(verified.entry, { tenant: TENANT, digest: digest.toString('base64') }, verified.item);
      const file = encodeTlogProof(bundleToTlogProof(bySignature.body));
      const kept = parseInclusionBundle(tlogProofToBundle(decodeTlogProof(file)));
      expect(verifyInclusionBundle(kept, key).item).toEqual(verified.item);
    }
    // An item the entry does not hold is not found.
    expect((await served(`index=${results[0]?.log_index}&item=11`)).status).toBe(404);
  });

  it('a tampered item fails: in the proof (digest, signature hash, path) and in the store', async () => {
    const messages = ['tamper 0', 'tamper 1', 'tamper 2', 'tamper 3', 'tamper 4'];
    const results = await signBatch(messages);
    await checkpointNow();
    const key = parseVerifierKey(vkeyLine);
    const signature = Buffer.from(results[2]?.signature as string, 'base64');
    const digest = Buffer.from(digestOf('tamper 2'), 'base64');
    const { body } = await served(`index=${results[2]?.log_index}&item=2`);
    const item = body.batch_item as NonNullable<ServedProof['batch_item']>;
    const otherDigest = digestOf('tamper 3');
    const edits: ServedProof[] = [
      { ...body, batch_item: { ...item, digest: otherDigest } },
      { ...body, batch_item: { ...item, signature_sha256: sha256(Buffer.from('forged')).toString('hex') } },
      { ...body, batch_item: { ...item, index: 3 } },
      { ...body, batch_item: { ...item, proof: [...item.proof].reverse() } },
    ];
    for (const edited of edits) {
      expect(() => verifyInclusionBundle(parseInclusionBundle(edited), key)).toThrow(InclusionError);
      expect(docVerifier(edited, signature, Buffer.from(edited.batch_item?.digest as string, 'base64'))).toBe(false);
    }
    // A signature the item does not name fails the artifact check, though the proof holds.
    const verified = verifyInclusionBundle(parseInclusionBundle(body), key);
    expect(() =>
      checkEntryFor(
        verified.entry,
        { signatureSha256s: [sha256(Buffer.from('other')).toString('hex')] },
        verified.item,
      ),
    ).toThrow(/names signature/);
    expect(docVerifier(body, signature, digest)).toBe(true);
    // The store's item rewritten: the path the service computes no longer leads to the logged root.
    const seq = (results[2]?.log_index as number) + 1;
    await svc.run(
      sql`UPDATE batch_items SET digest = ${Buffer.from(otherDigest, 'base64')} WHERE batch_seq = ${seq} AND item_index = 2`,
    );
    const after = await served(`index=${seq - 1}&item=2`);
    expect(() => verifyInclusionBundle(parseInclusionBundle(after.body), key)).toThrow(/does not lead by its path/);
    expect(docVerifier(after.body, signature, Buffer.from(otherDigest, 'base64'))).toBe(false);
  });

  it('an entry of a batch signed before issue 46 (one entry per signature) proves as before', async () => {
    const signature = Buffer.from('an old batch signature');
    const hash = digestOf('old batch item');
    await svc.store.audit.append({
      at: new Date().toISOString(),
      tenantId: TENANT,
      actor: 'old-signer',
      action: 'sign_batch',
      outcome: 'signed',
      details: {
        hash,
        key_id: 'old-key',
        algorithm: 'ECDSA_SHA_256',
        batch: { id: 'old-batch', index: 1, size: 2 },
        key_store: 'pkcs11',
        signature_id: 'old-signature',
        signature_sha256: sha256(signature).toString('hex'),
      },
    });
    // Its signature record, as every signature had one then (the lookup by digest leaves out withdrawn ones).
    const at = new Date().toISOString();
    await svc.run(sql`INSERT INTO signatures (id, tenant_id, key_id, algorithm, hash, caller, created_at)
      VALUES ('old-signature', ${TENANT}, 'old-key', 'ECDSA_SHA_256', ${hash}, 'old-signer', ${at})`);
    const logged = await svc.store.audit.read(0, 100_000);
    const seq = logged.find((e) => e.details.signature_id === 'old-signature')?.seq as number;
    await checkpointNow();
    const key = parseVerifierKey(vkeyLine);
    for (const query of [`index=${Number(seq) - 1}`, `digest=${encodeURIComponent(hash)}`]) {
      const { status, body } = await served(query);
      expect(status, JSON.stringify(body)).toBe(200);
      expect(body.batch_item).toBeUndefined();
      const verified = verifyInclusionBundle(parseInclusionBundle(body), key);
      expect(verified.index).toBe(Number(seq) - 1);
      checkEntryFor(verified.entry, { tenant: TENANT, digest: hash });
      checkEntryFor(verified.entry, { tenant: TENANT, signatureSha256s: [sha256(signature).toString('hex')] });
    }
    // item= on an entry that is no batch's: 404.
    expect((await served(`index=${Number(seq) - 1}&item=0`)).status).toBe(404);
  });
});
