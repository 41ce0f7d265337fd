// AWS KMS's JSON 1.1 protocol on POST /: the X-Amz-Target names the operation, SigV4 names the caller (an AWS-format
// API key, or an STS session's temporary credentials), and each operation answers in KMS's shapes and errors.
// docs/kms-api.md.

import type { AwsSecrets } from '../../auth/aws-credentials/aws-credentials.js';
import { SigV4Verifier } from '../../auth/sigv4/verify-request.js';
import type { SigningService } from '../../signing/signing-service.js';
import type { ApiKeyRecord, Store } from '../../store/store.js';
import type { AwsAnswer, AwsCall, AwsHandler } from '../aws-endpoint.js';
import { AWS_JSON_CONTENT_TYPE, AwsJsonError } from './errors.js';

export interface KmsHandlerOptions {
  store: Store;
  signing: SigningService;
  secrets: AwsSecrets;
  heldWaitMs: number;
  now: () => Date;
  publicUrl?: string | undefined;
}

const TARGET_PREFIX = 'TrentService.';

export function kmsHandler(opts: KmsHandlerOptions): AwsHandler {
  const verifier = new SigV4Verifier<ApiKeyRecord>({
    service: 'kms',
    secretFor: (id, token) => opts.secrets.secretFor(id, token),
    now: () => opts.now().getTime(),
  });
  return async (call: AwsCall): Promise<AwsAnswer> => {
    try {
      const target = call.request.headers['x-amz-target'];
      const result = await verifier.verify({
        method: call.request.method,
        url: call.request.url,
        headers: call.request.raw.headersDistinct,
        body: call.body,
      });
      if (!result.ok) throw new AwsJsonError(result.refusal.type, result.refusal.message, result.refusal.status);
      const operation =
        typeof target === 'string' && target.startsWith(TARGET_PREFIX) ? target.slice(TARGET_PREFIX.length) : undefined;
      throw new AwsJsonError(
        'UnsupportedOperationException',
        `${operation ?? 'this operation'} is not supported by signbridge`,
      );
    } catch (err) {
      if (err instanceof AwsJsonError)
        return { status: err.status, contentType: AWS_JSON_CONTENT_TYPE, body: err.body() };
      throw err;
    }
  };
}
