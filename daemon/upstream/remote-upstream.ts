// The remote signing service over HTTP(S), on an undici connection pool with keep-alive: a build that signs a
// thousand files opens one TLS session, not a thousand. The daemon makes one request per signature, so the
// client's CPU per request is on every signature's path: undici's request() took ~120 us a request where
// node:http took ~170-240 us and the global fetch (undici's streams, abort signals and header objects) more.
import { randomUUID } from 'node:crypto';
import { Pool } from 'undici';
import { type KeySpec, SIGNING_ALGORITHMS, type SigningAlgorithm } from '../../src/crypto/algorithms.js';
import type { ApiKeySource } from '../credentials.js';
import { WireStatus } from '../protocol/wire.js';
import { messageFor, wireStatusFor } from './status-map.js';
import {
  type CollectInput,
  type PublicKeyInfo,
  type SignContext,
  type SignInput,
  type SignResult,
  type Upstream,
  UpstreamError,
} from './upstream.js';

export interface RemoteUpstreamOptions {
  /** Base URL, e.g. https://signbridge.example.com (the daemon appends /v1/<action>). */
  url: string;
  /** The API key for tenants without their own. */
  apiKey?: ApiKeySource | undefined;
  /** Per-tenant API keys: the service binds a signer key to one tenant. */
  tenantApiKeys?: ReadonlyMap<string, ApiKeySource>;
  timeoutMs: number;
  userAgent?: string;
}

interface HttpOutcome {
  status: number;
  body: Record<string, unknown> | undefined;
  requestId: string | undefined;
}

export class RemoteUpstream implements Upstream {
  readonly description: string;
  private readonly base: URL;
  private readonly opts: RemoteUpstreamOptions;
  private readonly pool: Pool;
  private readonly pathPrefix: string;

  constructor(opts: RemoteUpstreamOptions) {
    this.opts = opts;
    this.base = new URL(opts.url.endsWith('/') ? opts.url : `${opts.url}/`);
    if (this.base.protocol !== 'https:' && this.base.protocol !== 'http:') {
      throw new Error(`service URL must be http(s), got ${opts.url}`);
    }
    this.description = this.base.origin + this.base.pathname.replace(/\/$/, '');
    this.pathPrefix = this.base.pathname;
    // One request per connection at a time (no pipelining: a slow approval must not hold up the signatures behind
    // it); idle connections close after a while, so a quiet daemon keeps none open.
    this.pool = new Pool(this.base.origin, {
      pipelining: 1,
      keepAliveTimeout: 30_000,
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
    });
  }

  async getPublicKey(tenantId: string): Promise<PublicKeyInfo> {
    let out: HttpOutcome;
    try {
      out = await this.call('get_public_key', tenantId, {});
    } catch (err) {
      // A kept-alive connection the server closed just now fails the request; a read is safe to send again.
      // (Signatures are retried only with their Idempotency-Key: see signCall.)
      if (!(err instanceof UpstreamError) || err.status !== WireStatus.UNAVAILABLE) throw err;
      out = await this.call('get_public_key', tenantId, {});
    }
    if (out.status !== 200) throw this.failure(out, tenantId);
    const b = out.body ?? {};
    if (typeof b.key_id !== 'string' || typeof b.key_spec !== 'string' || typeof b.public_key_pem !== 'string') {
      throw new UpstreamError(
        WireStatus.INTERNAL,
        'get_public_key: the service answered without key_id/key_spec/public_key_pem',
        out.requestId,
      );
    }
    const algorithms = Array.isArray(b.signing_algorithms)
      ? (b.signing_algorithms.filter((a) =>
          (SIGNING_ALGORITHMS as readonly unknown[]).includes(a),
        ) as SigningAlgorithm[])
      : [];
    return {
      keyId: b.key_id,
      keySpec: b.key_spec as KeySpec,
      publicKeyPem: b.public_key_pem,
      signingAlgorithms: algorithms,
    };
  }

  async pkcs11Sign(input: SignInput): Promise<SignResult> {
    const { context } = input;
    return this.signCall('pkcs11_sign', input.tenantId, true, {
      hash: input.digest.toString('base64'),
      key_spec: input.keySpec,
      pss_padding: input.pss,
      ...contextFields(context),
    });
  }

