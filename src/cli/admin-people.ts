// `signbridge admin member|person` and the person side of `admin api-key`: memberships (roles of people in
// tenants), disabling people, and longer-lived CI keys for a person, an explicit admin choice (docs/oauth.md).
import { userInfo } from 'node:os';
import type { Command } from 'commander';
import { TENANT_ID_PATTERN } from '../api/schemas.js';
import { createPersonApiKey } from '../auth/api-keys.js';
import { GLOBAL_TENANT, normaliseEmail, type PersonRecord } from '../store/people/people-store.js';
import type { AuditAction, AuditOutcome } from '../store/records/audit-vocabulary.js';
import { isRole, ROLES, type Role } from '../store/records/roles.js';
import { type AuditEntryInputOf, ConflictError, type Store } from '../store/store.js';

export class PeopleUsageError extends Error {}

interface Who {
  email?: string;
  subject?: string;
  issuer?: string;
}

const UNITS: Record<string, number> = { m: 60_000, h: 3_600_000, d: 86_400_000 };

/** "90d", "12h", "30m" -> milliseconds. */
export function parseDuration(value: string): number {
  const m = /^(\d{1,5})([mhd])$/.exec(value.trim());
  if (!m) throw new PeopleUsageError(`--expires-in must look like 30m, 12h or 90d, got "${value}"`);
  const ms = Number(m[1]) * (UNITS[m[2] as string] as number);
  if (ms <= 0) throw new PeopleUsageError('--expires-in must be more than zero');
  if (ms > 366 * 86_400_000) throw new PeopleUsageError('--expires-in may be at most 366d');
  return ms;
}

function whoFlags(cmd: Command): Command {
  return cmd
    .option('--email <email>', 'the person by verified email (or, for member add, an invitation)')
    .option('--subject <subject>', "the person by the IdP's subject (sub)")
    .option('--issuer <issuer>', 'with --subject, when several IdPs have been used');
}

function oneOf(who: Who): void {
  if ((who.email === undefined) === (who.subject === undefined)) {
    throw new PeopleUsageError('name the person with exactly one of --email or --subject');
  }
}

/** The one person `who` names, or undefined when nobody by that email has signed in (an invitation then). */
export async function findPerson(store: Store, who: Who): Promise<PersonRecord | undefined> {
  oneOf(who);
  const found =
    who.email !== undefined
      ? await store.people.findByEmail(who.email)
      : await store.people.findBySubject(who.subject as string, who.issuer);
  if (found.length > 1) {
    throw new PeopleUsageError(
      `${who.email ?? who.subject} matches ${found.length} people (issuers: ${found.map((p) => p.issuer).join(', ')}); use --subject and --issuer`,
    );
  }
  if (found.length === 0 && who.subject !== undefined) {
    throw new PeopleUsageError(`nobody with subject ${who.subject} has signed in yet; invite them with --email`);
  }
  return found[0];
}

function tenantOf(role: Role, tenant: string | undefined): string {
  if (role === 'operator') {
    if (tenant) throw new PeopleUsageError('operator is a global role: omit --tenant');
    return GLOBAL_TENANT;
  }
  if (!tenant) throw new PeopleUsageError(`role ${role} needs --tenant`);
  if (!new RegExp(TENANT_ID_PATTERN).test(tenant))
    throw new PeopleUsageError(`--tenant "${tenant}" is not a valid tenant id`);
  return tenant;
}

function roleOf(value: string): Role {
  if (!isRole(value)) throw new PeopleUsageError(`--role must be one of: ${ROLES.join(', ')}`);
  return value;
}

function label(p: PersonRecord): string {
  return p.email ?? `${p.subject} (${p.issuer})`;
}

type WithStore = <T>(
  flags: { dataDir?: string; config?: string; database?: string },
  fn: (store: Store) => Promise<T>,
) => Promise<T>;
type Audit = <A extends AuditAction>(
  tenantId: string | null,
  action: A,
  outcome: AuditOutcome<A>,
  details: Record<string, unknown>,
) => AuditEntryInputOf<A>;

