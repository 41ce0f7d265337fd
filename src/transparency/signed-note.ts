// The log key's side of C2SP signed notes (c2sp.org/signed-note), signature type 0x02, ECDSA as transparency-dev/
// witness implements it: the key ID is SHA-256(DER SubjectPublicKeyInfo)[:4], the signature is DER ECDSA over
// SHA-256(note text), and the verifier key is `<name>+<hex key ID>+<base64(0x02 ‖ DER SPKI)>`. Reading a note and
// its key is verify/note.ts's (the client's code), which the log uses as it is. Why ECDSA P-256: docs/transparency.md.
import { createHash, createPublicKey, type KeyObject } from 'node:crypto';
import { parseVerifierKey, SIG_TYPE_ECDSA, type VerifierKey, validKeyName } from './verify/note.js';

const EM_DASH = '\u2014';

export interface NoteKey {
  name: string;
  /** DER SubjectPublicKeyInfo of a P-256 key. */
  spki: Buffer;
  /** SHA-256(spki)[:4], big-endian. */
  keyId: Buffer;
  publicKey: KeyObject;
  /** The key as a client reads it from its verifier key line: what the log checks its own notes with. */
  verifier: VerifierKey;
}

export function noteKey(name: string, publicKeyPem: string): NoteKey {
  if (!validKeyName(name)) throw new Error(`"${name}" cannot be a signed-note key name (no spaces, no '+')`);
  const publicKey = createPublicKey(publicKeyPem);
  if (publicKey.asymmetricKeyType !== 'ec' || publicKey.asymmetricKeyDetails?.namedCurve !== 'prime256v1') {
    throw new Error('the log key must be an EC P-256 key');
  }
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  const keyId = createHash('sha256').update(spki).digest().subarray(0, 4);
  return { name, spki, keyId, publicKey, verifier: parseVerifierKey(vkeyLine(name, keyId, spki)) };
}

/** The verifier key line (vkey) a client configures. */
export function verifierKey(key: NoteKey): string {
  return key.verifier.vkey;
}

function vkeyLine(name: string, keyId: Buffer, spki: Buffer): string {
  return `${name}+${keyId.toString('hex')}+${Buffer.concat([Buffer.from([SIG_TYPE_ECDSA]), spki]).toString('base64')}`;
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
