// The visitor's own API keys: the list (with state and expiry), revoking one, and minting one for CI. A key carries
// one role the person holds in one tenant; lifetimes up to the device-flow lifetime are anyone's, longer ones (up
// to MAX_CI_DAYS) only a tenant admin's: long-lived keys are an explicit admin choice (docs/oauth.md).
import type { FastifyInstance } from 'fastify';
import { createPersonApiKey, rolesOf } from '../auth/api-keys.js';
import { ApiError } from '../errors.js';
import { isRole } from '../store/records/roles.js';
import type { ConsoleContext } from './console-context.js';
import { csrfInput, html, time } from './layout.js';

/** The lifetimes offered, in hours. */
const LIFETIMES: Array<{ hours: number; label: string }> = [
  { hours: 1, label: '1 hour' },
  { hours: 12, label: '12 hours' },
  { hours: 24 * 7, label: '7 days' },
  { hours: 24 * 30, label: '30 days' },
  { hours: 24 * 90, label: '90 days' },
];
const MAX_LABEL = 100;

export async function apiKeyRoutes(app: FastifyInstance, ctx: ConsoleContext): Promise<void> {
  app.get('/keys', { schema: { hide: true } }, async (request, reply) => {
    const v = ctx.visitor(request);
    const now = ctx.now().getTime();
    const keys = (await ctx.store.apiKeys.list()).filter((k) => k.personId === v.person.id).reverse();
    const rows = keys.map((k) => {
      const state = k.revokedAt ? 'revoked' : k.expiresAt && Date.parse(k.expiresAt) <= now ? 'expired' : 'active';
      return html`<tr><td><code>${k.id}</code></td><td>${k.label}</td><td>${k.tenantId ?? '(all tenants)'}</td>
<td>${rolesOf(k).join(', ')}</td><td>${k.createdVia ?? '-'}</td><td>${time(k.createdAt)}</td><td>${time(k.expiresAt)}</td><td>${state}</td>
<td>${state === 'active' ? html`<form method="post" action="/console/keys/revoke" class="inline">${csrfInput(v.session.csrfToken)}<input type="hidden" name="key_id" value="${k.id}"><button type="submit" aria-label="Revoke key ${k.id}">Revoke</button></form>` : ''}</td></tr>`;
    });
    const choices = [...v.roles].flatMap(([tenant, roles]) =>
      roles.map((role) => html`<option value="${tenant} ${role}">${tenant}: ${role}</option>`),
    );
    const mint =
      choices.length === 0
        ? html`<p>You have no role in any tenant, so you cannot make a key.</p>`
        : html`<form method="post" action="/console/keys">
${csrfInput(v.session.csrfToken)}
<fieldset><legend>New API key for CI</legend>
<label for="key-grant">Tenant and role</label>
<select id="key-grant" name="grant" required>${choices}</select>
<label for="key-lifetime">Expires after</label>
<select id="key-lifetime" name="lifetime_hours" aria-describedby="lifetime-help">${LIFETIMES.map(
            (l) => html`<option value="${l.hours}"${l.hours === 12 ? html` selected` : ''}>${l.label}</option>`,
          )}</select>
<p id="lifetime-help">Longer than ${Math.round(ctx.personKeyMs / 3_600_000)} hours needs the admin role in the tenant.</p>
<label for="key-label">Label (where the key is used, e.g. the CI project)</label>
<input id="key-label" name="label" required maxlength="${MAX_LABEL}">
<div><button type="submit">Make the key</button></div>
</fieldset>
</form>`;
    return ctx.send(
      reply,
      200,
      'My API keys',
      html`<table><caption>Your API keys (newest first)</caption>
<thead><tr><th scope="col">Id</th><th scope="col">Label</th><th scope="col">Tenant</th><th scope="col">Roles</th><th scope="col">Made by</th>
<th scope="col">Created</th><th scope="col">Expires</th><th scope="col">State</th><th scope="col">Action</th></tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="9">No keys yet.</td></tr>`}</tbody></table>
${mint}`,
      request,
    );
  });

  app.post('/keys', { schema: { hide: true } }, async (request, reply) => {
    const v = ctx.visitor(request);
    const form = request.body as Record<string, string | undefined>;
    try {
      const [tenantId = '', role = ''] = (form.grant ?? '').split(' ');
      const roles = ctx.rolesIn(request, reply, tenantId);
      if (!roles) return reply;
      if (!isRole(role) || !roles.includes(role)) {
        throw new ApiError('forbidden', `you have no role ${role} in ${tenantId} to put in a key`);
      }
      const hours = Number(form.lifetime_hours);
      if (!LIFETIMES.some((l) => l.hours === hours))
        throw new ApiError('invalid_request', 'choose one of the offered lifetimes');
      const lifetimeMs = hours * 3_600_000;
      if (lifetimeMs > ctx.personKeyMs && !roles.includes('admin')) {
        throw new ApiError(
          'forbidden',
          `keys living longer than ${Math.round(ctx.personKeyMs / 3_600_000)} hours are made by an admin of ${tenantId}`,
        );
      }
      const label = (form.label ?? '').trim();
      if (label === '' || label.length > MAX_LABEL) {
        throw new ApiError('invalid_request', `the label must be 1 to ${MAX_LABEL} characters`);
      }
      const now = ctx.now();
      const made = await createPersonApiKey(
        ctx.store,
        {
          personId: v.person.id,
          tenantId,
          roles: [role],
          expiresAt: new Date(now.getTime() + lifetimeMs),
          createdVia: 'console',
          label,
        },
        now,
        { events: ctx.events, by: `person:${v.person.id}` },
      );
      await ctx.store.audit.append({
        at: now.toISOString(),
        tenantId,
        actor: `person:${v.person.id}`,
        action: 'api_key_create',
        outcome: 'created',
        details: {
          api_key_id: made.record.id,
          role,
          person: v.person.id,
          expires_at: made.record.expiresAt,
          via: 'console',
        },
      });
      // Shown once, in this answer (no-store): the secret is kept nowhere a redirect could show it from.
      return ctx.send(
        reply,
        200,
        'Your new API key',
        html`<p role="status">Copy the key now: it is shown only this once. It acts for ${tenantId} as ${role} until ${time(made.record.expiresAt)}.</p>
<label for="new-key">API key ${made.record.id}</label>
<output id="new-key" class="secret">${made.token}</output>
<p><a href="/console/keys">Back to your keys</a></p>`,
        request,
      );
    } catch (err) {
      return ctx.fail(reply, err, request);
    }
  });

  app.post('/keys/revoke', { schema: { hide: true } }, async (request, reply) => {
    const v = ctx.visitor(request);
    const id = (request.body as Record<string, string | undefined>).key_id ?? '';
    const key = await ctx.store.apiKeys.get(id);
    // Someone else's key looks like no key at all.
    if (!key || key.personId !== v.person.id) {
      return ctx.fail(reply, new ApiError('not_found', `you have no API key ${id}`), request);
    }
    const at = ctx.now().toISOString();
    const revokedEvent = await ctx.events.apiKey('api_key.revoked', { ...key, revokedAt: at }, `person:${v.person.id}`);
    if (await ctx.store.apiKeys.revoke(id, at, [revokedEvent])) {
      await ctx.store.audit.append({
        at,
        tenantId: key.tenantId,
        actor: `person:${v.person.id}`,
        action: 'api_key_revoke',
        outcome: 'revoked',
        details: { api_key_id: id, person: v.person.id, via: 'console' },
      });
    }
    return ctx.done(reply, '/console/keys', 'revoked');
  });
}
