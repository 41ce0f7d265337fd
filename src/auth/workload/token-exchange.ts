// The token exchange (RFC 8693) of a CI job: its ID token in, a short-lived signer key of the tenant out, when
// a trust rule of the tenant admits the token's verified claims. docs/ci.md, "The exchange". What the key looks
// like is the caller's: POST /oauth/token mints a Bearer key (`exchange`), STS's AssumeRoleWithWebIdentity
// temporary AWS credentials (`exchangeWith`); the checks, the one use per token and the audit entry are the same.
//
// The token's unverified `iss` only picks the tenant's rules for that issuer: an issuer the tenant does not trust
// is refused before anything is fetched, so nobody makes the service call a URL of their choosing.
import { decodeJwt } from 'jose';
import type { ApiKeyRecord, Store } from '../../store/store.js';
import { storeFault } from '../../store/store-errors.js';
import { createWorkloadApiKey, type WorkloadKeyOptions } from '../api-keys.js';
import { type IssuerKeys, IssuerRefused, IssuerUnreachable, NoMatchingKey } from './issuer-keys.js';
import { TokenRefused, verifyWorkloadToken } from './token-verifier.js';
import { matchTrustRules, type TrustRule } from './trust-rule.js';
import { factsFromClaims, issuerKind, runUrlOf, stableIdentityOf, type WorkloadIdentity } from './workload-identity.js';

/** Seconds a client waits before retrying when the issuer or the store cannot be reached. */
export const EXCHANGE_RETRY_AFTER_S = 30;

/**
 * Which check refused an exchange, for protocols that name them apart (STS: InvalidIdentityToken,
 * ExpiredTokenException, IDPRejectedClaim, IDPCommunicationError, ...); RFC 6749 folds most into invalid_grant.
 */
export type ExchangeCheck =
  /** The request itself (POST /oauth/token's fields). */
  | 'request'
  /** The subject token is no JWT, or has no iss. */
  | 'malformed'
  /**
   * The tenant does not trust the issuer (an absent tenant trusts none: one answer for both, so the exchange tells
   * nobody which tenants exist), or the issuer (its address, discovery, keys) is refused.
   */
  | 'issuer'
  /** A check of the token failed: signature, algorithm, iss, aud, nbf, iat, sub, its spelling. */
  | 'token'
  /** The token's time is up: past exp, or older than the maximum token age. */
  | 'expired'
  /** The token verified, but no trust rule of the tenant admits its claims. */
  | 'rule'
  /** The token was exchanged before. */
  | 'used'
  /** The issuer's keys cannot be fetched (retry). */
  | 'issuer_unreachable'
  /** The database cannot serve (retry). */
  | 'store';

/** An RFC 6749 §5.2 error: its code, status and a description that names the failed check (never the token). */
export class ExchangeError extends Error {
  constructor(
    readonly error: 'invalid_request' | 'unsupported_grant_type' | 'invalid_grant' | 'temporarily_unavailable',
    readonly status: 400 | 503,
    description: string,
    readonly retryAfterS?: number,
    readonly check: ExchangeCheck = 'request',
  ) {
    super(description);
  }
}

const grantError = (reason: string, check: ExchangeCheck) =>
  new ExchangeError('invalid_grant', 400, reason, undefined, check);
const unavailable = (reason: string, check: ExchangeCheck) =>
  new ExchangeError('temporarily_unavailable', 503, `${reason}; retry later`, EXCHANGE_RETRY_AFTER_S, check);

export interface ExchangeSettings {
  store: Store;
  keys: IssuerKeys;
  now: () => Date;
  /** The service's public URL: the audience of rules that name none. */
  publicUrl: () => string | undefined;
  clockToleranceS: number;
  maxTokenAgeS: number;
}

export interface IssuedKey {
  accessToken: string;
  issuedAt: Date;
  expiresAt: Date;
  tenantId: string;
  role: string;
}

/** How one kind of exchange mints its key, and what it adds to the exchange's audit entries. */
export interface KeyMinting<K extends { record: ApiKeyRecord }> {
  /** Stores and returns the key; the exchange withdraws it (revokes the record) when it cannot be handed out. */
  mint(opts: WorkloadKeyOptions, at: Date): Promise<K>;
  /** Added to every audit entry of these exchanges, issued or refused (e.g. `via: sts`). */
  audit?: Record<string, string>;
  /** The longest the key may live; the rule's key minutes still bound it. */
  maxLifetimeS?: number;
}

