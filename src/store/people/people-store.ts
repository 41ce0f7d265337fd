// People (identities from the organisation's IdP) and their memberships in tenants (docs/oauth.md). The short-lived
// state of the OAuth flows (sign-in attempts, browser sessions, device codes) is sign-in-flow-store.ts's; PeopleStore
// hands out its methods too, as `store.people`. Every query here is plain Kysely, so SQLite and PostgreSQL share it
// like the rest of KyselyStore. Writes that change who may use an API key (disabling a person, removing a membership)
// raise the cache epoch in their transaction (migration 0006).
import { randomUUID } from 'node:crypto';
import type { Kysely, Transaction } from 'kysely';
import { type PartContext, partContext } from '../part-context.js';
import type { Role } from '../records/roles.js';
import { ConflictError } from '../store-errors.js';
import { SignInFlowStore, type SignInFlowTables } from './sign-in-flow-store.js';

export type {
  BrowserSessionRecord,
  DeviceCodeRecord,
  DeviceCodeStatus,
  OAuthAttempt,
} from './sign-in-flow-store.js';

export interface PeopleTables extends SignInFlowTables {
  people: {
    id: string;
    issuer: string;
    subject: string;
    email: string | null;
    email_verified: number;
    name: string | null;
    created_at: string;
    last_sign_in_at: string | null;
    disabled_at: string | null;
  };
  memberships: {
    id: string;
    tenant_id: string;
    role: string;
    person_id: string | null;
    email: string | null;
    created_at: string;
    created_by: string;
  };
  // The API-key columns this file reads and revokes (the table itself belongs to api-key-store.ts).
  api_keys: {
    id: string;
    tenant_id: string | null;
    person_id: string | null;
    roles: string | null;
    role: string;
    revoked_at: string | null;
  };
  cache_epoch: { id: number; n: number };
}

/** The global operator role is held in no tenant; its membership rows carry this tenant id. */
export const GLOBAL_TENANT = '*';

export interface PersonRecord {
  id: string;
  issuer: string;
  subject: string;
  email: string | null;
  /** Email is a policy input and an invitation match only when the IdP says it is verified. */
  emailVerified: boolean;
  name: string | null;
  createdAt: string;
  lastSignInAt: string | null;
  disabledAt: string | null;
}

export interface MembershipRecord {
  id: string;
  tenantId: string;
  role: Role;
  /** null while the membership waits for the person with `email` to sign in for the first time. */
  personId: string | null;
  email: string | null;
  createdAt: string;
  createdBy: string;
}

export interface SignInClaims {
  issuer: string;
  subject: string;
  email: string | null;
  emailVerified: boolean;
  name: string | null;
}

function toPerson(row: PeopleTables['people']): PersonRecord {
  return {
    id: row.id,
    issuer: row.issuer,
    subject: row.subject,
    email: row.email,
    emailVerified: Number(row.email_verified) === 1,
    name: row.name,
    createdAt: row.created_at,
    lastSignInAt: row.last_sign_in_at,
    disabledAt: row.disabled_at,
  };
}

function toMembership(row: PeopleTables['memberships']): MembershipRecord {
  return {
    id: row.id,
    tenantId: row.tenant_id,
    role: row.role as Role,
    personId: row.person_id,
    email: row.email,
    createdAt: row.created_at,
    createdBy: row.created_by,
  };
}

async function raiseCacheEpoch(tx: Transaction<PeopleTables>): Promise<void> {
  await tx
    .updateTable('cache_epoch')
    .set((eb) => ({ n: eb('n', '+', 1) }))
    .where('id', '=', 1)
    .execute();
}

/** Emails are compared lower-cased (the domain is case-insensitive, and IdPs differ in how they spell the rest). */
export function normaliseEmail(email: string): string {
  return email.trim().toLowerCase();
}

export class PeopleStore {
  /** `changed` runs after a write that may change whether an API key works (a cache in front must forget). */
  private readonly signInFlows: SignInFlowStore;
  private readonly db: Kysely<PeopleTables>;

  constructor(
    ctx: PartContext<PeopleTables>,
    private readonly changed: () => void = () => undefined,
  ) {
    this.db = ctx.db;
    this.signInFlows = new SignInFlowStore(partContext<SignInFlowTables, PeopleTables>(ctx));
  }

