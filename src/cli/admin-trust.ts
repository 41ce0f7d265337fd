// `signbridge admin trust add|list|remove`: a tenant's trust rules for CI workload identities (docs/ci.md, "Trust
// rules"), through the same service module as the console, so both check, save and audit a rule alike.
import { userInfo } from 'node:os';
import type { Command } from 'commander';
import {
  DEFAULT_KEY_MINUTES,
  DEFAULT_MAX_TOKEN_LIFETIME_S,
  lifetimeText,
  MAX_KEY_MINUTES,
  parseTokenLifetime,
  type TrustRule,
} from '../auth/workload/trust-rule.js';
import { addTrustRule, listTrustRules, removeTrustRule } from '../auth/workload/trust-rules-service.js';
import { trustRuleTermsJson } from '../store/records/trust-rule.js';
import type { Store } from '../store/store.js';

export class TrustUsageError extends Error {}

type StoreFlags = { dataDir?: string; config?: string; database?: string };
type WithStore = <T>(flags: StoreFlags, fn: (store: Store) => Promise<T>) => Promise<T>;

/** Commander collects repeated `--claim` options into a list. */
function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

/** `--claim NAME=PATTERN ...` -> {NAME: PATTERN}; the first `=` separates (patterns may contain `=`). */
export function parseClaims(claims: readonly string[]): Record<string, string> {
  const conditions: Record<string, string> = {};
  for (const claim of claims) {
    const at = claim.indexOf('=');
    if (at <= 0) {
      throw new TrustUsageError(
        `--claim wants NAME=PATTERN (such as repository_id=123456), got ${JSON.stringify(claim)}`,
      );
    }
    const name = claim.slice(0, at);
    if (Object.hasOwn(conditions, name)) {
      throw new TrustUsageError(`--claim ${name} is given twice; a rule has one pattern per claim`);
    }
    conditions[name] = claim.slice(at + 1);
  }
  return conditions;
}

/** A whole number as typed; validateTrustRule then checks its range. */
function parseKeyMinutes(value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  if (!/^\d{1,6}$/.test(value.trim())) throw new TrustUsageError(`--key-minutes must be a whole number, got ${value}`);
  return Number(value.trim());
}

export function conditionsText(conditions: Record<string, string>): string {
  return Object.entries(conditions)
    .map(([name, pattern]) => `${name}=${pattern}`)
    .join(' ');
}

function ruleJson(rule: TrustRule): Record<string, unknown> {
  return {
    id: rule.id,
    tenant_id: rule.tenantId,
    issuer: rule.issuer,
    ...trustRuleTermsJson(rule),
    created_at: rule.createdAt,
    created_by: rule.createdBy,
  };
}

