// Schemas first: these TypeBox schemas drive request validation, response serialisation (which allow-lists
// fields) and the OpenAPI document. Field names are the contract's (../shared/SIGNING-API.md section 2);
// fields signbridge adds are marked "signbridge:" in their description and listed in docs/api.md.
import { type Static, type TObject, type TSchema, Type } from '@sinclair/typebox';
import { ED25519_MAX_MESSAGE_BYTES, KEY_SPECS, SIGNING_ALGORITHMS } from '../crypto/algorithms.js';
import { KEY_STORE_KINDS } from '../keys/key-store.js';
import { BATCH_MAX } from '../signing/batch-signer.js';
import { ACTIONS, type Action } from '../store/records/roles.js';

const StringEnum = <T extends readonly string[]>(values: T, options: { description?: string; default?: string } = {}) =>
  Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...options });

export const TENANT_ID_PATTERN = '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$';
const Base64 = (description: string, maxLength = 1024) =>
  Type.String({ minLength: 1, maxLength, pattern: '^[A-Za-z0-9+/_-]*={0,2}$', description });

/**
 * Base64 (standard or URL-safe, padded or not) of a 32-, 48- or 64-byte digest: 43/44, 64 or 86/88 characters.
 * The server still checks that the length is the one the algorithm or key needs (400 invalid_hash).
 */
export const DIGEST_BASE64_PATTERN = '^(?:[A-Za-z0-9+/_-]{43}=?|[A-Za-z0-9+/_-]{64}|[A-Za-z0-9+/_-]{86}(?:==)?)$';
const SHA256_BASE64_PATTERN = '^[A-Za-z0-9+/_-]{43}=?$';

