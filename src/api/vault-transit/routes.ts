// Vault's transit secrets engine on /v1/<mount>/ (registered with that prefix): sign, verify, read a key, list keys,
// so that hvac, cosign's hashivault:// and jsign's HASHICORPVAULT store sign through signbridge's policy with
// VAULT_ADDR pointed here. A key's name is the tenant id; the token is a signbridge API key. docs/kms-api.md.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { type Static, Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { rolesOf } from '../../auth/api-keys.js';
import { ApiError } from '../../errors.js';
import type { SigningService } from '../../signing/signing-service.js';
import { ACTION_ROLES } from '../../store/records/roles.js';
import type { ApiKeyRecord, Store } from '../../store/store.js';
import { authorize } from '../authenticate.js';
import { clientGoneSignal } from '../client-gone.js';
import { LOG_INDEX_HEADER } from '../responses.js';
import { TENANT_ID_PATTERN } from '../schemas.js';
import { PERMISSION_DENIED, sendVaultError, VaultError, vaultErrorOf } from './errors.js';
import { describeKey } from './key-description.js';
import { readEveryBodyAsJson } from './request-body.js';
import { decodeInput, SignBody, schemeOf, VerifyBody } from './request-fields.js';
import {
  VaultErrorResponse,
  VaultKeyListResponse,
  VaultKeyResponse,
  VaultSignResponse,
  VaultVerifyResponse,
  vaultResponses,
} from './response-schemas.js';
import { signBatchInputs } from './sign-batch-inputs.js';
import { signInput } from './sign-inputs.js';
import { vaultAuthenticate } from './vault-token.js';
import { verifyItem } from './verify-inputs.js';

export interface VaultTransitOptions {
  store: Store;
  signing: SigningService;
  /** How long a call held for approval waits for the decision before it answers with the held error. */
  heldWaitMs: number;
  now: () => Date;
  /** The service's public URL: a held call names the console page that decides it. */
  publicUrl?: string | undefined;
}

const Name = Type.Object({ name: Type.String({ pattern: TENANT_ID_PATTERN, description: 'the tenant id' }) });
const NameAndHash = Type.Object({
  name: Type.String({ pattern: TENANT_ID_PATTERN, description: 'the tenant id' }),
  hash_algorithm: Type.String({ description: 'sha2-256, sha2-384 or sha2-512 (wins over the body)' }),
});
const TokenHeaders = Type.Object({
  'x-vault-token': Type.Optional(
    Type.String({ description: 'a signbridge API key (sbk_...); or send it as Authorization: Bearer' }),
  ),
});
const TAGS = ['vault-transit'];
const SECURITY = [{ bearerAuth: [] }];

function callerOf(request: FastifyRequest): ApiKeyRecord {
  if (!request.caller) throw new VaultError(403, [PERMISSION_DENIED]);
  return request.caller;
}

/** A key that may read public keys sees its own tenant, or every tenant when it is bound to none. */
async function visibleTenants(store: Store, caller: ApiKeyRecord): Promise<string[]> {
  if (!rolesOf(caller).some((r) => ACTION_ROLES.get_public_key.includes(r))) {
    throw new ApiError('forbidden', `role ${rolesOf(caller).join('+')} may not read keys`);
  }
  if (caller.tenantId === null) return store.tenants.listIds();
  return (await store.tenants.get(caller.tenantId)) ? [caller.tenantId] : [];
}

/** A batch item's own refusal as its result, so that it fails alone; anything else still fails the call. */
function attempt<T>(make: () => T): T | VaultError {
  try {
    return make();
  } catch (err) {
    if (err instanceof VaultError) return err;
    throw err;
  }
}

/**
 * Vault takes a write as PUT or POST alike; its Go client (the vault CLI, Terraform, cosign) writes with PUT
 * (api/logical.go Write), hvac and curl examples with POST. Reads stay GET.
 */
