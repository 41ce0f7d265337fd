// Certificates for a key: a PEM file with the leaf first, then intermediates (leaf side first). The leaf must
// carry the key's public key; a file that does not match is reported and left out rather than published.
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';

export interface KeyCertificates {
  certificate?: Buffer;
  chain: Buffer[];
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

export function loadCertificates(path: string, spkiDer: Buffer): KeyCertificates {
  const text = readFileSync(path, 'utf8');
  const pems = text.match(PEM_CERT) ?? [];
  if (pems.length === 0) throw new Error(`${path} holds no PEM certificate`);
  const certs = pems.map((pem, i) => {
    try {
      return new X509Certificate(pem);
    } catch (err) {
      throw new Error(`${path}: certificate ${i + 1} is not valid X.509 (${(err as Error).message})`);
    }
  });
  const [leaf, ...chain] = certs as [X509Certificate, ...X509Certificate[]];
  const leafSpki = leaf.publicKey.export({ type: 'spki', format: 'der' });
  if (!leafSpki.equals(spkiDer)) {
    throw new Error(`${path}: the first certificate (${leaf.subject}) is not for this key (public keys differ)`);
  }
  return { certificate: leaf.raw, chain: chain.map((c) => c.raw) };
}
