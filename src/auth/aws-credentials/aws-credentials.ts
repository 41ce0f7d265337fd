// AWS-format API keys: made by an admin (`admin api-key create --format aws`) or, as temporary credentials, by
// STS's AssumeRoleWithWebIdentity; checked by the KMS endpoint's SigV4 verifier through `secretFor`. Such a key is
// an ordinary API key record (role, tenant, expiry, revocation, the workload identity of a CI job) whose secret
// access key is kept sealed (migration 0024), since SigV4's HMAC needs the secret itself. docs/kms-api.md.

import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { Sealer } from '../../keys/sealer.js';
import type { Role } from '../../store/records/roles.js';
import type { ApiKeyRecord, Store } from '../../store/store.js';
import {
  type Announce,
  adminKeyRecord,
  hashSecret,
  storeAnnounced,
  type WorkloadKeyOptions,
  workloadKeyRecord,
} from '../api-keys.js';
import {
  accessKeyIdOf,
  newSecretAccessKey,
  newSessionToken,
  parseAccessKeyId,
  parseSessionToken,
} from './credential-format.js';

/** Said when no key store of this service can seal (AWS KMS without a token): there is nowhere to keep the secret. */
export const NO_SEALER =
  'AWS-format keys need a key store that can seal their secret (a PKCS#11 token: the embedded SoftHSM, a ' +
  'configured pkcs11 key store, or keyStore.legacy beside AWS KMS); this service has none';

/** Opened secrets kept in memory, so that a request costs no unseal (a token round trip). Bounded. */
const SECRET_CACHE_ENTRIES = 10_000;

export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  /** Temporary credentials only (X-Amz-Security-Token). */
  sessionToken?: string;
  record: ApiKeyRecord;
}

function aadFor(apiKeyId: string): Buffer {
  // Binds the sealed blob to its key: a blob copied to another row does not open there.
  return Buffer.from(`signbridge aws secret access key ${apiKeyId}`);
}

async function sealSecret(sealer: Sealer, apiKeyId: string, secret: string): Promise<string> {
  return (await sealer.seal(Buffer.from(secret, 'utf8'), aadFor(apiKeyId))).toString('base64');
}

/** A long-term AWS-format key made by an admin: same roles and tenant rules as any admin-made key. */
export async function createAwsApiKey(
  store: Store,
  sealer: Sealer,
  role: Role,
  tenantId: string | null,
  label: string,
  now = new Date(),
  announce?: Announce,
): Promise<AwsCredentials> {
  const id = randomBytes(8).toString('hex');
  const secretAccessKey = newSecretAccessKey();
  const record: ApiKeyRecord = {
    ...adminKeyRecord({ id, secretHash: hashSecret(secretAccessKey).toString('hex') }, role, tenantId, label, now),
    sealedSecret: await sealSecret(sealer, id, secretAccessKey),
  };
  await storeAnnounced(store, record, announce);
  return { accessKeyId: accessKeyIdOf(id, false), secretAccessKey, record };
}

/**
 * Temporary credentials for a CI job (STS AssumeRoleWithWebIdentity): a workload key like the token exchange's,
 * with an access key id, a sealed secret and a session token; the record's secretHash is the session token's.
 */
export async function createTemporaryAwsKey(
  store: Store,
  sealer: Sealer,
  opts: WorkloadKeyOptions,
  now = new Date(),
): Promise<AwsCredentials> {
  const id = randomBytes(8).toString('hex');
  const secretAccessKey = newSecretAccessKey();
  const session = newSessionToken(id);
  const record: ApiKeyRecord = {
    ...workloadKeyRecord({ id, secretHash: hashSecret(session.secret).toString('hex') }, opts, now),
    sealedSecret: await sealSecret(sealer, id, secretAccessKey),
  };
  await store.apiKeys.create(record);
  return { accessKeyId: accessKeyIdOf(id, true), secretAccessKey, sessionToken: session.token, record };
}

/**
 * The SigV4 verifier's `secretFor`: the secret of a usable AWS-format key, and its record as the principal; undefined
 * for an unknown, revoked or expired key, a disabled person's key, or a session token that is missing, not the key's
 * own, or given with a long-term key (AWS answers all of these UnrecognizedClientException). Temporary credentials
 * past their expiry with their own session token are the exception: marked `expired`, so that the verifier answers
 * ExpiredTokenException, as AWS does and as the SDKs expect of STS credentials.
 */
export class AwsSecrets {
  private readonly opened = new Map<string, { sealed: string; secret: string }>();

  constructor(
    private readonly store: Store,
    private readonly sealer: Sealer | undefined,
    private readonly now: () => Date = () => new Date(),
  ) {}

  async secretFor(
    accessKeyId: string,
    sessionToken: string | undefined,
  ): Promise<{ secret: string; principal: ApiKeyRecord; expired?: boolean } | undefined> {
    const parsed = parseAccessKeyId(accessKeyId);
    if (!parsed || !this.sealer) return undefined;
    const record = await this.store.apiKeys.get(parsed.id);
    if (!record?.sealedSecret || record.revokedAt !== null || record.personDisabledAt) return undefined;
    const expired = !!record.expiresAt && Date.parse(record.expiresAt) <= this.now().getTime();
    // The prefix must say what the record is: a temporary key's id with SBAK (no token) must not pass.
    const temporary = record.createdVia === 'workload';
    if (parsed.temporary !== temporary || (expired && !temporary)) return undefined;
    if (temporary) {
      const token = sessionToken === undefined ? undefined : parseSessionToken(sessionToken);
      if (!token || token.id !== parsed.id) return undefined;
      const presented = hashSecret(token.secret);
      const expected = Buffer.from(record.secretHash, 'hex');
      if (expected.length !== presented.length || !timingSafeEqual(expected, presented)) return undefined;
    } else if (sessionToken !== undefined) {
      return undefined;
    }
    return { secret: await this.open(record.id, record.sealedSecret), principal: record, ...(expired && { expired }) };
  }

  private async open(apiKeyId: string, sealed: string): Promise<string> {
    const cached = this.opened.get(apiKeyId);
    if (cached?.sealed === sealed) return cached.secret;
    const secret = (await (this.sealer as Sealer).unseal(Buffer.from(sealed, 'base64'), aadFor(apiKeyId))).toString(
      'utf8',
    );
    if (this.opened.size >= SECRET_CACHE_ENTRIES) this.opened.delete(this.opened.keys().next().value as string);
    this.opened.set(apiKeyId, { sealed, secret });
    return secret;
  }
}
