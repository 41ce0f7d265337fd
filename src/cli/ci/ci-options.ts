// The options `login`, `sign` and `daemon` share for a CI job (`--ci`, or SIGNBRIDGE_CI=1): where the job's ID token
// is and which audience to ask GitHub for.
import type { Command } from 'commander';
import { findIdTokenSource, type IdTokenSource } from './id-token.js';

export interface CiFlags {
  ci?: boolean;
  idTokenEnv?: string;
  idTokenFile?: string;
  audience?: string;
}

export function addCiOptions(cmd: Command): Command {
  return cmd
    .option(
      '--ci',
      "a CI job: exchange the job's OIDC ID token for a short-lived key (env SIGNBRIDGE_CI=1; docs/ci.md)",
    )
    .option(
      '--id-token-env <name>',
      'with --ci: the variable holding the ID token (GitLab `id_tokens:`; default SIGNBRIDGE_ID_TOKEN)',
    )
    .option('--id-token-file <file>', 'with --ci: a file holding the ID token (Kubernetes projected token), re-read')
    .option('--audience <aud>', 'with --ci: the audience to ask GitHub Actions for (default: the service URL)');
}

/** --ci, or SIGNBRIDGE_CI set to 1/true/yes. */
export function ciEnabled(flags: CiFlags, env: NodeJS.ProcessEnv = process.env): boolean {
  return flags.ci === true || /^(1|true|yes)$/i.test(env.SIGNBRIDGE_CI ?? '');
}

/** The audience a trust rule without one expects: the service's URL without a trailing slash. */
export function defaultAudience(serviceUrl: string): string {
  return serviceUrl.replace(/\/+$/, '');
}

export function idTokenSourceFor(flags: CiFlags, serviceUrl: string, env = process.env): IdTokenSource {
  return findIdTokenSource({
    audience: flags.audience ?? defaultAudience(serviceUrl),
    ...(flags.idTokenEnv !== undefined && { idTokenEnv: flags.idTokenEnv }),
    ...(flags.idTokenFile !== undefined && { idTokenFile: flags.idTokenFile }),
    env,
  });
}