/** Every field of the contract's Request object (2.1), plus signbridge's documented additions. */
export const RequestFields = {
  action: StringEnum(ACTIONS, { description: 'the operation to perform; must equal the action in the path' }),
  tenant_id: Type.String({ pattern: TENANT_ID_PATTERN, description: 'tenant identifier' }),
  version: StringEnum(['v1'] as const, { default: 'v1', description: 'API version, v1 if omitted' }),
  algorithm: StringEnum(SIGNING_ALGORITHMS, {
    default: 'RSASSA_PKCS1_V1_5_SHA_256',
    description: '`sign` only: the signing algorithm (AWS KMS names)',
  }),
  hash: Type.String({
    pattern: DIGEST_BASE64_PATTERN,
    description:
      'pre-computed digest to sign (32, 48 or 64 bytes, as the algorithm needs): SHA-2 of the message for RSA and ' +
      'ECDSA (secp256k1 too), the 64-byte SHA-512 of the message for ED25519_PH_SHA_512 (signed as Ed25519ph, as ' +
      "KMS's MessageType DIGEST; pure ED25519_SHA_512 needs the message and is refused here), the 64-byte mu of " +
      'FIPS 204 for ML_DSA_SHAKE_256, SM3(Z_A || M) with ID 1234567812345678 for SM2DSA (docs/keys.md); standard ' +
      'or URL-safe base64, padded or not',
  }),
  message: Base64(
    'signbridge: `pkcs11_sign` only, for an ECC_NIST_EDWARDS25519 key: the message itself (1 to ' +
      `${ED25519_MAX_MESSAGE_BYTES} bytes, base64), signed as pure Ed25519 (ED25519_SHA_512), what the PKCS#11 ` +
      "module's CKM_EDDSA forwards; `hash` is then the message's SHA-512, which the records name (docs/api.md)",
    Math.ceil(ED25519_MAX_MESSAGE_BYTES / 3) * 4,
  ),
  hashes: Type.Array(Type.String({ pattern: DIGEST_BASE64_PATTERN, description: 'one digest, as `hash` of `sign`' }), {
    minItems: 1,
    maxItems: BATCH_MAX,
    description: `\`sign_batch\` only: 1 to ${BATCH_MAX} digests of one length, each signed with the same algorithm`,
  }),
  pss_padding: Type.Boolean({
    default: false,
    description: '`pkcs11_sign` and `sign_batch` without `algorithm`: use PSS padding for RSA keys',
  }),
  key_spec: StringEnum(KEY_SPECS, { description: 'key specification' }),
  key_id: Type.String({
    minLength: 1,
    maxLength: 128,
    description:
      'signbridge: `get_public_key`: a key version to read instead of the current one; `sign`, `pkcs11_sign`, ' +
      "`sign_batch`: the key version the request is for (as get_public_key's key_id): when it is no longer the " +
      'current one, 409 key_changed and nothing is signed',
  }),
  request_id: Type.String({
    format: 'uuid',
    description:
      "identifies the pending request: to decide it (`approve_sign`) or to collect its signature (`sign`, `pkcs11_sign`) or a held batch's signatures (`sign_batch`, with the same `hashes`)",
  }),
  decision: StringEnum(['approve', 'reject'] as const, {
    default: 'approve',
    description: 'signbridge: `approve_sign` only: approve (default) or reject the pending request',
  }),
  reason: Type.String({
    minLength: 1,
    maxLength: 2000,
    description: 'signbridge: why (`approve_sign` decisions, `create_exception`; required for exceptions)',
  }),
  vuln_id: Type.String({
    minLength: 1,
    maxLength: 128,
    description: 'signbridge: `create_exception` / `list_exceptions`: the vulnerability id (OSV, GHSA, CVE)',
  }),
  exception_id: Type.String({ format: 'uuid', description: 'signbridge: `revoke_exception`: the exception to revoke' }),
  expires_at: Type.String({
    format: 'date-time',
    description: 'signbridge: `create_exception`: when the exception ends (required, at most maxLifetimeDays ahead)',
  }),
  status: StringEnum(['active', 'expired', 'revoked'] as const, {
    description: 'signbridge: `list_exceptions` filter',
  }),
  artifact_type: Type.String({ maxLength: 256, description: 'policy input: type of artifact being signed' }),
  artifact_version: Type.String({ maxLength: 256, description: 'policy input: version of artifact' }),
  environment: Type.String({ maxLength: 256, description: 'policy input: environment name' }),
  identity_id: Type.String({ maxLength: 256, description: 'policy input: identity performing the operation' }),
  identity_status: StringEnum(['active', 'inactive'] as const, { description: 'policy input: identity status' }),
  project: Type.String({ maxLength: 256, description: 'policy input: project name' }),
  require_tee: Type.Boolean({ description: 'policy input: whether a TEE is required' }),
  sbom: Type.String({ description: 'policy input: an SPDX or CycloneDX SBOM (JSON text)' }),
  ...ciFactFields(),
  kms_key_id: Type.String({
    minLength: 1,
    maxLength: 256,
    description:
      'KMS key identifier (`import_key`); signbridge: also `get_import_params`, for new parameters for that key (a reimport)',
  }),
  valid_to: Type.Integer({
    minimum: 0,
    description:
      'signbridge: `import_key` with KEY_MATERIAL_EXPIRES (required then, refused otherwise): when the material ' +
      'expires, Unix seconds like parameters_valid_to, at most 365 days ahead (AWS ImportKeyMaterial ValidTo)',
  }),
  import_token: Base64('token from `get_import_params`', 65536),
  encrypted_key_material: Base64('key material encrypted for import', 65536),
  expiration_model: StringEnum(['KEY_MATERIAL_EXPIRES', 'KEY_MATERIAL_DOES_NOT_EXPIRE'] as const),
  wrapping_algorithm: StringEnum([
    'RSAES_OAEP_SHA_256',
    'RSAES_OAEP_SHA_1',
    'RSA_AES_KEY_WRAP_SHA_256',
    'RSA_AES_KEY_WRAP_SHA_1',
  ] as const),
  wrapping_key_spec: StringEnum(['RSA_2048', 'RSA_3072', 'RSA_4096'] as const),
};

