// `signbridge cert` against the real stack: requests and self-signed certificates signed through the daemon and
// the service, a chain issued by a CA (OpenSSL with a local key, standing in for the user's CA) imported, and the
// module then showing the certificates to pkcs11-tool. The commands are the snippets of docs/clients.md.
import { execFileSync, spawnSync } from 'node:child_process';
import { createPublicKey, X509Certificate } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { runCli } from '../helpers/cli.js';
import { runSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, startStack, tenantFor } from '../module/harness.js';
import { selfSignedCa } from './pki.js';

let stack: Stack;
let work: string;
const RSA = tenantFor('RSA_2048');
const P256 = tenantFor('ECC_NIST_P256');
const P384 = tenantFor('ECC_NIST_P384');

beforeAll(async () => {
  stack = await startStack(['RSA_2048', 'ECC_NIST_P256', 'ECC_NIST_P384']);
  work = mkdtempSync(join(stack.dir, 'work-'));
  // A test CA with a local key, as a user's CA would be: it signs what `cert csr` produced.
  selfSignedCa(work, 'ca', '/O=Example/CN=Example test CA');
});
afterAll(async () => {
  await stack?.close();
});

const env = (tenant: string) => ({ SIGNBRIDGE_SOCKET: stack.socketPath, TOKEN: tenant, MODULE: MODULE_PATH });
const spki = (pem: string) => createPublicKey(pem).export({ type: 'spki', format: 'der' });

/** What the module shows on a token: pkcs11-tool's object listing. */
function listObjects(tenant: string): string {
  return execFileSync('pkcs11-tool', ['--module', MODULE_PATH, '--token-label', tenant, '--list-objects'], {
    env: { ...process.env, SIGNBRIDGE_SOCKET: stack.socketPath },
    encoding: 'utf8',
  });
}

function caSigns(dir: string, csr: string, out: string): void {
  writeFileSync(join(dir, 'ext.cnf'), 'keyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n');
  execFileSync(
    'openssl',
    [
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '1',
      '-extfile',
      join(dir, 'ext.cnf'),
      '-out',
      out,
    ],
    { cwd: dir, stdio: 'pipe' },
  );
}

describe('cert csr + CA + cert import (RSA)', () => {
  it('makes a request with the tenant key, and after import the module shows the leaf with the key CKA_ID and the CA', () => {
    runSnippetOk('cert-csr', work, env(RSA));
    const csr = join(work, 'release.csr');
    const verify = spawnSync('openssl', ['req', '-in', csr, '-verify', '-noout', '-pubkey'], { encoding: 'utf8' });
    expect(verify.stderr + verify.stdout).toMatch(/verify OK/);
    expect(spki(verify.stdout).equals(spki(stack.publicKeys.get(RSA) as string))).toBe(true);

    expect(listObjects(RSA)).not.toMatch(/Certificate Object/);
    caSigns(work, csr, 'leaf.pem');
    writeFileSync(
      join(work, 'release-chain.pem'),
      readFileSync(join(work, 'leaf.pem'), 'utf8') + readFileSync(join(work, 'ca.pem'), 'utf8'),
    );
    const imported = runSnippetOk('cert-import', work, env(RSA));
    expect(imported.stderr).toContain(`key ${stack.keyIds.get(RSA)}`);

    const objects = listObjects(RSA);
    const ckaId = (stack.keyIds.get(RSA) as string).replaceAll('-', '');
    const certBlocks = objects.split(/\n(?=\S)/).filter((b) => b.startsWith('Certificate Object'));
    expect(certBlocks).toHaveLength(2);
    expect(certBlocks.filter((b) => b.includes(`ID:         ${ckaId}`))).toHaveLength(1);
    expect(objects).toMatch(/subject:\s+DN: O=Example, CN=Example release signing/);
    expect(objects).toMatch(/subject:\s+DN: O=Example, CN=Example test CA/);

    // The leaf on the token is byte for byte the one the CA issued.
    const leafDer = execFileSync(
      'pkcs11-tool',
      ['--module', MODULE_PATH, '--token-label', RSA, '--read-object', '--type', 'cert', '--id', ckaId],
      { env: { ...process.env, SIGNBRIDGE_SOCKET: stack.socketPath } },
    );
    expect(leafDer.equals(new X509Certificate(readFileSync(join(work, 'leaf.pem'))).raw)).toBe(true);

    // Kept by the daemon in its own folder, private.
    const stored = join(stack.certificateDir, RSA, `${stack.keyIds.get(RSA)}.pem`);
    expect(statSync(stored).mode & 0o777).toBe(0o600);
    expect(statSync(join(stack.certificateDir, RSA)).mode & 0o777).toBe(0o700);
  });

  it('keeps imported certificates across a daemon restart', async () => {
    await stack.stopDaemon();
    await stack.startDaemon();
    const certBlocks = listObjects(RSA)
      .split(/\n(?=\S)/)
      .filter((b) => b.startsWith('Certificate Object'));
    expect(certBlocks).toHaveLength(2);
  });
});

