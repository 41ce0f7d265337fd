// An audit log entry, as the store keeps it (the hash chain over them: src/store/audit-chain.ts). Its action and
// outcome are words of the audit vocabulary (audit-vocabulary.ts).
import type { AuditAction, AuditOutcome } from './audit-vocabulary.js';

/**
 * The fields an entry's hash covers. The chain hashes and verifies whatever words they hold, so its functions take
 * this; what the service appends is AuditEntryInput.
 */
export interface AuditContent {
  at: string;
  tenantId: string | null;
  /** API key id, `person:<id>`, `cli:<user>` for offline administration, or `service`. */
  actor: string;
  action: string;
  outcome: string;
  details: Record<string, unknown>;
}

/** What a caller asks to append for action `A`, with an outcome `A` has. The store assigns seq and the hash chain. */
export interface AuditEntryInputOf<A extends AuditAction> extends AuditContent {
  action: A;
  outcome: AuditOutcome<A>;
}

/** An entry the service appends: an action of the vocabulary with an outcome of the vocabulary. */
export type AuditEntryInput = AuditEntryInputOf<AuditAction>;

/**
 * An entry as read back. Typed by the vocabulary too: the vocabulary only ever grows (audit-vocabulary.ts), so an
 * entry an older version wrote has one of its actions and outcomes.
 */
export interface AuditEntry extends AuditEntryInput {
  seq: number;
  prevHash: string;
  hash: string;
}
