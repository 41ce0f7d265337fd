// Builds each event's data from the records of the change, to the schemas of src/events/event-schemas.ts (the
// reference for field names; test/unit/event-builder.test.ts checks every kind against them). The services call it
// before the store method that makes the change, which writes the events in its transaction. The lookups here
// (who an API key is) are reads; the change itself happens once.
import { parseSbom } from '../policy/sbom/parse-sbom.js';
import type { LoggedSignature } from '../store/events/event-store.js';
import type { EventActor, EventData, EventInput, EventRecord } from '../store/records/event-kinds.js';
import { type TrustRule, type TrustRuleTerms, trustRuleTermsJson } from '../store/records/trust-rule.js';
import type { ApiKeyRecord, ExceptionRecord, KeyRecord, PendingRequestRecord, Store } from '../store/store.js';

type Json = Record<string, unknown>;

/**
 * The id of the event read from the log entry `seq` (and, for a batch entry, of its item of index `item`): the same
 * on every attempt and every instance (the entry's seq is the log's, one per database), with no '.' (Standard
 * Webhooks), never an outbox event's (those end in random hex).
 */
export function logEventId(seq: number, item?: number): string {
  return item === undefined ? `evt_log${seq}` : `evt_log${seq}i${item}`;
}

/** The CI facts of a request's inputs, under the schema's names. */
const CI_FACTS: Array<[string, string]> = [
  ['workloadIssuer', 'issuer'],
  ['workloadSubject', 'subject'],
  ['ref', 'ref'],
  ['refType', 'ref_type'],
  ['refProtected', 'ref_protected'],
  ['workflow', 'workflow'],
  ['sha', 'sha'],
  ['runId', 'run_id'],
  ['runAttempt', 'run_attempt'],
  ['actor', 'actor'],
  ['eventName', 'event_name'],
  ['runnerEnvironment', 'runner_environment'],
];

/** A request's policy inputs as an event shows them: what the console shows, an SBOM only as a summary. */
export function eventInputs(inputs: Json): Json {
  const out: Json = {};
  const copy: Array<[string, string]> = [
    ['project', 'project'],
    ['environment', 'environment'],
    ['artifactType', 'artifact_type'],
    ['artifactVersion', 'artifact_version'],
  ];
  for (const [from, to] of copy) if (typeof inputs[from] === 'string') out[to] = inputs[from];
  if (typeof inputs.sbom === 'string') {
    try {
      const sbom = parseSbom(inputs.sbom);
      out.sbom = { format: sbom.format, spec_version: sbom.specVersion, components: sbom.components.length };
    } catch {
      // An SBOM the policy could not read either: the event does not describe it.
    }
  }
  if (inputs.workloadIssuer !== undefined) {
    const ci: Json = {};
    for (const [from, to] of CI_FACTS) if (inputs[from] !== undefined) ci[to] = inputs[from];
    out.ci = ci;
  }
  return out;
}

function parsedInputs(json: string): Json {
  try {
    return JSON.parse(json) as Json;
  } catch {
    return {};
  }
}

type RequestKind =
  | 'signature.pending'
  | 'signature.reminder'
  | 'signature.approved'
  | 'signature.rejected'
  | 'signature.expired'
  | 'signature.signed'
  | 'signature.denied';

/** What a decision adds to a request's event. */
export interface DecisionFacts {
  /** The stage decided. */
  stage: string;
  /** The API key (or person:ID) that decided. */
  by: string;
  byPerson?: string | null;
  reason?: string;
}

/** A signing request the policy decided when it was asked (made at once, or denied): what its event tells. */
export interface PolicyDecided {
  tenantId: string;
  keyId: string;
  algorithm: string;
  digest: string;
  rule: string;
  reason: string;
  inputs: Json;
  requester: string;
  personId?: string | null;
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

