// API keys: `sbk_<16 hex id>_<43 base64url secret>`. The id finds the record; only SHA-256 of the secret is
// stored (the secret has 256 bits of entropy, so a slow password hash would add nothing), and the comparison
// is constant-time, also when the id is unknown.

import crypto, { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { EventBuilder } from '../events/event-builder.js';
import type { Role } from '../store/records/roles.js';
import type { ApiKeyRecord, Store } from '../store/store.js';
import type { WorkloadIdentity } from './workload/workload-identity.js';

const TOKEN_PATTERN = /^sbk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;
const DUMMY_HASH = Buffer.alloc(32);

/**
 * SHA-256 of a key's secret, for every request a Bearer key authenticates. crypto.hash (Node 20.12+, 21.7+) is the
 * one-shot form, about half the CPU of createHash for a short input. The presented token is not remembered to save
 * even that: a map of live secrets in the heap would outlast every request that carried one.
 */
const sha256 =
  typeof crypto.hash === 'function'
    ? (text: string): Buffer => crypto.hash('sha256', text, 'buffer')
    : (text: string): Buffer => createHash('sha256').update(text).digest();

export function hashSecret(secret: string): Buffer {
  return sha256(secret);
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

/** A new key's id and secret: the id finds the record, only the secret's SHA-256 is stored. */
export interface KeyMaterial {
  id: string;
  secretHash: string;
}

function bearerMaterial(): KeyMaterial & { token: string } {
  const id = randomBytes(8).toString('hex');
  const secret = randomBytes(32).toString('base64url');
  return { id, secretHash: hashSecret(secret).toString('hex'), token: `sbk_${id}_${secret}` };
}

/** The record of an admin-made key (no person, no expiry): the Bearer kind here, the AWS kind in aws-credentials/. */
export function adminKeyRecord(
  material: KeyMaterial,
  role: Role,
  tenantId: string | null,
  label: string,
  now: Date,
): ApiKeyRecord {
  return {
    id: material.id,
    secretHash: material.secretHash,
    tenantId,
    role,
    label,
    createdAt: now.toISOString(),
    revokedAt: null,
  };
}

export async function createApiKey(
  store: Store,
  role: Role,
  tenantId: string | null,
  label: string,
  now = new Date(),
  announce?: Announce,
): Promise<NewApiKey> {
  const material = bearerMaterial();
  const record = adminKeyRecord(material, role, tenantId, label, now);
  await storeAnnounced(store, record, announce);
  return { token: material.token, record };
}

/** Stores a new key, with its api_key.created event when it is announced. */
export async function storeAnnounced(store: Store, record: ApiKeyRecord, announce?: Announce): Promise<void> {
  await store.apiKeys.create(
    record,
    announce && [await announce.events.apiKey('api_key.created', record, announce.by)],
  );
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
  const material = bearerMaterial();
  const record: ApiKeyRecord = {
    id: material.id,
    secretHash: material.secretHash,
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
  await storeAnnounced(store, record, announce);
  return { token: material.token, record };
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
  const material = bearerMaterial();
  const record = workloadKeyRecord(material, opts, now);
  await store.apiKeys.create(record);
  return { token: material.token, record };
}

/** The record of a key minted for a CI job: the Bearer kind here, STS's temporary credentials in aws-credentials/. */
export function workloadKeyRecord(material: KeyMaterial, opts: WorkloadKeyOptions, now: Date): ApiKeyRecord {
  const { identity } = opts;
  return {
    id: material.id,
    secretHash: material.secretHash,
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
  // An AWS-format key (sealedSecret) signs requests with SigV4 only (aws-credentials/): its session token or secret
  // is never a Bearer key, even where the hash would match.
  if (!record || !equal || record.revokedAt !== null || record.sealedSecret) return invalid;
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
