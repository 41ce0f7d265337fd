// A tenant's event subscriptions (docs/events.md, "Subscriptions"): checked, saved and audited alike from the CLI
// (`signbridge admin webhook`) and the console. The destination URL is checked when the subscription is made (the
// same rules apply again at every send: src/events/webhook-sender.ts).
import { randomBytes } from 'node:crypto';
import { SUBSCRIPTION_FORMATS, type SubscriptionFormat, type SubscriptionRecord } from '../store/events/event-store.js';
import { EVENT_KINDS, type EventKind, isEventKind } from '../store/records/event-kinds.js';
import type { Store } from '../store/store.js';
import { newWebhookSecret } from './formats/standard-webhooks.js';

/** Bad input: nothing was saved; the message says what to change. */
export class SubscriptionInvalid extends Error {}
export class SubscriptionNotFound extends Error {}

export interface NewSubscription {
  tenantId: string;
  url: string;
  format: string;
  /** Empty: every kind. */
  eventKinds: readonly string[];
}

export interface SubscriptionChanger {
  actor: string;
  via: 'cli' | 'console';
  now?: Date;
}

/** Checks a webhook or chat URL for use: undefined when fine, else why not (webhook-sender.ts's rules). */
export type UrlCheck = (url: string) => Promise<string | undefined>;

/** One address, as an operator or tenant admin would type it; the SMTP server is the judge of the rest. */
const MAIL_ADDRESS = /^[^\s@<>(),;:"[\]\\]{1,64}@[A-Za-z0-9.-]{1,253}\.[A-Za-z]{2,63}$/;

/**
 * A subscription's URL as shown, listed and audited. Slack's and Teams' incoming-webhook URLs are their own
 * credential (the path is the secret), and other receivers put tokens in paths and queries too: only the scheme,
 * host, port and first path segment are shown, the rest as "/…". The whole URL is kept for sending, nowhere else.
 */
export function displayUrl(url: string): string {
  if (url.startsWith('mailto:')) return url;
  if (!URL.canParse(url)) return '(not a URL)';
  const parsed = new URL(url);
  const segments = parsed.pathname.split('/').filter(Boolean);
  const hidden = segments.length > 1 || parsed.search !== '' || parsed.hash !== '';
  return `${parsed.origin}${segments[0] ? `/${segments[0]}` : ''}${hidden ? '/…' : ''}`;
}

/** A subscription as shown (CLI list, console): never its secret, nor its URL's secret part (displayUrl). */
export function subscriptionView(s: SubscriptionRecord): Record<string, unknown> {
  return {
    id: s.id,
    tenant_id: s.tenantId,
    url: displayUrl(s.url),
    format: s.format,
    events: s.eventKinds ?? 'all',
    state: s.pausedAt ? 'paused' : 'active',
    // next_probe_at: when the dispatcher next tries one delivery, to resume it if the receiver answers; null: it
    // waits for a person (after 410 Gone).
    ...(s.pausedAt && { paused_at: s.pausedAt, pause_reason: s.pauseReason, next_probe_at: s.nextProbeAt ?? null }),
    last_delivered_at: s.lastDeliveredAt,
    ...(s.lastError && { last_error: s.lastError, last_error_at: s.lastErrorAt }),
    created_at: s.createdAt,
    created_by: s.createdBy,
  };
}

export async function addSubscription(
  store: Store,
  input: NewSubscription,
  by: SubscriptionChanger,
  checkUrl: UrlCheck,
): Promise<{ subscription: SubscriptionRecord; secret: string | null }> {
  if (!(await store.tenants.get(input.tenantId))) throw new SubscriptionInvalid(`no tenant ${input.tenantId}`);
  if (!(SUBSCRIPTION_FORMATS as readonly string[]).includes(input.format)) {
    throw new SubscriptionInvalid(`the format must be one of ${SUBSCRIPTION_FORMATS.join(', ')}, not ${input.format}`);
  }
  const format = input.format as SubscriptionFormat;
  const unknown = input.eventKinds.filter((k) => !isEventKind(k));
  if (unknown.length > 0) {
    throw new SubscriptionInvalid(`unknown event kind ${unknown.join(', ')}; the kinds are ${EVENT_KINDS.join(', ')}`);
  }
  const url = input.url.trim();
  if (format === 'email') {
    const address = url.startsWith('mailto:') ? url.slice('mailto:'.length) : '';
    if (!MAIL_ADDRESS.test(address)) {
      throw new SubscriptionInvalid(`a mail subscription's URL is mailto:ADDRESS with one address, not ${url}`);
    }
  } else {
    if (url.startsWith('mailto:')) throw new SubscriptionInvalid('a mailto: URL goes with the format email');
    const problem = await checkUrl(url);
    if (problem !== undefined) throw new SubscriptionInvalid(problem);
  }
  const at = (by.now ?? new Date()).toISOString();
  const secret = format === 'standard' ? newWebhookSecret() : null;
  const kinds = input.eventKinds.length === 0 ? null : ([...new Set(input.eventKinds)] as EventKind[]);
  const subscription: SubscriptionRecord = {
    id: `wh_${randomBytes(8).toString('hex')}`,
    tenantId: input.tenantId,
    url,
    format,
    eventKinds: kinds,
    secret,
    createdAt: at,
    createdBy: by.actor,
    pausedAt: null,
    pauseReason: null,
    lastError: null,
    lastErrorAt: null,
    lastDeliveredAt: null,
    failuresInARow: 0,
  };
  await store.events.addSubscription(subscription);
  await store.audit.append({
    at,
    tenantId: subscription.tenantId,
    actor: by.actor,
    action: 'webhook_subscription',
    outcome: 'added',
    details: { subscription_id: subscription.id, url: displayUrl(url), format, events: kinds ?? 'all', via: by.via },
  });
  return { subscription, secret };
}

/** With `tenantId` (the console acts for one tenant) another tenant's subscription is answered as not found. */
async function existing(store: Store, id: string, tenantId?: string): Promise<SubscriptionRecord> {
  const found = await store.events.getSubscription(id);
  if (!found || (tenantId !== undefined && found.tenantId !== tenantId)) {
    throw new SubscriptionNotFound(tenantId ? `${tenantId} has no subscription ${id}` : `no subscription ${id}`);
  }
  return found;
}

export async function removeSubscription(
  store: Store,
  id: string,
  by: SubscriptionChanger & { tenantId?: string },
): Promise<SubscriptionRecord> {
  const found = await existing(store, id, by.tenantId);
  if (!(await store.events.removeSubscription(id))) throw new SubscriptionNotFound(`no subscription ${id}`);
  await store.audit.append({
    at: (by.now ?? new Date()).toISOString(),
    tenantId: found.tenantId,
    actor: by.actor,
    action: 'webhook_subscription',
    outcome: 'removed',
    details: { subscription_id: id, url: displayUrl(found.url), via: by.via },
  });
  return found;
}

/** Resumes a paused subscription: what it had still to send goes out now. */
export async function resumeSubscription(
  store: Store,
  id: string,
  by: SubscriptionChanger & { tenantId?: string },
): Promise<SubscriptionRecord> {
  const found = await existing(store, id, by.tenantId);
  const at = (by.now ?? new Date()).toISOString();
  await store.events.resumeSubscription(id, at);
  await store.audit.append({
    at,
    tenantId: found.tenantId,
    actor: by.actor,
    action: 'webhook_subscription',
    outcome: 'resumed',
    details: { subscription_id: id, was_paused: found.pausedAt !== null, via: by.via },
  });
  return (await store.events.getSubscription(id)) ?? found;
}
