// The CI token exchange's settings (the config file's `workload`, SIGNBRIDGE_WORKLOAD_ALLOW,
// SIGNBRIDGE_WORKLOAD_CA_FILE; docs/ci.md, docs/configuration.md).
import { type Static, Type } from '@sinclair/typebox';
import { allowSetting, caFileSetting } from '../../net/outbound-settings.js';

/** The environment variables the workload settings read. */
export const WORKLOAD_ENV = ['SIGNBRIDGE_WORKLOAD_ALLOW', 'SIGNBRIDGE_WORKLOAD_CA_FILE'] as const;

/** The CI token exchange (docs/ci.md, docs/configuration.md). */
export const WorkloadConfigSchema = Type.Object(
  {
    allow: Type.Optional(Type.Union([Type.Array(Type.String({ minLength: 1 })), Type.String()])),
    caFile: Type.Optional(Type.String({ minLength: 1 })),
    maxTokenAgeSeconds: Type.Optional(Type.Integer({ minimum: 60, maximum: 86_400 })),
    clockToleranceSeconds: Type.Optional(Type.Integer({ minimum: 0, maximum: 300 })),
  },
  { additionalProperties: false },
);
export type WorkloadConfigFile = Static<typeof WorkloadConfigSchema>;

export interface WorkloadSettings {
  /** Issuer hosts or CIDRs that may resolve to loopback/private/link-local addresses. */
  allow: string[];
  /** Extra PEM trust anchors for issuers (workload.caFile's contents). */
  caPem?: string;
  maxTokenAgeSeconds: number;
  clockToleranceSeconds: number;
}

/** The file's keys as it spells them, with what applies when one is not set. */
export const WORKLOAD_DEFAULTS = { maxTokenAgeSeconds: 3600, clockToleranceSeconds: 60 };

/**
 * workload.* with SIGNBRIDGE_WORKLOAD_ALLOW (comma list) and SIGNBRIDGE_WORKLOAD_CA_FILE over the file. The CA file
 * is read now: a missing or unreadable file stops the start instead of failing every exchange later.
 */
export function workloadSetting(file: WorkloadConfigFile | undefined, env: NodeJS.ProcessEnv): WorkloadSettings {
  const allow = allowSetting(env.SIGNBRIDGE_WORKLOAD_ALLOW ?? file?.allow, 'workload.allow');
  const caPem = caFileSetting(env.SIGNBRIDGE_WORKLOAD_CA_FILE || file?.caFile, 'workload.caFile');
  return {
    allow,
    ...(caPem !== undefined && { caPem }),
    maxTokenAgeSeconds: file?.maxTokenAgeSeconds ?? WORKLOAD_DEFAULTS.maxTokenAgeSeconds,
    clockToleranceSeconds: file?.clockToleranceSeconds ?? WORKLOAD_DEFAULTS.clockToleranceSeconds,
  };
}
