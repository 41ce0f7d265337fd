// The trial signer's limit (the config file's `trial`; docs/configuration.md): signatures per client address and window.
import { type Static, Type } from '@sinclair/typebox';

export const TrialConfigSchema = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean()),
    maxPerWindow: Type.Optional(Type.Integer({ minimum: 1 })),
    windowSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 7 * 24 * 3600 })),
  },
  { additionalProperties: false },
);
export type TrialConfigFile = Static<typeof TrialConfigSchema>;

export interface TrialSettings {
  enabled: boolean;
  max: number;
  windowMs: number;
}

/** The file's keys as it spells them, with what applies when one is not set. */
export const TRIAL_DEFAULTS = { enabled: true, maxPerWindow: 10, windowSeconds: 3600 };

export function trialSetting(file: TrialConfigFile | undefined): TrialSettings {
  return {
    enabled: file?.enabled ?? TRIAL_DEFAULTS.enabled,
    max: file?.maxPerWindow ?? TRIAL_DEFAULTS.maxPerWindow,
    windowMs: (file?.windowSeconds ?? TRIAL_DEFAULTS.windowSeconds) * 1000,
  };
}
