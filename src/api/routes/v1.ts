// POST /v1/<action>: one route per action of the contract, each with its own schema.
import { createHash } from 'node:crypto';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { hashAlgorithmsForKey, type KeySpec, type SigningAlgorithm } from '../../crypto/algorithms.js';
import { decodeBase64Field } from '../../crypto/encoding.js';
import { ApiError } from '../../errors.js';
import type { ExpirationModel, WrappingAlgorithm, WrappingKeySpec } from '../../keys/key-store.js';
import type { ExceptionService, ExceptionStatus } from '../../signing/exception-service.js';
import type { KeyImportService } from '../../signing/key-import-service.js';
import { signDigest, signDigests } from '../../signing/signing-entry.js';
import type { SigningService } from '../../signing/signing-service.js';
import { ACTION_ROLES, ACTIONS, type Action } from '../../store/records/roles.js';
import type { Store } from '../../store/store.js';
import { authenticate, authorize } from '../authenticate.js';
import { answerOnce, idempotencyKeyOf } from '../idempotency.js';
import { logPreferenceOf, logProofHeaders, logProofsOf } from '../log-proof-preference.js';
import { documented, errorResponse, LOG_INDEX_HEADER, LOG_INDEX_HEADERS, LOG_PROOF_HEADERS } from '../responses.js';
import {
  ActionRequests,
  ApprovalResponse,
  ApproveSignResponse,
  CreateTenantResponse,
  ExceptionListResponse,
  ExceptionRecordSchema,
  GetImportParamsResponse,
  GetPublicKeyResponse,
  ImportKeyResponse,
  RotateKeyResponse,
  SignBatchResponse,
  SignResponse,
} from '../schemas.js';
import { signingContext } from '../signing-inputs.js';
import {
  type BatchBody,
  batchBody,
  exceptionBody,
  isReply,
  keptReplyOf,
  signOutcome,
  withBatchProofs,
} from './v1-replies.js';

export interface V1Options {
  store: Store;
  signing: SigningService;
  exceptions: ExceptionService;
  keyImports: KeyImportService;
  now?: () => Date;
  /** The service's public URL: a 202 names the console page that decides the request under it. */
  publicUrl?: string;
}

const SUMMARIES: Record<Action, string> = {
  sign: 'Sign a pre-computed hash with the tenant key (policy-checked)',
  pkcs11_sign: 'Sign a digest for the PKCS#11 module; algorithm chosen from the key spec (policy-checked)',
  sign_batch: 'Sign up to 1000 digests with one policy decision, one audit entry and log leaf each (signbridge)',
  approve_sign: 'Approve or reject a pending signing request',
  create_tenant: 'Create a tenant and its first key',
  rotate_key: 'Make a new key version current, keeping the old ones',
  get_import_params: 'Get a wrapping key and import token for key import',
  import_key: 'Import externally generated key material',
  get_public_key: 'Get the public key of the current (or a named) key version',
  create_exception: 'Create a policy exception',
  list_exceptions: 'List policy exceptions',
  revoke_exception: 'Revoke a policy exception',
};

/** Actions not in this release: validated and authorised, then a documented 501. */
const NOT_YET: Partial<Record<Action, string>> = {};

/** Actions that take an Idempotency-Key header (src/api/idempotency.ts): the ones that make signatures. */
const IDEMPOTENT_ACTIONS = new Set<Action>(['sign', 'pkcs11_sign', 'sign_batch']);

const SUCCESS_STATUS: Partial<Record<Action, number>> = { create_tenant: 201, create_exception: 201 };

