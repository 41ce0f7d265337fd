// Which policy document the service applies (the config file's `policyFile`, SIGNBRIDGE_POLICY_FILE; docs/policy.md).

import { resolve } from 'node:path';
import { Type } from '@sinclair/typebox';

/** The environment variables the policy's setting reads. */
export const POLICY_ENV = ['SIGNBRIDGE_POLICY_FILE'] as const;

/** The policy document (docs/policy.md); without one the built-in default policy applies. */
export const PolicyFileConfigSchema = Type.String({ minLength: 1 });

/** SIGNBRIDGE_POLICY_FILE over the file's policyFile, as an absolute path; absent: the built-in default policy. */
export function policyFileSetting(env: NodeJS.ProcessEnv, fromFile: string | undefined): { policyFile?: string } {
  const policyFile = env.SIGNBRIDGE_POLICY_FILE ?? fromFile;
  return policyFile !== undefined ? { policyFile: resolve(policyFile) } : {};
}
