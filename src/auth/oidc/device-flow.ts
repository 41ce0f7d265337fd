// Our own device authorization grant (RFC 8628) on the contract's endpoints: the service issues the codes, the
// person confirms at /oauth/device after signing in through the IdP, the CLI polls and gets one API key, once.
// Codes: device_code 256-bit random, single use, stored as SHA-256; user_code 8 characters of the RFC's base-20
// alphabet (no vowels, no look-alikes), shown XXXX-XXXX, matched after upper-casing and dropping separators.
import { randomInt } from 'node:crypto';
import { ApiError } from '../../errors.js';
import type { DeviceCodeRecord } from '../../store/people/people-store.js';
import type { Role } from '../../store/records/roles.js';
import type { AuditEntryInput, Store } from '../../store/store.js';
import { createPersonApiKey } from '../api-keys.js';
import { randomToken, sha256Hex } from './relying-party.js';

export const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';
export const DEVICE_CODE_TTL_S = 600;
export const POLL_INTERVAL_S = 5;
/** RFC 8628 §3.5: a client told to slow down adds 5 s to its interval, for good. */
export const SLOW_DOWN_STEP_S = 5;

export function newUserCode(): string {
  let code = '';
  for (let i = 0; i < 8; i++) code += USER_CODE_ALPHABET[randomInt(USER_CODE_ALPHABET.length)];
  return code;
}

/** XXXXXXXX -> XXXX-XXXX, for display. */
export function formatUserCode(code: string): string {
  return `${code.slice(0, 4)}-${code.slice(4)}`;
}

/** What a person typed, as stored: upper case, separators and spaces dropped; undefined if it cannot be a code. */
export function normaliseUserCode(input: string): string | undefined {
  const code = input.toUpperCase().replace(/[\s-]/g, '');
  if (code.length !== 8) return undefined;
  for (const c of code) if (!USER_CODE_ALPHABET.includes(c)) return undefined;
  return code;
}

export interface DeviceStart {
  deviceCode: string;
  userCode: string;
  expiresIn: number;
  interval: number;
}

export interface DeviceGrant {
  apiKey: string;
  tenantId: string;
  roles: Role[];
  expiresAt: Date;
  email: string | null;
  personId: string;
}

export class DeviceFlow {
  constructor(
    private readonly store: Store,
    private readonly now: () => Date,
    private readonly personKeyMs: number,
  ) {}

  async start(request: {
    tenantId: string | null;
    clientName: string | null;
    userAgent: string | null;
    address: string;
  }): Promise<DeviceStart> {
    const at = this.now();
    const deviceCode = randomToken();
    // A clash of user codes among the live ones (34 bits) is rare; the unique index turns it into a retry.
    for (let attempt = 0; ; attempt++) {
      const userCode = newUserCode();
      try {
        await this.store.people.createDeviceCode({
          codeHash: sha256Hex(deviceCode),
          userCode,
          tenantId: request.tenantId,
          clientName: request.clientName,
          userAgent: request.userAgent,
          address: request.address,
          status: 'pending',
          personId: null,
          grantedTenantId: null,
          grantedRoles: null,
          intervalS: POLL_INTERVAL_S,
          lastPollAt: null,
          createdAt: at.toISOString(),
          expiresAt: new Date(at.getTime() + DEVICE_CODE_TTL_S * 1000).toISOString(),
        });
        return { deviceCode, userCode, expiresIn: DEVICE_CODE_TTL_S, interval: POLL_INTERVAL_S };
      } catch (err) {
        if (attempt >= 3) throw err;
      }
    }
  }

  /** A live, pending code for the verification page, or undefined (unknown, expired, already decided). */
  async pending(userCode: string): Promise<DeviceCodeRecord | undefined> {
    const record = await this.store.people.getDeviceCodeByUserCode(userCode);
    if (!record || record.status !== 'pending' || this.expired(record)) return undefined;
    return record;
  }

  /** The person confirmed: the code now carries their grant (tenant and roles). False if it was no longer pending. */
  async approve(record: DeviceCodeRecord, personId: string, tenantId: string, roles: Role[]): Promise<boolean> {
    const done = await this.store.people.updateDeviceCode(record.codeHash, 'pending', {
      status: 'approved',
      personId,
      grantedTenantId: tenantId,
      grantedRoles: roles,
    });
    if (done) await this.store.audit.append(this.decisionAudit(record, personId, 'approved', tenantId, roles));
    return done;
  }

