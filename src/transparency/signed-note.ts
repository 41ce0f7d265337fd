// The log keys' side of C2SP signed notes (c2sp.org/signed-note). Signature type 0x02, ECDSA as transparency-dev/
// witness implements it: the key ID is SHA-256(DER SubjectPublicKeyInfo)[:4], the signature is DER ECDSA over
// SHA-256(note text), and the verifier key is `<name>+<hex key ID>+<base64(0x02 ‖ DER SPKI)>`. Signature type 0x01,
// Ed25519 as the spec defines it, what the standard verifiers (Go's sumdb/note) and the witness network accept: the
// key ID is SHA-256(name ‖ 0x0A ‖ 0x01 ‖ 32-byte key)[:4], the signature Ed25519 over the note text, and the verifier
// key `<name>+<hex key ID>+<base64(0x01 ‖ key)>`. Reading a note and its key is verify/note.ts's (the client's
// code), which the log uses as it is. Why both: docs/transparency.md.
import { createHash, createPublicKey, type KeyObject } from 'node:crypto';
import { parseVerifierKey, SIG_TYPE_ECDSA, SIG_TYPE_ED25519, type VerifierKey, validKeyName } from './verify/note.js';

const EM_DASH = '\u2014';

/** The lines the log puts on a checkpoint at most: ECDSA, then Ed25519 (the witnesses' cosignatures follow). */
export const LOG_SIGNATURE_LINES = 2;

export interface NoteKey {
  name: string;
  /** DER SubjectPublicKeyInfo of a P-256 or an Ed25519 key. */
  spki: Buffer;
  /** ECDSA: SHA-256(spki)[:4]; Ed25519: SHA-256(name ‖ 0x0A ‖ 0x01 ‖ key)[:4]; big-endian. */
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
  const typed = Buffer.concat([Buffer.from([SIG_TYPE_ECDSA]), spki]);
  return { name, spki, keyId, publicKey, verifier: parseVerifierKey(vkeyLine(name, keyId, typed)) };
}

/** The verifier key line (vkey) a client configures. */
export function verifierKey(key: NoteKey): string {
  return key.verifier.vkey;
}

/** The log's Ed25519 key (signature type 0x01) under `name`, from its SubjectPublicKeyInfo PEM. */
export function ed25519NoteKey(name: string, publicKeyPem: string): NoteKey {
  if (!validKeyName(name)) throw new Error(`"${name}" cannot be a signed-note key name (no spaces, no '+')`);
  const publicKey = createPublicKey(publicKeyPem);
  if (publicKey.asymmetricKeyType !== 'ed25519') throw new Error('the log key must be an Ed25519 key');
  const spki = publicKey.export({ type: 'spki', format: 'der' });
  const raw = Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url');
  const typed = Buffer.concat([Buffer.from([SIG_TYPE_ED25519]), raw]);
  const keyId = createHash('sha256')
    .update(Buffer.concat([Buffer.from(`${name}\n`, 'utf8'), typed]))
    .digest()
    .subarray(0, 4);
  return { name, spki, keyId, publicKey, verifier: parseVerifierKey(vkeyLine(name, keyId, typed)) };
}

function vkeyLine(name: string, keyId: Buffer, typedKey: Buffer): string {
  return `${name}+${keyId.toString('hex')}+${typedKey.toString('base64')}`;
}

/** The digest the key store signs for a note: SHA-256 of the text, as witness's ECDSA verifier hashes it. */
export function noteDigest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/** One key's signature of a note: ECDSA's DER from the key store, or Ed25519's 64 bytes. */
export interface NoteSigning {
  key: NoteKey;
  signature: Buffer;
}

/** The signed note with one signature line. `signature` is the key store's DER ECDSA. */
export function formatSignedNote(text: string, key: NoteKey, signature: Buffer): string {
  return formatMultiSignedNote(text, [{ key, signature }]);
}

/**
 * The signed note: the text, a blank line, one signature line per signing in the order given (the log puts its
 * ECDSA line first, as every checkpoint before the Ed25519 key had it; verifiers pick their key's line by name and ID).
 */
export function formatMultiSignedNote(text: string, signings: readonly NoteSigning[]): string {
  if (!text.endsWith('\n')) throw new Error('a note text ends in a newline');
  if (signings.length === 0) throw new Error('a signed note has at least one signature');
  const lines = signings.map(({ key, signature }) => {
    const sig = Buffer.concat([key.keyId, signature]).toString('base64');
    return `${EM_DASH} ${key.name} ${sig}\n`;
  });
  return `${text}\n${lines.join('')}`;
}
