// The log (src/transparency/) writes notes, checkpoints and tiles; reading and hashing them is the client's code
// (src/transparency/verify/, which imports no service code), and the log uses that code as it is. Before, the log
// kept its own leafHash, nodeHash, verifyInclusion, verifyConsistency, parseSignedNote, verifySignedNote,
// parseCheckpoint and key-name check beside verify/'s, and the two could drift apart.
import { generateKeyPairSync, sign } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatCheckpoint } from '../../src/transparency/checkpoint.js';
import { formatSignedNote, noteDigest, noteKey, verifierKey } from '../../src/transparency/signed-note.js';
import { openCheckpoint } from '../../src/transparency/verify/checkpoint.js';
import { parseVerifierKey } from '../../src/transparency/verify/note.js';

const SERVICE_DIR = join(import.meta.dirname, '../../src/transparency');
const VERIFY_DIR = join(SERVICE_DIR, 'verify');

/** The names a file declares at top level (functions, constants, classes). */
function declared(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/^(?:export )?(?:async )?(?:function|const|class) ([A-Za-z_$][\w$]*)/gm)].map(
    (m) => m[1] as string,
  );
}

describe('the log and its client share one copy of the note and Merkle code', () => {
  it('no file of the log declares a name that verify/ declares', () => {
    const shared = new Set(readdirSync(VERIFY_DIR).flatMap((f) => declared(join(VERIFY_DIR, f))));
    const copies = readdirSync(SERVICE_DIR, { withFileTypes: true })
      .filter((e) => e.isFile() && e.name.endsWith('.ts'))
      .flatMap((e) => declared(join(SERVICE_DIR, e.name)).map((name) => `${e.name}: ${name}`))
      .filter((entry) => shared.has(entry.split(': ')[1] as string));
    expect(copies).toEqual([]);
  });

  it("the log's checkpoint, signed as the log signs it, opens with the client's reader under the log's vkey", () => {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const key = noteKey('example.com/log', publicKey.export({ type: 'spki', format: 'pem' }).toString());
    expect(parseVerifierKey(verifierKey(key))).toMatchObject({ name: key.name, keyId: key.keyId.readUInt32BE(0) });
    const root = Buffer.alloc(32, 7);
    const text = formatCheckpoint({ origin: key.name, size: 12, root });
    // The key store signs the digest (ECDSA_SHA_256 over noteDigest): node signs the text with SHA-256, the same.
    expect(noteDigest(text).length).toBe(32);
    const note = formatSignedNote(text, key, sign('sha256', Buffer.from(text), privateKey));
    const opened = openCheckpoint(note, parseVerifierKey(verifierKey(key)));
    expect(opened).toMatchObject({ origin: key.name, size: 12, extensions: [] });
    expect(opened.root.equals(root)).toBe(true);
  });
});
