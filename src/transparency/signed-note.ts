// C2SP signed notes (c2sp.org/signed-note) with signature type 0x02, ECDSA as transparency-dev/witness implements
// it: the key ID is SHA-256(DER SubjectPublicKeyInfo)[:4], the signature is DER ECDSA over SHA-256(note text), and
// the verifier key is `<name>+<hex key ID>+<base64(0x02 ‖ DER SPKI)>`. Why ECDSA P-256: docs/transparency.md.
import { createHash, createPublicKey, type KeyObject, verify } from 'node:crypto';

export const SIG_TYPE_ECDSA = 0x02;
const EM_DASH = '\u2014';

/** Key names: non-empty, no Unicode spaces, no '+' (signed-note §Format). */
export function isValidKeyName(name: string): boolean {
  const control = [...name].some((c) => (c.codePointAt(0) as number) < 0x20);
  return name.length > 0 && !control && !/[\s+]/u.test(name);
}

export interface NoteKey {
  name: string;
  /** DER SubjectPublicKeyInfo of a P-256 key. */
  spki: Buffer;
  /** SHA-256(spki)[:4], big-endian. */
  keyId: Buffer;
  publicKey: KeyObject;
}

export function noteKey(name: string, publicKeyPem: string): NoteKey {
  if (!isValidKeyName(name)) throw new Error(`"${name}" cannot be a signed-note key name (no spaces, no '+')`);
  const publicKey = createPublicKey(publicKeyPem);
  if (publicKey.asymmetricKeyType !== 'ec' || publicKey.asymmetricKeyDetails?.namedCurve !== 'prime256v1') {
    throw new Error('the log key must be an EC P-256 key');
  }
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  return { name, spki, keyId: createHash('sha256').update(spki).digest().subarray(0, 4), publicKey };
}

/** The verifier key line (vkey) a client configures. */
export function verifierKey(key: NoteKey): string {
  return `${key.name}+${key.keyId.toString('hex')}+${Buffer.concat([Buffer.from([SIG_TYPE_ECDSA]), key.spki]).toString('base64')}`;
}

/** The digest the key store signs for a note: SHA-256 of the text, as witness's ECDSA verifier hashes it. */
export function noteDigest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/** The signed note: the text, a blank line, one signature line. `signature` is the key store's DER ECDSA. */
export function formatSignedNote(text: string, key: NoteKey, signature: Buffer): string {
  if (!text.endsWith('\n')) throw new Error('a note text ends in a newline');
  const sig = Buffer.concat([key.keyId, signature]).toString('base64');
  return `${text}\n${EM_DASH} ${key.name} ${sig}\n`;
}

export interface ParsedNote {
  text: string;
  signatures: Array<{ name: string; keyId: Buffer; signature: Buffer }>;
}

/** Splits a signed note at its last blank line (signed-note §Format); undefined when it is not one. */
export function parseSignedNote(note: string): ParsedNote | undefined {
  const cut = note.lastIndexOf('\n\n');
  if (cut < 0 || !note.endsWith('\n')) return undefined;
  const text = note.slice(0, cut + 1);
  const lines = note.slice(cut + 2, -1).split('\n');
  const signatures: ParsedNote['signatures'] = [];
  for (const line of lines) {
    const m = /^\u2014 (\S+) ([A-Za-z0-9+/]+=*)$/u.exec(line);
    if (!m) return undefined;
    const raw = Buffer.from(m[2] as string, 'base64');
    if (raw.length < 5) return undefined;
    signatures.push({ name: m[1] as string, keyId: raw.subarray(0, 4), signature: raw.subarray(4) });
  }
  return signatures.length > 0 ? { text, signatures } : undefined;
}

/** The note's text if a signature by `key` verifies, else undefined (signatures of other keys are ignored). */
export function verifySignedNote(note: string, key: NoteKey): string | undefined {
  const parsed = parseSignedNote(note);
  if (!parsed) return undefined;
  const mine = parsed.signatures.filter((s) => s.name === key.name && s.keyId.equals(key.keyId));
  if (mine.length === 0) return undefined;
  const ok = mine.every((s) => verify('sha256', Buffer.from(parsed.text, 'utf8'), key.publicKey, s.signature));
  return ok ? parsed.text : undefined;
}
