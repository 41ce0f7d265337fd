// TLS to PostgreSQL when the URL asks for it (issue 16): a cluster of this test's own with a certificate for
// localhost, the store connecting with sslmode=verify-full and that certificate as its trust root, the server
// confirming the connection is encrypted; the same URL without the trust root is refused (the certificate is
// verified, not merely accepted), and sslmode=require against a server without TLS fails rather than going plain.
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync } from 'node:fs';
import { join } from 'node:path';
import { type Kysely, sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgresStore } from '../../src/store/postgres/postgres-store.js';
import { selfSignedP256 } from '../helpers/crypto.js';
import { type PostgresCluster, postgresBinDir, startPostgresCluster, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';

const enabled = postgresBinDir() !== undefined && testPostgresUrl() !== undefined;
let cluster: PostgresCluster | undefined;
let cert: string;

beforeAll(async () => {
  if (!enabled) return;
  const dir = makeTempDir('sb-pg-tls-');
  chmodSync(dir, 0o755); // the server runs as `postgres` and reads the files from here
  cert = join(dir, 'server.crt');
  const key = join(dir, 'server.key');
  selfSignedP256(key, cert, '/CN=localhost', { days: 1, extensions: ['subjectAltName=DNS:localhost'] });
  chmodSync(key, 0o600); // PostgreSQL refuses a key others can read
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
    chownSync(key, uid, gid);
  }
  cluster = await startPostgresCluster(['ssl=on', `ssl_cert_file=${cert}`, `ssl_key_file=${key}`]);
});
afterAll(() => cluster?.stop());

/** The cluster's database URL on host `localhost` (the name in the certificate), with `query`. */
function tlsUrl(query: string): string {
  const url = new URL((cluster as PostgresCluster).createDatabase(`tls_${Date.now().toString(36)}`));
  url.hostname = 'localhost';
  url.search = query;
  return url.toString();
}

describe.skipIf(!enabled)('PostgreSQL over TLS', () => {
  it('encrypts the connection when the URL asks for it, verifying the server certificate', async () => {
    const store = openPostgresStore(tlsUrl(`sslmode=verify-full&sslrootcert=${encodeURIComponent(cert)}`));
    try {
      await store.migrate();
      const query = sql<{ ssl: boolean; version: string }>`
        SELECT ssl, version FROM pg_stat_ssl WHERE pid = pg_backend_pid()`;
      // The raw Kysely instance, to ask the server about this very connection.
      const { rows } = await query.execute((store as unknown as { db: Kysely<unknown> }).db);
      expect(rows[0]?.ssl).toBe(true);
      expect(rows[0]?.version).toMatch(/^TLSv1\.[23]$/);
    } finally {
      await store.close();
    }
  });

  it('refuses a server certificate it has no trust root for', async () => {
    const store = openPostgresStore(tlsUrl('sslmode=verify-full'));
    try {
      await expect(store.migrate()).rejects.toThrow(/self[- ]signed|certificate/i);
    } finally {
      await store.close();
    }
  });

  it('does not fall back to a plain connection when the server has no TLS', async () => {
    const url = new URL(testPostgresUrl() as string);
    url.search = 'sslmode=require';
    const store = openPostgresStore(url.toString());
    try {
      await expect(store.migrate()).rejects.toThrow(/does not support SSL/i);
    } finally {
      await store.close();
    }
  });
});
