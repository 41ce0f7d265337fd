// An API key as store/api-key-store.ts persists it and the access cache holds it.
import type { Role } from './roles.js';
import type { WorkloadIdentity } from './workload-identity.js';

export interface ApiKeyRecord {
  id: string;
  /** SHA-256 of the secret part, hex. The secret itself is never stored. */
  secretHash: string;
  /** null for the global operator role. */
  tenantId: string | null;
  role: Role;
  label: string;
  createdAt: string;
  revokedAt: string | null;
  /** Every role of the key; `role` is the first. Admin-made keys have one role; a person's key may have several. */
  roles?: Role[];
  /** The person the key belongs to (minted by sign-in, or an admin's CI key for a person); null for admin keys. */
  personId?: string | null;
  /** After this the key no longer works; null: no expiry (admin keys). */
  expiresAt?: string | null;
  /** How it was made: device, admin (CI key for a person); null for the classic admin keys. */
  createdVia?: string | null;
  /** Read with the key: set when its person is disabled (the key then does not work). */
  personDisabledAt?: string | null;
  /** A key minted by the workload token exchange (createdVia `workload`): what the service verified about the job. */
  workload?: WorkloadIdentity | null;
  /**
   * An AWS-format key (migration 0024): its secret access key, sealed by the key store's sealer (base64), because
   * SigV4 needs the secret itself to check a signature. Never in clear at rest, never logged. null for other keys.
   */
  sealedSecret?: string | null;
}
