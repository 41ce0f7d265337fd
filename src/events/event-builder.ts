// Builds each event's data from the records of the change (docs/events.md; src/events/event-schemas.ts is the
// reference for the field names). The services call it before the store method that makes the change, which writes
// the events in its transaction. Lookups here (who the requester is) are reads; the change itself happens once.
import type { ApiKeyRecord, ExceptionRecord, KeyRecord, PendingRequestRecord, Store } from '../store/store.js';
import type { EventActor, EventData, EventInput, EventKind } from './event-kinds.js';

/** What a request's inputs look like in an event: what the console shows of them. */
function requestInputs(inputsJson: string): Record<string, unknown> {
  let inputs: Record<string, unknown>;
  try {
    inputs = JSON.parse(inputsJson) as Record<string, unknown>;
  } catch {
    return {};
  }
  const out: Record<string, unknown> = {};
  const copy: Array<[string, string]> = [
    ['project', 'project'],
    ['environment', 'environment'],
    ['artifactType', 'artifact_type'],
    ['artifactVersion', 'artifact_version'],
    ['workloadIssuer', 'ci_issuer'],
    ['workloadSubject', 'ci_subject'],
    ['ref', 'ci_ref'],
    ['sha', 'ci_sha'],
    ['workflow', 'ci_workflow'],
    ['runId', 'ci_run_id'],
    ['runnerEnvironment', 'ci_runner_environment'],
  ];
  for (const [from, to] of copy) if (inputs[from] !== undefined) out[to] = inputs[from];
  // The SBOM itself can be megabytes: the event says only whether one was sent.
  out.sbom_sent = typeof inputs.sbom === 'string';
  return out;
}

export class EventBuilder {
  constructor(
    private readonly store: Store,
    /** The service's public URL; links are left out without one (a function only in tests). */
    private readonly publicUrl: string | (() => string) | undefined,
  ) {}

  /** A console page's absolute URL, or undefined without a public URL (or with the OpenAPI template one). */
  consoleUrl(path: string): string | undefined {
    const base = typeof this.publicUrl === 'function' ? this.publicUrl() : this.publicUrl;
    if (!base || base.includes('{')) return undefined;
    return `${base.replace(/\/+$/, '')}/console${path}`;
  }

  /** Who an API key id is: the key, and the person or the CI job behind it. */
  async actor(apiKeyId: string, personId?: string | null): Promise<EventActor> {
    if (apiKeyId.startsWith('person:')) return this.personActor(apiKeyId, apiKeyId.slice('person:'.length));
    const key = await this.store.getApiKey(apiKeyId);
    return this.keyActor(apiKeyId, key, personId ?? key?.personId ?? null);
  }

  private async personActor(apiKeyId: string, personId: string): Promise<EventActor> {
    const person = await this.store.people.getPerson(personId);
    return { api_key_id: apiKeyId, person: { id: personId, email: person?.email ?? null } };
  }

  private async keyActor(apiKeyId: string, key: ApiKeyRecord | undefined, personId: string | null) {
    const actor: EventActor = { api_key_id: apiKeyId };
    if (personId) {
      const person = await this.store.people.getPerson(personId);
      actor.person = { id: personId, email: person?.email ?? null };
    }
    if (key?.workload) {
      actor.workload = {
        issuer: key.workload.issuer,
        subject: key.workload.subject,
        ...(key.workload.facts.project !== undefined && { repository: key.workload.facts.project }),
        ...(key.workload.runUrl !== undefined && { run_url: key.workload.runUrl }),
      };
    }
    return actor;
  }

  /** A request's event: pending (or its reminder), approved, rejected, signed, expired, or denied on recheck. */
  async request(
    type: Extract<EventKind, `signature.${string}`>,
    r: PendingRequestRecord,
    extra: { status?: string; decidedBy?: string; decidedByPerson?: string | null; decisionReason?: string } & Record<
      string,
      unknown
    > = {},
  ): Promise<EventInput> {
    const { status, decidedBy, decidedByPerson, decisionReason, ...rest } = extra;
    const data: EventData = {
      tenant_id: r.tenantId,
      console_url: this.consoleUrl(`/requests#req-${r.id}`),
      request_id: r.id,
      status: status ?? r.status,
      key_id: r.keyId,
      algorithm: r.algorithm,
      digest: r.hash,
      rule: r.rule,
      reason: r.reason,
      inputs: requestInputs(r.inputs),
      requester: await this.actor(r.requester),
      created_at: r.createdAt,
      expires_at: r.expiresAt,
      ...(decidedBy !== undefined && { decided_by: await this.actor(decidedBy, decidedByPerson) }),
      ...(decisionReason !== undefined && { decision_reason: decisionReason }),
      ...rest,
    };
    if (data.console_url === undefined) delete data.console_url;
    return { type, data, orderKey: `request:${r.id}` };
  }

