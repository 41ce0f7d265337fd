// The TSA's clock check (src/tsa/clock-trust.ts) and its settings: what each source's answer means, the real
// PostgreSQL server clock, and the settings that would let a token state a time further off than it says.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/config-error.js';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { ClockTrust, checkDatabase, checkNtp, type RunCommand } from '../../src/tsa/clock-trust.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';

/** Stands in for timedatectl and chronyc: their real output formats, chosen per test. */
function commands(answers: Record<string, string | undefined>): RunCommand {
  return async (file) => answers[file];
}

// chronyc -c tracking (chrony 4.3): ref id, name, stratum, ref time, system time offset (s), last offset, rms,
// frequency, residual freq, skew, root delay, root dispersion, update interval, leap status.
const chrony = (offsetS: string, leap: string) =>
  `A9FE A9FE,169.254.169.254,3,1795699494.123,${offsetS},-0.000001,0.000010,-12.3,0.001,0.020,0.000400,0.000300,64.2,${leap}\n`;

describe('ntp check', () => {
  it('timedatectl yes: trusted; no: not, with the reason', async () => {
    expect((await checkNtp(500, commands({ timedatectl: 'yes\n' }))).trusted).toBe(true);
    const no = await checkNtp(500, commands({ timedatectl: 'no\n' }));
    expect(no).toMatchObject({ trusted: false, reason: expect.stringContaining('not NTP-synchronised') });
  });

  it('no systemd: chrony decides by leap status and offset', async () => {
    expect(await checkNtp(500, commands({ chronyc: chrony('0.000120', 'Normal') }))).toMatchObject({
      trusted: true,
      source: 'chrony',
    });
    expect(await checkNtp(500, commands({ chronyc: chrony('0.800000', 'Normal') }))).toMatchObject({
      trusted: false,
      reason: expect.stringContaining('over 500 ms'),
    });
    expect(await checkNtp(500, commands({ chronyc: chrony('0.0001', 'Not synchronised') }))).toMatchObject({
      trusted: false,
      reason: expect.stringContaining('not synchronised'),
    });
  });

  it('neither tool answers: not trusted (the host cannot show it is in sync)', async () => {
    expect(await checkNtp(500, commands({}))).toMatchObject({
      trusted: false,
      reason: expect.stringContaining('neither timedatectl nor chronyc'),
    });
  });

  it('the checker keeps its last verdict and tells of changes', async () => {
    let answer = 'no\n';
    const clock = new ClockTrust({ check: 'ntp', maxOffsetMs: 500, intervalMs: 60_000 }, undefined, async () => answer);
    const changes: boolean[] = [];
    await clock.start((v) => changes.push(v.trusted));
    expect(clock.verdict.trusted).toBe(false);
    answer = 'yes\n';
    await clock.refresh();
    expect(clock.verdict.trusted).toBe(true);
    await clock.refresh();
    clock.stop();
    expect(changes).toEqual([true]); // from the initial "not checked yet" (untrusted) only one change: to trusted
  });
});

describe('database check', () => {
  it('a reference clock off by more than maxOffsetMs is not trusted; a failing one neither', async () => {
    const ahead = await checkDatabase(async () => new Date(Date.now() + 2000), 500);
    expect(ahead).toMatchObject({ trusted: false, reason: expect.stringContaining("from the database server's") });
    const down = await checkDatabase(async () => Promise.reject(new Error('connection refused')), 500);
    expect(down).toMatchObject({ trusted: false, reason: expect.stringContaining('connection refused') });
  });

  it.skipIf(!testPostgresUrl())('the real PostgreSQL server clock (same host here): trusted', async () => {
    const store = openPostgresStore(createTestDatabase('clock'));
    try {
      await store.migrate();
      const verdict = await checkDatabase(() => store.databaseTime(), 500);
      expect(verdict).toMatchObject({ trusted: true, source: 'database' });
    } finally {
      await store.close();
    }
  });
});

describe('tsa settings', () => {
  const withFile = (tsa: object) => {
    const dir = makeTempDir();
    const file = join(dir, 'config.json');
    writeFileSync(file, JSON.stringify({ dataDir: dir, tsa }));
    return () => resolveConfig({ configFile: file, env: {} });
  };

  it('defaults: anonymous, ntp check, 1 s accuracy, 500 ms offset, signbridge policy OID', () => {
    expect(withFile({})().tsa).toMatchObject({
      enabled: true,
      access: 'anonymous',
      accuracy: { seconds: 1 },
      clock: { check: 'ntp', maxOffsetMs: 500, intervalMs: 10_000 },
      policy: expect.stringMatching(/^2\.25\.\d+$/),
      anonymousQuota: { perAddress: 10_000, perDay: 100_000 },
    });
    expect(withFile({ anonymous: { perAddressPerDay: 50, perDay: 500 } })().tsa.anonymousQuota).toEqual({
      perAddress: 50,
      perDay: 500,
    });
  });

  it('refuses a database check on SQLite, an offset over the accuracy, a network that is no CIDR, a bad OID', () => {
    expect(withFile({ clock: { check: 'database' } })).toThrow(/needs PostgreSQL/);
    expect(withFile({ accuracy: { millis: 100 }, clock: { maxOffsetMs: 500 } })).toThrow(/larger than the accuracy/);
    expect(withFile({ allowNetworks: ['example.com'] })).toThrow(ConfigError);
    expect(withFile({ policy: '1.2.x' })).toThrow(ConfigError);
    // Matches the pattern but is no OID (X.660: under 0 and 1 the second arc is below 40).
    expect(withFile({ acceptedPolicies: ['1.45.3'] })).toThrow(/tsa policy 1\.45\.3 is not a valid OID/);
    expect(withFile({ anonymous: { perDay: 0 } })).toThrow(ConfigError);
    expect(() => resolveConfig({ dataDir: makeTempDir(), env: { SIGNBRIDGE_TSA_CLOCK_CHECK: 'sundial' } })).toThrow(
      /SIGNBRIDGE_TSA_CLOCK_CHECK/,
    );
  });
});
