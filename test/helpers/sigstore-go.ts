// Runs test/fixtures/sigstore-go, the sigstore project's own KMS signers (cosign's code path for `--key awskms://...`)
// from Debian's golang-github-sigstore-sigstore-dev, built offline by scripts/build-sigstore-probe.sh. Its AWS client
// (aws-sdk-go-v2 1.17) always speaks https to the host in the key reference: the service runs with TLS and the probe
// trusts the test's CA through SSL_CERT_FILE or AWS_CA_BUNDLE. No AWS or Vault configuration of the machine leaks in.

import { execFile, execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { isolatedAwsEnv } from './botocore.js';

const ROOT = join(import.meta.dirname, '..', '..');
const BUILD_SCRIPT = join(ROOT, 'scripts', 'build-sigstore-probe.sh');
export const SIGSTORE_PROBE = join(ROOT, 'build', 'sigstore-go', 'sigstore-probe');

export type SigstoreScheme = 'awskms://' | 'hashivault://';

const WHY_NO_HASHIVAULT =
  "Debian's golang-github-sigstore-sigstore-dev 1.4.0 has no kms/hashivault: it needs github.com/hashicorp/vault/api " +
  'and ttlcache v2, which Debian does not package (test/fixtures/sigstore-go/README.md)';

let built: { schemes: string[] } | { why: string } | undefined;

function build(): { schemes: string[] } | { why: string } {
  if (built) return built;
  try {
    execFileSync('bash', [BUILD_SCRIPT], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 300_000 });
    const schemes = execFileSync(SIGSTORE_PROBE, ['-providers'], { encoding: 'utf8' }).split('\n').filter(Boolean);
    built = { schemes };
  } catch (error) {
    const stderr = String((error as { stderr?: Buffer }).stderr ?? '').trim();
    built = { why: stderr.split('\n').at(-1) || (error as Error).message };
  }
  return built;
}

/**
 * Why the probe cannot sign with `scheme` here (for describe.skipIf), or undefined when it can. Builds it first
 * (once per process; quick when current). With SIGNBRIDGE_REQUIRE_SIGSTORE_GO=1 a missing awskms:// probe throws
 * instead, so that CI cannot pass by skipping.
 */
export function sigstoreGoMissing(scheme: SigstoreScheme = 'awskms://'): string | undefined {
  const result = build();
  let why: string | undefined;
  if ('why' in result) why = result.why;
  else if (!result.schemes.includes(scheme)) why = scheme === 'hashivault://' ? WHY_NO_HASHIVAULT : `no ${scheme}`;
  if (why && scheme === 'awskms://' && process.env.SIGNBRIDGE_REQUIRE_SIGSTORE_GO === '1') throw new Error(why);
  return why;
}

/** AWS_* and VAULT_* (and the transit mount) from this process removed; `extra` set. */
export function isolatedSigstoreEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = isolatedAwsEnv();
  for (const name of Object.keys(env)) {
    if (name.startsWith('VAULT_') || name === 'TRANSIT_SECRET_ENGINE_PATH') delete env[name];
  }
  return { ...env, ...extra };
}

export interface SigstoreGoSignature {
  signature: Buffer;
  publicKeyPem: string;
  /** The library's own check of the signature against the public key it fetched. */
  verified: boolean;
}

/**
 * Signs `message` through sigstore's kms.Get(ref).SignMessage. `env` is added to an isolated environment: for
 * awskms:// the credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, or AWS_ROLE_ARN + AWS_WEB_IDENTITY_TOKEN_FILE)
 * and the CA (SSL_CERT_FILE or AWS_CA_BUNDLE). Rejects with the probe's stderr (the SDK's error type and message).
 */
export function runSigstoreGo(
  ref: string,
  message: Buffer,
  env: Record<string, string>,
  timeoutMs = 60_000,
): Promise<SigstoreGoSignature> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      SIGSTORE_PROBE,
      ['-timeout', `${timeoutMs}ms`, ref],
      { env: isolatedSigstoreEnv(env), timeout: timeoutMs + 10_000 },
      (error, stdout, stderr) => {
        if (error) {
          reject(new Error(stderr.trim() || error.message));
          return;
        }
        const answer = JSON.parse(stdout) as { signature: string; public_key: string; verified: boolean };
        resolve({
          signature: Buffer.from(answer.signature, 'base64'),
          publicKeyPem: answer.public_key,
          verified: answer.verified,
        });
      },
    );
    child.stdin!.end(message);
  });
}
