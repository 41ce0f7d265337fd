// The test command runs the suite on two Node lines (scripts/test.sh): these checks fail when a phase runs on
// another Node than it announces, or when a native addon is not the build meant for the runtime that loads it.
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { packagePath } from '../../src/paths.js';
import { openSqlite, SQLITE_DRIVER_PACKAGE, SQLITE_DRIVER_PATH } from '../../src/store/sqlite/sqlite-driver.js';
import { node24Binary } from '../helpers/node-runtimes.js';

const require = createRequire(import.meta.url);
const nodeMajor = Number(process.versions.node.split('.')[0]);

describe('the runtime this phase runs on', () => {
  const expected = process.env.SIGNBRIDGE_EXPECT_NODE_MAJOR;

  it.skipIf(!expected)('is the Node major the test command named', () => {
    expect(String(nodeMajor)).toBe(expected);
  });

  it('loads the SQLite driver meant for it: better-sqlite3 13 (Node-API) from Node 22 on, 12 on Node 20', () => {
    const db = openSqlite(':memory:');
    try {
      const row = db.prepare('select sqlite_version() as v').get() as { v: string };
      expect(row.v).toMatch(/^3\.\d+\.\d+$/);
    } finally {
      db.close();
    }
    const version = (require(`${SQLITE_DRIVER_PACKAGE}/package.json`) as { version: string }).version;
    expect(version.split('.')[0]).toBe(nodeMajor >= 22 ? '13' : '12');
    expect(SQLITE_DRIVER_PATH).toContain(`/node_modules/${SQLITE_DRIVER_PACKAGE}/`);
  });

  it('loads the Node-API addons (pkcs11js, the daemon peer-credential addon) on this runtime', async () => {
    const pkcs11js = require('pkcs11js') as { PKCS11: new () => { load(path: string): void } };
    expect(typeof new pkcs11js.PKCS11().load).toBe('function');
    const { loadPeerCred } = await import('../../daemon/peercred.js');
    expect(typeof loadPeerCred()).toBe('function');
  });
});

describe('SQLite on Node 24 under garbage collection', () => {
  const node24 = node24Binary();
  const fixture = packagePath('test', 'fixtures', 'sqlite-gc-under-socket-reads.cjs');
  const run = (driverEntry: string) =>
    spawnSync(node24 as string, [fixture, driverEntry], { encoding: 'utf8', timeout: 300_000 });

  // better-sqlite3 12.11.1 built for Node 24 aborted (SIGABRT, `(env) != nullptr`) on this fixture in 5 runs of 5
  // (checked when the driver was chosen, 2026-11-26); 13 survives it.
  it.skipIf(!node24)('the driver Node 24 loads survives statements collected in socket callbacks', () => {
    // What src/store/sqlite/sqlite-driver.ts picks on Node 24, resolved by that runtime itself.
    const picked = spawnSync(
      node24 as string,
      [
        '--input-type=module',
        '-e',
        `import('${packagePath('dist', 'src', 'store', 'sqlite', 'sqlite-driver.js')}').then((m) => console.log(m.SQLITE_DRIVER_PATH))`,
      ],
      { encoding: 'utf8', timeout: 120_000 },
    );
    expect(picked.status, picked.stderr).toBe(0);
    const entry = picked.stdout.trim();
    expect(entry).toContain('/node_modules/better-sqlite3/');
    const res = run(entry);
    expect(res.signal, res.stderr.slice(0, 500)).toBeNull();
    expect(res.status, res.stderr.slice(0, 500)).toBe(0);
    expect(res.stdout).toMatch(/^survived \d+/);
  });
});
