// C2SP signed notes (c2sp.org/signed-note) and verifier keys ("vkeys"), read strictly: a note is only ever trusted
// through a signature of a key the user gave, and a parser that accepts more than the format lets two readers see
// two different texts. Signature types: 0x02 ECDSA as transparency-dev/witness defines it (the key ID is the
// SHA-256 of the DER SPKI; the signature is DER ECDSA over SHA-256 of the text), which signbridge's log uses, and
// 0x01 Ed25519 (the signed-note key ID), so that a log key moved to Ed25519 still verifies.
import { createHash, createPublicKey, type KeyObject, verify } from 'node:crypto';

export const SIG_TYPE_ED25519 = 0x01;
export const SIG_TYPE_ECDSA = 0x02;

/** The spec asks verifiers to accept at least 16; more is refused rather than checked one by one. */
export const MAX_SIGNATURES = 16;
/** 16 post-quantum signatures (~5 KB each) and a text fit; a checkpoint is ~100 bytes. */
export const MAX_NOTE_BYTES = 128 * 1024;

export class NoteError extends Error {}

export interface NoteSignature {
  name: string;
  keyId: number;
  /** The signature without its 4-byte key ID. */
  signature: Buffer;
}

export interface SignedNote {
  /** The signed text, with its final newline. */
  text: string;
  signatures: NoteSignature[];
}

export interface VerifierKey {
  name: string;
  keyId: number;
  type: typeof SIG_TYPE_ED25519 | typeof SIG_TYPE_ECDSA;
  publicKey: KeyObject;
  /** The vkey line it was read from. */
  vkey: string;
}

const EM_DASH_PREFIX = '\u2014 ';

/**
 * Non-empty, no Unicode space and no plus (signed-note "Key names"), and no control character: a note holding one
 * is refused (parseSignedNote), so no note signed under such a name could ever be read. The log's origin is
 * checked with this too.
 */
export function validKeyName(name: string): boolean {
  const control = [...name].some((c) => (c.codePointAt(0) as number) < 0x20);
  return (
    name.length > 0 && !control && !/[\s+\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]/u.test(name)
  );
}

/** Standard base64 with padding, and nothing Buffer.from would silently skip. */
export function strictBase64(value: string): Buffer | undefined {
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(value)) return undefined;
  const bytes = Buffer.from(value, 'base64');
  // Non-zero bits in the padding's place decode the same as zeros: refuse them, one text per value.
  return bytes.toString('base64') === value ? bytes : undefined;
}

export function parseSignedNote(input: Uint8Array | string): SignedNote {
  const bytes = typeof input === 'string' ? Buffer.from(input, 'utf8') : Buffer.from(input);
  if (bytes.length > MAX_NOTE_BYTES) throw new NoteError(`note is ${bytes.length} bytes, more than ${MAX_NOTE_BYTES}`);
  // In UTF-8 these bytes only ever stand for the control characters themselves.
  if (bytes.some((b) => b < 0x20 && b !== 0x0a)) throw new NoteError('note contains a control character');
  let message: string;
  try {
    // ignoreBOM keeps a leading U+FEFF in the text, where it is a character like any other, not a byte-order mark.
    message = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new NoteError('note is not valid UTF-8');
  }
  const split = message.lastIndexOf('\n\n');
  if (split < 0) throw new NoteError('note has no blank line before its signatures');
  const text = message.slice(0, split + 1);
  const block = message.slice(split + 2);
  if (block.length === 0 || !block.endsWith('\n')) throw new NoteError('note does not end with a signature line');
  const lines = block.slice(0, -1).split('\n');
  if (lines.length > MAX_SIGNATURES)
    throw new NoteError(`note has ${lines.length} signatures, more than ${MAX_SIGNATURES}`);
  const signatures = lines.map((line): NoteSignature => {
    if (!line.startsWith(EM_DASH_PREFIX)) throw new NoteError(`not a signature line: ${JSON.stringify(line)}`);
    const rest = line.slice(EM_DASH_PREFIX.length);
    const space = rest.indexOf(' ');
    const name = space < 0 ? '' : rest.slice(0, space);
    const encoded = space < 0 ? '' : rest.slice(space + 1);
    const raw = strictBase64(encoded);
    if (!validKeyName(name) || raw === undefined || raw.length < 5) {
      throw new NoteError(`malformed signature line: ${JSON.stringify(line)}`);
    }
    return { name, keyId: raw.readUInt32BE(0), signature: raw.subarray(4) };
  });
  return { text, signatures };
}

