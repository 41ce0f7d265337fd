// AWS STS's query protocol on POST / (a form body without X-Amz-Target): AssumeRoleWithWebIdentity, the call the
// AWS SDKs' web identity provider makes with a CI job's OIDC token (AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE +
// AWS_ENDPOINT_URL_STS). Unauthenticated, as at AWS: the token is the credential. The role ARN's account names the
// tenant; the shared TokenExchange verifies the token against that tenant's trust rules exactly as POST /oauth/token
// does, and mints temporary AWS credentials (SBTK..., a secret, a session token) that the KMS endpoint accepts.
// GetCallerIdentity (SigV4-signed) answers who such credentials are (caller-identity.ts). docs/kms-api.md, "CI
// jobs: STS web identity".

import { createTemporaryAwsKey, NO_SEALER } from '../../../auth/aws-credentials/aws-credentials.js';
import type { AwsRequestVerifier } from '../../../auth/aws-credentials/aws-request-verifier.js';
import { quoted } from '../../../auth/credential-echo.js';
import { ExchangeError, type TokenExchange } from '../../../auth/workload/token-exchange.js';
import type { Sealer } from '../../../keys/sealer.js';
import { formFields } from '../../../net/form-fields.js';
import type { Store } from '../../../store/store.js';
import { storeFault } from '../../../store/store-errors.js';
import { countTokenExchange, DEFAULT_EXCHANGE_LIMIT, type ExchangeLimit } from '../../token-exchange-limit.js';
import type { AwsAnswer, AwsCall, AwsHandler } from '../endpoint.js';
import { callerIdentityResult } from './caller-identity.js';
import { StsError, serviceUnavailable, stsErrorForExchange } from './sts-errors.js';
import { element, resultDocument, STS_CONTENT_TYPE } from './sts-xml.js';
import { webIdentityRequest } from './web-identity-request.js';

export const STS_VERSION = '2011-06-15';
const OPERATION = 'AssumeRoleWithWebIdentity';
const CALLER_IDENTITY = 'GetCallerIdentity';

export interface StsHandlerOptions {
  store: Store;
  /** Seals the temporary secret access keys; absent (AWS KMS key store alone): every call says NO_SEALER. */
  sealer: Sealer | undefined;
  exchange: TokenExchange;
  /** The KMS endpoint's SigV4 verifier: GetCallerIdentity checks the same credentials (kms-apis.ts). */
  verifier: AwsRequestVerifier;
  now: () => Date;
  /**
   * Calls an address may make per window (default 60 a minute), counted with POST /oauth/token's exchanges: both
   * are the same unauthenticated exchange, so a job has one allowance, not one per protocol.
   */
  limit?: ExchangeLimit;
}

/** A field given twice is refused: which one would count is not for a server to guess. */
const repeatedParameter = (name: string) =>
  new StsError('InvalidParameterValue', `Parameter ${name} is given more than once`);