type FieldName = keyof typeof RequestFields;

/**
 * signbridge: the CI facts of a workload key (docs/policy.md, "CI workload facts"). The service takes them from the
 * token the key was exchanged for; a body may repeat them, and a different value (or any of them with another key)
 * is 400 claims_conflict.
 */
function ciFactFields() {
  const fact = (description: string) =>
    Type.String({
      maxLength: 1024,
      description: `signbridge: CI fact, ${description}; only with a key from the token exchange, and then equal to the verified value`,
    });
  return {
    ref: fact('the git ref (refs/heads/main; GitLab: main)'),
    ref_type: fact('branch or tag'),
    ref_protected: Type.Boolean({
      description:
        'signbridge: CI fact, whether the ref is protected; only with a key from the token exchange, and then equal to the verified value',
    }),
    workflow: fact('the workflow (GitHub job_workflow_ref, GitLab ci_config_ref_uri)'),
    sha: fact('the commit'),
    run_id: fact('the run (GitHub run_id, GitLab pipeline_id)'),
    run_attempt: fact('the attempt of the run (GitHub run_attempt)'),
    actor: fact('who started the run'),
    event_name: fact('what started the run (GitHub event_name, GitLab pipeline_source)'),
    runner_environment: fact('github-hosted, gitlab-hosted or self-hosted'),
  };
}

const CI_FACT_INPUTS = [
  'ref',
  'ref_type',
  'ref_protected',
  'workflow',
  'sha',
  'run_id',
  'run_attempt',
  'actor',
  'event_name',
  'runner_environment',
] as const satisfies readonly FieldName[];

const POLICY_INPUTS = [
  'artifact_type',
  'artifact_version',
  'environment',
  'identity_id',
  'identity_status',
  'project',
  'require_tee',
  'sbom',
] as const satisfies readonly FieldName[];

/** The fields each action uses, beyond action, tenant_id and version: `required`, then `optional`. */
export const ACTION_FIELDS: Record<Action, { required: readonly FieldName[]; optional: readonly FieldName[] }> = {
  sign: { required: ['hash'], optional: ['algorithm', 'key_id', 'request_id', ...POLICY_INPUTS, ...CI_FACT_INPUTS] },
  pkcs11_sign: {
    required: ['hash'],
    optional: ['message', 'key_spec', 'key_id', 'pss_padding', 'request_id', ...POLICY_INPUTS, ...CI_FACT_INPUTS],
  },
  sign_batch: {
    required: ['hashes'],
    optional: ['algorithm', 'key_spec', 'key_id', 'pss_padding', 'request_id', ...POLICY_INPUTS, ...CI_FACT_INPUTS],
  },
  approve_sign: { required: ['request_id'], optional: ['decision', 'reason'] },
  create_tenant: { required: ['key_spec'], optional: [] },
  rotate_key: { required: [], optional: ['key_spec'] },
  get_public_key: { required: [], optional: ['key_id'] },
  get_import_params: { required: ['key_spec', 'wrapping_algorithm', 'wrapping_key_spec'], optional: ['kms_key_id'] },
  import_key: {
    required: ['kms_key_id', 'import_token', 'encrypted_key_material', 'expiration_model'],
    optional: ['valid_to'],
  },
  create_exception: { required: ['vuln_id', 'reason', 'expires_at'], optional: ['project', 'artifact_type'] },
  list_exceptions: { required: [], optional: ['status', 'vuln_id'] },
  revoke_exception: { required: ['exception_id'], optional: [] },
};

/**
 * The Request object of one action: its own `action` value and only the fields it uses. Any other field is a
 * 400 naming it, so a client never gets another operation than it asked for (a `pss_padding` on `sign` was once
 * silently dropped and the signature was PKCS#1 v1.5).
 */
