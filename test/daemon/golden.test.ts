// Golden frames shared with the C module's tests (test/golden/wire/, written by the module's side): every frame
// decodes to what its JSON says, re-encodes to the same bytes, and every bad-*.hex is a protocol error.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { packagePath } from '../../src/paths.js';
import { decodeFrame, encodeMessage } from '../../wire/codec.js';
import type { Message } from '../../wire/messages.js';
import { type FieldSpec, MESSAGE_FIELDS } from '../../wire/schema.js';
import { ProtocolError, Tag } from '../../wire/wire.js';

const DIR = process.env.SIGNBRIDGE_GOLDEN_WIRE_DIR ?? packagePath('test', 'golden', 'wire');
const files = existsSync(DIR)
  ? readdirSync(DIR)
      .filter((f) => f.endsWith('.hex'))
      .sort()
  : [];

/** Hex with whitespace (and `#` comments to the end of a line) ignored. */
function readHex(path: string): Buffer {
  const text = readFileSync(path, 'utf8').replace(/#.*$/gm, '').replace(/\s+/g, '');
  if (!/^([0-9a-fA-F]{2})*$/.test(text)) throw new Error(`${path}: not hex`);
  return Buffer.from(text, 'hex');
}

const TAG_NAMES = new Map<number, string>(Object.entries(Tag).map(([name, tag]) => [tag, name]));

/** A decoded message in the language-neutral form of the JSON files: tag names as keys, bytes as hex. */
function toGoldenJson(specs: readonly FieldSpec[], obj: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const value = (spec: FieldSpec, v: unknown): unknown => {
    if (Buffer.isBuffer(v)) return v.toString('hex');
    if (spec.kind === 'nested') return toGoldenJson(spec.fields ?? [], v as Record<string, unknown>);
    return v;
  };
  for (const spec of specs) {
    const v = obj[spec.name];
    if (v === undefined || (spec.repeated && (v as unknown[]).length === 0)) continue;
    out[TAG_NAMES.get(spec.tag) as string] = spec.repeated
      ? (v as unknown[]).map((x) => value(spec, x))
      : value(spec, v);
  }
  return out;
}

describe('golden wire frames', () => {
  if (files.length === 0) {
    it.skip(`no golden frames yet in ${DIR} (the C module's side writes them)`, () => undefined);
    return;
  }

  it.each(files.filter((f) => f.startsWith('bad-')))('%s is a protocol error', (file) => {
    expect(() => decodeFrame(readHex(join(DIR, file)))).toThrow(ProtocolError);
  });

  it.each(files.filter((f) => !f.startsWith('bad-')))('%s decodes to its JSON and re-encodes', (file) => {
    const frame = readHex(join(DIR, file));
    const expected = JSON.parse(readFileSync(join(DIR, file.replace(/\.hex$/, '.json')), 'utf8'));
    const message: Message = decodeFrame(frame);
    const fields = toGoldenJson(MESSAGE_FIELDS[message.type], message as unknown as Record<string, unknown>);
    expect({ type: message.type, fields }).toEqual({ type: expected.type, fields: expected.fields ?? {} });
    // Frames with unknown tags or another field order do not re-encode byte for byte; the rest must.
    if (!expected.lenient) expect(encodeMessage(message).toString('hex')).toBe(frame.toString('hex'));
  });
});
