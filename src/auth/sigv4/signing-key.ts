// The SigV4 signing key: HMAC-SHA256 chained over the date, region, service and `aws4_request`, starting from
// `AWS4` + the secret. It changes once a day per access key, region and service, so derived keys are kept in a
// small cache: a request then costs one HMAC for its signature instead of five. The cache key includes a hash of the
// secret, so a rotated secret never meets a key derived from the old one; the cache holds derived keys, never secrets.

import { createHash, createHmac } from 'node:crypto';

const MAX_ENTRIES = 1024;

function hmac(key: Buffer | string, data: string): Buffer {
  return createHmac('sha256', key).update(data, 'utf8').digest();
}

export function deriveSigningKey(secret: string, date: string, region: string, service: string): Buffer {
  return hmac(hmac(hmac(hmac(`AWS4${secret}`, date), region), service), 'aws4_request');
}

export class SigningKeyCache {
  private readonly entries = new Map<string, Buffer>();

  constructor(private readonly maxEntries = MAX_ENTRIES) {}

  get(accessKeyId: string, secret: string, date: string, region: string, service: string): Buffer {
    const secretTag = createHash('sha256').update(secret, 'utf8').digest('base64');
    const cacheKey = `${accessKeyId}\n${date}\n${region}\n${service}\n${secretTag}`;
    const cached = this.entries.get(cacheKey);
    if (cached) return cached;
    const key = deriveSigningKey(secret, date, region, service);
    // Oldest first out: a Map iterates in insertion order.
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(cacheKey, key);
    return key;
  }
}
