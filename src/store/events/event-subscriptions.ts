// Webhook, chat and e-mail subscriptions to a tenant's events (docs/events.md): who wants which kinds, and their
// pause. A change to them raises the cache epoch, since the signing path caches what they want (subscribedKinds).
import { type Kysely, sql } from 'kysely';
import type { EventKind } from '../records/event-kinds.js';
import { startCursorAtHead } from './event-log-cursors.js';
import { type EventTables, type SubscribedKinds, type SubscriptionRecord, toSubscription } from './event-tables.js';

/**
 * Who subscribes to what is part of the signing path's cache (access-cache.ts): a subscription made or removed
 * raises the cache epoch in its transaction, so every instance sees it from its first request after the commit.
 */
async function raiseCacheEpoch(tx: Kysely<EventTables>): Promise<void> {
  await sql`UPDATE cache_epoch SET n = n + 1 WHERE id = 1`.execute(tx);
}

export class EventSubscriptions {
  constructor(
    private readonly db: Kysely<EventTables>,
    /**
     * Runs a change to the subscriptions so that no cached answer of subscribedKinds survives it (the store's
     * access cache); the change raises the cache epoch too, for every other process and instance.
     */
    private readonly changingSubscriptions: <T>(write: () => Promise<T>) => Promise<T> = (write) => write(),
  ) {}

  /** What the tenant's subscriptions want, read from the database (the store caches it: wantsEvent). */
  async subscribedKinds(tenantId: string): Promise<SubscribedKinds> {
    const rows = await this.db
      .selectFrom('webhook_subscriptions')
      .select('event_kinds')
      .where('tenant_id', '=', tenantId)
      .execute();
    const kinds = new Set<EventKind>();
    let all = false;
    for (const row of rows) {
      if (row.event_kinds === null) all = true;
      else for (const kind of JSON.parse(row.event_kinds) as EventKind[]) kinds.add(kind);
    }
    return { all, kinds };
  }

  async addSubscription(s: SubscriptionRecord): Promise<void> {
    await this.changingSubscriptions(() => this.db.transaction().execute((tx) => this.insertSubscription(tx, s)));
  }

  private async insertSubscription(tx: Kysely<EventTables>, s: SubscriptionRecord): Promise<void> {
    await raiseCacheEpoch(tx);
    await tx
      .insertInto('webhook_subscriptions')
      .values({
        id: s.id,
        tenant_id: s.tenantId,
        url: s.url,
        format: s.format,
        event_kinds: s.eventKinds ? JSON.stringify(s.eventKinds) : null,
        secret: s.secret,
        created_at: s.createdAt,
        created_by: s.createdBy,
        paused_at: s.pausedAt,
        pause_reason: s.pauseReason,
        last_error: null,
        last_error_at: null,
        last_delivered_at: null,
        failures_in_a_row: 0,
        failing_since: null,
        next_probe_at: null,
      })
      .execute();
    // Its events read from the log start after the entries written so far (event-log-cursors.ts).
    await startCursorAtHead(tx, s.id);
  }

  async getSubscription(id: string): Promise<SubscriptionRecord | undefined> {
    const row = await this.db.selectFrom('webhook_subscriptions').selectAll().where('id', '=', id).executeTakeFirst();
    return row && toSubscription(row);
  }

  /** A tenant's subscriptions (every tenant's when undefined), oldest first. */
  async listSubscriptions(tenantId?: string): Promise<SubscriptionRecord[]> {
    let query = this.db.selectFrom('webhook_subscriptions').selectAll();
    if (tenantId !== undefined) query = query.where('tenant_id', '=', tenantId);
    const rows = await query.orderBy('created_at').orderBy('id').execute();
    return rows.map(toSubscription);
  }

  /** Removes the subscription and what it had still to send. False when there was none. */
  async removeSubscription(id: string): Promise<boolean> {
    return this.changingSubscriptions(() => this.removeSubscriptionOnce(id));
  }

  private removeSubscriptionOnce(id: string): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      await raiseCacheEpoch(tx);
      await tx.deleteFrom('event_deliveries').where('subscription_id', '=', id).execute();
      await tx.deleteFrom('event_log_cursors').where('subscription_id', '=', id).execute();
      const result = await tx.deleteFrom('webhook_subscriptions').where('id', '=', id).executeTakeFirst();
      return Number(result.numDeletedRows) === 1;
    });
  }

  /** Resumes a paused subscription: what it still had to send is due now. False when there was none. */
  async resumeSubscription(id: string, at: string): Promise<boolean> {
    return this.db.transaction().execute(async (tx) => {
      const result = await tx
        .updateTable('webhook_subscriptions')
        .set({ paused_at: null, pause_reason: null, failures_in_a_row: 0, failing_since: null, next_probe_at: null })
        .where('id', '=', id)
        .executeTakeFirst();
      await tx
        .updateTable('event_deliveries')
        .set({ next_attempt_at: at })
        .where('subscription_id', '=', id)
        .where('status', '=', 'pending')
        .execute();
      return Number(result.numUpdatedRows) === 1;
    });
  }

  /**
   * Pauses a subscription (it keeps failing); its deliveries wait until a probe gets through (from `probeAt` on,
   * when given) or a person resumes it.
   */
  async pauseSubscription(id: string, reason: string, at: string, probeAt: string | null = null): Promise<void> {
    await this.db
      .updateTable('webhook_subscriptions')
      .set({ paused_at: at, pause_reason: reason, next_probe_at: probeAt })
      .where('id', '=', id)
      .where('paused_at', 'is', null)
      .execute();
  }
}
