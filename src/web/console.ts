// The web console for people (docs/oauth.md "The web console"): pending requests to approve or reject, one's own
// API keys, and for tenant admins members, exceptions, trust rules, event subscriptions and the audit log.
// Server-rendered HTML behind the browser session of the IdP sign-in; without a session a GET goes through
// /oauth/start and comes back. Every POST carries the session's CSRF token and answers with a redirect
// (POST-redirect-GET), except minting a key or adding a standard-format subscription, whose secret is shown once in
// the answer itself rather than kept anywhere for a redirect to show.

import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { BrowserSessions, CSRF_FIELD, csrfValid } from '../auth/oidc/sessions.js';
import { isApiError } from '../errors.js';
import { formObject } from '../net/form-fields.js';
import { GLOBAL_TENANT } from '../store/people/people-store.js';
import type { Role } from '../store/records/roles.js';
import { apiKeyRoutes } from './api-key-pages.js';
import {
  type ConsoleContext,
  type ConsoleOptions,
  canSeeAudit,
  canSeeExceptions,
  noMembership,
  personLabel,
  type Visitor,
} from './console-context.js';
import { consolePage, type Frame, html, PAGE_HEADERS, problemPage } from './layout.js';
import { requestRoutes } from './request-pages.js';
import { tenantRoutes } from './tenant-pages.js';
import { trustRoutes } from './trust-pages.js';
import { webhookRoutes } from './webhook-pages.js';

