// The one SigV4 verifier of the AWS-format credentials signbridge issues: long-term API keys (SBAK...) and STS
// session credentials (SBTK... with a session token). Built once where the doors are registered (src/api/kms-apis.ts)
// and handed to each door that takes these credentials, the KMS endpoint and STS's GetCallerIdentity, so that both
// check one set of credentials the same way (and share the opened secrets and derived signing keys); each door names
// its own service when it verifies. docs/kms-api.md, "Request signatures".
import type { Sealer } from '../../keys/sealer.js';
import type { ApiKeyRecord, Store } from '../../store/store.js';
import { SigV4Verifier } from '../sigv4/verify-request.js';
import { AwsSecrets } from './aws-credentials.js';

export type AwsRequestVerifier = SigV4Verifier<ApiKeyRecord>;

/** `sealer` opens the keys' sealed secrets; without one (AWS KMS key store alone) no AWS-format key verifies. */
export function awsRequestVerifier(store: Store, sealer: Sealer | undefined, now: () => Date): AwsRequestVerifier {
  const secrets = new AwsSecrets(store, sealer, now);
  return new SigV4Verifier<ApiKeyRecord>({
    secretFor: (accessKeyId, sessionToken) => secrets.secretFor(accessKeyId, sessionToken),
    now: () => now().getTime(),
  });
}
