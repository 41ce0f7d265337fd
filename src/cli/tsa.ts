// `signbridge tsa`: the time-stamping authority's identity (docs/tsa.md). Offline, against the service's store and
// key store like `signbridge admin` (works while the service runs; it reads a new identity within 10 s).
//
//   tsa init [--tenant T] [--key-spec S] (--self-signed --subject DN [--days N] | --csr FILE --subject DN)
//   tsa cert import [--tenant T] --chain FILE
//   tsa show [--tenant T]
import { createPublicKey, X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { userInfo } from 'node:os';
import type { Command } from 'commander';
import { TENANT_ID_PATTERN } from '../api/schemas.js';
import { resolveConfig, type ServiceConfig } from '../config/config.js';
import type { KeySpec } from '../crypto/algorithms.js';
import { toPem } from '../crypto/spki.js';
import type { KeyStores } from '../keys/key-store.js';
import { openKeyStore, openStore } from '../open-stores.js';
import type { Store } from '../store/store.js';
import { SERVICE_TSA_SCOPE, type TsaIdentityRecord } from '../store/tsa/tsa-store.js';
import type { TsaSigningAlgorithm } from '../tsa/tsa-algorithms.js';
import { createTsaCertificate, createTsaCsr, tsaCertificateProblems } from '../tsa/tsa-certificate.js';
import { DEFAULT_TSA_KEY_SPEC, TSA_KEY_SPECS, tsaAlgorithmFor } from '../tsa/tsa-key-specs.js';
import { pemCertificates } from '../tsa/tsa-service.js';
import { storeOptions as adminStoreOptions } from './admin.js';

export class TsaCommandError extends Error {}

interface StoreFlags {
  dataDir?: string;
  config?: string;
  database?: string;
}

/** The store flags of `signbridge admin`, and the scope: a tenant's own identity or the service's. */
function storeOptions(cmd: Command): Command {
  return adminStoreOptions(cmd).option(
    '--tenant <id>',
    "a tenant's own TSA identity (POST /tsa/<tenant>) instead of the service's",
  );
}

async function withStores<T>(
  flags: StoreFlags,
  fn: (store: Store, keyStores: KeyStores, config: ServiceConfig) => Promise<T>,
): Promise<T> {
  const config = resolveConfig({ dataDir: flags.dataDir, configFile: flags.config, database: flags.database });
  const store = await openStore(config);
  try {
    const keyStores = openKeyStore(config);
    try {
      return await fn(store, keyStores, config);
    } finally {
      await keyStores.close();
    }
  } finally {
    await store.close();
  }
}

function scopeOf(tenant: string | undefined): string {
  if (tenant === undefined) return SERVICE_TSA_SCOPE;
  if (!new RegExp(TENANT_ID_PATTERN).test(tenant)) throw new TsaCommandError(`--tenant ${tenant} is not a tenant id`);
  return tenant;
}

function describe(scope: string): string {
  return scope === SERVICE_TSA_SCOPE ? "the service's TSA" : `tenant ${scope}'s TSA`;
}

function tenantFlag(scope: string): string {
  return scope === SERVICE_TSA_SCOPE ? '' : ` --tenant ${scope}`;
}

function actor(): string {
  return `cli:${userInfo().username}`;
}

function spkiDer(publicKeyPem: string): Buffer {
  return createPublicKey(publicKeyPem).export({ type: 'spki', format: 'der' });
}

interface InitFlags extends StoreFlags {
  tenant?: string;
  keySpec: string;
  selfSigned?: boolean;
  subject?: string;
  days: string;
  csr?: string;
}

async function init(flags: InitFlags): Promise<string> {
  const scope = scopeOf(flags.tenant);
  const algorithm = tsaAlgorithmFor(flags.keySpec);
  if (typeof algorithm !== 'string') throw new TsaCommandError(`--key-spec: ${algorithm.refused}`);
  if (Boolean(flags.selfSigned) === Boolean(flags.csr)) {
    throw new TsaCommandError('give either --self-signed (a certificate for trials) or --csr FILE (for your CA)');
  }
  if (!flags.subject) throw new TsaCommandError('--subject is required, e.g. --subject "CN=Example TSA, O=Example"');
  const days = Number(flags.days);
  if (!Number.isInteger(days) || days < 1 || days > 4110) {
    throw new TsaCommandError(`--days must be a whole number from 1 to 4110 (135 months), got ${flags.days}`);
  }
  const subject = flags.subject;
  return withStores(flags, async (store, keyStores) => {
    const existing = await store.tsa.getIdentity(scope);
    if (existing) {
      throw new TsaCommandError(
        `${describe(scope)} exists already (made ${existing.createdAt} by ${existing.createdBy}); a second key would leave tokens of the first unverifiable by its chain`,
      );
    }
    const keySpec = flags.keySpec as KeySpec;
    const keyStore = keyStores.forNewKey(keySpec);
    const made = await keyStore.createKey(keySpec, scope === SERVICE_TSA_SCOPE ? 'tsa-service' : `tsa-${scope}`);
    const key = {
      spki: spkiDer(made.publicKeyPem),
      algorithm,
      sign: (digest: Buffer, alg: TsaSigningAlgorithm) => keyStore.sign(made.keyRef, keySpec, alg, digest),
    };
    let chainPem: string | null = null;
    let csrPem: string | null = null;
    try {
      if (flags.selfSigned) chainPem = toPem(await createTsaCertificate(key, { subject, days }), 'CERTIFICATE');
      else csrPem = toPem(await createTsaCsr(key, { subject }), 'CERTIFICATE REQUEST');
    } catch (err) {
      await keyStore.destroyKey(made.keyRef).catch(() => undefined);
      throw err;
    }
    const at = new Date().toISOString();
    const record: TsaIdentityRecord = {
      scope,
      keyStore: keyStore.kind,
      keyRef: made.keyRef,
      keySpec,
      algorithm,
      publicKeyPem: made.publicKeyPem,
      chainPem,
      csrPem,
      createdAt: at,
      createdBy: actor(),
      updatedAt: at,
    };
    if (!(await store.tsa.createIdentity(record))) {
      await keyStore.destroyKey(made.keyRef).catch(() => undefined);
      throw new TsaCommandError(`${describe(scope)} was made by someone else meanwhile; nothing changed`);
    }
    await store.audit.append({
      at,
      tenantId: scope === SERVICE_TSA_SCOPE ? null : scope,
      actor: actor(),
      action: 'tsa_init',
      outcome: chainPem ? 'self_signed' : 'csr',
      details: { key_spec: keySpec, key_store: keyStore.kind, subject },
    });
    if (csrPem && flags.csr) {
      writeFileSync(flags.csr, csrPem, { mode: 0o644 });
      return (
        `${describe(scope)}: ${keySpec} key made in ${keyStore.description}; certificate request written to ${flags.csr}.\n` +
        `Have your CA issue it with the critical extended key usage timeStamping only, then run:\n` +
        `  signbridge tsa cert import${tenantFlag(scope)} --chain CHAIN.pem\n`
      );
    }
    const cert = new X509Certificate(chainPem as string);
    return (
      `${describe(scope)}: ${keySpec} key made in ${keyStore.description}; self-signed certificate "${cert.subject.replace(/\n/g, ', ')}" valid until ${new Date(cert.validTo).toISOString()}.\n` +
      `Clients must trust it to verify its tokens (it is served at /tsa${scope ? `/${scope}` : ''}/chain.pem); for trials only.\n`
    );
  });
}

/** The chain's problems: each certificate issued by the next and valid now, the first one a TSA certificate. */
function chainProblems(chain: readonly Buffer[], publicKeyPem: string, now = new Date()): string[] {
  const [leaf] = chain;
  if (!leaf) return ['the file holds no PEM certificate'];
  const problems = tsaCertificateProblems(leaf).map((p) => `TSA certificate: ${p}`);
  const certs = chain.map((der) => new X509Certificate(der));
  const leafKey = (certs[0] as X509Certificate).publicKey.export({ type: 'spki', format: 'der' });
  if (!leafKey.equals(spkiDer(publicKeyPem))) {
    problems.push("the first certificate is not for this TSA's key (was the CSR from another `tsa init`?)");
  }
  certs.forEach((cert, i) => {
    if (new Date(cert.validFrom) > now || new Date(cert.validTo) < now) {
      problems.push(`certificate ${i + 1} (${cert.subject.replace(/\n/g, ', ')}) is not valid now`);
    }
    const issuer = certs[i + 1];
    if (issuer && !(cert.checkIssued(issuer) && cert.verify(issuer.publicKey))) {
      problems.push(`certificate ${i + 1} is not issued by certificate ${i + 2}: give the chain in order, TSA first`);
    }
  });
  return problems;
}

async function importChain(flags: StoreFlags & { tenant?: string; chain: string }): Promise<string> {
  const scope = scopeOf(flags.tenant);
  let text: string;
  try {
    text = readFileSync(flags.chain, 'utf8');
  } catch (err) {
    throw new TsaCommandError(`cannot read ${flags.chain}: ${(err as Error).message}`);
  }
  let chain: Buffer[];
  try {
    chain = pemCertificates(text);
  } catch (err) {
    throw new TsaCommandError(`${flags.chain} holds a certificate that cannot be read: ${(err as Error).message}`);
  }
  return withStores(flags, async (store) => {
    const identity = await store.tsa.getIdentity(scope);
    if (!identity) {
      throw new TsaCommandError(
        `${describe(scope)} has no key yet: run \`signbridge tsa init${tenantFlag(scope)}\` first`,
      );
    }
    const problems = chainProblems(chain, identity.publicKeyPem);
    if (problems.length > 0) {
      throw new TsaCommandError(`${flags.chain} not installed:\n  ${problems.join('\n  ')}`);
    }
    const chainPem = chain.map((der) => toPem(der, 'CERTIFICATE')).join('');
    const at = new Date().toISOString();
    await store.tsa.setChain(scope, chainPem, at);
    const leaf = new X509Certificate(chain[0] as Buffer);
    await store.audit.append({
      at,
      tenantId: scope === SERVICE_TSA_SCOPE ? null : scope,
      actor: actor(),
      action: 'tsa_cert_import',
      outcome: 'installed',
      details: { subject: leaf.subject.replace(/\n/g, ', '), serial: leaf.serialNumber, certificates: chain.length },
    });
    return `${describe(scope)}: chain of ${chain.length} installed ("${leaf.subject.replace(/\n/g, ', ')}", valid until ${new Date(leaf.validTo).toISOString()}); the service uses it within 10 s.\n`;
  });
}

async function show(flags: StoreFlags & { tenant?: string }): Promise<string> {
  const scope = scopeOf(flags.tenant);
  const config = resolveConfig({ dataDir: flags.dataDir, configFile: flags.config, database: flags.database });
  const store = await openStore(config);
  try {
    const identity = await store.tsa.getIdentity(scope);
    if (!identity) return `${describe(scope)}: none (signbridge tsa init${tenantFlag(scope)})\n`;
    const lines = [`${describe(scope)}: ${identity.keySpec} key in the ${identity.keyStore} key store`];
    if (identity.chainPem) {
      for (const der of pemCertificates(identity.chainPem)) {
        const cert = new X509Certificate(der);
        lines.push(`  ${cert.subject.replace(/\n/g, ', ')} (until ${new Date(cert.validTo).toISOString()})`);
      }
    } else lines.push('  waiting for its certificate (signbridge tsa cert import)');
    return `${lines.join('\n')}\n`;
  } finally {
    await store.close();
  }
}

/** Runs a command: its output on stdout, a TsaCommandError (or any error) as one line on stderr with exit 1. */
function action<T>(run: (flags: T) => Promise<string>) {
  return async (flags: T): Promise<void> => {
    try {
      process.stdout.write(await run(flags));
    } catch (err) {
      process.stderr.write(`signbridge tsa: ${(err as Error).message}\n`);
      process.exitCode = 1;
    }
  };
}

export function registerTsaCommands(program: Command): void {
  const tsa = program.command('tsa').description('the RFC 3161 time-stamping authority (docs/tsa.md)');
  storeOptions(tsa.command('init'))
    .description('make the TSA key and a self-signed certificate (trials) or a certificate request (your CA)')
    .option('--key-spec <spec>', `${Object.keys(TSA_KEY_SPECS).join(' | ')}`, DEFAULT_TSA_KEY_SPEC)
    .option('--self-signed', 'make a self-signed certificate (clients must trust it explicitly)')
    .option('--csr <file>', 'write a PKCS#10 certificate request (PEM) to this file')
    .option('--subject <dn>', 'the certificate subject, e.g. "CN=Example TSA, O=Example"')
    .option('--days <n>', 'validity of a self-signed certificate in days', '365')
    .action(action(init));
  const cert = tsa.command('cert').description("the TSA's certificate chain");
  storeOptions(cert.command('import'))
    .description('install the chain your CA issued (PEM: the TSA certificate first, then the CAs above it)')
    .requiredOption('--chain <file>', 'PEM file')
    .action(action(importChain));
  storeOptions(tsa.command('show')).description('the TSA identity: key and certificates').action(action(show));
}
