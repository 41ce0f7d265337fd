// Shared by the OpenSSL tool tests (pkcs11-provider and libp11 engine): a folder per test with the configuration
// from `signbridge openssl-config`, and independent checks of what OpenSSL produced with the public keys the
// service returned (stack.publicKeys), so a signature by any other key fails.
import { spawnSync } from 'node:child_process';
import { constants as C, createPublicKey, type KeyObject, verify, X509Certificate } from 'node:crypto';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { runSnippet, runSnippetOk } from '../helpers/doc-snippets.js';
import { type Stack, tenantFor } from '../module/harness.js';

export const SPECS: KeySpec[] = ['RSA_2048', 'ECC_NIST_P256', 'ECC_NIST_P384'];
/** The digest OpenSSL signs with here: the curve's own hash (an EC key signs any SHA-2; openssl-tls.test.ts). */
export const MD: Record<string, string> = { RSA_2048: 'sha256', ECC_NIST_P256: 'sha256', ECC_NIST_P384: 'sha384' };

export interface Work {
  dir: string;
  env: Record<string, string>;
}

/**
 * Runs the configuration snippet and the public-key snippet once per key spec, in a folder under the stack's; each
 * test then gets a fresh copy (newWork), so no test sees another's output files.
 */
export function prepare(stack: Stack, spec: KeySpec, configSnippet: string, publicKeySnippet: string): Work {
  const dir = mkdtempSync(join(stack.dir, `openssl-${spec}-`));
  const env = {
    SIGNBRIDGE_SOCKET: stack.socketPath,
    MODULE: MODULE_PATH,
    TOKEN: tenantFor(spec),
    MD: MD[spec] as string,
  };
  writeFileSync(join(dir, 'file.txt'), `signed by OpenSSL through signbridge, ${spec}, ${Date.now()}\n`);
  runSnippetOk(configSnippet, dir, env);
  runSnippetOk(publicKeySnippet, dir, env);
  return { dir, env };
}

export function newWork(base: Work): Work {
  const dir = mkdtempSync(`${base.dir}-t`);
  for (const f of ['file.txt', 'public.pem', 'signbridge-openssl.cnf', 'signbridge-engine.cnf']) {
    try {
      copyFileSync(join(base.dir, f), join(dir, f));
    } catch {
      // only one of the two configurations exists
    }
  }
  return { dir, env: base.env };
}

export const servicePublicKey = (stack: Stack, spec: KeySpec) =>
  createPublicKey(stack.publicKeys.get(tenantFor(spec)) as string);

const spki = (k: KeyObject) => k.export({ type: 'spki', format: 'der' });

/** Whether `signature` over `data` verifies with `key` (PKCS#1 v1.5 / DER ECDSA, or RSA-PSS with salt = digest). */
export function verifies(md: string, data: Buffer, key: KeyObject, signature: Buffer, pss = false): boolean {
  const options = pss
    ? { key, padding: C.RSA_PKCS1_PSS_PADDING, saltLength: C.RSA_PSS_SALTLEN_DIGEST }
    : { key, dsaEncoding: 'der' as const };
  try {
    return verify(md, data, options, signature);
  } catch {
    return false; // e.g. an EC signature checked with an RSA key
  }
}

/** file.sig over file.txt verifies with the service key of `spec`, and with no other tenant's key. */
export function fileSigByServiceKey(stack: Stack, w: Work, spec: KeySpec, pss = false): boolean {
  const data = readFileSync(join(w.dir, 'file.txt'));
  const sig = readFileSync(join(w.dir, 'file.sig'));
  const md = MD[spec] as string;
  for (const other of SPECS.filter((s) => s !== spec)) {
    if (verifies(md, data, servicePublicKey(stack, other), sig, pss)) return false;
  }
  return verifies(md, data, servicePublicKey(stack, spec), sig, pss);
}

