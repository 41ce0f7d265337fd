// A KeyStore in AWS KMS, over @aws-sdk/client-kms. Everything AWS (region, endpoint, credentials, profiles) comes
// from the SDK's own settings (AWS_REGION, AWS_ENDPOINT_URL_KMS / AWS_ENDPOINT_URL, the default credential chain)
// unless the configuration names a region or endpoint. One client, reused, with a request timeout and the SDK's
// retries; what its errors mean for a caller is in aws-kms-errors.ts. docs/aws-kms.md has the decisions.

import { createPublicKey } from 'node:crypto';
import {
  CreateAliasCommand,
  CreateKeyCommand,
  DeleteAliasCommand,
  GetParametersForImportCommand,
  GetPublicKeyCommand,
  ImportKeyMaterialCommand,
  type KeyMetadata,
  KMSClient,
  ListAliasesCommand,
  ScheduleKeyDeletionCommand,
  SignCommand,
  UpdateAliasCommand,
} from '@aws-sdk/client-kms';
import {
  algorithmInfo,
  EC_OPENSSL_CURVE,
  inputLength,
  KEY_SPECS,
  type KeySpec,
  keyInfo,
  type SigningAlgorithm,
} from '../../crypto/algorithms.js';
import { ecdsaInputForCurve } from '../../crypto/ecdsa-digest.js';
import { parseMlDsaSpki, parseSm2Spki, toPem } from '../../crypto/spki.js';
import { ApiError } from '../../errors.js';
import type {
  CreatedKey,
  ImportParameters,
  KeyMaterialImport,
  KeyStore,
  SignOptions,
  WrappingAlgorithm,
  WrappingKeySpec,
} from '../key-store.js';
import { isNotFound, kmsError, kmsErrorName } from './aws-kms-errors.js';

/** KMS signs RSA PSS with a salt as long as the hash, and only so: why another salt length is refused. */
export function kmsPssSaltRefusal(hashLength: number, asked: number): string {
  return (
    `this key is in AWS KMS, which signs RSA PSS only with a salt as long as the hash (${hashLength} bytes), ` +
    `not ${asked}`
  );
}

export interface AwsKmsKeyStoreOptions {
  /** Default: the SDK's (AWS_REGION, the profile). */
  region?: string;
  /** Default: the SDK's (AWS_ENDPOINT_URL_KMS, AWS_ENDPOINT_URL, else the region's KMS endpoint). */
  endpoint?: string;
  /** Each tenant's alias is `<aliasPrefix><tenant>`, moved to its newest key. Default `alias/signbridge/`. */
  aliasPrefix?: string;
  /** Time one HTTP attempt may take (connect + answer). Default 5000 ms. */
  requestTimeoutMs?: number;
  /** Attempts per call, the first included (the SDK's standard retry strategy with back-off). Default 3. */
  maxAttempts?: number;
  /** /readyz gives KMS this long. Default 2000 ms. */
  pingTimeoutMs?: number;
  /** How long NotFound for a key just created is taken for KMS's eventual consistency and retried. Default 5000 ms. */
  settleMs?: number;
  /** Explicit credentials (tests); default: the SDK's default credential chain. */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
}

/** The minimum KMS allows; a key scheduled for deletion can be rescued with CancelKeyDeletion until then. */
const DELETION_WINDOW_DAYS = 7;
const TAG_TENANT = 'signbridge:tenant';
const TAG_KEY_ID = 'signbridge:key-id';

export class AwsKmsKeyStore implements KeyStore {
  readonly kind = 'aws-kms' as const;
  readonly description: string;
  private readonly client: KMSClient;
  private readonly aliasPrefix: string;
  private readonly pingTimeoutMs: number;
  private readonly settleMs: number;
  /** keyRef -> SPKI PEM: a key's public half never changes. */
  private readonly publicKeys = new Map<string, string>();
  /** keyRef -> when this process created it, while KMS may still answer NotFound for it. */
  private readonly settling = new Map<string, number>();

  constructor(options: AwsKmsKeyStoreOptions = {}) {
    this.client = new KMSClient({
      ...(options.region !== undefined && { region: options.region }),
      ...(options.endpoint !== undefined && { endpoint: options.endpoint }),
      ...(options.credentials !== undefined && { credentials: options.credentials }),
      maxAttempts: options.maxAttempts ?? 3,
      requestHandler: {
        connectionTimeout: options.requestTimeoutMs ?? 5000,
        requestTimeout: options.requestTimeoutMs ?? 5000,
        // Without it the SDK only logs a warning when requestTimeout passes and keeps waiting.
        throwOnRequestTimeout: true,
      },
    });
    this.aliasPrefix = options.aliasPrefix ?? 'alias/signbridge/';
    this.pingTimeoutMs = options.pingTimeoutMs ?? 2000;
    this.settleMs = options.settleMs ?? 5000;
    const where = options.endpoint ?? options.region ?? 'SDK default region/endpoint';
    this.description = `aws-kms:${where}`;
  }

