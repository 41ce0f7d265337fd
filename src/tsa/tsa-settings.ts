// The time-stamping authority's settings (the config file's `tsa`, SIGNBRIDGE_TSA_CLOCK_CHECK; docs/tsa.md).
import { BlockList } from 'node:net';
import { type Static, Type } from '@sinclair/typebox';
import { ConfigError } from '../config-error.js';
import { encodeObjectIdentifier } from '../crypto/object-identifier.js';
import { addCidr } from '../net/outbound-request.js';
import { CLOCK_CHECKS, type ClockCheck, type ClockTrustSettings } from './clock-trust.js';

/** The environment variables the TSA settings read. */
export const TSA_ENV = ['SIGNBRIDGE_TSA_CLOCK_CHECK'] as const;

/** A dotted OID (policy identifiers). */
const OID_PATTERN = '^[0-2](\\.(0|[1-9][0-9]*)){1,40}$';

/**
 * The TSA's default policy OID: under 2.25 (ITU-T X.667, an OID from a UUID; no registration needed), fixed for
 * signbridge. An organisation with its own arc sets tsa.policy to the OID its TSA practice statement names.
 */
export const DEFAULT_TSA_POLICY = '2.25.167930482007121870731071573279625541823';

/** The time-stamping authority (docs/tsa.md). */
export const TsaConfigSchema = Type.Object(
  {
    enabled: Type.Optional(Type.Boolean()),
    access: Type.Optional(Type.Union([Type.Literal('anonymous'), Type.Literal('api-key')])),
    allowNetworks: Type.Optional(Type.Union([Type.Array(Type.String({ minLength: 1 })), Type.String()])),
    maxPerWindow: Type.Optional(Type.Integer({ minimum: 1 })),
    windowSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 86_400 })),
    anonymous: Type.Optional(
      Type.Object(
        {
          perAddressPerDay: Type.Optional(Type.Integer({ minimum: 1 })),
          perDay: Type.Optional(Type.Integer({ minimum: 1 })),
        },
        { additionalProperties: false },
      ),
    ),
    policy: Type.Optional(Type.String({ pattern: OID_PATTERN })),
    acceptedPolicies: Type.Optional(Type.Array(Type.String({ pattern: OID_PATTERN }))),
    accuracy: Type.Optional(
      Type.Object(
        {
          seconds: Type.Optional(Type.Integer({ minimum: 0, maximum: 3600 })),
          millis: Type.Optional(Type.Integer({ minimum: 1, maximum: 999 })),
        },
        { additionalProperties: false },
      ),
    ),
    tsaName: Type.Optional(Type.Boolean()),
    clock: Type.Optional(
      Type.Object(
        {
          check: Type.Optional(Type.Union(CLOCK_CHECKS.map((c) => Type.Literal(c)))),
          maxOffsetMs: Type.Optional(Type.Integer({ minimum: 1, maximum: 60_000 })),
          intervalSeconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 3600 })),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);
export type TsaConfigFile = Static<typeof TsaConfigSchema>;

export interface TsaSettings {
  enabled: boolean;
  access: 'anonymous' | 'api-key';
  allowNetworks: string[];
  limit: { max: number; windowMs: number };
  /** Anonymous queries per day (access `anonymous`): per IPv4 address or IPv6 /64, and all together. */
  anonymousQuota: AnonymousQuota;
  policy: string;
  acceptedPolicies: string[];
  accuracy: { seconds?: number; millis?: number };
  tsaName: boolean;
  clock: ClockTrustSettings;
}

export interface AnonymousQuota {
  perAddress: number;
  perDay: number;
}

/** The file's keys as it spells them, with what applies when one is not set. */
export const TSA_DEFAULTS = {
  enabled: true,
  access: 'anonymous' as const,
  maxPerWindow: 600,
  windowSeconds: 60,
  // About 470 bytes of audit log per token: at most some 47 MB a day from anonymous clients.
  'anonymous.perAddressPerDay': 10_000,
  'anonymous.perDay': 100_000,
  tsaName: true,
  'clock.check': 'ntp' as ClockCheck,
  'clock.intervalSeconds': 10,
};