function requestSchema(action: Action): TObject {
  const { required, optional } = ACTION_FIELDS[action];
  const props: Record<string, TSchema> = {
    action: StringEnum([action] as const, { description: `the operation to perform: ${action}, as in the path` }),
    tenant_id: RequestFields.tenant_id,
    version: Type.Optional(RequestFields.version),
  };
  for (const name of required) props[name] = RequestFields[name];
  for (const name of optional) props[name] = Type.Optional(RequestFields[name]);
  return Type.Object(props, { additionalProperties: false, title: `${pascal(action)}Request` });
}

const pascal = (name: string) => name.replace(/(^|_)([a-z0-9])/g, (_m, _u, c: string) => c.toUpperCase());

export const ActionRequests = Object.fromEntries(ACTIONS.map((a) => [a, requestSchema(a)])) as Record<Action, TObject>;

export const ErrorResponse = Type.Object(
  {
    error: Type.String({ description: 'stable error code (docs/api.md lists them)' }),
    reason: Type.String({ description: 'human-readable reason' }),
    vuln_id: Type.Optional(Type.String({ description: 'vulnerability identifier; on policy_denied errors' })),
    fix_version: Type.Optional(Type.String({ description: 'recommended fix version; on policy_denied errors' })),
    request_id: Type.Optional(
      Type.String({ format: 'uuid', description: 'signbridge: the rejected request; on request_rejected errors' }),
    ),
  },
  { $id: 'ErrorResponse', title: 'ErrorResponse' },
);
export type ErrorBody = Static<typeof ErrorResponse>;

export const SignResponse = Type.Object(
  {
    signature: Type.String({ description: 'standard base64; RSA raw signature, ECDSA X9.62 DER' }),
    key_id: Type.String({ description: 'signbridge: the key version that signed' }),
    signing_algorithm: StringEnum(SIGNING_ALGORITHMS, { description: 'signbridge: the algorithm used' }),
    request_id: Type.Optional(
      Type.String({ format: 'uuid', description: 'signbridge: the approved request this signature was collected for' }),
    ),
    log_proof: Type.Optional(
      Type.String({
        description:
          "signbridge, with `Prefer: wait-for-log`: the C2SP tlog-proof@v1 text of the signature's audit entry (the " +
          'entry in `extra`, the inclusion proof, the signed checkpoint), when a checkpoint held it in time (docs/transparency.md)',
      }),
    ),
  },
  { $id: 'SignResponse', title: 'SignResponse' },
);

const BatchSigned = Type.Object(
  {
    signature: Type.String({ description: 'standard base64, as SignResponse.signature' }),
    log_index: Type.Integer({
      minimum: 0,
      description: "this signature's audit entry index (as Signbridge-Log-Index)",
    }),
    signature_id: Type.String({ description: "the signature record (the `signed` entry's details.signature_id)" }),
    log_proof: Type.Optional(
      Type.String({
        description:
          "signbridge, with `Prefer: wait-for-log`: the C2SP tlog-proof@v1 text of this signature's audit entry, " +
          "as SignResponse.log_proof; every item's against the same checkpoint",
      }),
    ),
  },
  { additionalProperties: false },
);
const BatchFailed = Type.Object(
  {
    error: Type.Object({
      code: Type.String({ description: 'an error code of docs/api.md' }),
      message: Type.String(),
      retryable: Type.Boolean({ description: 'sending this digest again may sign it (a key store or store fault)' }),
    }),
  },
  { additionalProperties: false },
);

export const SignBatchResponse = Type.Object(
  {
    tenant_id: Type.String(),
    key_id: Type.String({ description: 'the key version that signed' }),
    signing_algorithm: StringEnum(SIGNING_ALGORITHMS, { description: 'the one algorithm of the batch' }),
    batch_id: Type.String({ format: 'uuid', description: 'names the batch in every entry of it (details.batch.id)' }),
    results: Type.Array(Type.Union([BatchSigned, BatchFailed]), {
      description: '`results[i]` answers `hashes[i]`: its signature, or the error of that digest alone',
    }),
  },
  { $id: 'SignBatchResponse', title: 'SignBatchResponse' },
);