/** A key an exchange minted, with what was verified on the way. */
export interface Exchanged<K> {
  key: K;
  issuedAt: Date;
  expiresAt: Date;
  tenantId: string;
  role: string;
  identity: WorkloadIdentity;
  /** The token's audience that the admitting rule wanted. */
  audience: string;
}

export class TokenExchange {
  constructor(private readonly settings: ExchangeSettings) {}

  /** POST /oauth/token's exchange: a Bearer key (sbk_...). */
  async exchange(subjectToken: string, tenantId: string): Promise<IssuedKey> {
    const { store } = this.settings;
    const issued = await this.exchangeWith(subjectToken, tenantId, {
      mint: (opts, at) => createWorkloadApiKey(store, opts, at),
    });
    const { key, issuedAt, expiresAt, role } = issued;
    return { accessToken: key.token, issuedAt, expiresAt, tenantId, role };
  }

  /** The exchange with a key of the caller's kind (STS: temporary AWS credentials). */
  async exchangeWith<K extends { record: ApiKeyRecord }>(
    subjectToken: string,
    tenantId: string,
    minting: KeyMinting<K>,
  ): Promise<Exchanged<K>> {
    try {
      return await this.exchangeOrThrow(subjectToken, tenantId, minting);
    } catch (err) {
      const fault = storeFault(err);
      if (fault) throw unavailable(`the database cannot serve right now (${fault})`, 'store');
      throw err;
    }
  }