export async function consoleRoutes(app: FastifyInstance, opts: ConsoleOptions): Promise<void> {
  const publicUrl = typeof opts.publicUrl === 'function' ? opts.publicUrl : () => (opts.publicUrl as string) ?? '';
  const secure = (() => {
    try {
      return publicUrl().startsWith('https:');
    } catch {
      return false;
    }
  })();
  const sessions = new BrowserSessions(opts.store.people, secure, opts.now, opts.sessions);
  const visitors = new WeakMap<FastifyRequest, Visitor>();

  const frameOf = (request: FastifyRequest, title: string): Frame => {
    const v = visitors.get(request);
    const notice = (request.query as { notice?: string } | undefined)?.notice;
    return {
      title,
      ...(v && { who: v.label, csrf: v.session.csrfToken }),
      ...(notice && Object.hasOwn(NOTICES, notice) && { notice: NOTICES[notice] }),
    };
  };
  const raw = (reply: FastifyReply, status: number, text: string) =>
    reply.code(status).headers(PAGE_HEADERS).type('text/html; charset=utf-8').send(text);
  const ctx: ConsoleContext = {
    ...opts,
    visitor: (request) => visitors.get(request) as Visitor,
    send: (reply, status, title, body, request) => raw(reply, status, consolePage(frameOf(request, title), body)),
    fail(reply, err, request) {
      if (!isApiError(err)) throw err;
      const title = err.statusCode === 403 ? 'Not allowed' : err.statusCode === 404 ? 'Not found' : 'Refused';
      return raw(reply, err.statusCode, problemPage(frameOf(request, title), `${err.message} (${err.code})`));
    },
    rolesIn(request, reply, tenantId) {
      const roles = visitors.get(request)?.roles.get(tenantId);
      if (roles) return roles;
      raw(reply, 404, problemPage(frameOf(request, 'Not found'), `You have no role in a tenant named ${tenantId}.`));
      return undefined;
    },
    done: (reply, path, notice) => reply.header('cache-control', 'no-store').redirect(`${path}?notice=${notice}`, 303),
  };

  // Forms post urlencoded (the application's root scope parses JSON only).
  app.addContentTypeParser('application/x-www-form-urlencoded', { parseAs: 'string' }, (_req, body, done) => {
    done(null, formObject(body as string));
  });

  // The session (and, for a POST, its CSRF token) before any handler; the person's roles are read once per request.
  app.addHook('preHandler', async (request, reply) => {
    if (!opts.signInConfigured) {
      return raw(
        reply,
        503,
        problemPage(
          { title: 'Console unavailable' },
          'Sign-in through an identity provider is not configured on this service, so the console cannot be used (oauth_not_configured; docs/oauth.md).',
        ),
      );
    }
    const active = await sessions.lookup(request);
    if (!active) {
      if (request.method === 'GET') {
        return reply.redirect(`/oauth/start?return_to=${encodeURIComponent(request.url)}`, 303);
      }
      return raw(reply, 401, problemPage({ title: 'Not signed in' }, 'Your session ended. Sign in again and retry.'));
    }
    if (request.method === 'POST') {
      const form = (request.body ?? {}) as Record<string, unknown>;
      if (!csrfValid(active.session, form[CSRF_FIELD])) {
        return raw(
          reply,
          403,
          problemPage(
            { title: 'Refused' },
            'The form is missing its CSRF token or it is wrong (csrf_token_invalid). Reload the page and try again.',
          ),
        );
      }
    }
    const roles = new Map<string, Role[]>();
    for (const m of await opts.store.people.listMemberships({ personId: active.person.id })) {
      if (m.tenantId === GLOBAL_TENANT) continue;
      roles.set(m.tenantId, [...(roles.get(m.tenantId) ?? []), m.role]);
    }
    visitors.set(request, { ...active, label: personLabel(active.person), roles });
  });

  app.get('/', { schema: { hide: true } }, async (request, reply) => {
    const v = ctx.visitor(request);
    if (v.roles.size === 0) {
      return ctx.send(reply, 200, 'No membership', noMembership(v), request);
    }
    const rows = [...v.roles].map(
      ([tenant, roles]) => html`<tr><th scope="row">${tenant}</th><td>${roles.join(', ')}</td><td>
<a href="/console/requests#tenant-${tenant}">pending requests</a>
${roles.includes('admin') ? html` | <a href="/console/tenants/${tenant}/members">members</a>` : ''}
${roles.includes('admin') ? html` | <a href="/console/tenants/${tenant}/trust">trust rules</a>` : ''}
${roles.includes('admin') ? html` | <a href="/console/tenants/${tenant}/webhooks">event subscriptions</a>` : ''}
${canSeeExceptions(roles) ? html` | <a href="/console/tenants/${tenant}/exceptions">exceptions</a>` : ''}
${canSeeAudit(roles) ? html` | <a href="/console/tenants/${tenant}/audit">audit log</a>` : ''}
</td></tr>`,
    );
    return ctx.send(
      reply,
      200,
      'Overview',
      html`<table><caption>Your tenants</caption>
<thead><tr><th scope="col">Tenant</th><th scope="col">Your roles</th><th scope="col">Pages</th></tr></thead>
<tbody>${rows}</tbody></table>`,
      request,
    );
  });

  await requestRoutes(app, ctx);
  await apiKeyRoutes(app, ctx);
  await tenantRoutes(app, ctx);
  await trustRoutes(app, ctx);
  await webhookRoutes(app, ctx);

  app.setNotFoundHandler((request, reply) =>
    raw(
      reply,
      404,
      problemPage(frameOf(request, 'Not found'), `There is no console page at ${request.url.split('?')[0]}.`),
    ),
  );
}

/** The outcomes a redirect may announce (fixed texts: nothing from the query string is shown). */
const NOTICES: Record<string, string> = {
  approved: 'Approved: the request was signed (or moved to its next stage).',
  rejected: 'Rejected: the requester gets the rejection when they next ask.',
  revoked: 'The API key was revoked.',
  member_added: 'The membership was added.',
  member_removed: "The membership was removed; the person's keys with that role in the tenant were revoked.",
  exception_created: 'The exception was created.',
  exception_revoked: 'The exception was revoked.',
  trust_rule_added: 'The trust rule was added.',
  trust_rule_removed: 'The trust rule was removed; keys it already gave out expire as planned.',
  webhook_added: 'The subscription was added.',
  webhook_removed: 'The subscription was removed, with what it had still to send.',
  webhook_resumed: 'The subscription was resumed: what it had still to send goes out now.',
};
