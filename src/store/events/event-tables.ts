// Events' tables (migrations 0016, 0021, 0028 and 0031), the records the event store hands out, and the mapping of a row to
// its record, which the outbox, the subscriptions, the deliveries and the log cursors share.
import type { Generated, Selectable } from 'kysely';
import type { StoredAuditRow, WordTables } from '../audit/audit-rows.js';
import type { EventData, EventKind, EventRecord } from '../records/event-kinds.js';

export const SUBSCRIPTION_FORMATS = ['standard', 'slack', 'teams', 'email'] as const;
export type SubscriptionFormat = (typeof SUBSCRIPTION_FORMATS)[number];

export interface EventTables {
  event_outbox: {
    seq: Generated<number>;
    id: string;
    tenant_id: string | null;
    type: string;
    timestamp: string;
    /** JSON of EventData. */
    data: string;
    order_key: string | null;
    fanned_out: number;
  };
  webhook_subscriptions: {
    id: string;
    tenant_id: string;
    url: string;
    format: string;
    /** JSON array of event kinds; null: all. */
    event_kinds: string | null;
    secret: string | null;
    created_at: string;
    created_by: string;
    paused_at: string | null;
    pause_reason: string | null;
    last_error: string | null;
    last_error_at: string | null;
    last_delivered_at: string | null;
    failures_in_a_row: number;
    /** The first failed attempt since the last delivered one (null: not failing); the pause counts from it. */
    failing_since: string | null;
    /** A paused subscription's next probe (null: not probed; it waits for a person). */
    next_probe_at: string | null;
  };
  event_deliveries: {
    event_seq: number;
    subscription_id: string;
    order_key: string | null;
    status: string;
    attempts: number;
    next_attempt_at: string;
    lease_until: string | null;
    lease_owner: string | null;
    last_status: number | null;
    last_error: string | null;
    created_at: string;
    delivered_at: string | null;
  };
  /** Each subscription's cursor into the audit log (migrations 0028, 0031): the events read from the log. */
  event_log_cursors: {
    subscription_id: string;
    /** The seq of the last `signed` entry the subscription has been handed (or had kept as a delivery row). */
    after_seq: number;
    /** Inside a batch: the item_index of entry after_seq's last item handed; null when the whole entry was. */
    after_item: number | null;
    /** `sign_batch` entries are read only after this seq (those before it told of themselves in the outbox). */
    batches_after_seq: Generated<number>;
    lease_owner: string | null;
    lease_until: string | null;
  };
  /** Read only: the `signed` entries the cursors read (the audit store writes them). */
  audit_log: StoredAuditRow;
  /** Read only: the words of packed entries (migration 0032), to rebuild them. */
  audit_words: WordTables['audit_words'];
  /** Read only: a batch entry's items (migration 0029), each the source of one signature.signed. */
  batch_items: { batch_seq: number; item_index: number; digest: Buffer; signature_sha256: Buffer };
}

/**
 * The next attempt of a delivery held behind its failing subscription's retry (docs/events.md, "Failing"): a first
 * attempt that waits until the subscription recovers (or is resumed), not a time. It sorts after every real time,
 * so a claim never finds it due and a probe takes the subscription's retried deliveries before it.
 */
export const HELD_UNTIL_RECOVERY = '9999-12-31T23:59:59.999Z';

/** An outbox row as written; `seq` comes from the database. */
export type OutboxRow = Omit<Selectable<EventTables['event_outbox']>, 'seq'>;

export interface SubscriptionRecord {
  id: string;
  tenantId: string;
  /** https://... for webhooks and chat; mailto:address for e-mail. */
  url: string;
  format: SubscriptionFormat;
  /** null: every kind. */
  eventKinds: EventKind[] | null;
  /** The Standard Webhooks secret; only the dispatcher reads it. */
  secret: string | null;
  createdAt: string;
  createdBy: string;
  pausedAt: string | null;
  pauseReason: string | null;
  lastError: string | null;
  lastErrorAt: string | null;
  lastDeliveredAt: string | null;
  failuresInARow: number;
  /** When its attempts started failing, with no delivery since (null or absent: not failing). */
  failingSince?: string | null;
  /** Paused: when the dispatcher next sends it one delivery to see whether the receiver is back (null: never). */
  nextProbeAt?: string | null;
}

export type DeliveryStatus = 'pending' | 'delivered' | 'failed';

export interface DeliveryRecord {
  eventSeq: number;
  eventId: string;
  eventType: EventKind;
  subscriptionId: string;
  status: DeliveryStatus;
  attempts: number;
  nextAttemptAt: string;
  /** Until when a sender holds it (null: nobody is sending it). */
  leaseUntil: string | null;
  lastStatus: number | null;
  lastError: string | null;
  createdAt: string;
  deliveredAt: string | null;
}

/**
 * The event kinds a tenant's subscriptions want, paused ones included (they keep what they are sent): `all` when
 * one of them names none; `none` without any subscription. The signing path asks it, through the store's exact
 * cache (access-cache.ts), before it writes a signature.signed event nobody could receive.
 */
export interface SubscribedKinds {
  all: boolean;
  kinds: ReadonlySet<EventKind>;
}

/** A delivery this instance leased: send it, then record the outcome with the same claim. */
export interface DeliveryClaim {
  /** An event read from the log (`fromLog`) has the seq of its audit entry, an outbox event that of its row. */
  event: EventRecord;
  /**
   * Read from the audit log under the subscription's cursor (event-log-cursors.ts): no delivery row until its
   * attempt fails (then it is kept as one, and retried from there).
   */
  fromLog?: true;
  subscription: SubscriptionRecord;
  /** Including this one. */
  attempts: number;
  owner: string;
  /** When the event was written (ISO): retries stop 24 h after it. */
  createdAt: string;
}

/** What the dispatcher asks a claim for, per subscription: up to `limit` of its due deliveries. */
export interface DeliveryWant {
  subscriptionId: string;
  limit: number;
  /** A paused subscription's probe (the dispatcher won it with takeProbe): claimed although it is paused. */
  probe?: boolean;
}

/** A subscription's failing after a failed attempt (markFailedAttempt). */
export interface FailingState {
  failuresInARow: number;
  /** Its first failure since its last delivery. */
  failingSince: string;
  /** Paused (now or before); null: not paused. */
  pausedAt: string | null;
}

/** The record of an outbox row. */
export function toEvent(row: Selectable<EventTables['event_outbox']>): EventRecord {
  return {
    id: row.id,
    seq: Number(row.seq),
    tenantId: row.tenant_id,
    type: row.type as EventKind,
    timestamp: row.timestamp,
    data: JSON.parse(row.data) as EventData,
    orderKey: row.order_key,
  };
}

/** The record of a subscription row. */
export function toSubscription(row: EventTables['webhook_subscriptions']): SubscriptionRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    url: row.url,
    format: row.format as SubscriptionFormat,
    eventKinds: row.event_kinds ? (JSON.parse(row.event_kinds) as EventKind[]) : null,
    secret: row.secret,
    createdAt: row.created_at,
    createdBy: row.created_by,
    pausedAt: row.paused_at,
    pauseReason: row.pause_reason,
    lastError: row.last_error,
    lastErrorAt: row.last_error_at,
    lastDeliveredAt: row.last_delivered_at,
    failuresInARow: Number(row.failures_in_a_row),
    failingSince: row.failing_since,
    nextProbeAt: row.next_probe_at,
  };
}
