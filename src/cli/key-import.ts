// `signbridge key import`: bring your own key in one command. Reads the private key file, asks the service for
// import parameters, wraps the key here in Node (RSA-OAEP + AES key wrap with padding, as an AWS KMS client does;
// no key on any command line), imports it, then proves it: a test digest signed through the service verifies
// with the public half of the file (docs/keys.md).
import { createHash, createPublicKey, verify } from 'node:crypto';
import type { Command } from 'commander';
import smCrypto from 'sm-crypto';
import { apiKeyFromEnv, apiKeyFromFile } from '../../daemon/credentials.js';
import { defaultLoginFiles, readLoginKey, readLoginMetadata } from '../../daemon/login-files.js';
import { KEY_SPECS, type KeySpec, keyInfo, type SigningAlgorithm } from '../crypto/algorithms.js';
import { mlDsaMu, sm2Digest } from '../crypto/message-representatives.js';
import { mlDsaLevel, verifyMlDsa } from '../crypto/ml-dsa-verify.js';
import { parseMlDsaSpki, parseSm2Spki } from '../crypto/spki.js';
import { wrapKeyMaterial } from '../keys/import/client-wrap.js';
import {
  WRAPPING_ALGORITHMS,
  WRAPPING_KEY_SPECS,
  type WrappingAlgorithm,
  type WrappingKeySpec,
} from '../keys/key-store.js';
import { parseDuration } from './admin-people.js';
import { readKeyFile } from './key-file.js';
import { callService, describeAnswer, serviceBaseUrl } from './login/service-http.js';

interface ImportFlags {
  tenant: string;
  keyFile: string;
  keySpec?: string;
  wrappingAlgorithm: string;
  wrappingKeySpec: string;
  expiresIn?: string;
  kmsKeyId?: string;
  serviceUrl?: string;
  apiKeyFile?: string;
  signerApiKeyFile?: string;
  insecureHttp?: boolean;
}

/** Exit status when the key was imported but could not be proven (no signer role, or the test needs approval). */
export const EXIT_IMPORTED_NOT_PROVEN = 2;

class KeyImportError extends Error {}

export function registerKeyCommands(program: Command): void {
  const key = program.command('key').description('tenant keys: import your own (docs/keys.md)');
  key
    .command('import')
    .description(
      "import a private key as the tenant's current key: get parameters, wrap locally, import, prove by signing",
    )
    .requiredOption('--tenant <id>', 'tenant to import into (it must exist; you need its admin role)')
    .requiredOption('--key-file <file>', 'the private key: PEM or DER, PKCS#8 or traditional (RSA/EC)')
    .option('--key-spec <spec>', `expected key spec (${KEY_SPECS.join(', ')}); default: read from the file`)
    .option('--wrapping-algorithm <alg>', WRAPPING_ALGORITHMS.join(', '), 'RSA_AES_KEY_WRAP_SHA_256')
    .option('--wrapping-key-spec <spec>', WRAPPING_KEY_SPECS.join(', '), 'RSA_3072')
    .option('--expires-in <duration>', 'the material expires after this (e.g. 30d, at most 365d); default: never')
    .option('--kms-key-id <id>', 'import the same material again into this imported key (after it expired)')
    .option(
      '--service-url <url>',
      'signing service base URL (env SIGNBRIDGE_SERVICE_URL; default: that of `signbridge login`)',
    )
    .option(
      '--api-key-file <file>',
      "tenant admin's API key, mode 600 (env SIGNBRIDGE_API_KEY_FILE or SIGNBRIDGE_API_KEY; default: `signbridge login`'s)",
    )
    .option('--signer-api-key-file <file>', 'a signer key for the proof signature, when the admin key cannot sign')
    .option('--insecure-http', 'allow plain http to another host')
    .action(async (flags: ImportFlags) => {
      try {
        process.exitCode = await importKey(flags, (line) => process.stdout.write(`${line}\n`));
      } catch (err) {
        process.stderr.write(`signbridge key import: ${err instanceof Error ? err.message : String(err)}\n`);
        process.exitCode = 1;
      }
    });
}

function oneOf<T extends string>(flag: string, value: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(value)) {
    throw new KeyImportError(`${flag} must be one of ${allowed.join(', ')}, got "${value}"`);
  }
  return value as T;
}

