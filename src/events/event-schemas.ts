// The reference for each event kind's `data`: a JSON Schema (TypeBox) and an example. The outbox fills data to
// match these; docs/events.md and docs/event-schemas.json are generated from them (test/unit/event-schemas.test.ts
// fails when either drifts). Field names are snake_case like the API's. The schemas are closed (no additional
// properties): they list every field sent today; a later version may add optional fields, never remove or retype one.
import { FormatRegistry, type Static, type TLiteral, type TSchema, type TUnion, Type } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { KEY_SPECS, SIGNING_ALGORITHMS } from '../crypto/algorithms.js';
import { EVENT_KINDS, type EventKind } from '../store/records/event-kinds.js';
import { ROLES } from '../store/records/roles.js';

// TypeBox's Value.Check refuses a format it has no checker for; these are the formats used below.
const FORMATS: Record<string, (value: string) => boolean> = {
  'date-time': (v) =>
    /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/.test(v) && !Number.isNaN(Date.parse(v)),
  uri: (v) => URL.canParse(v),
  uuid: (v) => /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(v),
};
for (const [name, check] of Object.entries(FORMATS)) if (!FormatRegistry.Has(name)) FormatRegistry.Set(name, check);

const literals = <T extends readonly string[]>(values: T, description?: string): TUnion<TLiteral<T[number]>[]> =>
  Type.Union(
    values.map((v) => Type.Literal(v as T[number])),
    description === undefined ? {} : { description },
  );
const Nullable = <T extends TSchema>(schema: T, description: string) =>
  Type.Union([schema, Type.Null()], { description });
const Time = (description: string) => Type.String({ format: 'date-time', description });
const Text = (description: string) => Type.String({ description });

const PENDING = ['pending_approval', 'pending_security_review'] as const;

const TenantId = Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$', description: 'the tenant' });
const ConsoleUrl = Type.String({
  format: 'uri',
  description: 'the console page that shows or acts on it; absent when the service has no public URL',
});

const Person = Type.Object(
  {
    id: Text('the person (people are created by sign-in, docs/oauth.md)'),
    email: Type.Optional(Nullable(Type.String(), 'their e-mail address, when the identity provider gave one')),
  },
  { additionalProperties: false },
);

/** Who made a change or asked for a signature (EventActor in event-kinds.ts). */
export const EventActorSchema = Type.Object(
  {
    api_key_id: Text(
      "the audit log's actor: an API key id (16 hex digits), `person:<id>` for a decision made in the console, " +
        '`cli:<user>` for an admin command',
    ),
    person: Type.Optional(
      Type.Object(Person.properties, {
        additionalProperties: false,
        description: "the person behind it: a person's key, or a decision made in the console",
      }),
    ),
    workload: Type.Optional(
      Type.Object(
        {
          issuer: Text('the CI issuer that vouched for the job'),
          subject: Text("the token's `sub`"),
          repository: Type.Optional(Text('GitHub `repository`, GitLab `project_path`')),
          run_url: Type.Optional(Type.String({ format: 'uri', description: 'the run page, when the issuer has one' })),
        },
        { additionalProperties: false, description: 'the verified CI job, for a key minted by the token exchange' },
      ),
    ),
  },
  { additionalProperties: false, title: 'EventActor' },
);

/** What the signature was asked for: the policy inputs, with the SBOM summarised and the verified CI facts. */
export const SignatureInputsSchema = Type.Object(
  {
    project: Type.Optional(Text('project (for a CI job: its repository)')),
    environment: Type.Optional(Text('target environment')),
    artifact_type: Type.Optional(Text('artifact type, e.g. `msi`, `jar`')),
    artifact_version: Type.Optional(Text('artifact version')),
    sbom: Type.Optional(
      Type.Object(
        {
          format: literals(['spdx', 'cyclonedx'] as const, 'SBOM format'),
          spec_version: Text('the SBOM specification version'),
          components: Type.Integer({ minimum: 0, description: 'number of components' }),
        },
        { additionalProperties: false, description: 'a summary of the SBOM sent with the request (never the SBOM)' },
      ),
    ),
    ci: Type.Optional(
      Type.Object(
        {
          issuer: Text('CI issuer'),
          subject: Text("the token's `sub`"),
          ref: Type.Optional(Text('git ref')),
          ref_type: Type.Optional(Text('branch or tag')),
          ref_protected: Type.Optional(Type.Boolean({ description: 'whether the ref is protected' })),
          workflow: Type.Optional(Text('GitHub `job_workflow_ref`, GitLab `ci_config_ref_uri`')),
          sha: Type.Optional(Text('commit')),
          run_id: Type.Optional(Text('GitHub `run_id`, GitLab `pipeline_id`')),
          run_attempt: Type.Optional(Text('GitHub `run_attempt`')),
          actor: Type.Optional(Text('who started the run')),
          event_name: Type.Optional(Text('GitHub `event_name`, GitLab `pipeline_source`')),
          runner_environment: Type.Optional(Text('github-hosted, gitlab-hosted or self-hosted')),
        },
        {
          additionalProperties: false,
          description: 'the CI facts the token exchange verified (docs/ci.md), for a request from a CI job',
        },
      ),
    ),
  },
  { additionalProperties: false, title: 'SignatureInputs' },
);

