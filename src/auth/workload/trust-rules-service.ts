// Managing a tenant's trust rules (docs/ci.md, "Trust rules"): the one place that adds, lists and removes them, so
// `signbridge admin trust` and the console's trust-rules page check, store and audit a rule the same way.

import { randomBytes } from 'node:crypto';
import { EventBuilder } from '../../events/event-builder.js';
import { trustRuleTermsJson } from '../../store/records/trust-rule.js';
import type { Store } from '../../store/store.js';
import { type NewTrustRule, type TrustRule, TrustRuleInvalid, validateTrustRule } from './trust-rule.js';

/** No rule with that id (in that tenant, when the caller acts for one tenant). */
export class TrustRuleNotFound extends Error {}

/** Who changes the rules, for the audit entry: `cli:<user>` or `person:<id>`, and through what. */
export interface TrustRuleChanger {
  /** Makes the trust.changed event (console links need the public URL); default: without links. */
  events?: EventBuilder;
  actor: string;
  via: 'cli' | 'console';
  now?: Date;
}

const GITHUB_ISSUER_HOST = 'token.actions.githubusercontent.com';

/** GitHub's and GitLab's claims that carry the run, the commit or the ref: no stable identity. */
const PER_RUN_CLAIMS = [
  'ref',
  'sha',
  'run_id',
  'run_number',
  'run_attempt',
  'pipeline_id',
  'job_id',
  'job_workflow_ref',
  'workflow_ref',
  'ci_config_ref_uri',
];

/**
 * GitHub Actions' issuer: github.com's (also with an enterprise slug as path) or a GitHub Enterprise Server's
 * (`https://HOST/_services/token`).
 */
export function isGithubIssuer(issuer: string): boolean {
  try {
    const url = new URL(issuer);
    return url.hostname === GITHUB_ISSUER_HOST || url.pathname.replace(/\/$/, '').endsWith('/_services/token');
  } catch {
    return false;
  }
}

/**
 * What a valid rule may still get wrong, said to the person saving it (they are warnings, not refusals: the
 * rule can be right for them). Identity claims that change per run or ref (any issuer); the two pitfalls of
 * GitHub's claims for GitHub rules (docs/ci.md).
 */
export function trustRuleWarnings(
  rule: Pick<TrustRule, 'issuer' | 'conditions'> & Partial<Pick<TrustRule, 'identityClaims'>>,
): string[] {
  const perRef = (rule.identityClaims ?? []).filter(
    (name) => PER_RUN_CLAIMS.includes(name) || (name === 'sub' && isGithubIssuer(rule.issuer)),
  );
  const identityWarnings =
    perRef.length > 0
      ? [
          `the rule's identity claims ${perRef.join(', ')} change from run to run or ref to ref: velocity.perIdentity would count each run or tag apart; name claims that stay, such as repository_id`,
        ]
      : [];
  if (!isGithubIssuer(rule.issuer)) return identityWarnings;
  const pinned = new Set(Object.keys(rule.conditions));
  const warnings: string[] = [];
  const byName = ['sub', 'repository'].filter((name) => pinned.has(name));
  if (byName.length > 0 && !pinned.has('repository_id')) {
    warnings.push(
      `the rule pins ${byName.join(' and ')} by name without repository_id: a repository deleted and re-created (or renamed) under that name would match, and GitHub changes the sub format of repositories created or renamed after 2026-07-15; add --claim repository_id=<the number>`,
    );
  }
  if (pinned.has('ref') && !pinned.has('event_name') && !pinned.has('environment')) {
    warnings.push(
      'the rule pins ref without event_name or environment: a pull_request_target run carries the base branch as ref while it runs code of the pull request; add --claim event_name=push (or the event you sign on) or --claim environment=<a protected environment>',
    );
  }
  return [...warnings, ...identityWarnings];
}

/** The rule as the audit log records it (snake_case like the other details). */
function auditDetails(rule: TrustRule, via: TrustRuleChanger['via']): Record<string, unknown> {
  return {
    rule_id: rule.id,
    issuer: rule.issuer,
    ...trustRuleTermsJson(rule),
    via,
  };
}

/**
 * Checks and saves a rule (TrustRuleInvalid saying what to change, nothing saved), audits it (`trust_rule`
 * `added`) and returns it with the warnings to show.
 */
export async function addTrustRule(
  store: Store,
  input: NewTrustRule,
  by: TrustRuleChanger,
): Promise<{ rule: TrustRule; warnings: string[] }> {
  const valid = validateTrustRule(input);
  if (!(await store.tenants.get(valid.tenantId))) throw new TrustRuleInvalid(`no tenant ${valid.tenantId}`);
  const at = (by.now ?? new Date()).toISOString();
  const rule: TrustRule = { id: `tr_${randomBytes(8).toString('hex')}`, ...valid, createdAt: at, createdBy: by.actor };
  const events = by.events ?? new EventBuilder(store, undefined);
  await store.workload.addTrustRule(rule, [await events.trustChanged('added', rule, by.actor)]);
  await store.audit.append({
    at,
    tenantId: rule.tenantId,
    actor: by.actor,
    action: 'trust_rule',
    outcome: 'added',
    details: auditDetails(rule, by.via),
  });
  return { rule, warnings: trustRuleWarnings(rule) };
}

/** A tenant's rules, oldest first (the order the exchange tries them in). */
export function listTrustRules(store: Store, tenantId: string): Promise<TrustRule[]> {
  return store.workload.listTrustRules(tenantId);
}

/**
 * Removes a rule and audits it (`trust_rule` `removed`). With `tenantId` (the console acts for one tenant) a rule
 * of another tenant is answered as not found, like one that does not exist. Keys the rule minted stay valid until
 * they expire (minutes).
 */
export async function removeTrustRule(
  store: Store,
  id: string,
  by: TrustRuleChanger & { tenantId?: string },
): Promise<TrustRule> {
  const existing = await store.workload.getTrustRule(id);
  const notFound = () =>
    new TrustRuleNotFound(by.tenantId ? `${by.tenantId} has no trust rule ${id}` : `no trust rule ${id}`);
  if (!existing || (by.tenantId !== undefined && existing.tenantId !== by.tenantId)) throw notFound();
  const events = by.events ?? new EventBuilder(store, undefined);
  const removedEvent = await events.trustChanged('removed', existing, by.actor);
  const removed = await store.workload.removeTrustRule(id, [removedEvent]);
  // Removed meanwhile by someone else: their removal is the one audited.
  if (!removed) throw notFound();
  await store.audit.append({
    at: (by.now ?? new Date()).toISOString(),
    tenantId: removed.tenantId,
    actor: by.actor,
    action: 'trust_rule',
    outcome: 'removed',
    details: auditDetails(removed, by.via),
  });
  return removed;
}