const SIGNING_RESPONSES = {
  200: documented(SignResponse, 'the signature (SignResponse)', LOG_INDEX_HEADERS),
  202: documented(ApprovalResponse, 'the request waits for approval or security review (ApprovalResponse)'),
};
const RESPONSES: Partial<Record<Action, Record<number, unknown>>> = {
  sign: SIGNING_RESPONSES,
  pkcs11_sign: SIGNING_RESPONSES,
  sign_batch: {
    200: documented(
      SignBatchResponse,
      "every digest answered in order: a signature, or that digest's own error",
      LOG_PROOF_HEADERS,
    ),
    202: documented(
      ApprovalResponse,
      'the batch waits for approval or security review as one request (ApprovalResponse); collect it with request_id and the same hashes',
    ),
  },
  create_tenant: { 201: documented(CreateTenantResponse, 'the tenant and its first key were created') },
  rotate_key: { 200: documented(RotateKeyResponse, 'a new key version is current; every version listed') },
  get_public_key: { 200: documented(GetPublicKeyResponse, 'the public key of the current or the named key version') },
  get_import_params: {
    200: documented(GetImportParamsResponse, 'a wrapping public key and its import token, valid for 24 hours'),
  },
  import_key: {
    200: documented(ImportKeyResponse, 'the key material was imported; the key is the tenant current key'),
  },
  approve_sign: {
    200: documented(
      ApproveSignResponse,
      'the decision was recorded; the signature when approved (then with Signbridge-Log-Index)',
      LOG_INDEX_HEADERS,
    ),
  },
  create_exception: { 201: documented(ExceptionRecordSchema, 'the exception was created') },
  list_exceptions: { 200: documented(ExceptionListResponse, 'the exceptions that match, newest first') },
  revoke_exception: { 200: documented(ExceptionRecordSchema, 'the exception, now revoked') },
};

/** The error answers of an action: each status with the error codes it can carry (src/errors.ts). */
function errorResponses(action: Action): Record<number, unknown> {
  const statuses = [400, 401, 403, 404, 413, 415, 500, 503];
  // Velocity limits of the policy (docs/policy.md): 429 rate_limited with Retry-After.
  if (IDEMPOTENT_ACTIONS.has(action)) statuses.push(429);
  const conflicts: readonly Action[] = [
    'create_tenant',
    'approve_sign',
    'revoke_exception',
    'sign',
    'pkcs11_sign',
    'sign_batch',
  ];
  if (conflicts.includes(action)) statuses.push(409);
  if (IDEMPOTENT_ACTIONS.has(action)) statuses.push(422);
  if (NOT_YET[action]) statuses.push(501);
  return Object.fromEntries(statuses.map((status) => [status, errorResponse(status)]));
}

/**
 * pkcs11_sign's `message` (the module's CKM_EDDSA): only for an Ed25519 key, with `hash` its SHA-512, never with
 * PSS or a request to collect (pure Ed25519 is never held). Undefined without one; a bad one is a 400, nothing
 * signed. The bound and the key spec are the signer's checks (src/signing/pure-ed25519.ts).
 */
function pkcs11Message(body: Record<string, unknown>, digest: Buffer): Buffer | undefined {
  if (body.message === undefined) return undefined;
  const message = decodeBase64Field('message', body.message as string);
  if (body.key_spec !== undefined && body.key_spec !== 'ECC_NIST_EDWARDS25519') {
    throw new ApiError(
      'invalid_request',
      `message is signed only by an ECC_NIST_EDWARDS25519 key (pure Ed25519); a ${String(body.key_spec)} key signs ` +
        'the hash alone',
    );
  }
  if (body.pss_padding === true || body.request_id !== undefined) {
    throw new ApiError('invalid_request', 'message (pure Ed25519) takes neither pss_padding nor request_id');
  }
  if (!createHash('sha512').update(message).digest().equals(digest)) {
    throw new ApiError('invalid_hash', 'with message, hash must be the SHA-512 of the message (64 bytes)');
  }
  return message;
}

/** The API a /v1 signing request came through, and its credential, for its audit entries (SignRequest.via). */
function ownApi(caller: { id: string }): Record<string, string> {
  return { api: 'signbridge', api_key_id: caller.id };
}

function callerOf(request: FastifyRequest) {
  const caller = request.caller;
  if (!caller) throw new ApiError('unauthorized', 'not authenticated');
  return caller;
}

