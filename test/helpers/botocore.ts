// Runs test/fixtures/sigv4/botocore_client.py: botocore (Debian's python3-botocore / python3-boto3) as the SigV4
// client. /usr/bin/python3 and /usr/bin/aws by full path: pyenv's shims come first on PATH on this machine and have
// neither package. No AWS configuration of the machine may leak in: config and credential files point nowhere.

import { execFile, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';

export const PYTHON = '/usr/bin/python3';
export const AWS_CLI = '/usr/bin/aws';
const SCRIPT = join(import.meta.dirname, '..', 'fixtures', 'sigv4', 'botocore_client.py');

export function botocoreMissing(): string | undefined {
  if (!existsSync(PYTHON)) return `${PYTHON} is missing`;
  try {
    execFileSync(PYTHON, ['-c', 'import boto3, botocore'], { stdio: 'ignore' });
  } catch {
    return 'python3-boto3 is not installed (scripts/setup.sh installs it)';
  }
  return undefined;
}

export function isolatedAwsEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) if (!name.startsWith('AWS_')) env[name] = value;
  return {
    ...env,
    AWS_CONFIG_FILE: '/dev/null',
    AWS_SHARED_CREDENTIALS_FILE: '/dev/null',
    AWS_EC2_METADATA_DISABLED: 'true',
    AWS_PAGER: '',
    ...extra,
  };
}

export function runBotocore<T>(job: unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = execFile(PYTHON, [SCRIPT], { env: isolatedAwsEnv(), timeout: 30_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${error.message}\n${stderr}`));
      else resolve(JSON.parse(stdout) as T);
    });
    child.stdin!.end(JSON.stringify(job));
  });
}

const KMS_SCRIPT = join(import.meta.dirname, '..', 'fixtures', 'kms-api', 'boto3_kms.py');

export interface Boto3Call {
  name: string;
  access_key: string;
  secret_key: string;
  token?: string;
  region?: string;
  /** boto3's method, e.g. sign, describe_key, list_keys. */
  op: string;
  /** Message and Signature as base64. */
  params?: Record<string, unknown>;
  read_timeout?: number;
}

export type Boto3Outcome =
  | { ok: true; answer: Record<string, unknown>; headers: Record<string, string> }
  | { ok: false; code: string; message: string; status: number };

/** boto3's kms client against a signbridge endpoint (test/fixtures/kms-api/boto3_kms.py), the calls in order. */
export function runBoto3Kms(endpoint: string, calls: Boto3Call[]): Promise<Record<string, Boto3Outcome>> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      PYTHON,
      [KMS_SCRIPT],
      { env: isolatedAwsEnv(), timeout: 180_000 },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${error.message}\n${stderr}`));
        else resolve(JSON.parse(stdout) as Record<string, Boto3Outcome>);
      },
    );
    child.stdin!.end(JSON.stringify({ endpoint, calls }));
  });
}
