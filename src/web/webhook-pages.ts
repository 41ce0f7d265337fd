// A tenant's event subscriptions in the console (docs/events.md, "Subscriptions"; docs/oauth.md, "The web console"):
// its admins list them with their state and newest deliveries, add, remove and resume them through the same service
// module as `signbridge admin webhook`, so a subscription is checked, saved and audited alike. The URL is checked
// with the service's webhook settings (webhooks.allow); a refused one is shown on the page again with the reason and
// nothing saved. A standard-format subscription's secret is shown once, in the answer to the form, and never again.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import {
  addSubscription,
  displayUrl,
  removeSubscription,
  resumeSubscription,
  SubscriptionInvalid,
  SubscriptionNotFound,
} from '../events/subscription-service.js';
import { checkSubscriptionUrl } from '../events/webhook-sender.js';
import { type DeliveryRecord, SUBSCRIPTION_FORMATS, type SubscriptionRecord } from '../store/events/event-store.js';
import { EVENT_KINDS } from '../store/records/event-kinds.js';
import { type ConsoleContext, tenantAdminOf } from './console-context.js';
import { csrfInput, type Html, html, time } from './layout.js';

/** Kinds a subscription may ask for: webhook.test is sent on request to one subscription, never subscribed to. */
export const SUBSCRIBABLE_KINDS = EVENT_KINDS.filter((k) => k !== 'webhook.test');
/** Newest deliveries shown per subscription. */
const DELIVERIES_SHOWN = 5;

const FORMAT_LABELS: Record<(typeof SUBSCRIPTION_FORMATS)[number], string> = {
  standard: 'standard: Standard Webhooks, signed, to your own receiver',
  slack: 'slack: a Slack incoming webhook',
  teams: 'teams: a Microsoft Teams Workflows webhook',
  email: 'email: mail through the SMTP server (URL mailto:ADDRESS)',
};

/** What the add form carries, kept to fill the form again when the subscription is refused. */
interface SubscriptionForm {
  url: string;
  format: string;
  kinds: ReadonlySet<string>;
}

const EMPTY_FORM: SubscriptionForm = { url: '', format: 'standard', kinds: new Set() };

/** A checkbox per kind, each its own field (the console's form parser keeps one value per name). */
const kindField = (kind: string) => `event_${kind}`;

function subscriptionRow(s: SubscriptionRecord, tenant: string, csrf: string): Html {
  const state = s.pausedAt
    ? html`<strong>paused</strong> since ${time(s.pausedAt)}: ${s.pauseReason ?? 'no reason given'}`
    : html`active`;
  const lastError = s.lastError ? html`${time(s.lastErrorAt)}: ${s.lastError}` : html`none`;
  const resume = s.pausedAt
    ? html`<form method="post" action="/console/tenants/${tenant}/webhooks/resume" class="inline">${csrfInput(csrf)}
<input type="hidden" name="subscription_id" value="${s.id}"><button type="submit" aria-label="Resume subscription ${s.id}">Resume</button></form> `
    : '';
  return html`<tr id="sub-${s.id}"><td><code>${s.id}</code></td><td>${s.format}</td><td><code>${displayUrl(s.url)}</code></td>
<td>${s.eventKinds ? s.eventKinds.join(', ') : 'all'}</td><td>${state}</td>
<td>${s.lastDeliveredAt ? time(s.lastDeliveredAt) : 'never'}</td><td>${lastError}</td>
<td>${time(s.createdAt)}<br>${s.createdBy}</td>
<td>${resume}<form method="post" action="/console/tenants/${tenant}/webhooks/remove" class="inline">${csrfInput(csrf)}
<input type="hidden" name="subscription_id" value="${s.id}"><button type="submit" aria-label="Remove subscription ${s.id}">Remove</button></form></td></tr>`;
}

function deliveriesTable(s: SubscriptionRecord, deliveries: readonly DeliveryRecord[]): Html {
  const rows = deliveries.map(
    (d) => html`<tr><td>${d.eventType}<br><code>${d.eventId}</code></td><td>${d.status}</td><td>${d.attempts}</td>
<td>${d.lastStatus ?? '-'}</td><td>${d.lastError ?? 'none'}</td><td>${time(d.createdAt)}</td><td>${time(d.deliveredAt)}</td></tr>`,
  );
  return html`<table id="deliveries-${s.id}"><caption>Newest deliveries of ${s.id}</caption>
<thead><tr><th scope="col">Event</th><th scope="col">Status</th><th scope="col">Attempts</th><th scope="col">Last HTTP status</th>
<th scope="col">Last error</th><th scope="col">Event written</th><th scope="col">Delivered</th></tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="7">No deliveries yet.</td></tr>`}</tbody></table>`;
}

export async function webhookRoutes(app: FastifyInstance, ctx: ConsoleContext): Promise<void> {
  const adminOf = (request: FastifyRequest, reply: FastifyReply, what: string) =>
    tenantAdminOf(ctx, request, reply, what);
  const by = (request: FastifyRequest, tenantId: string) => ({
    actor: `person:${ctx.visitor(request).person.id}`,
    via: 'console' as const,
    now: ctx.now(),
    tenantId,
  });
  const path = (tenant: string) => `/console/tenants/${tenant}/webhooks`;

  const page = async (
    request: FastifyRequest,
    reply: FastifyReply,
    tenant: string,
    status: number,
    form: SubscriptionForm,
    problem?: string,
  ) => {
    const csrf = ctx.visitor(request).session.csrfToken;
    const subscriptions = await ctx.store.events.listSubscriptions(tenant);
    const deliveries = await Promise.all(
      subscriptions.map((s) => ctx.store.events.listDeliveries(s.id, DELIVERIES_SHOWN)),
    );
    const rows = subscriptions.map((s) => subscriptionRow(s, tenant, csrf));
    const formats = SUBSCRIPTION_FORMATS.map(
      (f) => html`<option value="${f}"${f === form.format ? html` selected` : ''}>${FORMAT_LABELS[f]}</option>`,
    );
    const kinds = SUBSCRIBABLE_KINDS.map(
      (k) =>
        html`<label><input type="checkbox" name="${kindField(k)}" value="1"${form.kinds.has(k) ? html` checked` : ''}> ${k}</label>`,
    );
    return ctx.send(
      reply,
      status,
      `Event subscriptions of ${tenant}`,
      html`<p>Each subscription gets the events of ${tenant} it asks for, at its URL and in its format (docs/events.md).
