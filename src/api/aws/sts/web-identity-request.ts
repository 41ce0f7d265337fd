// AssumeRoleWithWebIdentity's parameters, checked as STS checks them (botocore's model, sts 2011-06-15): RoleArn
// 20-2048 characters, RoleSessionName 2-64 of [\w+=,.@-], WebIdentityToken 4-20000, DurationSeconds 900-43200.
// A member that breaks its constraint is a ValidationError listing each failure in AWS's words ("1 validation error
// detected: Value ... at 'roleSessionName' failed to satisfy constraint: ..."); a RoleArn that is no role ARN is
// "Request ARN is invalid". The account of the role ARN is the signbridge tenant. The token is never quoted back.

import { quoted } from '../../../auth/credential-echo.js';
import { StsError } from './sts-errors.js';

export interface WebIdentityRequest {
  roleArn: string;
  tenantId: string;
  /** The role's name: the last segment of its ARN's resource (`role/[path/]name`). */
  roleName: string;
  sessionName: string;
  token: string;
  durationSeconds?: number;
}

/** `arn:aws:iam::<tenant>:role/[path/]<name>`: the tenant id in the account's place. */
const ROLE_ARN = /^arn:aws:iam::([A-Za-z0-9][A-Za-z0-9._-]{0,63}):role\/((?:[\x21-\x7e]+\/)?)([\w+=,.@-]{1,64})$/;
const SESSION_NAME = /^[\w+=,.@-]*$/;
/** AWS's own lower and upper bounds of DurationSeconds. */
export const DURATION_RANGE_S = { min: 900, max: 43_200 };

/** Parameters STS has for this call that signbridge refuses rather than ignores (they would narrow the session). */
const UNSUPPORTED = ['Policy', 'PolicyArns', 'ProviderId'];

function lengthProblems(field: string, value: string, min: number, max: number, quote = true): string[] {
  const shown = quote ? `Value '${quoted(value)}' at '${field}'` : `The value at '${field}'`;
  if (value.length < min)
    return [`${shown} failed to satisfy constraint: Member must have length greater than or equal to ${min}`];
  if (value.length > max)
    return [`${shown} failed to satisfy constraint: Member must have length less than or equal to ${max}`];
  return [];
}

function validationError(problems: string[]): StsError {
  const count = `${problems.length} validation error${problems.length === 1 ? '' : 's'} detected`;
  return new StsError('ValidationError', `${count}: ${problems.join('; ')}`);
}

export function webIdentityRequest(params: Map<string, string>): WebIdentityRequest {
  for (const name of params.keys()) {
    const base = name.split('.')[0] as string;
    if (UNSUPPORTED.includes(base)) {
      throw new StsError(
        'InvalidParameterValue',
        `${base} is not supported by signbridge: the tenant's trust rule decides what the session may do`,
      );
    }
  }
  const roleArn = params.get('RoleArn');
  const sessionName = params.get('RoleSessionName');
  const token = params.get('WebIdentityToken');
  const duration = params.get('DurationSeconds');

  const problems: string[] = [];
  if (roleArn === undefined)
    problems.push("Value null at 'roleArn' failed to satisfy constraint: Member must not be null");
  else problems.push(...lengthProblems('roleArn', roleArn, 20, 2048));
  if (sessionName === undefined) {
    problems.push("Value null at 'roleSessionName' failed to satisfy constraint: Member must not be null");
  } else {
    problems.push(...lengthProblems('roleSessionName', sessionName, 2, 64));
    if (!SESSION_NAME.test(sessionName)) {
      problems.push(
        `Value '${quoted(sessionName)}' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]*`,
      );
    }
  }
  if (token === undefined) {
    problems.push("Value null at 'webIdentityToken' failed to satisfy constraint: Member must not be null");
  } else {
    problems.push(...lengthProblems('webIdentityToken', token, 4, 20_000, false));
  }
  let durationSeconds: number | undefined;
  if (duration !== undefined) {
    if (!/^\d{1,9}$/.test(duration)) {
      throw new StsError(
        'InvalidParameterValue',
        `Value '${quoted(duration)}' for parameter DurationSeconds is invalid: it must be a whole number of seconds`,
      );
    }
    durationSeconds = Number(duration);
    if (durationSeconds < DURATION_RANGE_S.min) {
      problems.push(
        `Value '${durationSeconds}' at 'durationSeconds' failed to satisfy constraint: Member must have value greater than or equal to ${DURATION_RANGE_S.min}`,
      );
    } else if (durationSeconds > DURATION_RANGE_S.max) {
      problems.push(
        `Value '${durationSeconds}' at 'durationSeconds' failed to satisfy constraint: Member must have value less than or equal to ${DURATION_RANGE_S.max}`,
      );
    }
  }
  if (problems.length > 0) throw validationError(problems);

  const arn = ROLE_ARN.exec(roleArn as string);
  if (!arn) throw new StsError('ValidationError', 'Request ARN is invalid');
  return {
    roleArn: roleArn as string,
    tenantId: arn[1] as string,
    roleName: arn[3] as string,
    sessionName: sessionName as string,
    token: token as string,
    ...(durationSeconds !== undefined && { durationSeconds }),
  };
}
