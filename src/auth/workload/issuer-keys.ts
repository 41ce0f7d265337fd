// The signing keys of the CI issuers a tenant trusts: OpenID discovery, then the JWKS, fetched by us (not jose's
// createRemoteJWKSet) so that caching is ours: keys stay usable while the issuer is down (jose's remote set fails
// every verification once its cache is 10 minutes old and a refetch fails), an unknown `kid` refetches at most once
// per floor, and every outbound request goes through the checks below. docs/ci.md, "The exchange".
//
// Outbound safety (the issuer URL comes from a tenant admin's trust rule, so it may point anywhere): https only, no
// redirects, a time-out and a size limit; the host is resolved once, every address is checked against loopback,
// private, link-local and other special ranges (refused unless `workload.allow` lists the host or a CIDR holding
// the address), and the connection goes to the checked address (a custom `lookup`), so a second DNS answer cannot
// switch it (DNS rebinding). The TLS name checked is still the issuer's host.
import { lookup as dnsLookup } from 'node:dns/promises';
import { request } from 'node:https';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { rootCertificates } from 'node:tls';
import { createLocalJWKSet, type JSONWebKeySet, type JWSHeaderParameters, type KeyInput } from 'jose';

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

/** Special-use ranges an issuer may not resolve to without workload.allow (SSRF: cloud metadata, internal hosts). */
const SPECIAL_V4 = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.0.2.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '198.51.100.0/24',
  '203.0.113.0/24',
  '224.0.0.0/4',
  '240.0.0.0/4',
];
/** IPv6 special ranges; NAT64 (64:ff9b::/96) and 6to4 (2002::/16) are refused whole (they can wrap any IPv4). */
const SPECIAL_V6 = [
  '::/128',
  '::1/128',
  'fc00::/7',
  'fe80::/10',
  'ff00::/8',
  '64:ff9b::/96',
  '2002::/16',
  '2001:db8::/32',
];

const special = new BlockList();
for (const range of SPECIAL_V4) addCidr(special, range);
for (const range of SPECIAL_V6) addCidr(special, range);

function addCidr(list: BlockList, entry: string): boolean {
  const [address, bits] = entry.split('/') as [string, string | undefined];
  const family = isIP(address);
  if (family === 0) return false;
  const type = family === 4 ? 'ipv4' : 'ipv6';
  if (bits === undefined) list.addAddress(address, type);
  else {
    const prefix = Number(bits);
    if (!/^\d{1,3}$/.test(bits) || prefix > (family === 4 ? 32 : 128)) return false;
    list.addSubnet(address, prefix, type);
  }
  return true;
}

/** An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is checked as the IPv4 address it is. */
function unmapped(address: string): { address: string; type: 'ipv4' | 'ipv6' } {
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(address);
  if (mapped) return { address: mapped[1] as string, type: 'ipv4' };
  return { address, type: isIP(address) === 4 ? 'ipv4' : 'ipv6' };
}

/** workload.allow entries that are not an IP address, a CIDR or a host name: a configuration error to report. */
export function invalidAllowEntries(allow: readonly string[]): string[] {
  return allow.filter((entry) => !addCidr(new BlockList(), entry) && !/^[A-Za-z0-9.-]{1,253}$/.test(entry));
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
  private readonly allowRanges = new BlockList();
  private readonly ca: string[];

  constructor(
    private readonly settings: IssuerKeySettings,
    private readonly now: () => Date,
  ) {
    this.allowHosts = new Set(settings.allow.map((entry) => entry.toLowerCase()));
    for (const entry of settings.allow) addCidr(this.allowRanges, entry);
    this.ca = settings.extraCaPem ? [...rootCertificates, settings.extraCaPem] : [...rootCertificates];
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

  /** The address to connect to for `host`, after checking every address it resolves to. */
  private async checkedAddress(host: string): Promise<{ address: string; family: number }> {
    const literal = host.replace(/^\[|\]$/g, '');
    let addresses: { address: string; family: number }[];
    if (isIP(literal)) addresses = [{ address: literal, family: isIP(literal) }];
    else {
      try {
        addresses = await dnsLookup(literal, { all: true, verbatim: true });
      } catch (err) {
        throw new IssuerUnreachable(`the issuer's host ${host} does not resolve (${(err as { code?: string }).code})`);
      }
    }
    if (addresses.length === 0) throw new IssuerUnreachable(`the issuer's host ${host} has no address`);
    const allowedHost = this.allowHosts.has(literal.toLowerCase());
    for (const { address } of addresses) {
      const checked = unmapped(address);
      if (allowedHost || this.allowRanges.check(checked.address, checked.type)) continue;
      if (special.check(checked.address, checked.type)) {
        throw new IssuerRefused(
          `the issuer's host ${host} resolves to ${address}, a loopback, private or other special-use address; ` +
            'the service fetches such issuers only when workload.allow (SIGNBRIDGE_WORKLOAD_ALLOW) lists the host or its range',
        );
      }
    }
    return addresses[0] as { address: string; family: number };
  }

  private async getJson(url: URL): Promise<Record<string, unknown>> {
    if (url.protocol !== 'https:') throw new IssuerRefused(`${url.origin} is not https`);
    const target = await this.checkedAddress(url.hostname);
    const pinned: LookupFunction = (_hostname, options, callback) => {
      if ((options as { all?: boolean }).all) callback(null, [target]);
      else callback(null, target.address, target.family);
    };
    const timeoutMs = this.settings.timeoutMs ?? 5000;
    const maxBytes = this.settings.maxBytes ?? 256 * 1024;
    const body = await new Promise<string>((resolve, reject) => {
      const req = request(
        url,
        {
          method: 'GET',
          ca: this.ca,
          lookup: pinned,
          // Only an IP literal skips lookup; then the TLS name is the address itself, as in the certificate.
          headers: { accept: 'application/json', 'user-agent': 'signbridge' },
          agent: false,
          timeout: timeoutMs,
        },
        (res) => {
          const status = res.statusCode ?? 0;
          if (status !== 200) {
            res.resume();
            const problem = `${url.href} answered HTTP ${status}`;
            // No redirects: a 3xx could lead anywhere, including where the checks above would refuse.
            reject(status >= 500 || status === 429 ? new IssuerUnreachable(problem) : new IssuerRefused(problem));
            return;
          }
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size > maxBytes) {
              req.destroy();
              reject(new IssuerRefused(`${url.href} answered more than ${maxBytes} bytes`));
              return;
            }
            chunks.push(chunk);
          });
          res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
          res.on('error', (err) => reject(new IssuerUnreachable(`${url.href}: ${err.message}`)));
        },
      );
      // A whole-request deadline as well as the socket's idle time-out: a trickling answer also ends.
      const deadline = setTimeout(() => req.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)), timeoutMs);
      req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)));
      req.on('error', (err: NodeJS.ErrnoException) =>
        reject(
          err.code?.startsWith('ERR_TLS') || /certificate|self.signed/i.test(err.message)
            ? new IssuerRefused(`${url.origin}: TLS failed (${err.code ?? err.message}); is workload.caFile set?`)
            : new IssuerUnreachable(`${url.origin} cannot be reached (${err.code ?? err.message})`),
        ),
      );
      req.on('close', () => clearTimeout(deadline));
      req.end();
    });
    try {
      const parsed = JSON.parse(body) as unknown;
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not an object');
      return parsed as Record<string, unknown>;
    } catch {
      throw new IssuerRefused(`${url.href} did not answer a JSON object`);
    }
  }
}
