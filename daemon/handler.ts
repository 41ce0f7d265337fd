// Serves one decoded request: HELLO, LIST, SIGN, POLL. Transport-free (server.ts owns sockets), so tests and
// other transports can drive it directly. Every failure becomes an ERROR with a status the module can map.
import type { Logger } from 'pino';
import {
  algorithmInfo,
  algorithmsForKey,
  DIGEST_LENGTH,
  SIGNING_ALGORITHMS,
  type SigningAlgorithm,
} from '../src/crypto/algorithms.js';
import { EC_FIELD_BYTES, ecdsaDerToRaw } from './ecdsa.js';
import type { CatalogEntry, KeyCatalog } from './key-catalog.js';
import type { ErrorMessage, Hello, Poll, Request, Response, Sign, WireKey, WireToken } from './protocol/messages.js';
import { PROTOCOL_VERSION, WireStatus, type WireStatusCode } from './protocol/wire.js';
import { readSbom } from './sbom.js';
import type { SignContext, Upstream } from './upstream/upstream.js';
import { UpstreamError } from './upstream/upstream.js';

export const DAEMON_NAME = 'signbridge-daemon 0.1.0';

export interface HandlerOptions {
  catalog: KeyCatalog;
  upstream: Upstream;
  log: Logger;
  sbomMaxBytes: number;
}

/** Who is asking: from SO_PEERCRED, for logs and for resolving relative SBOM paths. */
export interface PeerInfo {
  pid: number;
  uid: number;
}

export function errorMessage(status: WireStatusCode, message: string, requestId?: string): ErrorMessage {
  return { type: 'ERROR', status, message, ...(requestId !== undefined && { requestId }) };
}

export class RequestHandler {
  private readonly opts: HandlerOptions;

  constructor(opts: HandlerOptions) {
    this.opts = opts;
  }

  async handle(request: Request, peer: PeerInfo): Promise<Response> {
    try {
      switch (request.type) {
        case 'HELLO':
          return this.hello(request);
        case 'LIST':
          return await this.list();
        case 'SIGN':
          return await this.sign(request, peer);
        case 'POLL':
          return this.poll(request);
      }
    } catch (err) {
      if (err instanceof UpstreamError) {
        this.opts.log.info(
          { request: request.type, status: err.toString(), requestId: err.requestId },
          'request failed',
        );
        return errorMessage(err.status, err.message, err.requestId);
      }
      this.opts.log.error({ err, request: request.type }, 'internal error');
      return errorMessage(WireStatus.INTERNAL, 'internal error in the signbridge daemon (see its log)');
    }
  }

  hello(request: Hello): Response {
    if (request.versionMin > PROTOCOL_VERSION || request.versionMax < PROTOCOL_VERSION) {
      return errorMessage(
        WireStatus.VERSION_UNSUPPORTED,
        `the daemon speaks protocol version ${PROTOCOL_VERSION}; the module asked for ${request.versionMin}..${request.versionMax}`,
      );
    }
    return { type: 'HELLO_OK', version: PROTOCOL_VERSION, server: DAEMON_NAME };
  }

  async list(): Promise<Response> {
    const { catalog } = this.opts;
    const results = await Promise.allSettled(catalog.tenantList.map((t) => catalog.current(t.tenantId)));
    const tokens: WireToken[] = [];
    for (const [i, tenant] of catalog.tenantList.entries()) {
      const result = results[i];
      if (result?.status === 'fulfilled') {
        tokens.push({ label: tenant.label, tenant: tenant.tenantId, keys: [wireKey(result.value)] });
        continue;
      }
      const err = result?.reason;
      // A tenant that is gone, or that these credentials may not use, is an empty token; anything that affects
      // every tenant (no service, bad credentials) fails the whole LIST so the user sees why.
      if (
        err instanceof UpstreamError &&
        (err.status === WireStatus.KEY_NOT_FOUND || err.status === WireStatus.FORBIDDEN)
      ) {
        this.opts.log.warn({ tenant: tenant.tenantId, status: err.toString() }, 'tenant listed without keys');
        tokens.push({ label: tenant.label, tenant: tenant.tenantId, keys: [] });
        continue;
      }
      throw err;
    }
    return { type: 'LIST_OK', tokens };
  }