/** An EventActor field, with what it says in this place. */
const Actor = (description: string) =>
  Type.Object(EventActorSchema.properties, { additionalProperties: false, title: 'EventActor', description });

const common = { tenant_id: TenantId, console_url: Type.Optional(ConsoleUrl) };

/** What every event about a signature says about it. */
const signatureFields = {
  ...common,
  key_id: Text('the key version that signs (or would have signed)'),
  algorithm: literals(SIGNING_ALGORITHMS, 'signing algorithm'),
  digest: Type.String({ pattern: '^[A-Za-z0-9+/]+={0,2}$', description: 'the digest to sign, standard base64' }),
  rule: Text('the policy rule that decided'),
  reason: Text("the rule's reason"),
  inputs: Type.Object(SignatureInputsSchema.properties, {
    additionalProperties: false,
    title: 'SignatureInputs',
    description: 'what the signature is for',
  }),
  requester: Actor('who asked for the signature'),
};

/** A signing request held for a decision (the approval workflow, docs/policy.md). */
const requestFields = {
  ...signatureFields,
  request_id: Type.String({ format: 'uuid', description: 'the signing request' }),
  requested_at: Time('when the request was made'),
  expires_at: Time('when the request expires without a decision'),
};
const Stage = literals(PENDING, 'the stage that was decided');
const NextStages = Type.Array(literals(PENDING), { description: 'stages still to pass after the current one' });
const decisionFields = {
  stage: Stage,
  decided_by: Actor('who decided'),
  decision_reason: Type.Optional(Text('the reason the decider gave')),
};

const exceptionFields = {
  ...common,
  exception_id: Type.String({ format: 'uuid', description: 'the policy exception' }),
  vuln_id: Text('the vulnerability it exempts (OSV, GHSA or CVE id)'),
  project: Nullable(Type.String(), 'the project it is limited to; null: every project'),
  artifact_type: Nullable(Type.String(), 'the artifact type it is limited to; null: every type'),
  reason: Text('why the exception was made'),
  expires_at: Time('when the exception ends'),
  created_by: Actor('who created it'),
};

const KeySpec = literals(KEY_SPECS, 'key spec');
const keyFields = {
  ...common,
  key_id: Text('the new current key version'),
  version: Type.Integer({ minimum: 1, description: "the version's number (1 for a tenant's first key)" }),
  key_spec: KeySpec,
  previous_key_id: Text('the key version that was current before; it still verifies and can be named by key_id'),
};

const Role = literals(ROLES, 'the first role of the key');
const apiKeyFields = {
  tenant_id: Nullable(TenantId, 'the tenant of the key; null for an operator key'),
  console_url: Type.Optional(ConsoleUrl),
  api_key_id: Text('the key id (16 hex digits); the secret is never sent'),
  role: Role,
  label: Text("the key's label"),
  person: Type.Optional(
    Type.Object(Person.properties, { additionalProperties: false, description: 'the person the key belongs to' }),
  ),
};

const closed = <T extends Parameters<typeof Type.Object>[0]>(description: string, properties: T) =>
  Type.Object(properties, { additionalProperties: false, description });