A subscription that keeps failing is paused; resume it once its receiver works again.</p>
<table><caption>Subscriptions</caption>
<thead><tr><th scope="col">Id</th><th scope="col">Format</th><th scope="col">URL</th><th scope="col">Events</th><th scope="col">State</th>
<th scope="col">Last delivery</th><th scope="col">Last error</th><th scope="col">Created</th><th scope="col">Action</th></tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="9">No subscriptions: the events of ${tenant} are sent nowhere.</td></tr>`}</tbody></table>
${subscriptions.map((s, i) => deliveriesTable(s, deliveries[i] ?? []))}
${problem ? html`<p class="problem" role="alert" id="webhook-problem">The subscription was not saved: ${problem}</p>` : ''}
<form method="post" action="${path(tenant)}">
${csrfInput(csrf)}
<fieldset><legend>Add a subscription</legend>
<label for="webhook-url">URL (https://..., or mailto:ADDRESS for the email format)</label>
<input id="webhook-url" name="url" type="url" required maxlength="2048" size="70" value="${form.url}">
<label for="webhook-format">Format</label>
<select id="webhook-format" name="format">${formats}</select>
<fieldset><legend>Events (none checked: every event)</legend>${kinds}</fieldset>
<div><button type="submit">Add the subscription</button></div>
</fieldset>
</form>`,
      request,
    );
  };

  app.get('/tenants/:tenant/webhooks', { schema: { hide: true } }, async (request, reply) => {
    const tenant = adminOf(request, reply, 'The event subscriptions page');
    if (!tenant) return reply;
    return page(request, reply, tenant, 200, EMPTY_FORM);
  });

  app.post('/tenants/:tenant/webhooks', { schema: { hide: true } }, async (request, reply) => {
    const tenant = adminOf(request, reply, 'Adding event subscriptions');
    if (!tenant) return reply;
    const body = request.body as Record<string, string | undefined>;
    const form: SubscriptionForm = {
      url: (body.url ?? '').trim(),
      format: body.format ?? 'standard',
      kinds: new Set(SUBSCRIBABLE_KINDS.filter((k) => body[kindField(k)] !== undefined)),
    };
    let added: Awaited<ReturnType<typeof addSubscription>>;
    try {
      added = await addSubscription(
        ctx.store,
        { tenantId: tenant, url: form.url, format: form.format, eventKinds: [...form.kinds] },
        by(request, tenant),
        async (url) => {
          const checked = await checkSubscriptionUrl(url, ctx.webhooks);
          return checked.ok ? undefined : checked.error;
        },
      );
    } catch (err) {
      if (!(err instanceof SubscriptionInvalid)) throw err;
      return page(request, reply, tenant, 400, form, err.message);
    }
    const { subscription, secret } = added;
    if (!secret) return ctx.done(reply, path(tenant), 'webhook_added');
    // Shown once, in this answer (no-store): the secret is kept nowhere a redirect could show it from.
    return ctx.send(
      reply,
      200,
      'Your new subscription',
      html`<p role="status">The subscription ${subscription.id} was added. Copy its signing secret now:
it is shown only this once. The receiver at <code>${displayUrl(subscription.url)}</code> checks each delivery's <code>webhook-signature</code> with it.</p>
<label for="new-secret">Signing secret of ${subscription.id}</label>
<output id="new-secret" class="secret">${secret}</output>
<p><a href="${path(tenant)}">Back to the subscriptions of ${tenant}</a></p>`,
      request,
    );
  });

  const change = (action: 'remove' | 'resume') =>
    app.post(`/tenants/:tenant/webhooks/${action}`, { schema: { hide: true } }, async (request, reply) => {
      const tenant = adminOf(request, reply, action === 'remove' ? 'Removing subscriptions' : 'Resuming subscriptions');
      if (!tenant) return reply;
      const id = (request.body as Record<string, string | undefined>).subscription_id ?? '';
      try {
        if (action === 'remove') await removeSubscription(ctx.store, id, by(request, tenant));
        else await resumeSubscription(ctx.store, id, by(request, tenant));
      } catch (err) {
        if (!(err instanceof SubscriptionNotFound)) throw err;
        return ctx.fail(reply, new ApiError('not_found', err.message), request);
      }
      return ctx.done(reply, path(tenant), action === 'remove' ? 'webhook_removed' : 'webhook_resumed');
    });
  change('remove');
  change('resume');
}
