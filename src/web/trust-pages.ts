// A tenant's trust rules in the console (docs/ci.md, "Trust rules"; docs/oauth.md, "The web console"): its admins
// list, add and remove them through the same service module as `signbridge admin trust`, so a rule is checked,
// saved and audited alike. A refused rule is shown on the page again with the reason and what was typed.
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import {
  DEFAULT_KEY_MINUTES,
  DEFAULT_MAX_TOKEN_LIFETIME_S,
  lifetimeText,
  MAX_KEY_MINUTES,
  parseTokenLifetime,
  type TrustRule,
  TrustRuleInvalid,
} from '../auth/workload/trust-rule.js';
import {
  addTrustRule,
  listTrustRules,
  removeTrustRule,
  TrustRuleNotFound,
  trustRuleWarnings,
} from '../auth/workload/trust-rules-service.js';
import { ApiError } from '../errors.js';
import { type ConsoleContext, tenantAdminOf } from './console-context.js';
import { csrfInput, type Html, html, time } from './layout.js';

/** What the add form carries, kept to fill the form again when the rule is refused. */
interface RuleForm {
  issuer: string;
  audience: string;
  conditions: string;
  keyMinutes: string;
  /** As typed: `24h`, `90m`, ... */
  maxTokenLifetime: string;
  /** Claim names separated by spaces or commas; empty: the issuer's default identity. */
  identityClaims: string;
  role: string;
}

const EMPTY_FORM: RuleForm = {
  issuer: '',
  audience: '',
  conditions: '',
  keyMinutes: String(DEFAULT_KEY_MINUTES),
  maxTokenLifetime: lifetimeText(DEFAULT_MAX_TOKEN_LIFETIME_S),
  identityClaims: '',
  role: 'signer',
};

/** The textarea's lines `NAME=PATTERN` (blank lines skipped) -> conditions; the first `=` separates. */
function parseConditionLines(text: string): Record<string, string> {
  const conditions: Record<string, string> = {};
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    if (line === '') continue;
    const at = line.indexOf('=');
    if (at <= 0) throw new TrustRuleInvalid(`each condition is a line NAME=PATTERN; ${JSON.stringify(line)} is not`);
    const name = line.slice(0, at).trim();
    if (Object.hasOwn(conditions, name)) throw new TrustRuleInvalid(`claim ${name} is given twice`);
    conditions[name] = line.slice(at + 1).trim();
  }
  return conditions;
}

function ruleRow(rule: TrustRule, tenant: string, csrf: string): Html {
  const conditions = Object.entries(rule.conditions).map(
    ([name, pattern]) => html`<li><code>${name}</code> = <code>${pattern}</code></li>`,
  );
  const warnings = trustRuleWarnings(rule).map((w) => html`<li>${w}</li>`);
  return html`<tr><td><code>${rule.id}</code></td><td><code>${rule.issuer}</code></td>
<td>${rule.audience ?? "the service's public URL"}</td><td><ul>${conditions}</ul></td><td>${rule.role}</td>
<td>${rule.keyMinutes} min<br>tokens living up to ${lifetimeText(rule.maxTokenLifetimeS)}<br>velocity per ${rule.identityClaims ? rule.identityClaims.join(' + ') : 'the default identity'}</td><td>${time(rule.createdAt)}<br>${rule.createdBy}</td>
<td>${warnings.length > 0 ? html`<ul>${warnings}</ul>` : 'none'}</td>
<td><form method="post" action="/console/tenants/${tenant}/trust/remove" class="inline">${csrfInput(csrf)}
<input type="hidden" name="rule_id" value="${rule.id}"><button type="submit" aria-label="Remove trust rule ${rule.id}">Remove</button></form></td></tr>`;
}