export const ApprovalResponse = Type.Object(
  {
    message: Type.String(),
    request_id: Type.String({ format: 'uuid' }),
    status: StringEnum(['pending_approval', 'pending_security_review'] as const),
    approve_url: Type.Optional(
      Type.String({
        description:
          "signbridge's addition: the console page where a person decides this request (under the service's public URL; absent when none is configured)",
      }),
    ),
  },
  { $id: 'ApprovalResponse', title: 'ApprovalResponse' },
);

export const CreateTenantResponse = Type.Object(
  {
    tenant_created: Type.String({ description: 'the new tenant id' }),
    key: Type.String({ description: 'key identifier of the tenant first key' }),
    key_spec: StringEnum(KEY_SPECS, { description: 'signbridge: the key spec of that key' }),
  },
  { $id: 'CreateTenantResponse', title: 'CreateTenantResponse' },
);

const KeyVersion = Type.Object({
  key_id: Type.String(),
  key_spec: StringEnum(KEY_SPECS),
  version: Type.Integer({ minimum: 1 }),
  created_at: Type.String({ format: 'date-time' }),
  current: Type.Boolean(),
});

export const RotateKeyResponse = Type.Object(
  {
    tenant_id: Type.String(),
    key_id: Type.String({ description: 'the new current key' }),
    key_spec: StringEnum(KEY_SPECS),
    keys: Type.Array(KeyVersion, { description: 'every key version of the tenant, oldest first' }),
  },
  { $id: 'RotateKeyResponse', title: 'RotateKeyResponse' },
);

export const GetPublicKeyResponse = Type.Object(
  {
    key_id: Type.String(),
    key_spec: StringEnum(KEY_SPECS),
    key_usage: Type.Literal('SIGN_VERIFY'),
    public_key_pem: Type.String({ description: 'SubjectPublicKeyInfo, PEM' }),
    tenant_id: Type.String(),
    signing_algorithms: Type.Array(StringEnum(SIGNING_ALGORITHMS), {
      description: 'signbridge: the algorithms `sign` accepts for this key',
    }),
    current: Type.Boolean({ description: 'signbridge: whether this is the tenant current key' }),
    key_store: StringEnum(KEY_STORE_KINDS, {
      description:
        'signbridge: the key store that holds this key and signs with it: the PKCS#11 token, AWS KMS, or the ' +
        'software store sealed by the token (ML-DSA, SM2 and Ed25519 on the embedded default; docs/keys.md)',
    }),
  },
  { $id: 'GetPublicKeyResponse', title: 'GetPublicKeyResponse' },
);

export const GetImportParamsResponse = Type.Object(
  {
    import_token: Type.String({ description: 'standard base64; give it back to `import_key` with the material' }),
    kms_key_id: Type.String({ description: 'the key awaiting material; its key_id once imported' }),
    parameters_valid_to: Type.Integer({ description: 'Unix seconds; the wrapping key and token work until then' }),
    public_key: Type.String({ description: 'the wrapping public key: DER SubjectPublicKeyInfo, standard base64' }),
  },
  { $id: 'GetImportParamsResponse', title: 'GetImportParamsResponse' },
);

export const ImportKeyResponse = Type.Object(
  {
    imported: Type.String({ description: 'the key identifier (the kms_key_id)' }),
    key_spec: StringEnum(KEY_SPECS, { description: 'signbridge: the key spec of the imported key' }),
    version: Type.Integer({ minimum: 1, description: 'signbridge: its version among the tenant keys' }),
    current: Type.Boolean({ description: 'signbridge: whether it is the tenant current key' }),
    reimport: Type.Boolean({ description: 'signbridge: true when the same material was imported again' }),
    material_expires_at: Type.Optional(
      Type.Integer({ description: 'signbridge: with KEY_MATERIAL_EXPIRES, when the material expires (Unix seconds)' }),
    ),
  },
  { $id: 'ImportKeyResponse', title: 'ImportKeyResponse' },
);

