// The schema and example of every event kind (src/events/event-schemas.ts), and the documentation generated from
// them: docs/events.md's generated parts and docs/event-schemas.json must be what the code renders now.
import { readFileSync, writeFileSync } from 'node:fs';
import { Value } from '@sinclair/typebox/value';
import { describe, expect, it } from 'vitest';
import {
  EVENT_DATA_EXAMPLES,
  EVENT_DATA_SCHEMAS,
  EVENT_ENVELOPE_SCHEMA,
  eventDataProblem,
} from '../../src/events/event-schemas.js';
import { EVENT_KINDS, type EventData } from '../../src/store/records/event-kinds.js';
import {
  EVENT_SCHEMAS_FILE,
  EVENTS_DOC,
  generatedPart,
  renderGenerated,
  renderSchemaFile,
  updatedDoc,
} from '../helpers/events-doc.js';

const clone = <T>(value: T): T => structuredClone(value);

describe('event data schemas', () => {
  it('has a schema and an example for every kind, and nothing else', () => {
    expect(Object.keys(EVENT_DATA_SCHEMAS).sort()).toEqual([...EVENT_KINDS].sort());
    expect(Object.keys(EVENT_DATA_EXAMPLES).sort()).toEqual([...EVENT_KINDS].sort());
  });

  it.each(EVENT_KINDS)('the example of %s validates against its schema', (kind) => {
    const example = EVENT_DATA_EXAMPLES[kind];
    expect(eventDataProblem(kind, example)).toBeUndefined();
    expect(Value.Check(EVENT_DATA_SCHEMAS[kind], example)).toBe(true);
    // An example is an event's data as the outbox stores it, and its envelope validates too.
    const data: EventData = example;
    expect(Value.Check(EVENT_ENVELOPE_SCHEMA, { type: kind, timestamp: '2026-11-26T09:40:00.000Z', data })).toBe(true);
  });

  it.each(EVENT_KINDS)('the schema of %s is closed and needs tenant_id', (kind) => {
    const extra = { ...clone(EVENT_DATA_EXAMPLES[kind]), secret: 'sbk_0123456789abcdef_x' };
    expect(eventDataProblem(kind, extra)).toMatch(/^\/secret /);
    const { tenant_id: _, ...noTenant } = clone(EVENT_DATA_EXAMPLES[kind]) as Record<string, unknown>;
    expect(eventDataProblem(kind, noTenant)).toMatch(/tenant_id/);
  });

  it('refuses what the outbox could get wrong: a wrong status, a bad time, a bad digest, an actor without a key', () => {
    const pending = clone(EVENT_DATA_EXAMPLES['signature.pending']);
    expect(eventDataProblem('signature.pending', { ...pending, status: 'approved' })).toMatch(/^\/status/);
    expect(eventDataProblem('signature.pending', { ...pending, expires_at: 'tomorrow' })).toMatch(/^\/expires_at/);
    expect(eventDataProblem('signature.pending', { ...pending, digest: 'not base64!' })).toMatch(/^\/digest/);
    expect(eventDataProblem('signature.pending', { ...pending, requester: { person: { id: 'p' } } })).toMatch(
      /^\/requester/,
    );
    expect(
      eventDataProblem('signature.pending', { ...pending, inputs: { ...pending.inputs, sbom: '{"bomFormat":1}' } }),
    ).toMatch(/^\/inputs\/sbom/);
    const key = clone(EVENT_DATA_EXAMPLES['api_key.created']);
    expect(eventDataProblem('api_key.created', { ...key, tenant_id: null })).toBeUndefined();
    expect(eventDataProblem('api_key.created', { ...key, role: 'root' })).toMatch(/^\/role/);
    const trust = clone(EVENT_DATA_EXAMPLES['trust.changed']);
    expect(eventDataProblem('trust.changed', { ...trust, change: 'edited' })).toMatch(/^\/change/);
  });
});

describe('the event documentation is generated from the code', () => {
  // UPDATE_EVENTS_DOC=1 writes the files instead of comparing them (after a change to a schema, an example or a format).
  const update = process.env.UPDATE_EVENTS_DOC === '1';

  it('docs/events.md: one event in each format, and every kind with its fields and example', () => {
    const doc = readFileSync(EVENTS_DOC, 'utf8');
    if (update) writeFileSync(EVENTS_DOC, updatedDoc(doc));
    const now = readFileSync(EVENTS_DOC, 'utf8');
    expect(generatedPart(now, 'formats'), 'run with UPDATE_EVENTS_DOC=1 to regenerate').toBe(
      renderGenerated('formats'),
    );
    expect(generatedPart(now, 'kinds'), 'run with UPDATE_EVENTS_DOC=1 to regenerate').toBe(renderGenerated('kinds'));
    for (const kind of EVENT_KINDS) expect(now).toContain(`\n### ${kind}\n`);
  });

  it('docs/events.md: each example block is the example in the code', () => {
    const kinds = readFileSync(EVENTS_DOC, 'utf8')
      .split(/\n### /)
      .slice(1);
    for (const kind of EVENT_KINDS) {
      const section = kinds.find((s) => s.startsWith(`${kind}\n`)) ?? '';
      const json = /```json\n([\s\S]*?)\n```/.exec(section)?.[1];
      expect(json, `docs/events.md has no example for ${kind}`).toBeDefined();
      expect(JSON.parse(json as string)).toEqual(EVENT_DATA_EXAMPLES[kind]);
    }
  });

  it('docs/event-schemas.json holds every schema', () => {
    if (update) writeFileSync(EVENT_SCHEMAS_FILE, renderSchemaFile());
    // Compared as JSON: biome formats the file its own way.
    const parsed = JSON.parse(readFileSync(EVENT_SCHEMAS_FILE, 'utf8')) as { data: Record<string, unknown> };
    expect(parsed, 'run with UPDATE_EVENTS_DOC=1 to regenerate').toEqual(JSON.parse(renderSchemaFile()));
    expect(Object.keys(parsed.data)).toEqual([...EVENT_KINDS]);
  });
});