/**
 * The note's text when at least one signature line of `key` (same name and key ID) verifies and none of them
 * fails; lines of other keys are ignored (witness cosignatures, a rotated key), as the spec requires.
 */
export function verifyNote(input: Uint8Array | string, key: VerifierKey): string {
  const note = parseSignedNote(input);
  const mine = note.signatures.filter((s) => s.name === key.name && s.keyId === key.keyId);
  if (mine.length === 0) {
    const names = [...new Set(note.signatures.map((s) => `${s.name}+${hex8(s.keyId)}`))].join(', ');
    throw new NoteError(`note is not signed by ${key.name}+${hex8(key.keyId)} (signed by: ${names})`);
  }
  const text = Buffer.from(note.text, 'utf8');
  for (const s of mine) {
    if (!verifySignature(key, text, s.signature)) {
      throw new NoteError(`signature of ${key.name}+${hex8(key.keyId)} does not verify`);
    }
  }
  return note.text;
}

function verifySignature(key: VerifierKey, text: Buffer, signature: Buffer): boolean {
  try {
    if (key.type === SIG_TYPE_ED25519) return verify(null, text, key.publicKey, signature);
    // OpenSSL refuses a DER signature that does not re-encode to the same bytes: one signature per (r, s).
    return verify('sha256', text, { key: key.publicKey, dsaEncoding: 'der' }, signature);
  } catch {
    return false;
  }
}

export function hex8(id: number): string {
  return id.toString(16).padStart(8, '0');
}

const ECDSA_CURVES = new Set(['prime256v1', 'secp384r1', 'secp521r1']);

/** `<name>+<hex key ID>+<base64(type ‖ public key)>`, the key ID checked against the key. */
export function parseVerifierKey(vkey: string): VerifierKey {
  const line = vkey.trim();
  const first = line.indexOf('+');
  const second = first < 0 ? -1 : line.indexOf('+', first + 1);
  if (second < 0) throw new NoteError('a verifier key is <name>+<key ID>+<base64 key>');
  const name = line.slice(0, first);
  const idHex = line.slice(first + 1, second);
  const keyBytes = strictBase64(line.slice(second + 1));
  if (!validKeyName(name)) throw new NoteError(`verifier key name ${JSON.stringify(name)} is not a key name`);
  if (!/^[0-9a-fA-F]{8}$/.test(idHex))
    throw new NoteError(`verifier key ID ${JSON.stringify(idHex)} is not 8 hex digits`);
  if (keyBytes === undefined || keyBytes.length < 2) throw new NoteError('verifier key is not base64');
  const keyId = Number.parseInt(idHex, 16);
  const type = keyBytes[0];
  const material = keyBytes.subarray(1);
  let publicKey: KeyObject;
  let expectedId: number;
  if (type === SIG_TYPE_ECDSA) {
    try {
      publicKey = createPublicKey({ key: material, format: 'der', type: 'spki' });
    } catch {
      throw new NoteError('verifier key (ECDSA) is not a DER SubjectPublicKeyInfo');
    }
    const curve = publicKey.asymmetricKeyDetails?.namedCurve;
    if (publicKey.asymmetricKeyType !== 'ec' || !curve || !ECDSA_CURVES.has(curve)) {
      throw new NoteError('verifier key (ECDSA) is not a P-256, P-384 or P-521 key');
    }
    // A key that parses but re-encodes differently would have two key IDs.
    if (!publicKey.export({ format: 'der', type: 'spki' }).equals(material)) {
      throw new NoteError('verifier key (ECDSA) is not in canonical DER');
    }
    expectedId = createHash('sha256').update(material).digest().readUInt32BE(0);
  } else if (type === SIG_TYPE_ED25519) {
    if (material.length !== 32) throw new NoteError('verifier key (Ed25519) is not 32 bytes');
    try {
      publicKey = createPublicKey({
        key: { kty: 'OKP', crv: 'Ed25519', x: material.toString('base64url') },
        format: 'jwk',
      });
    } catch {
      throw new NoteError('verifier key (Ed25519) is not a public key');
    }
    expectedId = createHash('sha256')
      .update(Buffer.concat([Buffer.from(`${name}\n`, 'utf8'), Buffer.from([type]), material]))
      .digest()
      .readUInt32BE(0);
  } else {
    throw new NoteError(
      `verifier key has signature type 0x${(type ?? 0).toString(16).padStart(2, '0')}, not 0x01 or 0x02`,
    );
  }
  if (keyId !== expectedId) {
    throw new NoteError(`verifier key ID ${idHex} does not match its key (${hex8(expectedId)})`);
  }
  return { name, keyId, type, publicKey, vkey: line };
}
