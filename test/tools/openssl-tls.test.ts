// A TLS 1.2 server with a P-384 key in the module (OpenSSL s_server through pkcs11-provider) and a client with
// default settings: the client asks for ECDSA with SHA-256 first, so the P-384 key signs a SHA-256 digest, which a
// plain HSM does and signbridge must too. The commands are the snippets of docs/clients.md.
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { runCli } from '../helpers/cli.js';
import { docSnippet, pathWithSignbridge, runSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';

const SPEC = 'ECC_NIST_P384' as const;
let stack: Stack;
let dir: string;
let env: Record<string, string>;
let server: ChildProcess | undefined;

beforeAll(async () => {
  stack = await startStack([SPEC]);
  dir = mkdtempSync(join(stack.dir, 'tls-'));
  env = { SIGNBRIDGE_SOCKET: stack.socketPath, MODULE: MODULE_PATH, TOKEN: tenantFor(SPEC), MD: 'sha384' };
  writeFileSync(join(dir, 'file.txt'), 'tls\n');
  runSnippetOk('openssl-config', dir, env);
  runSnippetOk('openssl-req-x509', dir, env);
});
afterAll(async () => {
  if (server && server.exitCode === null) server.kill();
  await stack?.close();
});

/** Starts the s_server snippet on an ephemeral port; resolves with the port it printed (ACCEPT host:port). */
function startServer(): Promise<{ port: number; output: () => string; exited: Promise<number | null> }> {
  const child = spawn('bash', ['-euo', 'pipefail', '-c', docSnippet('openssl-s-server')], {
    cwd: dir,
    env: { ...process.env, PATH: pathWithSignbridge(), ...env, PORT: '0' },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  server = child;
  let out = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /ACCEPT 127\.0\.0\.1:(\d+)/.exec(out);
      if (m) resolve({ port: Number(m[1]), output: () => out, exited });
    };
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`s_server exited with ${code} before listening:\n${out}`)));
  });
}

describe('OpenSSL s_server -tls1_2 with a P-384 key in the module', () => {
  it('s_client with default settings completes the handshake; the key signed a SHA-256 digest (audited)', async () => {
    const s = await startServer();
    const client = runSnippet('openssl-s-client', dir, { PORT: String(s.port) });
    const code = await s.exited;
    expect(client.code, `${client.stdout}\n${client.stderr}\n--- server\n${s.output()}`).toBe(0);
    expect(client.stdout).toMatch(/Protocol\s*:\s*TLSv1\.2/);
    expect(client.stdout).toContain('Peer signing digest: SHA256');
    expect(client.stdout).toContain('Peer signature type: ECDSA');
    expect(client.stdout).toContain('Verify return code: 0 (ok)');
    expect(code).toBe(0);
    // The service signed with the P-384 key and recorded the digest really used.
    const audit = runCli(['admin', 'audit', 'export', '--data-dir', join(stack.dir, 'data')]);
    expect(audit.code, audit.stderr).toBe(0);
    const signed = audit.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { tenant_id: string; outcome: string; details: Record<string, unknown> })
      .filter((e) => e.tenant_id === tenantFor(SPEC) && e.outcome === 'signed');
    expect(signed.map((e) => e.details.algorithm)).toContain('ECDSA_SHA_256');
    expect(signed.every((e) => e.details.key_id === stack.keyIds.get(tenantFor(SPEC)))).toBe(true);
  });
});
