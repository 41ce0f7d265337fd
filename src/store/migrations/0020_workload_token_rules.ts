import type { Kysely, Migration } from 'kysely';

// Issue 31: two more parts of a CI trust rule (docs/ci.md, "Trust rules"). max_token_lifetime_s: the longest
// exp - iat of a token the rule admits (rules saved before get the default, a day). identity_claims: the claims
// whose values make the workload's stable identity that velocity.perIdentity counts (JSON array); null, as for
// every earlier rule, is the issuer kind's default (repository and workflow, not the ref).
export const migration0020WorkloadTokenRules: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .alterTable('workload_trust_rules')
      .addColumn('max_token_lifetime_s', 'integer', (c) => c.notNull().defaultTo(86_400))
      .execute();
    await db.schema.alterTable('workload_trust_rules').addColumn('identity_claims', 'text').execute();
  },
};