function credentials(flags: ImportFlags): { url: URL; apiKey: string; signerKey: string } {
  const env = process.env;
  const files = defaultLoginFiles();
  const urlText = flags.serviceUrl ?? (env.SIGNBRIDGE_SERVICE_URL || readLoginMetadata(files)?.service_url);
  if (!urlText) {
    throw new KeyImportError(
      'no service: pass --service-url URL, set SIGNBRIDGE_SERVICE_URL or run `signbridge login`',
    );
  }
  const keyFile = flags.apiKeyFile ?? env.SIGNBRIDGE_API_KEY_FILE;
  const apiKey = keyFile
    ? apiKeyFromFile(keyFile).get()
    : env.SIGNBRIDGE_API_KEY
      ? apiKeyFromEnv(env.SIGNBRIDGE_API_KEY).get()
      : readLoginKey(files);
  if (!apiKey) {
    throw new KeyImportError(
      'no API key: pass --api-key-file FILE (mode 600), set SIGNBRIDGE_API_KEY, or run `signbridge login`',
    );
  }
  const signerKey = flags.signerApiKeyFile ? apiKeyFromFile(flags.signerApiKeyFile).get() : apiKey;
  return { url: serviceBaseUrl(urlText, flags.insecureHttp ?? false), apiKey, signerKey };
}

async function post(url: URL, apiKey: string, action: string, body: Record<string, unknown>) {
  const answer = await callService(new URL(`v1/${action}`, url), {
    method: 'POST',
    apiKey,
    json: { action, ...body },
  });
  return answer;
}

/** The whole exchange; resolves with the exit status. */
export async function importKey(flags: ImportFlags, say: (line: string) => void): Promise<number> {
  const algorithm = oneOf<WrappingAlgorithm>('--wrapping-algorithm', flags.wrappingAlgorithm, WRAPPING_ALGORITHMS);
  const wrappingKeySpec = oneOf<WrappingKeySpec>('--wrapping-key-spec', flags.wrappingKeySpec, WRAPPING_KEY_SPECS);
  const lifetimeMs = flags.expiresIn === undefined ? undefined : parseDuration(flags.expiresIn);
  const { url, apiKey, signerKey } = credentials(flags);
  const file = readKeyFile(flags.keyFile);
  try {
    if (flags.keySpec !== undefined && flags.keySpec !== file.spec) {
      throw new KeyImportError(`${flags.keyFile} holds a ${file.spec} key, not ${flags.keySpec}`);
    }
    say(`key file: ${file.spec} private key`);
    const params = await post(url, apiKey, 'get_import_params', {
      tenant_id: flags.tenant,
      key_spec: file.spec,
      wrapping_algorithm: algorithm,
      wrapping_key_spec: wrappingKeySpec,
      ...(flags.kmsKeyId !== undefined && { kms_key_id: flags.kmsKeyId }),
    });
    if (params.kind !== 'json' || params.status !== 200) {
      throw new KeyImportError(`get_import_params failed: ${describeAnswer(params)}`);
    }
    const kmsKeyId = String(params.body.kms_key_id);
    say(
      `import parameters: key ${kmsKeyId}, ${wrappingKeySpec} wrapping key, valid until ${isoSeconds(params.body.parameters_valid_to)}`,
    );
    const blob = wrapKeyMaterial(Buffer.from(String(params.body.public_key), 'base64'), algorithm, file.pkcs8);
    say(`wrapped locally with ${algorithm}`);
    const validTo = lifetimeMs === undefined ? undefined : Math.floor((Date.now() + lifetimeMs) / 1000);
    const imported = await post(url, apiKey, 'import_key', {
      tenant_id: flags.tenant,
      kms_key_id: kmsKeyId,
      import_token: params.body.import_token,
      encrypted_key_material: blob.toString('base64'),
      expiration_model: validTo === undefined ? 'KEY_MATERIAL_DOES_NOT_EXPIRE' : 'KEY_MATERIAL_EXPIRES',
      ...(validTo !== undefined && { valid_to: validTo }),
    });
    if (imported.kind !== 'json' || imported.status !== 200) {
      throw new KeyImportError(`import_key failed: ${describeAnswer(imported)}`);
    }
    const b = imported.body;
    say(
      `imported: key ${kmsKeyId} (${file.spec}) is ${b.current ? 'the current key' : 'a key'} of tenant ${flags.tenant}` +
        `${b.reimport ? ' (the same material again)' : `, version ${b.version}`}` +
        `${validTo === undefined ? ', material does not expire' : `, material expires ${isoSeconds(validTo)}`}`,
    );
    return await prove(url, signerKey, flags.tenant, file.spec, file.spki, say);
  } finally {
    file.pkcs8.fill(0);
  }
}

