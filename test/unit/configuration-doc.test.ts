// docs/configuration.md cannot drift from the code: its settings table names every key of the config file's schema
// and every environment variable the settings read, names nothing else, and states the defaults the settings
// modules apply. The table stays written by hand (it explains each setting, groups related keys in one row and
// links to the pages that say more); this test checks it against the schema rather than generating it.
//
// The table's columns: flag | environment | file key | default. In the file-key column every key is written in
// full (`events.pollMs`, not `pollMs`), in backticks; keys whose defaults are checked are separated by " / " and the
// default column gives one default per key in the same order (its first backticked value is the default).

import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { TSchema } from '@sinclair/typebox';
import { describe, expect, it } from 'vitest';
import { DEFAULT_PERSON_KEY_HOURS } from '../../src/auth/oidc/settings.js';
import { WORKLOAD_DEFAULTS } from '../../src/auth/workload/workload-settings.js';
import { DEFAULT_BUSY_POLL_MS } from '../../src/busy-poll.js';
import { ConfigFileSchema, SETTINGS_ENV } from '../../src/config/config.js';
import { SERVER_DEFAULTS, WORKER_MEMORY_DEFAULTS } from '../../src/config/server-settings.js';
import { EVENTS_DEFAULTS } from '../../src/events/event-settings.js';
import { SMTP_DEFAULTS } from '../../src/events/smtp-settings.js';
import { WEBHOOKS_DEFAULTS } from '../../src/events/webhook-settings.js';
import { RETENTION_DEFAULTS } from '../../src/retention/retention-settings.js';
import { DEFAULT_STATEMENT_TIMEOUT_MS } from '../../src/store/postgres/postgres-store.js';
import { LOG_DEFAULTS } from '../../src/transparency/log-service.js';
import { TRIAL_DEFAULTS } from '../../src/trial/trial-settings.js';
import { TSA_DEFAULTS } from '../../src/tsa/tsa-settings.js';

const root = join(import.meta.dirname, '..', '..');
const DOC = 'docs/configuration.md';

/** Blocks the table documents as one key, with why. */
const DOCUMENTED_AS_ONE: Record<string, string> = {
  'keyStore.legacy': 'a keyStore block of type softhsm or pkcs11, whose keys the table lists under keyStore',
};

/** The file key of every setting: object properties in dotted paths; the variants of a union of blocks merged. */
function settingKeys(schema: TSchema, prefix = ''): string[] {
  if (prefix in DOCUMENTED_AS_ONE) return [prefix];
  const variants = (schema.anyOf as TSchema[] | undefined) ?? [schema];
  const blocks = variants.filter((variant) => variant.type === 'object' && variant.properties);
  if (blocks.length === 0 || blocks.length < variants.length) return prefix ? [prefix] : [];
  const keys = blocks.flatMap((block) =>
    Object.entries(block.properties as Record<string, TSchema>).flatMap(([name, property]) =>
      settingKeys(property, prefix ? `${prefix}.${name}` : name),
    ),
  );
  return [...new Set(keys)].sort();
}

/** Defaults the settings modules apply, by file key, as the table writes them. */
function defaults(): Record<string, string> {
  const within = (section: string, values: Record<string, unknown>) =>
    Object.entries(values).map(([key, value]) => [section ? `${section}.${key}` : key, value] as const);
  const entries = [
    ...within('', SERVER_DEFAULTS),
    ...within('workerMemory', WORKER_MEMORY_DEFAULTS),
    ['busyPollMs', DEFAULT_BUSY_POLL_MS] as const,
    ['store.statementTimeoutMs', DEFAULT_STATEMENT_TIMEOUT_MS] as const,
    ...within('trial', TRIAL_DEFAULTS),
    ...within('workload', WORKLOAD_DEFAULTS),
    ['oidc.personKeyHours', DEFAULT_PERSON_KEY_HOURS] as const,
    ...within('events', EVENTS_DEFAULTS),
    ...within('webhooks', WEBHOOKS_DEFAULTS),
    ...within('smtp', SMTP_DEFAULTS),
    ...within('tsa', TSA_DEFAULTS),
    ['log.checkpointEveryEntries', LOG_DEFAULTS.checkpointEveryEntries] as const,
    ['log.checkpointEverySeconds', LOG_DEFAULTS.checkpointEverySeconds] as const,
    ['log.public', LOG_DEFAULTS.public] as const,
    ['log.integrateEveryMs', LOG_DEFAULTS.intervalMs] as const,
    ['retention.enabled', RETENTION_DEFAULTS.enabled] as const,
    ['retention.requestsDays', RETENTION_DEFAULTS.requestsMs / 86_400_000] as const,
    ['retention.batchRows', RETENTION_DEFAULTS.batchRows] as const,
    ['retention.batchesPerPass', RETENTION_DEFAULTS.batchesPerPass] as const,
    ['retention.intervalSeconds', RETENTION_DEFAULTS.intervalMs / 1000] as const,
  ];
  return Object.fromEntries(entries.map(([key, value]) => [key, String(value)]));
}

