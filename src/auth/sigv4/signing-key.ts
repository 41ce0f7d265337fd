// The SigV4 signing key: HMAC-SHA256 chained over the date, region, service and `aws4_request`, starting from
// `AWS4` + the secret. It changes once a day per access key, region and service, so derived keys are kept in a
// small cache: a request then costs one HMAC for its signature instead of five. The cache key includes a hash of the
// secret, so a rotated secret never meets a key derived from the old one; the cache holds derived keys, never secrets.
//
// The per-request HMAC is RFC 2104 over two SHA-256 states prepared once per signing key (key XOR ipad, key XOR opad)
// and copied for each request: node:crypto's createHmac sets up an OpenSSL MAC context on every call, which costs
// about as much as a P-256 signature, where two hash copies cost a tenth of that.

import { createHash, createHmac, type Hash } from 'node:crypto';

const MAX_ENTRIES = 1024;
const BLOCK = 64;

function hmac(key: Buffer | string, data: string): Buffer {
  return createHmac('sha256', key).update(data, 'utf8').digest();
}

export function deriveSigningKey(secret: string, date: string, region: string, service: string): Buffer {
  return hmac(hmac(hmac(hmac(`AWS4${secret}`, date), region), service), 'aws4_request');
}

/** HMAC-SHA256 under one fixed key of at most 64 bytes (a signing key is 32), its pads hashed once. */
export class PreparedHmac {
  private readonly inner: Hash;
  private readonly outer: Hash;

  constructor(key: Buffer) {
    if (key.length > BLOCK) throw new Error('PreparedHmac takes keys of at most 64 bytes');
    const ipad = Buffer.alloc(BLOCK, 0x36);
    const opad = Buffer.alloc(BLOCK, 0x5c);
    for (let i = 0; i < key.length; i++) {
      ipad[i] = 0x36 ^ key[i]!;
      opad[i] = 0x5c ^ key[i]!;
    }
    this.inner = createHash('sha256').update(ipad);
    this.outer = createHash('sha256').update(opad);
  }

  digest(data: string): Buffer {
    const inner = this.inner.copy().update(data, 'utf8').digest();
    return this.outer.copy().update(inner).digest();
  }
}

export class SigningKeyCache {
  private readonly entries = new Map<string, PreparedHmac>();

  constructor(private readonly maxEntries = MAX_ENTRIES) {}

  get(accessKeyId: string, secret: string, date: string, region: string, service: string): PreparedHmac {
    // The secret is in the key so that a changed secret derives anew; it is in this process's memory either way.
    const cacheKey = `${accessKeyId}\n${date}\n${region}\n${service}\n${secret}`;
    const cached = this.entries.get(cacheKey);
    if (cached) return cached;
    const key = new PreparedHmac(deriveSigningKey(secret, date, region, service));
    // Oldest first out: a Map iterates in insertion order.
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(cacheKey, key);
    return key;
  }
}
