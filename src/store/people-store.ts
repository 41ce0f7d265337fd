// People (identities from the organisation's IdP), their memberships in tenants, and the short-lived state of the
// OAuth flows: sign-in attempts, browser sessions, device codes (docs/oauth.md). Every query here is plain Kysely,
// so SQLite and PostgreSQL share it like the rest of KyselyStore. Writes that change who may use an API key
// (disabling a person, removing a membership) raise the cache epoch in their transaction (migration 0006).
import { randomUUID } from 'node:crypto';
import type { Kysely, Transaction } from 'kysely';
import type { Role } from './records/roles.js';
import { ConflictError } from './store-errors.js';

export interface PeopleTables {
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
  oauth_attempts: { state_hash: string; nonce: string; code_verifier: string; return_to: string; expires_at: string };
  browser_sessions: {
    id_hash: string;
    person_id: string;
    csrf_token: string;
    created_at: string;
    last_seen_at: string;
    expires_at: string;
  };
  device_codes: {
    code_hash: string;
    user_code: string;
    tenant_id: string | null;
    client_name: string | null;
    user_agent: string | null;
    address: string;
    status: string;
    person_id: string | null;
    granted_tenant_id: string | null;
    granted_roles: string | null;
    interval_s: number;
    last_poll_at: string | null;
    created_at: string;
    expires_at: string;
  };
  // The API-key columns this file reads and revokes (the table itself belongs to KyselyStore).
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

export interface BrowserSessionRecord {
  idHash: string;
  personId: string;
  csrfToken: string;
  createdAt: string;
  lastSeenAt: string;
  expiresAt: string;
}

export type DeviceCodeStatus = 'pending' | 'approved' | 'denied' | 'consumed';

export interface DeviceCodeRecord {
  codeHash: string;
  userCode: string;
  tenantId: string | null;
  clientName: string | null;
  userAgent: string | null;
  address: string;
  status: DeviceCodeStatus;
  personId: string | null;
  grantedTenantId: string | null;
  grantedRoles: Role[] | null;
  intervalS: number;
  lastPollAt: string | null;
  createdAt: string;
  expiresAt: string;
}

export interface OAuthAttempt {
  stateHash: string;
  nonce: string;
  codeVerifier: string;
  returnTo: string;
  expiresAt: string;
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

function toDeviceCode(row: PeopleTables['device_codes']): DeviceCodeRecord {
  return {
    codeHash: row.code_hash,
    userCode: row.user_code,
    tenantId: row.tenant_id,
    clientName: row.client_name,
    userAgent: row.user_agent,
    address: row.address,
    status: row.status as DeviceCodeStatus,
    personId: row.person_id,
    grantedTenantId: row.granted_tenant_id,
    grantedRoles: row.granted_roles === null ? null : (JSON.parse(row.granted_roles) as Role[]),
    intervalS: Number(row.interval_s),
    lastPollAt: row.last_poll_at,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
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
  constructor(
    private readonly db: Kysely<PeopleTables>,
    private readonly changed: () => void = () => undefined,
  ) {}

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

  async createAttempt(a: OAuthAttempt): Promise<void> {
    await this.db
      .insertInto('oauth_attempts')
      .values({
        state_hash: a.stateHash,
        nonce: a.nonce,
        code_verifier: a.codeVerifier,
        return_to: a.returnTo,
        expires_at: a.expiresAt,
      })
      .execute();
  }

  /** Takes (reads and deletes) a sign-in attempt: each state is good for one callback. Expired ones are purged. */
  async takeAttempt(stateHash: string, now: string): Promise<OAuthAttempt | undefined> {
    return this.db.transaction().execute(async (tx) => {
      await tx.deleteFrom('oauth_attempts').where('expires_at', '<=', now).execute();
      const row = await tx
        .selectFrom('oauth_attempts')
        .selectAll()
        .where('state_hash', '=', stateHash)
        .executeTakeFirst();
      if (!row) return undefined;
      await tx.deleteFrom('oauth_attempts').where('state_hash', '=', stateHash).execute();
      return {
        stateHash: row.state_hash,
        nonce: row.nonce,
        codeVerifier: row.code_verifier,
        returnTo: row.return_to,
        expiresAt: row.expires_at,
      };
    });
  }

  async createSession(s: BrowserSessionRecord): Promise<void> {
    await this.db
      .insertInto('browser_sessions')
      .values({
        id_hash: s.idHash,
        person_id: s.personId,
        csrf_token: s.csrfToken,
        created_at: s.createdAt,
        last_seen_at: s.lastSeenAt,
        expires_at: s.expiresAt,
      })
      .execute();
  }

  async getSession(idHash: string): Promise<BrowserSessionRecord | undefined> {
    const row = await this.db
      .selectFrom('browser_sessions')
      .selectAll()
      .where('id_hash', '=', idHash)
      .executeTakeFirst();
    return (
      row && {
        idHash: row.id_hash,
        personId: row.person_id,
        csrfToken: row.csrf_token,
        createdAt: row.created_at,
        lastSeenAt: row.last_seen_at,
        expiresAt: row.expires_at,
      }
    );
  }

  async touchSession(idHash: string, at: string): Promise<void> {
    await this.db.updateTable('browser_sessions').set({ last_seen_at: at }).where('id_hash', '=', idHash).execute();
  }

  async deleteSession(idHash: string): Promise<void> {
    await this.db.deleteFrom('browser_sessions').where('id_hash', '=', idHash).execute();
  }

  async createDeviceCode(d: DeviceCodeRecord): Promise<void> {
    await this.db
      .insertInto('device_codes')
      .values({
        code_hash: d.codeHash,
        user_code: d.userCode,
        tenant_id: d.tenantId,
        client_name: d.clientName,
        user_agent: d.userAgent,
        address: d.address,
        status: d.status,
        person_id: d.personId,
        granted_tenant_id: d.grantedTenantId,
        granted_roles: d.grantedRoles === null ? null : JSON.stringify(d.grantedRoles),
        interval_s: d.intervalS,
        last_poll_at: d.lastPollAt,
        created_at: d.createdAt,
        expires_at: d.expiresAt,
      })
      .execute();
  }

  async getDeviceCode(codeHash: string): Promise<DeviceCodeRecord | undefined> {
    const row = await this.db
      .selectFrom('device_codes')
      .selectAll()
      .where('code_hash', '=', codeHash)
      .executeTakeFirst();
    return row && toDeviceCode(row);
  }

  async getDeviceCodeByUserCode(userCode: string): Promise<DeviceCodeRecord | undefined> {
    const row = await this.db
      .selectFrom('device_codes')
      .selectAll()
      .where('user_code', '=', userCode)
      .executeTakeFirst();
    return row && toDeviceCode(row);
  }

  /** Compare-and-set on the status: of two racing decisions (or polls) exactly one wins. */
  async updateDeviceCode(
    codeHash: string,
    from: DeviceCodeStatus,
    changes: Partial<Pick<DeviceCodeRecord, 'status' | 'personId' | 'grantedTenantId' | 'grantedRoles'>>,
  ): Promise<boolean> {
    const result = await this.db
      .updateTable('device_codes')
      .set({
        ...(changes.status !== undefined && { status: changes.status }),
        ...(changes.personId !== undefined && { person_id: changes.personId }),
        ...(changes.grantedTenantId !== undefined && { granted_tenant_id: changes.grantedTenantId }),
        ...(changes.grantedRoles !== undefined && {
          granted_roles: changes.grantedRoles === null ? null : JSON.stringify(changes.grantedRoles),
        }),
      })
      .where('code_hash', '=', codeHash)
      .where('status', '=', from)
      .executeTakeFirst();
    return Number(result.numUpdatedRows) === 1;
  }

  /** Records a poll and the (possibly grown) interval. */
  async recordPoll(codeHash: string, at: string, intervalS: number): Promise<void> {
    await this.db
      .updateTable('device_codes')
      .set({ last_poll_at: at, interval_s: intervalS })
      .where('code_hash', '=', codeHash)
      .execute();
  }

  /** Drops device codes and sessions past their expiry (called now and then by the OAuth routes). */
  async purgeExpired(now: string): Promise<void> {
    await this.db.deleteFrom('device_codes').where('expires_at', '<=', now).execute();
    await this.db.deleteFrom('browser_sessions').where('expires_at', '<=', now).execute();
    await this.db.deleteFrom('oauth_attempts').where('expires_at', '<=', now).execute();
  }
}
