// A tenant's `logProofs` directory (daemon/log-proofs.ts): pkcs11-tool signs through the real module and daemon
// with a real service (its transparency log at the defaults); the daemon then keeps each signature's C2SP
// tlog-proof, named by the SHA-256 of the signature bytes pkcs11-tool wrote, and `signbridge audit prove --bundle`
// verifies it offline against the log's key and that very signature file (raw r||s, as the module returns it).
// Issue 44: the folder need not exist; the daemon makes it (0700, its user's) at start, and a daemon that cannot
// (its parent is a file) exits non-zero naming it instead of dropping every proof with a warning per signature.
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { ckaIdFor } from '../../daemon/key-id.js';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { LOG_DEFAULTS } from '../../src/transparency/log-service.js';
import { runCliAsync } from '../helpers/cli.js';
import { logGet } from '../helpers/log-client.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, remoteConfig, startTestDaemon, tempDir } from './helpers.js';

const run = promisify(execFile);
const TENANT = 'proofs-p256';
const UNKEPT = 'no-proofs';

describe('the daemon keeps each signature’s log proof', () => {
  let svc: TestService;
  let daemon: RunningDaemon;
  let dir: string;
  let proofs: string;
  const keyIds = new Map<string, string>();
  let signer: string;

  beforeAll(async () => {
    ensurePeercredBuilt();
    dir = tempDir('sbd-proofs-');
    // Not made here: the daemon makes it, and the folder above it.
    proofs = join(dir, 'proofs', TENANT);
    svc = await startTestService({ log: { ...LOG_DEFAULTS } });
    const url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
    const tenants = [];
    for (const tenant of [TENANT, UNKEPT]) {
      await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: 'ECC_NIST_P256' });
      const key = await svc.apiKey('signer', tenant);
      if (tenant === TENANT) signer = key;
      keyIds.set(
        tenant,
        (await callAction(svc.app, key, 'get_public_key', { tenant_id: tenant })).body.key_id as string,
      );
      tenants.push({ tenantId: tenant, label: `${tenant} token`, apiKey: key });
    }
    const config = remoteConfig(url, tenants);
    config.tenants = config.tenants.map((t) => (t.tenantId === TENANT ? { ...t, logProofs: proofs } : t));
    daemon = await startTestDaemon(config);
  }, 60_000);
  afterAll(async () => {
    await daemon?.close();
    await svc?.close();
  });

  const sign = async (tenant: string, name: string) => {
    const digest = join(dir, `${name}.sha256`);
    writeFileSync(digest, createHash('sha256').update(name).digest());
    const sig = join(dir, `${name}.sig`);
    await run(
      'pkcs11-tool',
      [
        '--module',
        MODULE_PATH,
        '--token-label',
        `${tenant} token`,
        '--sign',
        '--id',
        ckaIdFor(keyIds.get(tenant) as string).toString('hex'),
        '-m',
        'ECDSA',
        '--input-file',
        digest,
        '--output-file',
        sig,
      ],
      { env: { ...process.env, SIGNBRIDGE_SOCKET: daemon.socketPath }, timeout: 30_000 },
    );
    return sig;
  };

  it('made the missing logProofs folder at start, 0700 and owned by the daemon’s user', () => {
    const made = statSync(proofs);
    expect(made.isDirectory()).toBe(true);
    expect(made.mode & 0o777).toBe(0o700);
    expect(made.uid).toBe(process.getuid?.());
  });

  it('writes <sha256 of the signature>.tlog-proof, which audit prove --bundle verifies with the signature file', async () => {
    const sig = await sign(TENANT, 'release-1');
    const name = `${createHash('sha256').update(readFileSync(sig)).digest('hex')}.tlog-proof`;
    const file = join(proofs, name);
    for (let i = 0; i < 300 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
    expect(readdirSync(proofs)).toContain(name);
    const vkey = (await logGet(svc.app, '/log/public-key', signer)).text.trim();
    const proved = await runCliAsync(['audit', 'prove', '--bundle', file, '--public-key', vkey, '--signature', sig], {
      HOME: dir,
    });
    expect(proved.code, proved.stderr).toBe(0);
    expect(proved.stdout).toMatch(new RegExp(`tenant ${TENANT}, pkcs11_sign → signed`));
  });

  it('keeps nothing for a tenant without logProofs', async () => {
    const before = readdirSync(proofs).length;
    await sign(UNKEPT, 'other-1');
    await sign(TENANT, 'release-2');
    for (let i = 0; i < 300 && readdirSync(proofs).length < before + 1; i++)
      await new Promise((r) => setTimeout(r, 100));
    await new Promise((r) => setTimeout(r, 1500));
    expect(readdirSync(proofs).filter((f) => f.endsWith('.tlog-proof'))).toHaveLength(before + 1);
  });
});

describe('a logProofs folder the daemon cannot make', () => {
  it('stops the daemon at start with a non-zero exit that names the folder', async () => {
    const dir = tempDir('sbd-proofs-bad-');
    // Its parent is a file: no folder can be made under it.
    writeFileSync(join(dir, 'not-a-folder'), 'x');
    const folder = join(dir, 'not-a-folder', 'proofs');
    writeFileSync(join(dir, 'api-key'), 'sbk_unused\n', { mode: 0o600 });
    const socket = join(dir, 'run', 'daemon.sock');
    writeFileSync(
      join(dir, 'daemon.yaml'),
      [
        `socket: ${socket}`,
        'service:',
        '  url: http://127.0.0.1:9',
        '  apiKeyFile: api-key',
        'tenants:',
        '  - id: acme',
        `    logProofs: ${folder}`,
      ].join('\n'),
    );
    const res = await runCliAsync(['daemon', '--config', join(dir, 'daemon.yaml')], { SIGNBRIDGE_API_KEY: '' });
    expect(res.code, res.stderr).toBe(1);
    expect(res.stderr).toContain(`cannot use the logProofs folder ${folder} of tenant acme`);
    expect(res.stderr).not.toMatch(/listening/);
    expect(existsSync(socket)).toBe(false);
  });
});