/** The public key in public.pem is the service key of `spec`. */
export function publicPemIsServiceKey(stack: Stack, w: Work, spec: KeySpec): boolean {
  return spki(createPublicKey(readFileSync(join(w.dir, 'public.pem')))).equals(spki(servicePublicKey(stack, spec)));
}

/** cert.pem carries the service key of `spec` and its signature verifies with that key and with no other. */
export function certSignedByServiceKey(stack: Stack, w: Work, spec: KeySpec): boolean {
  const cert = new X509Certificate(readFileSync(join(w.dir, 'cert.pem')));
  const key = servicePublicKey(stack, spec);
  if (!spki(cert.publicKey).equals(spki(key))) return false;
  for (const other of SPECS.filter((s) => s !== spec)) {
    if (safe(() => cert.verify(servicePublicKey(stack, other)))) return false;
  }
  return cert.verify(key);
}

const safe = (f: () => boolean) => {
  try {
    return f();
  } catch {
    return false;
  }
};

// A minimal DER reader, enough to take the signed attributes and the signature out of a CMS SignedData.
interface Tlv {
  tag: number;
  start: number; // of the whole TLV
  body: number; // of the value
  end: number;
}
function tlv(der: Buffer, at: number): Tlv {
  const tag = der[at] as number;
  let len = der[at + 1] as number;
  let body = at + 2;
  if (len & 0x80) {
    const n = len & 0x7f;
    len = 0;
    for (let i = 0; i < n; i++) len = len * 256 + (der[body + i] as number);
    body += n;
  }
  return { tag, start: at, body, end: body + len };
}
function children(der: Buffer, parent: Tlv): Tlv[] {
  const out: Tlv[] = [];
  for (let at = parent.body; at < parent.end; at = (out[out.length - 1] as Tlv).end) out.push(tlv(der, at));
  return out;
}

/**
 * The one SignerInfo of a DER CMS SignedData: its signed attributes as signed (a SET, RFC 5652 5.4) and its
 * signature value.
 */
export function cmsSignerInfo(p7s: Buffer): { signedAttrs: Buffer; signature: Buffer } {
  const contentInfo = tlv(p7s, 0);
  const explicit = children(p7s, contentInfo)[1] as Tlv; // [0] EXPLICIT content
  const signedData = children(p7s, explicit)[0] as Tlv;
  const signerInfos = children(p7s, signedData).at(-1) as Tlv; // SET OF SignerInfo, always last
  const infos = children(p7s, signerInfos);
  if (infos.length !== 1) throw new Error(`expected one SignerInfo, found ${infos.length}`);
  const fields = children(p7s, infos[0] as Tlv);
  const attrs = fields.find((f) => f.tag === 0xa0);
  const signature = fields.find((f) => f.tag === 0x04);
  if (!attrs || !signature) throw new Error('SignerInfo without signed attributes or signature');
  const signedAttrs = Buffer.from(p7s.subarray(attrs.start, attrs.end));
  signedAttrs[0] = 0x31; // [0] IMPLICIT on the wire, SET OF when signed
  return { signedAttrs, signature: Buffer.from(p7s.subarray(signature.body, signature.end)) };
}

/** file.p7s's signature verifies with the service key of `spec`, and with no other tenant's key. */
export function cmsSignedByServiceKey(stack: Stack, w: Work, spec: KeySpec): boolean {
  const { signedAttrs, signature } = cmsSignerInfo(readFileSync(join(w.dir, 'file.p7s')));
  const md = MD[spec] as string;
  for (const other of SPECS.filter((s) => s !== spec)) {
    if (verifies(md, signedAttrs, servicePublicKey(stack, other), signature)) return false;
  }
  return verifies(md, signedAttrs, servicePublicKey(stack, spec), signature);
}

/** The snippets of one OpenSSL flavour in docs/clients.md. */
export interface Snippets {
  config: string;
  publicKey: string;
  dgst: string;
  dgstPss: string;
  pkeyutl: string;
  reqX509: string;
  cms: string;
}