export async function trustRoutes(app: FastifyInstance, ctx: ConsoleContext): Promise<void> {
  const adminOf = (request: FastifyRequest, reply: FastifyReply, what: string) =>
    tenantAdminOf(ctx, request, reply, what);
  const actor = (request: FastifyRequest) => `person:${ctx.visitor(request).person.id}`;

  const page = async (
    request: FastifyRequest,
    reply: FastifyReply,
    tenant: string,
    status: number,
    form: RuleForm,
    problem?: string,
  ) => {
    const csrf = ctx.visitor(request).session.csrfToken;
    const rules = await listTrustRules(ctx.store, tenant);
    const rows = rules.map((r) => ruleRow(r, tenant, csrf));
    return ctx.send(
      reply,
      status,
      `Trust rules of ${tenant}`,
      html`<p>A CI job whose ID token meets every condition of one rule gets a short-lived signer key of ${tenant} from
the token exchange (<code>POST /oauth/token</code>). Rules are tried oldest first.</p>
<table><caption>Trust rules</caption>
<thead><tr><th scope="col">Id</th><th scope="col">Issuer</th><th scope="col">Audience</th><th scope="col">Conditions (all must hold)</th>
<th scope="col">Role</th><th scope="col">Key lifetime</th><th scope="col">Created</th><th scope="col">Warnings</th><th scope="col">Action</th></tr></thead>
<tbody>${rows.length > 0 ? rows : html`<tr><td colspan="9">No trust rules: no CI job can get a key of ${tenant}.</td></tr>`}</tbody></table>
${problem ? html`<p class="problem" role="alert" id="trust-problem">The rule was not saved: ${problem}</p>` : ''}
<form method="post" action="/console/tenants/${tenant}/trust">
${csrfInput(csrf)}
<fieldset><legend>Add a trust rule</legend>
<label for="trust-issuer">Issuer (the exact <code>iss</code>, such as https://token.actions.githubusercontent.com)</label>
<input id="trust-issuer" name="issuer" type="url" required maxlength="512" size="60" value="${form.issuer}">
<label for="trust-audience">Audience (empty: the service's public URL)</label>
<input id="trust-audience" name="audience" maxlength="512" size="60" value="${form.audience}">
<label for="trust-conditions">Conditions, one NAME=PATTERN per line (exact value, or <code>*</code> within a segment and <code>**</code> across <code>/</code>; one must pin the repository, project or subject)</label>
<textarea id="trust-conditions" name="conditions" rows="5" cols="60" required>${form.conditions}</textarea>
<label for="trust-minutes">Key lifetime in minutes (1 to ${MAX_KEY_MINUTES})</label>
<input id="trust-minutes" name="key_minutes" type="number" min="1" max="${MAX_KEY_MINUTES}" required value="${form.keyMinutes}">
<label for="trust-token-lifetime">Max token lifetime, exp - iat (such as 24h, 90m, 30d; 1m to 3650d)</label>
<input id="trust-token-lifetime" name="max_token_lifetime" maxlength="16" size="10" required value="${form.maxTokenLifetime}">
<label for="trust-identity">Velocity identity claims, separated by spaces (empty: the repository and workflow, or sub)</label>
<input id="trust-identity" name="identity_claims" maxlength="1200" size="60" value="${form.identityClaims}">
<input type="hidden" name="role" value="${form.role}">
<p>Keys from the exchange get the signer role (approving and administering stay with people).</p>
<div><button type="submit">Add the rule</button></div>
</fieldset>
</form>`,
      request,
    );
  };

  app.get('/tenants/:tenant/trust', { schema: { hide: true } }, async (request, reply) => {
    const tenant = adminOf(request, reply, 'The trust rules page');
    if (!tenant) return reply;
    return page(request, reply, tenant, 200, EMPTY_FORM);
  });

  app.post('/tenants/:tenant/trust', { schema: { hide: true } }, async (request, reply) => {
    const tenant = adminOf(request, reply, 'Adding trust rules');
    if (!tenant) return reply;
    const body = request.body as Record<string, string | undefined>;
    const form: RuleForm = {
      issuer: (body.issuer ?? '').trim(),
      audience: (body.audience ?? '').trim(),
      conditions: body.conditions ?? '',
      keyMinutes: (body.key_minutes ?? '').trim(),
      // A post without the field (an older form) keeps the default.
      maxTokenLifetime: (body.max_token_lifetime ?? lifetimeText(DEFAULT_MAX_TOKEN_LIFETIME_S)).trim(),
      identityClaims: (body.identity_claims ?? '').trim(),
      role: body.role ?? 'signer',
    };
    try {
      if (!/^\d{1,6}$/.test(form.keyMinutes))
        throw new TrustRuleInvalid('the key lifetime must be a whole number of minutes');
      const identityClaims = form.identityClaims.split(/[\s,]+/).filter((name) => name !== '');
      await addTrustRule(
        ctx.store,
        {
          tenantId: tenant,
          issuer: form.issuer,
          audience: form.audience === '' ? null : form.audience,
          conditions: parseConditionLines(form.conditions),
          role: form.role,
          keyMinutes: Number(form.keyMinutes),
          maxTokenLifetimeS: parseTokenLifetime(form.maxTokenLifetime),
          ...(identityClaims.length > 0 && { identityClaims }),
        },
        { actor: actor(request), via: 'console', now: ctx.now(), events: ctx.events },
      );
    } catch (err) {
      if (!(err instanceof TrustRuleInvalid)) throw err;
      return page(request, reply, tenant, 400, form, err.message);
    }
    return ctx.done(reply, `/console/tenants/${tenant}/trust`, 'trust_rule_added');
  });

  app.post('/tenants/:tenant/trust/remove', { schema: { hide: true } }, async (request, reply) => {
    const tenant = adminOf(request, reply, 'Removing trust rules');
    if (!tenant) return reply;
    const id = (request.body as Record<string, string | undefined>).rule_id ?? '';
    try {
      await removeTrustRule(ctx.store, id, {
        actor: actor(request),
        via: 'console',
        now: ctx.now(),
        tenantId: tenant,
        events: ctx.events,
      });
    } catch (err) {
      if (!(err instanceof TrustRuleNotFound)) throw err;
      return ctx.fail(reply, new ApiError('not_found', err.message), request);
    }
    return ctx.done(reply, `/console/tenants/${tenant}/trust`, 'trust_rule_removed');
  });
}
