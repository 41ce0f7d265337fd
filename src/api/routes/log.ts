// The transparency log's read endpoints (docs/transparency.md): the latest checkpoint, the verifier key, inclusion
// and consistency proofs; and POST /log/checkpoint, an operator's on-demand checkpoint. Readable with any API key,
// or by anyone when log.public is set; another tenant's entry is served as its leaf hash only.
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from '@sinclair/typebox';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { rolesOf } from '../../auth/api-keys.js';
import { ApiError } from '../../errors.js';
import type { ApiKeyRecord, Store } from '../../store/store.js';
import { batchItemProof } from '../../transparency/batch-item-proof.js';
import { type LogEntryRef, resolveLogEntry } from '../../transparency/entry-lookup.js';
import { LogNotFoundError, type LogService } from '../../transparency/log-service.js';
import { authenticate } from '../authenticate.js';
import { documented, errorResponse } from '../responses.js';

export interface LogRoutesOptions {
  store: Store;
  log: LogService;
  now?: () => Date;
}

/** A decimal tree size or index, as a query parameter (strict JSON schema validation does not coerce). */
const Count = (description: string) => Type.String({ pattern: '^(0|[1-9][0-9]{0,14})$', description });

const InclusionQuery = Type.Object(
  {
    index: Type.Optional(Count('leaf index: the audit entry seq - 1')),
    item: Type.Optional(
      Count("with index: a signature of the batch entry at index, by its place in the sign_batch request's hashes"),
    ),
    signature_sha256: Type.Optional(
      Type.String({ description: "SHA-256 of the raw signature bytes, hex: that signature's `signed` entry" }),
    ),
    digest: Type.Optional(
      Type.String({ description: "the digest that was signed, base64: the tenant's latest `signed` entry for it" }),
    ),
    tenant: Type.Optional(
      Type.String({
        description:
          "whose signature or digest (default: the API key's tenant); only for keys of no tenant and public logs",
      }),
    ),
    tree_size: Type.Optional(Count('a checkpointed tree size (default: the latest checkpoint)')),
  },
  { additionalProperties: false },
);

const PublicKeyQuery = Type.Object(
  {
    type: Type.Optional(
      Type.Union([Type.Literal('ecdsa'), Type.Literal('ed25519'), Type.Literal('all')], {
        description:
          'ecdsa (default): the key every checkpoint carries; ed25519: the key the standard signed-note verifiers and ' +
          'witnesses accept; all: both lines, ECDSA first',
      }),
    ),
  },
  { additionalProperties: false },
);

const ConsistencyQuery = Type.Object(
  { from: Count('the older tree size'), to: Count('the newer tree size') },
  { additionalProperties: false },
);

export const InclusionProofResponse = Type.Object(
  {
    index: Type.Integer({ description: 'the leaf index (audit seq - 1)' }),
    tree_size: Type.Integer({ description: 'the size of the tree the proof is for' }),
    leaf_hash: Type.String({ description: 'base64 SHA-256(0x00 ‖ entry)' }),
    entry: Type.Optional(
      Type.String({
        description: "base64 of the leaf's bytes (the entry's canonical JSON); omitted for another tenant's entry",
      }),
    ),
    proof: Type.Array(Type.String(), { description: 'base64 hashes, RFC 9162 §2.1.3 order' }),
    checkpoint: Type.String({ description: 'the signed checkpoint note of exactly tree_size' }),
    batch_item: Type.Optional(
      Type.Object(
        {
          index: Type.Integer({ description: "the signature's place in the sign_batch request's hashes" }),
          position: Type.Integer({
            description: "the item's leaf index in the batch's tree (details.batch.signed leaves)",
          }),
          digest: Type.String({ description: 'the digest signed, base64' }),
          signature_sha256: Type.String({ description: 'SHA-256 of the signature bytes, hex' }),
          proof: Type.Array(Type.String(), {
            description: "the item's audit path to details.batch.root, base64 hashes, RFC 9162 §2.1.3 order",
          }),
        },
        {
          description:
            "a signature of a batch (issue 46): the item and its path in the batch entry; omitted for another tenant's entry (docs/transparency.md)",
        },
      ),
    ),
  },
  { $id: 'InclusionProofResponse', title: 'InclusionProofResponse' },
);

export const ConsistencyProofResponse = Type.Object(
  {
    from: Type.Integer(),
    to: Type.Integer(),
    proof: Type.Array(Type.String(), { description: 'base64 hashes, RFC 9162 §2.1.4 order' }),
  },
  { $id: 'ConsistencyProofResponse', title: 'ConsistencyProofResponse' },
);

const text = (description: string) => ({ description, content: { 'text/plain': { schema: { type: 'string' } } } });
const errors = (...statuses: number[]) => Object.fromEntries(statuses.map((s) => [s, errorResponse(s)]));