const schemas = {
  'signature.pending': closed('A signature was held for approval or security review.', {
    ...requestFields,
    status: literals(PENDING, 'the stage it waits for'),
    next_stages: NextStages,
  }),
  'signature.reminder': closed(
    'A held signature still waits for a decision (sent again while it waits, before it expires).',
    { ...requestFields, status: literals(PENDING, 'the stage it waits for'), next_stages: NextStages },
  ),
  'signature.approved': closed(
    'A person approved a stage of a held signature. With no stage left the signature was made (status approved, ' +
      'and a signature.signed follows); otherwise the request waits for the next stage.',
    {
      ...requestFields,
      ...decisionFields,
      status: literals([...PENDING, 'approved'] as const, 'the request after the decision'),
      next_stages: NextStages,
    },
  ),
  'signature.rejected': closed('A person rejected a held signature: it will not be made.', {
    ...requestFields,
    ...decisionFields,
    status: Type.Literal('rejected'),
  }),
  'signature.signed': closed(
    'A signature was made: at once (sign, pkcs11_sign, by any key) or after its approval; one event per signature. ' +
      'Written only while a subscription of the tenant wants this kind.',
    {
      ...signatureFields,
      signature_id: Type.Optional(
        Text(
          "the signature record (the `signed` audit entry's details.signature_id); absent only in events written " +
            'before signbridge told of signatures made at once',
        ),
      ),
      request_id: Type.Optional(
        Type.String({
          format: 'uuid',
          description: 'the signing request, when it passed approval first; absent for a signature made at once',
        }),
      ),
    },
  ),
  'signature.denied': closed(
    'The policy refused a signature: when it was asked for, or when an approval re-checked it (then with request_id).',
    {
      ...signatureFields,
      request_id: Type.Optional(
        Type.String({ format: 'uuid', description: 'the held request whose approval was refused on re-check' }),
      ),
      vuln_id: Type.Optional(Text('the vulnerability that denied it, for an SBOM rule')),
      fix_version: Type.Optional(Text('a version that fixes it, when the advisory names one')),
    },
  ),
  'signature.expired': closed('A held signature expired without a decision: it will not be made.', {
    ...requestFields,
    status: Type.Literal('expired'),
  }),
  'exception.created': closed('A policy exception was created.', exceptionFields),
  'exception.revoked': closed('A policy exception was revoked before it ended.', {
    ...exceptionFields,
    revoked_by: Actor('who revoked it'),
  }),
  'exception.expiring': closed('A policy exception ends soon (sent once, ahead of expires_at).', exceptionFields),
  'key.rotated': closed("A tenant's key was rotated: new signatures use the new version.", {
    ...keyFields,
    rotated_by: Actor('who rotated it'),
  }),
  'key.imported': closed("Key material was imported (bring your own key) and became the tenant's current key.", {
    ...keyFields,
    material_expires_at: Nullable(
      Type.String({ format: 'date-time' }),
      'when the imported material stops working; null: it does not expire',
    ),
    imported_by: Actor('who imported it'),
  }),
  'tenant.created': closed('A tenant was created, with its first key.', {
    ...common,
    key_id: Text("the tenant's first key version"),
    key_spec: KeySpec,
    created_by: Actor('who created it'),
  }),
  'trust.changed': closed('A trust rule (which CI jobs may sign, docs/ci.md) was added to or removed from a tenant.', {
    ...common,
    change: literals(['added', 'removed'] as const, 'what happened to the rule'),
    rule_id: Text('the trust rule (`tr_` + 16 hex digits)'),
    issuer: Type.String({ format: 'uri', description: 'the CI issuer it trusts' }),
    rule: Type.Object(
      {
        audience: Nullable(Type.String(), "the `aud` tokens must carry; null: the service's public URL"),
        conditions: Type.Record(Type.String(), Type.String(), {
          description: 'claim name → exact value or pattern; every one must hold',
        }),
        role: literals(['signer'] as const, 'the role of the keys it mints'),
        key_minutes: Type.Integer({ minimum: 1, description: 'lifetime of the keys it mints' }),
        max_token_lifetime_s: Type.Integer({
          minimum: 60,
          description: 'the longest `exp - iat` a token it admits may have, in seconds',
        }),
        identity_claims: Nullable(
          Type.Array(Type.String(), { minItems: 1 }),
          "the claims whose values name one workload for velocity limits; null: the issuer's default",
        ),
      },
      { additionalProperties: false, description: 'the rule as it was added, or as it was before its removal' },
    ),
    changed_by: Actor('who added or removed the rule'),
  }),
  'api_key.created': closed(
    'An API key was created by an admin (command line or console) or by a sign-in; not the minutes-long keys of ' +
      'the CI token exchange.',
    {
      ...apiKeyFields,
      roles: Type.Array(literals(ROLES), { description: 'every role of the key' }),
      expires_at: Nullable(Type.String({ format: 'date-time' }), 'when the key stops working; null: no expiry'),
      created_by: Actor('who created it'),
    },
  ),
  'api_key.revoked': closed('An API key was revoked.', { ...apiKeyFields, revoked_by: Actor('who revoked it') }),
  'webhook.test': closed(
    'A test message sent by `signbridge admin webhook test` to one subscription, to check it works; never stored.',
    {
      ...common,
      subscription_id: Text('the subscription tested (`wh_` + 16 hex digits)'),
      by: Text('who sent it (`cli:<user>`)'),
    },
  ),
} satisfies Record<EventKind, TSchema>;