export function registerPeopleCommands(
  admin: Command,
  storeOptions: (cmd: Command) => Command,
  withStore: WithStore,
  cliAudit: Audit,
): void {
  const member = admin.command('member').description("people's roles in tenants (sign-in through the IdP)");
  type MemberFlags = Who & { tenant?: string; role: string; dataDir?: string; config?: string };

  whoFlags(storeOptions(member.command('add')))
    .description('give a person (or, by email, whoever signs in with it verified) a role in a tenant')
    .option('--tenant <tenant>', 'the tenant (omit for the global operator role)')
    .requiredOption('--role <role>', `one of: ${ROLES.join(', ')}`)
    .action(async (opts: MemberFlags) => {
      const role = roleOf(opts.role);
      const tenantId = tenantOf(role, opts.tenant);
      const message = await withStore(opts, async (store) => {
        const person = await findPerson(store, opts);
        if (tenantId !== GLOBAL_TENANT && !(await store.tenants.get(tenantId))) {
          throw new PeopleUsageError(`no tenant ${tenantId}`);
        }
        try {
          await store.people.addMembership({
            tenantId,
            role,
            personId: person?.id ?? null,
            email: person ? null : (opts.email as string),
            createdAt: new Date().toISOString(),
            createdBy: `cli:${userInfo().username}`,
          });
        } catch (err) {
          if (err instanceof ConflictError) throw new PeopleUsageError(err.message);
          throw err;
        }
        await store.audit.append(
          cliAudit(tenantId === GLOBAL_TENANT ? null : tenantId, 'member_add', 'created', {
            role,
            ...(person ? { person: person.id } : { invited_email: opts.email }),
          }),
        );
        return person
          ? `${label(person)} is now ${role} in ${tenantId}`
          : `invited ${normaliseEmail(opts.email as string)} as ${role} in ${tenantId} (takes effect at their first sign-in with that verified email)`;
      });
      process.stderr.write(`${message}\n`);
    });

  storeOptions(member.command('list'))
    .description('list memberships: tenant, role, person (or invited email), since')
    .option('--tenant <tenant>', 'only this tenant')
    .action(async (opts: { tenant?: string; dataDir?: string; config?: string }) => {
      const lines = await withStore(opts, async (store) => {
        const list = await store.people.listMemberships(opts.tenant ? { tenantId: opts.tenant } : {});
        const out: string[] = [];
        for (const m of list) {
          const person = m.personId ? await store.people.getPerson(m.personId) : undefined;
          const who = person ? label(person) : `${m.email} (invited)`;
          const state = person?.disabledAt ? 'disabled' : 'active';
          out.push(`${m.tenantId}\t${m.role}\t${who}\t${state}\t${m.createdAt}\t${m.createdBy}`);
        }
        return out;
      });
      for (const line of lines) process.stdout.write(`${line}\n`);
    });

  whoFlags(storeOptions(member.command('remove')))
    .description("remove a person's role in a tenant; their live keys of that tenant with the role are revoked")
    .option('--tenant <tenant>', 'the tenant (omit for the global operator role)')
    .requiredOption('--role <role>', `one of: ${ROLES.join(', ')}`)
    .action(async (opts: MemberFlags) => {
      const role = roleOf(opts.role);
      const tenantId = tenantOf(role, opts.tenant);
      const result = await withStore(opts, async (store) => {
        const person = await findPerson(store, opts);
        const at = new Date().toISOString();
        const byPerson = person
          ? await store.people.removeMembership(tenantId, role, { personId: person.id }, at)
          : { removed: 0, keysRevoked: [] };
        const byEmail =
          opts.email !== undefined
            ? await store.people.removeMembership(tenantId, role, { email: opts.email }, at)
            : { removed: 0, keysRevoked: [] };
        const removed = byPerson.removed + byEmail.removed;
        if (removed > 0) {
          await store.audit.append(
            cliAudit(tenantId === GLOBAL_TENANT ? null : tenantId, 'member_remove', 'removed', {
              role,
              ...(person ? { person: person.id } : { invited_email: opts.email }),
              api_keys_revoked: byPerson.keysRevoked,
            }),
          );
        }
        return { removed, keys: byPerson.keysRevoked.length };
      });
      if (result.removed === 0) {
        throw new PeopleUsageError(`${opts.email ?? opts.subject} has no role ${role} in ${tenantId}`);
      }
      process.stderr.write(`removed role ${role} in ${tenantId}; revoked ${result.keys} API key(s)\n`);
    });

  const person = admin.command('person').description('people who signed in through the IdP');

  storeOptions(person.command('list'))
    .description('list people: id, email (verified or not), subject, issuer, state, last sign-in')
    .action(async (opts: { dataDir?: string; config?: string }) => {
      const people = await withStore(opts, (store) => store.people.listPeople());
      for (const p of people) {
        const email = p.email ? `${p.email}${p.emailVerified ? '' : ' (unverified)'}` : '-';
        const state = p.disabledAt ? `disabled ${p.disabledAt}` : 'active';
        process.stdout.write(`${p.id}\t${email}\t${p.subject}\t${p.issuer}\t${state}\t${p.lastSignInAt ?? '-'}\n`);
      }
    });

  for (const [name, disable] of [
    ['disable', true],
    ['enable', false],
  ] as const) {
    whoFlags(storeOptions(person.command(name)))
      .description(
        disable
          ? 'disable a person: their API keys and browser sessions stop working at once'
          : 'enable a disabled person again (their unexpired, unrevoked keys work again)',
      )
      .action(async (opts: Who & { dataDir?: string; config?: string }) => {
        const who = await withStore(opts, async (store) => {
          const found = await findPerson(store, opts);
          if (!found) throw new PeopleUsageError(`nobody with email ${opts.email} has signed in`);
          await store.people.setDisabled(found.id, disable ? new Date().toISOString() : null);
          await store.audit.append(
            cliAudit(null, disable ? 'person_disable' : 'person_enable', disable ? 'disabled' : 'enabled', {
              person: found.id,
            }),
          );
          return label(found);
        });
        process.stderr.write(`${disable ? 'disabled' : 'enabled'} ${who}\n`);
      });
  }
}