  /** KMS holds every key spec of the contract (SM2 in China Regions only: elsewhere CreateKey refuses it). */
  supports(spec: KeySpec): boolean {
    return KEY_SPECS.includes(spec);
  }

  /**
   * CreateKey (SIGN_VERIFY, tagged with tenant and key id), then the tenant's alias moved to it. The keyRef is
   * the key's ARN, never the alias, so older key versions keep signing after a rotation moved the alias. The
   * tenant is the label's part before the last '/' (labels are `<tenant>/<keyId>`, TenantKeys.newKey in
   * src/signing/tenant-keys.ts).
   */
  async createKey(spec: KeySpec, label: string): Promise<CreatedKey> {
    const metadata = await this.newKmsKey(spec, label, 'AWS_KMS');
    const keyRef = metadata.Arn ?? (metadata.KeyId as string);
    try {
      const publicKeyPem = await this.getPublicKey(keyRef, spec);
      await this.moveAlias(tenantOfLabel(label), keyRef);
      return { keyRef, publicKeyPem };
    } catch (err) {
      // Nothing refers to the new key yet: schedule its deletion rather than leave an orphan behind.
      await this.scheduleDeletion(keyRef).catch(() => undefined);
      throw err;
    }
  }

  /** The key's SubjectPublicKeyInfo (PEM) from GetPublicKey, checked against `spec`; cached. */
  async getPublicKey(keyRef: string, spec: KeySpec): Promise<string> {
    const cached = this.publicKeys.get(keyRef);
    if (cached) return cached;
    const out = await this.settled(keyRef, 'GetPublicKey', () =>
      this.client.send(new GetPublicKeyCommand({ KeyId: keyRef })),
    );
    const der = Buffer.from(out.PublicKey ?? []);
    const reported = out.KeySpec ?? out.CustomerMasterKeySpec;
    if (der.length === 0 || (reported !== undefined && reported !== spec) || !spkiMatches(spec, der)) {
      throw new Error(`KMS returned a public key for ${keyRef} that is not a ${spec} key (KMS says ${reported})`);
    }
    const pem = toPem(der);
    this.publicKeys.set(keyRef, pem);
    return pem;
  }

  /**
   * Sign with MessageType DIGEST (RSA, EC, SM2's e = SM3(Z_A || M)) or EXTERNAL_MU (ML-DSA's μ). KMS accepts an EC
   * key only its curve's algorithm and digest length, so an ECDSA digest of another length is handed over as the
   * same integer at the curve's length (ecdsa-digest.ts); the signature is the one the caller's digest expects.
   */
  async sign(
    keyRef: string,
    spec: KeySpec,
    algorithm: SigningAlgorithm,
    digest: Buffer,
    options: SignOptions = {},
  ): Promise<Buffer> {
    if (digest.length !== inputLength(algorithm)) {
      throw new ApiError(
        'invalid_hash',
        `${algorithm} signs a ${inputLength(algorithm)}-byte input, got ${digest.length}`,
      );
    }
    if (options.pssSaltLength !== undefined && options.pssSaltLength !== inputLength(algorithm)) {
      throw new ApiError('invalid_request', kmsPssSaltRefusal(inputLength(algorithm), options.pssSaltLength));
    }
    const info = keyInfo(spec);
    let message = digest;
    let kmsAlgorithm: string = algorithm;
    let messageType: 'DIGEST' | 'EXTERNAL_MU' = 'DIGEST';
    if (info.family === 'ec') {
      if (algorithmInfo(algorithm).family !== 'ec') throw new Error(`${algorithm} cannot sign with a ${spec} key`);
      message = ecdsaInputForCurve(info.curve, digest);
      kmsAlgorithm = `ECDSA_SHA_${info.hash.slice(3)}`;
    } else if (info.family === 'ml-dsa') {
      messageType = 'EXTERNAL_MU';
    }
    const out = await this.settled(keyRef, 'Sign', () =>
      this.client.send(
        new SignCommand({
          KeyId: keyRef,
          Message: message,
          MessageType: messageType,
          SigningAlgorithm: kmsAlgorithm as SigningAlgorithm,
        }),
      ),
    );
    if (!out.Signature || out.Signature.length === 0) throw new Error(`KMS returned no signature for ${keyRef}`);
    return Buffer.from(out.Signature);
  }