/** The data of an event of kind K, as its schema says. */
export type EventDataFor<K extends EventKind> = Static<(typeof schemas)[K]>;

/** The JSON Schema of each kind's `data` (docs/events.md). */
export const EVENT_DATA_SCHEMAS: Record<EventKind, TSchema> = schemas;

/** The envelope every format but Slack, Teams and e-mail sends (EventEnvelope in event-kinds.ts). */
export const EVENT_ENVELOPE_SCHEMA = Type.Object(
  {
    type: literals(EVENT_KINDS, 'the event kind'),
    timestamp: Time('when the change happened'),
    data: Type.Object({}, { description: "the kind's data (below)" }),
  },
  { additionalProperties: false },
);

/** The first thing wrong with `data` for `kind`, as `/path message`; undefined when it matches its schema. */
export function eventDataProblem(kind: EventKind, data: unknown): string | undefined {
  const first = [...Value.Errors(EVENT_DATA_SCHEMAS[kind], data)][0];
  return first && `${first.path || '/'} ${first.message}`;
}

const CONSOLE = 'https://signbridge.example.com/console';
const REQUEST_ID = '3f0c7a52-5d1e-4c1b-9a57-2f8e6b0d9c41';
const DIGEST = 'n4bQgYhMfWWaL+qgxVrQFaO/TxsrC4Is0V1sFbDwCgg=';
const alice = {
  api_key_id: 'person:7d3e1b9a-0c4f-4e2a-8b6d-5a9c1e2f3b4d',
  person: { id: '7d3e1b9a-0c4f-4e2a-8b6d-5a9c1e2f3b4d', email: 'alice@example.com' },
};
const ciJob = {
  api_key_id: '9b2f4c1d8e7a6b5c',
  workload: {
    issuer: 'https://token.actions.githubusercontent.com',
    subject: 'repo:acme/installer:environment:production',
    repository: 'acme/installer',
    run_url: 'https://github.com/acme/installer/actions/runs/12345678901/attempts/1',
  },
};
const bob = {
  api_key_id: 'c4d5e6f7a8b9c0d1',
  person: { id: 'b0a1c2d3-e4f5-4a6b-8c7d-9e0f1a2b3c4d', email: 'bob@example.com' },
};
const ciInputs = {
  project: 'acme/installer',
  environment: 'production',
  artifact_type: 'msi',
  artifact_version: '4.2.0',
  sbom: { format: 'cyclonedx' as const, spec_version: '1.6', components: 212 },
  ci: {
    issuer: 'https://token.actions.githubusercontent.com',
    subject: 'repo:acme/installer:environment:production',
    ref: 'refs/tags/v4.2.0',
    ref_type: 'tag',
    ref_protected: true,
    workflow: 'acme/installer/.github/workflows/release.yml@refs/tags/v4.2.0',
    sha: '1f3e5d7c9b2a4f6e8d0c1b3a5f7e9d2c4b6a8f0e',
    run_id: '12345678901',
    run_attempt: '1',
    actor: 'carol',
    event_name: 'push',
    runner_environment: 'github-hosted',
  },
};
const held = {
  tenant_id: 'acme',
  console_url: `${CONSOLE}/requests#req-${REQUEST_ID}`,
  request_id: REQUEST_ID,
  key_id: 'e2c1b0a9-8f7e-4d6c-b5a4-938271605f4e',
  algorithm: 'ECDSA_SHA_256' as const,
  digest: DIGEST,
  rule: 'release-needs-approval',
  reason: 'production releases need an approver',
  inputs: ciInputs,
  requester: ciJob,
  requested_at: '2026-11-26T09:40:00.000Z',
  expires_at: '2026-11-27T09:40:00.000Z',
};
const exception = {
  tenant_id: 'acme',
  console_url: `${CONSOLE}/tenants/acme/exceptions`,
  exception_id: '5e4d3c2b-1a09-4f8e-9d7c-6b5a4f3e2d1c',
  vuln_id: 'GHSA-xxxx-2026-0001',
  project: 'acme/installer',
  artifact_type: null,
  reason: 'not reachable: the vulnerable parser is never called (ticket SEC-1432)',
  expires_at: '2026-12-10T00:00:00.000Z',
  created_by: alice,
};
const keyChange = {
  tenant_id: 'acme',
  console_url: `${CONSOLE}/tenants/acme/audit`,
  key_id: '0a1b2c3d-4e5f-4a6b-9c8d-7e6f5a4b3c2d',
  version: 3,
  key_spec: 'ECC_NIST_P256' as const,
  previous_key_id: 'e2c1b0a9-8f7e-4d6c-b5a4-938271605f4e',
};