/**
 * tsa.* (docs/tsa.md); SIGNBRIDGE_TSA_CLOCK_CHECK over the file. The clock check defaults to `ntp`: a TSA states
 * the time to the world, so it refuses unless the host shows its clock is synchronised. `database` needs a
 * database server (PostgreSQL).
 */
export function tsaSetting(file: TsaConfigFile | undefined, env: NodeJS.ProcessEnv, onPostgres: boolean): TsaSettings {
  const checkEnv = env.SIGNBRIDGE_TSA_CLOCK_CHECK;
  if (checkEnv !== undefined && !(CLOCK_CHECKS as readonly string[]).includes(checkEnv)) {
    throw new ConfigError(`SIGNBRIDGE_TSA_CLOCK_CHECK must be one of ${CLOCK_CHECKS.join(', ')}, got ${checkEnv}`);
  }
  const check = (checkEnv as ClockCheck | undefined) ?? file?.clock?.check ?? TSA_DEFAULTS['clock.check'];
  if (check === 'database' && !onPostgres) {
    throw new ConfigError("tsa.clock.check database compares with the database server's clock: it needs PostgreSQL");
  }
  const accuracy = file?.accuracy ?? { seconds: 1 };
  const accuracyMs = (accuracy.seconds ?? 0) * 1000 + (accuracy.millis ?? 0);
  if (accuracyMs === 0) throw new ConfigError('tsa.accuracy must state some time (seconds or millis)');
  const maxOffsetMs = file?.clock?.maxOffsetMs ?? Math.min(500, accuracyMs);
  if (maxOffsetMs > accuracyMs) {
    throw new ConfigError(
      `tsa.clock.maxOffsetMs (${maxOffsetMs}) is larger than the accuracy tokens state (${accuracyMs} ms): a token could state a time further off than it says`,
    );
  }
  for (const oid of [file?.policy, ...(file?.acceptedPolicies ?? [])].filter((o) => o !== undefined)) {
    try {
      encodeObjectIdentifier(oid);
    } catch (err) {
      throw new ConfigError(`tsa policy ${(err as Error).message}`);
    }
  }
  return {
    enabled: file?.enabled ?? TSA_DEFAULTS.enabled,
    access: file?.access ?? TSA_DEFAULTS.access,
    allowNetworks: allowNetworkSetting(file?.allowNetworks),
    limit: {
      max: file?.maxPerWindow ?? TSA_DEFAULTS.maxPerWindow,
      windowMs: (file?.windowSeconds ?? TSA_DEFAULTS.windowSeconds) * 1000,
    },
    anonymousQuota: {
      perAddress: file?.anonymous?.perAddressPerDay ?? TSA_DEFAULTS['anonymous.perAddressPerDay'],
      perDay: file?.anonymous?.perDay ?? TSA_DEFAULTS['anonymous.perDay'],
    },
    policy: file?.policy ?? DEFAULT_TSA_POLICY,
    acceptedPolicies: file?.acceptedPolicies ?? [],
    accuracy,
    tsaName: file?.tsaName ?? TSA_DEFAULTS.tsaName,
    clock: {
      check,
      maxOffsetMs,
      intervalMs: (file?.clock?.intervalSeconds ?? TSA_DEFAULTS['clock.intervalSeconds']) * 1000,
    },
  };
}

/** tsa.allowNetworks: IP addresses or CIDRs only (a client is an address; a host name would mean nothing here). */
function allowNetworkSetting(source: string | string[] | undefined): string[] {
  const entries = (typeof source === 'string' ? source.split(',') : (source ?? []))
    .map((entry) => entry.trim())
    .filter((entry) => entry.length > 0);
  const invalid = entries.filter((entry) => !addCidr(new BlockList(), entry));
  if (invalid.length > 0) {
    throw new ConfigError(
      `tsa.allowNetworks: ${invalid.map((e) => JSON.stringify(e)).join(', ')} is not an IP address or a CIDR`,
    );
  }
  return entries;
}
