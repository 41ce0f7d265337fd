// The service's time-stamping authority as the real signing tools use it (docs/tsa.md): a `signbridge server`
// process with an identity made by `signbridge tsa init`, and osslsigncode `-ts`, jarsigner `-tsa` and `openssl ts`
// talking HTTP to it. The code-signing keys here are local files: what is under test is the time-stamp, which each
// tool requests after signing and checks on verification.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_TSA_POLICY } from '../../src/tsa/tsa-settings.js';
import { runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';

let dataDir: string;
let work: string;
let server: ServerProcess;
let chainFile: string;

beforeAll(async () => {
  dataDir = makeTempDir('signbridge-tsa-');
  work = mkdtempSync(join(dataDir, 'work-'));
  const made = runCli([
    'tsa',
    'init',
    '--data-dir',
    dataDir,
    '--self-signed',
    '--subject',
    'CN=Build TSA, O=signbridge tests',
  ]);
  expect(made.code, made.stderr).toBe(0);
  // The clock check is off: this test machine's clock may not be NTP-synchronised (test/api/tsa.test.ts covers it).
  server = await startServerProcess(['--data-dir', dataDir], { SIGNBRIDGE_TSA_CLOCK_CHECK: 'none' });
  const chain = await fetch(`${server.url}/tsa/chain.pem`);
  expect(chain.status).toBe(200);
  chainFile = join(work, 'tsa-chain.pem');
  writeFileSync(chainFile, await chain.text());
  // A local code-signing key and certificate for the tools to sign with.
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '2',
      '-subj',
      '/CN=Local code signer',
      '-addext',
      'extendedKeyUsage=critical,codeSigning',
      '-addext',
      'keyUsage=critical,digitalSignature',
      '-keyout',
      'signer.key',
      '-out',
      'signer.pem',
    ],
    { cwd: work, stdio: 'pipe' },
  );
}, 120_000);

/** jarsigner with the local PKCS#12 signer and the service's TSA; `args` end with the JAR and the alias. */
const jarsignWithTsa = (args: string[]) =>
  spawnSync(
    'jarsigner',
    ['-keystore', 'signer.p12', '-storetype', 'PKCS12', '-storepass', 'changeit', '-tsa', `${server.url}/tsa`, ...args],
    { cwd: work, encoding: 'utf8' },
  );
afterAll(async () => {
  await server?.stop();
});

describe('osslsigncode -ts', () => {
  it('time-stamps an Authenticode signature on a PE; osslsigncode verify checks the token against the TSA chain', () => {
    writeFileSync(join(work, 'hello.c'), '#include <stdio.h>\nint main(void){puts("time-stamped");return 0;}\n');
    execFileSync('x86_64-w64-mingw32-gcc', ['-O2', '-o', 'hello.exe', 'hello.c'], { cwd: work });
    const signed = spawnSync(
      'osslsigncode',
      [
        'sign',
        '-certs',
        'signer.pem',
        '-key',
        'signer.key',
        '-h',
        'sha256',
        '-ts',
        `${server.url}/tsa`,
        '-in',
        'hello.exe',
        '-out',
        'hello-signed.exe',
      ],
      { cwd: work, encoding: 'utf8' },
    );
    expect(signed.status, signed.stdout + signed.stderr).toBe(0);
    const verified = spawnSync(
      'osslsigncode',
      ['verify', '-in', 'hello-signed.exe', '-CAfile', 'signer.pem', '-TSA-CAfile', chainFile],
      { cwd: work, encoding: 'utf8' },
    );
    const out = verified.stdout + verified.stderr;
    expect(out).toContain('Timestamp Server Signature verification: ok');
    expect(out).toContain('Build TSA');
    expect(verified.status, out).toBe(0);
  });

  it('with a TSA chain the verifier does not trust, the time-stamp does not verify', () => {
    const verified = spawnSync(
      'osslsigncode',
      ['verify', '-in', 'hello-signed.exe', '-CAfile', 'signer.pem', '-TSA-CAfile', 'signer.pem'],
      { cwd: work, encoding: 'utf8' },
    );
    const out = verified.stdout + verified.stderr;
    expect(out).toContain('Timestamp Server Signature verification: failed');
    expect(out).not.toContain('Timestamp Server Signature verification: ok');
  });
});

