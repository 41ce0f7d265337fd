// `signbridge admin webhook add|list|remove|resume|test`: a tenant's event subscriptions (docs/events.md), through
// the same service module as the console, so both check, save and audit a subscription alike.
import { userInfo } from 'node:os';
import type { Command } from 'commander';
import type { ServiceConfig } from '../config/config.js';
import { destinationsFor, testEvent } from '../events/destinations.js';
import {
  addSubscription,
  displayUrl,
  removeSubscription,
  resumeSubscription,
  SubscriptionNotFound,
  subscriptionView,
} from '../events/subscription-service.js';
import { checkSubscriptionUrl } from '../events/webhook-sender.js';
import { EVENT_KINDS } from '../store/records/event-kinds.js';
import type { Store } from '../store/store.js';

type StoreFlags = { dataDir?: string; config?: string; database?: string };
type WithStore = <T>(flags: StoreFlags, fn: (store: Store, config: ServiceConfig) => Promise<T>) => Promise<T>;

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

export function registerWebhookCommands(
  admin: Command,
  storeOptions: (cmd: Command) => Command,
  withStore: WithStore,
): void {
  const webhook = admin
    .command('webhook')
    .description("a tenant's event subscriptions: webhooks, Slack, Teams and mail (docs/events.md)");
  const by = () => ({ actor: `cli:${userInfo().username}`, via: 'cli' as const });

  storeOptions(webhook.command('add'))
    .description(
      "subscribe a URL to a tenant's events; prints the subscription id on stdout, and for the standard format " +
        'its signing secret (whsec_...), shown only this once',
    )
    .requiredOption('--tenant <tenant>', 'the tenant whose events are sent')
    .requiredOption('--url <url>', 'https://... (a receiver or a chat incoming webhook), or mailto:ADDRESS for mail')
    .option(
      '--event <kind>',
      `an event kind to send, repeatable (default: all): ${EVENT_KINDS.join(', ')}`,
      collect,
      [],
    )
    .option('--format <format>', 'standard (Standard Webhooks, signed), slack, teams or email', 'standard')
    .action(async (opts: StoreFlags & { tenant: string; url: string; event: string[]; format: string }) => {
      const { subscription, secret } = await withStore(opts, (store, config) =>
        addSubscription(
          store,
          { tenantId: opts.tenant, url: opts.url, format: opts.format, eventKinds: opts.event },
          by(),
          async (url) => {
            const checked = await checkSubscriptionUrl(url, config.webhooks);
            return checked.ok ? undefined : checked.error;
          },
        ),
      );
      process.stderr.write(
        `added subscription ${subscription.id} to ${subscription.tenantId}: ${subscription.eventKinds?.join(', ') ?? 'every event'} as ${subscription.format} to ${displayUrl(subscription.url)}\n`,
      );
      process.stdout.write(`${subscription.id}\n`);
      if (secret) {
        process.stderr.write('its signing secret, shown only now (the receiver checks webhook-signature with it):\n');
        process.stdout.write(`${secret}\n`);
      }
    });

  storeOptions(webhook.command('list'))
    .description("list subscriptions (a tenant's, or all): state, paused and why, last delivery, last error")
    .option('--tenant <tenant>', 'only this tenant')
    .option('--json', 'one JSON array instead of the table')
    .action(async (opts: StoreFlags & { tenant?: string; json?: boolean }) => {
      const subscriptions = await withStore(opts, (store) => store.events.listSubscriptions(opts.tenant));
      if (opts.json) {
        process.stdout.write(`${JSON.stringify(subscriptions.map(subscriptionView), null, 2)}\n`);
        return;
      }
      if (subscriptions.length === 0) {
        process.stderr.write(`no subscriptions${opts.tenant ? ` in ${opts.tenant}` : ''}\n`);
        return;
      }
      process.stdout.write('ID\tTENANT\tFORMAT\tURL\tEVENTS\tSTATE\tLAST DELIVERED\tLAST ERROR\n');
      for (const s of subscriptions) {
        const probe = s.nextProbeAt ? `; probed next at ${s.nextProbeAt}` : '; waits for resume';
        const state = s.pausedAt ? `paused since ${s.pausedAt}: ${s.pauseReason}${probe}` : 'active';
        process.stdout.write(
          `${s.id}\t${s.tenantId}\t${s.format}\t${displayUrl(s.url)}\t${s.eventKinds?.join(',') ?? 'all'}\t${state}\t${s.lastDeliveredAt ?? '-'}\t${s.lastError ? `${s.lastErrorAt} ${s.lastError}` : '-'}\n`,
        );
      }
    });

  storeOptions(webhook.command('remove'))
    .description('remove a subscription, and what it had still to send')
    .argument('<id>', 'the subscription id (wh_ and 16 hex characters)')
    .action(async (id: string, opts: StoreFlags) => {
      const removed = await withStore(opts, (store) => removeSubscription(store, id, by()));
      process.stderr.write(`removed subscription ${removed.id} of ${removed.tenantId}\n`);
    });

  storeOptions(webhook.command('resume'))
    .description('resume a paused subscription: what it had still to send goes out at once')
    .argument('<id>', 'the subscription id')
    .action(async (id: string, opts: StoreFlags) => {
      const resumed = await withStore(opts, (store) => resumeSubscription(store, id, by()));
      process.stderr.write(`resumed subscription ${resumed.id} of ${resumed.tenantId}\n`);
    });

  storeOptions(webhook.command('test'))
    .description('send a test event to a subscription now, from here, and say what the receiver answered')
    .argument('<id>', 'the subscription id')
    .action(async (id: string, opts: StoreFlags) => {
      const result = await withStore(opts, async (store, config) => {
        const subscription = await store.events.getSubscription(id);
        if (!subscription) throw new SubscriptionNotFound(`no subscription ${id}`);
        const deliver = destinationsFor(store, config);
        return deliver(testEvent(subscription, `cli:${userInfo().username}`));
      });
      if (result.outcome === 'delivered') {
        process.stderr.write(`delivered${result.status ? ` (HTTP ${result.status})` : ''}\n`);
        return;
      }
      const hint =
        result.outcome === 'retry' ? 'a retryable failure: the service would try again later' : 'not retried';
      process.stderr.write(`not delivered: ${result.error} (${hint})\n`);
      process.exitCode = 1;
    });
}
