// `signbridge cert`: certificates for a tenant's key, which code-signing tools need next to it (jarsigner shows
// no key without one; osslsigncode embeds the chain). csr and self-signed sign through the daemon like any other
// signature (so policy applies); import hands a chain to the daemon, which publishes it to the module.
import { X509Certificate } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import { defaultSocketPath } from '../../daemon/socket-path.js';
import type { HashName } from '../crypto/algorithms.js';
import { parseSubject } from '../crypto/subject-name.js';
import { connectDaemon, DaemonKeyError, describeWireError, openDaemonKey } from './certs/daemon-key.js';
import { createCsr, createSelfSigned } from './certs/x509-builder.js';

interface CommonFlags {
  tenant: string;
  socket?: string;
}
interface BuildFlags extends CommonFlags {
  subject: string;
  out?: string;
  hash?: string;
  pss?: boolean;
  wait: string;
}
interface SelfSignedFlags extends BuildFlags {
  days: string;
  import?: boolean;
}
interface ImportFlags extends CommonFlags {
  chain: string;
}

const HASHES: readonly HashName[] = ['sha256', 'sha384', 'sha512'];

const say = (text: string) => process.stderr.write(`${text}\n`);

function hashFlag(value: string | undefined): HashName | undefined {
  if (value === undefined) return undefined;
  const h = value.toLowerCase().replace('-', '') as HashName;
  if (!HASHES.includes(h)) throw new DaemonKeyError(`--hash must be one of ${HASHES.join(', ')}, got ${value}`);
  return h;
}

function positiveNumber(name: string, value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new DaemonKeyError(`${name} must be a positive number, got ${value}`);
  return n;
}

async function withKey<T>(flags: BuildFlags, work: (key: Awaited<ReturnType<typeof openDaemonKey>>) => Promise<T>) {
  const socket = flags.socket ?? defaultSocketPath();
  let told = false;
  const key = await openDaemonKey(socket, flags.tenant, {
    approvalTimeoutMs: positiveNumber('--wait', flags.wait) * 1000,
    onPending: (requestId, status) => {
      if (!told)
        say(`waiting: request ${requestId} is ${status}; an approver must approve it (--wait ${flags.wait} s)`);
      told = true;
    },
  });
  try {
    say(`tenant ${key.tenant}: key ${key.keyId} (${key.keySpec}), signing through the daemon at ${socket}`);
    return await work(key);
  } finally {
    key.close();
  }
}

function output(pem: string, out: string | undefined, what: string): void {
  if (out) {
    writeFileSync(out, pem, { mode: 0o644 });
    say(`${what} written to ${out}`);
  } else process.stdout.write(pem);
}

/** The certificates of a PEM file, in order; a clear error when it holds none or a broken one. */
export function readPemChain(path: string): X509Certificate[] {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new DaemonKeyError(`cannot read ${path}: ${(err as Error).message}`);
  }
  const pems = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (pems.length === 0) throw new DaemonKeyError(`${path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)`);
  return pems.map((pem, i) => {
    try {
      return new X509Certificate(pem);
    } catch (err) {
      throw new DaemonKeyError(`${path}: certificate ${i + 1} is not valid X.509 (${(err as Error).message})`);
    }
  });
}

/** Sends a chain (leaf first) to the daemon; returns the daemon's description of what it stored. */
export async function importChain(socket: string, tenant: string, certs: X509Certificate[]): Promise<string> {
  const client = await connectDaemon(socket, 'signbridge cert import');
  try {
    const [leaf, ...chain] = certs as [X509Certificate, ...X509Certificate[]];
    const res = await client.request({
      type: 'IMPORT_CERTIFICATES',
      tenant,
      certificate: leaf.raw,
      chain: chain.map((c) => c.raw),
    });
    if (res.type !== 'IMPORT_OK') throw new DaemonKeyError(`import refused: ${describeWireError(res)}`);
    return `tenant ${tenant}, key ${res.label} (CKA_ID ${res.keyId.toString('hex')}): ${res.message}`;
  } finally {
    client.close();
  }
}

export function registerCertCommands(program: Command): void {
  const cert = program
    .command('cert')
    .description('certificate requests, self-signed certificates and chains for a tenant key (docs/clients.md)');

  const buildOptions = (c: Command) =>
    c
      .requiredOption('--tenant <id>', 'tenant whose current key signs (must be exposed by the daemon)')
      .requiredOption('--subject <dn>', 'subject, e.g. "/C=DE/O=Example/CN=Release signing" or "CN=..., O=..."')
      .option('--out <file>', 'write the PEM here instead of stdout')
      .option(
        '--hash <sha256|sha384|sha512>',
        'hash (default: sha256 for RSA keys, the curve hash for EC keys)',
        undefined,
      )
      .option('--pss', 'sign with RSASSA-PSS instead of PKCS#1 v1.5 (RSA keys)')
      .option('--wait <seconds>', 'how long to wait if the signature needs an approval', '600')
      .option('--socket <path>', 'daemon socket (env SIGNBRIDGE_SOCKET)');

  buildOptions(cert.command('csr').description('a PKCS#10 request for the key, to send to a CA')).action(
    async (flags: BuildFlags) => {
      const subject = parseSubject(flags.subject);
      const hash = hashFlag(flags.hash);
      const csr = await withKey(flags, (key) =>
        createCsr(key, { subject, ...(hash && { hash }), ...(flags.pss && { pss: true }) }),
      );
      output(csr.toString('pem').replace(/\r\n/g, '\n').concat('\n'), flags.out, 'certificate request');
    },
  );

  buildOptions(cert.command('self-signed').description('a self-signed code-signing certificate for the key'))
    .option('--days <n>', 'validity in days', '365')
    .option('--import', 'also register it with the daemon (as `cert import` would)')
    .action(async (flags: SelfSignedFlags) => {
      const subject = parseSubject(flags.subject);
      const hash = hashFlag(flags.hash);
      const days = Number(flags.days);
      const made = await withKey(flags, (key) =>
        createSelfSigned(key, { subject, days, ...(hash && { hash }), ...(flags.pss && { pss: true }) }),
      );
      const pem = `${made.toString('pem').replace(/\r\n/g, '\n')}\n`;
      output(pem, flags.out, 'certificate');
      if (flags.import) {
        say(await importChain(flags.socket ?? defaultSocketPath(), flags.tenant, [new X509Certificate(pem)]));
      }
    });

  cert
    .command('import')
    .description("register a leaf certificate and its intermediates for the tenant's current key with the daemon")
    .requiredOption('--tenant <id>', 'tenant whose current key the leaf certifies')
    .requiredOption('--chain <file.pem>', 'PEM file: the leaf first, then each issuer in order (root optional)')
    .option('--socket <path>', 'daemon socket (env SIGNBRIDGE_SOCKET)')
    .action(async (flags: ImportFlags) => {
      const certs = readPemChain(flags.chain);
      say(await importChain(flags.socket ?? defaultSocketPath(), flags.tenant, certs));
    });
}
