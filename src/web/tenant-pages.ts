// A tenant's members (admins add and remove roles), its policy exceptions (admins create and revoke; approvers and
// security reviewers read them, as list_exceptions allows) and its recent audit entries. The same store calls as
// `signbridge admin member` and the exception actions, so removing a role revokes the person's keys with it.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import { normaliseEmail } from '../store/people/people-store.js';
import { isRole, ROLES, type Role } from '../store/records/roles.js';
import { ConflictError } from '../store/store.js';
import { type ConsoleContext, canSeeAudit, canSeeExceptions, personLabel } from './console-context.js';
import { csrfInput, type Html, html, time } from './layout.js';

const TENANT_ROLES = ROLES.filter((r) => r !== 'operator');
const AUDIT_ROWS = 50;

type Params = { tenant: string };

export async function tenantRoutes(app: FastifyInstance, ctx: ConsoleContext): Promise<void> {
  /** The visitor's roles in the tenant if `allowed`, else a 404 (no role there) or 403 page, and undefined. */
  const need = (
    request: FastifyRequest,
    reply: FastifyReply,
    allowed: (roles: readonly Role[]) => boolean,
    what: string,
  ) => {
    const tenant = (request.params as Params).tenant;
    const roles = ctx.rolesIn(request, reply, tenant);
    if (!roles) return undefined;
    if (allowed(roles)) return { tenant, roles };
    ctx.fail(
      reply,
      new ApiError('forbidden', `${what} of ${tenant} needs another role; you have ${roles.join(', ')}`),
      request,
    );
    return undefined;
  };
  const isAdmin = (roles: readonly Role[]) => roles.includes('admin');
  const actor = (request: FastifyRequest) => `person:${ctx.visitor(request).person.id}`;

  app.get('/tenants/:tenant/members', { schema: { hide: true } }, async (request, reply) => {
    const ok = need(request, reply, isAdmin, 'The members page');
    if (!ok) return reply;
    const csrf = ctx.visitor(request).session.csrfToken;
    const rows: Html[] = [];
    for (const m of await ctx.store.people.listMemberships({ tenantId: ok.tenant })) {
      const person = m.personId ? await ctx.store.people.getPerson(m.personId) : undefined;
      const who = person ? personLabel(person) : `${m.email} (invited)`;
      rows.push(html`<tr><td>${who}</td><td>${m.role}</td><td>${person?.disabledAt ? 'disabled' : person ? 'active' : 'not signed in yet'}</td>
<td>${time(m.createdAt)}</td><td>${m.createdBy}</td>
<td><form method="post" action="/console/tenants/${ok.tenant}/members/remove" class="inline">${csrfInput(csrf)}
<input type="hidden" name="membership_id" value="${m.id}"><button type="submit" aria-label="Remove ${m.role} from ${who}">Remove</button></form></td></tr>`);
    }
    return ctx.send(
      reply,
      200,
      `Members of ${ok.tenant}`,
      html`<table><caption>Memberships</caption>
<thead><tr><th scope="col">Person</th><th scope="col">Role</th><th scope="col">State</th><th scope="col">Since</th><th scope="col">Added by</th><th scope="col">Action</th></tr></thead>
<tbody>${rows}</tbody></table>
<form method="post" action="/console/tenants/${ok.tenant}/members">
${csrfInput(csrf)}
<fieldset><legend>Add a member</legend>
<label for="member-email">Email (verified at the identity provider; someone who has not signed in yet is invited)</label>
<input id="member-email" name="email" type="email" required>
<label for="member-role">Role</label>
<select id="member-role" name="role">${TENANT_ROLES.map((r) => html`<option>${r}</option>`)}</select>
<div><button type="submit">Add</button></div>
</fieldset>
</form>`,
      request,
    );
  });

  app.post('/tenants/:tenant/members', { schema: { hide: true } }, async (request, reply) => {
    const ok = need(request, reply, isAdmin, 'Adding members');
    if (!ok) return reply;
    const form = request.body as Record<string, string | undefined>;
    try {
      const role = form.role ?? '';
      if (!isRole(role) || role === 'operator') throw new ApiError('invalid_request', `no tenant role ${role}`);
      const email = (form.email ?? '').trim();
      if (!/^[^\s@]+@[^\s@]+$/.test(email)) throw new ApiError('invalid_request', 'enter an email address');
      const verified = (await ctx.store.people.findByEmail(email)).filter((p) => p.emailVerified);
      if (verified.length > 1) {
        throw new ApiError(
          'invalid_request',
          `${email} belongs to ${verified.length} people; use signbridge admin member add --subject`,
        );
      }
      const person = verified[0];
      try {
        await ctx.store.people.addMembership({
          tenantId: ok.tenant,
          role,
          personId: person?.id ?? null,
          email: person ? null : normaliseEmail(email),
          createdAt: ctx.now().toISOString(),
          createdBy: actor(request),
        });
      } catch (err) {
        if (err instanceof ConflictError) throw new ApiError('invalid_request', err.message);
        throw err;
      }
      await ctx.store.audit.append({
        at: ctx.now().toISOString(),
        tenantId: ok.tenant,
        actor: actor(request),
        action: 'member_add',
        outcome: 'created',
        details: {
          role,
          ...(person ? { person: person.id } : { invited_email: normaliseEmail(email) }),
          via: 'console',
        },
      });
      return ctx.done(reply, `/console/tenants/${ok.tenant}/members`, 'member_added');
    } catch (err) {
      return ctx.fail(reply, err, request);
    }
  });

  app.post('/tenants/:tenant/members/remove', { schema: { hide: true } }, async (request, reply) => {
    const ok = need(request, reply, isAdmin, 'Removing members');
    if (!ok) return reply;
    const id = (request.body as Record<string, string | undefined>).membership_id;
    const m = (await ctx.store.people.listMemberships({ tenantId: ok.tenant })).find((x) => x.id === id);
    if (!m) return ctx.fail(reply, new ApiError('not_found', `${ok.tenant} has no such membership`), request);
    const at = ctx.now().toISOString();
    const result = await ctx.store.people.removeMembership(
      ok.tenant,
      m.role,
      m.personId ? { personId: m.personId } : { email: m.email as string },
      at,
    );
    await ctx.store.audit.append({
      at,
      tenantId: ok.tenant,
      actor: actor(request),
      action: 'member_remove',
      outcome: 'removed',
      details: {
        role: m.role,
        ...(m.personId ? { person: m.personId } : { invited_email: m.email }),
        api_keys_revoked: result.keysRevoked,
        via: 'console',
      },
    });
    return ctx.done(reply, `/console/tenants/${ok.tenant}/members`, 'member_removed');
  });

  app.get('/tenants/:tenant/exceptions', { schema: { hide: true } }, async (request, reply) => {
    const ok = need(request, reply, canSeeExceptions, 'The exceptions page');
    if (!ok) return reply;
    const csrf = ctx.visitor(request).session.csrfToken;
    const admin = isAdmin(ok.roles);
    const list = await ctx.exceptions.list(ok.tenant);
    const rows = list.map((e) => {
      const status = ctx.exceptions.status(e);
      return html`<tr><td><code>${e.id}</code></td><td>${e.vulnId}</td><td>${e.project ?? 'any'}</td><td>${e.artifactType ?? 'any'}</td>
<td>${e.reason}</td><td>${e.createdBy}</td><td>${time(e.expiresAt)}</td><td>${status}</td>
<td>${admin && status === 'active' ? html`<form method="post" action="/console/tenants/${ok.tenant}/exceptions/revoke" class="inline">${csrfInput(csrf)}<input type="hidden" name="exception_id" value="${e.id}"><button type="submit" aria-label="Revoke exception ${e.id}">Revoke</button></form>` : ''}</td></tr>`;
    });
    const create = admin
      ? html`<form method="post" action="/console/tenants/${ok.tenant}/exceptions">
${csrfInput(csrf)}
<fieldset><legend>New exception (excuses one vulnerability in SBOM checks)</legend>
<label for="exc-vuln">Vulnerability id (e.g. GHSA-xxxx or CVE-...)</label>
<input id="exc-vuln" name="vuln_id" required maxlength="100">
<label for="exc-reason">Reason</label>
<input id="exc-reason" name="reason" required maxlength="500">
<label for="exc-days">Expires after (days)</label>
<input id="exc-days" name="expires_days" type="number" min="1" max="365" value="30" required>
<label for="exc-project">Only for project (empty: every project)</label>
<input id="exc-project" name="project" maxlength="200">
<label for="exc-type">Only for artifact type (empty: every type)</label>
<input id="exc-type" name="artifact_type" maxlength="100">
<div><button type="submit">Create</button></div>
</fieldset>
</form>`
      : html`<p>Creating and revoking exceptions needs the admin role in ${ok.tenant}.</p>`;
    return ctx.send(
      reply,
      200,
      `Exceptions of ${ok.tenant}`,
      html`<table><caption>Policy exceptions</caption>
<thead><tr><th scope="col">Id</th><th scope="col">Vulnerability</th><th scope="col">Project</th><th scope="col">Artifact type</th><th scope="col">Reason</th>
<th scope="col">Created by</th><th scope="col">Expires</th><th scope="col">State</th><th scope="col">Action</th></tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="9">No exceptions.</td></tr>`}</tbody></table>
${create}`,
      request,
    );
  });

  app.post('/tenants/:tenant/exceptions', { schema: { hide: true } }, async (request, reply) => {
    const ok = need(request, reply, isAdmin, 'Creating exceptions');
    if (!ok) return reply;
    const form = request.body as Record<string, string | undefined>;
    try {
      const days = Number(form.expires_days);
      if (!Number.isInteger(days) || days < 1)
        throw new ApiError('invalid_exception', 'expiry must be a whole number of days');
      const vulnId = (form.vuln_id ?? '').trim();
      const reason = (form.reason ?? '').trim();
      if (vulnId === '' || reason === '')
        throw new ApiError('invalid_exception', 'a vulnerability id and a reason are needed');
      const project = (form.project ?? '').trim();
      const artifactType = (form.artifact_type ?? '').trim();
      await ctx.exceptions.create(ok.tenant, actor(request), {
        vulnId,
        reason,
        expiresAt: new Date(ctx.now().getTime() + days * 86_400_000).toISOString(),
        ...(project !== '' && { project }),
        ...(artifactType !== '' && { artifactType }),
      });
      return ctx.done(reply, `/console/tenants/${ok.tenant}/exceptions`, 'exception_created');
    } catch (err) {
      return ctx.fail(reply, err, request);
    }
  });

  app.post('/tenants/:tenant/exceptions/revoke', { schema: { hide: true } }, async (request, reply) => {
    const ok = need(request, reply, isAdmin, 'Revoking exceptions');
    if (!ok) return reply;
    try {
      await ctx.exceptions.revoke(
        ok.tenant,
        (request.body as Record<string, string>).exception_id ?? '',
        actor(request),
      );
      return ctx.done(reply, `/console/tenants/${ok.tenant}/exceptions`, 'exception_revoked');
    } catch (err) {
      return ctx.fail(reply, err, request);
    }
  });

  app.get('/tenants/:tenant/audit', { schema: { hide: true } }, async (request, reply) => {
    const ok = need(request, reply, canSeeAudit, 'The audit log');
    if (!ok) return reply;
    const entries = await ctx.store.audit.recent(ok.tenant, AUDIT_ROWS);
    const rows = entries.map(
      (
        e,
      ) => html`<tr><td>${e.seq}</td><td>${time(e.at)}</td><td>${e.actor}</td><td>${e.action}</td><td>${e.outcome}</td>
<td><code>${JSON.stringify(e.details)}</code></td></tr>`,
    );
    return ctx.send(
      reply,
      200,
      `Audit log of ${ok.tenant}`,
      html`<table><caption>The ${AUDIT_ROWS} most recent entries, newest first</caption>
<thead><tr><th scope="col">Seq</th><th scope="col">At</th><th scope="col">Actor</th><th scope="col">Action</th><th scope="col">Outcome</th><th scope="col">Details</th></tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="6">No entries.</td></tr>`}</tbody></table>`,
      request,
    );
  });
}