function notFound(err: unknown): never {
  if (err instanceof LogNotFoundError) throw new ApiError('not_found', err.message);
  throw err;
}

/**
 * The leaf index a request asks about: the index given, or the `signed` entry of a signature or digest within one
 * tenant's (the key's tenant; `tenant=` only for a key of no tenant or an anonymous caller of a public log).
 * 404 when that tenant has no such entry.
 */
async function entryOf(
  store: Store,
  caller: ApiKeyRecord | undefined,
  query: { index?: string; item?: string; signature_sha256?: string; digest?: string; tenant?: string },
): Promise<LogEntryRef> {
  const byIndex = query.index !== undefined;
  if (byIndex && query.signature_sha256 === undefined && query.digest === undefined) {
    return { index: Number(query.index), ...(query.item !== undefined && { item: Number(query.item) }) };
  }
  const keyTenant = caller?.tenantId ?? null;
  if (keyTenant !== null && query.tenant !== undefined && query.tenant !== keyTenant) {
    throw new ApiError('forbidden', `this API key belongs to tenant ${keyTenant}, not ${query.tenant}`);
  }
  const tenant = keyTenant ?? query.tenant;
  if (tenant === undefined && !byIndex) {
    throw new ApiError('invalid_request', 'a lookup by signature_sha256 or digest needs a tenant: tenant=<id>');
  }
  const entry = await resolveLogEntry(store, tenant ?? '', {
    ...(byIndex && { index: Number(query.index) }),
    ...(query.item !== undefined && { item: Number(query.item) }),
    ...(query.signature_sha256 !== undefined && { signature_sha256: query.signature_sha256 }),
    ...(query.digest !== undefined && { digest: query.digest }),
  });
  if (entry === undefined) {
    throw new ApiError(
      'not_found',
      `tenant ${tenant} has no signed entry for this ${query.digest ? 'digest' : 'signature'}`,
    );
  }
  return entry;
}