const WRITE_METHODS = ['POST', 'PUT'] as const;
type WriteMethod = (typeof WRITE_METHODS)[number];
/** The OpenAPI document shows the POST operation, whose summary says PUT is the same; PUT's twin is hidden. */
const documented = (method: WriteMethod) => (method === 'POST' ? {} : { hide: true });

/** Vault's answer for a key or list that does not exist: 404 with no error text. */
const NOT_FOUND = new VaultError(404, []);

export async function vaultTransitRoutes(app: FastifyInstance, opts: VaultTransitOptions): Promise<void> {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  app.setErrorHandler((error, request, reply) => {
    const vault = vaultErrorOf(error);
    // As error-handler.ts logs: a fault that passes (503, Retry-After) one line with its reason, others the error.
    if (vault.status >= 500 && vault.retryAfterSeconds === undefined) {
      request.log.error({ err: error }, 'vault transit request failed');
    } else if (vault.status >= 500) {
      request.log.warn({ status: vault.status, reason: vault.message }, 'vault transit request failed');
    } else {
      request.log.info({ status: vault.status, reason: vault.message }, 'vault transit request refused');
    }
    return sendVaultError(reply, vault);
  });
  app.setNotFoundHandler((_request, reply) => sendVaultError(reply, new VaultError(404, ['unsupported path'])));
  // Exactly application/json, as Vault answers: hvac reads `errors` only under that Content-Type, no charset.
  app.addHook('onSend', async (_request, reply, payload) => {
    reply.header('content-type', 'application/json');
    return payload;
  });
  app.addHook('onRequest', vaultAuthenticate(opts.store, opts.now));
  readEveryBodyAsJson(app);

  typed.get(
    '/keys',
    {
      schema: {
        operationId: 'vaultTransitListKeys',
        summary: 'Vault transit: list keys (the tenants this key may read); LIST /keys is answered the same',
        tags: TAGS,
        security: SECURITY,
        headers: TokenHeaders,
        querystring: Type.Object({ list: Type.Optional(Type.String({ description: 'must be true' })) }),
        response: {
          ...vaultResponses(VaultKeyListResponse, 'the key names'),
          405: { ...VaultErrorResponse, description: 'a GET without list=true (unsupported operation)' },
        },
      },
    },
    async (request) => {
      if (request.query.list !== 'true') {
        throw new VaultError(405, ['unsupported operation; list the keys with GET ?list=true']);
      }
      const keys = await visibleTenants(opts.store, callerOf(request));
      if (keys.length === 0) throw NOT_FOUND;
      return { data: { keys } };
    },
  );

  typed.get(
    '/keys/:name',
    {
      schema: {
        operationId: 'vaultTransitReadKey',
        summary: "Vault transit: read a key (the tenant's key versions and public keys)",
        tags: TAGS,
        security: SECURITY,
        headers: TokenHeaders,
        params: Name,
        response: vaultResponses(VaultKeyResponse, "the key, as Vault's transit describes one"),
      },
    },
    async (request) => {
      const { name } = request.params;
      authorize(callerOf(request), 'get_public_key', name);
      const current = await opts.signing.getKey(name).catch((err) => {
        throw err instanceof ApiError && err.code === 'tenant_not_found' ? NOT_FOUND : err;
      });
      return { data: describeKey(name, await opts.signing.listKeys(name), current) };
    },
  );

  const sign = async (
    request: FastifyRequest<{ Params: { name: string; hash_algorithm?: string }; Body: Static<typeof SignBody> }>,
    reply: FastifyReply,
  ) => {
    const { name, hash_algorithm } = request.params;
    // Checked before the request's fields are read; what was checked goes on to the signing entry point.
    const authorized = authorize(callerOf(request), 'sign', name);
    const body = request.body;
    const scheme = schemeOf(body, hash_algorithm);
    const batch = body.batch_input;
    if (batch === undefined && body.input === undefined) throw new VaultError(400, ['missing input to process']);
    // A batch item that does not decode fails alone; a single input that does not fails the call.
    const inputs = batch
      ? batch.map((item, i) => attempt(() => decodeInput(`batch_input[${i}].input`, item.input)))
      : [decodeInput('input', body.input as string)];
    const deps = { signing: opts.signing, heldWaitMs: opts.heldWaitMs, publicUrl: opts.publicUrl };
    const signal = clientGoneSignal(reply.raw);
    // A batch is one sign_batch request (one policy decision); one input is one sign request.
    if (batch) {
      const results = await signBatchInputs(deps, authorized, scheme, body.key_version, inputs, signal);
      const batchResults = results.map((r, i) => ({
        ...(r instanceof VaultError ? { error: r.message } : r),
        ...(batch[i]?.reference !== undefined && { reference: batch[i]?.reference }),
      }));
      return reply.send({ data: { batch_results: batchResults } });
    }
    const only = await signInput(deps, authorized, scheme, body.key_version, inputs[0] as Buffer, signal);
    if (only instanceof VaultError) throw only;
    if (only.log_index !== undefined) reply.header(LOG_INDEX_HEADER, String(only.log_index));
    return reply.send({ data: { signature: only.signature, key_version: only.key_version } });
  };
  const signSchema = (withHash: boolean, method: WriteMethod) => ({
    operationId: withHash ? 'vaultTransitSignWithHash' : 'vaultTransitSign',
    summary: 'Vault transit: sign with the tenant key (policy-checked, audited, logged); PUT is the same',
    ...documented(method),
    tags: TAGS,
    security: SECURITY,
    headers: TokenHeaders,
    params: withHash ? NameAndHash : Name,
    body: SignBody,
    response: vaultResponses(VaultSignResponse, 'the signature, or the batch results', true),
  });
  for (const method of WRITE_METHODS) {
    typed.route({ method, url: '/sign/:name', schema: signSchema(false, method), handler: sign });
    typed.route({ method, url: '/sign/:name/:hash_algorithm', schema: signSchema(true, method), handler: sign });
  }

  const verify = async (
    request: FastifyRequest<{ Params: { name: string; hash_algorithm?: string }; Body: Static<typeof VerifyBody> }>,
  ) => {
    const { name, hash_algorithm } = request.params;
    authorize(callerOf(request), 'get_public_key', name);
    const body = request.body;
    const scheme = schemeOf(body, hash_algorithm);
    const versions = await opts.signing.listKeys(name);
    const batch = body.batch_input;
    if (batch) {
      const batchResults = batch.map((item, i) => {
        const input = attempt(() => decodeInput(`batch_input[${i}].input`, item.input));
        const outcome =
          input instanceof VaultError ? input : verifyItem(versions, scheme, { input, signature: item.signature });
        return {
          ...(outcome instanceof VaultError ? { error: outcome.message } : { valid: outcome }),
          ...(item.reference !== undefined && { reference: item.reference }),
        };
      });
      return { data: { batch_results: batchResults } };
    }
    if (body.input === undefined || body.signature === undefined) {
      throw new VaultError(400, ['missing input or signature to verify']);
    }
    const outcome = verifyItem(versions, scheme, {
      input: decodeInput('input', body.input),
      signature: body.signature,
    });
    if (outcome instanceof VaultError) throw outcome;
    return { data: { valid: outcome } };
  };
  const verifySchema = (withHash: boolean, method: WriteMethod) => ({
    operationId: withHash ? 'vaultTransitVerifyWithHash' : 'vaultTransitVerify',
    summary: 'Vault transit: verify a vault:v<N>: signature with version N of the tenant key; PUT is the same',
    ...documented(method),
    tags: TAGS,
    security: SECURITY,
    headers: TokenHeaders,
    params: withHash ? NameAndHash : Name,
    body: VerifyBody,
    response: vaultResponses(VaultVerifyResponse, 'whether the signature is valid, or the batch results'),
  });
  for (const method of WRITE_METHODS) {
    typed.route({ method, url: '/verify/:name', schema: verifySchema(false, method), handler: verify });
    typed.route({ method, url: '/verify/:name/:hash_algorithm', schema: verifySchema(true, method), handler: verify });
  }
}
