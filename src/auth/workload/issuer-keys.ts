// The signing keys of the CI issuers a tenant trusts: OpenID discovery, then the JWKS, fetched by us (not jose's
// createRemoteJWKSet) so that caching is ours: keys stay usable while the issuer is down (jose's remote set fails
// every verification once its cache is 10 minutes old and a refetch fails), an unknown `kid` refetches at most once
// per floor, and every outbound request goes through the checks below. docs/ci.md, "The exchange".
//
// Outbound safety (the issuer URL comes from a tenant admin's trust rule, so it may point anywhere): https only, no
// redirects, a time-out and a size limit; the host is resolved once, every address is checked against loopback,
// private, link-local and other special ranges (refused unless `workload.allow` lists the host or a CIDR holding
// the address), and the connection goes to the checked address (a custom `lookup`), so a second DNS answer cannot
// switch it (DNS rebinding). The TLS name checked is still the issuer's host. Those rules live in
// src/net/outbound-request.ts (webhooks use them too); this file words their refusals for the token exchange.
import { createLocalJWKSet, type JSONWebKeySet, type JWSHeaderParameters, type KeyInput } from 'jose';
import {
  AnswerTooLarge,
  DestinationRefused,
  DestinationUnreachable,
  type OutboundAnswer,
  OutboundPolicy,
  TlsFailed,
} from '../../net/outbound-request.js';

/** The issuer cannot be reached or answers with a server error: 503 temporarily_unavailable, retry later. */
export class IssuerUnreachable extends Error {}
/** The issuer (or its address) is not one the service may use, or it answers nonsense: invalid_grant, no retry. */
export class IssuerRefused extends Error {}
/** No key of the issuer fits the token's header: invalid_grant. */
export class NoMatchingKey extends Error {}

export interface IssuerKeySettings {
  /** Hosts and CIDRs that may resolve to special-use addresses (workload.allow). */
  allow: readonly string[];
  /** Extra PEM trust anchors (workload.caFile's contents), added to Node's built-in roots. */
  extraCaPem?: string;
  /** Per request (default 5 s). */
  timeoutMs?: number;
  /** Largest discovery or JWKS document (default 256 KiB). */
  maxBytes?: number;
  /** Least time between two fetches of one issuer's keys for an unknown kid (default 30 s). */
  refetchFloorMs?: number;
  /** Keys older than this are refreshed when next used; a failed refresh keeps them (default 10 min). */
  refreshAfterMs?: number;
  /** Keys older than this are no longer used, whether or not the issuer can be reached (default 24 h). */
  maxKeyAgeMs?: number;
}

interface CachedKeys {
  jwks: JSONWebKeySet;
  keys: ReturnType<typeof createLocalJWKSet>;
  fetchedAtMs: number;
}

/** What verification of one token needs: the key for its header (jose's getKey). */
export type KeyForHeader = (header: JWSHeaderParameters) => Promise<KeyInput>;

export class IssuerKeys {
  private readonly cache = new Map<string, CachedKeys>();
  /** When each issuer's keys were last fetched or tried (success or not): the floor counts from here. */
  private readonly lastAttemptMs = new Map<string, number>();
  /** One fetch at a time per issuer: concurrent exchanges share it. */
  private readonly inFlight = new Map<string, Promise<CachedKeys>>();
  private readonly allowHosts: Set<string>;
  private readonly outbound: OutboundPolicy;

  constructor(
    private readonly settings: IssuerKeySettings,
    private readonly now: () => Date,
  ) {
    this.allowHosts = new Set(settings.allow.map((entry) => entry.toLowerCase()));
    this.outbound = new OutboundPolicy({
      allow: settings.allow,
      ...(settings.extraCaPem !== undefined && { extraCaPem: settings.extraCaPem }),
    });
  }

  /** A getKey for jose's jwtVerify over `issuer`'s keys, fetching or refetching as the rules above say. */
  keyFor(issuer: string): KeyForHeader {
    return async (header) => {
      const nowMs = this.now().getTime();
      let cached = this.cache.get(issuer);
      const maxAge = this.settings.maxKeyAgeMs ?? 24 * 3_600_000;
      if (cached && nowMs - cached.fetchedAtMs > maxAge) {
        this.cache.delete(issuer);
        cached = undefined;
      }
      if (!cached) cached = await this.fetchKeys(issuer);
      else if (nowMs - cached.fetchedAtMs > (this.settings.refreshAfterMs ?? 10 * 60_000) && this.floorPassed(issuer)) {
        // Stale-if-error: a failed refresh keeps the keys we have until they age out.
        cached = await this.fetchKeys(issuer).catch(() => cached as CachedKeys);
      }
      try {
        return await cached.keys(header);
      } catch (err) {
        if ((err as { code?: string }).code !== 'ERR_JWKS_NO_MATCHING_KEY') throw err;
      }
      const kid = header.kid === undefined ? 'no kid' : `kid ${JSON.stringify(header.kid).slice(0, 80)}`;
      if (!this.floorPassed(issuer)) {
        throw new NoMatchingKey(
          `no key of the issuer matches the token's ${kid} (${header.alg}); its keys were fetched less than ` +
            `${Math.ceil(this.floorMs() / 1000)} s ago`,
        );
      }
      // A kid we have not seen: the issuer may have rotated its keys. Down now → 503 (no cached key fits).
      const refetched = await this.fetchKeys(issuer);
      try {
        return await refetched.keys(header);
      } catch (err) {
        if ((err as { code?: string }).code !== 'ERR_JWKS_NO_MATCHING_KEY') throw err;
        throw new NoMatchingKey(
          `no key of the issuer matches the token's ${kid} (${header.alg}), also after fetching its keys again`,
        );
      }
    };
  }