interface Row {
  line: number;
  environment: string[];
  keys: string[];
  /** The default column split at its top-level " / ", each part's first backticked value (or undefined). */
  defaults: (string | undefined)[];
}

const backticked = (cell: string): string[] => [...cell.matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);

/** " / " outside parentheses and backticks. */
function splitParts(cell: string): string[] {
  const parts: string[] = [];
  let depth = 0;
  let inCode = false;
  let start = 0;
  for (let i = 0; i < cell.length; i++) {
    const c = cell[i];
    if (c === '`') inCode = !inCode;
    else if (!inCode && c === '(') depth++;
    else if (!inCode && c === ')') depth--;
    else if (!inCode && depth === 0 && cell.startsWith(' / ', i)) {
      parts.push(cell.slice(start, i));
      start = i + 3;
    }
  }
  parts.push(cell.slice(start));
  return parts;
}

function settingsTable(): Row[] {
  const lines = readFileSync(join(root, DOC), 'utf8').split('\n');
  const header = lines.findIndex((line) => /^\| flag \| environment \| file key \| default \|$/.test(line));
  expect(header, `${DOC} has its settings table (| flag | environment | file key | default |)`).toBeGreaterThan(-1);
  const rows: Row[] = [];
  for (let i = header + 2; i < lines.length && lines[i]?.startsWith('|'); i++) {
    const cells = (lines[i] as string).split('|').slice(1, -1);
    expect(cells.length, `${DOC}:${i + 1} has four cells`).toBe(4);
    const [, environment = '', keys = '', fallback = ''] = cells;
    rows.push({
      line: i + 1,
      environment: backticked(environment).filter((name) => /^SIGNBRIDGE_[A-Z0-9_]+$/.test(name)),
      keys: backticked(keys),
      defaults: splitParts(fallback.trim()).map((part) => backticked(part)[0]),
    });
  }
  return rows;
}

/**
 * Every SIGNBRIDGE_* name in the service's source, comments included: src/ but src/cli/, whose variables are the
 * clients' (docs/daemon.md, docs/ci.md, docs/clients.md list those).
 */
function variablesInSource(dir = 'src'): Map<string, string> {
  const found = new Map<string, string>();
  for (const entry of readdirSync(join(root, dir), { withFileTypes: true })) {
    const path = `${dir}/${entry.name}`;
    if (path === 'src/cli') continue;
    if (entry.isDirectory()) {
      for (const [name, file] of variablesInSource(path)) found.set(name, file);
    } else if (entry.name.endsWith('.ts')) {
      // A name followed by `_*` is a family (SIGNBRIDGE_OIDC_*), not a variable.
      for (const m of readFileSync(join(root, path), 'utf8').matchAll(/SIGNBRIDGE_[A-Z0-9_]*[A-Z0-9](?!_\*)\b/g)) {
        if (!found.has(m[0])) found.set(m[0], path);
      }
    }
  }
  return found;
}

describe('docs/configuration.md', () => {
  const rows = settingsTable();
  const schemaKeys = settingKeys(ConfigFileSchema);

  it('lists every key of the config file, and no key the file does not take', () => {
    const documented = new Set(rows.flatMap((row) => row.keys));
    const known = new Set(schemaKeys);
    expect([
      ...schemaKeys.filter((key) => !documented.has(key)).map((key) => `${key}: missing from ${DOC}`),
      ...rows.flatMap((row) =>
        row.keys
          .filter((key) => !known.has(key))
          .map((key) => `${DOC}:${row.line} ${key}: no such key in the config file (write each key in full)`),
      ),
    ]).toEqual([]);
  });

  it('lists every environment variable the settings read, and no other', () => {
    const documented = new Set(rows.flatMap((row) => row.environment));
    expect([
      ...SETTINGS_ENV.filter((name) => !documented.has(name)).map((name) => `${name}: missing from ${DOC}`),
      ...rows.flatMap((row) =>
        row.environment
          .filter((name) => !SETTINGS_ENV.includes(name))
          .map((name) => `${DOC}:${row.line} ${name}: no settings module reads it`),
      ),
    ]).toEqual([]);
  });

  it('knows every variable the service reads: each is declared by the settings module that reads it', () => {
    const undeclared = [...variablesInSource()]
      .filter(([name]) => !SETTINGS_ENV.includes(name))
      .map(([name, file]) => `${file}: ${name}`);
    expect(undeclared, "declare it in its settings module's *_ENV list (src/config/config.ts composes them)").toEqual(
      [],
    );
  });

  it('states the defaults the settings apply', () => {
    const wrong: string[] = [];
    for (const [key, value] of Object.entries(defaults())) {
      const row = rows.find((r) => r.keys.includes(key));
      if (!row) continue; // reported by the first test
      if (row.defaults.length !== row.keys.length) {
        wrong.push(
          `${DOC}:${row.line} gives ${row.defaults.length} defaults (separated by " / ") for ${row.keys.length} keys`,
        );
        continue;
      }
      const documented = row.defaults[row.keys.indexOf(key)];
      if (documented !== value) wrong.push(`${DOC}:${row.line} ${key}: the doc says ${documented}, the code ${value}`);
    }
    expect(wrong).toEqual([]);
  });
});
