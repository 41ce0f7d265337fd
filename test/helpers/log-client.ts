// What a verifier outside the service does with /log answers, written with node:crypto only (no src/transparency):
// parse the vkey, verify a checkpoint note's ECDSA signature (signed-note type 0x02), parse the checkpoint body.
import { createHash, createPublicKey, generateKeyPairSync, type KeyObject, verify } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { canonicalJson } from '../../src/store/audit/audit-chain.js';
import type { AuditEntry } from '../../src/store/store.js';
import { refLeaf } from './rfc9162-verify.js';

export interface Vkey {
  name: string;
  keyId: Buffer;
  key: KeyObject;
}

export function parseVkey(line: string): Vkey {
  // Name and key ID first; the base64 key may itself contain '+'.
  const [name, hexId, ...rest] = line.trim().split('+');
  const b64 = rest.join('+');
  if (!name || !hexId || !b64) throw new Error(`not a vkey: ${line}`);
  const raw = Buffer.from(b64, 'base64');
  if (raw[0] !== 0x02) throw new Error('not an ECDSA (0x02) vkey');
  const spki = raw.subarray(1);
  const keyId = createHash('sha256').update(spki).digest().subarray(0, 4);
  if (keyId.toString('hex') !== hexId) throw new Error('key ID is not SHA-256(SPKI)[:4]');
  return { name, keyId, key: createPublicKey({ key: spki, format: 'der', type: 'spki' }) };
}

export interface Checkpoint {
  origin: string;
  size: number;
  root: Buffer;
  text: string;
}

/** Verifies the note's signature line by `vkey` and returns the checkpoint; throws otherwise. */
export function verifyCheckpoint(note: string, vkey: Vkey): Checkpoint {
  const cut = note.lastIndexOf('\n\n');
  const text = note.slice(0, cut + 1);
  const sigLines = note
    .slice(cut + 2)
    .trimEnd()
    .split('\n');
  const mine = sigLines
    .map((l) => /^\u2014 (\S+) (\S+)$/u.exec(l))
    .filter((m): m is RegExpExecArray => m !== null && m[1] === vkey.name)
    .map((m) => Buffer.from(m[2] as string, 'base64'))
    .filter((raw) => raw.subarray(0, 4).equals(vkey.keyId));
  if (mine.length === 0) throw new Error('no signature by the log key');
  for (const raw of mine) {
    if (!verify('sha256', Buffer.from(text), vkey.key, raw.subarray(4))) throw new Error('bad checkpoint signature');
  }
  const [origin, size, root, end] = text.split('\n');
  if (origin !== vkey.name || end !== '' || !size || !root) throw new Error(`bad checkpoint body: ${text}`);
  return { origin, size: Number(size), root: Buffer.from(root, 'base64'), text };
}

export async function logGet(app: FastifyInstance, url: string, token?: string) {
  const res = await app.inject({ method: 'GET', url, headers: token ? { authorization: `Bearer ${token}` } : {} });
  return {
    status: res.statusCode,
    type: String(res.headers['content-type']),
    text: res.body,
    json: () => res.json(),
  };
}

export async function publishCheckpoint(app: FastifyInstance, operator: string) {
  const res = await app.inject({
    method: 'POST',
    url: '/log/checkpoint',
    headers: { authorization: `Bearer ${operator}` },
  });
  return { status: res.statusCode, text: res.body };
}

/** The leaves as the audit log defines them (docs/transparency.md), from the rows, not from the service's tree. */
export function leavesOfEntries(entries: readonly AuditEntry[]): Buffer[] {
  return entries.map((e) =>
    refLeaf(
      Buffer.from(
        canonicalJson({
          seq: e.seq,
          at: e.at,
          tenant_id: e.tenantId,
          actor: e.actor,
          action: e.action,
          outcome: e.outcome,
          details: e.details,
        }),
      ),
    ),
  );
}

/**
 * A signed-note vkey of a fresh Ed25519 key under `name` (type 0x01, key ID = SHA-256(name || "\n" || 0x01 || key)
 * [:4], as C2SP signed-note defines it): the log's name with a key that never signed anything.
 */
export function unrelatedEd25519Vkey(name: string): string {
  const raw = Buffer.from(generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x as string, 'base64url');
  const typed = Buffer.concat([Buffer.from([0x01]), raw]);
  const id = createHash('sha256')
    .update(Buffer.concat([Buffer.from(`${name}\n`), typed]))
    .digest()
    .subarray(0, 4);
  return `${name}+${id.toString('hex')}+${typed.toString('base64')}`;
}
