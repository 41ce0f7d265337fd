// OIDs with arcs of any size, read and written exactly (src/crypto/object-identifier.ts), checked against OpenSSL's
// encoding of the same dotted text.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { decodeObjectIdentifier, encodeObjectIdentifier } from '../../src/crypto/object-identifier.js';
import { DEFAULT_TSA_POLICY } from '../../src/tsa/tsa-settings.js';
import { makeTempDir } from '../helpers/service.js';

/** OpenSSL's DER of a dotted OID (asn1parse -genstr). */
function opensslOid(dotted: string): Buffer {
  const out = join(makeTempDir('oid-'), 'oid.der');
  execFileSync('openssl', ['asn1parse', '-genstr', `OID:${dotted}`, '-out', out, '-noout']);
  return readFileSync(out);
}

describe('OBJECT IDENTIFIER codec', () => {
  it.each([
    DEFAULT_TSA_POLICY,
    '1.3.6.1.4.1.99999.9007199254740993',
    '1.2.72057594037927939',
    '2.999.1',
    '0.39',
    '1.2.840.113549.1.9.16.1.4',
  ])('%s: encoded as OpenSSL does and read back', (dotted) => {
    const der = encodeObjectIdentifier(dotted);
    expect(der.toString('hex')).toBe(opensslOid(dotted).toString('hex'));
    expect(decodeObjectIdentifier(der.subarray(2))).toBe(dotted);
  });

  it('refuses encodings that are not DER and dotted text that is no OID', () => {
    expect(decodeObjectIdentifier(Buffer.from([0x2a, 0x80, 0x01]))).toBeUndefined(); // a leading 0x80 group
    expect(decodeObjectIdentifier(Buffer.from([0x2a, 0x86]))).toBeUndefined(); // cut off mid-arc
    expect(decodeObjectIdentifier(Buffer.alloc(0))).toBeUndefined();
    for (const bad of ['1.40', '3.1', '1', '1.2.03', '1..2']) expect(() => encodeObjectIdentifier(bad)).toThrow();
  });
});
