// API keys: `sbk_<16 hex id>_<43 base64url secret>`. The id finds the record; only SHA-256 of the secret is
// stored (the secret has 256 bits of entropy, so a slow password hash would add nothing), and the comparison
// is constant-time, also when the id is unknown.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import type { ApiKeyRecord, Store } from '../store/store.js';
import type { Role } from './roles.js';

const TOKEN_PATTERN = /^sbk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$/;
const DUMMY_HASH = Buffer.alloc(32);

function hashSecret(secret: string): Buffer {
  return createHash('sha256').update(secret).digest();
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
  await store.createApiKey(record);
  return { token: `sbk_${id}_${secret}`, record };
}

/** The active API key record for a presented token, or undefined. Never throws on malformed input. */
export async function verifyApiKey(store: Store, token: string): Promise<ApiKeyRecord | undefined> {
  const match = TOKEN_PATTERN.exec(token);
  if (!match) return undefined;
  const [, id, secret] = match as unknown as [string, string, string];
  const record = await store.getApiKey(id);
  const expected = record ? Buffer.from(record.secretHash, 'hex') : DUMMY_HASH;
  const presented = hashSecret(secret);
  const equal = expected.length === presented.length && timingSafeEqual(expected, presented);
  if (!record || !equal || record.revokedAt !== null) return undefined;
  return record;
}
