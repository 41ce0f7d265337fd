// retention.* (docs/configuration.md): defaults, the file, SIGNBRIDGE_RETENTION_* over the file, and refusals that
// say what is wrong: events kept shorter than deliveries are retried, numbers out of range, a bad switch.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/config-error.js';
import { makeTempDir } from '../helpers/service.js';

const HOUR = 3600_000;
const dir = makeTempDir();
const file = (yaml: string) => {
  const path = join(dir, `r${Math.random()}.yaml`);
  writeFileSync(path, `dataDir: ${dir}\n${yaml}`);
  return path;
};

describe('retention settings', () => {
  it('defaults: on, events for the retry window (24 h), decided requests 7 days, 1000 rows a statement, every minute', () => {
    expect(resolveConfig({ dataDir: dir, env: {} }).retention).toEqual({
      enabled: true,
      eventsMs: 24 * HOUR,
      requestsMs: 7 * 24 * HOUR,
      batchRows: 1000,
      batchesPerPass: 100,
      intervalMs: 60_000,
    });
  });

  it('keeps events as long as a longer retry window by default', () => {
    expect(resolveConfig({ configFile: file('events: {retryHours: 48}\n'), env: {} }).retention.eventsMs).toBe(
      48 * HOUR,
    );
  });

  it('takes the file, and the environment over it', () => {
    const configFile = file(
      'retention: {eventsHours: 72, requestsDays: 30, batchRows: 500, batchesPerPass: 20, intervalSeconds: 300}\n',
    );
    expect(resolveConfig({ configFile, env: {} }).retention).toEqual({
      enabled: true,
      eventsMs: 72 * HOUR,
      requestsMs: 30 * 24 * HOUR,
      batchRows: 500,
      batchesPerPass: 20,
      intervalMs: 300_000,
    });
    const env = {
      SIGNBRIDGE_RETENTION_ENABLED: 'false',
      SIGNBRIDGE_RETENTION_EVENTS_HOURS: '36',
      SIGNBRIDGE_RETENTION_REQUESTS_DAYS: '2',
      SIGNBRIDGE_RETENTION_BATCH_ROWS: '100',
      SIGNBRIDGE_RETENTION_INTERVAL_SECONDS: '10',
    };
    expect(resolveConfig({ configFile, env }).retention).toEqual({
      enabled: false,
      eventsMs: 36 * HOUR,
      requestsMs: 2 * 24 * HOUR,
      batchRows: 100,
      batchesPerPass: 20,
      intervalMs: 10_000,
    });
  });

  it('refuses to keep events shorter than deliveries are retried, and numbers out of range', () => {
    const short = () =>
      resolveConfig({ configFile: file('events: {retryHours: 48}\nretention: {eventsHours: 24}\n'), env: {} });
    expect(short).toThrow(ConfigError);
    expect(short).toThrow(/retention.eventsHours \(24\) is shorter than events.retryHours \(48\)/);
    expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_RETENTION_EVENTS_HOURS: '12' } })).toThrow(
      /shorter than events.retryHours/,
    );
    expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_RETENTION_BATCH_ROWS: '1000000' } })).toThrow(
      /SIGNBRIDGE_RETENTION_BATCH_ROWS must be a whole number from 10 to 10000, got "1000000"/,
    );
    expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_RETENTION_REQUESTS_DAYS: '1.5' } })).toThrow(
      /SIGNBRIDGE_RETENTION_REQUESTS_DAYS/,
    );
    expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_RETENTION_ENABLED: 'no' } })).toThrow(
      /SIGNBRIDGE_RETENTION_ENABLED must be true or false/,
    );
    expect(() => resolveConfig({ configFile: file('retention: {batchRows: 5}\n'), env: {} })).toThrow(/retention/);
    expect(() => resolveConfig({ configFile: file('retention: {keepForever: true}\n'), env: {} })).toThrow(/retention/);
  });
});