/** ISO 8601 in seconds, as STS writes its timestamps (2026-11-28T17:00:00Z). */
function stsTime(time: Date): string {
  return time.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function stsHandler(opts: StsHandlerOptions): AwsHandler {
  const limit = opts.limit ?? DEFAULT_EXCHANGE_LIMIT;

  async function throttle(call: AwsCall): Promise<void> {
    if ((await countTokenExchange(opts.store, call.request.ip, limit, opts.now().getTime())) !== undefined) {
      // STS's own throttling answer; the SDKs retry it with backoff.
      throw new StsError(
        'Throttling',
        `Rate exceeded: token exchanges are limited to ${limit.max} per ${limit.windowMs / 1000} s per address`,
      );
    }
  }

  async function getCallerIdentity(call: AwsCall): Promise<AwsAnswer> {
    const result = await opts.verifier.verify(
      { method: call.request.method, url: call.request.url, headers: call.headers, body: call.body },
      'sts',
    );
    if (!result.ok) throw new StsError(result.refusal.type, result.refusal.message, result.refusal.status);
    return {
      status: 200,
      contentType: STS_CONTENT_TYPE,
      body: resultDocument(CALLER_IDENTITY, callerIdentityResult(result.identity), call.request.id),
    };
  }

  async function assumeRoleWithWebIdentity(call: AwsCall, params: Map<string, string>): Promise<AwsAnswer> {
    // Only the exchange counts against the address's allowance: it is unauthenticated and may fetch issuer keys.
    await throttle(call);
    const request = webIdentityRequest(params);
    const sealer = opts.sealer;
    if (!sealer) {
      // Before the token is looked at, so it stays usable; 501, which no SDK retries: waiting will not help.
      throw new StsError('NotImplemented', `AssumeRoleWithWebIdentity is not available: ${NO_SEALER}`, 501, 'Receiver');
    }
    const issued = await opts.exchange.exchangeWith(request.token, request.tenantId, {
      mint: (key, at) => createTemporaryAwsKey(opts.store, sealer, key, at),
      audit: { via: 'sts', role_arn: request.roleArn, role_session_name: request.sessionName },
      ...(request.durationSeconds !== undefined && { maxLifetimeS: request.durationSeconds }),
    });
    const { key, identity } = issued;
    const result = [
      element('Credentials', [
        element('AccessKeyId', key.accessKeyId),
        element('SecretAccessKey', key.secretAccessKey),
        element('SessionToken', key.sessionToken as string),
        element('Expiration', stsTime(issued.expiresAt)),
      ]),
      element('SubjectFromWebIdentityToken', identity.subject),
      element('AssumedRoleUser', [
        element('Arn', `arn:aws:sts::${request.tenantId}:assumed-role/${request.roleName}/${request.sessionName}`),
        // AWS: the role's unique id and the session name; the trust rule that admitted the token is the role here.
        element('AssumedRoleId', `${identity.ruleId}:${request.sessionName}`),
      ]),
      element('Audience', issued.audience),
      element('Provider', identity.issuer),
    ];
    return {
      status: 200,
      contentType: STS_CONTENT_TYPE,
      body: resultDocument(OPERATION, result, call.request.id),
      headers: { 'cache-control': 'no-store' },
    };
  }

  async function answer(call: AwsCall): Promise<AwsAnswer> {
    const params = formFields(call.body, { refuseRepeated: repeatedParameter });
    const action = params.get('Action');
    if (action === undefined || action === '') {
      throw new StsError('MissingAction', 'The request is missing an action or a required parameter');
    }
    const version = params.get('Version');
    if (version === undefined) throw new StsError('MissingParameter', 'The request must contain the parameter Version');
    const known = action === OPERATION || action === CALLER_IDENTITY;
    if (!known || version !== STS_VERSION) {
      throw new StsError(
        'InvalidAction',
        known
          ? `Could not find operation ${action} for version ${quoted(version, 40)}`
          : `Could not find operation ${quoted(action)} for version ${STS_VERSION}: signbridge's STS serves ${OPERATION} and ${CALLER_IDENTITY}`,
      );
    }
    return action === OPERATION ? assumeRoleWithWebIdentity(call, params) : getCallerIdentity(call);
  }

  return async (call: AwsCall): Promise<AwsAnswer> => {
    const requestId = call.request.id;
    try {
      return await answer(call);
    } catch (err) {
      if (err instanceof StsError) return err.answer(requestId);
      if (err instanceof ExchangeError) return stsErrorForExchange(err).answer(requestId);
      const fault = storeFault(err);
      if (fault)
        return serviceUnavailable(`the database cannot serve right now (${fault}); retry later`).answer(requestId);
      call.request.log.error({ err }, 'STS request failed');
      return new StsError('InternalFailure', 'The request failed on the server; see its log', 500, 'Receiver').answer(
        requestId,
      );
    }
  };
}