/** What the preHandler checked for this request's caller, action and tenant. */
function authorizationOf(request: FastifyRequest) {
  const authorization = request.authorization;
  if (!authorization) throw new ApiError('forbidden', 'not authorized');
  return authorization;
}

export async function v1Routes(app: FastifyInstance, opts: V1Options): Promise<void> {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  const { signing, exceptions, keyImports } = opts;
  const now = opts.now ?? (() => new Date());
  app.addHook('onRequest', authenticate(opts.store, opts.now));

  const handlers: Record<Action, (body: Record<string, unknown>, request: FastifyRequest) => Promise<unknown>> = {
    async sign(body, request) {
      const tenantId = body.tenant_id as string;
      const digest = decodeBase64Field('hash', body.hash as string);
      if (body.request_id !== undefined)
        return signOutcome(await signing.collect(tenantId, body.request_id as string, digest), opts.publicUrl);
      const caller = callerOf(request);
      const outcome = await signDigest(
        signing,
        { authorized: authorizationOf(request) },
        {
          action: 'sign',
          tenantId,
          digest,
          algorithm: (body.algorithm as SigningAlgorithm | undefined) ?? 'RSASSA_PKCS1_V1_5_SHA_256',
          expectedKeyId: body.key_id as string | undefined,
          context: signingContext(body, caller),
          via: ownApi(caller),
        },
      );
      return signOutcome(outcome, opts.publicUrl);
    },
    async pkcs11_sign(body, request) {
      const tenantId = body.tenant_id as string;
      const digest = decodeBase64Field('hash', body.hash as string);
      const message = pkcs11Message(body, digest);
      if (body.request_id !== undefined)
        return signOutcome(await signing.collect(tenantId, body.request_id as string, digest), opts.publicUrl);
      const caller = callerOf(request);
      if (message !== undefined) {
        // Pure Ed25519 over the message, recorded under its SHA-512 (the signer refuses any other key spec).
        const signed = await signDigest(
          signing,
          { authorized: authorizationOf(request) },
          {
            action: 'pkcs11_sign',
            tenantId,
            message,
            algorithm: 'ED25519_SHA_512',
            expectedKeyId: body.key_id as string | undefined,
            context: signingContext(body, caller),
            via: ownApi(caller),
          },
        );
        return signOutcome(signed, opts.publicUrl);
      }
      const outcome = await signDigest(
        signing,
        { authorized: authorizationOf(request) },
        {
          action: 'pkcs11_sign',
          tenantId,
          digest,
          pss: (body.pss_padding as boolean | undefined) ?? false,
          keySpec: body.key_spec as KeySpec | undefined,
          expectedKeyId: body.key_id as string | undefined,
          context: signingContext(body, caller),
          via: ownApi(caller),
        },
      );
      return signOutcome(outcome, opts.publicUrl);
    },
    async sign_batch(body, request) {
      const tenantId = body.tenant_id as string;
      const digests = (body.hashes as string[]).map((h, i) => decodeBase64Field(`hashes[${i}]`, h));
      const caller = callerOf(request);
      if (body.request_id !== undefined) {
        const collected = await signing.collectBatch(tenantId, body.request_id as string, digests);
        if (collected.kind === 'pending') return signOutcome(collected, opts.publicUrl);
        return { status: 200, body: batchBody(tenantId, collected, request) };
      }
      const outcome = await signDigests(
        signing,
        { authorized: authorizationOf(request) },
        {
          tenantId,
          digests,
          algorithm: body.algorithm as SigningAlgorithm | undefined,
          keySpec: body.key_spec as KeySpec | undefined,
          pss: (body.pss_padding as boolean | undefined) ?? false,
          expectedKeyId: body.key_id as string | undefined,
          context: signingContext(body, caller),
          via: ownApi(caller),
        },
      );
      if (outcome.kind === 'pending') return signOutcome(outcome, opts.publicUrl);
      return { status: 200, body: batchBody(tenantId, outcome, request) };
    },
    async approve_sign(body, request) {
      const result = await signing.decide(
        body.tenant_id as string,
        body.request_id as string,
        callerOf(request),
        (body.decision as 'approve' | 'reject' | undefined) ?? 'approve',
        body.reason as string | undefined,
      );
      return {
        status: 200,
        body: {
          request_id: result.requestId,
          status: result.status,
          message: result.message,
          ...(result.signed && {
            signature: result.signed.signature.toString('base64'),
            key_id: result.signed.keyId,
            signing_algorithm: result.signed.algorithm,
          }),
        },
        ...(result.signed?.logIndex !== undefined && { logIndex: result.signed.logIndex }),
      };
    },
    async create_exception(body, request) {
      const record = await exceptions.create(body.tenant_id as string, callerOf(request).id, {
        vulnId: body.vuln_id as string,
        reason: body.reason as string,
        expiresAt: body.expires_at as string,
        ...(body.project !== undefined && { project: body.project as string }),
        ...(body.artifact_type !== undefined && { artifactType: body.artifact_type as string }),
      });
      return { status: 201, body: exceptionBody(record, exceptions.status(record)) };
    },
    async list_exceptions(body) {
      const list = await exceptions.list(body.tenant_id as string, {
        ...(body.status !== undefined && { status: body.status as ExceptionStatus }),
        ...(body.vuln_id !== undefined && { vulnId: body.vuln_id as string }),
      });
      return { status: 200, body: { exceptions: list.map((e) => exceptionBody(e, exceptions.status(e))) } };
    },
    async revoke_exception(body, request) {
      const record = await exceptions.revoke(
        body.tenant_id as string,
        body.exception_id as string,
        callerOf(request).id,
      );
      return { status: 200, body: exceptionBody(record, exceptions.status(record)) };
    },
    async create_tenant(body, request) {
      const { tenant, key } = await signing.createTenant(
        body.tenant_id as string,
        body.key_spec as KeySpec,
        callerOf(request).id,
      );
      return { tenant_created: tenant.id, key: key.id, key_spec: key.keySpec };
    },
    async rotate_key(body, request) {
      const tenantId = body.tenant_id as string;
      const { key, keys } = await signing.rotateKey(
        tenantId,
        callerOf(request).id,
        body.key_spec as KeySpec | undefined,
      );
      return {
        tenant_id: tenantId,
        key_id: key.id,
        key_spec: key.keySpec,
        keys: keys.map((k) => ({
          key_id: k.id,
          key_spec: k.keySpec,
          version: k.version,
          created_at: k.createdAt,
          current: k.id === key.id,
        })),
      };
    },
    async get_public_key(body) {
      const tenantId = body.tenant_id as string;
      const current = await signing.getKey(tenantId);
      const key = body.key_id === undefined ? current : await signing.getKey(tenantId, body.key_id as string);
      return {
        key_id: key.id,
        key_spec: key.keySpec,
        key_usage: 'SIGN_VERIFY',
        public_key_pem: key.publicKeyPem,
        tenant_id: tenantId,
        signing_algorithms: hashAlgorithmsForKey(key.keySpec),
        current: key.id === current.id,
        key_store: key.keyStore,
      };
    },
    async get_import_params(body, request) {
      const params = await keyImports.getImportParams({
        tenantId: body.tenant_id as string,
        keySpec: body.key_spec as KeySpec,
        wrappingAlgorithm: body.wrapping_algorithm as WrappingAlgorithm,
        wrappingKeySpec: body.wrapping_key_spec as WrappingKeySpec,
        ...(body.kms_key_id !== undefined && { kmsKeyId: body.kms_key_id as string }),
        actor: callerOf(request).id,
      });
      return {
        import_token: params.importToken.toString('base64'),
        kms_key_id: params.kmsKeyId,
        parameters_valid_to: Math.floor(params.validTo.getTime() / 1000),
        public_key: params.publicKey.toString('base64'),
      };
    },
    async import_key(body, request) {
      const tenantId = body.tenant_id as string;
      const { key, reimport } = await keyImports.importKey({
        tenantId,
        kmsKeyId: body.kms_key_id as string,
        importToken: base64Body('import_token', body.import_token as string),
        encryptedKeyMaterial: base64Body('encrypted_key_material', body.encrypted_key_material as string),
        expirationModel: body.expiration_model as ExpirationModel,
        ...(body.valid_to !== undefined && { validTo: body.valid_to as number }),
        actor: callerOf(request).id,
      });
      const current = await signing.getKey(tenantId);
      return {
        imported: key.id,
        key_spec: key.keySpec,
        version: key.version,
        current: current.id === key.id,
        reimport,
        ...(key.materialExpiresAt !== null && {
          material_expires_at: Math.floor(Date.parse(key.materialExpiresAt) / 1000),
        }),
      };
    },
  };

  for (const action of ACTIONS) {
    typed.post(
      `/v1/${action}`,
      {
        schema: {
          operationId: action,
          summary: SUMMARIES[action],
          description: `Roles: ${ACTION_ROLES[action].join(', ')}.`,
          tags: ['v1'],
          security: [{ bearerAuth: [] }, { sigv4: [] }],
          body: ActionRequests[action],
          response: { ...RESPONSES[action], ...errorResponses(action) },
        },
        preHandler: async (request) => {
          const body = request.body as { action: string; tenant_id: string };
          if (body.action !== action) {
            throw new ApiError('action_mismatch', `body.action is ${body.action} but the path is /v1/${action}`);
          }
          request.authorization = authorize(callerOf(request), action, body.tenant_id);
        },
      },
      async (request, reply) => {
        const body = request.body as Record<string, unknown>;
        const key =
          IDEMPOTENT_ACTIONS.has(action) && body.request_id === undefined ? idempotencyKeyOf(request) : undefined;
        const result = key
          ? await answerOnce(
              opts.store,
              callerOf(request).id,
              key,
              { action, body },
              now(),
              async () => {
                const answered = await handlers[action](body, request);
                return isReply(answered) ? answered : { status: SUCCESS_STATUS[action] ?? 200, body: answered };
              },
              (signed, batchId) => keptReplyOf(action, body, request, signed, batchId, opts.publicUrl),
            )
          : await handlers[action](body, request);
        if (isReply(result)) {
          const log = app.transparencyLog;
          const preference = log ? logPreferenceOf(request.headers.prefer) : undefined;
          if (action === 'sign_batch' && log && preference && result.status === 200) {
            const body = result.body as BatchBody;
            return reply.code(200).send(await withBatchProofs(log, opts.store, body, preference, reply));
          }
          // Kept with an idempotent answer too: a replay carries the same index.
          if (result.logIndex === undefined) return reply.code(result.status).send(result.body);
          reply.header(LOG_INDEX_HEADER, String(result.logIndex));
          const got = log && preference ? await logProofsOf(log, [result.logIndex], preference) : undefined;
          if (!got || !preference) return reply.code(result.status).send(result.body);
          reply.headers(logProofHeaders(preference, got));
          return reply.code(result.status).send({ ...(result.body as object), log_proof: got.proofs[0] });
        }
        return reply.code(SUCCESS_STATUS[action] ?? 200).send(result);
      },
    );
  }

  // Any other /v1/ path: a stable 404 rather than fastify's generic one (after authentication, like the rest).
  app.post('/v1/:action', { schema: { hide: true } }, async (request) => {
    const { action } = request.params as { action: string };
    throw new ApiError('unknown_action', `unknown action ${action}; actions: ${ACTIONS.join(', ')}`);
  });
}

/** A base64 field that is not a digest: a bad one is invalid_request (invalid_hash names the `hash` field). */
function base64Body(field: string, value: string): Buffer {
  try {
    return decodeBase64Field(field, value);
  } catch (err) {
    if (err instanceof ApiError) throw new ApiError('invalid_request', err.message);
    throw err;
  }
}
