// Checks an incoming request's AWS Signature Version 4 (`Authorization: AWS4-HMAC-SHA256 Credential=...,
// SignedHeaders=..., Signature=...`) exactly as AWS does for its JSON and query services: the credential scope
// (`<key id>/<YYYYMMDD>/<region>/<service>/aws4_request`, the service the door's, any region, the date that of
// X-Amz-Date), `host` and any X-Amz-Security-Token among the signed headers, a five-minute clock window, the canonical
// request rebuilt from what arrived (canonical-request.ts), and the signature compared in constant time. Where the
// secret comes from is the caller's (`secretFor`): this file holds no store. One verifier serves one set of
// credentials at every door that takes them; each door names its service per request, which decides the scope
// checked and the dialect of the refusals. docs/kms-api.md, "Request signatures".

import * as nodeCrypto from 'node:crypto';
import { createHash, timingSafeEqual } from 'node:crypto';
import { echoed } from '../credential-echo.js';
import { canonicalRequest, type HeaderValues } from './canonical-request.js';
import {
  EXPIRED_TOKEN_MESSAGE,
  MISMATCH_MESSAGE,
  MISSING_TOKEN_MESSAGE,
  SigV4Refusal,
  type SigV4Service,
  UNKNOWN_KEY_MESSAGE,
} from './refusal.js';
import { SigningKeyCache } from './signing-key.js';

export const SIGV4_ALGORITHM = 'AWS4-HMAC-SHA256';
/** How far X-Amz-Date may be from the service's clock, either way (AWS's window). */
export const CLOCK_WINDOW_MS = 5 * 60 * 1000;

export interface SigV4Request {
  method: string;
  /** The request target as it arrived: path and query, still percent-encoded (Node's `req.url`). */
  url: string;
  /**
   * Header names in lower case. Pass Node's `req.headersDistinct`: `req.headers` drops repeated Host and
   * Content-Type lines and joins others with `, `, where SigV4 joins them with `,`.
   */
  headers: HeaderValues;
  body: Buffer | string | undefined;
}

/** What `secretFor` answers for a known, usable access key: its secret and whatever the caller wants back. */
export interface SigV4Secret<P> {
  secret: string;
  principal: P;
  /**
   * Temporary credentials past their expiry: the request is still checked in full (so only a holder of the secret
   * and the session token learns it), then refused as expired rather than unknown, as AWS answers.
   */
  expired?: boolean;
}

export interface SigV4Identity<P> {
  accessKeyId: string;
  /** Any region name the client chose; recorded, not checked. */
  region: string;
  service: SigV4Service;
  /** X-Amz-Security-Token (temporary credentials): the caller checks it belongs to the access key. */
  sessionToken: string | undefined;
  /** The request's signing time (X-Amz-Date or Date). */
  signedAt: Date;
  principal: P;
}

export type SigV4Result<P> = { ok: true; identity: SigV4Identity<P> } | { ok: false; refusal: SigV4Refusal };

export interface SigV4VerifierOptions<P> {
  /** The access key's secret, or undefined when the key is unknown, revoked or expired (but see `expired`). */
  secretFor(accessKeyId: string, sessionToken: string | undefined): Promise<SigV4Secret<P> | undefined>;
  now?: () => number;
}

/** SHA-256 in hex: crypto.hash (one call, no Hash object) where the runtime has it (Node 20.12 and later). */
const sha256Hex: (data: Buffer | string) => string =
  typeof nodeCrypto.hash === 'function'
    ? (data) => nodeCrypto.hash('sha256', data, 'hex')
    : (data) => createHash('sha256').update(data).digest('hex');

const ISO_BASIC = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/;
const HEX_SIGNATURE = /^[0-9a-f]{64}$/;
/**
 * Empty too: sigstore's AWS KMS client (cosign's awskms://HOST, aws-sdk-go-v2 with a custom endpoint and no region
 * resolver) signs with an empty region, `<key id>/<date>//kms/aws4_request` (test/conformance/aws-kms.test.ts).
 */
const REGION = /^[a-z0-9-]{0,64}$/;
const ACCESS_KEY_ID = /^[A-Za-z0-9_-]{1,128}$/;

function single(headers: HeaderValues, name: string): string | undefined {
  const value = headers[name];
  return Array.isArray(value) ? (value.length === 1 ? value[0] : undefined) : value;
}

function isoBasic(time: number): string {
  return new Date(time)
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');
}