describe('cert self-signed --import (EC)', () => {
  it.each([P256, P384])('%s: a self-signed certificate the module then shows, verified by OpenSSL', (tenant) => {
    const dir = mkdtempSync(join(work, 'ss-'));
    runSnippetOk('cert-self-signed', dir, env(tenant));
    const pem = readFileSync(join(dir, 'self-signed.pem'), 'utf8');
    const cert = new X509Certificate(pem);
    expect(
      cert.publicKey.export({ type: 'spki', format: 'der' }).equals(spki(stack.publicKeys.get(tenant) as string)),
    ).toBe(true);
    expect(cert.subject).toBe('CN=Example test signing');
    const text = execFileSync('openssl', ['x509', '-in', join(dir, 'self-signed.pem'), '-noout', '-text'], {
      encoding: 'utf8',
    });
    expect(text).toContain(tenant === P256 ? 'ecdsa-with-SHA256' : 'ecdsa-with-SHA384');
    expect(text).toContain('Code Signing');
    const verified = spawnSync(
      'openssl',
      ['verify', '-CAfile', join(dir, 'self-signed.pem'), join(dir, 'self-signed.pem')],
      {
        encoding: 'utf8',
      },
    );
    expect(verified.stdout).toContain(': OK');
    expect(listObjects(tenant)).toMatch(/Certificate Object[\s\S]*subject:\s+DN: CN=Example test signing/);
  });
});

