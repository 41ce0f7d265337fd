// Issue 46: the daemon no longer looks at its API key file for every signature (a statSync each, 3% of its CPU on
// the full path) but at most once a second, and at once when a watch on the file's folder sees it change or when
// the service refuses the key. A key rotated the way `signbridge login` does it (a new file renamed over the old)
// is still what the very next signature uses: here the old key is revoked at the service as the file is replaced,
// so a signature sent with it would fail, and the audit log names the caller of each signature.
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { apiKeyFromFile } from '../../daemon/credentials.js';
import type { RunningDaemon } from '../../daemon/daemon.js';
import { DaemonClient } from '../../wire/client.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { ensurePeercredBuilt, remoteConfig, startTestDaemon, tempDir } from './helpers.js';

const TENANT = 'key-file';
const idOf = (token: string) => token.split('_')[1] as string;

describe('the daemon’s API key file', () => {
  let svc: TestService;
  let daemon: RunningDaemon;
  let dir: string;
  let keyFile: string;

  beforeAll(async () => {
    ensurePeercredBuilt();
    dir = tempDir('sbd-keyfile-');
    keyFile = join(dir, 'api-key');
    svc = await startTestService();
    const url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
    await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: TENANT, key_spec: 'ECC_NIST_P256' });
    writeFileSync(keyFile, `${await svc.apiKey('signer', TENANT)}\n`, { mode: 0o600 });
    const config = remoteConfig(url, []);
    config.upstream = { ...config.upstream, tenantApiKeys: new Map([[TENANT, apiKeyFromFile(keyFile)]]) } as never;
    config.tenants = [{ tenantId: TENANT, label: TENANT, certificates: {} }];
    daemon = await startTestDaemon(config);
  }, 60_000);
  afterAll(async () => {
    await daemon?.close();
    await svc?.close();
  });

  const signOnce = async (n: number) => {
    const { client } = await DaemonClient.open(daemon.socketPath, 'key-file.test');
    try {
      const list = await client.request({ type: 'LIST' });
      if (list.type !== 'LIST_OK') throw new Error(JSON.stringify(list));
      const key = list.tokens.find((t) => t.tenant === TENANT)?.keys[0];
      if (!key) throw new Error('no key listed');
      return await client.request({
        type: 'SIGN',
        tenant: TENANT,
        keyId: key.keyId,
        algorithm: 'ECDSA_SHA_256',
        digest: Buffer.alloc(32, n),
      });
    } finally {
      client.close();
    }
  };
  const lastSignedBy = async () => {
    const [latest] = await svc.store.audit.recent(TENANT, 1);
    expect(latest?.outcome).toBe('signed');
    return latest?.actor;
  };

  it('signs with a key rotated by rename from the very next signature on', async () => {
    const first = readFileSync(keyFile, 'utf8').trim();
    expect((await signOnce(1)).type).toBe('SIGN_OK');
    expect(await lastSignedBy()).toBe(idOf(first));
    const next = await svc.apiKey('signer', TENANT);
    replace(keyFile, next);
    expect(await svc.store.apiKeys.revoke(idOf(first), new Date().toISOString())).toBe(true);
    const after = await signOnce(2);
    expect(after.type, JSON.stringify(after)).toBe('SIGN_OK');
    expect(await lastSignedBy()).toBe(idOf(next));
  });

  it('looks at the file at most once a second without a watch', () => {
    let now = 0;
    const path = join(dir, 'unwatched');
    writeFileSync(path, 'sbk_one\n', { mode: 0o600 });
    const source = apiKeyFromFile(path, undefined, { now: () => now, watch: false });
    replace(path, 'sbk_two');
    now = 999;
    expect(source.get()).toBe('sbk_one');
    now = 1000;
    expect(source.get()).toBe('sbk_two');
  });

  it('sees a replaced file at once through the watch, the clock standing still', async () => {
    const path = join(dir, 'watched');
    writeFileSync(path, 'sbk_one\n', { mode: 0o600 });
    const source = apiKeyFromFile(path, undefined, { now: () => 0 });
    expect(source.get()).toBe('sbk_one');
    replace(path, 'sbk_two');
    // The watch's event comes through the event loop.
    await vi.waitFor(() => expect(source.get()).toBe('sbk_two'), { timeout: 5000 });
  });
});

/** Replaces a key file as `signbridge login` does: a new file renamed over it. */
function replace(path: string, key: string): void {
  writeFileSync(`${path}.new`, `${key}\n`, { mode: 0o600 });
  renameSync(`${path}.new`, path);
}
