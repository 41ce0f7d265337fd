// A small certificate authority for the tool tests, made with OpenSSL and local keys: a root and an intermediate,
// standing in for the CA a user sends `signbridge cert csr` output to. Leaves it issues are code-signing certificates.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { selfSignedP256 } from '../helpers/crypto.js';
import { runSnippetOk } from '../helpers/doc-snippets.js';

export interface TestPki {
  dir: string;
  /** Root certificate, PEM file path (the trust anchor verifiers get). */
  root: string;
  /** Intermediate certificate, PEM file path. */
  intermediate: string;
  /** Issues a leaf for a PKCS#10 request; writes `<out>` (leaf only) and returns the chain PEM leaf→intermediate→root. */
  issue(csr: string, out: string): string;
}

const ossl = (dir: string, args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
const EC_KEY = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];

/** A self-signed CA certificate with a new local P-256 key: writes `<name>.key` and `<name>.pem` into dir. */
export function selfSignedCa(dir: string, name: string, subject: string): string {
  selfSignedP256(`${name}.key`, `${name}.pem`, subject, {
    cwd: dir,
    days: 3,
    extensions: ['basicConstraints=critical,CA:true', 'keyUsage=critical,keyCertSign,cRLSign'],
  });
  return join(dir, `${name}.pem`);
}

/**
 * Gives each tenant a certificate from `pki`, the way a user would: `signbridge cert csr` (signed through the
 * daemon), the CA issues, `signbridge cert import` registers leaf + intermediate + root. Uses the docs' snippets.
 */
export function certifyTenants(pki: TestPki, socketPath: string, parent: string, tenants: string[]): void {
  for (const tenant of tenants) {
    const dir = mkdtempSync(join(parent, `cert-${tenant}-`));
    const env = { SIGNBRIDGE_SOCKET: socketPath, TOKEN: tenant };
    runSnippetOk('cert-csr', dir, env);
    writeFileSync(join(dir, 'release-chain.pem'), pki.issue(join(dir, 'release.csr'), join(dir, 'leaf.pem')));
    runSnippetOk('cert-import', dir, env);
  }
}

export function makeTestPki(dir: string, name = 'Example'): TestPki {
  const ext = (file: string, lines: string[]) => writeFileSync(join(dir, file), `${lines.join('\n')}\n`);
  selfSignedCa(dir, 'root', `/O=${name}/CN=${name} test root CA`);
  ossl(dir, [
    'req',
    '-new',
    ...EC_KEY,
    '-keyout',
    'intermediate.key',
    '-out',
    'intermediate.csr',
    '-subj',
    `/O=${name}/CN=${name} test code-signing CA`,
  ]);
  ext('intermediate.ext', [
    'basicConstraints=critical,CA:true,pathlen:0',
    'keyUsage=critical,keyCertSign,cRLSign',
    'subjectKeyIdentifier=hash',
    'authorityKeyIdentifier=keyid',
  ]);
  ossl(dir, [
    'x509',
    '-req',
    '-in',
    'intermediate.csr',
    '-CA',
    'root.pem',
    '-CAkey',
    'root.key',
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    'intermediate.ext',
    '-out',
    'intermediate.pem',
  ]);
  ext('leaf.ext', [
    'basicConstraints=critical,CA:false',
    'keyUsage=critical,digitalSignature',
    'extendedKeyUsage=codeSigning',
    'subjectKeyIdentifier=hash',
    'authorityKeyIdentifier=keyid',
  ]);
  const root = join(dir, 'root.pem');
  const intermediate = join(dir, 'intermediate.pem');
  return {
    dir,
    root,
    intermediate,
    issue(csr, out) {
      ossl(dir, [
        'x509',
        '-req',
        '-in',
        csr,
        '-CA',
        'intermediate.pem',
        '-CAkey',
        'intermediate.key',
        '-CAcreateserial',
        '-days',
        '1',
        '-extfile',
        'leaf.ext',
        '-out',
        out,
      ]);
      return [out, intermediate, root].map((f) => readFileSync(f, 'utf8')).join('');
    },
  };
}
