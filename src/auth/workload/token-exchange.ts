// The token exchange (RFC 8693) of a CI job: its ID token in, a short-lived signer key of the tenant out, when
// a trust rule of the tenant admits the token's verified claims. docs/ci.md, "The exchange".
//
// The token's unverified `iss` only picks the tenant's rules for that issuer: an issuer the tenant does not trust
// is refused before anything is fetched, so nobody makes the service call a URL of their choosing.
import { decodeJwt } from 'jose';
import type { Store } from '../../store/store.js';
import { storeFault } from '../../store/store-errors.js';
import { createWorkloadApiKey } from '../api-keys.js';
import { type IssuerKeys, IssuerRefused, IssuerUnreachable, NoMatchingKey } from './issuer-keys.js';
import { TokenRefused, verifyWorkloadToken } from './token-verifier.js';
import { matchTrustRules, type TrustRule } from './trust-rule.js';
import { factsFromClaims, issuerKind, runUrlOf, stableIdentityOf, type WorkloadIdentity } from './workload-identity.js';

/** Seconds a client waits before retrying when the issuer or the store cannot be reached. */
export const EXCHANGE_RETRY_AFTER_S = 30;

/** An RFC 6749 §5.2 error: its code, status and a description that names the failed check (never the token). */
export class ExchangeError extends Error {
  constructor(
    readonly error: 'invalid_request' | 'unsupported_grant_type' | 'invalid_grant' | 'temporarily_unavailable',
    readonly status: 400 | 503,
    description: string,
    readonly retryAfterS?: number,
  ) {
    super(description);
  }
}

const grantError = (reason: string) => new ExchangeError('invalid_grant', 400, reason);
const unavailable = (reason: string) =>
  new ExchangeError('temporarily_unavailable', 503, `${reason}; retry later`, EXCHANGE_RETRY_AFTER_S);

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

export class TokenExchange {
  constructor(private readonly settings: ExchangeSettings) {}

  async exchange(subjectToken: string, tenantId: string): Promise<IssuedKey> {
    try {
      return await this.exchangeOrThrow(subjectToken, tenantId);
    } catch (err) {
      const fault = storeFault(err);
      if (fault) throw unavailable(`the database cannot serve right now (${fault})`);
      throw err;
    }
  }

  private async exchangeOrThrow(subjectToken: string, tenantId: string): Promise<IssuedKey> {
    const { store, now } = this.settings;
    let issuer: unknown;
    try {
      issuer = decodeJwt(subjectToken).iss;
    } catch {
      throw new ExchangeError('invalid_request', 400, 'subject_token is not a JWT');
    }
    if (typeof issuer !== 'string' || issuer.length === 0) throw grantError('the token has no iss claim');
    if (!(await store.tenants.get(tenantId))) throw grantError(`tenant ${tenantId} does not exist`);
    const rules = await store.workload.listTrustRules(tenantId, issuer);
    if (rules.length === 0) {
      throw grantError(`tenant ${tenantId} does not trust the issuer ${JSON.stringify(issuer).slice(0, 300)}`);
    }
    const publicUrl = this.settings.publicUrl()?.replace(/\/+$/, '');
    const audienceOf = (rule: TrustRule) => rule.audience ?? publicUrl;
    const audiences = [...new Set(rules.map(audienceOf).filter((a): a is string => a !== undefined))];
    if (audiences.length === 0) {
      throw grantError(
        "the tenant's rules for this issuer want the service's public URL as audience, but none is configured (SIGNBRIDGE_PUBLIC_URL)",
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
        if (err.signatureVerified) await this.auditRefusal(tenantId, issuer, undefined, err.message);
        throw grantError(err.message);
      }
      if (err instanceof NoMatchingKey || err instanceof IssuerRefused) throw grantError(err.message);
      if (err instanceof IssuerUnreachable) {
        throw unavailable(`the issuer's keys cannot be fetched and none cached fits the token: ${err.message}`);
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
      await this.auditRefusal(tenantId, issuer, subject, reason);
      throw grantError(reason);
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
    const expiresAt = new Date(at.getTime() + rule.keyMinutes * 60_000);
    // The key is made before the token is marked used, and handed out only after: a store fault on the way leaves
    // at most a key nobody holds, never a used-up token without a key (the job retries with the same token).
    const key = await createWorkloadApiKey(store, { tenantId, role: rule.role, expiresAt, identity }, at);
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
      await this.auditRefusal(tenantId, issuer, subject, 'token already used');
      throw grantError('token already used (each ID token is exchanged once; ask the CI for a new one)');
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
        },
      });
    } catch (err) {
      // Not recorded, so not handed out: the key goes and the token may be exchanged again.
      await withdraw(true);
      throw err;
    }
    return { accessToken: key.token, issuedAt: at, expiresAt, tenantId, role: rule.role };
  }

  /** Refusals of tokens the issuer signed (forgeries are noise an attacker could fill the log with). */
  private async auditRefusal(tenantId: string, issuer: string, subject: string | undefined, reason: string) {
    await this.settings.store.audit.append({
      at: this.settings.now().toISOString(),
      tenantId,
      actor: `workload:${issuer}#${subject ?? '?'}`,
      action: 'workload_exchange',
      outcome: 'refused',
      details: { issuer, ...(subject !== undefined && { subject }), reason },
    });
  }
}
