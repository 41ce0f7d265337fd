// An audit log entry, as the store keeps it (the hash chain over them: src/store/audit/audit-chain.ts).

/** What a caller asks to append to the audit log; the store assigns seq and the hash chain. */
export interface AuditEntryInput {
  at: string;
  tenantId: string | null;
  /** API key id, or "cli:<user>" for offline administration, or "service". */
  actor: string;
  /** e.g. sign, pkcs11_sign, approve_sign, create_tenant, api_key_create, policy_loaded */
  action: string;
  /** e.g. signed, pending_approval, denied, approved, rejected, expired, created, revoked */
  outcome: string;
  details: Record<string, unknown>;
}

export interface AuditEntry extends AuditEntryInput {
  seq: number;
  prevHash: string;
  hash: string;
}