describe('bad input changes nothing', () => {
  const certCount = (tenant: string) =>
    (
      JSON.parse(runCli(['status', '--json'], { SIGNBRIDGE_SOCKET: stack.socketPath }).stdout).tokens as Array<{
        tenant: string;
        keys: Array<{ certificates: number }>;
      }>
    ).find((t) => t.tenant === tenant)?.keys[0]?.certificates;

  it('refuses a leaf made for another key, naming the problem', () => {
    const before = certCount(P384);
    const r = runCli(['cert', 'import', '--tenant', P384, '--chain', join(work, 'release-chain.pem')], {
      SIGNBRIDGE_SOCKET: stack.socketPath,
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("does not carry this key's public key");
    expect(certCount(P384)).toBe(before);
  });

  it('refuses a chain in the wrong order, or with an issuer that did not issue the leaf', () => {
    const leaf = readFileSync(join(work, 'leaf.pem'), 'utf8');
    const ca = readFileSync(join(work, 'ca.pem'), 'utf8');
    writeFileSync(join(work, 'reversed.pem'), ca + leaf);
    const reversed = runCli(['cert', 'import', '--tenant', RSA, '--chain', join(work, 'reversed.pem')], {
      SIGNBRIDGE_SOCKET: stack.socketPath,
    });
    expect(reversed.code).toBe(1);
    expect(reversed.stderr).toContain("the leaf certificate (O=Example, CN=Example test CA) does not carry this key's");
    selfSignedCa(work, 'other-ca', '/CN=Another CA');
    writeFileSync(join(work, 'wrong-issuer.pem'), leaf + readFileSync(join(work, 'other-ca.pem'), 'utf8'));
    const wrong = runCli(['cert', 'import', '--tenant', RSA, '--chain', join(work, 'wrong-issuer.pem')], {
      SIGNBRIDGE_SOCKET: stack.socketPath,
    });
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain('certificate 2 (CN=Another CA) did not issue certificate 1');
    // The chain imported before is still the one published.
    expect(certCount(RSA)).toBe(2);
  });

  it('refuses files without certificates, unknown tenants, bad subjects, and a missing daemon, with exit 1', () => {
    writeFileSync(join(work, 'empty.pem'), 'nothing here\n');
    const cases: Array<[string[], RegExp]> = [
      [['cert', 'import', '--tenant', RSA, '--chain', join(work, 'empty.pem')], /holds no PEM certificate/],
      [['cert', 'import', '--tenant', RSA, '--chain', join(work, 'missing.pem')], /cannot read/],
      [['cert', 'csr', '--tenant', 'nobody', '--subject', '/CN=x'], /does not expose tenant nobody/],
      [['cert', 'csr', '--tenant', RSA, '--subject', 'CN'], /not TYPE=value/],
      [['cert', 'self-signed', '--tenant', RSA, '--subject', '/CN=x', '--days', '0'], /--days/],
      [['cert', 'csr', '--tenant', P256, '--subject', '/CN=x', '--pss'], /PSS is for RSA keys only/],
      [['cert', 'csr', '--tenant', RSA, '--subject', '/CN=x', '--hash', 'md5'], /--hash must be one of/],
    ];
    for (const [args, message] of cases) {
      const r = runCli(args, { SIGNBRIDGE_SOCKET: stack.socketPath });
      expect(r.code, args.join(' ')).toBe(1);
      expect(r.stderr, args.join(' ')).toMatch(message);
      expect(r.stdout).toBe('');
    }
    const noDaemon = runCli(['cert', 'csr', '--tenant', RSA, '--subject', '/CN=x'], {
      SIGNBRIDGE_SOCKET: join(work, 'no-such.sock'),
    });
    expect(noDaemon.code).toBe(1);
    expect(noDaemon.stderr).toMatch(/cannot reach the signbridge daemon/);
    expect(existsSync(join(work, 'x.csr'))).toBe(false);
  });
});

describe('cert csr --subject reads what openssl req -subj reads', () => {
  // Each subject goes to `signbridge cert csr` (signed through the daemon) and to `openssl req -new -utf8 -subj`
  // with a local key; the subjects must be the same bytes, so the same lines in `openssl req -text` and RFC 2253.
  const SUBJECTS = [
    '/CN=x/emailAddress=a@b.c',
    '/C=DE/ST=Berlin/L=Berlin/O=Example GmbH/OU=Release/CN=Release signing/emailAddress=release@example.com',
    '/serialNumber=HRB 12345/street=Main Street 1/postalCode=10115/title=Signer/givenName=Jane/surname=Doe/SN=Roe' +
      '/initials=JD/generationQualifier=Jr/dnQualifier=q1/pseudonym=rel/name=Release/description=builds',
    '/businessCategory=Private Organization/jurisdictionC=DE/jurisdictionST=Berlin/jurisdictionL=Berlin' +
      '/organizationIdentifier=VATDE-123456789/O=Example GmbH/CN=example.com',
    '/DC=com/domainComponent=example/UID=jdoe/userId=j2/uid=unique/mail=jane@example.com/CN=Jane Doe',
    '/CN=a\\/b\\+c\\,d/O=Example+OU=Release+CN=multi/L= spaced ',
    '/2.5.4.3=by number/1.2.840.113549.1.9.1=n@example.com',
    '/CN=Grüße aus Köln/O=日本',
  ];
  const localKey = () => {
    const key = join(work, 'subject-local.key');
    if (!existsSync(key))
      execFileSync('openssl', ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', key]);
    return key;
  };
  const show = (csr: string, ...args: string[]) =>
    execFileSync('openssl', ['req', '-in', csr, '-noout', ...args], { encoding: 'utf8' });
  const subjectLine = (csr: string) => (show(csr, '-text').match(/^\s*Subject:.*$/m) ?? [''])[0].trim();

  it.each(SUBJECTS)('%s', (subject) => {
    const ours = join(work, 'subject-ours.csr');
    const theirs = join(work, 'subject-openssl.csr');
    const made = runCli(['cert', 'csr', '--tenant', P256, '--subject', subject, '--out', ours], env(P256));
    expect(made.code, made.stderr).toBe(0);
    execFileSync('openssl', ['req', '-new', '-utf8', '-key', localKey(), '-subj', subject, '-out', theirs], {
      stdio: 'pipe',
    });
    expect(subjectLine(ours)).toBe(subjectLine(theirs));
    const rfc2253 = ['-subject', '-nameopt', 'RFC2253'];
    expect(show(ours, ...rfc2253)).toBe(show(theirs, ...rfc2253));
    // The string types too (IA5String for emailAddress and DC, PrintableString for C and serialNumber, ...): the
    // request's elements up to the public key are its version and subject.
    const strings = (csr: string) => {
      const lines = execFileSync('openssl', ['asn1parse', '-in', csr], { encoding: 'utf8' }).split('\n');
      const subjectEnd = lines.findIndex((line) => /:id-ecPublicKey/.test(line));
      return lines.slice(3, subjectEnd - 2).map((line) => line.replace(/^\s*\d+:/, ''));
    };
    expect(strings(ours)).toEqual(strings(theirs));
    if (subject.includes('emailAddress=a@b.c'))
      expect(strings(ours).join('\n')).toMatch(/:emailAddress\n.*IA5STRING\s+:a@b\.c/);
  });

  it('refuses an unknown name, a bad value and a dangling escape with a clear message; nothing is written', () => {
    const out = join(work, 'subject-refused.csr');
    for (const [subject, message] of [
      ['/CN=x/favoriteColour=blue', /unknown attribute type "favoriteColour" in the subject.*numeric OID/],
      ['/C=Germany/CN=x', /C in the subject must be 2 characters long, not 7/],
      ['/CN=x/emailAddress=jö@example.com', /emailAddress in the subject takes ASCII characters only/],
      ['/CN=x/serialNumber=a_b', /serialNumber in the subject takes PrintableString/],
      ['/CN=x/O=', /O in the subject has no value/],
      ['/CN=x\\', /ends with an escape character/],
    ] as const) {
      const r = runCli(['cert', 'csr', '--tenant', P256, '--subject', subject, '--out', out], env(P256));
      expect(r.code, subject).toBe(1);
      expect(r.stderr, subject).toMatch(message);
      expect(existsSync(out)).toBe(false);
    }
  });
});

it('the snippet runner fails on a bad snippet environment (so the doc tests can fail)', () => {
  const r = runSnippet('cert-import', work, { ...env(RSA), SIGNBRIDGE_SOCKET: join(work, 'nope.sock') });
  expect(r.code).not.toBe(0);
});
