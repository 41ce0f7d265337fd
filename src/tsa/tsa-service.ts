// The time-stamping authority as the service runs it (docs/tsa.md): a query in, a TimeStampResp out. It ties the
// DER core (timestamp-request.ts, timestamp-response.ts) to the store (identities, serial blocks, the audit log),
// the key stores (the TSA key signs like any other key) and the clock check (clock-trust.ts).
//
// Rules that matter to a relying party:
// - A token is handed out only after its audit entry is committed (the same rule as signatures), so every token
//   in the world has an entry in the log.
// - genTime comes from this host's clock, and only while the clock check trusts it. A step of the wall clock
//   against the monotonic clock (≥ 1 s) is audited (CA/B Code Signing BRs §6.8); after a step back, no token is
//   issued until the clock is past the latest genTime this process stated, so genTimes never go back.
// - Serials are (counter << 64) | 64 random bits; counters come from blocks each instance reserves in the store.
import { randomBytes, X509Certificate } from 'node:crypto';
import { ApiError } from '../errors.js';
import type { KeyStores } from '../keys/key-store.js';
import type { AuditEntryInput, Store } from '../store/store.js';
import type { TsaIdentityRecord } from '../store/tsa/tsa-store.js';
import type { ClockTrust } from './clock-trust.js';
import { parseTimeStampRequest, type TimeStampRequest } from './timestamp-request.js';
import {
  buildGrantedResponse,
  buildRejectionResponse,
  type TsaAccuracy,
  type TsaIdentity,
} from './timestamp-response.js';

/** Counters per reserved block; a block unused when a process stops is a gap in the counters, which is fine. */
export const SERIAL_BLOCK_SIZE = 1000n;
/** How long an identity read from the store is used before it is read again (a chain installed meanwhile). */
const IDENTITY_TTL_MS = 10_000;
/** A wall-clock step at least this large is audited. */
const CLOCK_STEP_MS = 1000;

export interface TsaServiceSettings {
  policy: string;
  acceptedPolicies: readonly string[];
  accuracy: TsaAccuracy;
  tsaName: boolean;
}

export interface TsaRequester {
  address: string;
  /** The API key that called, when one did. */
  apiKeyId?: string;
}

interface LoadedIdentity {
  record: TsaIdentityRecord;
  signer: TsaIdentity;
  loadedAt: number;
}

interface SerialState {
  next: bigint;
  end: bigint;
}

/** PEM certificates in order, as DER. */
export function pemCertificates(pem: string): Buffer[] {
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  return blocks.map((block) => Buffer.from(new X509Certificate(block).raw));
}

function accuracyMs(accuracy: TsaAccuracy): number {
  return (accuracy.seconds ?? 0) * 1000 + (accuracy.millis ?? 0) + (accuracy.micros ?? 0) / 1000;
}

export class TsaService {
  private readonly identities = new Map<string, LoadedIdentity>();
  private readonly serials = new Map<string, SerialState>();
  private readonly reserving = new Map<string, Promise<void>>();
  /** The latest genTime this process stated (ms); none is ever stated before it. */
  private latestGenTime = 0;
  /** Date.now() − performance.now() when last looked: a change is a step of the wall clock. */
  private wallMinusMonotonic = Date.now() - performance.now();

  constructor(
    private readonly store: Store,
    private readonly keyStores: KeyStores,
    private readonly settings: TsaServiceSettings,
    readonly clock: ClockTrust,
    private readonly now: () => Date = () => new Date(),
  ) {}

  private inUseCache: { at: number; value: Promise<boolean> } | undefined;

  /** Whether any identity exists (read at most every IDENTITY_TTL_MS): /readyz weighs the clock only then. */
  inUse(): Promise<boolean> {
    if (!this.inUseCache || Date.now() - this.inUseCache.at >= IDENTITY_TTL_MS) {
      const value = this.store.tsa.listIdentities().then((all) => all.length > 0);
      value.catch(() => undefined);
      this.inUseCache = { at: Date.now(), value };
    }
    return this.inUseCache.value;
  }

  /** The identity's chain as PEM (TSA certificate first), for GET /tsa/chain.pem. */
  async chainPem(scope: string): Promise<string> {
    const identity = await this.identity(scope);
    return identity.record.chainPem as string;
  }

  /**
   * Answers one query: a DER TimeStampResp, granted or a rejection (HTTP 200 either way: RFC 3161 carries the
   * status inside). Throws ApiError 503 when no token may be issued now (clock, key store, store).
   */
  async timestamp(scope: string, query: Buffer, requester: TsaRequester): Promise<{ reply: Buffer; granted: boolean }> {
    // First: a TSA with no usable identity answers nothing, not even a rejection.
    const identity = await this.identity(scope);
    const parsed = parseTimeStampRequest(query, {
      defaultPolicy: this.settings.policy,
      acceptedPolicies: this.settings.acceptedPolicies,
    });
    if (!parsed.ok) {
      return { reply: buildRejectionResponse(parsed.refusal.failInfo, parsed.refusal.reason), granted: false };
    }
    const genTime = await this.trustedTime(scope);
    const serialNumber = await this.nextSerial(scope);
    const reply = await buildGrantedResponse(
      {
        request: parsed.request,
        policy: parsed.policy,
        serialNumber,
        genTime,
        accuracy: this.settings.accuracy,
        tsaName: this.settings.tsaName,
      },
      identity.signer,
    );
    // Committed before the token leaves: a token the log does not know of never exists outside.
    await this.store.audit.append(
      this.auditEntry(scope, parsed.request, parsed.policy, serialNumber, genTime, requester),
    );
    return { reply, granted: true };
  }

