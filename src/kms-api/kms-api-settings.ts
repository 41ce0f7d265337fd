// The drop-in KMS endpoints (the config file's `kmsApi`; docs/configuration.md, docs/kms-api.md): AWS KMS and STS at
// the service's root path, Vault transit under /v1/<mount>/. They open no access of their own: a call needs an
// AWS-format key, a CI job's token a trust rule admits, or an API key, as every other route does.
import { type Static, Type } from '@sinclair/typebox';

export const KmsApiConfigSchema = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean()),
    /** How long a KMS or Vault call held for approval waits for the decision before it fails. */
    heldWaitSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: 600 })),
    /** Vault transit's mount path (`/v1/<mount>/sign/<name>`). */
    vaultMount: Type.Optional(
      Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9_-]{0,63}(/[A-Za-z0-9][A-Za-z0-9_-]{0,63})*$' }),
    ),
  },
  { additionalProperties: false },
);
export type KmsApiConfigFile = Static<typeof KmsApiConfigSchema>;

export interface KmsApiSettings {
  enabled: boolean;
  heldWaitMs: number;
  vaultMount: string;
}

/**
 * The file's keys as it spells them, with what applies when one is not set. 30 s stays below the AWS SDKs' and
 * Vault clients' default read timeouts (60 s), so the client hears the "held" answer rather than its own timeout.
 */
export const KMS_API_DEFAULTS = { enabled: true, heldWaitSeconds: 30, vaultMount: 'transit' };

export function kmsApiSetting(file: KmsApiConfigFile | undefined): KmsApiSettings {
  return {
    enabled: file?.enabled ?? KMS_API_DEFAULTS.enabled,
    heldWaitMs: (file?.heldWaitSeconds ?? KMS_API_DEFAULTS.heldWaitSeconds) * 1000,
    vaultMount: file?.vaultMount ?? KMS_API_DEFAULTS.vaultMount,
  };
}