export const TrialRequest = Type.Object(
  {
    hash: Type.String({
      pattern: SHA256_BASE64_PATTERN,
      description: 'SHA-256 hash of the message (32 bytes), base64-encoded (standard or URL-safe, padded or not)',
    }),
    algorithm: Type.Optional(
      StringEnum(['RSASSA_PKCS1_V1_5_SHA_256'] as const, { default: 'RSASSA_PKCS1_V1_5_SHA_256' }),
    ),
    mode: Type.Optional(StringEnum(['real', 'mock'] as const, { default: 'mock' })),
  },
  { additionalProperties: false },
);
export type TrialBody = Static<typeof TrialRequest>;

export const TrialResponse = Type.Object(
  {
    status: Type.Literal('success'),
    mode: StringEnum(['real', 'mock'] as const),
    algorithm: Type.String(),
    signature: Type.String({ description: 'hex RSA signature (512 hex characters), or the mock placeholder' }),
  },
  { $id: 'TrialResponse', title: 'TrialResponse' },
);

export const ApproveSignResponse = Type.Object(
  {
    request_id: Type.String({ format: 'uuid' }),
    status: StringEnum(['approved', 'rejected', 'pending_approval', 'pending_security_review'] as const, {
      description: 'the request after this decision (a further stage may remain)',
    }),
    message: Type.String(),
    signature: Type.Optional(Type.String({ description: 'when approved: the signature, as in SignResponse' })),
    key_id: Type.Optional(Type.String()),
    signing_algorithm: Type.Optional(StringEnum(SIGNING_ALGORITHMS)),
  },
  { $id: 'ApproveSignResponse', title: 'ApproveSignResponse' },
);

export const ExceptionRecordSchema = Type.Object(
  {
    exception_id: Type.String({ format: 'uuid' }),
    tenant_id: Type.String(),
    vuln_id: Type.String(),
    project: Type.Optional(Type.String({ description: 'only requests of this project are covered' })),
    artifact_type: Type.Optional(Type.String({ description: 'only requests of this artifact type are covered' })),
    reason: Type.String(),
    created_by: Type.String({ description: 'API key id of the admin who created it' }),
    created_at: Type.String({ format: 'date-time' }),
    expires_at: Type.String({ format: 'date-time' }),
    revoked_at: Type.Optional(Type.String({ format: 'date-time' })),
    revoked_by: Type.Optional(Type.String()),
    status: StringEnum(['active', 'expired', 'revoked'] as const),
  },
  { $id: 'ExceptionRecord', title: 'ExceptionRecord' },
);

/** A reference to a named schema (added with app.addSchema; a components/schemas entry in the document). */
export const Ref = (schema: TSchema & { $id?: string }) => Type.Unsafe({ $ref: `${schema.$id}#` });

export const ExceptionListResponse = Type.Object(
  { exceptions: Type.Array(Ref(ExceptionRecordSchema)) },
  { $id: 'ExceptionListResponse', title: 'ExceptionListResponse' },
);

/** Every named schema: added to the app once, referenced by routes, listed under components/schemas. */
export const NAMED_SCHEMAS = [
  ErrorResponse,
  SignResponse,
  SignBatchResponse,
  ApprovalResponse,
  CreateTenantResponse,
  RotateKeyResponse,
  GetPublicKeyResponse,
  GetImportParamsResponse,
  ImportKeyResponse,
  ApproveSignResponse,
  ExceptionRecordSchema,
  ExceptionListResponse,
  TrialResponse,
];