  private auditEntry(
    scope: string,
    request: TimeStampRequest,
    policy: string,
    serial: bigint,
    genTime: Date,
    requester: TsaRequester,
  ): AuditEntryInput {
    return {
      at: this.now().toISOString(),
      tenantId: scope === '' ? null : scope,
      actor: requester.apiKeyId ?? `address:${requester.address}`,
      action: 'timestamp',
      outcome: 'granted',
      details: {
        serial: serial.toString(16),
        policy,
        hash_algorithm: request.imprint.hash,
        imprint: request.imprint.hashedMessage.toString('base64'),
        gen_time: genTime.toISOString(),
        ...(request.nonce && { nonce: request.nonce.toString('hex') }),
        cert_req: request.certReq,
        requester_address: requester.address,
      },
    };
  }

  /** The time to state, or 503 time_source_unavailable. */
  private async trustedTime(scope: string): Promise<Date> {
    const verdict = this.clock.verdict;
    if (!verdict.trusted) {
      throw new ApiError('time_source_unavailable', `the clock is not trusted now: ${verdict.reason}; retry later`);
    }
    const now = this.now();
    const base = now.getTime() - performance.now();
    const step = base - this.wallMinusMonotonic;
    this.wallMinusMonotonic = base;
    if (Math.abs(step) >= CLOCK_STEP_MS) {
      // Audited (CA/B BRs §6.8), and checked again at once: a step can mean the time source changed.
      void this.clock.refresh();
      await this.store.audit
        .append({
          at: now.toISOString(),
          tenantId: scope === '' ? null : scope,
          actor: 'service',
          action: 'tsa_clock_step',
          outcome: step < 0 ? 'stepped_back' : 'stepped_forward',
          details: { step_ms: Math.round(step) },
        })
        .catch(() => undefined);
    }
    if (now.getTime() + accuracyMs(this.settings.accuracy) < this.latestGenTime) {
      throw new ApiError(
        'time_source_unavailable',
        `the clock went back behind a time already stated (${new Date(this.latestGenTime).toISOString()}); tokens resume when it is past it`,
      );
    }
    this.latestGenTime = Math.max(this.latestGenTime, now.getTime());
    return now;
  }

  private async identity(scope: string): Promise<LoadedIdentity> {
    const cached = this.identities.get(scope);
    if (cached && Date.now() - cached.loadedAt < IDENTITY_TTL_MS) return cached;
    const record = await this.store.tsa.getIdentity(scope);
    const where = scope === '' ? '' : ` --tenant ${scope}`;
    if (!record) {
      this.identities.delete(scope);
      throw new ApiError(
        'tsa_not_configured',
        scope === ''
          ? 'this service has no time-stamping identity; an operator runs `signbridge tsa init`'
          : `tenant ${scope} has no time-stamping identity; an operator runs \`signbridge tsa init${where}\``,
      );
    }
    if (record.chainPem === null) {
      throw new ApiError(
        'tsa_not_configured',
        `the time-stamping key waits for its certificate; an operator runs \`signbridge tsa cert import${where} --chain FILE\``,
      );
    }
    const [certificate, ...chain] = pemCertificates(record.chainPem);
    if (!certificate) throw new ApiError('tsa_not_configured', 'the stored TSA chain holds no certificate');
    const keyStore = this.keyStores.forKey(record.keyStore);
    const loaded: LoadedIdentity = {
      record,
      loadedAt: Date.now(),
      signer: {
        certificate,
        chain,
        algorithm: record.algorithm,
        sign: (digest, algorithm) => keyStore.sign(record.keyRef, record.keySpec, algorithm, digest),
      },
    };
    this.identities.set(scope, loaded);
    return loaded;
  }

  private async nextSerial(scope: string): Promise<bigint> {
    for (;;) {
      const state = this.serials.get(scope);
      if (state && state.next <= state.end) {
        const counter = state.next++;
        return (counter << 64n) | BigInt(`0x${randomBytes(8).toString('hex')}`);
      }
      // One reservation at a time per scope; the others wait for it and then take from the new block.
      let reserving = this.reserving.get(scope);
      if (!reserving) {
        reserving = this.reserveBlock(scope).finally(() => this.reserving.delete(scope));
        this.reserving.set(scope, reserving);
      }
      await reserving;
    }
  }

  private async reserveBlock(scope: string): Promise<void> {
    const block = await this.store.tsa.reserveSerialBlock(scope);
    if (block === undefined) throw new ApiError('tsa_not_configured', 'the time-stamping identity was removed');
    // Block b (from 1) covers counters (b-1)*size+1 .. b*size.
    this.serials.set(scope, { next: (block - 1n) * SERIAL_BLOCK_SIZE + 1n, end: block * SERIAL_BLOCK_SIZE });
  }
}
