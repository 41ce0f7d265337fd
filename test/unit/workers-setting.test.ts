// How many request workers a service runs (src/config/server-settings.ts): --workers over SIGNBRIDGE_WORKERS over
// the file over the default from the cores; bad values stop the start naming where they came from.
import { describe, expect, it } from 'vitest';
import {
  DEFAULT_WORKERS_MAX,
  defaultWorkers,
  WORKER_MEMORY_DEFAULTS,
  workerMemorySetting,
  workersSetting,
} from '../../src/config/server-settings.js';
import { ConfigError } from '../../src/config-error.js';

describe('workers', () => {
  it('defaults to the cores less one, at least 1 and at most DEFAULT_WORKERS_MAX', () => {
    expect([1, 2, 3, 4, 9, 16, 64].map((cores) => defaultWorkers(cores))).toEqual([1, 1, 2, 3, 8, 8, 8]);
    expect(DEFAULT_WORKERS_MAX).toBe(8);
    expect(workersSetting(undefined, {}, {})).toBe(defaultWorkers());
  });

  it('takes the flag over the variable over the file', () => {
    expect(workersSetting('3', { SIGNBRIDGE_WORKERS: '5' }, { workers: 7 })).toBe(3);
    expect(workersSetting(undefined, { SIGNBRIDGE_WORKERS: '5' }, { workers: 7 })).toBe(5);
    expect(workersSetting(undefined, { SIGNBRIDGE_WORKERS: '' }, { workers: 7 })).toBe(7);
  });

  it.each([
    ['0', '--workers'],
    ['257', '--workers'],
    ['two', '--workers'],
    ['1.5', '--workers'],
  ])('refuses --workers %s', (value, source) => {
    expect(() => workersSetting(value, {}, {})).toThrow(ConfigError);
    expect(() => workersSetting(value, {}, {})).toThrow(
      `${source} must be a whole number from 1 to 256, got "${value}"`,
    );
  });

  it('names SIGNBRIDGE_WORKERS when the variable is wrong', () => {
    expect(() => workersSetting(undefined, { SIGNBRIDGE_WORKERS: '-1' }, {})).toThrow(/^SIGNBRIDGE_WORKERS must be/);
  });
});

describe('workerMemory', () => {
  it('defaults to 8 MB semi-spaces and no restart', () => {
    expect(workerMemorySetting({}, {})).toEqual(WORKER_MEMORY_DEFAULTS);
    expect(WORKER_MEMORY_DEFAULTS).toEqual({ semiSpaceMb: 8, restartAboveMb: 0 });
  });

  it('takes the environment over the file', () => {
    const file = { workerMemory: { semiSpaceMb: 32, restartAboveMb: 512 } };
    expect(workerMemorySetting({}, file)).toEqual({ semiSpaceMb: 32, restartAboveMb: 512 });
    expect(
      workerMemorySetting({ SIGNBRIDGE_WORKER_SEMI_SPACE_MB: '0', SIGNBRIDGE_WORKER_RESTART_ABOVE_MB: '400' }, file),
    ).toEqual({ semiSpaceMb: 0, restartAboveMb: 400 });
  });

  it('refuses what it cannot use, naming the setting', () => {
    expect(() => workerMemorySetting({ SIGNBRIDGE_WORKER_SEMI_SPACE_MB: '16MB' }, {})).toThrow(
      /^SIGNBRIDGE_WORKER_SEMI_SPACE_MB must be a whole number of MB from 0 to 256/,
    );
    expect(() => workerMemorySetting({ SIGNBRIDGE_WORKER_SEMI_SPACE_MB: '257' }, {})).toThrow(ConfigError);
    expect(() => workerMemorySetting({ SIGNBRIDGE_WORKER_RESTART_ABOVE_MB: '100' }, {})).toThrow(
      /restartAboveMb must be 0 \(never\) or at least 256/,
    );
    expect(() => workerMemorySetting({}, { workerMemory: { restartAboveMb: 200 } })).toThrow(ConfigError);
  });
});
