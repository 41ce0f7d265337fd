// Encoder and strict decoder for wire protocol frames (versions 1 and 2 share the format). Anything malformed throws
// ProtocolError; the caller closes the connection. Decoding never trusts a length before checking it against what
// is really there.
import type { Message } from './messages.js';
import { type FieldSpec, MESSAGE_FIELDS, messageNameOf } from './schema.js';
import {
  FIELD_HEADER_BYTES,
  FRAME_HEADER_BYTES,
  MAX_FRAME_LENGTH,
  type MessageName,
  MessageType,
  ProtocolError,
} from './wire.js';

const UTF8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

// ---- encoding ----

function fieldBytes(tag: number, value: Buffer): Buffer {
  const header = Buffer.alloc(FIELD_HEADER_BYTES);
  header.writeUInt16BE(tag, 0);
  header.writeUInt32BE(value.length, 2);
  return Buffer.concat([header, value]);
}

function encodeValue(spec: FieldSpec, value: unknown): Buffer {
  switch (spec.kind) {
    case 'u32': {
      if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 0xffffffff) {
        throw new TypeError(`${spec.name} must be a u32, got ${String(value)}`);
      }
      const b = Buffer.alloc(4);
      b.writeUInt32BE(value, 0);
      return b;
    }
    case 'bool':
      if (typeof value !== 'boolean') throw new TypeError(`${spec.name} must be a boolean`);
      return Buffer.from([value ? 1 : 0]);
    case 'str':
      if (typeof value !== 'string') throw new TypeError(`${spec.name} must be a string`);
      return checkBounds(spec, Buffer.from(value, 'utf8'), TypeError);
    case 'bytes':
      if (!Buffer.isBuffer(value)) throw new TypeError(`${spec.name} must be a Buffer`);
      return checkBounds(spec, value, TypeError);
    case 'nested':
      return encodeFields(spec.fields ?? [], value as Record<string, unknown>);
  }
}

function encodeFields(specs: readonly FieldSpec[], obj: Record<string, unknown>): Buffer {
  const parts: Buffer[] = [];
  for (const spec of specs) {
    const value = obj[spec.name];
    if (value === undefined) {
      if (spec.required) throw new TypeError(`missing required field ${spec.name}`);
      continue;
    }
    const values = spec.repeated ? (value as unknown[]) : [value];
    for (const v of values) parts.push(fieldBytes(spec.tag, encodeValue(spec, v)));
  }
  return Buffer.concat(parts);
}

/** Encodes one message as a complete frame (length, type, body). */
export function encodeMessage(message: Message): Buffer {
  const body = encodeFields(MESSAGE_FIELDS[message.type], message as unknown as Record<string, unknown>);
  return frameBytes(MessageType[message.type], body);
}

/** A frame from a raw type byte and body, for tests that need frames no well-behaved encoder makes. */
export function frameBytes(type: number, body: Buffer): Buffer {
  if (1 + body.length > MAX_FRAME_LENGTH) {
    throw new FrameTooLargeError(`a frame of ${1 + body.length} bytes is over the ${MAX_FRAME_LENGTH}-byte limit`);
  }
  const header = Buffer.alloc(FRAME_HEADER_BYTES);
  header.writeUInt32BE(1 + body.length, 0);
  header.writeUInt8(type, 4);
  return Buffer.concat([header, body]);
}

/** An answer that does not fit in one frame: the peer would reject it, so it must not be sent. */
export class FrameTooLargeError extends RangeError {}

// ---- decoding ----

function checkBounds<E extends new (m: string) => Error>(spec: FieldSpec, value: Buffer, Err: E): Buffer {
  if (spec.minBytes !== undefined && value.length < spec.minBytes) {
    throw new Err(`${spec.name} is ${value.length} bytes, at least ${spec.minBytes} required`);
  }
  if (spec.maxBytes !== undefined && value.length > spec.maxBytes) {
    throw new Err(`${spec.name} is ${value.length} bytes, at most ${spec.maxBytes} allowed`);
  }
  return value;
}

function decodeValue(spec: FieldSpec, raw: Buffer): unknown {
  switch (spec.kind) {
    case 'u32':
      if (raw.length !== 4) throw new ProtocolError(`${spec.name}: a u32 must be 4 bytes, got ${raw.length}`);
      return raw.readUInt32BE(0);
    case 'bool':
      if (raw.length !== 1 || (raw[0] !== 0 && raw[0] !== 1)) {
        throw new ProtocolError(`${spec.name}: a bool must be one byte 0 or 1`);
      }
      return raw[0] === 1;
    case 'str':
      checkBounds(spec, raw, ProtocolError);
      try {
        return UTF8.decode(raw);
      } catch {
        throw new ProtocolError(`${spec.name}: not valid UTF-8`);
      }
    case 'bytes':
      // A copy: the frame's buffer may be reused by the reader.
      return Buffer.from(checkBounds(spec, raw, ProtocolError));
    case 'nested':
      return decodeFields(spec.fields ?? [], raw, spec.name);
  }
}