  /**
   * A sign-in: finds or creates the person (issuer, subject), refreshes the display data, and in the same
   * transaction turns memberships waiting for their verified email into theirs and adds the auto-join grants
   * they do not have yet.
   */
  async signIn(
    claims: SignInClaims,
    at: string,
    autoJoin: Array<{ tenantId: string; role: Role }>,
  ): Promise<PersonRecord> {
    const email = claims.email === null ? null : normaliseEmail(claims.email);
    const person = await this.db.transaction().execute(async (tx) => {
      const found = await tx
        .selectFrom('people')
        .selectAll()
        .where('issuer', '=', claims.issuer)
        .where('subject', '=', claims.subject)
        .executeTakeFirst();
      const id = found?.id ?? randomUUID();
      const row = {
        email,
        email_verified: claims.emailVerified && email !== null ? 1 : 0,
        name: claims.name,
        last_sign_in_at: at,
      };
      if (found) await tx.updateTable('people').set(row).where('id', '=', id).execute();
      else {
        await tx
          .insertInto('people')
          .values({
            id,
            issuer: claims.issuer,
            subject: claims.subject,
            created_at: at,
            disabled_at: null,
            ...row,
          })
          .execute();
      }
      if (row.email_verified === 1 && email !== null) {
        await tx
          .updateTable('memberships')
          .set({ person_id: id })
          .where('person_id', 'is', null)
          .where('email', '=', email)
          .execute();
      }
      for (const grant of autoJoin) {
        const has = await tx
          .selectFrom('memberships')
          .select('id')
          .where('person_id', '=', id)
          .where('tenant_id', '=', grant.tenantId)
          .where('role', '=', grant.role)
          .executeTakeFirst();
        if (!has) {
          await tx
            .insertInto('memberships')
            .values({
              id: randomUUID(),
              tenant_id: grant.tenantId,
              role: grant.role,
              person_id: id,
              email: null,
              created_at: at,
              created_by: 'auto-join',
            })
            .execute();
        }
      }
      return tx.selectFrom('people').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
    });
    return toPerson(person);
  }

  async getPerson(id: string): Promise<PersonRecord | undefined> {
    const row = await this.db.selectFrom('people').selectAll().where('id', '=', id).executeTakeFirst();
    return row && toPerson(row);
  }

  /** People whose verified email is `email`. */
  async findByEmail(email: string): Promise<PersonRecord[]> {
    const rows = await this.db
      .selectFrom('people')
      .selectAll()
      .where('email', '=', normaliseEmail(email))
      .where('email_verified', '=', 1)
      .execute();
    return rows.map(toPerson);
  }

  async findBySubject(subject: string, issuer?: string): Promise<PersonRecord[]> {
    let q = this.db.selectFrom('people').selectAll().where('subject', '=', subject);
    if (issuer !== undefined) q = q.where('issuer', '=', issuer);
    return (await q.execute()).map(toPerson);
  }

  async listPeople(): Promise<PersonRecord[]> {
    return (await this.db.selectFrom('people').selectAll().orderBy('created_at').execute()).map(toPerson);
  }

  /** Disables (at) or enables (null) a person; their API keys fail from the next request on. */
  async setDisabled(id: string, at: string | null): Promise<boolean> {
    const done = await this.db.transaction().execute(async (tx) => {
      const result = await tx.updateTable('people').set({ disabled_at: at }).where('id', '=', id).executeTakeFirst();
      await raiseCacheEpoch(tx);
      return Number(result.numUpdatedRows) === 1;
    });
    this.changed();
    return done;
  }

  async listMemberships(filter: { tenantId?: string; personId?: string } = {}): Promise<MembershipRecord[]> {
    let q = this.db.selectFrom('memberships').selectAll();
    if (filter.tenantId !== undefined) q = q.where('tenant_id', '=', filter.tenantId);
    if (filter.personId !== undefined) q = q.where('person_id', '=', filter.personId);
    return (await q.orderBy('created_at').execute()).map(toMembership);
  }

  /** The person's roles in a tenant (the global operator role under GLOBAL_TENANT). */
  async rolesIn(personId: string, tenantId: string): Promise<Role[]> {
    const rows = await this.db
      .selectFrom('memberships')
      .select('role')
      .where('person_id', '=', personId)
      .where('tenant_id', '=', tenantId)
      .execute();
    return [...new Set(rows.map((r) => r.role as Role))];
  }