  /** ScheduleKeyDeletion (7 days, KMS's minimum) and the alias removed if it points at this key; best effort. */
  async destroyKey(keyRef: string): Promise<void> {
    await this.removeAliasesOf(keyRef).catch(() => undefined);
    await this.scheduleDeletion(keyRef);
    this.publicKeys.delete(keyRef);
  }

  /** Credentials and reachability: the cheapest authenticated call there is, bounded by a short timeout. */
  async ping(): Promise<void> {
    await this.call('the readiness check', undefined, () =>
      this.client.send(new ListAliasesCommand({ Limit: 1 }), { abortSignal: AbortSignal.timeout(this.pingTimeoutMs) }),
    );
  }

  /**
   * A key awaiting material (CreateKey with Origin EXTERNAL), or `keyRef` for a reimport, and its import
   * parameters from GetParametersForImport: the wrapping public key and token are KMS's, valid 24 hours.
   */
  async prepareImport(
    spec: KeySpec,
    label: string,
    wrappingAlgorithm: WrappingAlgorithm,
    wrappingKeySpec: WrappingKeySpec,
    keyRef?: string,
  ): Promise<ImportParameters> {
    let made: string | undefined;
    if (keyRef === undefined) {
      const metadata = await this.newKmsKey(spec, label, 'EXTERNAL');
      made = metadata.Arn ?? (metadata.KeyId as string);
    }
    const target = keyRef ?? (made as string);
    try {
      const out = await this.settled(target, 'GetParametersForImport', () =>
        this.client.send(
          new GetParametersForImportCommand({
            KeyId: target,
            WrappingAlgorithm: wrappingAlgorithm,
            WrappingKeySpec: wrappingKeySpec,
          }),
        ),
      );
      if (!out.ImportToken || !out.PublicKey || !out.ParametersValidTo) {
        throw new Error(`KMS returned incomplete import parameters for ${target}`);
      }
      return {
        keyRef: out.KeyId ?? target,
        importToken: Buffer.from(out.ImportToken),
        wrappingPublicKey: Buffer.from(out.PublicKey),
        validTo: out.ParametersValidTo,
      };
    } catch (err) {
      if (made !== undefined) await this.scheduleDeletion(made).catch(() => undefined);
      if (kmsErrorName(err) === 'UnsupportedOperationException') {
        // KMS's answer for a key whose origin is not EXTERNAL, and for a wrapping choice the region does not offer.
        const wrapping = /wrapping/i.test(describe(err));
        throw new ApiError(
          wrapping ? 'wrapping_algorithm_not_allowed' : 'key_not_usable',
          `AWS KMS refused import parameters for ${target}: ${describe(err)}`,
        );
      }
      throw err;
    }
  }

  /** ImportKeyMaterial with the client's blob untouched; resolves with the key's public half (GetPublicKey). */
  async importKeyMaterial(request: KeyMaterialImport): Promise<CreatedKey> {
    const { keyRef, expiration } = request;
    await this.call('ImportKeyMaterial', keyRef, () =>
      this.client.send(
        new ImportKeyMaterialCommand({
          KeyId: keyRef,
          ImportToken: request.importToken,
          EncryptedKeyMaterial: request.encryptedKeyMaterial,
          ExpirationModel: expiration.model,
          ...(expiration.model === 'KEY_MATERIAL_EXPIRES' && { ValidTo: expiration.validTo }),
        }),
      ),
    );
    return { keyRef, publicKeyPem: await this.getPublicKey(keyRef, request.spec) };
  }

  async close(): Promise<void> {
    this.client.destroy();
  }

  private async newKmsKey(spec: KeySpec, label: string, origin: 'AWS_KMS' | 'EXTERNAL'): Promise<KeyMetadata> {
    const tenant = tenantOfLabel(label);
    const out = await this.call('CreateKey', undefined, () =>
      this.client
        .send(
          new CreateKeyCommand({
            KeyUsage: 'SIGN_VERIFY',
            KeySpec: spec,
            Origin: origin,
            Description: `signbridge ${label}`,
            Tags: [
              { TagKey: TAG_TENANT, TagValue: tenant },
              { TagKey: TAG_KEY_ID, TagValue: label.slice(tenant.length + 1) },
            ],
          }),
        )
        .catch((err: unknown) => {
          // SM2 exists only in KMS's China Regions; elsewhere CreateKey refuses the spec.
          if (!['UnsupportedOperationException', 'ValidationException'].includes(kmsErrorName(err))) throw err;
          throw new ApiError('unsupported_key_spec', `AWS KMS here does not make ${spec} keys: ${describe(err)}`);
        }),
    );
    const metadata = out.KeyMetadata;
    if (!metadata?.KeyId) throw new Error('KMS CreateKey answered without a key id');
    this.settling.set(metadata.Arn ?? metadata.KeyId, Date.now());
    return metadata;
  }

