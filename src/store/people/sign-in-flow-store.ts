// The short-lived state of the OAuth flows (docs/oauth.md): sign-in attempts, browser sessions, device codes.
// Plain Kysely, so SQLite and PostgreSQL share it like the rest of KyselyStore; the store hands it out as part of
// `store.people` (PeopleStore forwards to it).
import type { Kysely } from 'kysely';
import type { PartContext } from '../part-context.js';
import type { Role } from '../records/roles.js';

export interface SignInFlowTables {
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

function toDeviceCode(row: SignInFlowTables['device_codes']): DeviceCodeRecord {
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

export class SignInFlowStore {
  private readonly db: Kysely<SignInFlowTables>;

  constructor(ctx: PartContext<SignInFlowTables>) {
    this.db = ctx.db;
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
