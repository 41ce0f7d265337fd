// Serves one decoded request: HELLO, LIST, SIGN, POLL. Transport-free (server.ts owns sockets), so tests and
// other transports can drive it directly. Every failure becomes an ERROR with a status the module can map.
import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import {
  algorithmInfo,
  algorithmsForKey,
  EC_FIELD_BYTES,
  ED25519_MAX_MESSAGE_BYTES,
  inputLength,
  type KeySpec,
  keyInfo,
  SIGNING_ALGORITHMS,
  type SigningAlgorithm,
} from '../src/crypto/algorithms.js';
import { ecdsaDerToRaw } from '../src/crypto/der.js';
import type {
  ErrorMessage,
  Hello,
  ImportCertificates,
  Poll,
  Request,
  Response,
  Sign,
  WireKey,
  WireToken,
} from '../wire/messages.js';
import {
  MESSAGE_SIGNING_VERSION,
  PROTOCOL_VERSION,
  PROTOCOL_VERSION_MIN,
  WireStatus,
  type WireStatusCode,
} from '../wire/wire.js';
import { CertificateChainError, type CertificateStore, checkChain } from './certificate-store.js';
import type { CatalogEntry, KeyCatalog } from './key-catalog.js';
import type { LogProofKeeper } from './log-proofs.js';
import { readSbom } from './sbom.js';
import { leftOutOfToken } from './token-keys.js';
import type { SignContext, SignResult, Upstream } from './upstream/upstream.js';
import { UpstreamError } from './upstream/upstream.js';

export const DAEMON_NAME = 'signbridge-daemon 0.1.0';

export interface HandlerOptions {
  catalog: KeyCatalog;
  upstream: Upstream;
  log: Logger;
  sbomMaxBytes: number;
  /** Where IMPORT_CERTIFICATES stores chains; without it, imports are refused. */
  certificateStore?: CertificateStore;
  /** How long a POLL may wait for a decision before answering "still pending" (default 5 s). */
  approvalWaitMs?: number;
  /** Interval between looks at the service while a POLL waits (default 1 s). */
  pollIntervalMs?: number;
  /** Keeps each signature's log proof where its tenant asks for it (log-proofs.ts). */
  logProofs?: LogProofKeeper;
}

/**
 * What the daemon knows about the SIGN behind a signature: all of it for its own SIGNs, only the tenant after a
 * restart (POLL carries the digest, so a restarted daemon can still collect; see finish()).
 */
interface Asked {
  tenant: string;
  digest?: Buffer;
  keySpec?: KeySpec;
  /** The service key id the module signed with. */
  keyId?: string;
  algorithm?: SigningAlgorithm;
}

const ED25519_SIGNATURE_BYTES = 64;