/** Signs a test digest with the tenant's current key through the service and verifies it with the file's public half. */
async function prove(
  url: URL,
  signerKey: string,
  tenant: string,
  spec: KeySpec,
  spki: Buffer,
  say: (line: string) => void,
): Promise<number> {
  const message = Buffer.from(`signbridge key import proof for tenant ${tenant} at ${new Date().toISOString()}\n`);
  const { hash, algorithm } = signingInput(spec, spki, message);
  const signed = await post(url, signerKey, 'sign', { tenant_id: tenant, hash: hash.toString('base64'), algorithm });
  if (signed.kind === 'json' && signed.status === 202) {
    say(`not proven: the test signature waits for approval (request ${signed.body.request_id}); the key is imported`);
    return EXIT_IMPORTED_NOT_PROVEN;
  }
  if (
    signed.kind === 'json' &&
    (signed.status === 403 || signed.status === 401) &&
    signed.body.error !== 'policy_denied'
  ) {
    say(
      `not proven: this API key may not sign for ${tenant} (${describeAnswer(signed)}); ` +
        'pass --signer-api-key-file FILE to prove it; the key is imported',
    );
    return EXIT_IMPORTED_NOT_PROVEN;
  }
  if (signed.kind !== 'json' || signed.status !== 200) {
    throw new KeyImportError(`imported, but the test signature failed: ${describeAnswer(signed)}`);
  }
  const signature = Buffer.from(String(signed.body.signature), 'base64');
  if (!verifies(spec, spki, message, signature)) {
    throw new KeyImportError(
      `imported, but the test signature (${algorithm}) does not verify with the public key of the key file`,
    );
  }
  say(`proven: a ${algorithm} signature by key ${signed.body.key_id} verifies with the public key of the key file`);
  return 0;
}

function signingInput(spec: KeySpec, spki: Buffer, message: Buffer): { hash: Buffer; algorithm: SigningAlgorithm } {
  const family = keyInfo(spec).family;
  if (family === 'ml-dsa') {
    const pk = parseMlDsaSpki(spki)?.publicKey as Buffer;
    return { hash: mlDsaMu(pk, [message]), algorithm: 'ML_DSA_SHAKE_256' };
  }
  if (family === 'sm2') return { hash: sm2Digest(parseSm2Spki(spki) as Buffer, [message]), algorithm: 'SM2DSA' };
  const hash = createHash('sha256').update(message).digest();
  return { hash, algorithm: family === 'rsa' ? 'RSASSA_PKCS1_V1_5_SHA_256' : 'ECDSA_SHA_256' };
}

function verifies(spec: KeySpec, spki: Buffer, message: Buffer, signature: Buffer): boolean {
  const family = keyInfo(spec).family;
  if (family === 'ml-dsa') {
    const pk = parseMlDsaSpki(spki)?.publicKey ?? new Uint8Array();
    const level = mlDsaLevel(spec);
    return level ? verifyMlDsa(level, pk, { message }, signature) : false;
  }
  if (family === 'sm2') {
    // sm-crypto hashes with KMS's distinguishing ID 1234567812345678 (node:crypto would use an empty one).
    const point = (parseSm2Spki(spki) as Buffer).toString('hex');
    return smCrypto.sm2.doVerifySignature(Array.from(message), signature.toString('hex'), point, {
      der: true,
      hash: true,
    });
  }
  return verify('sha256', message, createPublicKey({ key: spki, format: 'der', type: 'spki' }), signature);
}

function isoSeconds(value: unknown): string {
  return new Date(Number(value) * 1000).toISOString();
}
