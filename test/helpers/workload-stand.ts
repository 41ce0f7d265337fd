// What the two doors that take a CI job's OIDC token (POST /oauth/token and STS AssumeRoleWithWebIdentity) are
// tested on: the local HTTPS issuer (ci-issuer.ts), the service's virtual clock (real time plus an offset the tests
// move, so that nothing depends on how fast the machine is; tokens are minted at that time), the service's workload
// options that trust the issuer, trust rules, and a token signed by a key no issuer publishes.

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { generateKeyPair, SignJWT } from 'jose';
import type { AppOptions } from '../../src/app.js';
import { type NewTrustRule, validateTrustRule } from '../../src/auth/workload/trust-rule.js';
import type { Store } from '../../src/store/store.js';
import { type CiIssuer, startCiIssuer } from './ci-issuer.js';

/** The audience tokens are minted for: the service's public URL. */
export const PUBLIC_URL = 'https://signbridge.test.example';

/** The floor and the refresh age are long so that no real time passing between two requests could cross them. */
export const KEY_CACHE = { refetchFloorMs: 5 * 60_000, refreshAfterMs: 30 * 60_000, maxKeyAgeMs: 24 * 3_600_000 };

type WorkloadOptions = NonNullable<AppOptions['workload']>;

export class WorkloadStand {
  private offsetMs = 0;

  private constructor(
    readonly issuer: CiIssuer,
    /** The issuer's CA, which the service trusts for it. */
    readonly caPem: string,
  ) {}

  static async start(): Promise<WorkloadStand> {
    const issuer = await startCiIssuer();
    return new WorkloadStand(issuer, readFileSync(issuer.caFile, 'utf8'));
  }

  /** The service's clock (an arrow: it is handed to the service as a function). */
  readonly now = (): Date => new Date(Date.now() + this.offsetMs);

  nowS(): number {
    return Math.floor(this.now().getTime() / 1000);
  }

  /** Moves the service's clock (and the time tokens are minted at) forward. */
  advance(ms: number): void {
    this.offsetMs += ms;
  }

  /** The service's options: this clock, the public URL, and the issuer trusted at 127.0.0.1 with its CA. */
  options(extra: Partial<WorkloadOptions> = {}): Partial<AppOptions> {
    return {
      now: this.now,
      publicUrl: PUBLIC_URL,
      workload: { allow: ['127.0.0.1'], caPem: this.caPem, keys: KEY_CACHE, ...extra },
    };
  }

  /** Adds a trust rule (for this issuer unless it names another) as `admin trust add` would; returns its id. */
  async addRule(
    store: Pick<Store, 'workload'>,
    rule: Omit<NewTrustRule, 'issuer'> & { issuer?: string },
  ): Promise<string> {
    const valid = validateTrustRule({ issuer: this.issuer.url, ...rule });
    const id = `tr_${randomBytes(8).toString('hex')}`;
    await store.workload.addTrustRule({ ...valid, id, createdAt: this.now().toISOString(), createdBy: 'test' });
    return id;
  }

  /** A GitHub-like token for the public URL (unless `aud` is given), minted at the service's time. */
  mint(claims: Record<string, unknown> = {}, opts: Parameters<CiIssuer['mint']>[1] = {}): Promise<string> {
    return this.issuer.mint(
      { ...this.issuer.github.claims, aud: PUBLIC_URL, ...claims },
      { issuedAt: this.nowS(), ...opts },
    );
  }

  /** A well-formed token of an issuer nobody trusts, signed by a key made here: what anyone can forge. */
  async selfMadeToken(): Promise<string> {
    const { privateKey } = await generateKeyPair('ES256');
    return new SignJWT({ sub: 'anyone' })
      .setProtectedHeader({ alg: 'ES256', kid: 'mine' })
      .setIssuer('https://self-made.example')
      .setAudience(PUBLIC_URL)
      .setIssuedAt(this.nowS())
      .setExpirationTime(this.nowS() + 300)
      .sign(privateKey);
  }

  close(): Promise<void> {
    return this.issuer.close();
  }
}
