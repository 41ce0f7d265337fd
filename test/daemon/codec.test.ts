// Wire protocol v1 codec: every message round-trips, and every malformed frame is a ProtocolError.
import { describe, expect, it } from 'vitest';
import {
  decodeFrame,
  decodeMessage,
  encodeMessage,
  FrameReader,
  FrameTooLargeError,
  frameBytes,
} from '../../wire/codec.js';
import type { Message } from '../../wire/messages.js';
import { MAX_FRAME_LENGTH, MessageType, ProtocolError, Tag } from '../../wire/wire.js';

const b = (hex: string) => Buffer.from(hex, 'hex');

function field(tag: number, value: Buffer): Buffer {
  const h = Buffer.alloc(6);
  h.writeUInt16BE(tag, 0);
  h.writeUInt32BE(value.length, 2);
  return Buffer.concat([h, value]);
}
const u32 = (n: number) => {
  const x = Buffer.alloc(4);
  x.writeUInt32BE(n, 0);
  return x;
};
const str = (s: string) => Buffer.from(s, 'utf8');

const SAMPLES: Message[] = [
  { type: 'HELLO', versionMin: 1, versionMax: 1, client: 'pkcs11-tool', pid: 4242 },
  { type: 'HELLO_OK', version: 1, server: 'signbridge-daemon 0.1.0' },
  { type: 'LIST' },
  { type: 'LIST_OK', tokens: [] },
  { type: 'IMPORT_CERTIFICATES', tenant: 'acme', certificate: b('3082aa'), chain: [b('3082bb'), b('3082cc')] },
  { type: 'IMPORT_CERTIFICATES', tenant: 'acme', certificate: b('3082aa'), chain: [] },
  { type: 'IMPORT_OK', keyId: b('0011'), label: 'key-1', message: 'stored' },
  {
    type: 'LIST_OK',
    tokens: [
      {
        label: 'acme',
        tenant: 'acme',
        keys: [
          {
            keyId: b('00112233445566778899aabbccddeeff'),
            label: 'acme key 1',
            keySpec: 'ECC_NIST_P256',
            publicKey: b('3059301306072a8648ce3d0201'),
            certificate: b('3082'),
            chain: [b('30820001'), b('30820002')],
          },
          { keyId: b('01'), label: 'k2', keySpec: 'RSA_2048', publicKey: b('30'), chain: [] },
        ],
      },
      { label: 'empty', tenant: 'other', keys: [] },
    ],
  },
  {
    type: 'SIGN',
    tenant: 'acme',
    keyId: b('0102'),
    algorithm: 'ECDSA_SHA_256',
    digest: Buffer.alloc(32, 7),
    project: 'p',
    environment: 'prod',
    artifactType: 'exe',
    artifactVersion: '1.2.3',
    sbomPath: '/tmp/sbom.json',
  },
  { type: 'SIGN', tenant: 'acme', keyId: b('01'), algorithm: 'RSASSA_PSS_SHA_256', digest: Buffer.alloc(32) },
  { type: 'SIGN_OK', signature: Buffer.alloc(64, 1), requestId: 'r-1' },
  { type: 'SIGN_OK', signature: Buffer.alloc(256, 2) },
  { type: 'SIGN_PENDING', requestId: 'r-2', status: 'pending_approval', message: 'waiting for approval' },
  { type: 'POLL', tenant: 'acme', requestId: 'r-2', digest: Buffer.alloc(48, 9) },
  { type: 'ERROR', status: 4, message: 'policy denied: CVE-1', requestId: 'r-3' },
  { type: 'ERROR', status: 7, message: 'ünïcødé ✓' },
];

function expectProtocolError(fn: () => unknown, pattern?: RegExp): void {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught, 'expected a ProtocolError').toBeInstanceOf(ProtocolError);
  if (pattern) expect((caught as Error).message).toMatch(pattern);
}