export function registerTrustCommands(
  admin: Command,
  storeOptions: (cmd: Command) => Command,
  withStore: WithStore,
): void {
  const trust = admin
    .command('trust')
    .description("a tenant's trust rules: which CI jobs' ID tokens the token exchange turns into signer keys");
  const by = () => ({ actor: `cli:${userInfo().username}`, via: 'cli' as const });

  storeOptions(trust.command('add'))
    .description("add a trust rule; prints the rule's id on stdout and what it admits (and any warning) on stderr")
    .requiredOption('--tenant <tenant>', 'the tenant whose signer keys the rule gives out')
    .requiredOption('--issuer <url>', 'the exact iss of the tokens, e.g. https://token.actions.githubusercontent.com')
    .option('--audience <aud>', "the aud the tokens must carry (default: the service's public URL)")
    .option(
      '--claim <name=pattern>',
      'a condition, repeatable, all must hold: exact value or pattern (* within a segment, ** across /)',
      collect,
      [],
    )
    .option('--role <role>', 'the role of the keys (only signer)', 'signer')
    .option(
      '--key-minutes <n>',
      `lifetime of the keys the exchange mints, 1-${MAX_KEY_MINUTES} (default ${DEFAULT_KEY_MINUTES})`,
    )
    .option(
      '--max-token-lifetime <duration>',
      `the longest life (exp - iat) of a token the rule admits: 90m, 24h, 30d, ... 1m to 3650d (default ${lifetimeText(DEFAULT_MAX_TOKEN_LIFETIME_S)})`,
    )
    .option(
      '--identity-claim <name>',
      "repeatable: the claims whose values are the workload's stable identity, which velocity.perIdentity counts (default: repository and workflow, without the ref)",
      collect,
      [],
    )
    .action(
      async (
        opts: StoreFlags & {
          tenant: string;
          issuer: string;
          audience?: string;
          claim: string[];
          role: string;
          keyMinutes?: string;
          maxTokenLifetime?: string;
          identityClaim: string[];
        },
      ) => {
        const conditions = parseClaims(opts.claim);
        const keyMinutes = parseKeyMinutes(opts.keyMinutes);
        const maxTokenLifetimeS =
          opts.maxTokenLifetime === undefined ? undefined : parseTokenLifetime(opts.maxTokenLifetime);
        const { rule, warnings } = await withStore(opts, (store) =>
          addTrustRule(
            store,
            {
              tenantId: opts.tenant,
              issuer: opts.issuer,
              audience: opts.audience ?? null,
              conditions,
              role: opts.role,
              ...(keyMinutes !== undefined && { keyMinutes }),
              ...(maxTokenLifetimeS !== undefined && { maxTokenLifetimeS }),
              ...(opts.identityClaim.length > 0 && { identityClaims: opts.identityClaim }),
            },
            by(),
          ),
        );
        process.stderr.write(
          `added trust rule ${rule.id} to ${rule.tenantId}: ID tokens of ${rule.issuer} for audience ${rule.audience ?? "the service's public URL"} with ${conditionsText(rule.conditions)} become ${rule.role} keys for ${rule.keyMinutes} minutes; tokens living longer than ${lifetimeText(rule.maxTokenLifetimeS)} are refused; velocity counts per ${rule.identityClaims ? rule.identityClaims.join(' + ') : 'the default identity (repository and workflow; sub for other issuers)'}\n`,
        );
        for (const warning of warnings) process.stderr.write(`warning: ${warning}\n`);
        process.stdout.write(`${rule.id}\n`);
      },
    );

  storeOptions(trust.command('list'))
    .description("list a tenant's trust rules, oldest first (the order the exchange tries them in)")
    .requiredOption('--tenant <tenant>', 'the tenant')
    .option('--json', 'one JSON array instead of the table')
    .action(async (opts: StoreFlags & { tenant: string; json?: boolean }) => {
      const rules = await withStore(opts, async (store) => {
        if (!(await store.tenants.get(opts.tenant))) throw new TrustUsageError(`no tenant ${opts.tenant}`);
        return listTrustRules(store, opts.tenant);
      });
      if (opts.json) {
        process.stdout.write(`${JSON.stringify(rules.map(ruleJson), null, 2)}\n`);
        return;
      }
      if (rules.length === 0) {
        process.stderr.write(`${opts.tenant} has no trust rules\n`);
        return;
      }
      process.stdout.write(
        'ID\tISSUER\tAUDIENCE\tROLE\tKEY MINUTES\tCONDITIONS\tMAX TOKEN LIFETIME\tIDENTITY\tCREATED\tBY\n',
      );
      for (const r of rules) {
        process.stdout.write(
          `${r.id}\t${r.issuer}\t${r.audience ?? '(public URL)'}\t${r.role}\t${r.keyMinutes}\t${conditionsText(r.conditions)}\t${lifetimeText(r.maxTokenLifetimeS)}\t${r.identityClaims?.join(',') ?? '(default)'}\t${r.createdAt}\t${r.createdBy}\n`,
        );
      }
    });

  storeOptions(trust.command('remove'))
    .description('remove a trust rule by id (keys it already minted expire as planned, within minutes)')
    .argument('<id>', 'the rule id (tr_ and 16 hex characters)')
    .action(async (id: string, opts: StoreFlags) => {
      const removed = await withStore(opts, (store) => removeTrustRule(store, id, by()));
      process.stderr.write(`removed trust rule ${removed.id} of ${removed.tenantId}\n`);
    });
}
