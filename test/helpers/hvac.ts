// Runs test/fixtures/vault/hvac_client.py: hvac (Debian's python3-hvac) as the Vault client, by /usr/bin/python3
// (pyenv's shims come first on PATH and lack it). No Vault setting of the machine leaks in: VAULT_* are dropped and
// HOME points at an empty directory (hvac reads ~/.vault-token when no token is given).
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PYTHON } from './botocore.js';

const SCRIPT = join(import.meta.dirname, '..', 'fixtures', 'vault', 'hvac_client.py');

export function hvacMissing(): string | undefined {
  try {
    execFileSync(PYTHON, ['-c', 'import hvac'], { stdio: 'ignore' });
  } catch {
    return 'python3-hvac is not installed (scripts/setup.sh installs it)';
  }
  return undefined;
}

export type HvacMethod = 'read_key' | 'list_keys' | 'sign_data' | 'verify_signed_data';
export type HvacCall =
  | { method: HvacMethod; kwargs?: Record<string, unknown> }
  /** A body sent through hvac's own adapter (its HTTP session, JSON), for fields its transit methods lack. */
  | { method: 'post'; path: string; json: Record<string, unknown> };

export type HvacResult =
  // biome-ignore lint/suspicious/noExplicitAny: Vault's answers are untyped JSON
  { ok: any; error?: undefined } | { ok?: undefined; error: { type: string; errors: string[]; message: string } };

export function runHvac(url: string, token: string | null, calls: HvacCall[]): Promise<HvacResult[]> {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) if (!name.startsWith('VAULT_')) env[name] = value;
  env.HOME = mkdtempSync(join(tmpdir(), 'hvac-home-'));
  return new Promise((resolve, reject) => {
    const child = execFile(PYTHON, [SCRIPT], { env, timeout: 120_000 }, (error, stdout, stderr) => {
      if (error) reject(new Error(`${error.message}\n${stderr}`));
      else resolve(JSON.parse(stdout) as HvacResult[]);
    });
    child.stdin?.end(JSON.stringify({ url, token, calls }));
  });
}