/** `admin api-key create --for-email E --expires-in D`: prints the token (shown once). */
export async function createKeyForPerson(
  store: Store,
  opts: { forEmail: string; expiresIn?: string; role: Role; tenant?: string; label: string },
  audit: Audit,
): Promise<{ token: string; id: string; expiresAt: string; person: string }> {
  if (!opts.expiresIn)
    throw new PeopleUsageError('--for-email needs --expires-in (e.g. 90d): person keys always expire');
  const lifetime = parseDuration(opts.expiresIn);
  if (opts.role === 'operator') throw new PeopleUsageError('person keys are for tenant roles, not operator');
  const tenantId = tenantOf(opts.role, opts.tenant);
  const person = await findPerson(store, { email: opts.forEmail });
  if (!person) throw new PeopleUsageError(`nobody with verified email ${opts.forEmail} has signed in`);
  if (person.disabledAt) throw new PeopleUsageError(`${opts.forEmail} is disabled`);
  const roles = await store.people.rolesIn(person.id, tenantId);
  if (!roles.includes(opts.role)) {
    throw new PeopleUsageError(
      `${opts.forEmail} has no role ${opts.role} in ${tenantId} (their roles: ${roles.join(', ') || 'none'})`,
    );
  }
  const now = new Date();
  const made = await createPersonApiKey(
    store,
    {
      personId: person.id,
      tenantId,
      roles: [opts.role],
      expiresAt: new Date(now.getTime() + lifetime),
      createdVia: 'admin',
      label: opts.label || `CI key for ${opts.forEmail}`,
    },
    now,
  );
  await store.audit.append(
    audit(tenantId, 'api_key_create', 'created', {
      api_key_id: made.record.id,
      role: opts.role,
      person: person.id,
      expires_at: made.record.expiresAt,
      via: 'admin',
    }),
  );
  return { token: made.token, id: made.record.id, expiresAt: made.record.expiresAt as string, person: label(person) };
}
