// Pending signing requests of the visitor's tenants, with what a reviewer needs, and the approve/reject form.
// The decision goes through SigningService.decide, the same path as approve_sign: its role check per stage, its
// four-eyes rule (the person who asked never decides, with any key or from the console), its policy re-check.
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../errors.js';
import { parseSbom } from '../policy/sbom/parse-sbom.js';
import { requestAnchor } from '../signing/held-description.js';
import type { PolicyContext } from '../signing/signing-service.js';
import type { Role } from '../store/records/roles.js';
import type { ApiKeyRecord, PendingRequestRecord } from '../store/store.js';
import type { ConsoleContext } from './console-context.js';
import { canSeeExceptions, noMembership } from './console-context.js';
import { csrfInput, type Html, html, humanDuration, time } from './layout.js';

const MAX_REASON = 500;

export async function requestRoutes(app: FastifyInstance, ctx: ConsoleContext): Promise<void> {
  app.get('/requests', { schema: { hide: true } }, async (request, reply) => {
    const v = ctx.visitor(request);
    if (v.roles.size === 0) return ctx.send(reply, 200, 'Pending requests', noMembership(v), request);
    const sections: Html[] = [];
    for (const [tenant, roles] of v.roles) {
      // Least privilege: what others asked to sign is for those who review it (and the tenant's admins).
      if (!canSeeExceptions(roles)) {
        sections.push(html`<section aria-labelledby="tenant-${tenant}"><h2 id="tenant-${tenant}">${tenant}</h2>
<p>Pending requests are shown to approvers, security reviewers and admins of ${tenant}; you are ${roles.join(', ')}.</p></section>`);
        continue;
      }
      const pending = await ctx.store.requests.listPending(tenant);
      const items: Html[] = [];
      for (const r of pending) items.push(await requestView(ctx, r, roles, v.session.csrfToken));
      sections.push(html`<section aria-labelledby="tenant-${tenant}">
<h2 id="tenant-${tenant}">${tenant}</h2>
${items.length === 0 ? html`<p>No request of ${tenant} waits for a decision.</p>` : items}
</section>`);
    }
    return ctx.send(reply, 200, 'Pending requests', html`${sections}`, request);
  });

  app.post('/requests/decide', { schema: { hide: true } }, async (request, reply) => {
    const v = ctx.visitor(request);
    const form = request.body as Record<string, string | undefined>;
    try {
      const tenantId = form.tenant_id ?? '';
      const roles = ctx.rolesIn(request, reply, tenantId);
      if (!roles) return reply;
      const decision = form.decision;
      if (decision !== 'approve' && decision !== 'reject') {
        throw new ApiError('invalid_request', 'choose Approve or Reject');
      }
      const reason = (form.reason ?? '').trim();
      if (decision === 'reject' && reason === '') {
        throw new ApiError('invalid_request', 'a rejection needs a reason: the requester reads it');
      }
      if (reason.length > MAX_REASON)
        throw new ApiError('invalid_request', `the reason is longer than ${MAX_REASON} characters`);
      const [first] = roles;
      await ctx.signing.decide(
        tenantId,
        form.request_id ?? '',
        // The person decides, not a key: `person:<id>` is the actor in the audit log and the decision record.
        { id: `person:${v.person.id}`, role: first as Role, roles, personId: v.person.id },
        decision,
        reason === '' ? undefined : reason,
      );
      return ctx.done(reply, '/console/requests', decision === 'approve' ? 'approved' : 'rejected');
    } catch (err) {
      return ctx.fail(reply, err, request);
    }
  });
}

