// What every KMS operation is handed and answers (kms-handler.ts dispatches; one file per group of operations).
import type { ApiKeyRecord } from '../../../store/store.js';
import type { KmsInput } from './request-fields.js';

export interface KmsCall {
  input: KmsInput;
  /** The API key behind the SigV4 credentials (an AWS-format key, or an STS session's temporary one). */
  caller: ApiKeyRecord;
  accessKeyId: string;
  /** The region of the request's credential scope: any name; answers' ARNs carry it. */
  region: string;
  /** Aborted when the client goes away. */
  signal: AbortSignal;
  /** The request's RFC 7240 Prefer header (`wait-for-log` on Sign: docs/kms-api.md). */
  prefer?: string | string[] | undefined;
}

export interface KmsResult {
  body: Record<string, unknown>;
  headers?: Record<string, string>;
}

export type KmsOperation = (call: KmsCall) => Promise<KmsResult>;
