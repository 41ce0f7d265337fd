// What a person reads about an event: one title line, a few labelled facts and the console link. Slack, Teams and
// e-mail all render this one summary, so the three say the same. It reads only the fields named in
// event-schemas.ts (nothing else from data reaches a person), and returns plain text: each format escapes it.
import type { EventKind, EventRecord } from '../../store/records/event-kinds.js';

export interface SummaryFact {
  label: string;
  value: string;
}

export interface EventSummary {
  title: string;
  facts: SummaryFact[];
  /** The console page that shows or acts on the event; absent when the event has none. */
  link?: { label: string; url: string };
}

type Data = Record<string, unknown>;

/** Longest fact value: a reason or a label can be long, a notification should not be. */
const MAX_VALUE = 300;

// biome-ignore lint/suspicious/noControlCharactersInRegex: the point is to find them
const CONTROL_OR_BREAK = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g;

/** One line of text: control characters and line breaks become spaces (a subject or a title is one line). */
export function oneLine(text: string, max = MAX_VALUE): string {
  const flat = text.replace(CONTROL_OR_BREAK, ' ').replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

function str(value: unknown): string | undefined {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return undefined;
}

function obj(value: unknown): Data | undefined {
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Data) : undefined;
}

/** An ISO time as "2026-11-27 09:40 UTC"; what is not a time stays as it is. */
function when(value: unknown): string | undefined {
  const text = str(value);
  if (text === undefined) return undefined;
  const ms = Date.parse(text);
  return Number.isNaN(ms) ? text : `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

function short(value: unknown, length: number): string | undefined {
  const text = str(value);
  return text !== undefined && text.length > length + 1 ? `${text.slice(0, length)}…` : text;
}

const STAGE_NAMES: Record<string, string> = {
  pending_approval: 'approval',
  pending_security_review: 'security review',
};
const stageName = (value: unknown) => STAGE_NAMES[str(value) ?? ''] ?? str(value) ?? 'a decision';

/** Who: the person's e-mail, the CI job's repository and run, or the key; as much as the event says. */
export function actorText(value: unknown): string | undefined {
  const actor = obj(value);
  if (!actor) return undefined;
  const keyId = str(actor.api_key_id);
  const person = obj(actor.person);
  const workload = obj(actor.workload);
  const key = keyId && !keyId.startsWith('person:') && !keyId.startsWith('cli:') ? ` (key ${keyId})` : '';
  if (person) {
    const who = str(person.email) ?? `person ${str(person.id) ?? '?'}`;
    return `${who}${keyId?.startsWith('person:') ? ' (console)' : key}`;
  }
  if (workload) {
    const job = str(workload.repository) ?? str(workload.subject) ?? 'CI job';
    const run = str(workload.run_url);
    return `CI ${job}${run ? `, run ${run}` : ''}${key}`;
  }
  if (keyId?.startsWith('cli:')) return `command line (${keyId.slice('cli:'.length)})`;
  return keyId ? `API key ${keyId}` : undefined;
}

class Facts {
  readonly list: SummaryFact[] = [];
  add(label: string, value: unknown): this {
    const text = str(value);
    if (text !== undefined) this.list.push({ label, value: oneLine(text) });
    return this;
  }
}

/** The facts every signature event shares: who asked, for what, with which key, and the rule. */
function signatureFacts(d: Data, f: Facts): void {
  const inputs = obj(d.inputs) ?? {};
  const ci = obj(inputs.ci);
  const sbom = obj(inputs.sbom);
  f.add('Requested by', actorText(d.requester));
  if (ci) {
    f.add('Ref', ci.ref);
    f.add('Commit', short(ci.sha, 12));
  }
  f.add('Project', inputs.project);
  f.add('Environment', inputs.environment);
  f.add('Artifact', [str(inputs.artifact_type), str(inputs.artifact_version)].filter(Boolean).join(' ') || undefined);
  if (sbom)
    f.add(
      'SBOM',
      `${str(sbom.format) ?? '?'} ${str(sbom.spec_version) ?? ''}, ${str(sbom.components) ?? '?'} components`,
    );
  f.add('Key', [str(d.key_id), str(d.algorithm) && `(${str(d.algorithm)})`].filter(Boolean).join(' ') || undefined);
  f.add('Digest', short(d.digest, 16));
  f.add('Rule', [str(d.rule), str(d.reason)].filter(Boolean).join(': ') || undefined);
}

function waitingFor(d: Data): string {
  const next = Array.isArray(d.next_stages) ? d.next_stages.map(stageName) : [];
  return `${stageName(d.status)}${next.length > 0 ? `, then ${next.join(', ')}` : ''}`;
}

function exceptionFacts(d: Data, f: Facts): void {
  f.add('Vulnerability', d.vuln_id)
    .add('Project', str(d.project) ?? 'every project')
    .add('Artifact type', str(d.artifact_type) ?? 'every type')
    .add('Reason', d.reason)
    .add('Expires', when(d.expires_at))
    .add('Created by', actorText(d.created_by));
}

function keyFacts(d: Data, f: Facts): void {
  f.add('Key', d.key_id).add('Version', d.version).add('Key spec', d.key_spec).add('Previous key', d.previous_key_id);
}

function apiKeyFacts(d: Data, f: Facts): void {
  const person = obj(d.person);
  const roles = Array.isArray(d.roles) ? d.roles.map(str).filter(Boolean).join(', ') : undefined;
  f.add('Key', d.api_key_id)
    .add('Role', roles || d.role)
    .add('Label', d.label)
    .add('Person', person && (str(person.email) ?? str(person.id)));
}

function trustFacts(d: Data, f: Facts): void {
  const rule = obj(d.rule) ?? {};
  const conditions = Object.entries(obj(rule.conditions) ?? {}).map(([claim, v]) => `${claim}=${str(v) ?? '?'}`);
  f.add('Rule', d.rule_id)
    .add('Issuer', d.issuer)
    .add('Conditions', conditions.join(', ') || undefined)
    .add('Audience', str(rule.audience) ?? (rule.audience === null ? "the service's public URL" : undefined))
    .add('Key lifetime', str(rule.key_minutes) && `${str(rule.key_minutes)} minutes`)
    .add(d.change === 'removed' ? 'Removed by' : 'Added by', actorText(d.changed_by));
}

function title(kind: EventKind, d: Data): string {
  const tenant = str(d.tenant_id);
  const inTenant = tenant ? ` in tenant ${tenant}` : '';
  const rule = str(d.rule) ? `: rule ${str(d.rule)}` : '';
  const vuln = str(d.vuln_id) ?? '?';
  switch (kind) {
    case 'signature.pending':
      return `Signature waiting for ${stageName(d.status)}${inTenant}${rule}`;
    case 'signature.reminder':
      return `Reminder: signature still waiting for ${stageName(d.status)}${inTenant}${rule}`;
    case 'signature.approved':
      return d.status === 'approved'
        ? `Signature approved${inTenant}${rule}`
        : `${capitalise(stageName(d.stage))} passed${inTenant}; now waiting for ${stageName(d.status)}${rule}`;
    case 'signature.rejected':
      return `Signature rejected${inTenant}${rule}`;
    case 'signature.signed':
      // The rule only says something for a signature that waited for a decision; one made at once passed them all.
      return d.request_id === undefined
        ? `Signature made${inTenant}`
        : `Signature made after approval${inTenant}${rule}`;
    case 'signature.denied':
      return `Signature denied${inTenant}${rule}`;
    case 'signature.expired':
      return `Signature request expired without a decision${inTenant}${rule}`;
    case 'exception.created':
      return `Policy exception for ${vuln} created${inTenant}`;
    case 'exception.revoked':
      return `Policy exception for ${vuln} revoked${inTenant}`;
    case 'exception.expiring':
      return `Policy exception for ${vuln}${inTenant} ends ${when(d.expires_at) ?? 'soon'}`;
    case 'key.rotated':
      return `Key${tenant ? ` of tenant ${tenant}` : ''} rotated to version ${str(d.version) ?? '?'}`;
    case 'key.imported':
      return `Key imported${tenant ? ` into tenant ${tenant}` : ''} as version ${str(d.version) ?? '?'}`;
    case 'tenant.created':
      return `Tenant ${tenant ?? '?'} created`;
    case 'trust.changed':
      return `Trust rule ${str(d.rule_id) ?? '?'} ${d.change === 'removed' ? 'removed from' : 'added to'} tenant ${tenant ?? '?'}`;
    case 'api_key.created':
      return `${tenant ? 'API key' : 'Operator API key'} ${str(d.api_key_id) ?? '?'} created${inTenant}`;
    case 'api_key.revoked':
      return `${tenant ? 'API key' : 'Operator API key'} ${str(d.api_key_id) ?? '?'} revoked${inTenant}`;
    case 'webhook.test':
      return `Test message for subscription ${str(d.subscription_id) ?? '?'}${inTenant}`;
    default: {
      const unknown: never = kind;
      return `Event ${String(unknown)}${inTenant}`;
    }
  }
}

function capitalise(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function facts(kind: EventKind, d: Data): SummaryFact[] {
  const f = new Facts();
  switch (kind) {
    case 'signature.pending':
    case 'signature.reminder':
      signatureFacts(d, f);
      f.add('Waiting for', waitingFor(d)).add('Requested', when(d.requested_at)).add('Expires', when(d.expires_at));
      break;
    case 'signature.approved':
      signatureFacts(d, f);
      f.add('Approved by', actorText(d.decided_by)).add('Decision reason', d.decision_reason);
      if (d.status !== 'approved') f.add('Waiting for', waitingFor(d)).add('Expires', when(d.expires_at));
      break;
    case 'signature.rejected':
      signatureFacts(d, f);
      f.add('Rejected by', actorText(d.decided_by)).add('Decision reason', d.decision_reason);
      break;
    case 'signature.signed':
      signatureFacts(d, f);
      f.add('Request', d.request_id).add('Signature', d.signature_id);
      break;
    case 'signature.denied':
      signatureFacts(d, f);
      f.add('Vulnerability', d.vuln_id).add('Fixed in', d.fix_version).add('Request', d.request_id);
      break;
    case 'signature.expired':
      signatureFacts(d, f);
      f.add('Requested', when(d.requested_at)).add('Expired', when(d.expires_at));
      break;
    case 'exception.created':
    case 'exception.expiring':
      exceptionFacts(d, f);
      break;
    case 'exception.revoked':
      exceptionFacts(d, f);
      f.add('Revoked by', actorText(d.revoked_by));
      break;
    case 'key.rotated':
      keyFacts(d, f);
      f.add('Rotated by', actorText(d.rotated_by));
      break;
    case 'key.imported':
      keyFacts(d, f);
      f.add('Material expires', d.material_expires_at === null ? 'never' : when(d.material_expires_at));
      f.add('Imported by', actorText(d.imported_by));
      break;
    case 'tenant.created':
      f.add('Key', d.key_id).add('Key spec', d.key_spec).add('Created by', actorText(d.created_by));
      break;
    case 'trust.changed':
      trustFacts(d, f);
      break;
    case 'api_key.created':
      apiKeyFacts(d, f);
      f.add('Expires', d.expires_at === null ? 'never' : when(d.expires_at));
      f.add('Created by', actorText(d.created_by));
      break;
    case 'api_key.revoked':
      apiKeyFacts(d, f);
      f.add('Revoked by', actorText(d.revoked_by));
      break;
    case 'webhook.test':
      f.add('Tenant', str(d.tenant_id)).add('Subscription', str(d.subscription_id)).add('Sent by', str(d.by));
      break;
  }
  return f.list;
}

/** Only http(s) links are offered: a console URL is the service's own, anything else is a mistake. */
function consoleLink(kind: EventKind, value: unknown): EventSummary['link'] {
  const url = str(value);
  if (!url || !/^https?:\/\//i.test(url) || !URL.canParse(url)) return undefined;
  const label =
    kind === 'signature.pending' || kind === 'signature.reminder' ? 'Review in the console' : 'Open in the console';
  return { label, url };
}

export function summarizeEvent(event: EventRecord): EventSummary {
  const d = event.data as Data;
  const link = consoleLink(event.type, d.console_url);
  return { title: oneLine(title(event.type, d)), facts: facts(event.type, d), ...(link && { link }) };
}

/** The summary as plain text: the title, "Label: value" lines, the link (Slack's fallback, the mail's text part). */
export function summaryText(summary: EventSummary): string {
  const lines = [summary.title, '', ...summary.facts.map((f) => `${f.label}: ${f.value}`)];
  if (summary.link) lines.push('', `${summary.link.label}: ${summary.link.url}`);
  return lines.join('\n');
}
