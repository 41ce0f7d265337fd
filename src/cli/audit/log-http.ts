// The service's transparency-log endpoints (GET /log/...), fetched and sorted into what the user acts on: a service
// that could not answer (try again), a service that refused or has nothing (its ErrorResponse), or a body. Nothing
// here trusts a body: the verifier (src/transparency/verify/) does, against the key the user gave.
import type { ApiKeySource } from '../../../daemon/credentials.js';
import { USER_AGENT } from '../login/service-http.js';

/** The service did not answer, or said it cannot now (5xx, 408, 429): the same command may work later. */
export class LogUnavailableError extends Error {}
/** The service answered with an error of its own (refused key, unknown entry, bad request). */
export class LogServiceError extends Error {
  constructor(
    message: string,
    readonly status: number,
  ) {
    super(message);
  }
}

/** Far above a proof (~3 KB) or a checkpoint; a body this big is not one. */
const MAX_BODY_BYTES = 1024 * 1024;

export interface LogHttpOptions {
  base: URL;
  /** Undefined: no Authorization header (a public log). */
  apiKey: ApiKeySource | undefined;
  timeoutMs: number;
}

/** An entry by its index (and a batch's signature by its item), or a signature or digest the service looks up. */
export type InclusionQuery = { index: number; item?: number } | { signatureSha256: string } | { digest: string };

export class LogHttp {
  constructor(private readonly opts: LogHttpOptions) {}

  get origin(): string {
    return this.opts.base.origin;
  }

  /** The bytes as sent: a note is verified byte for byte (a decoder that replaced bad UTF-8 would hide it). */
  checkpoint(): Promise<Buffer> {
    return this.get('log/checkpoint', {}, 'text');
  }

  async publicKey(): Promise<string> {
    return (await this.get('log/public-key', {}, 'text')).toString('utf8');
  }

  async inclusion(query: InclusionQuery, treeSize?: number): Promise<unknown> {
    const params: Record<string, string> =
      'index' in query
        ? { index: String(query.index), ...(query.item !== undefined && { item: String(query.item) }) }
        : 'signatureSha256' in query
          ? { signature_sha256: query.signatureSha256 }
          : { digest: query.digest };
    if (treeSize !== undefined) params.tree_size = String(treeSize);
    return JSON.parse((await this.get('log/proof/inclusion', params, 'json')).toString('utf8'));
  }

  async consistency(from: number, to: number): Promise<unknown> {
    const body = await this.get('log/proof/consistency', { from: String(from), to: String(to) }, 'json');
    return JSON.parse(body.toString('utf8'));
  }

  private async get(path: string, params: Record<string, string>, kind: 'text' | 'json'): Promise<Buffer> {
    const url = new URL(path, this.opts.base);
    for (const [k, v] of Object.entries(params)) url.searchParams.set(k, v);
    const headers: Record<string, string> = {
      accept: kind === 'json' ? 'application/json' : 'text/plain',
      'user-agent': USER_AGENT,
    };
    if (this.opts.apiKey) headers.authorization = `Bearer ${this.opts.apiKey.get()}`;
    const what = `GET /${path}`;
    let res: Response;
    let body: Buffer;
    try {
      // A redirect would carry the Bearer key elsewhere.
      res = await fetch(url, { headers, redirect: 'error', signal: AbortSignal.timeout(this.opts.timeoutMs) });
      body = await readCapped(res);
    } catch (err) {
      if (err instanceof LogServiceError) throw err;
      const e = err as Error & { cause?: { code?: string; message?: string } };
      const detail =
        e.name === 'TimeoutError'
          ? `no answer within ${this.opts.timeoutMs} ms`
          : (e.cause?.code ?? e.cause?.message ?? e.message);
      throw new LogUnavailableError(`${what}: ${this.origin} unreachable (${detail})`);
    }
    if (res.status === 200) {
      if (kind === 'json') {
        try {
          JSON.parse(body.toString('utf8'));
        } catch {
          throw new LogServiceError(`${what}: the answer is not JSON`, res.status);
        }
      }
      return body;
    }
    const reason = describeError(res.status, body);
    if (res.status >= 500 || res.status === 408 || res.status === 429) {
      throw new LogUnavailableError(`${what}: ${reason}`);
    }
    throw new LogServiceError(`${what}: ${reason}`, res.status);
  }
}

async function readCapped(res: Response): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  if (!res.body) return Buffer.alloc(0);
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    total += chunk.length;
    if (total > MAX_BODY_BYTES) throw new LogServiceError(`answer larger than ${MAX_BODY_BYTES} bytes`, res.status);
    chunks.push(Buffer.from(chunk));
  }
  return Buffer.concat(chunks);
}

/** "error: reason" from an ErrorResponse, else the HTTP status. */
function describeError(status: number, body: Buffer): string {
  try {
    const v = JSON.parse(body.toString('utf8')) as { error?: unknown; reason?: unknown };
    if (typeof v.error === 'string')
      return `HTTP ${status} ${v.error}: ${typeof v.reason === 'string' ? v.reason : ''}`;
  } catch {
    // not an ErrorResponse (a proxy's page)
  }
  return `HTTP ${status}`;
}
