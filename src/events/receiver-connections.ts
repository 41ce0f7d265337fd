// Each subscription's kept-alive connections to its receiver (issue 46): a webhook on a connection of its own cost a
// TCP (and TLS) handshake per event, on the receiver's side too. Per subscription, so that a tenant's receiver
// that hangs holds only that subscription's sockets (at most as many as its attempts in flight), never another's.
// Connections are made and checked by the outbound rules (src/net/checked-connections.ts), close after idleMs unused,
// and are closed when their subscription is removed or paused (keepOnly, from each dispatcher pass) or its URL
// changes. A paused subscription's probes connect afresh.
import type { CheckedConnections } from '../net/checked-connections.js';
import type { SubscriptionRecord } from '../store/events/event-store.js';
import { type WebhookSendSettings, webhookConnections } from './webhook-sender.js';

export interface ReceiverConnectionBounds {
  /** Connections per subscription (default 64: its attempts in flight while the dispatcher reads a backlog). */
  maxSockets?: number;
  /** A connection unused this long is closed (default 4 s: below Node's 5 s keep-alive, a common receiver's). */
  idleMs?: number;
}

export class ReceiverConnections {
  private readonly bySubscription = new Map<string, { url: string; connections: CheckedConnections }>();
  private readonly maxSockets: number;
  private readonly idleMs: number;

  constructor(
    private readonly settings: WebhookSendSettings,
    bounds: ReceiverConnectionBounds = {},
  ) {
    this.maxSockets = Math.max(1, bounds.maxSockets ?? 64);
    this.idleMs = Math.max(1, bounds.idleMs ?? 4000);
  }

  /** The subscription's connections; none (connect afresh) while it is paused. */
  for(subscription: SubscriptionRecord): CheckedConnections | undefined {
    if (subscription.pausedAt !== null) return undefined;
    const kept = this.bySubscription.get(subscription.id);
    if (kept && kept.url === subscription.url) return kept.connections;
    kept?.connections.close();
    const connections = webhookConnections(this.settings, { maxSockets: this.maxSockets, idleMs: this.idleMs });
    this.bySubscription.set(subscription.id, { url: subscription.url, connections });
    return connections;
  }

  /** Closes the connections of every subscription not in `active` (removed, or paused); all of them with none. */
  keepOnly(active: ReadonlySet<string>): void {
    for (const [id, kept] of this.bySubscription) {
      if (active.has(id)) continue;
      kept.connections.close();
      this.bySubscription.delete(id);
    }
  }

  /** How many subscriptions hold connections (tests). */
  get size(): number {
    return this.bySubscription.size;
  }
}