  private floorMs(): number {
    return this.settings.refetchFloorMs ?? 30_000;
  }

  private floorPassed(issuer: string): boolean {
    const last = this.lastAttemptMs.get(issuer);
    return last === undefined || this.now().getTime() - last >= this.floorMs();
  }

  private fetchKeys(issuer: string): Promise<CachedKeys> {
    const running = this.inFlight.get(issuer);
    if (running) return running;
    this.lastAttemptMs.set(issuer, this.now().getTime());
    const fetching = this.discoverAndFetch(issuer).finally(() => this.inFlight.delete(issuer));
    this.inFlight.set(issuer, fetching);
    return fetching;
  }

  private async discoverAndFetch(issuer: string): Promise<CachedKeys> {
    const discovery = await this.getJson(new URL(`${issuer.replace(/\/+$/, '')}/.well-known/openid-configuration`));
    if (discovery.issuer !== issuer) {
      throw new IssuerRefused(
        `the issuer's discovery document names issuer ${JSON.stringify(discovery.issuer)}, not ${issuer}`,
      );
    }
    if (typeof discovery.jwks_uri !== 'string') throw new IssuerRefused("the issuer's discovery has no jwks_uri");
    let jwksUri: URL;
    try {
      jwksUri = new URL(discovery.jwks_uri);
    } catch {
      throw new IssuerRefused("the issuer's jwks_uri is not a URL");
    }
    const issuerHost = new URL(issuer).hostname.toLowerCase();
    if (jwksUri.hostname.toLowerCase() !== issuerHost && !this.allowHosts.has(jwksUri.hostname.toLowerCase())) {
      throw new IssuerRefused(
        `the issuer's jwks_uri is on ${jwksUri.hostname}, not on the issuer's host ${issuerHost} ` +
          '(list that host in workload.allow to accept it)',
      );
    }
    const jwks = await this.getJson(jwksUri);
    if (!Array.isArray(jwks.keys)) throw new IssuerRefused("the issuer's JWKS has no keys array");
    let keys: CachedKeys['keys'];
    try {
      keys = createLocalJWKSet(jwks as unknown as JSONWebKeySet);
    } catch (err) {
      throw new IssuerRefused(`the issuer's JWKS is not usable: ${(err as Error).message}`);
    }
    const entry = { jwks: jwks as unknown as JSONWebKeySet, keys, fetchedAtMs: this.now().getTime() };
    this.cache.set(issuer, entry);
    return entry;
  }

  private async getJson(url: URL): Promise<Record<string, unknown>> {
    const timeoutMs = this.settings.timeoutMs ?? 5000;
    const maxBytes = this.settings.maxBytes ?? 256 * 1024;
    let answer: OutboundAnswer;
    try {
      answer = await this.outbound.request(url, {
        method: 'GET',
        headers: { accept: 'application/json', 'user-agent': 'signbridge' },
        timeoutMs,
        maxBytes,
        // Only a 200 is read; any other status is the answer.
        readBody: (status) => status === 200,
      });
    } catch (err) {
      throw issuerError(err, url);
    }
    if (answer.status !== 200) {
      const problem = `${url.href} answered HTTP ${answer.status}`;
      // No redirects: a 3xx could lead anywhere, including where the checks would refuse.
      throw answer.status >= 500 || answer.status === 429 ? new IssuerUnreachable(problem) : new IssuerRefused(problem);
    }
    const body = answer.body.toString('utf8');
    try {
      const parsed = JSON.parse(body) as unknown;
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not an object');
      return parsed as Record<string, unknown>;
    } catch {
      throw new IssuerRefused(`${url.href} did not answer a JSON object`);
    }
  }
}

/** The token exchange's words for a request that got no usable answer (docs/ci.md names these messages). */
function issuerError(err: unknown, url: URL): Error {
  if (err instanceof DestinationRefused) {
    if (err.reason === 'special-use') {
      return new IssuerRefused(
        `the issuer's host ${err.host} resolves to ${err.address}, a loopback, private or other special-use address ` +
          `(${err.range}); ` +
          'the service fetches such issuers only when workload.allow (SIGNBRIDGE_WORKLOAD_ALLOW) lists the host or its range',
      );
    }
    return new IssuerRefused(`${url.origin} is not https`);
  }
  if (err instanceof DestinationUnreachable) {
    if (err.reason === 'dns')
      return new IssuerUnreachable(`the issuer's host ${url.hostname} does not resolve (${err.why})`);
    if (err.reason === 'no-address') return new IssuerUnreachable(`the issuer's host ${url.hostname} has no address`);
    if (err.phase === 'answer' && err.reason !== 'timeout') return new IssuerUnreachable(`${url.href}: ${err.why}`);
    return new IssuerUnreachable(`${url.origin} cannot be reached (${err.why})`);
  }
  if (err instanceof TlsFailed)
    return new IssuerRefused(`${url.origin}: TLS failed (${err.why}); is workload.caFile set?`);
  if (err instanceof AnswerTooLarge) return new IssuerRefused(err.message);
  return err instanceof Error ? err : new Error(String(err));
}