  private async exchangeOrThrow<K extends { record: ApiKeyRecord }>(
    subjectToken: string,
    tenantId: string,
    minting: KeyMinting<K>,
  ): Promise<Exchanged<K>> {
    const { store, now } = this.settings;
    const auditRefusal = (issuer: string, subject: string | undefined, reason: string) =>
      this.auditRefusal(tenantId, issuer, subject, reason, minting.audit);
    let issuer: unknown;
    try {
      issuer = decodeJwt(subjectToken).iss;
    } catch {
      throw new ExchangeError('invalid_request', 400, 'subject_token is not a JWT', undefined, 'malformed');
    }
    if (typeof issuer !== 'string' || issuer.length === 0) throw grantError('the token has no iss claim', 'malformed');
    // Anyone can make a token with any iss: an absent tenant is answered exactly as one without a rule for that
    // issuer (same code, same words), or the answer would list the tenants. Rules are looked up first, so both take
    // the same query; a tenant with rules for the issuer exists unless it was just deleted.
    const rules = await store.workload.listTrustRules(tenantId, issuer);
    if (rules.length === 0 || !(await store.tenants.get(tenantId))) {
      throw grantError(
        `tenant ${tenantId} does not trust the issuer ${JSON.stringify(issuer).slice(0, 300)}`,
        'issuer',
      );
    }
    const publicUrl = this.settings.publicUrl()?.replace(/\/+$/, '');
    const audienceOf = (rule: TrustRule) => rule.audience ?? publicUrl;
    const audiences = [...new Set(rules.map(audienceOf).filter((a): a is string => a !== undefined))];
    if (audiences.length === 0) {
      throw grantError(
        "the tenant's rules for this issuer want the service's public URL as audience, but none is configured (SIGNBRIDGE_PUBLIC_URL)",
        'issuer',
      );
    }

    const at = now();
    let verified: Awaited<ReturnType<typeof verifyWorkloadToken>>;
    try {
      verified = await verifyWorkloadToken(subjectToken, {
        issuer,
        audiences,
        key: this.settings.keys.keyFor(issuer),
        clockToleranceS: this.settings.clockToleranceS,
        maxTokenAgeS: this.settings.maxTokenAgeS,
        now: at,
      });
    } catch (err) {
      if (err instanceof TokenRefused) {
        if (err.signatureVerified) await auditRefusal(issuer, undefined, err.message);
        throw grantError(err.message, err.expired ? 'expired' : 'token');
      }
      if (err instanceof NoMatchingKey || err instanceof IssuerRefused) throw grantError(err.message, 'issuer');
      if (err instanceof IssuerUnreachable) {
        throw unavailable(
          `the issuer's keys cannot be fetched and none cached fits the token: ${err.message}`,
          'issuer_unreachable',
        );
      }
      throw err;
    }
    const { claims, tokenId, formerTokenId, usableUntil } = verified;
    const subject = claims.sub as string;

    // Only the rules whose audience the token carries: one issuer's rules may name different audiences.
    const tokenAudiences = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
    const forAudience = rules.filter((rule) => tokenAudiences.includes(audienceOf(rule)));
    const match = matchTrustRules(forAudience, claims);
    if (!('rule' in match)) {
      const reason = `no trust rule of tenant ${tenantId} admits the token: ${match.refusals.join('; ')}`;
      await auditRefusal(issuer, subject, reason);
      throw grantError(reason, 'rule');
    }
    const { rule } = match;

    const kind = issuerKind(claims);
    const facts = factsFromClaims(kind, claims);
    const runUrl = runUrlOf(kind, issuer, facts);
    const identity: WorkloadIdentity = {
      issuer,
      subject,
      kind,
      ruleId: rule.id,
      tokenId,
      facts,
      stableIdentity: stableIdentityOf(kind, claims, rule.identityClaims),
      ...(runUrl && { runUrl }),
    };
    const lifetimeS = Math.min(rule.keyMinutes * 60, minting.maxLifetimeS ?? Number.POSITIVE_INFINITY);
    const expiresAt = new Date(at.getTime() + lifetimeS * 1000);
    // The key is made before the token is marked used, and handed out only after: a store fault on the way leaves
    // at most a key nobody holds, never a used-up token without a key (the job retries with the same token).
    const key = await minting.mint({ tenantId, role: rule.role, expiresAt, identity }, at);
    const use = {
      issuer,
      tokenId,
      formerTokenId,
      tenantId,
      usedAt: at.toISOString(),
      expiresAt: usableUntil.toISOString(),
    };
    const withdraw = async (releaseUse: boolean) => {
      await store.apiKeys.revoke(key.record.id, at.toISOString()).catch(() => undefined);
      if (releaseUse) await store.workload.releaseToken(use).catch(() => undefined);
    };
    // One use per token, in the store: every instance refuses the second.
    let firstUse: boolean;
    try {
      firstUse = await store.workload.useToken(use);
    } catch (err) {
      await withdraw(false);
      throw err;
    }
    if (!firstUse) {
      await withdraw(false);
      await auditRefusal(issuer, subject, 'token already used');
      throw grantError('token already used (each ID token is exchanged once; ask the CI for a new one)', 'used');
    }
    try {
      await store.audit.append({
        at: at.toISOString(),
        tenantId,
        actor: `workload:${issuer}#${subject}`,
        action: 'workload_exchange',
        outcome: 'issued',
        details: {
          issuer,
          subject,
          rule_id: rule.id,
          api_key_id: key.record.id,
          expires_at: expiresAt.toISOString(),
          project: facts.project ?? null,
          ref: facts.ref ?? null,
          run_id: facts.runId ?? null,
          run_url: runUrl ?? null,
          ...minting.audit,
        },
      });
    } catch (err) {
      // Not recorded, so not handed out: the key goes and the token may be exchanged again.
      await withdraw(true);
      throw err;
    }
    return {
      key,
      issuedAt: at,
      expiresAt,
      tenantId,
      role: rule.role,
      identity,
      audience: audienceOf(rule) as string,
    };
  }

  /** Refusals of tokens the issuer signed (forgeries are noise an attacker could fill the log with). */
  private async auditRefusal(
    tenantId: string,
    issuer: string,
    subject: string | undefined,
    reason: string,
    extra: Record<string, string> | undefined,
  ) {
    await this.settings.store.audit.append({
      at: this.settings.now().toISOString(),
      tenantId,
      actor: `workload:${issuer}#${subject ?? '?'}`,
      action: 'workload_exchange',
      outcome: 'refused',
      details: { issuer, ...(subject !== undefined && { subject }), reason, ...extra },
    });
  }
}
