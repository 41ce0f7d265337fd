// `signbridge tsa init --csr` / `tsa cert import` with a real CA (openssl x509 -req as the organisation's CA): the
// issued chain installed, refused when it does not fit (wrong key, EKU not critical, out of order), and tokens then
// verifying against the CA's root only.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';
import { selfSignedCa } from '../tools/pki.js';

let dataDir: string;
let ca: string;
let server: ServerProcess | undefined;

function openssl(args: string[]): void {
  execFileSync('openssl', args, { cwd: ca, stdio: 'pipe' });
}

/** The CA issues a certificate for the CSR with the given extensions (an OpenSSL extension file section). */
function issue(csr: string, name: string, extensions: string): string {
  writeFileSync(join(ca, `${name}.ext`), extensions);
  openssl([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    'root.pem',
    '-CAkey',
    'root.key',
    '-CAcreateserial',
    '-days',
    '30',
    '-sha256',
    '-extfile',
    `${name}.ext`,
    '-out',
    `${name}.pem`,
  ]);
  return join(ca, `${name}.pem`);
}

beforeAll(() => {
  dataDir = makeTempDir('signbridge-tsa-cli-');
  ca = mkdtempSync(join(dataDir, 'ca-'));
  selfSignedCa(ca, 'root', '/CN=Example Root CA');
});
afterAll(async () => {
  await server?.stop();
});

const TSA_EXT = 'extendedKeyUsage=critical,timeStamping\nkeyUsage=critical,digitalSignature\n';

describe('signbridge tsa init --csr, then tsa cert import', () => {
  it('without a chain yet, the service answers 503 tsa_not_configured naming tsa cert import', async () => {
    const made = runCli([
      'tsa',
      'init',
      '--data-dir',
      dataDir,
      '--key-spec',
      'RSA_2048',
      '--csr',
      join(ca, 'tsa.csr'),
      '--subject',
      'CN=Example TSA, O=Example',
    ]);
    expect(made.code, made.stderr).toBe(0);
    expect(made.stdout).toContain('signbridge tsa cert import --chain');
    const csrText = execFileSync('openssl', ['req', '-in', join(ca, 'tsa.csr'), '-noout', '-text', '-verify'], {
      encoding: 'utf8',
      stdio: 'pipe',
    });
    expect(csrText).toContain('Time Stamping');
    expect(runCli(['tsa', 'show', '--data-dir', dataDir]).stdout).toContain('waiting for its certificate');
    server = await startServerProcess(['--data-dir', dataDir], { SIGNBRIDGE_TSA_CLOCK_CHECK: 'none' });
    const res = await fetch(`${server.url}/tsa`, {
      method: 'POST',
      headers: { 'content-type': 'application/timestamp-query' },
      body: Buffer.alloc(10),
    });
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({
      error: 'tsa_not_configured',
      reason: expect.stringContaining('tsa cert import'),
    });
  });

  it('refuses a certificate whose timeStamping EKU is not critical, and one for another key', () => {
    const lax = issue(
      join(ca, 'tsa.csr'),
      'lax',
      'extendedKeyUsage=timeStamping\nkeyUsage=critical,digitalSignature\n',
    );
    writeFileSync(join(ca, 'lax-chain.pem'), readFileSync(lax, 'utf8') + readFileSync(join(ca, 'root.pem'), 'utf8'));
    const refused = runCli(['tsa', 'cert', 'import', '--data-dir', dataDir, '--chain', join(ca, 'lax-chain.pem')]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/critical/);
    // A CSR from another key, issued properly: not this TSA's key.
    openssl([
      'req',
      '-new',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-subj',
      '/CN=Other',
      '-keyout',
      'other.key',
      '-out',
      'other.csr',
    ]);
    const other = issue(join(ca, 'other.csr'), 'other', TSA_EXT);
    const wrongKey = runCli(['tsa', 'cert', 'import', '--data-dir', dataDir, '--chain', other]);
    expect(wrongKey.code).toBe(1);
    expect(wrongKey.stderr).toContain("not for this TSA's key");
  });

  it('refuses a chain out of order', () => {
    const good = issue(join(ca, 'tsa.csr'), 'good', TSA_EXT);
    writeFileSync(join(ca, 'reversed.pem'), readFileSync(join(ca, 'root.pem'), 'utf8') + readFileSync(good, 'utf8'));
    const refused = runCli(['tsa', 'cert', 'import', '--data-dir', dataDir, '--chain', join(ca, 'reversed.pem')]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/TSA certificate|not for this TSA's key/);
  });

  it('installs the issued chain; the running service then grants tokens that verify against the root only', async () => {
    const good = join(ca, 'good.pem');
    writeFileSync(join(ca, 'chain.pem'), readFileSync(good, 'utf8') + readFileSync(join(ca, 'root.pem'), 'utf8'));
    const installed = runCli(['tsa', 'cert', 'import', '--data-dir', dataDir, '--chain', join(ca, 'chain.pem')]);
    expect(installed.code, installed.stderr).toBe(0);
    expect(installed.stdout).toContain('chain of 2 installed');
    writeFileSync(join(ca, 'data.bin'), 'artifact');
    openssl(['ts', '-query', '-data', 'data.bin', '-sha256', '-cert', '-out', 'q.tsq']);
    // The service reads a changed identity within 10 s (it caches it that long).
    let reply: Buffer | undefined;
    for (let i = 0; i < 60 && reply === undefined; i++) {
      const res = await fetch(`${server?.url}/tsa`, {
        method: 'POST',
        headers: { 'content-type': 'application/timestamp-query' },
        body: readFileSync(join(ca, 'q.tsq')),
      });
      if (res.status === 200) reply = Buffer.from(await res.arrayBuffer());
      else await new Promise((r) => setTimeout(r, 500));
    }
    expect(reply, 'the service did not pick up the installed chain').toBeDefined();
    writeFileSync(join(ca, 'r.tsr'), reply as Buffer);
    const verified = spawnSync(
      'openssl',
      ['ts', '-verify', '-in', 'r.tsr', '-queryfile', 'q.tsq', '-CAfile', 'root.pem'],
      { cwd: ca, encoding: 'utf8' },
    );
    expect(verified.stdout, verified.stderr).toContain('Verification: OK');
    const served = await (await fetch(`${server?.url}/tsa/chain.pem`)).text();
    expect(served.match(/BEGIN CERTIFICATE/g)).toHaveLength(2);
    const audit = runCli(['admin', 'audit', 'export', '--data-dir', dataDir]);
    const actions = audit.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line).action);
    expect(actions).toEqual(expect.arrayContaining(['tsa_init', 'tsa_cert_import', 'timestamp']));
  });

  it('a second tsa init for the same scope is refused and changes nothing', () => {
    const again = runCli(['tsa', 'init', '--data-dir', dataDir, '--self-signed', '--subject', 'CN=Again']);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain('exists already');
    expect(runCli(['tsa', 'show', '--data-dir', dataDir]).stdout).toContain('Example TSA');
  });

  it('usage errors: neither --self-signed nor --csr, an unknown key spec, a bad tenant id', () => {
    for (const args of [
      ['--subject', 'CN=x'],
      ['--self-signed', '--subject', 'CN=x', '--key-spec', 'ML_DSA_44'],
      ['--self-signed', '--subject', 'CN=x', '--tenant', '../etc'],
    ]) {
      const res = runCli(['tsa', 'init', '--data-dir', dataDir, ...args]);
      expect(res.code, args.join(' ')).toBe(1);
      expect(res.stderr).toMatch(/^signbridge tsa: /);
    }
  });
});