/**
 * Each message's field specs by tag, built once per spec list (the lists are the protocol's constants): a map per
 * frame was most of decodeFields' own time in the daemon's profile under the full path (issue 46).
 */
const specsByTag = new WeakMap<readonly FieldSpec[], Map<number, FieldSpec>>();

function byTagOf(specs: readonly FieldSpec[]): Map<number, FieldSpec> {
  let byTag = specsByTag.get(specs);
  if (!byTag) {
    byTag = new Map(specs.map((s) => [s.tag, s]));
    specsByTag.set(specs, byTag);
  }
  return byTag;
}

/** Decodes a `field*` sequence against `specs`; unknown tags are skipped, as the protocol requires. */
export function decodeFields(specs: readonly FieldSpec[], body: Buffer, where: string): Record<string, unknown> {
  const byTag = byTagOf(specs);
  const out: Record<string, unknown> = {};
  const seen = new Set<number>();
  let offset = 0;
  while (offset < body.length) {
    if (body.length - offset < FIELD_HEADER_BYTES) {
      throw new ProtocolError(`${where}: truncated field header at offset ${offset}`);
    }
    const tag = body.readUInt16BE(offset);
    const len = body.readUInt32BE(offset + 2);
    const start = offset + FIELD_HEADER_BYTES;
    if (len > body.length - start) {
      throw new ProtocolError(`${where}: field 0x${tag.toString(16)} of ${len} bytes runs past the end`);
    }
    const raw = body.subarray(start, start + len);
    offset = start + len;
    const spec = byTag.get(tag);
    if (!spec) continue;
    if (spec.repeated) {
      const list = (out[spec.name] as unknown[] | undefined) ?? [];
      list.push(decodeValue(spec, raw));
      out[spec.name] = list;
      continue;
    }
    if (seen.has(tag)) throw new ProtocolError(`${where}: field ${spec.name} appears twice`);
    seen.add(tag);
    out[spec.name] = decodeValue(spec, raw);
  }
  for (const spec of specs) {
    if (spec.repeated) out[spec.name] ??= [];
    else if (spec.required && !seen.has(spec.tag)) throw new ProtocolError(`${where}: missing ${spec.name}`);
  }
  return out;
}

/** Decodes the type byte and body of one frame. */
export function decodeMessage(type: number, body: Buffer): Message {
  const name: MessageName | undefined = messageNameOf(type);
  if (!name) throw new ProtocolError(`unknown message type 0x${type.toString(16).padStart(2, '0')}`);
  return { type: name, ...decodeFields(MESSAGE_FIELDS[name], body, name) } as Message;
}

/** Decodes exactly one complete frame (length prefix included), e.g. a golden file. */
export function decodeFrame(frame: Buffer): Message {
  const reader = new FrameReader();
  const frames = reader.push(frame);
  if (frames.length !== 1 || reader.buffered !== 0) {
    throw new ProtocolError(`expected exactly one frame, got ${frames.length} and ${reader.buffered} spare bytes`);
  }
  const [only] = frames as [RawFrame];
  return decodeMessage(only.type, only.body);
}

export interface RawFrame {
  type: number;
  body: Buffer;
}

/**
 * Cuts a byte stream into frames. Throws ProtocolError as soon as a length prefix is out of range, before
 * buffering what it announces, so a hostile peer cannot make the daemon hold more than one frame's worth.
 */
export class FrameReader {
  private pending: Buffer = Buffer.alloc(0);

  get buffered(): number {
    return this.pending.length;
  }

  push(chunk: Buffer): RawFrame[] {
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    const frames: RawFrame[] = [];
    while (this.pending.length >= 4) {
      const length = this.pending.readUInt32BE(0);
      if (length === 0 || length > MAX_FRAME_LENGTH) {
        throw new ProtocolError(`frame length ${length} is outside 1..${MAX_FRAME_LENGTH}`);
      }
      if (this.pending.length < 4 + length) break;
      const type = this.pending.readUInt8(4);
      // Copy out, so that the next frame's bytes do not keep this one's buffer alive (and vice versa).
      const body = Buffer.from(this.pending.subarray(FRAME_HEADER_BYTES, 4 + length));
      frames.push({ type, body });
      this.pending = this.pending.subarray(4 + length);
    }
    return frames;
  }
}
