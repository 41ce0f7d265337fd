// The test command runs the suite on two Node lines (scripts/test.sh): these checks fail when a phase runs on
// another Node than it announces, or when a native addon is not the build for the runtime that loads it.
import { createRequire } from 'node:module';
import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';

const require = createRequire(import.meta.url);

describe('the runtime this phase runs on', () => {
  const expected = process.env.SIGNBRIDGE_EXPECT_NODE_MAJOR;

  it.skipIf(!expected)('is the Node major the test command named', () => {
    expect(process.versions.node.split('.')[0]).toBe(expected);
  });

  it('loads better-sqlite3 built for its own ABI, from the per-ABI place setup.sh keeps it', () => {
    const db = new Database(':memory:');
    try {
      const row = db.prepare('select sqlite_version() as v').get() as { v: string };
      expect(row.v).toMatch(/^3\.\d+\.\d+$/);
    } finally {
      db.close();
    }
    // The addon the bindings package found: one per ABI (115 = Node 20, 137 = Node 24), never build/Release's.
    const loaded = Object.keys(require.cache).find((p) => p.endsWith('better_sqlite3.node'));
    expect(loaded).toContain(`/lib/binding/node-v${process.versions.modules}-linux-x64/`);
  });

  it('loads the Node-API addons (pkcs11js, the daemon peer-credential addon) on this runtime', async () => {
    const pkcs11js = require('pkcs11js') as { PKCS11: new () => { load(path: string): void } };
    expect(typeof new pkcs11js.PKCS11().load).toBe('function');
    const { loadPeerCred } = await import('../../daemon/peercred.js');
    expect(typeof loadPeerCred()).toBe('function');
  });
});
