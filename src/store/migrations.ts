// Schema migrations, in order: one file each under migrations/, named as the migration. Written with Kysely's schema
// builder so SQLite and PostgreSQL share them. Never edit a migration that has shipped; add a new one, in its own
// file, and list it here (test/unit/migrations-index.test.ts fails on a file missing from this list).
import type { Migration } from 'kysely';
import { migration0001Core } from './migrations/0001_core.js';
import { migration0002ApprovalsExceptions } from './migrations/0002_approvals_exceptions.js';
import { migration0003AuditLog } from './migrations/0003_audit_log.js';
import { migration0004VulnerabilityDb } from './migrations/0004_vulnerability_db.js';
import { migration0005AuditLogPrevHashNotUnique } from './migrations/0005_audit_log_prev_hash_not_unique.js';
import { migration0006CacheEpoch } from './migrations/0006_cache_epoch.js';
import { migration0007TrialCounters } from './migrations/0007_trial_counters.js';
import { migration0008StoreHeartbeat } from './migrations/0008_store_heartbeat.js';
import { migration0009PeopleOauth } from './migrations/0009_people_oauth.js';
import { migration0010KeyStores } from './migrations/0010_key_stores.js';
import { migration0011KeyImports } from './migrations/0011_key_imports.js';
import { migration0012SignIdempotency } from './migrations/0012_sign_idempotency.js';
import { migration0013PostgresGroupCommit } from './migrations/0013_postgres_group_commit.js';
import { migration0014PendingRequestContinuation } from './migrations/0014_pending_request_continuation.js';
import { migration0015WorkloadIdentity } from './migrations/0015_workload_identity.js';
import { migration0016Events } from './migrations/0016_events.js';
import { migration0017TsaIdentities } from './migrations/0017_tsa_identities.js';
import { migration0018TransparencyLog } from './migrations/0018_transparency_log.js';
import { migration0019SignatureLogLookup } from './migrations/0019_signature_log_lookup.js';
import { migration0020WorkloadTokenRules } from './migrations/0020_workload_token_rules.js';
import { migration0021DeliveryDispatch } from './migrations/0021_delivery_dispatch.js';
import { migration0022SigningEvents } from './migrations/0022_signing_events.js';
import { migration0023Pruning } from './migrations/0023_pruning.js';
import { migration0024AwsCredentials } from './migrations/0024_aws_credentials.js';
import { migration0025BatchRequests } from './migrations/0025_batch_requests.js';
import { migration0026LeanerPermanentRows } from './migrations/0026_leaner_permanent_rows.js';
import { migration0027ApprovalOneCommit } from './migrations/0027_approval_one_commit.js';
import { migration0028EventsFromLog } from './migrations/0028_events_from_log.js';
import { migration0029BatchItems } from './migrations/0029_batch_items.js';
import { migration0030OneRowPerSignature } from './migrations/0030_one_row_per_signature.js';
import { migration0031BatchEventsFromLog } from './migrations/0031_batch_events_from_log.js';
import { migration0032CompactAuditRows } from './migrations/0032_compact_audit_rows.js';
import { migration0033IdempotencyInGroupCommit } from './migrations/0033_idempotency_in_group_commit.js';

/** Kysely runs them in the order of their names. */
export const MIGRATIONS: Record<string, Migration> = {
  '0001_core': migration0001Core,
  '0002_approvals_exceptions': migration0002ApprovalsExceptions,
  '0003_audit_log': migration0003AuditLog,
  '0004_vulnerability_db': migration0004VulnerabilityDb,
  '0005_audit_log_prev_hash_not_unique': migration0005AuditLogPrevHashNotUnique,
  '0006_cache_epoch': migration0006CacheEpoch,
  '0007_trial_counters': migration0007TrialCounters,
  '0008_store_heartbeat': migration0008StoreHeartbeat,
  '0009_people_oauth': migration0009PeopleOauth,
  '0010_key_stores': migration0010KeyStores,
  '0011_key_imports': migration0011KeyImports,
  '0012_sign_idempotency': migration0012SignIdempotency,
  '0013_postgres_group_commit': migration0013PostgresGroupCommit,
  '0014_pending_request_continuation': migration0014PendingRequestContinuation,
  '0015_workload_identity': migration0015WorkloadIdentity,
  '0016_events': migration0016Events,
  '0017_tsa_identities': migration0017TsaIdentities,
  '0018_transparency_log': migration0018TransparencyLog,
  '0019_signature_log_lookup': migration0019SignatureLogLookup,
  '0020_workload_token_rules': migration0020WorkloadTokenRules,
  '0021_delivery_dispatch': migration0021DeliveryDispatch,
  '0022_signing_events': migration0022SigningEvents,
  '0023_pruning': migration0023Pruning,
  '0024_aws_credentials': migration0024AwsCredentials,
  '0025_batch_requests': migration0025BatchRequests,
  '0026_leaner_permanent_rows': migration0026LeanerPermanentRows,
  '0027_approval_one_commit': migration0027ApprovalOneCommit,
  '0028_events_from_log': migration0028EventsFromLog,
  '0029_batch_items': migration0029BatchItems,
  '0030_one_row_per_signature': migration0030OneRowPerSignature,
  '0031_batch_events_from_log': migration0031BatchEventsFromLog,
  '0032_compact_audit_rows': migration0032CompactAuditRows,
  '0033_idempotency_in_group_commit': migration0033IdempotencyInGroupCommit,
};
