// Cosignature verification (src/transparency/verify/cosignature.ts) against lines made by the test witness
// (test/helpers/tlog-witness.ts, written from C2SP tlog-cosignature without src's code): both kinds verify, and a
// changed byte, another checkpoint, a time in the future and a truncated line are refused.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { parseCheckpointText } from '../../src/transparency/verify/checkpoint.js';
import { CosignatureError, cosignatureTime, parseCosignerKey } from '../../src/transparency/verify/cosignature.js';
import { TestWitness } from '../helpers/tlog-witness.js';

const text = `log.test/x\n42\n${createHash('sha256').update('root').digest('base64')}\n`;
const other = `log.test/x\n43\n${createHash('sha256').update('root 2').digest('base64')}\n`;
const note = (t: string, line: string) => `${t}\n\u2014 log.test/x AAAAAAAA\n${line}\n`;

describe.each(['ed25519', 'ml-dsa-44'] as const)('%s cosignatures', (kind) => {
  const witness = new TestWitness({ name: `witness.test/${kind}`, kind });
  const key = parseCosignerKey(witness.vkey);

  it('verify, with their time', () => {
    const at = new Date('2026-11-28T12:00:00Z');
    expect(cosignatureTime(note(text, witness.cosign(text, at)), parseCheckpointText(text), key)).toBe(
      at.getTime() / 1000,
    );
  });

  it('are absent from a note without a line of the key', () => {
    expect(
      cosignatureTime(note(text, '\u2014 someone.else AAAAAAAAAAAA'), parseCheckpointText(text), key),
    ).toBeUndefined();
  });

  it('refuse another checkpoint, a changed byte, a time in the future and a truncated line', () => {
    const line = witness.cosign(text);
    const checked =
      (l: string, t = text) =>
      () =>
        cosignatureTime(note(t, l), parseCheckpointText(t), key);
    expect(checked(witness.cosign(other))).toThrow(/does not verify/);
    const raw = Buffer.from(line.split(' ')[2] as string, 'base64');
    raw[raw.length - 1] = (raw[raw.length - 1] as number) ^ 1;
    expect(checked(`${line.split(' ').slice(0, 2).join(' ')} ${raw.toString('base64')}`)).toThrow(CosignatureError);
    expect(checked(witness.cosign(text, new Date(Date.now() + 3600_000)))).toThrow(/dated in the future/);
    expect(checked(`${line.split(' ').slice(0, 2).join(' ')} ${raw.subarray(0, 40).toString('base64')}`)).toThrow(
      /not a timestamped signature/,
    );
  });
});

describe('cosigner keys', () => {
  it('refuse a key ID that is not the key’s, and a log key', () => {
    const w = new TestWitness({ name: 'witness.test/k', kind: 'ed25519' });
    // Split on the first two '+' only: the base64 key may hold '+' itself.
    const [name, , ...rest] = w.vkey.split('+') as [string, string, ...string[]];
    const material = rest.join('+');
    expect(() => parseCosignerKey(`${name}+00000000+${material}`)).toThrow(/does not match its key/);
    expect(() => parseCosignerKey(`${name}+00000000+${Buffer.from([2, 1, 2]).toString('base64')}`)).toThrow(/0x04/);
  });
});