  /**
   * `sign` with a named algorithm (not used by the daemon, whose module hands over bare digests: `signbridge sign`
   * and `signbridge digest` use it for files, where the algorithm is the user's choice).
   */
  async sign(
    tenantId: string,
    algorithm: SigningAlgorithm,
    digest: Buffer,
    context: SignContext = {},
  ): Promise<SignResult> {
    return this.signCall('sign', tenantId, true, {
      algorithm,
      hash: digest.toString('base64'),
      ...contextFields(context),
    });
  }

  async collect(input: CollectInput): Promise<SignResult> {
    return this.signCall('pkcs11_sign', input.tenantId, false, {
      request_id: input.requestId,
      hash: input.digest.toString('base64'),
    });
  }

  /**
   * A new signature goes out with an Idempotency-Key of its own (src/api/idempotency.ts), so when the connection
   * drops before the answer arrives (a service instance restarting, a load balancer closing a kept-alive connection)
   * it is sent again and gets the first answer instead of a second signature. Collecting an approved request is
   * idempotent by itself.
   */
  private async signCall(
    action: 'sign' | 'pkcs11_sign',
    tenantId: string,
    fresh: boolean,
    body: Record<string, unknown>,
  ): Promise<SignResult> {
    const key = fresh ? randomUUID() : undefined;
    let out: HttpOutcome;
    for (let attempt = 1; ; attempt++) {
      const last = key === undefined || attempt >= SIGN_ATTEMPTS;
      try {
        out = await this.call(action, tenantId, body, key);
      } catch (err) {
        if (!last && err instanceof UpstreamError && err.status === WireStatus.UNAVAILABLE) continue;
        throw err;
      }
      // The first attempt reached the service and is still being answered there: wait for its answer.
      if (!last && out.status === 409 && out.body?.error === 'idempotency_key_in_use') {
        await new Promise((resolve) => setTimeout(resolve, IN_PROGRESS_WAIT_MS));
        continue;
      }
      break;
    }
    const b = out.body ?? {};
    if (out.status === 202) {
      if (typeof b.request_id !== 'string' || typeof b.status !== 'string') {
        throw new UpstreamError(WireStatus.INTERNAL, `${action}: a 202 without request_id/status`, out.requestId);
      }
      return {
        kind: 'pending',
        requestId: b.request_id,
        status: b.status,
        message: typeof b.message === 'string' ? b.message : `signature request ${b.status}`,
      };
    }
    if (out.status !== 200) throw this.failure(out, tenantId);
    if (typeof b.signature !== 'string' || typeof b.key_id !== 'string' || typeof b.signing_algorithm !== 'string') {
      throw new UpstreamError(
        WireStatus.INTERNAL,
        `${action}: the service answered without signature/key_id/signing_algorithm`,
        out.requestId,
      );
    }
    // A collected approval names its request; otherwise the HTTP request id is the one to quote.
    const requestId = typeof b.request_id === 'string' ? b.request_id : out.requestId;
    return {
      kind: 'signed',
      signature: Buffer.from(b.signature, 'base64'),
      keyId: b.key_id,
      algorithm: b.signing_algorithm as SigningAlgorithm,
      ...(requestId !== undefined && { requestId }),
    };
  }

  async close(): Promise<void> {
    await this.pool.destroy();
  }

  private failure(out: HttpOutcome, tenantId: string): UpstreamError {
    const message = messageFor(out.status, out.body);
    // A refused key from `signbridge login` (expired at the service, revoked): say how to get a new one.
    const hint = out.status === 401 ? this.keySource(tenantId)?.renewHint : undefined;
    return new UpstreamError(
      wireStatusFor(out.status, typeof out.body?.error === 'string' ? out.body.error : undefined),
      hint ? `${message}; ${hint}` : message,
      out.requestId,
    );
  }

  private keySource(tenantId: string): ApiKeySource | undefined {
    return this.opts.tenantApiKeys?.get(tenantId) ?? this.opts.apiKey;
  }

  private async call(
    action: string,
    tenantId: string,
    body: Record<string, unknown>,
    idempotencyKey?: string,
  ): Promise<HttpOutcome> {
    const apiKey = this.apiKey(tenantId);
    let res: { status: number; requestId: string | undefined; text: string };
    try {
      res = await this.post(
        `${this.pathPrefix}v1/${action}`,
        apiKey,
        JSON.stringify({ action, tenant_id: tenantId, ...body }),
        idempotencyKey,
      );
    } catch (err) {
      throw networkError(err, this.description, this.opts.timeoutMs);
    }
    const { text, requestId } = res;
    let parsed: Record<string, unknown> | undefined;
    try {
      const value: unknown = text ? JSON.parse(text) : undefined;
      parsed =
        value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
    } catch {
      parsed = undefined;
    }
    if (parsed === undefined && res.status < 300) {
      throw new UpstreamError(
        WireStatus.INTERNAL,
        `${action}: the service answered ${res.status} without a JSON body`,
        requestId,
      );
    }
    return { status: res.status, body: parsed, requestId };
  }

