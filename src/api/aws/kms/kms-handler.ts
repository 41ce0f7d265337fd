// AWS KMS's JSON 1.1 protocol on POST /: the X-Amz-Target names the operation, SigV4 names the caller (an AWS-format
// API key, or an STS session's temporary credentials), and each operation answers in KMS's shapes and errors.
// Operations signbridge does not offer answer UnsupportedOperationException. docs/kms-api.md.

import type { AwsRequestVerifier } from '../../../auth/aws-credentials/aws-request-verifier.js';
import { parseAccessKeyId } from '../../../auth/aws-credentials/credential-format.js';
import type { SigV4Refusal } from '../../../auth/sigv4/refusal.js';
import { ApiError } from '../../../errors.js';
import type { SigningService } from '../../../signing/signing-service.js';
import { counterKey } from '../../../store/records/counter-names.js';
import type { Store } from '../../../store/store.js';
import type { LogService } from '../../../transparency/log-service.js';
import { asApiError } from '../../error-handler.js';
import type { AwsAnswer, AwsCall, AwsHandler } from '../endpoint.js';
import { AWS_JSON_CONTENT_TYPE, AwsJsonError, awsErrorFor } from './errors.js';
import { keyOperations } from './key-operations.js';
import type { KmsOperation } from './operation.js';
import { parseKmsInput } from './request-fields.js';
import { signOperations } from './sign-operations.js';

export interface KmsHandlerOptions {
  store: Store;
  signing: SigningService;
  /** The SigV4 verifier of the AWS-format credentials, shared with STS (kms-apis.ts). */
  verifier: AwsRequestVerifier;
  heldWaitMs: number;
  now: () => Date;
  publicUrl?: string | undefined;
  /** The transparency log, for Sign with `Prefer: wait-for-log` (the proof in a header). */
  log?: LogService | undefined;
}

const TARGET_PREFIX = 'TrentService.';
/** Recorded for a refused call whose X-Amz-Target names no operation signbridge serves. */
const OTHER_OPERATION = '(not an operation signbridge serves)';

/**
 * Refused signatures are audited, at most this many per client address a minute: each entry goes into the
 * transparency log, and nobody needs a key to be refused.
 */
const REFUSALS_AUDITED_PER_MINUTE = 20;

export function kmsHandler(opts: KmsHandlerOptions): AwsHandler {
  const operations: Record<string, KmsOperation> = {
    ...signOperations({
      signing: opts.signing,
      heldWaitMs: opts.heldWaitMs,
      publicUrl: opts.publicUrl,
      log: opts.log,
    }),
    ...keyOperations(opts.signing),
  };

  async function auditRefusal(refusal: SigV4Refusal, call: AwsCall, operation: string | undefined): Promise<void> {
    const at = opts.now();
    const counted = await opts.store.requestCounts.count(
      counterKey('kmsRefusal', call.request.ip),
      at.getTime(),
      60_000,
    );
    if (counted.count > REFUSALS_AUDITED_PER_MINUTE) return;
    // The refusal's recorded forms only: the id when it has signbridge's form, the message without the client's text.
    const issued = refusal.accessKeyId !== undefined && parseAccessKeyId(refusal.accessKeyId) !== undefined;
    await opts.store.audit.append({
      at: at.toISOString(),
      tenantId: await tenantOfKey(opts.store, refusal.accessKeyId),
      actor: issued ? `aws:${refusal.accessKeyId}` : 'anonymous',
      action: 'kms_request',
      outcome: 'refused',
      details: {
        error: refusal.type,
        reason: refusal.recordedMessage,
        // The X-Amz-Target is the client's text too: only an operation signbridge serves is named.
        operation: operation === undefined ? null : Object.hasOwn(operations, operation) ? operation : OTHER_OPERATION,
        access_key_id: refusal.accessKeyId ?? null,
        client: call.request.ip,
      },
    });
  }

  async function answer(call: AwsCall): Promise<AwsAnswer> {
    const target = call.request.headers['x-amz-target'];
    const operation =
      typeof target === 'string' && target.startsWith(TARGET_PREFIX) ? target.slice(TARGET_PREFIX.length) : undefined;
    const result = await opts.verifier.verify(
      { method: call.request.method, url: call.request.url, headers: call.headers, body: call.body },
      'kms',
    );
    if (!result.ok) {
      await auditRefusal(result.refusal, call, operation);
      throw new AwsJsonError(result.refusal.type, result.refusal.message, result.refusal.status);
    }
    const contentType = (call.request.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
    if (contentType !== AWS_JSON_CONTENT_TYPE) {
      throw new AwsJsonError('SerializationException', `Content-Type must be ${AWS_JSON_CONTENT_TYPE}`);
    }
    const run = operation === undefined ? undefined : operations[operation];
    if (!run || !Object.hasOwn(operations, operation as string)) {
      throw new AwsJsonError(
        'UnsupportedOperationException',
        `${operation ?? String(target ?? 'an empty X-Amz-Target')} is not supported by signbridge; supported: ${Object.keys(operations).join(', ')}`,
      );
    }
    const { identity } = result;
    const done = await run({
      input: parseKmsInput(call.body),
      caller: identity.principal,
      accessKeyId: identity.accessKeyId,
      region: identity.region,
      signal: call.signal,
      prefer: call.request.headers.prefer,
    });
    return {
      status: 200,
      contentType: AWS_JSON_CONTENT_TYPE,
      body: JSON.stringify(done.body),
      ...(done.headers && { headers: done.headers }),
    };
  }

  return async (call: AwsCall): Promise<AwsAnswer> => {
    try {
      return await answer(call);
    } catch (err) {
      const error = err instanceof AwsJsonError ? err : awsErrorFor(asApiError(err));
      if (!(err instanceof AwsJsonError) && !(err instanceof ApiError)) {
        call.request.log.error({ err }, 'KMS request failed');
      }
      return { status: error.status, contentType: AWS_JSON_CONTENT_TYPE, body: error.body() };
    }
  };
}

/** The tenant of the key an access key id names, if any: a refusal of a known key belongs in its tenant's log. */
async function tenantOfKey(store: Store, accessKeyId: string | undefined): Promise<string | null> {
  const parsed = accessKeyId === undefined ? undefined : parseAccessKeyId(accessKeyId);
  if (!parsed) return null;
  return (await store.apiKeys.get(parsed.id))?.tenantId ?? null;
}
