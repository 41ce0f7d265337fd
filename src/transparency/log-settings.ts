// The transparency log's settings (the config file's `log`; docs/transparency.md, docs/configuration.md).
import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../config-error.js';
import { LOG_DEFAULTS, type LogSettings } from './log-service.js';
import { validKeyName } from './verify/note.js';
import { MAX_WITNESSES, WitnessConfigSchema, witnessSettings } from './witnesses/witness-settings.js';

/** The transparency log over the audit entries (docs/transparency.md, docs/configuration.md). */
export const LogConfigSchema = Type.Object(
  {
    checkpointEveryEntries: Type.Optional(Type.Integer({ minimum: 1, maximum: 10_000_000 })),
    checkpointEverySeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400 })),
    origin: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
    public: Type.Optional(Type.Boolean()),
    integrateEveryMs: Type.Optional(Type.Integer({ minimum: 0, maximum: 60_000 })),
    witnesses: Type.Optional(Type.Array(WitnessConfigSchema, { maxItems: MAX_WITNESSES })),
  },
  { additionalProperties: false },
);
export type LogConfigFile = Static<typeof LogConfigSchema>;

/** log.* with the defaults of LOG_DEFAULTS; the origin must be a signed-note key name (no spaces, no '+'). */
export function logSetting(file: LogConfigFile | undefined): LogSettings {
  if (file?.origin !== undefined && !validKeyName(file.origin)) {
    throw new ConfigError(`log.origin must have no spaces, control characters or '+', got "${file.origin}"`);
  }
  return {
    checkpointEveryEntries: file?.checkpointEveryEntries ?? LOG_DEFAULTS.checkpointEveryEntries,
    checkpointEverySeconds: file?.checkpointEverySeconds ?? LOG_DEFAULTS.checkpointEverySeconds,
    public: file?.public ?? LOG_DEFAULTS.public,
    intervalMs: file?.integrateEveryMs ?? LOG_DEFAULTS.intervalMs,
    ...(file?.origin !== undefined && { origin: file.origin }),
    ...(file?.witnesses !== undefined && { witnesses: witnessSettings(file.witnesses) }),
  };
}
