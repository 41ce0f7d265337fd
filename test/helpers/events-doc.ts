// The generated parts of the event documentation, from the code: in docs/events.md one event in each format
// (src/events/formats/) and the per-kind section (when each kind is emitted, its fields, an example), and
// docs/event-schemas.json (every schema; src/events/event-schemas.ts). test/unit/event-schemas.test.ts fails when
// the files differ from this; UPDATE_EVENTS_DOC=1 makes it write them instead (then `npx biome format --write
// docs/event-schemas.json`: the test compares that file as JSON, biome checks its layout).
import type { TSchema } from '@sinclair/typebox';
import {
  EVENT_DATA_EXAMPLES,
  EVENT_DATA_SCHEMAS,
  EVENT_ENVELOPE_SCHEMA,
  EventActorSchema,
  SignatureInputsSchema,
} from '../../src/events/event-schemas.js';
import { mailMessage } from '../../src/events/formats/mail-message.js';
import { slackMessage } from '../../src/events/formats/slack.js';
import { standardWebhookRequest } from '../../src/events/formats/standard-webhooks.js';
import { teamsMessage } from '../../src/events/formats/teams.js';
import { packagePath } from '../../src/paths.js';
import { EVENT_KINDS, type EventRecord } from '../../src/store/records/event-kinds.js';

export const EVENTS_DOC = packagePath('docs', 'events.md');
export const EVENT_SCHEMAS_FILE = packagePath('docs', 'event-schemas.json');
export type GeneratedPart = 'formats' | 'kinds';
const begin = (name: GeneratedPart) =>
  `<!-- generated:${name} from src/events (UPDATE_EVENTS_DOC=1 npx vitest run test/unit/event-schemas.test.ts rewrites it) -->`;
const end = (name: GeneratedPart) => `<!-- end generated:${name} -->`;

/** The example secret of the Standard Webhooks specification: the documented request can be checked with it. */
export const EXAMPLE_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
export const EXAMPLE_EVENT: EventRecord = {
  id: 'evt_01JDQ4Z8X3N5V7B9C1D3F5H7K9',
  seq: 41,
  tenantId: 'acme',
  timestamp: '2026-11-26T09:40:00.120Z',
  type: 'signature.pending',
  data: EVENT_DATA_EXAMPLES['signature.pending'],
  orderKey: `request:${EVENT_DATA_EXAMPLES['signature.pending'].request_id}`,
};
const EXAMPLE_ATTEMPT = new Date('2026-11-26T09:40:01.000Z');

/** Shapes that several kinds share: described once, linked from each table. */
const SHARED: Record<string, TSchema> = { EventActor: EventActorSchema, SignatureInputs: SignatureInputsSchema };

type Json = Record<string, unknown>;

/** JSON with an object or array on one line when it fits, so the examples read as a page, not a column. */
export function prettyJson(value: unknown, indent = ''): string {
  // JSON.stringify escapes line breaks inside strings, so every line break here is layout.
  const flat = JSON.stringify(value, null, 1).replace(/\n\s*/g, ' ');
  if (typeof value !== 'object' || value === null || indent.length + flat.length <= 100) return flat;
  const inner = `${indent}  `;
  if (Array.isArray(value)) return `[\n${value.map((v) => inner + prettyJson(v, inner)).join(',\n')}\n${indent}]`;
  const entries = Object.entries(value).map(([k, v]) => `${inner}${JSON.stringify(k)}: ${prettyJson(v, inner)}`);
  return `{\n${entries.join(',\n')}\n${indent}}`;
}
/** The schema as JSON: TypeBox's own markers are symbols, which JSON drops. */
const plain = (schema: TSchema): Json => JSON.parse(JSON.stringify(schema)) as Json;

function typeText(s: Json): string {
  if (typeof s.title === 'string' && s.title in SHARED) return `[${s.title}](#${s.title.toLowerCase()})`;
  if (Array.isArray(s.anyOf)) {
    const options = s.anyOf as Json[];
    if (options.every((o) => 'const' in o)) {
      const values = options.map((o) => `\`${String(o.const)}\``);
      return values.length > 5 ? `${values.slice(0, 2).join(', ')}, … (${values.length} values)` : values.join(', ');
    }
    const notNull = options.filter((o) => o.type !== 'null');
    return `${notNull.map(typeText).join(' or ')}${notNull.length < options.length ? ' or null' : ''}`;
  }
  if ('const' in s) return `\`${String(s.const)}\``;
  if (s.type === 'array') return `array of ${typeText(s.items as Json)}`;
  if (s.type === 'object' && s.patternProperties) return 'object of strings';
  if (typeof s.format === 'string') return `${String(s.type)} (${s.format})`;
  return String(s.type);
}

