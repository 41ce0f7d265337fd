// The remote signing service over HTTP(S), on an undici connection pool with keep-alive: a build that signs a
// thousand files opens one TLS session, not a thousand. The daemon makes one request per signature, so the
// client's CPU per request is on every signature's path: undici's request() took ~120 us a request where
// node:http took ~170-240 us and the global fetch (undici's streams, abort signals and header objects) more.
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { Pool } from 'undici';
import { type KeySpec, SIGNING_ALGORITHMS, type SigningAlgorithm } from '../../src/crypto/algorithms.js';
import { consolePageFor } from '../../src/signing/held-description.js';
import { WireStatus } from '../../wire/wire.js';
import type { ApiKeySource } from '../credentials.js';
import {
  batchItem,
  contextFields,
  type HttpOutcome,
  pendingFrom,
  serviceCannotAnswer,
  serviceNamesTheTarget,
} from './service-answers.js';
import { messageFor, wireStatusFor } from './status-map.js';
import {
  AnswerTooLarge,
  DEADLINE_CODE,
  MAX_ANSWER_BYTES,
  MAX_BATCH_ITEM_BYTES,
  MAX_LOG_PROOF_BYTES,
  networkError,
} from './transport-errors.js';
import {
  BatchNeedsApproval,
  BatchUnsupported,
  type CollectInput,
  type LogProofRequest,
  type PublicKeyInfo,
  type SignBatchInput,
  type SignBatchResult,
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
  /**
   * How long a request keeps being sent again while the service cannot answer (connection refused or reset, 502,
   * 503, 408, 429: a restart, a rolling upgrade, a store or key store outage), with back-off; a signature always
   * with its own Idempotency-Key. Counted from the first attempt; 0 sends once (and once more at once for a
   * kept-alive connection the server had closed), the default; the daemon's default is DEFAULT_RETRY_WITHIN_MS.
   * Signatures and their collection only: a public key look-up fails at once.
   */
  retryWithinMs?: number;
  userAgent?: string;
  /**
   * Connections to the service at most (service.connections; default DEFAULT_CONNECTIONS). Each carries one request
   * at a time; more requests than connections wait in line in this process, not at the service.
   */
  connections?: number;
  /** Where each wait for the service is logged (once per request, not per attempt). */
  log?: Pick<Logger, 'warn' | 'info'>;
}

