// Certificates registered with `signbridge cert import`: one PEM file per tenant and service key id under the
// daemon's certificate folder (<dir>/<tenant>/<key id>.pem, leaf first, then intermediates). The folder is the
// daemon user's own (0700, files 0600): certificates are public, but whoever can write there decides which
// certificate a signature is presented with.
import { X509Certificate } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { type KeyCertificates, loadCertificates } from './certificates.js';

/** $SIGNBRIDGE_CERT_DIR, else $XDG_DATA_HOME/signbridge/certificates, else ~/.local/share/signbridge/certificates. */
export function defaultCertificateDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.SIGNBRIDGE_CERT_DIR) return env.SIGNBRIDGE_CERT_DIR;
  const data = env.XDG_DATA_HOME || join(env.HOME || homedir(), '.local', 'share');
  return join(data, 'signbridge', 'certificates');
}

// Tenant and key ids become path components: anything outside this set is percent-encoded, so no id can name
// another folder ("..", "/").
const pathPart = (id: string) =>
  id.replace(/[^A-Za-z0-9_-]/g, (c) => `%${c.charCodeAt(0).toString(16).padStart(2, '0')}`);

export class CertificateChainError extends Error {}

/**
 * Parses and checks a chain before it is stored: the leaf carries `spki`, and each certificate was issued (and
 * signed) by the next one, so that tools building the chain from the token get a chain that verifies.
 */
export function checkChain(leafDer: Buffer, chainDer: Buffer[], spki: Buffer): X509Certificate[] {
  const certs = [leafDer, ...chainDer].map((der, i) => {
    try {
      return new X509Certificate(der);
    } catch (err) {
      throw new CertificateChainError(`certificate ${i + 1} is not valid X.509 (${(err as Error).message})`);
    }
  });
  const leaf = certs[0] as X509Certificate;
  if (!leaf.publicKey.export({ type: 'spki', format: 'der' }).equals(spki)) {
    throw new CertificateChainError(
      `the leaf certificate (${oneLine(leaf.subject)}) does not carry this key's public key; ` +
        'was it issued for another key, or before a key rotation?',
    );
  }
  for (let i = 0; i + 1 < certs.length; i++) {
    const child = certs[i] as X509Certificate;
    const issuer = certs[i + 1] as X509Certificate;
    if (!child.checkIssued(issuer) || !child.verify(issuer.publicKey)) {
      throw new CertificateChainError(
        `certificate ${i + 2} (${oneLine(issuer.subject)}) did not issue certificate ${i + 1} ` +
          `(${oneLine(child.subject)}); list the leaf first, then each issuer in order`,
      );
    }
  }
  return certs;
}

const oneLine = (name: string) => name.split('\n').join(', ');

export class CertificateStore {
  constructor(readonly dir: string) {}

  pathFor(tenantId: string, keyId: string): string {
    return join(this.dir, pathPart(tenantId), `${pathPart(keyId)}.pem`);
  }

  /** The stored chain for a key, checked against its public key; undefined when none is stored. */
  load(tenantId: string, keyId: string, spki: Buffer): KeyCertificates | undefined {
    const path = this.pathFor(tenantId, keyId);
    if (!existsSync(path)) return undefined;
    return loadCertificates(path, spki);
  }

  /** Writes the chain atomically (temporary file, then rename) and returns the file's path. */
  save(tenantId: string, keyId: string, certs: X509Certificate[]): string {
    const path = this.pathFor(tenantId, keyId);
    const folder = join(this.dir, pathPart(tenantId));
    const old = process.umask(0o077);
    try {
      mkdirSync(folder, { recursive: true, mode: 0o700 });
      const temp = `${path}.${process.pid}.tmp`;
      writeFileSync(temp, certs.map((c) => c.toString()).join(''), { mode: 0o600 });
      renameSync(temp, path);
    } finally {
      process.umask(old);
    }
    return path;
  }
}
