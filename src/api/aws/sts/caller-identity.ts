// STS GetCallerIdentity: who the SigV4-signed caller is. aws-actions/configure-aws-credentials calls it with the
// credentials it just assumed (to export the account id, and on self-hosted runners to validate them), as do
// `aws sts get-caller-identity` and many scripts. Account is the key's tenant. signbridge keeps no IAM role behind
// temporary credentials: their Arn names the trust rule that admitted the job's token and the access key
// (arn:aws:sts::<tenant>:assumed-role/<rule id>/<access key id>); a long-term key is a "user" named by its key id.

import { parseAccessKeyId } from '../../../auth/aws-credentials/credential-format.js';
import type { SigV4Identity } from '../../../auth/sigv4/verify-request.js';
import type { ApiKeyRecord } from '../../../store/store.js';
import { element } from './sts-xml.js';

/** The account of a key without a tenant (an operator's): no AWS account id, so the service's name. */
const NO_TENANT_ACCOUNT = 'signbridge';

export function callerIdentityResult(identity: SigV4Identity<ApiKeyRecord>): string[] {
  const record = identity.principal;
  const account = record.tenantId ?? NO_TENANT_ACCOUNT;
  const temporary = parseAccessKeyId(identity.accessKeyId)?.temporary === true;
  const ruleId = record.workload?.ruleId ?? 'workload';
  const [arn, userId] = temporary
    ? [`arn:aws:sts::${account}:assumed-role/${ruleId}/${identity.accessKeyId}`, `${ruleId}:${identity.accessKeyId}`]
    : [`arn:aws:iam::${account}:user/${identity.accessKeyId}`, identity.accessKeyId];
  return [element('UserId', userId), element('Account', account), element('Arn', arn)];
}