  async sign(request: Sign, peer: PeerInfo): Promise<Response> {
    const { catalog, upstream, log } = this.opts;
    if (!(SIGNING_ALGORITHMS as readonly string[]).includes(request.algorithm)) {
      return errorMessage(WireStatus.ALGORITHM_INVALID, `unknown algorithm ${request.algorithm}`);
    }
    const algorithm = request.algorithm as SigningAlgorithm;
    let entry = await catalog.current(request.tenant);
    if (!entry.ckaId.equals(request.keyId)) {
      // Perhaps rotated since the cache was filled: look again before refusing.
      entry = await catalog.current(request.tenant, { refresh: true });
      if (!entry.ckaId.equals(request.keyId)) {
        return errorMessage(
          WireStatus.KEY_NOT_FOUND,
          `key ${request.keyId.toString('hex')} is not tenant ${request.tenant}'s current key ` +
            `(current: ${entry.key.keyId}, CKA_ID ${entry.ckaId.toString('hex')}); it was rotated away or never existed`,
        );
      }
    }
    const { keySpec } = entry.key;
    const allowed = algorithmsForKey(keySpec);
    if (!allowed.includes(algorithm)) {
      return errorMessage(
        WireStatus.ALGORITHM_INVALID,
        `a ${keySpec} key does not allow ${algorithm}; allowed: ${allowed.join(', ')}`,
      );
    }
    const info = algorithmInfo(algorithm);
    const expected = DIGEST_LENGTH[info.hash];
    if (request.digest.length !== expected) {
      return errorMessage(
        WireStatus.BAD_REQUEST,
        `${algorithm} needs a ${expected}-byte digest, got ${request.digest.length} bytes`,
      );
    }
    const context = this.context(request, peer);
    const result = await upstream.pkcs11Sign({
      tenantId: request.tenant,
      digest: request.digest,
      keySpec,
      pss: info.padding === 'pss',
      context,
    });
    if (result.kind === 'pending') {
      log.info({ tenant: request.tenant, requestId: result.requestId, status: result.status }, 'signature pending');
      return { type: 'SIGN_PENDING', requestId: result.requestId, status: result.status, message: result.message };
    }
    if (result.keyId !== entry.key.keyId) {
      // Rotated between our check and the signature: this signature is not from the key the module holds.
      catalog.invalidate(request.tenant);
      return errorMessage(
        WireStatus.KEY_NOT_FOUND,
        `tenant ${request.tenant}'s key was rotated during the request (signed by ${result.keyId}); list keys again`,
        result.requestId,
      );
    }
    if (result.algorithm !== algorithm) {
      return errorMessage(
        WireStatus.INTERNAL,
        `the service signed with ${result.algorithm}, not the requested ${algorithm}`,
        result.requestId,
      );
    }
    const signature = toPkcs11Signature(entry, algorithm, result.signature);
    log.info(
      { tenant: request.tenant, keyId: result.keyId, algorithm, requestId: result.requestId, pid: peer.pid },
      'signed',
    );
    return { type: 'SIGN_OK', signature, ...(result.requestId !== undefined && { requestId: result.requestId }) };
  }

  poll(request: Poll): Response {
    return errorMessage(
      WireStatus.INTERNAL,
      `POLL is not supported yet: the service has no approval workflow (request ${request.requestId} cannot be resumed)`,
      request.requestId,
    );
  }

  private context(request: Sign, peer: PeerInfo): SignContext {
    const ctx: SignContext = {};
    if (request.project !== undefined) ctx.project = request.project;
    if (request.environment !== undefined) ctx.environment = request.environment;
    if (request.artifactType !== undefined) ctx.artifactType = request.artifactType;
    if (request.artifactVersion !== undefined) ctx.artifactVersion = request.artifactVersion;
    if (request.sbomPath !== undefined) ctx.sbom = readSbom(request.sbomPath, this.opts.sbomMaxBytes, peer.pid);
    return ctx;
  }
}

function wireKey(entry: CatalogEntry): WireKey {
  return {
    keyId: entry.ckaId,
    label: entry.key.keyId,
    keySpec: entry.key.keySpec,
    publicKey: entry.spki,
    ...(entry.certs.certificate !== undefined && { certificate: entry.certs.certificate }),
    chain: entry.certs.chain,
  };
}

/** RSA: the modulus-sized value (left-padded if the service trimmed it); ECDSA: fixed-width r||s. */
function toPkcs11Signature(entry: CatalogEntry, algorithm: SigningAlgorithm, signature: Buffer): Buffer {
  const bad = (why: string) => new UpstreamError(WireStatus.INTERNAL, `the service's signature is unusable: ${why}`);
  if (algorithmInfo(algorithm).padding === 'ecdsa') {
    const field = EC_FIELD_BYTES[entry.key.keySpec];
    if (!field) throw bad(`no curve size for ${entry.key.keySpec}`);
    try {
      return ecdsaDerToRaw(signature, field);
    } catch (err) {
      throw bad((err as Error).message);
    }
  }
  const modulusBytes = modulusLength(entry);
  if (signature.length > modulusBytes) throw bad(`${signature.length} bytes for a ${modulusBytes}-byte modulus`);
  if (signature.length === modulusBytes) return signature;
  return Buffer.concat([Buffer.alloc(modulusBytes - signature.length), signature]);
}

function modulusLength(entry: CatalogEntry): number {
  const bits = { RSA_2048: 2048, RSA_3072: 3072, RSA_4096: 4096 }[entry.key.keySpec as 'RSA_2048'];
  return (bits ?? 0) / 8;
}
