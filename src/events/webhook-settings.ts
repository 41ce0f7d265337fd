// Where webhooks may be sent (the config file's `webhooks`, SIGNBRIDGE_WEBHOOK_ALLOW, SIGNBRIDGE_WEBHOOK_CA_FILE;
// docs/configuration.md): the shape webhook-sender.ts takes.
import { type Static, Type } from '@sinclair/typebox';
import { allowSetting, caFileSetting } from '../net/outbound-settings.js';

/** The environment variables the webhook settings read. */
export const WEBHOOKS_ENV = ['SIGNBRIDGE_WEBHOOK_ALLOW', 'SIGNBRIDGE_WEBHOOK_CA_FILE'] as const;

/** Webhook delivery (docs/configuration.md): where subscribers' URLs may point. */
export const WebhooksConfigSchema = Type.Object(
  {
    allow: Type.Optional(Type.Union([Type.Array(Type.String({ minLength: 1 })), Type.String()])),
    caFile: Type.Optional(Type.String({ minLength: 1 })),
    timeoutMs: Type.Optional(Type.Integer({ minimum: 100, maximum: 120_000 })),
  },
  { additionalProperties: false },
);
export type WebhooksConfigFile = Static<typeof WebhooksConfigSchema>;

export interface WebhookSettings {
  /** Hosts or CIDRs that may be http and may resolve to loopback/private/link-local addresses. */
  allow: string[];
  /** Extra PEM trust anchors for receivers (webhooks.caFile's contents). */
  extraCaPem?: string;
  /** Per request (10 s). */
  timeoutMs: number;
}

/** The file's keys as it spells them, with what applies when one is not set. */
export const WEBHOOKS_DEFAULTS = { timeoutMs: 10_000 };

/**
 * webhooks.* with SIGNBRIDGE_WEBHOOK_ALLOW (comma list) and SIGNBRIDGE_WEBHOOK_CA_FILE over the file, checked like
 * workload.*: subscribers' URLs are https to public addresses unless the allow list names them.
 */
export function webhookSetting(file: WebhooksConfigFile | undefined, env: NodeJS.ProcessEnv): WebhookSettings {
  const allow = allowSetting(env.SIGNBRIDGE_WEBHOOK_ALLOW ?? file?.allow, 'webhooks.allow');
  const extraCaPem = caFileSetting(env.SIGNBRIDGE_WEBHOOK_CA_FILE || file?.caFile, 'webhooks.caFile');
  return {
    allow,
    ...(extraCaPem !== undefined && { extraCaPem }),
    timeoutMs: file?.timeoutMs ?? WEBHOOKS_DEFAULTS.timeoutMs,
  };
}
