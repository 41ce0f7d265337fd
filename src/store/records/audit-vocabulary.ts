// The audit log's vocabulary: every action the service writes, the outcomes it writes with it, and what such an
// entry records. AuditEntryInput takes its action and outcome from here (audit-entry.ts), so an entry with a new or
// misspelt action, or an outcome its action does not have, fails to compile; docs/policy.md ("Actions and
// outcomes") lists the same table, and test/unit/audit-vocabulary.test.ts fails when the two differ or when a
// source file (the CommonJS ones too) writes an action that is not here.
//
// Append only: the strings are hashed into the chain and read back by `audit prove`, the console and exports, so an
// action or outcome once written is never renamed or removed, only added.

/** What one entry of a signing request can say (the door's action: sign, pkcs11_sign or sign_batch). */
const SIGNING_OUTCOMES = [
  'signed',
  'denied',
  'pending_approval',
  'pending_security_review',
  'continued',
  'rate_limited',
  'sign_failed',
] as const;

export const AUDIT_VOCABULARY = {
  sign: {
    outcomes: SIGNING_OUTCOMES,
    records: 'a signing request through /v1/sign or a protocol door (AWS KMS Sign, Vault transit sign)',
  },
  pkcs11_sign: {
    outcomes: SIGNING_OUTCOMES,
    records: 'a signing request through /v1/pkcs11_sign (the PKCS#11 module, through the daemon)',
  },
  sign_batch: {
    outcomes: SIGNING_OUTCOMES,
    records:
      'a batch (/v1/sign_batch, Vault transit batch_input, the daemon coalescing): one decision, one signed entry per digest',
  },
  approve_sign: {
    outcomes: ['stage_approved', 'rejected', 'denied', 'expired', 'signing_abandoned', 'signed', 'sign_failed'],
    records: "a held request's decisions and expiry, its signature (actor: the approver), a stuck `signing` undone",
  },
  key_store_outage: {
    outcomes: ['started', 'ended'],
    records: 'a key store outage: its start, and its end with the count of signing requests refused meanwhile',
  },
  create_tenant: { outcomes: ['created'], records: 'a tenant and its first key' },
  rotate_key: { outcomes: ['rotated'], records: "a new version of a tenant's key" },
  get_import_params: { outcomes: ['issued'], records: 'a wrapping key and import token for bringing a key' },
  import_key: { outcomes: ['imported', 'reimported'], records: 'key material imported into a tenant' },
  create_exception: { outcomes: ['created'], records: 'a vulnerability exception' },
  revoke_exception: { outcomes: ['revoked'], records: 'a vulnerability exception revoked' },
  api_key_create: {
    outcomes: ['created'],
    records: 'an API key made by the CLI, the console or the device flow (`details.via`), or an AWS access key',
  },
  api_key_revoke: { outcomes: ['revoked'], records: 'an API key revoked, by an admin or by itself' },
  member_add: { outcomes: ['created'], records: "a person's role in a tenant, or an invitation by e-mail" },
  member_remove: { outcomes: ['removed'], records: "a person's role in a tenant taken away" },
  person_disable: { outcomes: ['disabled'], records: 'a person disabled (`admin person disable`)' },
  person_enable: { outcomes: ['enabled'], records: 'a person enabled again (`admin person enable`)' },
  sign_in: { outcomes: ['signed_in'], records: "a person's sign-in to the console through the IdP" },
  device_sign_in: { outcomes: ['approved', 'denied'], records: "a person's decision on a device's sign-in request" },
  workload_exchange: {
    outcomes: ['issued', 'refused'],
    records: "a CI job's token exchanged for a short-lived key (/oauth/token or STS), or refused",
  },
  trust_rule: { outcomes: ['added', 'removed'], records: 'a trust rule for CI workload identities' },
  webhook_subscription: {
    outcomes: ['added', 'removed', 'resumed'],
    records: 'a webhook subscription added, removed or resumed after it was suspended',
  },
  kms_request: {
    outcomes: ['refused'],
    records: 'an AWS KMS request its SigV4 check refused (a few a minute per address at most)',
  },
  vulndb_import: { outcomes: ['imported'], records: 'a vulnerability database imported (`admin vulndb import`)' },
  service_start: { outcomes: ['started'], records: 'a start of the service, with the SHA-256 of the policy in force' },
  log_key_create: { outcomes: ['created'], records: "the transparency log's key, made at the first start" },
  timestamp: { outcomes: ['granted'], records: 'an RFC 3161 time-stamp token issued' },
  tsa_clock_step: {
    outcomes: ['stepped_back', 'stepped_forward'],
    records: "a step of a second or more in the time-stamp authority's clock",
  },
  tsa_init: {
    outcomes: ['self_signed', 'csr'],
    records: "a time-stamp authority's key made, with a self-signed certificate or a certificate request",
  },
  tsa_cert_import: { outcomes: ['installed'], records: "a time-stamp authority's certificate installed" },
} as const satisfies Record<string, { outcomes: readonly string[]; records: string }>;

export type AuditAction = keyof typeof AUDIT_VOCABULARY;

/** The outcomes `A` may be written with (any action's when `A` is left out). */
export type AuditOutcome<A extends AuditAction = AuditAction> = (typeof AUDIT_VOCABULARY)[A]['outcomes'][number];

/** The actions that may be written with every one of `O` (e.g. those that end in a signature: 'signed' | 'sign_failed'). */
export type AuditActionWith<O extends AuditOutcome> = {
  [A in AuditAction]: [O] extends [AuditOutcome<A>] ? A : never;
}[AuditAction];

/** The actions whose entries record a signature or its failure (the signature recorder's). */
export type SignatureAction = AuditActionWith<'signed' | 'sign_failed'>;

export const AUDIT_ACTIONS = Object.keys(AUDIT_VOCABULARY) as AuditAction[];

export function isAuditAction(value: string): value is AuditAction {
  return Object.hasOwn(AUDIT_VOCABULARY, value);
}