  /**
   * One POST; rejects with the socket's error, or a timeout when the whole exchange takes longer than timeoutMs
   * (undici's own headers/body timeouts only bound each wait, so a service trickling its answer could hold a
   * signature for ever), or AnswerTooLarge for an answer over MAX_ANSWER_BYTES (read as it comes, never whole).
   */
  private async post(
    path: string,
    apiKey: string,
    body: string,
    idempotencyKey?: string,
  ): Promise<{ status: number; requestId: string | undefined; text: string }> {
    const deadline = new AbortController();
    const timer = setTimeout(() => deadline.abort(), this.opts.timeoutMs);
    try {
      const res = await this.pool.request({
        path,
        method: 'POST',
        headers: {
          authorization: `Bearer ${apiKey}`,
          'content-type': 'application/json',
          accept: 'application/json',
          'user-agent': this.opts.userAgent ?? 'signbridge-daemon',
          ...(idempotencyKey !== undefined && { 'idempotency-key': idempotencyKey }),
        },
        body,
        signal: deadline.signal,
      });
      // Always read the body (an unread one would hold its connection), up to the limit.
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > MAX_ANSWER_BYTES) {
          res.body.destroy();
          throw new AnswerTooLarge();
        }
        chunks.push(chunk);
      }
      const id = res.headers['x-request-id'];
      const text =
        chunks.length === 1 ? (chunks[0] as Buffer).toString('utf8') : Buffer.concat(chunks).toString('utf8');
      return { status: res.statusCode, requestId: typeof id === 'string' ? id : undefined, text };
    } catch (err) {
      if (deadline.signal.aborted) throw Object.assign(new Error('deadline'), { code: DEADLINE_CODE });
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  private apiKey(tenantId: string): string {
    const source = this.keySource(tenantId);
    if (!source) throw new UpstreamError(WireStatus.UNAUTHENTICATED, `no API key configured for tenant ${tenantId}`);
    try {
      return source.get();
    } catch (err) {
      throw new UpstreamError(WireStatus.UNAUTHENTICATED, (err as Error).message);
    }
  }
}

/** The policy inputs, under the API's field names. */
function contextFields(context: SignContext): Record<string, string> {
  return {
    ...(context.project !== undefined && { project: context.project }),
    ...(context.environment !== undefined && { environment: context.environment }),
    ...(context.artifactType !== undefined && { artifact_type: context.artifactType }),
    ...(context.artifactVersion !== undefined && { artifact_version: context.artifactVersion }),
    ...(context.sbom !== undefined && { sbom: context.sbom }),
  };
}

/** Tries of one new signature when the connection drops (the same Idempotency-Key each time). */
const SIGN_ATTEMPTS = 3;
/** Wait before asking again about a signature the service is still answering (its Retry-After). */
const IN_PROGRESS_WAIT_MS = 1000;

/** The largest answer read from the service; its real answers are a few KB (a public key, a certificate chain). */
const MAX_ANSWER_BYTES = 1024 * 1024;
const DEADLINE_CODE = 'SIGNBRIDGE_DEADLINE';
const TIMEOUT_CODES = new Set([
  DEADLINE_CODE,
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CONNECT_TIMEOUT',
]);

class AnswerTooLarge extends Error {}

function networkError(err: unknown, where: string, timeoutMs: number): UpstreamError {
  if (err instanceof AnswerTooLarge) {
    return new UpstreamError(
      WireStatus.INTERNAL,
      `the service at ${where} answered with more than ${MAX_ANSWER_BYTES} bytes`,
    );
  }
  const e = err as Error & { code?: string };
  if (e.code !== undefined && TIMEOUT_CODES.has(e.code)) {
    return new UpstreamError(WireStatus.TIMEOUT, `the service at ${where} did not answer within ${timeoutMs} ms`);
  }
  const detail = e.code ?? e.message;
  return new UpstreamError(WireStatus.UNAVAILABLE, `cannot reach the service at ${where}: ${detail}`);
}
