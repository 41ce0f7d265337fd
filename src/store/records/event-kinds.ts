// The events the service emits (docs/events.md): one for each state change a person or a system would act on.
// An event is written to the outbox in the same transaction as the change (src/store/events/event-store.ts), then sent to
// each subscription that wants its kind (src/events/dispatcher.ts). The body on the wire is the envelope below, as
// the Standard Webhooks specification recommends: {"type", "timestamp", "data"}.

export const EVENT_KINDS = [
  'signature.pending',
  'signature.reminder',
  'signature.approved',
  'signature.rejected',
  'signature.signed',
  'signature.denied',
  'signature.expired',
  'exception.created',
  'exception.revoked',
  'exception.expiring',
  'key.rotated',
  'key.imported',
  'tenant.created',
  'trust.changed',
  'api_key.created',
  'api_key.revoked',
  // Sent by `signbridge admin webhook test` straight to one subscription; never written to the outbox.
  'webhook.test',
] as const;
export type EventKind = (typeof EVENT_KINDS)[number];

export function isEventKind(value: string): value is EventKind {
  return (EVENT_KINDS as readonly string[]).includes(value);
}

/** Who asked for the change: an API key, with the person or the CI job behind it when there is one. */
export interface EventActor {
  /**
   * The audit log's actor: an API key id, or `person:<id>` for a decision made in the console, or `cli:<user>` for
   * an admin command on the service's host.
   */
  api_key_id: string;
  /** The person's id and e-mail, for a person's key or a decision made in the console. */
  person?: { id: string; email?: string | null };
  /** The verified CI job, for a key minted by the workload token exchange (docs/ci.md). */
  workload?: { issuer: string; subject: string; repository?: string; run_url?: string };
}

/**
 * What every event's data carries; the rest depends on the kind (event-schemas.ts: EVENT_DATA_SCHEMAS, the reference,
 * and EventDataFor<kind>; docs/events.md lists the fields).
 * `console_url` is the console page that acts on it, under the service's public URL (absent when none is set).
 */
export interface EventData {
  tenant_id: string | null;
  console_url?: string;
  [field: string]: unknown;
}

/** What a store method writes into the outbox with its change (the id and the time are the store's). */
export interface EventInput {
  type: EventKind;
  data: EventData;
  /**
   * Events with the same order key are delivered to a subscription in the order they were written: a request's
   * pending, approved and signed never overtake each other. Events without one are ordered by nothing.
   */
  orderKey?: string | null;
}

/** An event as stored and sent. `id` (evt_...) is the webhook-id: the same on every retry, for receivers to dedupe. */
export interface EventRecord extends EventInput {
  id: string;
  /** Insertion order across the whole outbox. */
  seq: number;
  tenantId: string | null;
  /** ISO time of the change. */
  timestamp: string;
}

/** The JSON body of a generic webhook. */
export interface EventEnvelope {
  type: EventKind;
  timestamp: string;
  data: EventData;
}

export function envelope(event: EventRecord): EventEnvelope {
  return { type: event.type, timestamp: event.timestamp, data: event.data };
}
