import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';

/** Creates a folder only its owner can enter, and tightens it if it already existed. */
export function ensurePrivateDir(path: string): void {
  mkdirSync(path, { recursive: true, mode: 0o700 });
  chmodSync(path, 0o700);
}

/** Writes a file readable only by its owner; the mode is set at creation, so there is no readable window. */
export function writePrivateFile(path: string, content: string): void {
  writeFileSync(path, content, { mode: 0o600 });
  chmodSync(path, 0o600);
}

/** Reads a secret kept in a 0600 file, creating it with a random value on first use. */
export function readOrCreateSecret(path: string, bytes = 24): string {
  if (existsSync(path)) return readFileSync(path, 'utf8').trim();
  const secret = randomBytes(bytes).toString('base64url');
  writePrivateFile(path, `${secret}\n`);
  return secret;
}
