// Events' state (docs/events.md): the outbox, the subscriptions, and one delivery row per event and subscription.
// Plain Kysely, so SQLite and PostgreSQL share it like the rest of KyselyStore.
//
// EventStore is what the store hands out as `store.events`; it is made of three parts, one concern each:
// - event-outbox.ts: the outbox, written in the transaction of the change an event tells of, and its fan-out into
//   delivery rows;
// - event-subscriptions.ts: the subscriptions, what they want, their pause and resumption;
// - event-deliveries.ts: the deliveries, claimed under a lease, renewed, and each attempt's outcome;
// - event-log-cursors.ts: the events read from the audit log (signature.signed of a signature made at once), each
//   subscription's cursor into it, leased, and moved past what was sent.
// Their tables and records are in event-tables.ts.
import type { PartContext } from '../part-context.js';
import { EventDeliveries } from './event-deliveries.js';
import { EventLogCursors } from './event-log-cursors.js';
import { EventOutbox } from './event-outbox.js';
import { EventSubscriptions } from './event-subscriptions.js';
import type { EventTables } from './event-tables.js';

export {
  type BatchItemToTell,
  type KeptAttempt,
  type LoggedSignature,
  type LogLease,
  type LogPosition,
  SIGNED_AT_ONCE_ACTIONS,
  type SignedEntry,
} from './event-log-cursors.js';
export { type EventsFor, eventsOf, insertEvents, outboxRows } from './event-outbox.js';
export type {
  DeliveryClaim,
  DeliveryRecord,
  DeliveryStatus,
  DeliveryWant,
  EventTables,
  FailingState,
  OutboxRow,
  SubscribedKinds,
  SubscriptionFormat,
  SubscriptionRecord,
} from './event-tables.js';
export { SUBSCRIPTION_FORMATS } from './event-tables.js';

/** Events' state: the methods of its three parts, under one name (the store's `events`). */
export class EventStore {
  /** Told when this process writes events (the dispatcher's nudge: src/app.ts). */
  onWritten: (() => void) | undefined;
  private readonly outbox: EventOutbox;
  private readonly subscriptions: EventSubscriptions;
  private readonly deliveries: EventDeliveries;
  private readonly logCursors: EventLogCursors;

  constructor(
    { db, postgres }: PartContext<EventTables>,
    /** Runs a change to the subscriptions (EventSubscriptions says why); by default, just runs it. */
    changingSubscriptions?: <T>(write: () => Promise<T>) => Promise<T>,
  ) {
    this.outbox = new EventOutbox(db, postgres);
    this.subscriptions = new EventSubscriptions(db, changingSubscriptions);
    this.deliveries = new EventDeliveries(db, postgres);
    this.logCursors = new EventLogCursors(db, postgres);
  }

  // The outbox and its fan-out (event-outbox.ts).
  appendEvents(...args: Parameters<EventOutbox['appendEvents']>) {
    return this.outbox.appendEvents(...args);
  }

  readEvents(...args: Parameters<EventOutbox['readEvents']>) {
    return this.outbox.readEvents(...args);
  }

  fanOut(...args: Parameters<EventOutbox['fanOut']>) {
    return this.outbox.fanOut(...args);
  }

  // The subscriptions (event-subscriptions.ts).
  subscribedKinds(...args: Parameters<EventSubscriptions['subscribedKinds']>) {
    return this.subscriptions.subscribedKinds(...args);
  }

  addSubscription(...args: Parameters<EventSubscriptions['addSubscription']>) {
    return this.subscriptions.addSubscription(...args);
  }

  getSubscription(...args: Parameters<EventSubscriptions['getSubscription']>) {
    return this.subscriptions.getSubscription(...args);
  }

  listSubscriptions(...args: Parameters<EventSubscriptions['listSubscriptions']>) {
    return this.subscriptions.listSubscriptions(...args);
  }

  removeSubscription(...args: Parameters<EventSubscriptions['removeSubscription']>) {
    return this.subscriptions.removeSubscription(...args);
  }

  resumeSubscription(...args: Parameters<EventSubscriptions['resumeSubscription']>) {
    return this.subscriptions.resumeSubscription(...args);
  }

  pauseSubscription(...args: Parameters<EventSubscriptions['pauseSubscription']>) {
    return this.subscriptions.pauseSubscription(...args);
  }

  // The deliveries: claims, leases and outcomes (event-deliveries.ts).
  listDeliveries(...args: Parameters<EventDeliveries['listDeliveries']>) {
    return this.deliveries.listDeliveries(...args);
  }

  /** Deliveries still to make: the pending rows, and the entries after the cursors of the subscriptions reading the log. */
  async countPendingDeliveries(): Promise<number> {
    const readingTheLog = (await this.subscriptions.listSubscriptions())
      .filter((s) => s.eventKinds === null || s.eventKinds.includes('signature.signed'))
      .map((s) => s.id);
    return (await this.deliveries.countPendingDeliveries()) + (await this.logCursors.countLogBacklog(readingTheLog));
  }

  hasPendingDeliveries(...args: Parameters<EventDeliveries['hasPendingDeliveries']>) {
    return this.deliveries.hasPendingDeliveries(...args);
  }

  claimDeliveries(...args: Parameters<EventDeliveries['claimDeliveries']>) {
    return this.deliveries.claimDeliveries(...args);
  }

  explainClaim(...args: Parameters<EventDeliveries['explainClaim']>) {
    return this.deliveries.explainClaim(...args);
  }

  takeProbe(...args: Parameters<EventDeliveries['takeProbe']>) {
    return this.deliveries.takeProbe(...args);
  }

  /** Events read from the log have no delivery row to renew while they are sent: their cursor's lease is renewed. */
  renewLeases(claims: Parameters<EventDeliveries['renewLeases']>[0], leaseUntil: string) {
    return this.deliveries.renewLeases(
      claims.filter((c) => !c.fromLog),
      leaseUntil,
    );
  }

  markDelivered(...args: Parameters<EventDeliveries['markDelivered']>) {
    return this.deliveries.markDelivered(...args);
  }

  markFailedAttempt(...args: Parameters<EventDeliveries['markFailedAttempt']>) {
    return this.deliveries.markFailedAttempt(...args);
  }

  // The events read from the audit log (event-log-cursors.ts).
  leaseLogEntries(...args: Parameters<EventLogCursors['leaseLogEntries']>) {
    return this.logCursors.leaseLogEntries(...args);
  }

  renewLogLeases(...args: Parameters<EventLogCursors['renewLogLeases']>) {
    return this.logCursors.renewLogLeases(...args);
  }

  advanceLogCursor(...args: Parameters<EventLogCursors['advanceLogCursor']>) {
    return this.logCursors.advanceLogCursor(...args);
  }

  explainLogRead(...args: Parameters<EventLogCursors['explainLogRead']>) {
    return this.logCursors.explainLogRead(...args);
  }

  countLogBacklog(...args: Parameters<EventLogCursors['countLogBacklog']>) {
    return this.logCursors.countLogBacklog(...args);
  }
}