function rows(schema: Json, prefix: string): string[] {
  const properties = (schema.properties ?? {}) as Record<string, Json>;
  const required = new Set((schema.required ?? []) as string[]);
  const out: string[] = [];
  for (const [name, prop] of Object.entries(properties)) {
    const field = `${prefix}${name}`;
    const description = String(prop.description ?? '').replace(/\|/g, '\\|');
    out.push(`| \`${field}\` | ${typeText(prop)} | ${required.has(name) ? 'yes' : 'no'} | ${description} |`);
    const shared = typeof prop.title === 'string' && prop.title in SHARED;
    if (prop.type === 'object' && prop.properties && !shared) out.push(...rows(prop, `${field}.`));
  }
  return out;
}

function table(schema: TSchema): string {
  return ['| field | type | required | description |', '|---|---|---|---|', ...rows(plain(schema), '')].join('\n');
}

/** One event (signature.pending) as each format sends it. */
function renderFormats(): string {
  const webhook = standardWebhookRequest(EXAMPLE_EVENT, EXAMPLE_SECRET, EXAMPLE_ATTEMPT);
  const mail = mailMessage(EXAMPLE_EVENT);
  return [
    '#### standard',
    '',
    `With the secret \`${EXAMPLE_SECRET}\` (the specification's example; never use it), the attempt at ` +
      `${EXAMPLE_ATTEMPT.toISOString()}:`,
    '',
    '```http',
    'POST /your/endpoint HTTP/1.1',
    ...Object.entries(webhook.headers).map(([name, value]) => `${name}: ${value}`),
    '',
    webhook.body,
    '```',
    '',
    '#### slack',
    '',
    '```json',
    prettyJson(slackMessage(EXAMPLE_EVENT)),
    '```',
    '',
    '#### teams',
    '',
    '```json',
    prettyJson(teamsMessage(EXAMPLE_EVENT)),
    '```',
    '',
    '#### email',
    '',
    'The subject and the text part (the HTML part says the same in a table, every value escaped):',
    '',
    '```text',
    `Subject: ${mail.subject}`,
    '',
    mail.text.trimEnd(),
    '```',
  ].join('\n');
}

/** The per-kind section: the shared shapes, then for each kind when it is emitted, its fields and an example. */
function renderKinds(): string {
  const parts: string[] = [];
  parts.push('### Shared shapes', '');
  for (const [name, schema] of Object.entries(SHARED)) parts.push(`#### ${name}`, '', table(schema), '');
  for (const kind of EVENT_KINDS) {
    const schema = EVENT_DATA_SCHEMAS[kind];
    parts.push(
      `### ${kind}`,
      '',
      String(schema.description),
      '',
      table(schema),
      '',
      '```json',
      prettyJson(EVENT_DATA_EXAMPLES[kind]),
      '```',
      '',
    );
  }
  return parts.join('\n').trimEnd();
}

/** A generated part with its markers, as it stands in docs/events.md. */
export function renderGenerated(name: GeneratedPart): string {
  return `${begin(name)}\n\n${name === 'formats' ? renderFormats() : renderKinds()}\n\n${end(name)}`;
}

/** docs/event-schemas.json: the envelope's schema and each kind's data schema. */
export function renderSchemaFile(): string {
  const file = {
    $comment:
      "signbridge events: the envelope and the JSON Schema of each kind's data (docs/events.md). Generated from " +
      'src/events/event-schemas.ts.',
    envelope: plain(EVENT_ENVELOPE_SCHEMA),
    data: Object.fromEntries(EVENT_KINDS.map((kind) => [kind, plain(EVENT_DATA_SCHEMAS[kind])])),
  };
  return `${JSON.stringify(file, null, 2)}\n`;
}

/** A generated part of `doc` with its markers, or undefined when the markers are missing. */
export function generatedPart(doc: string, name: GeneratedPart): string | undefined {
  const from = doc.indexOf(begin(name));
  const to = doc.indexOf(end(name));
  return from < 0 || to < from ? undefined : doc.slice(from, to + end(name).length);
}

/** `doc` with its generated parts replaced by what the code renders now. */
export function updatedDoc(doc: string): string {
  let out = doc;
  for (const name of ['formats', 'kinds'] as const) {
    const current = generatedPart(out, name);
    if (current === undefined) throw new Error(`docs/events.md has no markers for generated:${name}`);
    out = out.replace(current, () => renderGenerated(name));
  }
  return out;
}