describe('round trip', () => {
  it.each(SAMPLES.map((m) => [m.type, m] as const))('%s', (_name, message) => {
    const frame = encodeMessage(message);
    expect(frame.readUInt32BE(0)).toBe(frame.length - 4);
    expect(frame[4]).toBe(MessageType[message.type]);
    expect(decodeFrame(frame)).toEqual(message);
  });

  it('encodes fields in table order with u16 tags and u32 lengths', () => {
    const frame = encodeMessage({ type: 'HELLO', versionMin: 1, versionMax: 2, client: 'x', pid: 9 });
    expect(frame.toString('hex')).toBe(
      '0000002601' + '0001000000040000000100020000000400000002' + '000300000001' + '78' + '000400000004' + '00000009',
    );
  });

  it('refuses to encode a frame over 1 MiB', () => {
    const big = { type: 'SIGN_OK' as const, signature: Buffer.alloc(MAX_FRAME_LENGTH) };
    expect(() => encodeMessage(big)).toThrow(FrameTooLargeError);
  });

  it('refuses to encode what it could not decode', () => {
    expect(() =>
      encodeMessage({ type: 'SIGN', tenant: 't', keyId: Buffer.alloc(65), algorithm: 'a', digest: b('00') }),
    ).toThrow(/at most 64/);
    expect(() => encodeMessage({ type: 'HELLO_OK', version: -1, server: 's' })).toThrow(/u32/);
  });
});

describe('lenient where the protocol says so', () => {
  it('skips unknown tags, also twice, anywhere', () => {
    const body = Buffer.concat([
      field(0x7777, b('dead')),
      field(Tag.VERSION, u32(1)),
      field(0x7777, b('beef')),
      field(Tag.SERVER, str('s')),
    ]);
    expect(decodeMessage(MessageType.HELLO_OK, body)).toEqual({ type: 'HELLO_OK', version: 1, server: 's' });
  });

  it('accepts an empty body for LIST and extra unknown fields', () => {
    expect(decodeMessage(MessageType.LIST, Buffer.alloc(0))).toEqual({ type: 'LIST' });
    expect(decodeMessage(MessageType.LIST, field(0x0999, b('')))).toEqual({ type: 'LIST' });
  });
});

describe('strict everywhere else', () => {
  const helloBody = (extra: Buffer[] = []) =>
    Buffer.concat([
      field(Tag.VERSION_MIN, u32(1)),
      field(Tag.VERSION_MAX, u32(1)),
      field(Tag.CLIENT, str('c')),
      field(Tag.PID, u32(1)),
      ...extra,
    ]);

  it('unknown message type', () => expectProtocolError(() => decodeMessage(0x55, Buffer.alloc(0)), /unknown/));
  it('missing required field', () =>
    expectProtocolError(() => decodeMessage(MessageType.HELLO, field(Tag.VERSION_MIN, u32(1))), /missing/));
  it('duplicate non-repeated field', () =>
    expectProtocolError(() => decodeMessage(MessageType.HELLO, helloBody([field(Tag.PID, u32(2))])), /twice/));
  it('u32 of the wrong length', () => {
    for (const len of [0, 3, 5, 8]) {
      const body = Buffer.concat([
        field(Tag.VERSION_MIN, Buffer.alloc(len)),
        field(Tag.VERSION_MAX, u32(1)),
        field(Tag.CLIENT, str('c')),
        field(Tag.PID, u32(1)),
      ]);
      expectProtocolError(() => decodeMessage(MessageType.HELLO, body), /4 bytes/);
    }
  });
  it('field running past the end (by one byte, and by 4 GiB)', () => {
    const good = helloBody();
    expectProtocolError(() => decodeMessage(MessageType.HELLO, good.subarray(0, good.length - 1)), /past the end/);
    const huge = Buffer.from('0003ffffffff', 'hex');
    expectProtocolError(() => decodeMessage(MessageType.HELLO, Buffer.concat([helloBody(), huge])), /past the end/);
  });
  it('truncated field header', () =>
    expectProtocolError(() => decodeMessage(MessageType.LIST, b('0001000000')), /truncated/));
  it('invalid UTF-8 in a string', () =>
    expectProtocolError(
      () => decodeMessage(MessageType.ERROR, Buffer.concat([field(Tag.STATUS, u32(1)), field(Tag.MESSAGE, b('c328'))])),
      /UTF-8/,
    ));
  it('KEY_ID outside 1..64 bytes and TOKEN_LABEL over 32 bytes', () => {
    const sign = (keyId: Buffer) =>
      Buffer.concat([
        field(Tag.TENANT, str('t')),
        field(Tag.KEY_ID, keyId),
        field(Tag.ALGORITHM, str('ECDSA_SHA_256')),
        field(Tag.DIGEST, Buffer.alloc(32)),
      ]);
    expect(decodeMessage(MessageType.SIGN, sign(Buffer.alloc(64))).type).toBe('SIGN');
    expectProtocolError(() => decodeMessage(MessageType.SIGN, sign(Buffer.alloc(65))), /at most 64/);
    expectProtocolError(() => decodeMessage(MessageType.SIGN, sign(Buffer.alloc(0))), /at least 1/);
    const token = Buffer.concat([field(Tag.TOKEN_LABEL, str('x'.repeat(33))), field(Tag.TENANT, str('t'))]);
    expectProtocolError(() => decodeMessage(MessageType.LIST_OK, field(Tag.TOKEN, token)), /at most 32/);
  });
  it('errors inside nested fields (a KEY inside a TOKEN)', () => {
    const key = Buffer.concat([field(Tag.KEY_ID, b('01')), field(Tag.KEY_ID, b('02'))]);
    const token = Buffer.concat([field(Tag.TOKEN_LABEL, str('l')), field(Tag.TENANT, str('t')), field(Tag.KEY, key)]);
    expectProtocolError(() => decodeMessage(MessageType.LIST_OK, field(Tag.TOKEN, token)), /keys: field keyId/);
  });
});

