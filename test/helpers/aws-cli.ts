// The AWS CLI (Debian's awscli, /usr/bin/aws) as a KMS client of a test service: run without blocking the test's
// event loop (the service answers from it), with no AWS configuration of the machine leaking in.

import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AWS_CLI, isolatedAwsEnv } from './botocore.js';

export interface AwsCliResult {
  code: number;
  stdout: string;
  stderr: string;
  /** stdout parsed, when it is JSON. */
  json?: Record<string, unknown>;
}

export interface AwsProfile {
  /** The ~/.aws/credentials file the profile is in. */
  credentialsFile: string;
  profile: string;
}

/** Writes a credentials file holding `section` (what `admin api-key create --format aws` printed). */
export function credentialsFile(dir: string, section: string, name = 'credentials'): string {
  const path = join(dir, name);
  writeFileSync(path, section, { mode: 0o600 });
  return path;
}

export function runAws(
  endpoint: string,
  profile: AwsProfile,
  args: string[],
  env: Record<string, string> = {},
): Promise<AwsCliResult> {
  const fullEnv = isolatedAwsEnv({
    AWS_SHARED_CREDENTIALS_FILE: profile.credentialsFile,
    AWS_PROFILE: profile.profile,
    AWS_DEFAULT_REGION: 'eu-central-1',
    // One attempt: a refusal the SDK would retry (5xx, throttling) must show as it is.
    AWS_MAX_ATTEMPTS: '1',
    ...env,
  });
  return new Promise((resolve) => {
    execFile(
      AWS_CLI,
      ['--endpoint-url', endpoint, '--output', 'json', ...args],
      { env: fullEnv, timeout: 120_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        let json: Record<string, unknown> | undefined;
        try {
          json = stdout.trim() ? (JSON.parse(stdout) as Record<string, unknown>) : undefined;
        } catch {
          json = undefined;
        }
        resolve({ code, stdout, stderr, ...(json && { json }) });
      },
    );
  });
}