export async function logRoutes(app: FastifyInstance, opts: LogRoutesOptions): Promise<void> {
  const typed = app.withTypeProvider<TypeBoxTypeProvider>();
  const { log } = opts;
  const auth = authenticate(opts.store, opts.now);
  // With log.public a request without a key is served (as nobody's tenant); a key that is sent is still checked.
  app.addHook('onRequest', async (request) => {
    if (request.headers.authorization === undefined && log.settings.public && request.method === 'GET') return;
    await auth(request);
  });
  app.addSchema(InclusionProofResponse);
  app.addSchema(ConsistencyProofResponse);
  const security: Array<Record<string, string[]>> = log.settings.public
    ? [{}, { bearerAuth: [] }]
    : [{ bearerAuth: [] }];

  typed.get(
    '/log/checkpoint',
    {
      schema: {
        operationId: 'log_checkpoint',
        summary: 'The latest signed checkpoint of the audit log (C2SP tlog-checkpoint in a signed note)',
        tags: ['log'],
        security,
        response: { 200: text('the checkpoint note'), ...errors(401, 404, 500, 503) },
      },
    },
    async (_request, reply) => {
      const checkpoint = await log.checkpoint().catch(notFound);
      return reply.type('text/plain; charset=utf-8').header('cache-control', 'max-age=2').send(checkpoint.note);
    },
  );

  typed.get(
    '/log/public-key',
    {
      schema: {
        operationId: 'log_public_key',
        summary:
          "The log's verifier keys, signed-note form: ECDSA <origin>+<hex key ID>+<base64(0x02 ‖ DER SPKI)> by " +
          'default, Ed25519 <origin>+<hex key ID>+<base64(0x01 ‖ key)> with type=ed25519, both with type=all',
        tags: ['log'],
        security,
        querystring: PublicKeyQuery,
        response: { 200: text('the verifier key line (type=all: one per line)'), ...errors(400, 401, 404, 500, 503) },
      },
    },
    async (request, reply) => {
      const type = request.query.type ?? 'ecdsa';
      const ecdsa = type === 'ed25519' ? undefined : await log.verifierKey();
      const ed25519 = type === 'ecdsa' ? undefined : await log.ed25519VerifierKey();
      if (type === 'ed25519' && ed25519 === undefined) {
        throw new ApiError('not_found', 'this log has no Ed25519 key (its key stores have no sealer to keep one)');
      }
      const lines = [ecdsa, ed25519].filter((line): line is string => line !== undefined);
      return reply.type('text/plain; charset=utf-8').send(lines.map((line) => `${line}\n`).join(''));
    },
  );

  typed.get(
    '/log/proof/inclusion',
    {
      schema: {
        operationId: 'log_inclusion_proof',
        summary: 'An audit entry with its inclusion proof in a checkpointed tree',
        tags: ['log'],
        security,
        querystring: InclusionQuery,
        response: {
          200: documented(InclusionProofResponse, 'the leaf, its proof and the checkpoint it verifies against'),
          ...errors(400, 401, 404, 500, 503),
        },
      },
    },
    async (request) => {
      const { index, item } = await entryOf(opts.store, request.caller, request.query);
      const treeSize = request.query.tree_size === undefined ? undefined : Number(request.query.tree_size);
      const answer = await log.inclusion(index, treeSize).catch(notFound);
      const readable = mayRead(request.caller, answer.tenantId);
      // A signature of a batch: its item and path in the batch entry, which the inclusion proof then proves.
      const batchItem =
        item !== undefined && readable ? await batchItemProof(opts.store, index + 1, item).catch(notFound) : undefined;
      return {
        index: answer.index,
        tree_size: answer.treeSize,
        leaf_hash: answer.leafHash.toString('base64'),
        ...(readable && { entry: answer.entry.toString('base64') }),
        proof: answer.proof.map((h) => h.toString('base64')),
        checkpoint: answer.checkpoint.note,
        ...(batchItem && { batch_item: batchItem }),
      };
    },
  );

  typed.get(
    '/log/proof/consistency',
    {
      schema: {
        operationId: 'log_consistency_proof',
        summary: 'A consistency proof between two tree sizes',
        tags: ['log'],
        security,
        querystring: ConsistencyQuery,
        response: {
          200: documented(ConsistencyProofResponse, 'the proof that the tree of `from` is a prefix of that of `to`'),
          ...errors(400, 401, 404, 500, 503),
        },
      },
    },
    async (request) => {
      const from = Number(request.query.from);
      const to = Number(request.query.to);
      if (from > to) throw new ApiError('invalid_request', `from (${from}) must not be larger than to (${to})`);
      const proof = await log.consistency(from, to).catch(notFound);
      return { from, to, proof: proof.map((h) => h.toString('base64')) };
    },
  );

  typed.get(
    '/log/tile/*',
    {
      schema: {
        operationId: 'log_tile',
        summary: 'A tile of the tree (c2sp.org/tlog-tiles): /log/tile/<L>/<N> (full, immutable) or <N>.p/<W> (partial)',
        tags: ['log'],
        security,
        response: {
          200: {
            description: 'W (or 256) hashes of 32 bytes, concatenated',
            content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } },
          },
          ...errors(400, 401, 404, 500, 503),
        },
      },
    },
    async (request, reply) => {
      const path = (request.params as { '*': string })['*'];
      const tile = parseTilePath(path);
      if (!tile) throw new ApiError('invalid_request', `not a tile path: ${path} (tile/<L>/<N>[.p/<W>], tlog-tiles)`);
      const hashes = await log.tile(tile.level, tile.index, tile.width).catch(notFound);
      return reply
        .type('application/octet-stream')
        .header('cache-control', tile.width === 256 ? 'public, max-age=31536000, immutable' : 'max-age=2')
        .send(hashes);
    },
  );

  typed.post(
    '/log/checkpoint',
    {
      schema: {
        operationId: 'log_publish_checkpoint',
        summary: 'Operator: integrate every entry written so far and publish a checkpoint now',
        tags: ['log'],
        security: [{ bearerAuth: [] }],
        response: { 200: text('the new latest checkpoint note'), ...errors(401, 403, 500, 503) },
      },
    },
    async (request, reply) => {
      requireOperator(request);
      const checkpoint = await log.checkpointNow();
      return reply.type('text/plain; charset=utf-8').send(checkpoint.note);
    },
  );
}

/**
 * `<L>/<N>[.p/<W>]` of tlog-tiles: N in groups of three digits, all but the last prefixed with x (x001/x234/067);
 * W from 1 to 255 for a partial tile. Undefined for anything else.
 */
export function parseTilePath(path: string): { level: number; index: number; width: number } | undefined {
  const m = /^(\d{1,2})\/((?:x\d{3}\/)*\d{3})(?:\.p\/(\d{1,3}))?$/.exec(path);
  if (!m) return undefined;
  const level = Number(m[1]);
  const index = Number((m[2] as string).replace(/x|\//g, ''));
  const width = m[3] === undefined ? 256 : Number(m[3]);
  if (level > 63 || !Number.isSafeInteger(index) || width < 1 || width > 256 || (m[3] !== undefined && width === 256)) {
    return undefined;
  }
  return { level, index, width };
}

/** A tenant's key reads its tenant's entries; an operator key the service's own (no tenant); nobody else any. */
function mayRead(caller: ApiKeyRecord | undefined, tenantId: string | null): boolean {
  return caller !== undefined && caller.tenantId === tenantId;
}

function requireOperator(request: FastifyRequest): void {
  const caller = request.caller;
  if (!caller) throw new ApiError('unauthorized', 'not authenticated');
  if (!rolesOf(caller).includes('operator')) {
    throw new ApiError('forbidden', 'only an operator key may publish a checkpoint on demand');
  }
}