function parseIsoBasic(text: string): number | undefined {
  const m = ISO_BASIC.exec(text);
  if (!m) return undefined;
  const [month, day, hour, minute, second] = [+m[2]!, +m[3]!, +m[4]!, +m[5]!, +m[6]!];
  if (month < 1 || month > 12 || hour > 23 || minute > 59 || second > 59) return undefined;
  const time = Date.UTC(+m[1]!, month - 1, day, hour, minute, second);
  // Date.UTC rolls 20260230 over into March: such a date is refused, not moved.
  return new Date(time).getUTCDate() === day ? time : undefined;
}

interface AuthorizationParts {
  credential?: string;
  signedHeaders?: string;
  signature?: string;
}

function parseAuthorization(value: string): { algorithm: string; parts: AuthorizationParts } {
  const space = value.indexOf(' ');
  const algorithm = space < 0 ? value : value.slice(0, space);
  const parts: AuthorizationParts = {};
  if (space >= 0) {
    for (const item of value.slice(space + 1).split(',')) {
      const equals = item.indexOf('=');
      if (equals < 0) continue;
      const name = item.slice(0, equals).trim();
      const content = item.slice(equals + 1).trim();
      if (name === 'Credential') parts.credential = content;
      else if (name === 'SignedHeaders') parts.signedHeaders = content;
      else if (name === 'Signature') parts.signature = content;
    }
  }
  return { algorithm, parts };
}

export class SigV4Verifier<P> {
  private readonly secretFor: SigV4VerifierOptions<P>['secretFor'];
  private readonly now: () => number;
  private readonly signingKeys = new SigningKeyCache();

  constructor(options: SigV4VerifierOptions<P>) {
    this.secretFor = options.secretFor;
    this.now = options.now ?? Date.now;
  }

  private refuse(
    service: SigV4Service,
    reason: SigV4Refusal['reason'],
    message: string | ReturnType<typeof echoed>,
    accessKeyId?: string,
  ): SigV4Result<P> {
    return { ok: false, refusal: new SigV4Refusal(reason, message, service, accessKeyId) };
  }

