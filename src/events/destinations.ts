// Sends one claimed delivery where its subscription points: a Standard Webhooks receiver (signed), a Slack or Teams
// incoming webhook (a readable message with the console link), or mail. Every HTTP destination goes through the
// same SSRF-safe sender (webhook-sender.ts), on the subscription's kept-alive connections (receiver-connections.ts);
// mail goes to the operator's SMTP server (mailer.ts).
//
// Mail recipients: a signature waiting for a decision (signature.pending, signature.reminder) goes to the people
// who can decide it, the tenant's approvers (or security reviewers for that stage) with an e-mail address the IdP
// verified; with none, to the subscription's address. Every other event goes to the subscription's address.
import type { DeliveryClaim, SubscriptionRecord } from '../store/events/event-store.js';
import type { EventRecord } from '../store/records/event-kinds.js';
import type { Store } from '../store/store.js';
import type { DeliveryResult } from './delivery-outcome.js';
import { type Deliver, perSubscriptionFromLog } from './dispatcher.js';
import { mailMessage } from './formats/mail-message.js';
import { slackMessage } from './formats/slack.js';
import { standardWebhookRequest } from './formats/standard-webhooks.js';
import { teamsMessage } from './formats/teams.js';
import { createMailer, type Mailer } from './mailer.js';
import { type ReceiverConnectionBounds, ReceiverConnections } from './receiver-connections.js';
import type { SmtpSettings } from './smtp-settings.js';
import { sendWebhook, type WebhookSendSettings } from './webhook-sender.js';
import type { WebhookSettings } from './webhook-settings.js';

/** Who decides a request in `status`: the role a mail about it goes to. */
function decidingRole(status: unknown): 'approver' | 'security_reviewer' {
  return status === 'pending_security_review' ? 'security_reviewer' : 'approver';
}

async function mailRecipients(store: Store, claim: DeliveryClaim): Promise<string[]> {
  const fallback = claim.subscription.url.slice('mailto:'.length);
  const { event } = claim;
  if (event.type !== 'signature.pending' && event.type !== 'signature.reminder') return [fallback];
  if (event.tenantId === null) return [fallback];
  const role = decidingRole(event.data.status);
  const memberships = await store.people.listMemberships({ tenantId: event.tenantId });
  const addresses = new Set<string>();
  for (const m of memberships) {
    // (A membership still waiting for its person's first sign-in has no verified address yet.)
    if (m.role !== role || m.personId === null) continue;
    const person = await store.people.getPerson(m.personId);
    if (person?.email && person.emailVerified && !person.disabledAt) addresses.add(person.email);
  }
  return addresses.size > 0 ? [...addresses].sort() : [fallback];
}

export interface DestinationSettings {
  webhooks: WebhookSendSettings;
  /** Absent: no SMTP server configured; mail subscriptions fail with a message that says so. */
  mailer?: Mailer;
  now?: () => Date;
  /** Each subscription's kept-alive connections to its receiver (defaults: 64, closed after 4 s unused). */
  connections?: ReceiverConnectionBounds;
}

/** The dispatcher's Deliver for this service's configuration. */
export function destinationsFor(
  store: Store,
  config: { webhooks: WebhookSettings; smtp?: SmtpSettings; events?: { concurrencyPerSubscription: number } },
): Deliver {
  return destinations(store, {
    webhooks: config.webhooks,
    ...(config.smtp && { mailer: createMailer(config.smtp) }),
    // As many connections per subscription as it may have attempts in flight.
    ...(config.events && {
      connections: { maxSockets: perSubscriptionFromLog(config.events.concurrencyPerSubscription) },
    }),
  });
}

export function destinations(store: Store, settings: DestinationSettings): Deliver {
  const now = settings.now ?? (() => new Date());
  const receivers = new ReceiverConnections(settings.webhooks, settings.connections);
  const deliver: Deliver = async (claim: DeliveryClaim): Promise<DeliveryResult> => {
    const { subscription, event } = claim;
    const connections = receivers.for(subscription);
    try {
      switch (subscription.format) {
        case 'standard': {
          if (!subscription.secret) return { outcome: 'failed', error: 'the subscription has no signing secret' };
          return await sendWebhook(
            subscription.url,
            standardWebhookRequest(event, subscription.secret, now()),
            settings.webhooks,
            connections,
          );
        }
        case 'slack':
          return await sendWebhook(
            subscription.url,
            chatRequest(event, slackMessage(event)),
            settings.webhooks,
            connections,
          );
        case 'teams':
          return await sendWebhook(
            subscription.url,
            chatRequest(event, teamsMessage(event)),
            settings.webhooks,
            connections,
          );
        case 'email': {
          if (!settings.mailer) {
            return {
              outcome: 'retry',
              error: 'no SMTP server is configured (smtp in the configuration); mail waits until one is',
            };
          }
          const to = await mailRecipients(store, claim);
          return await settings.mailer.send({ to, ...mailMessage(event) });
        }
      }
    } catch (err) {
      // A bug or an unexpected fault: retried like a network error, and logged by the dispatcher.
      return { outcome: 'retry', error: `could not send: ${(err as Error).message}` };
    }
  };
  deliver.keepConnections = (active) => receivers.keepOnly(active);
  return deliver;
}

/** Chat services take plain JSON; the event id still travels for whoever reads the receiver's logs. */
function chatRequest(event: EventRecord, message: unknown) {
  return { headers: { 'webhook-id': event.id }, body: JSON.stringify(message) };
}

/** A claim for `admin webhook test`: a webhook.test event that is never stored, with no lease behind it. */
export function testEvent(subscription: SubscriptionRecord, by: string): DeliveryClaim {
  const at = new Date().toISOString();
  return {
    event: {
      id: `evt_test${Date.now().toString(36)}`,
      seq: 0,
      tenantId: subscription.tenantId,
      type: 'webhook.test',
      timestamp: at,
      data: { tenant_id: subscription.tenantId, subscription_id: subscription.id, by },
    },
    subscription,
    attempts: 1,
    owner: 'test',
    createdAt: at,
  };
}