  /** Throws ConflictError when the same person (or email) already has the role in the tenant. */
  async addMembership(m: Omit<MembershipRecord, 'id'>): Promise<MembershipRecord> {
    const record = { ...m, id: randomUUID(), email: m.email === null ? null : normaliseEmail(m.email) };
    await this.db.transaction().execute(async (tx) => {
      let q = tx
        .selectFrom('memberships')
        .select('id')
        .where('tenant_id', '=', record.tenantId)
        .where('role', '=', record.role);
      q = record.personId !== null ? q.where('person_id', '=', record.personId) : q.where('email', '=', record.email);
      if (await q.executeTakeFirst()) {
        throw new ConflictError(
          `${record.personId ?? record.email} already has role ${record.role} in ${record.tenantId}`,
        );
      }
      await tx
        .insertInto('memberships')
        .values({
          id: record.id,
          tenant_id: record.tenantId,
          role: record.role,
          person_id: record.personId,
          email: record.email,
          created_at: record.createdAt,
          created_by: record.createdBy,
        })
        .execute();
    });
    return record;
  }

  /**
   * Removes a person's (or a waiting email's) role in a tenant and, in the same transaction, revokes their live
   * API keys of that tenant that carry the role. Returns how many memberships and keys went.
   */
  async removeMembership(
    tenantId: string,
    role: Role,
    who: { personId: string } | { email: string },
    at: string,
  ): Promise<{ removed: number; keysRevoked: string[] }> {
    const result = await this.db.transaction().execute(async (tx) => {
      let del = tx.deleteFrom('memberships').where('tenant_id', '=', tenantId).where('role', '=', role);
      del =
        'personId' in who
          ? del.where('person_id', '=', who.personId)
          : del.where('email', '=', normaliseEmail(who.email));
      const removed = Number((await del.executeTakeFirst()).numDeletedRows);
      const keysRevoked: string[] = [];
      if ('personId' in who && removed > 0) {
        let live = tx
          .selectFrom('api_keys')
          .select(['id', 'roles', 'role'])
          .where('person_id', '=', who.personId)
          .where('revoked_at', 'is', null);
        live =
          tenantId === GLOBAL_TENANT ? live.where('tenant_id', 'is', null) : live.where('tenant_id', '=', tenantId);
        for (const k of await live.execute()) {
          const roles = k.roles ? (JSON.parse(k.roles) as string[]) : [k.role];
          if (!roles.includes(role)) continue;
          await tx.updateTable('api_keys').set({ revoked_at: at }).where('id', '=', k.id).execute();
          keysRevoked.push(k.id);
        }
        await raiseCacheEpoch(tx);
      }
      return { removed, keysRevoked };
    });
    if (result.keysRevoked.length > 0) this.changed();
    return result;
  }

  // The OAuth flows' state (sign-in-flow-store.ts).
  createAttempt(...args: Parameters<SignInFlowStore['createAttempt']>) {
    return this.signInFlows.createAttempt(...args);
  }

  takeAttempt(...args: Parameters<SignInFlowStore['takeAttempt']>) {
    return this.signInFlows.takeAttempt(...args);
  }

  createSession(...args: Parameters<SignInFlowStore['createSession']>) {
    return this.signInFlows.createSession(...args);
  }

  getSession(...args: Parameters<SignInFlowStore['getSession']>) {
    return this.signInFlows.getSession(...args);
  }

  touchSession(...args: Parameters<SignInFlowStore['touchSession']>) {
    return this.signInFlows.touchSession(...args);
  }

  deleteSession(...args: Parameters<SignInFlowStore['deleteSession']>) {
    return this.signInFlows.deleteSession(...args);
  }

  createDeviceCode(...args: Parameters<SignInFlowStore['createDeviceCode']>) {
    return this.signInFlows.createDeviceCode(...args);
  }

  getDeviceCode(...args: Parameters<SignInFlowStore['getDeviceCode']>) {
    return this.signInFlows.getDeviceCode(...args);
  }

  getDeviceCodeByUserCode(...args: Parameters<SignInFlowStore['getDeviceCodeByUserCode']>) {
    return this.signInFlows.getDeviceCodeByUserCode(...args);
  }

  updateDeviceCode(...args: Parameters<SignInFlowStore['updateDeviceCode']>) {
    return this.signInFlows.updateDeviceCode(...args);
  }

  recordPoll(...args: Parameters<SignInFlowStore['recordPoll']>) {
    return this.signInFlows.recordPoll(...args);
  }

  purgeExpired(...args: Parameters<SignInFlowStore['purgeExpired']>) {
    return this.signInFlows.purgeExpired(...args);
  }
}
