// Busy polling (src/busy-poll.ts): the loop keeps polling for the window after a touch and then sleeps; the
// window comes from SIGNBRIDGE_BUSY_POLL_MS or the config file, and bad values are refused by both configs.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DaemonConfigError, resolveDaemonConfig } from '../../daemon/config.js';
import { BusyPoll, busyPollSetting, DEFAULT_BUSY_POLL_MS, MAX_BUSY_POLL_MS } from '../../src/busy-poll.js';
import { ConfigError, resolveConfig } from '../../src/config/config.js';
import { makeTempDir } from '../helpers/service.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('BusyPoll', () => {
  it('polls the loop for the window after a touch, then stops', async () => {
    const poll = new BusyPoll(20);
    expect(poll.active).toBe(false);
    poll.touch();
    expect(poll.active).toBe(true);
    // While polling, setImmediate callbacks keep running: many loop turns pass within a few ms.
    let turns = 0;
    const until = Date.now() + 5;
    while (Date.now() < until) {
      await new Promise((resolve) => setImmediate(resolve));
      turns++;
    }
    expect(turns).toBeGreaterThan(10);
    expect(poll.active).toBe(true);
    await sleep(60);
    expect(poll.active).toBe(false);
  });

  it('yields to busy signing threads: stops polling while they would need the core it takes, resumes after', async () => {
    let busy = 1;
    const poll = new BusyPoll(50, { busyThreads: () => busy, cores: 2 });
    poll.touch();
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setImmediate(resolve));
    expect(poll.active).toBe(false); // one thread busy on 2 cores: the loop sleeps instead of spinning
    busy = 0;
    poll.touch(); // the thread's answer arrives and the reply goes out
    await new Promise((resolve) => setImmediate(resolve));
    expect(poll.active).toBe(true);
    // With more cores the same busy thread leaves room to poll.
    const roomy = new BusyPoll(50, { busyThreads: () => 1, cores: 4 });
    roomy.touch();
    await new Promise((resolve) => setImmediate(resolve));
    expect(roomy.active).toBe(true);
    await sleep(80);
    expect(poll.active).toBe(false);
    expect(roomy.active).toBe(false);
  });

  it('polls while work is under way (begin/end), at most MAX_BUSY_POLL_MS, then the window after its end', async () => {
    const poll = new BusyPoll(1);
    poll.begin();
    await sleep(5);
    expect(poll.active).toBe(true); // past the 1 ms window: held by the open work
    poll.end();
    await sleep(30);
    expect(poll.active).toBe(false);

    poll.begin(); // never ended, as a request waiting minutes for an approval
    await sleep(MAX_BUSY_POLL_MS + 40);
    expect(poll.active).toBe(false);
    poll.end();
  });

  it('does nothing with a window of 0', () => {
    const off = new BusyPoll(0);
    off.touch();
    off.begin();
    expect(off.active).toBe(false);
    off.end();
    expect(off.active).toBe(false);
  });
});

describe('the busy-poll setting', () => {
  const err = (m: string) => new Error(m);
  it('takes the environment, else the config file, else the default', () => {
    expect(busyPollSetting(undefined, undefined, err)).toBe(DEFAULT_BUSY_POLL_MS);
    expect(busyPollSetting('', 2, err)).toBe(2);
    expect(busyPollSetting('0', 2, err)).toBe(0);
    expect(busyPollSetting('1.5', undefined, err)).toBe(1.5);
  });

  it.each(['abc', '-1', '11', '1e3', 'Infinity'])('refuses SIGNBRIDGE_BUSY_POLL_MS=%s in both configs', (value) => {
    const env = { SIGNBRIDGE_BUSY_POLL_MS: value };
    expect(() => busyPollSetting(value, undefined, err)).toThrow(/from 0 to 10/);
    expect(() => resolveConfig({ dataDir: makeTempDir(), env })).toThrow(ConfigError);
    expect(() => resolveConfig({ dataDir: makeTempDir(), env })).toThrow(/SIGNBRIDGE_BUSY_POLL_MS/);
    const daemon = () => resolveDaemonConfig({ inProcessDataDir: makeTempDir(), tenants: ['t'], env });
    expect(daemon).toThrow(DaemonConfigError);
    expect(daemon).toThrow(/SIGNBRIDGE_BUSY_POLL_MS/);
  });

  it('reads busyPollMs from the config files, and refuses one out of range', () => {
    const dir = makeTempDir();
    const good = join(dir, 'good.yaml');
    writeFileSync(good, `dataDir: ${dir}\nbusyPollMs: 0\n`);
    expect(resolveConfig({ configFile: good, env: {} }).busyPollMs).toBe(0);
    expect(resolveConfig({ dataDir: dir, env: {} }).busyPollMs).toBe(DEFAULT_BUSY_POLL_MS);
    // Off by default with the state in PostgreSQL, unless set.
    const database = 'postgres://signbridge@db.example/signbridge';
    expect(resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_DATABASE_URL: database } }).busyPollMs).toBe(0);
    expect(
      resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_DATABASE_URL: database, SIGNBRIDGE_BUSY_POLL_MS: '0.5' } })
        .busyPollMs,
    ).toBe(0.5);
    const bad = join(dir, 'bad.yaml');
    writeFileSync(bad, `dataDir: ${dir}\nbusyPollMs: 50\n`);
    expect(() => resolveConfig({ configFile: bad, env: {} })).toThrow(/busyPollMs/);
  });
});
