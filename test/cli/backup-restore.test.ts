// docs/deployment.md "Backup and restore", run as written (its snippets): a backup taken while clients keep
// signing, restored into a fresh data dir (and, on PostgreSQL, a fresh database), after the original is gone;
// the restored service signs with the same keys and the same API keys, and `admin audit verify` passes. The load
// stops only once the backup has finished, so a backup that waited for the load to end would never finish.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { packagePath } from '../../src/paths.js';
import { postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { runSnippetInBackground, runSnippetOk } from '../helpers/doc-snippets.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';

const DEPLOYMENT_DOC = packagePath('docs', 'deployment.md');
const servers: ServerProcess[] = [];
afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
});

const digest = (message: string) => createHash('sha256').update(message).digest('base64');

/** `admin ...` against a data dir (SQLite) or a database (PostgreSQL, with its data dir for the token). */
type Where = { dataDir: string; database?: string };
const whereArgs = ({ dataDir, database }: Where) => [
  '--data-dir',
  dataDir,
  ...(database ? ['--database', database] : []),
];

function adminKey(where: Where, role: string, tenant?: string): string {
  const res = runCli([
    'admin',
    'api-key',
    'create',
    '--role',
    role,
    ...(tenant ? ['--tenant', tenant] : []),
    ...whereArgs(where),
  ]);
  expect(res.code, res.stderr).toBe(0);
  return res.stdout.trim();
}

async function start(where: Where): Promise<ServerProcess> {
  const server = await startServerProcess(whereArgs(where));
  servers.push(server);
  return server;
}

/**
 * Backs up `where` with the doc's snippet while 8 clients sign, restores with the other snippet after the
 * original is stopped and removed, and proves the restored service.
 */
async function backUpUnderLoadAndRestore(store: 'sqlite' | 'postgres', original: Where, restored: Where) {
  const service = await start(original);
  const operator = adminKey(original, 'operator');
  const created = await postAction(service.url, 'create_tenant', operator, {
    tenant_id: 'bk',
    key_spec: 'ECC_NIST_P256',
  });
  expect(created.status, JSON.stringify(created.body)).toBe(201);
  const signer = adminKey(original, 'signer', 'bk');
  const keyAdmin = adminKey(original, 'admin', 'bk');
  const pem = (await postAction(service.url, 'get_public_key', keyAdmin, { tenant_id: 'bk' })).body.public_key_pem;
  const publicKey = createPublicKey(pem as string);

  let signed = 0;
  let n = 0;
  let stop = false;
  const load = Array.from({ length: 8 }, async () => {
    while (!stop) {
      const res = await postAction(service.url, 'sign', signer, {
        tenant_id: 'bk',
        hash: digest(`artifact ${n++}`),
        algorithm: 'ECDSA_SHA_256',
      });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      signed++;
    }
  });
  // Under way before the backup starts (a condition, with a generous deadline).
  const deadline = Date.now() + 60_000;
  while (signed < 50 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  expect(signed).toBeGreaterThanOrEqual(50);
  const signedBeforeBackup = signed;

  const backupDir = join(makeTempDir(), 'backup');
  const env = {
    DATA_DIR: original.dataDir,
    BACKUP_DIR: backupDir,
    ...(original.database && { DATABASE_URL: original.database }),
  };
  await runSnippetInBackground(`backup-${store}`, makeTempDir(), env, DEPLOYMENT_DOC);
  stop = true;
  await Promise.all(load);
  if (store === 'sqlite') {
    // As private as the data dir: the PINs open the keys.
    expect(statSync(backupDir).mode & 0o077).toBe(0);
    expect(statSync(join(backupDir, 'signbridge.db')).mode & 0o077).toBe(0);
    expect(statSync(join(backupDir, 'softhsm', 'user.pin')).mode & 0o077).toBe(0);
  }

  // The original is gone: the restore must stand on the backup alone.
  await service.stop();
  const whole = runCli(['admin', 'audit', 'verify', ...whereArgs(original)]);
  expect(whole.code, whole.stderr).toBe(0);
  const entriesAtEnd = Number(/audit log intact: (\d+) entries/.exec(whole.stdout)?.[1]);
  rmSync(original.dataDir, { recursive: true, force: true });
  const restoreEnv = {
    BACKUP_DIR: backupDir,
    NEW_DATA_DIR: restored.dataDir,
    ...(restored.database && { NEW_DATABASE_URL: restored.database }),
  };
  const restoredRun = runSnippetOk(`restore-${store}`, makeTempDir(), restoreEnv, 120_000, DEPLOYMENT_DOC);
  expect(restoredRun.stdout).toMatch(/audit log intact: \d+ entries/);
  const entries = Number(/audit log intact: (\d+) entries/.exec(restoredRun.stdout)?.[1]);
  // Every signature answered before the backup began is in it (each with its entry); none after the load ended.
  expect(entries).toBeGreaterThanOrEqual(signedBeforeBackup);
  expect(entries).toBeLessThanOrEqual(entriesAtEnd);

  const again = await start(restored);
  const message = 'signed after the restore';
  const res = await postAction(again.url, 'sign', signer, {
    tenant_id: 'bk',
    hash: digest(message),
    algorithm: 'ECDSA_SHA_256',
  });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  // The same key: the public key fetched before the backup verifies it.
  expect(verify('sha256', Buffer.from(message), publicKey, Buffer.from(res.body.signature as string, 'base64'))).toBe(
    true,
  );
  await again.stop();
  const verified = runCli(['admin', 'audit', 'verify', ...whereArgs(restored)]);
  expect(verified.code, verified.stderr).toBe(0);
  expect(Number(/audit log intact: (\d+) entries/.exec(verified.stdout)?.[1])).toBeGreaterThan(entries);
}

describe('backup and restore as docs/deployment.md says', () => {
  it('SQLite: admin backup under load, restored into a fresh data dir, signs with the same keys', async () => {
    await backUpUnderLoadAndRestore(
      'sqlite',
      { dataDir: join(makeTempDir(), 'data') },
      { dataDir: join(makeTempDir(), 'restored') },
    );
  }, 300_000);

  it.skipIf(testPostgresUrl() === undefined)(
    'PostgreSQL: pg_dump and the token folder under load, restored into a fresh database and data dir',
    async () => {
      await backUpUnderLoadAndRestore(
        'postgres',
        { dataDir: join(makeTempDir(), 'data'), database: createTestDatabase('backup') },
        { dataDir: join(makeTempDir(), 'restored'), database: createTestDatabase('restored') },
      );
    },
    300_000,
  );
});