  async deny(record: DeviceCodeRecord, personId: string): Promise<boolean> {
    const done = await this.store.people.updateDeviceCode(record.codeHash, 'pending', { status: 'denied', personId });
    if (done) await this.store.audit.append(this.decisionAudit(record, personId, 'denied', record.tenantId, []));
    return done;
  }

  /** Who confirmed or denied which device's request: the person, the device's address and name. */
  private decisionAudit(
    record: DeviceCodeRecord,
    personId: string,
    outcome: 'approved' | 'denied',
    tenantId: string | null,
    roles: Role[],
  ): AuditEntryInput {
    return {
      at: this.now().toISOString(),
      tenantId,
      actor: `person:${personId}`,
      action: 'device_sign_in',
      outcome,
      details: {
        person: personId,
        roles,
        client_name: record.clientName,
        address: record.address,
        requested_at: record.createdAt,
      },
    };
  }

  /**
   * One poll: throws the RFC's errors, or returns the grant with a freshly minted API key exactly once (a
   * compare-and-set from approved to consumed; a second poll finds the code used).
   */
  async poll(deviceCode: string): Promise<DeviceGrant> {
    const codeHash = sha256Hex(deviceCode);
    const record = await this.store.people.getDeviceCode(codeHash);
    if (!record) {
      throw new ApiError('expired_token', 'unknown device_code (never issued, or expired and purged); start again');
    }
    if (this.expired(record) && record.status !== 'consumed') {
      throw new ApiError('expired_token', 'the device code expired before it was confirmed; start again');
    }
    switch (record.status) {
      case 'consumed':
        throw new ApiError('expired_token', 'this device_code was already used: it gives one API key; start again');
      case 'denied':
        throw new ApiError('access_denied', 'the sign-in was denied (by the person, or they have no membership)');
      case 'pending':
        return this.pendingPoll(record);
      case 'approved':
        return this.grant(record);
    }
  }

  private async pendingPoll(record: DeviceCodeRecord): Promise<never> {
    const at = this.now();
    const early = record.lastPollAt !== null && at.getTime() - Date.parse(record.lastPollAt) < record.intervalS * 1000;
    const interval = early ? record.intervalS + SLOW_DOWN_STEP_S : record.intervalS;
    await this.store.people.recordPoll(record.codeHash, at.toISOString(), interval);
    if (early) {
      throw new ApiError('slow_down', `polling faster than the interval; poll every ${interval} s from now on`);
    }
    throw new ApiError('authorization_pending', 'waiting for the person to confirm the code');
  }

  private async grant(record: DeviceCodeRecord): Promise<DeviceGrant> {
    if (!(await this.store.people.updateDeviceCode(record.codeHash, 'approved', { status: 'consumed' }))) {
      throw new ApiError('expired_token', 'this device_code was already used: it gives one API key; start again');
    }
    const personId = record.personId as string;
    const tenantId = record.grantedTenantId as string;
    const person = await this.store.people.getPerson(personId);
    // The grant was made moments ago; the membership or the person may have changed since.
    const current = await this.store.people.rolesIn(personId, tenantId);
    const roles = (record.grantedRoles ?? []).filter((r) => current.includes(r));
    if (!person || person.disabledAt || roles.length === 0) {
      throw new ApiError('access_denied', 'the person is disabled or no longer has a membership in the tenant');
    }
    const at = this.now();
    const expiresAt = new Date(at.getTime() + this.personKeyMs);
    const made = await createPersonApiKey(
      this.store,
      {
        personId,
        tenantId,
        roles,
        expiresAt,
        createdVia: 'device',
        label: `device sign-in${record.clientName ? ` (${record.clientName})` : ''} by ${person.email ?? person.subject}`,
      },
      at,
    );
    await this.store.audit.append(keyAudit(at, tenantId, personId, made.record.id, roles, expiresAt, record.address));
    return {
      apiKey: made.token,
      tenantId,
      roles,
      expiresAt,
      email: person.emailVerified ? person.email : null,
      personId,
    };
  }

  private expired(record: DeviceCodeRecord): boolean {
    return Date.parse(record.expiresAt) <= this.now().getTime();
  }
}

function keyAudit(
  at: Date,
  tenantId: string,
  personId: string,
  keyId: string,
  roles: Role[],
  expiresAt: Date,
  address: string,
): AuditEntryInput {
  return {
    at: at.toISOString(),
    tenantId,
    actor: `person:${personId}`,
    action: 'api_key_create',
    outcome: 'created',
    details: {
      api_key_id: keyId,
      person: personId,
      roles,
      expires_at: expiresAt.toISOString(),
      via: 'device',
      address,
    },
  };
}