  /** A signature the policy refused outright (no request to decide). */
  async denied(d: {
    tenantId: string;
    keyId: string;
    algorithm: string;
    digest: string;
    rule: string;
    reason: string;
    inputs: Record<string, unknown>;
    requester: string;
    vulnId?: string;
  }): Promise<EventInput> {
    return {
      type: 'signature.denied',
      data: withLink(
        {
          tenant_id: d.tenantId,
          key_id: d.keyId,
          algorithm: d.algorithm,
          digest: d.digest,
          rule: d.rule,
          reason: d.reason,
          inputs: requestInputs(JSON.stringify(d.inputs)),
          requester: await this.actor(d.requester),
          ...(d.vulnId !== undefined && { vuln_id: d.vulnId }),
        },
        this.consoleUrl(`/tenants/${encodeURIComponent(d.tenantId)}/audit`),
      ),
    };
  }

  async exception(
    type: 'exception.created' | 'exception.revoked' | 'exception.expiring',
    e: ExceptionRecord,
  ): Promise<EventInput> {
    return {
      type,
      data: withLink(
        {
          tenant_id: e.tenantId,
          exception_id: e.id,
          vuln_id: e.vulnId,
          project: e.project,
          artifact_type: e.artifactType,
          reason: e.reason,
          expires_at: e.expiresAt,
          created_by: await this.actor(e.createdBy),
          ...(e.revokedBy !== null && type === 'exception.revoked' && { revoked_by: await this.actor(e.revokedBy) }),
        },
        this.consoleUrl(`/tenants/${encodeURIComponent(e.tenantId)}/exceptions`),
      ),
      orderKey: `exception:${e.id}`,
    };
  }

  /** key.rotated / key.imported; synchronous (made inside the store's transaction from the new version). */
  keyEvent(
    type: 'key.rotated' | 'key.imported',
    key: KeyRecord,
    by: EventActor,
    previousKeyId: string | null,
  ): EventInput {
    return {
      type,
      data: withLink(
        {
          tenant_id: key.tenantId,
          key_id: key.id,
          version: key.version,
          key_spec: key.keySpec,
          key_store: key.keyStore,
          previous_key_id: previousKeyId,
          by,
        },
        this.consoleUrl(`/tenants/${encodeURIComponent(key.tenantId)}/audit`),
      ),
      orderKey: `tenant-keys:${key.tenantId}`,
    };
  }

  async tenantCreated(tenantId: string, key: KeyRecord, by: string): Promise<EventInput> {
    return {
      type: 'tenant.created',
      data: withLink(
        { tenant_id: tenantId, key_id: key.id, key_spec: key.keySpec, by: await this.actor(by) },
        this.consoleUrl(`/tenants/${encodeURIComponent(tenantId)}/members`),
      ),
      orderKey: `tenant-keys:${tenantId}`,
    };
  }

  async apiKey(type: 'api_key.created' | 'api_key.revoked', key: ApiKeyRecord, by: string): Promise<EventInput> {
    return {
      type,
      data: withLink(
        {
          tenant_id: key.tenantId,
          api_key_id: key.id,
          role: key.role,
          roles: key.roles ?? [key.role],
          label: key.label,
          ...(key.personId && { person_id: key.personId }),
          by: await this.actor(by),
        },
        this.consoleUrl('/keys'),
      ),
      orderKey: `api-key:${key.id}`,
    };
  }

  async trustChanged(
    change: 'added' | 'removed',
    rule: { id: string; tenantId: string; issuer: string; audience: string | null; role: string; conditions: object },
    by: string,
  ): Promise<EventInput> {
    return {
      type: 'trust.changed',
      data: withLink(
        {
          tenant_id: rule.tenantId,
          change,
          rule_id: rule.id,
          issuer: rule.issuer,
          audience: rule.audience,
          role: rule.role,
          conditions: rule.conditions,
          by: await this.actor(by),
        },
        this.consoleUrl(`/tenants/${encodeURIComponent(rule.tenantId)}/trust`),
      ),
      orderKey: `trust:${rule.tenantId}`,
    };
  }
}

function withLink(data: EventData, link: string | undefined): EventData {
  return link === undefined ? data : { ...data, console_url: link };
}