/** Pending requests remembered at most; the oldest is forgotten first. */
const MAX_PENDING = 10_000;

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
  /** Pending requests by id; several SIGNs share one id when the daemon sent them as one batch (held whole). */
  private readonly pending = new Map<string, Asked[]>();

  constructor(opts: HandlerOptions) {
    this.opts = opts;
  }

  /** `version`: what HELLO chose on the request's connection (a version 1 module is shown no Ed25519 key). */
  async handle(request: Request, peer: PeerInfo, version = PROTOCOL_VERSION): Promise<Response> {
    try {
      switch (request.type) {
        case 'HELLO':
          return this.hello(request);
        case 'LIST':
          return await this.list(version);
        case 'SIGN':
          return await this.sign(request, peer, version);
        case 'POLL':
          return await this.poll(request, peer);
        case 'IMPORT_CERTIFICATES':
          return await this.importCertificates(request, peer);
      }
    } catch (err) {
      if (err instanceof UpstreamError) {
        this.opts.log.info(
          { request: request.type, status: err.toString(), requestId: err.requestId },
          'request failed',
        );
        // The service refused a key rotated away since the module listed it: the next LIST reads the new one.
        if (err.status === WireStatus.KEY_CHANGED && request.type === 'SIGN')
          this.opts.catalog.invalidate(request.tenant);
        return errorMessage(err.status, err.message, err.requestId);
      }
      this.opts.log.error({ err, request: request.type }, 'internal error');
      return errorMessage(WireStatus.INTERNAL, 'internal error in the signbridge daemon (see its log)');
    }
  }

  /** HELLO: the highest version both sides speak (docs/wire-protocol.md, "Versions"). */
  hello(request: Hello): Response {
    const version = Math.min(request.versionMax, PROTOCOL_VERSION);
    if (request.versionMin > request.versionMax || version < Math.max(request.versionMin, PROTOCOL_VERSION_MIN)) {
      return errorMessage(
        WireStatus.VERSION_UNSUPPORTED,
        `the daemon speaks protocol versions ${PROTOCOL_VERSION_MIN}..${PROTOCOL_VERSION}; the module asked for ` +
          `${request.versionMin}..${request.versionMax}`,
      );
    }
    return { type: 'HELLO_OK', version, server: DAEMON_NAME };
  }

  async list(version = PROTOCOL_VERSION): Promise<Response> {
    const { catalog, log } = this.opts;
    const results = await Promise.allSettled(catalog.tenantList.map((t) => catalog.current(t.tenantId)));
    // A failure that hits every tenant (no service, the one shared key revoked) fails the whole LIST, so the user
    // sees why; a tenant that is gone or that these credentials may not use is always just its own empty token.
    const failures = results.filter((r) => r.status === 'rejected').map((r) => r.reason as unknown);
    const ownFailure = (err: unknown) =>
      err instanceof UpstreamError && (err.status === WireStatus.KEY_NOT_FOUND || err.status === WireStatus.FORBIDDEN);
    if (results.length > 0 && failures.length === results.length && !failures.every(ownFailure)) {
      throw failures.find((err) => !ownFailure(err));
    }
    // Otherwise each failing tenant (its own key revoked, its call timed out) is a token without keys that says
    // why, and every other tenant is listed as usual.
    const tokens: WireToken[] = [];
    for (const [i, tenant] of catalog.tenantList.entries()) {
      const result = results[i];
      if (result?.status === 'fulfilled') {
        const leftOut = leftOutOfToken(result.value.key, version);
        if (leftOut) {
          log.warn(
            { tenant: tenant.tenantId, keyId: result.value.key.keyId, reason: leftOut },
            'key left out of token',
          );
          tokens.push({ label: tenant.label, tenant: tenant.tenantId, keys: [], message: leftOut });
          continue;
        }
        tokens.push({ label: tenant.label, tenant: tenant.tenantId, keys: [wireKey(result.value)] });
        continue;
      }
      const err = result?.reason as unknown;
      const failure =
        err instanceof UpstreamError
          ? err
          : new UpstreamError(WireStatus.INTERNAL, 'internal error in the signbridge daemon (see its log)');
      if (!(err instanceof UpstreamError)) log.error({ err, tenant: tenant.tenantId }, 'internal error');
      log.warn({ tenant: tenant.tenantId, status: failure.toString() }, 'tenant listed without keys');
      tokens.push({
        label: tenant.label,
        tenant: tenant.tenantId,
        keys: [],
        status: failure.status,
        message: failure.message,
      });
    }
    return { type: 'LIST_OK', tokens };
  }

  async sign(request: Sign, peer: PeerInfo, version = PROTOCOL_VERSION): Promise<Response> {
    const { catalog, upstream, log } = this.opts;
    if (!(SIGNING_ALGORITHMS as readonly string[]).includes(request.algorithm)) {
      return errorMessage(WireStatus.ALGORITHM_INVALID, `unknown algorithm ${request.algorithm}`);
    }
    const algorithm = request.algorithm as SigningAlgorithm;
    const messageRefusal = checkMessageInput(request, algorithm, version);
    if (messageRefusal) return messageRefusal;
    let entry = await catalog.current(request.tenant, { staleOnOutage: true });
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
    const expected = request.data === undefined ? inputLength(algorithm) : request.digest.length;
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
      ...(request.data !== undefined && { message: request.data }),
      keySpec,
      pss: algorithmInfo(algorithm).padding === 'pss',
      // The key the module holds: rotated before the service signs, it signs nothing (key_changed, KEY_CHANGED).
      keyId: entry.key.keyId,
      context,
    });
    const asked: Asked = { tenant: request.tenant, digest: request.digest, keySpec, keyId: entry.key.keyId, algorithm };
    if (result.kind === 'pending') {
      log.info({ tenant: request.tenant, requestId: result.requestId, status: result.status }, 'signature pending');
      this.remember(result.requestId, asked);
      return this.pendingAnswer(result.requestId, result.status, result.message, result.approveUrl);
    }
    return this.finish(asked, result, peer);
  }

  /**
   * Registers a chain for the tenant's current key (`signbridge cert import`). The key is looked up afresh, so a
   * chain for a key rotated away is refused rather than stored under a key no module will show.
   */
  async importCertificates(request: ImportCertificates, peer: PeerInfo): Promise<Response> {
    const { catalog, log, certificateStore } = this.opts;
    if (!certificateStore) {
      return errorMessage(
        WireStatus.BAD_REQUEST,
        'this daemon has no certificate folder; certificates cannot be imported',
      );
    }
    const entry = await catalog.current(request.tenant, { refresh: true });
    const configured = entry.tenant.certificates[entry.key.keyId];
    if (configured) {
      return errorMessage(
        WireStatus.BAD_REQUEST,
        `the daemon's configuration names ${configured} for key ${entry.key.keyId}; change that file instead ` +
          '(a configured file wins over imported certificates)',
      );
    }
    let certs: ReturnType<typeof checkChain>;
    try {
      certs = checkChain(request.certificate, request.chain, entry.spki);
    } catch (err) {
      if (err instanceof CertificateChainError) {
        return errorMessage(WireStatus.BAD_REQUEST, `tenant ${request.tenant}, key ${entry.key.keyId}: ${err.message}`);
      }
      throw err;
    }
    const path = certificateStore.save(request.tenant, entry.key.keyId, certs);
    catalog.invalidate(request.tenant);
    const leaf = certs[0] as (typeof certs)[number];
    log.info(
      { tenant: request.tenant, keyId: entry.key.keyId, subject: leaf.subject, chain: certs.length - 1, pid: peer.pid },
      'certificates imported',
    );
    return {
      type: 'IMPORT_OK',
      keyId: entry.ckaId,
      label: entry.key.keyId,
      message:
        `leaf ${leaf.subject.split('\n').join(', ')} (valid until ${leaf.validTo}) and ${certs.length - 1} ` +
        `intermediate(s) stored in ${path}`,
    };
  }

  /** Checks a signature from the service against what was asked, and puts it in PKCS#11 form. */
  private finish(asked: Asked, result: Extract<SignResult, { kind: 'signed' }>, peer: PeerInfo): Response {
    const { catalog, log } = this.opts;
    if (asked.keyId !== undefined && result.keyId !== asked.keyId) {
      // Rotated between our check and the signature: this signature is not from the key the module holds.
      catalog.invalidate(asked.tenant);
      return errorMessage(
        WireStatus.KEY_NOT_FOUND,
        `tenant ${asked.tenant}'s key was rotated during the request (signed by ${result.keyId}); list keys again`,
        result.requestId,
      );
    }
    if (asked.algorithm !== undefined && result.algorithm !== asked.algorithm) {
      return errorMessage(
        WireStatus.INTERNAL,
        `the service signed with ${result.algorithm}, not the requested ${asked.algorithm}`,
        result.requestId,
      );
    }
    if (!(SIGNING_ALGORITHMS as readonly string[]).includes(result.algorithm)) {
      return errorMessage(WireStatus.INTERNAL, `the service signed with unknown algorithm ${result.algorithm}`);
    }
    const signature = toPkcs11Signature(asked.keySpec, result.algorithm, result.signature);
    log.info(
      {
        tenant: asked.tenant,
        keyId: result.keyId,
        algorithm: result.algorithm,
        requestId: result.requestId,
        logIndex: result.logIndex,
        pid: peer.pid,
      },
      'signed',
    );
    this.opts.logProofs?.keep(asked.tenant, result.logIndex, result.signature, signature);
    return { type: 'SIGN_OK', signature, ...(result.requestId !== undefined && { requestId: result.requestId }) };
  }

  /**
   * Collects a pending signature. Waits up to approvalWaitMs for a decision, looking at the service every
   * pollIntervalMs, so that a module polling in a loop is not busy; then answers SIGN_PENDING.
   */
  async poll(request: Poll, peer: PeerInfo): Promise<Response> {
    const askers = this.pending.get(request.requestId);
    const remembered = askers?.find((a) => a.tenant === request.tenant && a.digest?.equals(request.digest));
    if (askers && !remembered) {
      return errorMessage(
        WireStatus.BAD_REQUEST,
        `POLL for ${request.requestId} names another tenant or digest than the SIGN that went pending`,
        request.requestId,
      );
    }
    // Not remembered (the daemon restarted since the SIGN): the service still has the request, and checks the digest.
    if (!remembered && !this.opts.catalog.tenant(request.tenant)) {
      return errorMessage(WireStatus.KEY_NOT_FOUND, `tenant ${request.tenant} is not exposed by this daemon`);
    }
    const asked: Asked = remembered ?? { tenant: request.tenant };
    const wait = this.opts.approvalWaitMs ?? 5_000;
    const interval = Math.max(1, this.opts.pollIntervalMs ?? 1_000);
    const deadline = Date.now() + wait;
    for (;;) {
      let result: SignResult;
      try {
        result = await this.opts.upstream.collect({
          tenantId: request.tenant,
          requestId: request.requestId,
          digest: request.digest,
        });
      } catch (err) {
        // Rejected, expired or denied at approval: final, forget it. A network failure: the module may poll again.
        if (
          err instanceof UpstreamError &&
          err.status !== WireStatus.UNAVAILABLE &&
          err.status !== WireStatus.TIMEOUT
        ) {
          this.forget(request.requestId, remembered);
          this.opts.log.info(
            { requestId: request.requestId, httpRequestId: err.requestId, status: err.toString() },
            'pending request ended',
          );
          throw new UpstreamError(err.status, err.message, request.requestId);
        }
        throw err;
      }
      if (result.kind === 'signed') {
        this.forget(request.requestId, remembered);
        const requestId = result.requestId ?? request.requestId;
        // After a restart the key spec comes from the key that signed: the algorithm does not name the curve
        // (an EC key signs every SHA-2 digest), and r||s is as wide as the curve's field.
        asked.keySpec ??= await this.keySpecOf(request.tenant, result.keyId, requestId);
        return this.finish(asked, { ...result, requestId }, peer);
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        return this.pendingAnswer(request.requestId, result.status, result.message, result.approveUrl);
      }
      await new Promise((resolve) => setTimeout(resolve, Math.min(interval, left)));
    }
  }

  /** The spec of the tenant's key `keyId`, which must be its current key (a module holds no other). */
  private async keySpecOf(tenant: string, keyId: string, requestId: string): Promise<KeySpec> {
    const { catalog } = this.opts;
    let entry = await catalog.current(tenant);
    if (entry.key.keyId !== keyId) entry = await catalog.current(tenant, { refresh: true });
    if (entry.key.keyId !== keyId) {
      throw new UpstreamError(
        WireStatus.KEY_NOT_FOUND,
        `request ${requestId} was signed by ${keyId}, which is no longer tenant ${tenant}'s current key; sign again`,
        requestId,
      );
    }
    return entry.key.keySpec;
  }

  /** SIGN_PENDING, naming where to approve: the service's own page for it (its public URL), else one under the URL
   * this daemon reaches the service at. */
  private pendingAnswer(requestId: string, status: string, message: string, approveUrl?: string): Response {
    const consoleUrl = approveUrl ?? this.opts.upstream.consoleUrlFor?.(requestId);
    return { type: 'SIGN_PENDING', requestId, status, message, ...(consoleUrl !== undefined && { consoleUrl }) };
  }

  private remember(requestId: string, pending: Asked): void {
    if (this.pending.size >= MAX_PENDING) {
      const oldest = this.pending.keys().next().value;
      if (oldest !== undefined) this.pending.delete(oldest);
    }
    const askers = this.pending.get(requestId);
    if (askers) askers.push(pending);
    else this.pending.set(requestId, [pending]);
  }

  private forget(requestId: string, asked: Asked | undefined): void {
    const askers = this.pending.get(requestId);
    const left = askers?.filter((a) => a !== asked) ?? [];
    if (left.length > 0) this.pending.set(requestId, left);
    else this.pending.delete(requestId);
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

/**
 * SIGN's DATA (version 2): the message pure Ed25519 signs, with DIGEST its SHA-512 (what the service records). Only
 * ED25519_SHA_512 carries it and needs it; undefined when the request is consistent, else the ERROR to answer.
 */
function checkMessageInput(request: Sign, algorithm: SigningAlgorithm, version: number): ErrorMessage | undefined {
  const signsMessage = algorithmInfo(algorithm).hash === 'message';
  if (request.data === undefined) {
    if (!signsMessage) return undefined;
    return errorMessage(
      WireStatus.BAD_REQUEST,
      `${algorithm} is pure Ed25519 and signs the message itself, which this SIGN does not carry (DATA)`,
    );
  }
  if (version < MESSAGE_SIGNING_VERSION) {
    return errorMessage(
      WireStatus.BAD_REQUEST,
      `SIGN carries DATA, which protocol version ${version} (this connection's) does not have; it came in version ` +
        `${MESSAGE_SIGNING_VERSION}`,
    );
  }
  if (!signsMessage) {
    return errorMessage(WireStatus.BAD_REQUEST, `${algorithm} signs a digest; only ED25519_SHA_512 carries DATA`);
  }
  if (request.data.length > ED25519_MAX_MESSAGE_BYTES) {
    return errorMessage(
      WireStatus.BAD_REQUEST,
      `${algorithm} signs at most ${ED25519_MAX_MESSAGE_BYTES} bytes of message, got ${request.data.length}`,
    );
  }
  if (!createHash('sha512').update(request.data).digest().equals(request.digest)) {
    return errorMessage(WireStatus.BAD_REQUEST, `DIGEST is not the SHA-512 of DATA (${algorithm})`);
  }
  return undefined;
}

function wireKey(entry: CatalogEntry): WireKey {
  return {
    keyId: entry.ckaId,
    label: entry.key.keyId,
    keySpec: entry.key.keySpec,
    publicKey: entry.spki,
    ...(entry.certs.certificate !== undefined && { certificate: entry.certs.certificate }),
    chain: entry.certs.chain,
    ...(entry.rawPublicKey && { rawPublicKey: entry.rawPublicKey }),
  };
}

/**
 * RSA: the modulus-sized value (left-padded if the service trimmed it); ECDSA: fixed-width r||s, as wide as the
 * key's curve (not the algorithm's hash: an EC key signs every SHA-2 digest); Ed25519: its 64 bytes; ML-DSA: the raw signature, exactly as
 * long as the parameter set makes it (2,420 / 3,309 / 4,627 bytes). Without the key spec an RSA or ML-DSA signature
 * is taken as it is (the module checks its length).
 */
function toPkcs11Signature(keySpec: KeySpec | undefined, algorithm: SigningAlgorithm, signature: Buffer): Buffer {
  const bad = (why: string) => new UpstreamError(WireStatus.INTERNAL, `the service's signature is unusable: ${why}`);
  const { padding } = algorithmInfo(algorithm);
  if (padding === 'sm2') throw bad('SM2 signatures are not offered through PKCS#11');
  if (padding === 'ed25519' || padding === 'ed25519ph') {
    // RFC 8032's R || S, as CKM_EDDSA returns it.
    if (signature.length !== ED25519_SIGNATURE_BYTES) {
      throw bad(`${signature.length} bytes; an Ed25519 signature has ${ED25519_SIGNATURE_BYTES}`);
    }
    return signature;
  }
  if (padding === 'ml-dsa') {
    const info = keySpec && keyInfo(keySpec);
    if (!info) return signature;
    if (info.family !== 'ml-dsa') throw bad(`${keySpec} is not an ML-DSA key`);
    if (signature.length !== info.signatureBytes) {
      throw bad(`${signature.length} bytes; an ${keySpec} signature has ${info.signatureBytes}`);
    }
    return signature;
  }
  if (padding === 'ecdsa') {
    const info = keySpec && keyInfo(keySpec);
    if (!info || info.family !== 'ec') throw bad(`no curve size for ${keySpec ?? 'an unknown key'}`);
    try {
      return ecdsaDerToRaw(signature, EC_FIELD_BYTES[info.curve]);
    } catch (err) {
      throw bad((err as Error).message);
    }
  }
  if (keySpec === undefined) return signature;
  const info = keyInfo(keySpec);
  if (info.family !== 'rsa') throw bad(`${keySpec} is not an RSA key`);
  const modulusBytes = info.bits / 8;
  if (signature.length > modulusBytes) throw bad(`${signature.length} bytes for a ${modulusBytes}-byte modulus`);
  if (signature.length === modulusBytes) return signature;
  return Buffer.concat([Buffer.alloc(modulusBytes - signature.length), signature]);
}
