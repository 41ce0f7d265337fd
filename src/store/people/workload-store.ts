// Workload identity's state (docs/ci.md): each tenant's trust rules, and the tokens already exchanged (a token's
// `jti` is good for one exchange, on every instance). Plain Kysely, so SQLite and PostgreSQL share it like the rest
// of KyselyStore. The keys an exchange mints are ordinary api_keys rows with a `workload` column (migration 0015).
import type { Kysely } from 'kysely';
import { type EventsFor, type EventTables, eventsOf, insertEvents } from '../events/event-store.js';
import { narrowTables, type PartContext } from '../part-context.js';
import type { EventInput } from '../records/event-kinds.js';
import type { TrustRule, WorkloadRole } from '../records/trust-rule.js';

export interface WorkloadTables {
  workload_trust_rules: {
    id: string;
    tenant_id: string;
    issuer: string;
    audience: string | null;
    /** JSON object: claim name → pattern. */
    conditions: string;
    role: string;
    key_minutes: number;
    /** Migration 0020: the longest exp - iat a token may have (default a day). */
    max_token_lifetime_s: number;
    /** Migration 0020: JSON array of the claims that make the stable identity; null: the issuer kind's default. */
    identity_claims: string | null;
    created_at: string;
    created_by: string;
  };
  workload_token_uses: {
    issuer: string;
    token_id: string;
    tenant_id: string;
    used_at: string;
    /** The token's exp: after it the token cannot be presented again anyway, so the row can go. */
    expires_at: string;
  };
}

/** What its transactions write: its own tables, and the outbox for the events of a change. */
export interface WorkloadStoreTables extends WorkloadTables, EventTables {}

function toRule(row: WorkloadTables['workload_trust_rules']): TrustRule {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    issuer: row.issuer,
    audience: row.audience,
    conditions: JSON.parse(row.conditions) as Record<string, string>,
    role: row.role as WorkloadRole,
    keyMinutes: Number(row.key_minutes),
    maxTokenLifetimeS: Number(row.max_token_lifetime_s),
    identityClaims: row.identity_claims === null ? null : (JSON.parse(row.identity_claims) as string[]),
    createdAt: row.created_at,
    createdBy: row.created_by,
  };
}

export class WorkloadStore {
  private readonly db: Kysely<WorkloadStoreTables>;

  constructor(ctx: PartContext<WorkloadStoreTables>) {
    this.db = ctx.db;
  }

  /** Adds the rule, with `events` (trust.changed) in the same transaction. */
  async addTrustRule(rule: TrustRule, events?: readonly EventInput[]): Promise<void> {
    await this.db.transaction().execute(async (tx) => {
      await this.insertTrustRule(tx, rule);
      await insertEvents(narrowTables<EventTables, WorkloadStoreTables>(tx), events, rule.createdAt);
    });
  }

  private async insertTrustRule(tx: Kysely<WorkloadStoreTables>, rule: TrustRule): Promise<void> {
    await tx
      .insertInto('workload_trust_rules')
      .values({
        id: rule.id,
        tenant_id: rule.tenantId,
        issuer: rule.issuer,
        audience: rule.audience,
        conditions: JSON.stringify(rule.conditions),
        role: rule.role,
        key_minutes: rule.keyMinutes,
        max_token_lifetime_s: rule.maxTokenLifetimeS,
        identity_claims: rule.identityClaims === null ? null : JSON.stringify(rule.identityClaims),
        created_at: rule.createdAt,
        created_by: rule.createdBy,
      })
      .execute();
  }

  async getTrustRule(id: string): Promise<TrustRule | undefined> {
    const row = await this.db.selectFrom('workload_trust_rules').selectAll().where('id', '=', id).executeTakeFirst();
    return row && toRule(row);
  }

  /** A tenant's rules (all tenants' when undefined), optionally only those for one issuer; oldest first. */
  async listTrustRules(tenantId?: string, issuer?: string): Promise<TrustRule[]> {
    let query = this.db.selectFrom('workload_trust_rules').selectAll();
    if (tenantId !== undefined) query = query.where('tenant_id', '=', tenantId);
    if (issuer !== undefined) query = query.where('issuer', '=', issuer);
    const rows = await query.orderBy('created_at').orderBy('id').execute();
    return rows.map(toRule);
  }

  /** The removed rule, or undefined when there was none. Keys it minted stay valid until they expire (minutes). */
  async removeTrustRule(id: string, events?: EventsFor<TrustRule>): Promise<TrustRule | undefined> {
    const rule = await this.getTrustRule(id);
    if (!rule) return undefined;
    return this.db.transaction().execute(async (tx) => {
      const result = await tx.deleteFrom('workload_trust_rules').where('id', '=', id).executeTakeFirst();
      if (Number(result.numDeletedRows) === 0) return undefined;
      await insertEvents(
        narrowTables<EventTables, WorkloadStoreTables>(tx),
        eventsOf(events, rule),
        new Date().toISOString(),
      );
      return rule;
    });
  }

  /**
   * Records the one exchange of a token. False when the token was exchanged before (on any instance): one
   * statement, so two instances racing with the same token cannot both win. Rows of expired tokens go first.
   * `formerTokenId`: the key an earlier version recorded for the same token; found, the token was used. (Nothing
   * records such keys any more, so looking before inserting races with nobody.)
   */
  async useToken(use: {
    issuer: string;
    tokenId: string;
    formerTokenId?: string | undefined;
    tenantId: string;
    usedAt: string;
    expiresAt: string;
  }): Promise<boolean> {
    await this.db.deleteFrom('workload_token_uses').where('expires_at', '<', use.usedAt).execute();
    if (use.formerTokenId) {
      const former = await this.db
        .selectFrom('workload_token_uses')
        .select('token_id')
        .where('issuer', '=', use.issuer)
        .where('token_id', '=', use.formerTokenId)
        .executeTakeFirst();
      if (former) return false;
    }
    const inserted = await this.db
      .insertInto('workload_token_uses')
      .values({
        issuer: use.issuer,
        token_id: use.tokenId,
        tenant_id: use.tenantId,
        used_at: use.usedAt,
        expires_at: use.expiresAt,
      })
      .onConflict((oc) => oc.columns(['issuer', 'token_id']).doNothing())
      .executeTakeFirst();
    return Number(inserted.numInsertedOrUpdatedRows ?? 0n) > 0;
  }

  /** Undoes useToken when the exchange could not finish (its key was withdrawn), so the job can retry the token. */
  async releaseToken(use: { issuer: string; tokenId: string; usedAt: string }): Promise<void> {
    await this.db
      .deleteFrom('workload_token_uses')
      .where('issuer', '=', use.issuer)
      .where('token_id', '=', use.tokenId)
      .where('used_at', '=', use.usedAt)
      .execute();
  }
}