  /**
   * Who acted: an API key id and the person or CI job behind it, or `person:<id>` (a decision in the console),
   * or `cli:<user>` / `service` (no key: kept as the id).
   */
  async actor(apiKeyId: string, personId?: string | null): Promise<EventActor> {
    if (apiKeyId.startsWith('person:')) return { api_key_id: apiKeyId, person: await this.person(apiKeyId.slice(7)) };
    const key = apiKeyId.includes(':') ? undefined : await this.store.apiKeys.get(apiKeyId);
    const actor: EventActor = { api_key_id: apiKeyId };
    const owner = personId ?? key?.personId ?? null;
    if (owner) actor.person = await this.person(owner);
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

  private async person(id: string): Promise<{ id: string; email: string | null }> {
    const person = await this.store.people.getPerson(id);
    return { id, email: person?.email ?? null };
  }

  /**
   * An event about a held request. `status` is the request's status after the change; `decision` is the stage
   * just decided (approved, rejected, denied on re-check).
   */
  async request(
    type: RequestKind,
    r: PendingRequestRecord,
    change: {
      status?: string;
      nextStages?: readonly string[];
      decision?: DecisionFacts;
      /** signature.denied on re-check: the rule that refused it now. */
      denial?: { rule: string; reason: string; vulnId?: string; fixVersion?: string };
      /** signature.signed: the signature record's id. */
      signatureId?: string;
    } = {},
  ): Promise<EventInput> {
    const signature: Json = {
      tenant_id: r.tenantId,
      key_id: r.keyId,
      algorithm: r.algorithm,
      digest: r.hash,
      rule: change.denial?.rule ?? r.rule,
      reason: change.denial?.reason ?? r.reason,
      inputs: eventInputs(parsedInputs(r.inputs)),
      requester: await this.actor(r.requester),
    };
    let data: Json;
    if (type === 'signature.signed') {
      data = {
        ...signature,
        ...(change.signatureId !== undefined && { signature_id: change.signatureId }),
        request_id: r.id,
      };
    } else if (type === 'signature.denied') {
      data = {
        ...signature,
        request_id: r.id,
        ...(change.denial?.vulnId !== undefined && { vuln_id: change.denial.vulnId }),
        ...(change.denial?.fixVersion !== undefined && { fix_version: change.denial.fixVersion }),
      };
    } else {
      data = {
        ...signature,
        request_id: r.id,
        requested_at: r.createdAt,
        expires_at: r.expiresAt,
        status: change.status ?? r.status,
      };
      if (type === 'signature.pending' || type === 'signature.reminder' || type === 'signature.approved') {
        data.next_stages = [...(change.nextStages ?? r.nextStages)];
      }
      if (change.decision && (type === 'signature.approved' || type === 'signature.rejected')) {
        data.stage = change.decision.stage;
        data.decided_by = await this.actor(change.decision.by, change.decision.byPerson);
        if (change.decision.reason !== undefined) data.decision_reason = change.decision.reason;
      }
    }
    return { type, data: this.linked(data, `/requests#req-${r.id}`), orderKey: `request:${r.id}` };
  }

  /**
   * signature.signed for the signature of an approved request, made before the signature (its lookups are
   * asynchronous); the function adds the signature record's id, known only when the store writes the record in
   * the transaction that also approves the request.
   */
  async signedOnApproval(r: PendingRequestRecord): Promise<(signatureId: string) => EventInput> {
    const told = await this.request('signature.signed', r);
    // The fields in the order request() gives them with a signature id.
    const { request_id, console_url, ...signature } = told.data;
    return (signatureId) => ({
      ...told,
      data: { ...signature, signature_id: signatureId, request_id, ...(console_url !== undefined && { console_url }) },
    });
  }

  /**
   * signature.signed for a signature made at once, read from its `signed` audit entry by the dispatcher
   * (docs/events.md, "Events read from the log"): the data the outbox row held before issue 46 (no request, so no
   * request_id and no order key: one order key per tenant would send its signatures one at a time).
   * The entry holds every field (the policy inputs the event shows under `event_inputs`; who asked as its actor,
   * `person` and `workload`) but the person's e-mail, which is read now. Its id is made from the entry's seq, so
   * every attempt at it carries the same webhook-id. A signature of a batch (`entry.item`) tells its item's digest
   * (from batch_items), and its id is the batch's signature_id and the item's index, as the signing service answers
   * it (batchSignatureId in src/signing/signature-recorder.ts).
   */
  async signedFromLog(entry: LoggedSignature): Promise<EventRecord> {
    const d = entry.details;
    const item = entry.item;
    const data = this.linked(
      {
        tenant_id: entry.tenantId,
        key_id: d.key_id,
        algorithm: d.algorithm,
        digest: item ? item.digest.toString('base64') : d.hash,
        rule: d.rule,
        reason: d.reason,
        inputs: (d.event_inputs as Json | undefined) ?? {},
        requester: await this.requesterOfEntry(entry.actor, d),
      },
      `/tenants/${encodeURIComponent(entry.tenantId)}/audit`,
    );
    const signatureId = d.signature_id as string;
    return {
      id: logEventId(entry.seq, item?.index),
      seq: entry.seq,
      tenantId: entry.tenantId,
      type: 'signature.signed',
      timestamp: entry.at,
      data: { ...data, signature_id: item ? `${signatureId}.${item.index}` : signatureId },
      orderKey: null,
    };
  }

  /** Who asked, as actor() tells it, from the entry: its key may be gone by now (a CI job's lasts minutes). */
  private async requesterOfEntry(actor: string, details: Json): Promise<EventActor> {
    if (actor.startsWith('person:')) return this.actor(actor);
    const requester: EventActor = { api_key_id: actor };
    if (typeof details.person === 'string') requester.person = await this.person(details.person);
    const workload = details.workload as Record<string, string> | undefined;
    if (workload?.issuer !== undefined && workload.subject !== undefined) {
      requester.workload = {
        issuer: workload.issuer,
        subject: workload.subject,
        ...(workload.project !== undefined && { repository: workload.project }),
        ...(workload.run_url !== undefined && { run_url: workload.run_url }),
      };
    }
    return requester;
  }

  /** A signature the policy refused when it was asked for (no request to decide). */
  async denied(d: PolicyDecided & { vulnId?: string; fixVersion?: string }): Promise<EventInput> {
    const data: Json = {
      tenant_id: d.tenantId,
      key_id: d.keyId,
      algorithm: d.algorithm,
      digest: d.digest,
      rule: d.rule,
      reason: d.reason,
      inputs: eventInputs(d.inputs),
      requester: await this.actor(d.requester),
      ...(d.vulnId !== undefined && { vuln_id: d.vulnId }),
      ...(d.fixVersion !== undefined && { fix_version: d.fixVersion }),
    };
    return { type: 'signature.denied', data: this.linked(data, `/tenants/${encodeURIComponent(d.tenantId)}/audit`) };
  }

  async exception(
    type: 'exception.created' | 'exception.revoked' | 'exception.expiring',
    e: ExceptionRecord,
  ): Promise<EventInput> {
    const data: Json = {
      tenant_id: e.tenantId,
      exception_id: e.id,
      vuln_id: e.vulnId,
      project: e.project,
      artifact_type: e.artifactType,
      reason: e.reason,
      expires_at: e.expiresAt,
      created_by: await this.actor(e.createdBy),
      ...(type === 'exception.revoked' && { revoked_by: await this.actor(e.revokedBy ?? 'unknown') }),
    };
    return {
      type,
      data: this.linked(data, `/tenants/${encodeURIComponent(e.tenantId)}/exceptions`),
      orderKey: `exception:${e.id}`,
    };
  }

  /** key.rotated / key.imported; synchronous (made inside the store's transaction from the new version). */
  keyEvent(type: 'key.rotated' | 'key.imported', key: KeyRecord, by: EventActor, previousKeyId: string): EventInput {
    const data: Json = {
      tenant_id: key.tenantId,
      key_id: key.id,
      version: key.version,
      key_spec: key.keySpec,
      previous_key_id: previousKeyId,
      ...(type === 'key.rotated'
        ? { rotated_by: by }
        : { imported_by: by, material_expires_at: key.materialExpiresAt }),
    };
    return {
      type,
      data: this.linked(data, `/tenants/${encodeURIComponent(key.tenantId)}/audit`),
      orderKey: `tenant:${key.tenantId}`,
    };
  }

  async tenantCreated(tenantId: string, key: KeyRecord, by: string): Promise<EventInput> {
    const data: Json = { tenant_id: tenantId, key_id: key.id, key_spec: key.keySpec, created_by: await this.actor(by) };
    return {
      type: 'tenant.created',
      data: this.linked(data, `/tenants/${encodeURIComponent(tenantId)}/members`),
      orderKey: `tenant:${tenantId}`,
    };
  }

  async apiKey(type: 'api_key.created' | 'api_key.revoked', key: ApiKeyRecord, by: string): Promise<EventInput> {
    const data: Json = {
      tenant_id: key.tenantId,
      api_key_id: key.id,
      role: key.role,
      label: key.label,
      ...(key.personId && { person: await this.person(key.personId) }),
      ...(type === 'api_key.created'
        ? { roles: key.roles ?? [key.role], expires_at: key.expiresAt ?? null, created_by: await this.actor(by) }
        : { revoked_by: await this.actor(by) }),
    };
    return { type, data: this.linked(data, '/keys'), orderKey: `api-key:${key.id}` };
  }

  async trustChanged(
    change: 'added' | 'removed',
    rule: TrustRuleTerms & Pick<TrustRule, 'id' | 'tenantId' | 'issuer'>,
    by: string,
  ): Promise<EventInput> {
    const data: Json = {
      tenant_id: rule.tenantId,
      change,
      rule_id: rule.id,
      issuer: rule.issuer,
      rule: trustRuleTermsJson(rule),
      changed_by: await this.actor(by),
    };
    return {
      type: 'trust.changed',
      data: this.linked(data, `/tenants/${encodeURIComponent(rule.tenantId)}/trust`),
      orderKey: `trust:${rule.tenantId}`,
    };
  }

  private linked(data: Json, path: string): EventData {
    const link = this.consoleUrl(path);
    return { ...(data as EventData), ...(link !== undefined && { console_url: link }) };
  }
}