async function requestView(
  ctx: ConsoleContext,
  r: PendingRequestRecord,
  roles: readonly Role[],
  csrf: string,
): Promise<Html> {
  const inputs = JSON.parse(r.inputs) as PolicyContext;
  const requesterKey = await ctx.store.apiKeys.get(r.requester);
  const requesterPerson = requesterKey?.personId ? await ctx.store.people.getPerson(requesterKey.personId) : undefined;
  const requester = requesterPerson?.email
    ? `${requesterPerson.email} (key ${r.requester})`
    : `${requesterKey?.label ?? 'API key'} (key ${r.requester})`;
  const now = ctx.now().getTime();
  const needed: Role = r.status === 'pending_approval' ? 'approver' : 'security_reviewer';
  const artifact = [inputs.artifactType, inputs.artifactVersion].filter(Boolean).join(' ') || '-';
  const id = requestAnchor(r.id);
  const form = roles.includes(needed)
    ? html`<form method="post" action="/console/requests/decide">
${csrfInput(csrf)}
<input type="hidden" name="tenant_id" value="${r.tenantId}">
<input type="hidden" name="request_id" value="${r.id}">
<label for="${id}-reason">Reason (required to reject; recorded in the audit log)</label>
<textarea id="${id}-reason" name="reason" rows="2" cols="60" maxlength="${MAX_REASON}"></textarea>
<div><button type="submit" name="decision" value="approve">Approve ${r.id}</button>
<button type="submit" name="decision" value="reject">Reject ${r.id}</button></div>
</form>`
    : html`<p>Deciding this stage needs the role <strong>${needed}</strong> in ${r.tenantId}; you have ${roles.join(', ')}.</p>`;
  return html`<article aria-labelledby="${id}">
<h3 id="${id}">Request ${r.id}</h3>
<dl>
<dt>Requested by</dt><dd>${requester}</dd>
${workloadView(inputs, requesterKey)}
<dt>Project</dt><dd>${inputs.project ?? '-'}</dd>
<dt>Environment</dt><dd>${inputs.environment ?? '-'}</dd>
<dt>Artifact</dt><dd>${artifact}</dd>
${digestView(r)}
<dt>Held by rule</dt><dd><code>${r.rule}</code>: ${r.reason}</dd>
<dt>SBOM</dt><dd>${sbomSummary(inputs.sbom)}</dd>
<dt>Waiting for</dt><dd>${r.status === 'pending_approval' ? 'approval' : 'security review'}${r.nextStages.length > 0 ? `, then ${r.nextStages.join(', ')}` : ''}</dd>
${r.decisions.length > 0 ? html`<dt>Earlier decisions</dt><dd>${r.decisions.map((d) => `${d.stage}: ${d.decision} by ${d.by}${d.reason ? ` (${d.reason})` : ''}`).join('; ')}</dd>` : ''}
<dt>Age</dt><dd>${humanDuration(now - Date.parse(r.createdAt))} (${time(r.createdAt)})</dd>
<dt>Expires</dt><dd>in ${humanDuration(Date.parse(r.expiresAt) - now)} (${time(r.expiresAt)})</dd>
</dl>
${form}
</article>`;
}

/**
 * Who asked, when a CI job did: the facts the token exchange verified (the policy decided on these, as stored with
 * the request), and a link to the run when its issuer's run pages are known. Everything is escaped by html``.
 */
function workloadView(inputs: PolicyContext, requesterKey: ApiKeyRecord | undefined): Html | string {
  if (inputs.workloadIssuer === undefined) return '';
  const runUrl = requesterKey?.workload?.issuer === inputs.workloadIssuer ? requesterKey.workload.runUrl : undefined;
  const run =
    inputs.runId === undefined
      ? '-'
      : `${inputs.runId}${inputs.runAttempt !== undefined ? ` (attempt ${inputs.runAttempt})` : ''}`;
  const ref = inputs.ref === undefined ? '-' : `${inputs.ref}${inputs.refProtected ? ' (protected)' : ''}`;
  return html`<dt>CI issuer</dt><dd>${inputs.workloadIssuer}</dd>
<dt>CI subject</dt><dd><code>${inputs.workloadSubject ?? '-'}</code></dd>
<dt>Repository</dt><dd>${inputs.project ?? '-'}</dd>
<dt>Ref</dt><dd>${ref}</dd>
<dt>Workflow</dt><dd>${inputs.workflow ?? '-'}</dd>
<dt>Run</dt><dd>${runUrl ? html`<a href="${runUrl}" rel="noreferrer">${run}</a>` : run}</dd>
<dt>Commit</dt><dd><code>${inputs.sha ?? '-'}</code></dd>
<dt>Runner</dt><dd>${inputs.runnerEnvironment ?? '-'}</dd>`;
}

/** What the reviewer can see of the SBOM here; the findings that held the request are in the rule's reason. */
function sbomSummary(text: string | undefined): string {
  if (text === undefined) return 'none sent';
  try {
    const sbom = parseSbom(text);
    const names = sbom.components.slice(0, 8).map((c) => (c.version ? `${c.name}@${c.version}` : c.name));
    const more = sbom.components.length > 8 ? ', ...' : '';
    return `${sbom.format} ${sbom.specVersion}, ${sbom.components.length} components: ${names.join(', ')}${more}`;
  } catch (err) {
    return `not readable (${(err as Error).message})`;
  }
}

/** The digest a person approves: one, or a batch's digests (each signed at approval), shown by their count. */
function digestView(r: PendingRequestRecord) {
  if (!r.batch) return html`<dt>Digest (base64)</dt><dd><code>${r.hash}</code> (${r.algorithm})</dd>`;
  const shown = r.batch.hashes.slice(0, BATCH_DIGESTS_SHOWN);
  const more = r.batch.hashes.length - shown.length;
  return html`<dt>Batch</dt><dd>${String(r.batch.hashes.length)} digests (${r.algorithm}), approved and signed together; SHA-256 over them: <code>${Buffer.from(r.hash, 'base64').toString('hex')}</code></dd>
<dt>Digests (base64)</dt><dd>${shown.map((h) => html`<code>${h}</code> `)}${more > 0 ? ` and ${more} more` : ''}</dd>`;
}

/** How many of a batch's digests its console page lists. */
const BATCH_DIGESTS_SHOWN = 10;