/** What one request carries besides its body. */
interface CallExtras {
  /** A new signature's own key (src/api/idempotency.ts): sent again, it gets the first answer. */
  idempotencyKey?: string;
  /** How long to send again while the service cannot answer (default: the options' retryWithinMs). */
  retryWithinMs?: number;
  /** RFC 7240 Prefer (`wait-for-log`: the answer carries the signature's log proof). */
  prefer?: string;
  /** The largest answer read (default MAX_ANSWER_BYTES). */
  maxAnswerBytes?: number;
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
      connections: opts.connections ?? DEFAULT_CONNECTIONS,
      pipelining: 1,
      keepAliveTimeout: 30_000,
      headersTimeout: opts.timeoutMs,
      bodyTimeout: opts.timeoutMs,
    });
  }

  async getPublicKey(tenantId: string): Promise<PublicKeyInfo> {
    // A kept-alive connection the server closed just now is replaced at once, but a service that is down is said
    // at once too: a token listing (pkcs11-tool -L, p11-kit, `signbridge status`) must not wait for it. A SIGN whose
    // cached key expired meanwhile goes on with the cached key (KeyCatalog.current's staleOnOutage).
    const out = await this.callRetrying('get_public_key', tenantId, {}, { retryWithinMs: 0 });
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
      ...(input.message !== undefined && { message: input.message.toString('base64') }),
      key_spec: input.keySpec,
      pss_padding: input.pss,
      ...(input.keyId !== undefined && { key_id: input.keyId }),
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
    /**
     * Ask for the signature's transparency-log proof in the answer (`Prefer: wait-for-log`, docs/api.md); with
     * `witnessed`, against a checkpoint the log's witnesses cosigned (`wait-for-log=witnessed`), waiting up to
     * `waitSeconds` for it.
     */
    options: { logProof?: boolean } & LogProofRequest = {},
  ): Promise<SignResult> {
    const prefer = options.logProof ? waitForLogPreference(options) : undefined;
    return this.signCall(
      'sign',
      tenantId,
      true,
      { algorithm, hash: digest.toString('base64'), ...contextFields(context) },
      prefer,
    );
  }

  async collect(input: CollectInput): Promise<SignResult> {
    return this.signCall('pkcs11_sign', input.tenantId, false, {
      request_id: input.requestId,
      hash: input.digest.toString('base64'),
    });
  }

  /**
   * A new signature goes out with an Idempotency-Key of its own (src/api/idempotency.ts), so when the connection
   * drops before the answer arrives or the service is restarting, it is sent again and gets the first answer
   * instead of a second signature. Collecting an approved request is idempotent by itself.
   */
  private async signCall(
    action: 'sign' | 'pkcs11_sign',
    tenantId: string,
    fresh: boolean,
    body: Record<string, unknown>,
    prefer?: string,
  ): Promise<SignResult> {
    const out = await this.callRetrying(action, tenantId, body, {
      ...(fresh && { idempotencyKey: randomUUID() }),
      ...(prefer !== undefined && { prefer }),
    });
    const b = out.body ?? {};
    if (out.status === 202) return pendingFrom(action, out);
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
      ...(out.logIndex !== undefined && { logIndex: out.logIndex }),
      ...(typeof b.log_proof === 'string' && { logProof: b.log_proof }),
    };
  }

  /**
   * sign_batch with pkcs11_sign's key_spec/pss_padding: one request for all digests, with an Idempotency-Key of
   * its own when new (as a signature), none when collecting a held batch (request_id and the same hashes again).
   * A service without the route (older than sign_batch) is BatchUnsupported, so the caller can sign one by one.
   */
  async signBatch(input: SignBatchInput): Promise<SignBatchResult> {
    const action = 'sign_batch';
    const fresh = input.requestId === undefined;
    const out = await this.callRetrying(
      action,
      input.tenantId,
      {
        hashes: input.digests.map((d) => d.toString('base64')),
        ...(input.algorithm !== undefined
          ? { algorithm: input.algorithm }
          : { key_spec: input.keySpec, pss_padding: input.pss }),
        ...(input.keyId !== undefined && input.requestId === undefined && { key_id: input.keyId }),
        ...(input.requestId !== undefined && { request_id: input.requestId }),
        ...contextFields(input.context),
      },
      {
        ...(fresh && { idempotencyKey: randomUUID() }),
        ...(input.logProof !== undefined && { prefer: waitForLogPreference(input.logProof) }),
        // Each signature is a few KB at most (ML-DSA-87: 6.2 KB in base64), and so is each log proof: room for them.
        maxAnswerBytes:
          MAX_ANSWER_BYTES +
          input.digests.length * (MAX_BATCH_ITEM_BYTES + (input.logProof !== undefined ? MAX_LOG_PROOF_BYTES : 0)),
      },
    );
    const b = out.body ?? {};
    if (out.status === 202) return pendingFrom(action, out);
    if (out.status === 404 && !serviceNamesTheTarget(b)) {
      throw new BatchUnsupported(`the service at ${this.description} has no ${action}`, out.requestId);
    }
    if (out.status === 409 && b.error === 'batch_needs_approval') {
      throw new BatchNeedsApproval(typeof b.reason === 'string' ? b.reason : 'batch_needs_approval', out.requestId);
    }
    if (out.status !== 200) throw this.failure(out, input.tenantId);
    const algorithm = b.algorithm ?? b.signing_algorithm;
    const results = b.results;
    if (
      typeof b.key_id !== 'string' ||
      typeof algorithm !== 'string' ||
      !Array.isArray(results) ||
      results.length !== input.digests.length
    ) {
      throw new UpstreamError(
        WireStatus.INTERNAL,
        `${action}: the service answered without key_id/algorithm or with ${Array.isArray(results) ? results.length : 'no'} results for ${input.digests.length} hashes`,
        out.requestId,
      );
    }
    const requestId = typeof b.request_id === 'string' ? b.request_id : out.requestId;
    return {
      kind: 'signed',
      keyId: b.key_id,
      algorithm: algorithm as SigningAlgorithm,
      ...(requestId !== undefined && { requestId }),
      results: results.map((item: unknown) => batchItem(item, action, requestId)),
    };
  }

  async inclusionProof(tenantId: string, index: number): Promise<unknown | 'not-yet'> {
    const deadline = AbortSignal.timeout(this.opts.timeoutMs);
    let res: Awaited<ReturnType<Pool['request']>>;
    try {
      res = await this.pool.request({
        path: `${this.pathPrefix}log/proof/inclusion?index=${index}`,
        method: 'GET',
        headers: {
          authorization: `Bearer ${this.apiKey(tenantId)}`,
          accept: 'application/json',
          'user-agent': this.opts.userAgent ?? 'signbridge-daemon',
        },
        signal: deadline,
      });
    } catch (err) {
      throw networkError(err, this.description, this.opts.timeoutMs);
    }
    const text = await res.body.text();
    if (res.statusCode === 404) return 'not-yet';
    if (res.statusCode !== 200) {
      throw new UpstreamError(
        wireStatusFor(res.statusCode, undefined),
        `GET /log/proof/inclusion: HTTP ${res.statusCode}`,
      );
    }
    return JSON.parse(text) as unknown;
  }

  async close(): Promise<void> {
    await this.pool.destroy();
  }

  /** The service's console page for the request, as the service itself names it (its 202's approve_url). */
  consoleUrlFor(requestId: string): string {
    return consolePageFor(this.description, requestId);
  }

  /**
   * One request, sent again (same body, same Idempotency-Key) while the service cannot answer it, with back-off,
   * until retryWithinMs after the first attempt; then the last failure stands (UNAVAILABLE: the module's user may
   * retry). Final answers (a signature, a pending request, a denial, any other 4xx) are never sent again. With an
   * Idempotency-Key, a 409 idempotency_key_in_use (an earlier attempt reached the service and is still being
   * answered there) waits for that answer.
   */
  private async callRetrying(
    action: string,
    tenantId: string,
    body: Record<string, unknown>,
    extras: CallExtras = {},
  ): Promise<HttpOutcome> {
    const retrying = { ...extras, retryWithinMs: extras.retryWithinMs ?? this.opts.retryWithinMs ?? 0 };
    const out = await this.callRetryingUnavailable(action, tenantId, body, retrying);
    // A refused key from a source that renews itself (a CI key past its expiry): once more with the new key. A 401
    // did nothing at the service, so sending the request again signs at most once.
    const renew = this.keySource(tenantId)?.renewAfterRefusal;
    if (out.status !== 401 || !renew) return out;
    let renewed: boolean;
    try {
      renewed = await renew.call(this.keySource(tenantId));
    } catch {
      renewed = false;
    }
    if (!renewed) return out;
    this.opts.log?.info({ action, tenant: tenantId }, 'the service refused the key; sending again with the new one');
    return this.callRetryingUnavailable(action, tenantId, body, retrying);
  }

  private async callRetryingUnavailable(
    action: string,
    tenantId: string,
    body: Record<string, unknown>,
    extras: CallExtras & { retryWithinMs: number },
  ): Promise<HttpOutcome> {
    const { idempotencyKey, retryWithinMs } = extras;
    const started = Date.now();
    const retryUntil = started + retryWithinMs;
    let backoffMs = FIRST_BACKOFF_MS;
    for (let attempt = 1; ; attempt++) {
      let out: HttpOutcome | undefined;
      let failure: UpstreamError | undefined;
      try {
        out = await this.call(action, tenantId, body, extras);
      } catch (err) {
        if (!(err instanceof UpstreamError) || err.status !== WireStatus.UNAVAILABLE) throw err;
        failure = err;
      }
      const inUse = idempotencyKey !== undefined && out?.status === 409 && out.body?.error === 'idempotency_key_in_use';
      if (out !== undefined && !inUse && !serviceCannotAnswer(out)) {
        if (attempt > 1) this.opts.log?.info({ action, tenant: tenantId, attempt }, 'the service answers again');
        return out;
      }
      // A kept-alive connection the server closed just now: the next attempt goes at once, on a new connection.
      const immediate = attempt === 1 && failure !== undefined;
      // An earlier attempt still being answered is waited for at least as long as one request may take.
      const left = (inUse ? Math.max(retryUntil, started + this.opts.timeoutMs) : retryUntil) - Date.now();
      if (!immediate && left <= 0) {
        if (!failure) return out as HttpOutcome;
        throw attempt > 1
          ? new UpstreamError(
              failure.status,
              `${failure.message} (sent ${attempt} times over ${((Date.now() - started) / 1000).toFixed(1)} s)`,
              failure.requestId,
            )
          : failure;
      }
      if (attempt === 2) {
        this.opts.log?.warn(
          { action, tenant: tenantId, reason: failure?.message ?? `HTTP ${out?.status}`, retryWithinMs },
          'the service cannot answer; sending the request again until it can',
        );
      }
      const waitMs = immediate ? 0 : Math.min(inUse ? IN_PROGRESS_WAIT_MS : backoffMs, left);
      if (waitMs > 0) await new Promise((resolve) => setTimeout(resolve, waitMs));
      if (!immediate && !inUse) backoffMs = Math.min(backoffMs * 2, MAX_BACKOFF_MS);
    }
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
    extras: CallExtras = {},
  ): Promise<HttpOutcome> {
    const apiKey = this.apiKey(tenantId);
    let res: { status: number; requestId: string | undefined; text: string; logIndex?: number };
    try {
      res = await this.post(
        `${this.pathPrefix}v1/${action}`,
        apiKey,
        JSON.stringify({ action, tenant_id: tenantId, ...body }),
        extras,
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
    return {
      status: res.status,
      body: parsed,
      requestId,
      ...(res.logIndex !== undefined && { logIndex: res.logIndex }),
    };
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
    extras: CallExtras = {},
  ): Promise<{ status: number; requestId: string | undefined; text: string; logIndex?: number }> {
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
          ...(extras.idempotencyKey !== undefined && { 'idempotency-key': extras.idempotencyKey }),
          ...(extras.prefer !== undefined && { prefer: extras.prefer }),
        },
        body,
        signal: deadline.signal,
      });
      // Always read the body (an unread one would hold its connection), up to the limit.
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > (extras.maxAnswerBytes ?? MAX_ANSWER_BYTES)) {
          res.body.destroy();
          throw new AnswerTooLarge(extras.maxAnswerBytes ?? MAX_ANSWER_BYTES);
        }
        chunks.push(chunk);
      }
      const id = res.headers['x-request-id'];
      const text =
        chunks.length === 1 ? (chunks[0] as Buffer).toString('utf8') : Buffer.concat(chunks).toString('utf8');
      // Only logged by the daemon (the module's wire protocol has no field for it).
      const logIndex = Number(res.headers['signbridge-log-index'] ?? Number.NaN);
      return {
        status: res.statusCode,
        requestId: typeof id === 'string' ? id : undefined,
        text,
        ...(Number.isSafeInteger(logIndex) && logIndex >= 0 && { logIndex }),
      };
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

/** The Prefer header that asks for log proofs (docs/api.md): `wait-for-log[=witnessed][, wait=N]`. */
function waitForLogPreference(request: LogProofRequest): string {
  const wait = request.waitSeconds !== undefined ? `, wait=${request.waitSeconds}` : '';
  return `wait-for-log${request.witnessed ? '=witnessed' : ''}${wait}`;
}

/**
 * How long the daemon sends a signature again while the service cannot answer (service.retrySeconds). A
 * service restart takes a few seconds; 20 s of retries plus one 30 s attempt (service.timeoutSeconds) still answer
 * the module before its own 60 s wait for the daemon (SIGNBRIDGE_TIMEOUT) runs out.
 */
export const DEFAULT_RETRY_WITHIN_MS = 20_000;
/**
 * Connections to the service by default: enough for a service's several request workers (one connection is
 * served by one worker) and for the concurrent signers of a busy build host, without opening one per module thread.
 */
export const DEFAULT_CONNECTIONS = 16;
const FIRST_BACKOFF_MS = 100;
const MAX_BACKOFF_MS = 1000;
/** Wait before asking again about a signature the service is still answering (its Retry-After). */
const IN_PROGRESS_WAIT_MS = 1000;
