// `signbridge admin api-key list | head`: the reader closes the pipe early; the CLI stops quietly (no EPIPE stack
// trace) with its usual exit code.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/auth/api-keys.js';
import { openSqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { CLI } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';

describe('a closed stdout pipe', () => {
  it('admin api-key list with a reader that stops after its first chunk: no stack trace, exit 0', async () => {
    const dataDir = makeTempDir();
    const store = openSqliteStore(join(dataDir, 'signbridge.db'));
    await store.migrate();
    // More output than a pipe holds (64 KiB), so the CLI is still writing when head has gone.
    for (let i = 0; i < 300; i++) await createApiKey(store, 'admin', 'acme', `key ${i} ${'x'.repeat(500)}`);
    await store.close();

    const child = spawn(process.execPath, [CLI, 'admin', 'api-key', 'list', '--data-dir', dataDir]);
    let stderr = '';
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    // Read the first chunk, then close our end, as `head` does.
    const first = await new Promise<string>((resolve) => child.stdout.once('data', (chunk) => resolve(String(chunk))));
    child.stdout.destroy();
    const [code, signal] = await new Promise<[number | null, string | null]>((resolve) =>
      child.on('close', (c, s) => resolve([c, s])),
    );
    expect(first).toMatch(/^[0-9a-f]{16}\tadmin\tacme\tactive\tkey 0 /);
    expect(stderr).not.toMatch(/EPIPE|Error|at /);
    expect(stderr).toBe('');
    expect({ code, signal }).toEqual({ code: 0, signal: null });
  });
});