describe('FrameReader', () => {
  it('reassembles frames split at every byte and several frames in one chunk', () => {
    const stream = Buffer.concat(SAMPLES.map(encodeMessage));
    for (const step of [1, 2, 3, 7, 64, stream.length]) {
      const reader = new FrameReader();
      const got: Message[] = [];
      for (let i = 0; i < stream.length; i += step) {
        for (const f of reader.push(stream.subarray(i, i + step))) got.push(decodeMessage(f.type, f.body));
      }
      expect(got).toEqual(SAMPLES);
      expect(reader.buffered).toBe(0);
    }
  });

  it('rejects length 0 and lengths above 1 MiB as soon as the prefix arrives', () => {
    expectProtocolError(() => new FrameReader().push(b('00000000')), /outside/);
    const over = Buffer.alloc(4);
    over.writeUInt32BE(MAX_FRAME_LENGTH + 1, 0);
    expectProtocolError(() => new FrameReader().push(over), /outside/);
    expectProtocolError(() => new FrameReader().push(b('ffffffff')), /outside/);
  });

  it('accepts a frame of exactly 1 MiB', () => {
    const frame = frameBytes(MessageType.LIST, field(0x0999, Buffer.alloc(MAX_FRAME_LENGTH - 1 - 6)));
    expect(frame.readUInt32BE(0)).toBe(MAX_FRAME_LENGTH);
    expect(decodeFrame(frame)).toEqual({ type: 'LIST' });
  });

  it('decodeFrame refuses trailing bytes and short frames', () => {
    const frame = encodeMessage({ type: 'LIST' });
    expectProtocolError(() => decodeFrame(Buffer.concat([frame, b('00')])), /exactly one/);
    expectProtocolError(() => decodeFrame(frame.subarray(0, 4)), /exactly one/);
  });
});

describe('fuzz: mutated frames', () => {
  it('never throw anything but ProtocolError, and never hang', () => {
    let seed = 12345;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    const frames = SAMPLES.map(encodeMessage);
    let rejected = 0;
    for (let i = 0; i < 20_000; i++) {
      const base = Buffer.from(frames[rand(frames.length)] as Buffer);
      const mutated = (() => {
        switch (rand(4)) {
          case 0: {
            const b = Buffer.from(base);
            for (let k = 0; k <= rand(4); k++) b[rand(b.length)] = rand(256);
            return b;
          }
          case 1:
            return base.subarray(0, rand(base.length));
          case 2: {
            const at = 5 + rand(Math.max(1, base.length - 5));
            const extra = Buffer.from(Array.from({ length: 1 + rand(12) }, () => rand(256)));
            const b = Buffer.concat([base.subarray(0, at), extra, base.subarray(at)]);
            b.writeUInt32BE(b.length - 4, 0);
            return b;
          }
          default: {
            const b = Buffer.from(base);
            b.writeUInt32BE(rand(2) ? b.length - 4 : rand(0x7fffffff), 0);
            return b;
          }
        }
      })();
      try {
        const reader = new FrameReader();
        for (const f of reader.push(mutated)) decodeMessage(f.type, f.body);
      } catch (err) {
        if (!(err instanceof ProtocolError)) throw err;
        rejected++;
      }
    }
    expect(rejected).toBeGreaterThan(1000);
  });
});
