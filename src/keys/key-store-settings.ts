// Which key store holds the keys (the config file's `keyStore`, SIGNBRIDGE_KEY_STORE, SIGNBRIDGE_PKCS11_PIN;
// docs/configuration.md, docs/aws-kms.md): the embedded SoftHSM token, another PKCS#11 token, or AWS KMS.
import { readFileSync } from 'node:fs';
import { type Static, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { ConfigError } from '../config-error.js';

/** The environment variables the key store reads (SIGNBRIDGE_SOFTHSM_MODULE in softhsm.ts, findSoftHsmModule). */
export const KEY_STORE_ENV = ['SIGNBRIDGE_KEY_STORE', 'SIGNBRIDGE_PKCS11_PIN', 'SIGNBRIDGE_SOFTHSM_MODULE'] as const;

const Pkcs11KeyStoreConfig = Type.Object(
  {
    type: Type.Literal('pkcs11'),
    module: Type.String({ minLength: 1, description: 'path of the PKCS#11 module' }),
    tokenLabel: Type.String({ minLength: 1 }),
    pin: Type.Optional(Type.String({ minLength: 1 })),
    pinFile: Type.Optional(Type.String({ minLength: 1 })),
    sessions: Type.Optional(Type.Integer({ minimum: 1, maximum: 256 })),
    signThreads: Type.Optional(Type.Integer({ minimum: 0, maximum: 64 })),
    inlineSignBelowMs: Type.Optional(Type.Number({ minimum: 0, maximum: 100 })),
  },
  { additionalProperties: false },
);

const SoftHsmKeyStoreConfig = Type.Object(
  {
    type: Type.Literal('softhsm'),
    sessions: Type.Optional(Type.Integer({ minimum: 1, maximum: 256 })),
    signThreads: Type.Optional(Type.Integer({ minimum: 0, maximum: 64 })),
    inlineSignBelowMs: Type.Optional(Type.Number({ minimum: 0, maximum: 100 })),
  },
  { additionalProperties: false },
);

/**
 * Keys in AWS KMS (docs/aws-kms.md). Region, endpoint and credentials come from the SDK's own settings
 * (AWS_REGION, AWS_ENDPOINT_URL_KMS / AWS_ENDPOINT_URL, the default credential chain, AWS_PROFILE) unless given.
 * `legacy`: a PKCS#11 key store that holds keys made before the move to KMS; they keep signing from it.
 */
const AwsKmsKeyStoreConfig = Type.Object(
  {
    type: Type.Literal('aws-kms'),
    region: Type.Optional(Type.String({ minLength: 1 })),
    endpoint: Type.Optional(Type.String({ pattern: '^https?://' })),
    aliasPrefix: Type.Optional(Type.String({ pattern: '^alias/[a-zA-Z0-9/_-]*$', maxLength: 200 })),
    requestTimeoutMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 120_000 })),
    maxAttempts: Type.Optional(Type.Integer({ minimum: 1, maximum: 10 })),
    legacy: Type.Optional(Type.Union([SoftHsmKeyStoreConfig, Pkcs11KeyStoreConfig])),
  },
  { additionalProperties: false },
);

/** The config file's `keyStore` block. */
export const KeyStoreConfigSchema = Type.Union([SoftHsmKeyStoreConfig, Pkcs11KeyStoreConfig, AwsKmsKeyStoreConfig]);
export type KeyStoreConfigFile = Static<typeof KeyStoreConfigSchema>;

/** The embedded SoftHSM token, or another PKCS#11 token with its PIN resolved. */
export type Pkcs11Setting =
  | Static<typeof SoftHsmKeyStoreConfig>
  | (Static<typeof Pkcs11KeyStoreConfig> & { pin: string });
export type AwsKmsSetting = Omit<Static<typeof AwsKmsKeyStoreConfig>, 'legacy'> & { legacy?: Pkcs11Setting };
export type KeyStoreSetting = Pkcs11Setting | AwsKmsSetting;

/** The keyStore block checked against the variant its `type` names, so the error names the setting, not "union". */
export function keyStoreError(block: unknown): string | undefined {
  const type = (block as { type?: unknown } | null)?.type;
  const variant = [SoftHsmKeyStoreConfig, Pkcs11KeyStoreConfig, AwsKmsKeyStoreConfig].find(
    (v) => v.properties.type.const === type,
  );
  if (!variant) return '/keyStore/type must be one of softhsm, pkcs11, aws-kms';
  const error = [...Value.Errors(variant, block)][0];
  return error && `/keyStore${error.path} ${error.message}`;
}

/**
 * The file's `keyStore`, unless SIGNBRIDGE_KEY_STORE names another type: `aws-kms` moves a deployment to KMS (a
 * PKCS#11 block in the file stays behind it as the legacy store holding older keys), `softhsm` the embedded token,
 * `pkcs11` the file's PKCS#11 block.
 */
export function keyStoreSetting(file: KeyStoreConfigFile | undefined, env: NodeJS.ProcessEnv): KeyStoreSetting {
  const wanted = env.SIGNBRIDGE_KEY_STORE;
  if (wanted === undefined || wanted === '' || wanted === file?.type) {
    if (file?.type === 'aws-kms') {
      const { legacy, ...kms } = file;
      return { ...kms, ...(legacy && { legacy: pkcs11Setting(legacy, env, 'keyStore.legacy') }) };
    }
    return file ? pkcs11Setting(file, env, 'keyStore') : { type: 'softhsm' };
  }
  if (wanted === 'aws-kms') {
    return {
      type: 'aws-kms',
      ...(file && file.type !== 'aws-kms' && { legacy: pkcs11Setting(file, env, 'keyStore') }),
    };
  }
  if (wanted === 'softhsm') return { type: 'softhsm' };
  const legacy = file?.type === 'aws-kms' ? file.legacy : undefined;
  if (wanted === 'pkcs11' && legacy?.type === 'pkcs11') return pkcs11Setting(legacy, env, 'keyStore.legacy');
  throw new ConfigError(
    wanted === 'pkcs11'
      ? 'SIGNBRIDGE_KEY_STORE=pkcs11 needs a keyStore block of type pkcs11 in the config file (module, tokenLabel)'
      : `SIGNBRIDGE_KEY_STORE must be aws-kms, softhsm or pkcs11, got "${wanted}"`,
  );
}

function pkcs11Setting(
  block: Exclude<KeyStoreConfigFile, { type: 'aws-kms' }>,
  env: NodeJS.ProcessEnv,
  where: string,
): Pkcs11Setting {
  if (block.type === 'softhsm') return block;
  const { pinFile } = block;
  const pin = block.pin ?? (pinFile ? readFileSync(pinFile, 'utf8').trim() : undefined) ?? env.SIGNBRIDGE_PKCS11_PIN;
  if (!pin) throw new ConfigError(`${where}.type pkcs11 needs pin, pinFile or SIGNBRIDGE_PKCS11_PIN`);
  return { ...block, pin };
}
