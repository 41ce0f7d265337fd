// What a pure Ed25519 request must be before it is decided (src/signing/pure-ed25519.ts): the message there, 1 to
// 4096 bytes, an Ed25519 key, ED25519_SHA_512; each other case a 400 of its own.
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../src/errors.js';
import { checkPureEd25519Request } from '../../src/signing/pure-ed25519.js';

function codeOf(run: () => void): string | undefined {
  try {
    run();
    return undefined;
  } catch (err) {
    if (err instanceof ApiError) return err.code;
    throw err;
  }
}

describe('checkPureEd25519Request', () => {
  it('takes a message of 1 to 4096 bytes for an Ed25519 key', () => {
    for (const size of [1, 4096]) {
      expect(
        codeOf(() => checkPureEd25519Request('ECC_NIST_EDWARDS25519', 'ED25519_SHA_512', Buffer.alloc(size))),
      ).toBe(undefined);
    }
  });

  it('refuses no message, an empty one, one past 4096 bytes, another key spec and another algorithm', () => {
    const ed = 'ECC_NIST_EDWARDS25519' as const;
    expect(codeOf(() => checkPureEd25519Request(ed, 'ED25519_SHA_512', undefined))).toBe('invalid_request');
    expect(codeOf(() => checkPureEd25519Request(ed, 'ED25519_SHA_512', Buffer.alloc(0)))).toBe('invalid_request');
    expect(codeOf(() => checkPureEd25519Request(ed, 'ED25519_SHA_512', Buffer.alloc(4097)))).toBe('invalid_request');
    expect(codeOf(() => checkPureEd25519Request('ECC_SECG_P256K1', 'ED25519_SHA_512', Buffer.alloc(8)))).toBe(
      'algorithm_key_mismatch',
    );
    expect(codeOf(() => checkPureEd25519Request(ed, 'ED25519_PH_SHA_512', Buffer.alloc(8)))).toBe('invalid_request');
  });
});