/** One example of each kind's data; each matches its schema (checked by test/unit/event-schemas.test.ts). */
export const EVENT_DATA_EXAMPLES: { [K in EventKind]: EventDataFor<K> } = {
  'signature.pending': { ...held, status: 'pending_approval', next_stages: [] },
  'signature.reminder': { ...held, status: 'pending_approval', next_stages: [] },
  'signature.approved': {
    ...held,
    console_url: `${CONSOLE}/requests`,
    stage: 'pending_approval',
    decided_by: alice,
    decision_reason: 'release 4.2.0 is on the change calendar',
    status: 'approved',
    next_stages: [],
  },
  'signature.rejected': {
    ...held,
    console_url: `${CONSOLE}/requests`,
    stage: 'pending_approval',
    decided_by: alice,
    decision_reason: 'not on the change calendar',
    status: 'rejected',
  },
  // Made at once: no request_id (one after an approval carries the request's, with its rule and reason).
  'signature.signed': {
    tenant_id: 'acme',
    console_url: `${CONSOLE}/tenants/acme/audit`,
    key_id: held.key_id,
    algorithm: 'ECDSA_SHA_256',
    digest: DIGEST,
    rule: 'default-allow',
    reason: 'no rule objected',
    inputs: ciInputs,
    requester: ciJob,
    signature_id: '019ac0f2-6b1e-7c3d-9a4b-5c6d7e8f9a0b',
  },
  'signature.denied': {
    tenant_id: 'acme',
    key_id: held.key_id,
    algorithm: 'ECDSA_SHA_256',
    digest: DIGEST,
    rule: 'sbom-no-critical',
    reason: 'component log4j-core@2.14.1 has GHSA-jfh8-c2jp-5v3q (critical)',
    inputs: { project: 'acme/server', environment: 'production', artifact_type: 'jar', artifact_version: '1.8.0' },
    requester: bob,
    vuln_id: 'GHSA-jfh8-c2jp-5v3q',
    fix_version: '2.15.0',
  },
  'signature.expired': { ...held, console_url: `${CONSOLE}/requests`, status: 'expired' },
  'exception.created': exception,
  'exception.revoked': { ...exception, revoked_by: bob },
  'exception.expiring': exception,
  'key.rotated': { ...keyChange, rotated_by: bob },
  'key.imported': { ...keyChange, material_expires_at: '2027-11-26T00:00:00.000Z', imported_by: bob },
  'tenant.created': {
    tenant_id: 'acme',
    key_id: 'e2c1b0a9-8f7e-4d6c-b5a4-938271605f4e',
    key_spec: 'ECC_NIST_P256',
    created_by: { api_key_id: 'cli:root' },
  },
  'trust.changed': {
    tenant_id: 'acme',
    console_url: `${CONSOLE}/tenants/acme/trust`,
    change: 'added',
    rule_id: 'tr_4f3e2d1c0b9a8f7e',
    issuer: 'https://token.actions.githubusercontent.com',
    rule: {
      audience: null,
      conditions: { repository_id: '123456789', repository_owner_id: '987654', environment: 'production' },
      role: 'signer',
      key_minutes: 15,
      max_token_lifetime_s: 86_400,
      identity_claims: null,
    },
    changed_by: alice,
  },
  'api_key.created': {
    tenant_id: 'acme',
    console_url: `${CONSOLE}/keys`,
    api_key_id: 'a1b2c3d4e5f60718',
    role: 'signer',
    roles: ['signer'],
    label: 'ci key for bob',
    person: { id: bob.person.id, email: 'bob@example.com' },
    expires_at: '2027-02-24T09:44:00.000Z',
    created_by: alice,
  },
  'api_key.revoked': {
    tenant_id: 'acme',
    console_url: `${CONSOLE}/keys`,
    api_key_id: 'a1b2c3d4e5f60718',
    role: 'signer',
    label: 'ci key for bob',
    person: { id: bob.person.id, email: 'bob@example.com' },
    revoked_by: alice,
  },
  'webhook.test': { tenant_id: 'acme', subscription_id: 'wh_0123456789abcdef', by: 'cli:ops' },
};
