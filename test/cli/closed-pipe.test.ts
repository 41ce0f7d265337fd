// `signbridge admin api-key list | head`: the reader closes the pipe early; the CLI stops quietly (no EPIPE stack
// trace) with its usual exit code.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { createApiKey } from '../../src/auth/api-keys.js';
import { openSqliteStore } from '../../src/store/sqlite-store.js';
import { CLI } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';

describe('a closed stdout pipe', () => {
  it('admin api-key list | head -c 10: no stack trace, exit 0, and head got its bytes', async () => {
    const dataDir = makeTempDir();
    const store = openSqliteStore(join(dataDir, 'signbridge.db'));
    await store.migrate();
    // More output than a pipe holds (64 KiB), so the CLI is still writing when head has gone.
    for (let i = 0; i < 300; i++) await createApiKey(store, 'admin', 'acme', `key ${i} ${'x'.repeat(500)}`);
    await store.close();

    const errFile = join(dataDir, 'stderr.txt');
    const script = `"${process.execPath}" "${CLI}" admin api-key list --data-dir "${dataDir}" 2>"${errFile}" | head -c 10; echo " status=\${PIPESTATUS[0]}"`;
    const res = spawnSync('bash', ['-c', script], { encoding: 'utf8' });
    expect(res.status).toBe(0);
    expect(res.stdout).toMatch(/^[0-9a-f]{10} status=0\n$/);
    const stderr = readFileSync(errFile, 'utf8');
    expect(stderr).not.toMatch(/EPIPE|Error|at /);
    expect(stderr).toBe('');
  });
});
