// The log signs each checkpoint twice (ECDSA, Ed25519), so the witnesses it may have are two fewer than the
// signature lines a verifier reads (16): a checkpoint cosigned by every configured witness must still be one that
// verifiers accept, and one witness more is a configuration error.
import { generateKeyPairSync, sign } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { formatCheckpoint } from '../../src/transparency/checkpoint.js';
import {
  ed25519NoteKey,
  formatMultiSignedNote,
  LOG_SIGNATURE_LINES,
  noteKey,
} from '../../src/transparency/signed-note.js';
import { openCheckpoint } from '../../src/transparency/verify/checkpoint.js';
import { MAX_SIGNATURES, parseSignedNote } from '../../src/transparency/verify/note.js';
import { MAX_WITNESSES, witnessSettings } from '../../src/transparency/witnesses/witness-settings.js';
import { TestWitness } from '../helpers/tlog-witness.js';

const ORIGIN = 'example.com/log';

function witnesses(n: number): TestWitness[] {
  return Array.from({ length: n }, (_, i) => new TestWitness({ name: `witness.test/w${i}`, kind: 'ed25519' }));
}

describe('how many witnesses a log may have', () => {
  it('a checkpoint with both log lines and a cosignature of every allowed witness is read by verifiers', () => {
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const ed = generateKeyPairSync('ed25519');
    const ecKey = noteKey(ORIGIN, ec.publicKey.export({ type: 'spki', format: 'pem' }).toString());
    const edKey = ed25519NoteKey(ORIGIN, ed.publicKey.export({ type: 'spki', format: 'pem' }).toString());
    const text = formatCheckpoint({ origin: ORIGIN, size: 3, root: Buffer.alloc(32, 1) });
    const signed = formatMultiSignedNote(text, [
      { key: ecKey, signature: sign('sha256', Buffer.from(text), ec.privateKey) },
      { key: edKey, signature: sign(null, Buffer.from(text), ed.privateKey) },
    ]);
    const cosigned = `${signed}${witnesses(MAX_WITNESSES)
      .map((w) => `${w.cosign(text)}\n`)
      .join('')}`;
    expect(parseSignedNote(cosigned).signatures).toHaveLength(LOG_SIGNATURE_LINES + MAX_WITNESSES);
    expect(LOG_SIGNATURE_LINES + MAX_WITNESSES).toBe(MAX_SIGNATURES);
    expect(openCheckpoint(cosigned, edKey.verifier).size).toBe(3);
    expect(openCheckpoint(cosigned, ecKey.verifier).size).toBe(3);
  });

  it('refuses a configuration of one witness more', () => {
    const config = (n: number) => witnesses(n).map((w, i) => ({ url: `https://w${i}.test`, key: w.vkey }));
    expect(witnessSettings(config(MAX_WITNESSES))).toHaveLength(MAX_WITNESSES);
    expect(() => witnessSettings(config(MAX_WITNESSES + 1))).toThrow(/at most 14 .*2 of them the log's own/);
  });
});
