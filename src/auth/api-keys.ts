// API keys: `sbk_<16 hex id>_<43 base64url secret>`. The id finds the record; only SHA-256 of the secret is
// stored (the secret has 256 bits of entropy, so a slow password hash would add nothing), and the comparison
// is constant-time, also when the id is unknown.

import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { EventBuilder } from '../events/event-builder.js';
import type { Role } from '../store/records/roles.js';
import type { ApiKeyRecord, Store } from '../store/store.js';
import type { WorkloadIdentity } from './workload/workload-identity.js';

const TOKEN_PATTERN = /^sbk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;
const DUMMY_HASH = Buffer.alloc(32);

function hashSecret(secret: string): Buffer {
  return createHash('sha256').update(secret).digest();
}

/**
 * Tell of a new key with an api_key.created event, made by `by`. Keys that sign-in and the workload exchange mint
 * for every session and every CI job are not announced (they would drown the rest); keys an admin or a person makes
 * on purpose are.
 */
export interface Announce {
  events: EventBuilder;
  by: string;
}

export interface NewApiKey {
  token: string;
  record: ApiKeyRecord;
}

export async function createApiKey(
  store: Store,
  role: Role,
  tenantId: string | null,
  label: string,
  now = new Date(),
  announce?: Announce,
): Promise<NewApiKey> {
  const id = randomBytes(8).toString('hex');
  const secret = randomBytes(32).toString('base64url');
  const record: ApiKeyRecord = {
    id,
    secretHash: hashSecret(secret).toString('hex'),
    tenantId,
    role,
    label,
    createdAt: now.toISOString(),
    revokedAt: null,
  };
  await store.apiKeys.create(
    record,
    announce && [await announce.events.apiKey('api_key.created', record, announce.by)],
  );
  return { token: `sbk_${id}_${secret}`, record };
}

export interface PersonKeyOptions {
  personId: string;
  tenantId: string | null;
  roles: Role[];
  expiresAt: Date;
  /** device (the device flow), admin (a CI key an admin made) or console (made by the person in the web console). */
  createdVia: 'device' | 'admin' | 'console';
  label: string;
}

/** A key bound to a person, a tenant and some of the roles of their membership, with an expiry. */
export async function createPersonApiKey(
  store: Store,
  opts: PersonKeyOptions,
  now = new Date(),
  announce?: Announce,
): Promise<NewApiKey> {
  const [first] = opts.roles;
  if (first === undefined) throw new Error('a person key needs at least one role');
  const id = randomBytes(8).toString('hex');
  const secret = randomBytes(32).toString('base64url');
  const record: ApiKeyRecord = {
    id,
    secretHash: hashSecret(secret).toString('hex'),
    tenantId: opts.tenantId,
    role: first,
    label: opts.label,
    createdAt: now.toISOString(),
    revokedAt: null,
    roles: [...opts.roles],
    personId: opts.personId,
    expiresAt: opts.expiresAt.toISOString(),
    createdVia: opts.createdVia,
  };
  await store.apiKeys.create(
    record,
    announce && [await announce.events.apiKey('api_key.created', record, announce.by)],
  );
  return { token: `sbk_${id}_${secret}`, record };
}

export interface WorkloadKeyOptions {
  tenantId: string;
  role: Role;
  expiresAt: Date;
  identity: WorkloadIdentity;
}

/**
 * A short-lived key minted by the workload token exchange (docs/ci.md): bound to one tenant, one role and the
 * identity the service verified; createdVia `workload`. The label names the job for `admin api-key list`.
 */
export async function createWorkloadApiKey(
  store: Store,
  opts: WorkloadKeyOptions,
  now = new Date(),
): Promise<NewApiKey> {
  const id = randomBytes(8).toString('hex');
  const secret = randomBytes(32).toString('base64url');
  const { identity } = opts;
  const record: ApiKeyRecord = {
    id,
    secretHash: hashSecret(secret).toString('hex'),
    tenantId: opts.tenantId,
    role: opts.role,
    label:
      `workload ${identity.facts.project ?? identity.subject}${identity.facts.runId ? ` run ${identity.facts.runId}` : ''}`.slice(
        0,
        200,
      ),
    createdAt: now.toISOString(),
    revokedAt: null,
    roles: [opts.role],
    personId: null,
    expiresAt: opts.expiresAt.toISOString(),
    createdVia: 'workload',
    workload: identity,
  };
  await store.apiKeys.create(record);
  return { token: `sbk_${id}_${secret}`, record };
}

/** Every role a key carries (keys from before migration 0009 have exactly `role`). */
export function rolesOf(record: Pick<ApiKeyRecord, 'role' | 'roles'>): Role[] {
  return record.roles ?? [record.role];
}

export type KeyCheck = { record: ApiKeyRecord } | { problem: string };

/**
 * The active API key record for a presented token, or why it does not work: unknown or wrong secret (one answer
 * for both), revoked, expired, or its person disabled. Never throws on malformed input.
 */
export async function checkApiKey(store: Store, token: string, now = new Date()): Promise<KeyCheck> {
  const invalid = { problem: 'API key is invalid or revoked' };
  const match = TOKEN_PATTERN.exec(token);
  if (!match) return invalid;
  const [, id, secret] = match as unknown as [string, string, string];
  const record = await store.apiKeys.get(id);
  const expected = record ? Buffer.from(record.secretHash, 'hex') : DUMMY_HASH;
  const presented = hashSecret(secret);
  const equal = expected.length === presented.length && timingSafeEqual(expected, presented);
  if (!record || !equal || record.revokedAt !== null) return invalid;
  // Only a holder of the right secret learns these (they say what to do next).
  if (record.expiresAt && Date.parse(record.expiresAt) <= now.getTime()) {
    return { problem: `API key expired at ${record.expiresAt}; sign in again (signbridge login)` };
  }
  if (record.personDisabledAt) return { problem: 'API key belongs to a disabled person' };
  return { record };
}

/** The active API key record for a presented token, or undefined. Never throws on malformed input. */
export async function verifyApiKey(store: Store, token: string, now = new Date()): Promise<ApiKeyRecord | undefined> {
  const check = await checkApiKey(store, token, now);
  return 'record' in check ? check.record : undefined;
}