  /** Points `<aliasPrefix><tenant>` at `keyRef`: CreateAlias the first time, UpdateAlias on a rotation. */
  private async moveAlias(tenant: string, keyRef: string): Promise<void> {
    const AliasName = this.aliasFor(tenant);
    await this.settled(keyRef, 'CreateAlias', async () => {
      try {
        await this.client.send(new CreateAliasCommand({ AliasName, TargetKeyId: keyRef }));
      } catch (err) {
        if (kmsErrorName(err) !== 'AlreadyExistsException') throw err;
        await this.client.send(new UpdateAliasCommand({ AliasName, TargetKeyId: keyRef }));
      }
    });
  }

  /**
   * Alias names take letters, digits, '/', '_' and '-'; a tenant id may also hold '.', written as '/' (which no
   * tenant id holds, so two tenants never share an alias): tenant acme.prod has alias/signbridge/acme/prod.
   */
  aliasFor(tenant: string): string {
    return `${this.aliasPrefix}${tenant.replaceAll('.', '/')}`;
  }

  private async removeAliasesOf(keyRef: string): Promise<void> {
    const out = await this.call('ListAliases', keyRef, () =>
      this.client.send(new ListAliasesCommand({ KeyId: keyRef })),
    );
    for (const alias of out.Aliases ?? []) {
      if (!alias.AliasName?.startsWith(this.aliasPrefix)) continue;
      await this.call('DeleteAlias', undefined, () =>
        this.client.send(new DeleteAliasCommand({ AliasName: alias.AliasName })),
      );
    }
  }

  private async scheduleDeletion(keyRef: string): Promise<void> {
    await this.call('ScheduleKeyDeletion', undefined, () =>
      this.client.send(new ScheduleKeyDeletionCommand({ KeyId: keyRef, PendingWindowInDays: DELETION_WINDOW_DAYS })),
    );
    this.settling.delete(keyRef);
  }

  /**
   * `op` on a key; right after this process created it, KMS may not know it everywhere yet (eventual
   * consistency): NotFound is retried with back-off until `settleMs` after the creation.
   */
  private async settled<T>(keyRef: string, what: string, op: () => Promise<T>): Promise<T> {
    let delay = 50;
    for (;;) {
      try {
        return await op();
      } catch (err) {
        const created = this.settling.get(keyRef);
        const young = created !== undefined && Date.now() - created < this.settleMs;
        if (!isNotFound(err) || !young) throw kmsError(err, what, keyRef);
        await new Promise((resolve) => setTimeout(resolve, delay));
        delay = Math.min(delay * 2, 1000);
      } finally {
        this.forgetSettledKeys();
      }
    }
  }

  private forgetSettledKeys(): void {
    const now = Date.now();
    for (const [keyRef, created] of this.settling) if (now - created >= this.settleMs) this.settling.delete(keyRef);
  }

  private async call<T>(what: string, keyRef: string | undefined, op: () => Promise<T>): Promise<T> {
    try {
      return await op();
    } catch (err) {
      throw kmsError(err, what, keyRef);
    }
  }
}

/** Labels are `<tenant>/<keyId>` (TenantKeys.newKey in src/signing/tenant-keys.ts); tenant ids never hold '/'. */
export function tenantOfLabel(label: string): string {
  const slash = label.lastIndexOf('/');
  if (slash <= 0) throw new Error(`key label "${label}" is not <tenant>/<key id>`);
  return label.slice(0, slash);
}

/** The SPKI really is a key of `spec` (a stand-in that makes an RSA key for SM2 must not pass). */
function spkiMatches(spec: KeySpec, der: Buffer): boolean {
  const info = keyInfo(spec);
  if (info.family === 'ml-dsa') return parseMlDsaSpki(der)?.spec === spec;
  if (info.family === 'sm2') return parseSm2Spki(der) !== undefined;
  try {
    const details = createPublicKey({ key: der, format: 'der', type: 'spki' }).asymmetricKeyDetails;
    return info.family === 'rsa'
      ? details?.modulusLength === info.bits
      : info.family === 'ec'
        ? details?.namedCurve === EC_OPENSSL_CURVE[info.curve]
        : createPublicKey({ key: der, format: 'der', type: 'spki' }).asymmetricKeyType === 'ed25519';
  } catch {
    return false;
  }
}

function describe(err: unknown): string {
  return `${kmsErrorName(err)}: ${(err as Error)?.message ?? ''}`;
}