/**
 * The same tests for pkcs11-provider and the libp11 engine: for each key, the public key read through OpenSSL,
 * dgst, pkeyutl, req -x509 and cms (PSS for the RSA key), each verified by OpenSSL's own verifier (the snippet's
 * second command) and here with the service's public keys.
 */
export function opensslSuite(flavour: string, stack: () => Stack, s: Snippets): void {
  const bases = new Map<KeySpec, Work>();
  const base = (spec: KeySpec) => {
    let b = bases.get(spec);
    if (!b) {
      b = prepare(stack(), spec, s.config, s.publicKey);
      bases.set(spec, b);
    }
    return b;
  };

  describe.each(SPECS)(`${flavour}, %s`, (spec) => {
    it('reads the public key from the token: the service key', () => {
      expect(publicPemIsServiceKey(stack(), base(spec), spec)).toBe(true);
    });

    it('openssl dgst -sign: verified by openssl, by the service key, not by the other keys or for other data', () => {
      const w = newWork(base(spec));
      expect(runSnippetOk(s.dgst, w.dir, w.env).stdout).toContain('Verified OK');
      expect(fileSigByServiceKey(stack(), w, spec)).toBe(true);
      writeFileSync(join(w.dir, 'file.txt'), 'other data\n');
      expect(fileSigByServiceKey(stack(), w, spec)).toBe(false);
    });

    it('openssl pkeyutl -sign over a digest: verified by openssl and by the service key', () => {
      const w = newWork(base(spec));
      expect(runSnippetOk(s.pkeyutl, w.dir, w.env).stdout).toContain('Signature Verified Successfully');
      expect(fileSigByServiceKey(stack(), w, spec)).toBe(true);
    });

    it('openssl req -new -x509, then cms -sign with that certificate: verified by openssl and by the service key', () => {
      const w = newWork(base(spec));
      expect(runSnippetOk(s.reqX509, w.dir, w.env).stdout).toContain('cert.pem: OK');
      expect(certSignedByServiceKey(stack(), w, spec)).toBe(true);
      expect(runSnippetOk(s.cms, w.dir, w.env).stderr).toContain('Verification successful');
      expect(cmsSignedByServiceKey(stack(), w, spec)).toBe(true);
      // OpenSSL's verifier is not vacuous either: the signature does not cover other content.
      writeFileSync(join(w.dir, 'file.txt'), 'other data\n');
      const changed = spawnSync(
        'openssl',
        ['cms', '-verify', '-binary', '-inform', 'DER', '-in', 'file.p7s', '-content', 'file.txt'].concat([
          '-CAfile',
          'cert.pem',
          '-purpose',
          'any',
          '-out',
          '/dev/null',
        ]),
        { cwd: w.dir, encoding: 'utf8' },
      );
      expect(changed.status).not.toBe(0);
      expect(changed.stderr).toContain('Verification failure');
    });
  });

  describe(`${flavour}, RSA-PSS`, () => {
    it('openssl dgst with rsa_padding_mode:pss: verified by openssl and as PSS by the service key', () => {
      const w = newWork(base('RSA_2048'));
      expect(runSnippetOk(s.dgstPss, w.dir, w.env).stdout).toContain('Verified OK');
      expect(fileSigByServiceKey(stack(), w, 'RSA_2048', true)).toBe(true);
      expect(fileSigByServiceKey(stack(), w, 'RSA_2048', false)).toBe(false); // not PKCS#1 v1.5
    });
  });

  it(`${flavour}: a token the daemon does not expose is an error, and no signature`, () => {
    const w = newWork(base('RSA_2048'));
    const r = runSnippet(s.dgst, w.dir, { ...w.env, TOKEN: 'no-such-tenant' });
    expect(r.code).not.toBe(0);
    expect(existsSync(join(w.dir, 'file.sig')) && readFileSync(join(w.dir, 'file.sig')).length > 0).toBe(false);
  });
}
