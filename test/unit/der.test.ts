// The one DER module (src/crypto/der.ts) read strictly: definite, shortest-form lengths, nothing after the element,
// INTEGERs without a needless leading octet and never negative, and a truncated input an error, never zeros. Before
// it, five hand-written copies read and wrote DER; the ECDSA cases below are the inputs they disagreed on.
import { generateKeyPairSync, sign as nodeSign, verify } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  DerError,
  derStructureProblem,
  ecdsaDerToRaw,
  ecdsaRawToDer,
  encodeLength,
  readChildren,
  readElement,
  readSingle,
  readUnsignedInteger,
  TAG,
  tlv,
  unsignedInteger,
} from '../../src/crypto/der.js';
import { mlDsaSpkiDer, parseMlDsaSpki } from '../../src/crypto/spki.js';

const hex = (text: string) => Buffer.from(text.replace(/\s+/g, ''), 'hex');

describe('lengths and elements', () => {
  it.each([
    [0, '00'],
    [0x7f, '7f'],
    [0x80, '8180'],
    [0xff, '81ff'],
    [0x100, '820100'],
    [0xffff, '82ffff'],
    [0x10000, '83010000'],
  ])('writes length %i in its shortest form (%s)', (length, encoded) => {
    expect(encodeLength(length).toString('hex')).toBe(encoded);
  });

  it('reads what it writes, whatever the length form', () => {
    for (const size of [0, 1, 0x7f, 0x80, 0xff, 0x100, 0x1234, 0x10000]) {
      const element = readSingle(tlv(TAG.OCTET_STRING, Buffer.alloc(size, 7)), TAG.OCTET_STRING);
      expect(element.content.length).toBe(size);
    }
  });

  it.each([
    ['an indefinite length (BER)', '3080 0000', /indefinite length/],
    ['a long form for a short length', '04 8105 0102030405', /shortest form/],
    ['a long form with a leading zero octet', '04 820080' + '00'.repeat(0x80), /shortest form/],
    ['five length octets', '04 850100000000', /too long/],
    ['no length at all', '04', /length is missing/],
    ['length octets cut off', '04 82 01', /cut off/],
    ['contents cut off', '04 05 010203', /truncated/],
    ['nothing', '', /ends at byte 0/],
  ])('refuses %s', (_what, input, why) => {
    expect(() => readSingle(hex(input))).toThrow(DerError);
    expect(() => readSingle(hex(input))).toThrow(why);
  });

  it('refuses bytes after the element, and a tag other than the one asked for', () => {
    expect(() => readSingle(hex('0401ff 00'))).toThrow(/1 bytes follow the element/);
    expect(() => readSingle(hex('0401ff'), TAG.SEQUENCE)).toThrow(/tag 0x04, not 0x30/);
  });

  it('reads children in order, and refuses a child that runs past its parent', () => {
    const children = readChildren(readSingle(hex('3006 020101 0401ff')).content);
    expect(children.map((c) => [c.tag, c.content.toString('hex')])).toEqual([
      [TAG.INTEGER, '01'],
      [TAG.OCTET_STRING, 'ff'],
    ]);
    // The SEQUENCE says 5 bytes; its OCTET STRING says 3 more than are left.
    expect(() => readChildren(readSingle(hex('3005 020101 0403')).content)).toThrow(/truncated/);
  });

  it('a high tag number is read whole (the TSA reads [n] tags beyond 30)', () => {
    expect(readElement(hex('bf8101 01 ff')).content.toString('hex')).toBe('ff');
  });

  it('derStructureProblem checks the whole tree and names the first fault', () => {
    expect(derStructureProblem(hex('3008 3006 020101 0401ff'))).toBeUndefined();
    expect(derStructureProblem(hex('3008 3006 020101 0402ff'))).toMatch(/runs past its parent's end/);
    expect(derStructureProblem(hex('3003 020101 00'))).toMatch(/1 bytes follow the element/);
    expect(derStructureProblem(hex('3005 020101'))).toMatch(/truncated: 7 bytes announced, 5 present/);
    const deep = Array.from({ length: 18 }).reduce<Buffer>((inner) => tlv(TAG.SEQUENCE, inner), Buffer.alloc(0));
    expect(derStructureProblem(deep)).toMatch(/nested more than 16 deep/);
  });
});

describe('INTEGERs', () => {
  it.each([
    ['00', '020100'],
    ['0000', '020100'],
    ['7f', '02017f'],
    ['80', '02020080'],
    ['00 0080', '02020080'],
    ['0102', '02020102'],
  ])('writes the unsigned %s minimally as %s', (magnitude, encoded) => {
    expect(unsignedInteger(hex(magnitude)).toString('hex')).toBe(encoded);
  });

  it('reads non-negative INTEGERs and refuses the empty, the negative and a needless leading zero', () => {
    expect(readUnsignedInteger(hex('00')).toString('hex')).toBe('00');
    expect(readUnsignedInteger(hex('0080')).toString('hex')).toBe('80');
    expect(() => readUnsignedInteger(hex(''))).toThrow(/no contents/);
    expect(() => readUnsignedInteger(hex('80'))).toThrow(/negative/);
    expect(() => readUnsignedInteger(hex('007f'))).toThrow(/needless leading zero/);
  });
});

describe('ECDSA signatures: DER <-> fixed-width r||s', () => {
  it.each([
    ['P-256', 32],
    ['P-384', 48],
    ['P-521', 66],
  ] as const)("%s: node's DER and r||s convert into each other, leading zeros included", (curve, width) => {
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: curve });
    let sawShortInteger = false;
    for (let i = 0; i < 300 && !sawShortInteger; i++) {
      const message = Buffer.from(`message ${i}`);
      const der = nodeSign('sha256', message, { key: privateKey, dsaEncoding: 'der' });
      const raw = ecdsaDerToRaw(der, width);
      expect(raw.length).toBe(2 * width);
      expect(verify('sha256', message, { key: publicKey, dsaEncoding: 'ieee-p1363' }, raw)).toBe(true);
      expect(ecdsaRawToDer(raw).equals(der)).toBe(true);
      sawShortInteger = raw[0] === 0 || raw[width] === 0;
    }
  });

  it('writes r and s of zero, and with the top bit set, as DER INTEGERs', () => {
    expect(ecdsaRawToDer(Buffer.alloc(64)).toString('hex')).toBe('3006020100020100');
    expect(ecdsaRawToDer(Buffer.alloc(64, 0xff)).subarray(0, 5).toString('hex')).toBe('3046022100');
    expect(() => ecdsaRawToDer(Buffer.alloc(3))).toThrow(/even/);
  });

  // src/crypto/encoding.ts's ecdsaDerToRaw (used for Vault transit's `jws` marshaling) read a missing byte as 0
  // (`der[at++] ?? 0`) and took `subarray` past the end without complaint, then left-padded what it got: the
  // signature 30 06 02 01 05 02 01 07 cut before its last byte came out as r = 5, s = 32 zero bytes, and a P-256
  // signature missing its last 20 bytes as s = 20 zero bytes and the 12 it had. Here both are errors.
  it('a truncated signature is an error, never zeros (the copy in src/crypto/encoding.ts read zeros)', () => {
    const cut = hex('3006020105020107').subarray(0, 7);
    expect(() => ecdsaDerToRaw(cut, 32)).toThrow(DerError);
    const whole = ecdsaRawToDer(Buffer.alloc(64, 0x11));
    for (let n = 0; n < whole.length; n++) expect(() => ecdsaDerToRaw(whole.subarray(0, n), 32)).toThrow(DerError);
    expect(ecdsaDerToRaw(whole, 32).equals(Buffer.alloc(64, 0x11))).toBe(true);
  });

  it.each([
    ['trailing bytes', '3006020101020101 00', /follow the element/],
    ['a third INTEGER', '3009020101020101020101', /two INTEGERs/],
    ['an OCTET STRING for s', '3006020101040101', /two INTEGERs/],
    ['a negative r', '3006020180020101', /negative/],
    ['a needless leading zero in s', '300702010102020001', /needless leading zero/],
    ['a long-form length where a short one fits', '3081 06 020101 020101', /shortest form/],
    ['a SET instead of a SEQUENCE', '3106020101020101', /not 0x30/],
  ])('refuses %s', (_what, input, why) => {
    expect(() => ecdsaDerToRaw(hex(input), 32)).toThrow(why);
  });

  it('refuses an integer wider than the curve', () => {
    expect(() => ecdsaDerToRaw(ecdsaRawToDer(Buffer.alloc(96, 0x11)), 32)).toThrow(/longer than 32/);
  });
});

describe('SubjectPublicKeyInfo of ML-DSA, read through the DER module', () => {
  it('reads back what it writes, and refuses a truncated, extended or re-tagged one', () => {
    const publicKey = Buffer.alloc(1312, 0x42);
    const der = mlDsaSpkiDer('ML_DSA_44', publicKey);
    expect(parseMlDsaSpki(der)).toEqual({ spec: 'ML_DSA_44', publicKey });
    expect(parseMlDsaSpki(der.subarray(0, der.length - 1))).toBeUndefined();
    expect(parseMlDsaSpki(Buffer.concat([der, Buffer.from([0])]))).toBeUndefined();
    expect(parseMlDsaSpki(Buffer.concat([Buffer.from([0x31]), der.subarray(1)]))).toBeUndefined();
  });
});
