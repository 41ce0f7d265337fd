// The generic webhook: the event envelope as JSON, signed as Standard Webhooks 1.0 says (docs/events.md), so that a
// receiver can verify it with any of that specification's libraries. Symmetric (v1, HMAC-SHA256) signatures only.
import { createHmac, createSecretKey, type KeyObject, randomBytes, timingSafeEqual } from 'node:crypto';
import { type EventRecord, envelope } from '../../store/records/event-kinds.js';

const SECRET_PREFIX = 'whsec_';
const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
/** Standard Webhooks' default tolerance for the timestamp, in seconds (replays older than this are refused). */
export const DEFAULT_TOLERANCE_SECONDS = 300;

export interface StandardWebhookRequest {
  headers: {
    'webhook-id': string;
    'webhook-timestamp': string;
    'webhook-signature': string;
    'content-type': 'application/json';
  };
  /** The exact bytes that were signed: send them as they are (a re-serialised body no longer verifies). */
  body: string;
}

/** A new signing secret: `whsec_` + base64 of 32 random bytes (the specification allows 24 to 64). */
export function newWebhookSecret(): string {
  return SECRET_PREFIX + randomBytes(32).toString('base64');
}

/**
 * The HMAC keys of the secrets in use, made once each (issue 46): handing createHmac the raw bytes makes Node build
 * a key object for every message, 3 % of the CPU of an instance sending 800 webhooks a second. A few hundred
 * subscriptions at most; past that the oldest go (a rotated secret is not used again).
 */
const hmacKeys = new Map<string, KeyObject>();
const HMAC_KEYS_KEPT = 1024;

function hmacKey(secret: string): KeyObject {
  let key = hmacKeys.get(secret);
  if (!key) {
    key = createSecretKey(secretKey(secret));
    if (hmacKeys.size >= HMAC_KEYS_KEPT) hmacKeys.delete(hmacKeys.keys().next().value as string);
    hmacKeys.set(secret, key);
  }
  return key;
}

/** The HMAC key of a `whsec_` secret; throws naming what is wrong, never the secret itself. */
function secretKey(secret: string): Buffer {
  if (!secret.startsWith(SECRET_PREFIX)) throw new Error('a webhook secret must start with whsec_');
  const encoded = secret.slice(SECRET_PREFIX.length);
  if (!BASE64.test(encoded) || encoded.length % 4 !== 0) throw new Error('a webhook secret must be whsec_ + base64');
  const key = Buffer.from(encoded, 'base64');
  if (key.length < 24 || key.length > 64) throw new Error('a webhook secret must hold 24 to 64 bytes');
  return key;
}

function checkId(id: string): void {
  // The signed content is "{id}.{timestamp}.{body}": a "." in the id would make two messages sign alike.
  if (id === '' || id.includes('.') || /\s/.test(id)) throw new Error(`webhook id ${JSON.stringify(id)} is invalid`);
}

/** `v1,` + base64 HMAC-SHA256 of `{id}.{timestampSeconds}.{body}`, keyed with the secret's decoded bytes. */
export function signStandardWebhook(secret: string, id: string, timestampSeconds: number, body: string): string {
  checkId(id);
  if (!Number.isSafeInteger(timestampSeconds) || timestampSeconds < 0) {
    throw new Error('a webhook timestamp is whole seconds since the epoch');
  }
  const mac = createHmac('sha256', hmacKey(secret)).update(`${id}.${timestampSeconds}.${body}`).digest('base64');
  return `v1,${mac}`;
}

/**
 * The request for one delivery attempt of `event`: webhook-id is the event id (the same on every retry, so a
 * receiver dedupes on it), webhook-timestamp the attempt's time. Several secrets (while one is rotated) give one
 * signature each, space-separated, as the specification says; a receiver accepts the message when any one matches.
 */
export function standardWebhookRequest(
  event: EventRecord,
  secret: string | readonly string[],
  now: Date,
): StandardWebhookRequest {
  const secrets = typeof secret === 'string' ? [secret] : secret;
  if (secrets.length === 0) throw new Error('a webhook needs at least one secret');
  const body = JSON.stringify(envelope(event));
  const timestamp = Math.floor(now.getTime() / 1000);
  return {
    headers: {
      'webhook-id': event.id,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': secrets.map((s) => signStandardWebhook(s, event.id, timestamp, body)).join(' '),
      'content-type': 'application/json',
    },
    body,
  };
}

/**
 * A receiver's check (tests, and a receiver written in TypeScript): a `v1` signature over the raw body matches
 * under `secret`, compared in constant time, and the timestamp is within `toleranceSeconds` of `now`.
 */
export function verifyStandardWebhook(
  secret: string,
  headers: Record<string, string | undefined>,
  body: string,
  now: Date,
  toleranceSeconds = DEFAULT_TOLERANCE_SECONDS,
): boolean {
  const id = headers['webhook-id'];
  const timestamp = headers['webhook-timestamp'];
  const signatures = headers['webhook-signature'];
  if (!id || !timestamp || !signatures || !/^\d{1,15}$/.test(timestamp)) return false;
  if (Math.abs(now.getTime() / 1000 - Number(timestamp)) > toleranceSeconds) return false;
  let expected: Buffer;
  try {
    expected = Buffer.from(signStandardWebhook(secret, id, Number(timestamp), body).slice('v1,'.length), 'base64');
  } catch {
    return false;
  }
  return signatures.split(' ').some((entry) => {
    const [version, mac] = entry.split(',', 2);
    if (version !== 'v1' || mac === undefined) return false;
    const given = Buffer.from(mac, 'base64');
    return given.length === expected.length && timingSafeEqual(given, expected);
  });
}