  /** Checks `request`, signed for `service` (the door it came in at), and answers refusals in that service's names. */
  async verify(request: SigV4Request, service: SigV4Service): Promise<SigV4Result<P>> {
    const authorization = single(request.headers, 'authorization');
    if (authorization === undefined || authorization === '') {
      return this.refuse(service, 'missing', MISSING_TOKEN_MESSAGE[service]);
    }
    const { algorithm, parts } = parseAuthorization(authorization);
    if (algorithm !== SIGV4_ALGORITHM) {
      return this.refuse(
        service,
        'incomplete',
        echoed((quote) => `Unsupported AWS 'algorithm': '${quote(algorithm)}'.`),
      );
    }
    const amzDate = single(request.headers, 'x-amz-date');
    const httpDate = amzDate === undefined ? single(request.headers, 'date') : undefined;
    const missing: string[] = [];
    if (parts.credential === undefined) missing.push("Authorization header requires 'Credential' parameter.");
    if (parts.signature === undefined) missing.push("Authorization header requires 'Signature' parameter.");
    if (parts.signedHeaders === undefined) missing.push("Authorization header requires 'SignedHeaders' parameter.");
    if (amzDate === undefined && httpDate === undefined) {
      missing.push("Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.");
    }
    if (missing.length > 0) return this.refuse(service, 'incomplete', missing.join(' '));

    const scope = parts.credential!.split('/');
    if (scope.length !== 5) {
      return this.refuse(
        service,
        'incomplete',
        echoed(
          (quote) =>
            'Credential must have exactly 5 slash-delimited elements, e.g. keyid/date/region/service/term, ' +
            `got '${quote(parts.credential!)}'`,
        ),
      );
    }
    const [accessKeyId, scopeDate, region, scopedTo, terminator] = scope as [string, string, string, string, string];
    if (!ACCESS_KEY_ID.test(accessKeyId)) return this.refuse(service, 'unknown_key', UNKNOWN_KEY_MESSAGE, accessKeyId);
    if (terminator !== 'aws4_request') {
      return this.refuse(
        service,
        'incomplete',
        echoed(
          (quote) => `Credential should be scoped with a valid terminator: 'aws4_request', not '${quote(terminator)}'.`,
        ),
        accessKeyId,
      );
    }
    if (scopedTo !== service) {
      return this.refuse(
        service,
        'incomplete',
        `Credential should be scoped to correct service: '${service}'.`,
        accessKeyId,
      );
    }
    if (!REGION.test(region)) {
      return this.refuse(service, 'incomplete', 'Credential should be scoped to a valid region.', accessKeyId);
    }

    // The string to sign always carries the ISO 8601 basic form, also when the client dated the request with Date.
    let signedAt: number | undefined;
    let timestamp: string;
    if (amzDate !== undefined) {
      signedAt = parseIsoBasic(amzDate);
      timestamp = amzDate;
    } else {
      const parsed = Date.parse(httpDate!);
      signedAt = Number.isNaN(parsed) ? undefined : parsed;
      timestamp = signedAt === undefined ? httpDate! : isoBasic(signedAt);
    }
    if (signedAt === undefined) {
      return this.refuse(
        service,
        'incomplete',
        echoed(
          (quote) =>
            `Date must be in ISO-8601 'basic format'. Got '${quote(timestamp)}'. See http://en.wikipedia.org/wiki/ISO_8601`,
        ),
        accessKeyId,
      );
    }
    if (scopeDate !== timestamp.slice(0, 8)) {
      return this.refuse(
        service,
        'incomplete',
        echoed(
          (quote) =>
            'Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: ' +
            `'${quote(scopeDate)}' != '${timestamp.slice(0, 8)}', from '${timestamp}'.`,
        ),
        accessKeyId,
      );
    }

    const signedHeaders = parts.signedHeaders!.split(';');
    if (!signedHeaders.includes('host')) {
      return this.refuse(
        service,
        'incomplete',
        "'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.",
        accessKeyId,
      );
    }
    const sessionToken = single(request.headers, 'x-amz-security-token');
    if (sessionToken !== undefined && !signedHeaders.includes('x-amz-security-token')) {
      return this.refuse(
        service,
        'incomplete',
        "'X-Amz-Security-Token' must be a 'SignedHeader' in the AWS Authorization.",
        accessKeyId,
      );
    }

    const now = this.now();
    if (signedAt < now - CLOCK_WINDOW_MS) {
      return this.refuse(
        service,
        'expired',
        `Signature expired: ${timestamp} is now earlier than ${isoBasic(now - CLOCK_WINDOW_MS)} ` +
          `(${isoBasic(now)} - 5 min.)`,
        accessKeyId,
      );
    }
    if (signedAt > now + CLOCK_WINDOW_MS) {
      return this.refuse(
        service,
        'expired',
        `Signature not yet current: ${timestamp} is still later than ${isoBasic(now + CLOCK_WINDOW_MS)} ` +
          `(${isoBasic(now)} + 5 min.)`,
        accessKeyId,
      );
    }

    const known = await this.secretFor(accessKeyId, sessionToken);
    if (known === undefined) return this.refuse(service, 'unknown_key', UNKNOWN_KEY_MESSAGE, accessKeyId);

    // The payload is always hashed here: a client's X-Amz-Content-SHA256 (S3 style) must then say the same, so a body
    // swapped under an unchanged header is refused, and UNSIGNED-PAYLOAD is never accepted.
    const bodyHash = sha256Hex(request.body ?? '');
    const declaredHash = single(request.headers, 'x-amz-content-sha256');
    if (declaredHash !== undefined && declaredHash.toLowerCase() !== bodyHash) {
      return this.refuse(
        service,
        'mismatch',
        "The provided 'x-amz-content-sha256' header does not match what was computed.",
        accessKeyId,
      );
    }

    const query = request.url.indexOf('?');
    const canonical = canonicalRequest({
      method: request.method,
      rawPath: query < 0 ? request.url : request.url.slice(0, query),
      rawQuery: query < 0 ? '' : request.url.slice(query + 1),
      headers: request.headers,
      signedHeaders,
      payloadHash: declaredHash ?? bodyHash,
    });
    const credentialScope = `${scopeDate}/${region}/${service}/aws4_request`;
    const stringToSign = `${SIGV4_ALGORITHM}\n${timestamp}\n${credentialScope}\n${sha256Hex(canonical)}`;
    const expected = this.signingKeys.get(accessKeyId, known.secret, scopeDate, region, service).digest(stringToSign);
    const given = HEX_SIGNATURE.test(parts.signature!) ? Buffer.from(parts.signature!, 'hex') : undefined;
    if (given === undefined || !timingSafeEqual(expected, given)) {
      return this.refuse(service, 'mismatch', MISMATCH_MESSAGE, accessKeyId);
    }
    if (known.expired) return this.refuse(service, 'expired_token', EXPIRED_TOKEN_MESSAGE, accessKeyId);
    return {
      ok: true,
      identity: {
        accessKeyId,
        region,
        service,
        sessionToken,
        signedAt: new Date(signedAt),
        principal: known.principal,
      },
    };
  }
}