describe('jarsigner -tsa', () => {
  it('time-stamps a JAR signature; jarsigner -verify -verbose shows "Timestamped by" the service TSA', () => {
    writeFileSync(join(work, 'Hello.txt'), 'time-stamped by signbridge\n');
    execFileSync('jar', ['cf', 'app.jar', 'Hello.txt'], { cwd: work });
    execFileSync(
      'openssl',
      [
        'pkcs12',
        '-export',
        '-inkey',
        'signer.key',
        '-in',
        'signer.pem',
        '-name',
        'signer',
        '-out',
        'signer.p12',
        '-passout',
        'pass:changeit',
      ],
      { cwd: work },
    );
    const signed = jarsignWithTsa(['app.jar', 'signer']);
    expect(signed.status, signed.stdout + signed.stderr).toBe(0);
    const verified = spawnSync('jarsigner', ['-verify', '-verbose', '-certs', 'app.jar'], {
      cwd: work,
      encoding: 'utf8',
    });
    const out = verified.stdout + verified.stderr;
    expect(out).toMatch(/Timestamped by "CN=Build TSA, O=signbridge tests" on/);
    expect(out).toContain('jar verified');
  });

  it("-tsapolicyid naming the service's own default policy (2.25.<UUID>) is granted", () => {
    const signed = jarsignWithTsa([
      '-tsapolicyid',
      DEFAULT_TSA_POLICY,
      '-signedjar',
      'app-policy.jar',
      'app.jar',
      'signer',
    ]);
    expect(signed.status, signed.stdout + signed.stderr).toBe(0);
    const verified = spawnSync('jarsigner', ['-verify', '-verbose', 'app-policy.jar'], { cwd: work, encoding: 'utf8' });
    expect(verified.stdout + verified.stderr).toMatch(/Timestamped by "CN=Build TSA, O=signbridge tests" on/);
  });

  it('a SHA-1 time-stamp request is rejected, and jarsigner says why', () => {
    const signed = jarsignWithTsa(['-tsadigestalg', 'SHA-1', '-signedjar', 'app-sha1.jar', 'app.jar', 'signer']);
    expect(signed.status).not.toBe(0);
    expect(signed.stdout + signed.stderr).toContain('Unrecognized or unsupported algorithm identifier');
  });
});

describe('openssl ts against the running service', () => {
  it('query over HTTP, verify against /tsa/chain.pem; every token is in the audit log with its serial', async () => {
    writeFileSync(join(work, 'data.bin'), 'some artifact');
    execFileSync('openssl', ['ts', '-query', '-data', 'data.bin', '-sha512', '-cert', '-out', 'q.tsq'], { cwd: work });
    const res = await fetch(`${server.url}/tsa`, {
      method: 'POST',
      headers: { 'content-type': 'application/timestamp-query' },
      body: readFileSync(join(work, 'q.tsq')),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/timestamp-reply');
    writeFileSync(join(work, 'r.tsr'), Buffer.from(await res.arrayBuffer()));
    const verified = spawnSync(
      'openssl',
      ['ts', '-verify', '-in', 'r.tsr', '-queryfile', 'q.tsq', '-CAfile', chainFile],
      {
        cwd: work,
        encoding: 'utf8',
      },
    );
    expect(verified.stdout, verified.stderr).toContain('Verification: OK');
    const text = execFileSync('openssl', ['ts', '-reply', '-in', 'r.tsr', '-text'], { cwd: work, encoding: 'utf8' });
    const serial = BigInt(`0x${/Serial number: 0x([0-9A-F]+)/.exec(text)?.[1]}`).toString(16);
    const exported = runCli(['admin', 'audit', 'export', '--data-dir', dataDir]);
    expect(exported.code, exported.stderr).toBe(0);
    const tokens = exported.stdout
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line))
      .filter((e) => e.action === 'timestamp');
    // osslsigncode, jarsigner and this query: at least three tokens, this one among them.
    expect(tokens.length).toBeGreaterThanOrEqual(3);
    expect(tokens.map((e) => e.details.serial)).toContain(serial);
  });
});
