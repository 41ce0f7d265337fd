// `signbridge audit prove` and `audit watch` against the real service (a `signbridge server` process): a file signed
// with `signbridge sign`, proved by its signature file, by its digest and by the Signbridge-Log-Index the signing
// response carried; then the real faults: an audit row edited in the database (prove fails: the entry no longer
// hashes to its leaf) and the log's tables rewritten to another history (watch fails on the next checkpoint).
// test/cli/audit-log-verify.test.ts covers every failure mode against a stand-in; this file shows the commands work
// with the service's own endpoints, key and checkpoints.
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openSqlite } from '../../src/store/sqlite/sqlite-driver.js';
import { createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { unrelatedEd25519Vkey } from '../helpers/log-client.js';
import { makeTempDir } from '../helpers/service.js';

let dataDir: string;
let server: ServerProcess;
let operator: string;
let signer: string;
let vkey: string;
const TENANT = 'proofs';

function env(): NodeJS.ProcessEnv {
  return { SIGNBRIDGE_SERVICE_URL: server.url, SIGNBRIDGE_API_KEY: signer, HOME: dataDir };
}

/** Publishes a checkpoint now (the operator's on-demand checkpoint), so the latest entries are provable at once. */
async function checkpointNow(): Promise<void> {
  const res = await fetch(`${server.url}/log/checkpoint`, {
    method: 'POST',
    headers: { authorization: `Bearer ${operator}` },
  });
  expect(res.status, await res.clone().text()).toBe(200);
}

async function signFile(name: string, content: string): Promise<{ file: string; sig: string; digest: string }> {
  const file = join(dataDir, name);
  writeFileSync(file, content);
  const signed = runCli(['sign', '--tenant', TENANT, file, '--out', `${file}.sig`], env());
  expect(signed.code, signed.stderr).toBe(0);
  return { file, sig: `${file}.sig`, digest: createHash('sha256').update(content).digest('base64') };
}

beforeAll(async () => {
  dataDir = makeTempDir('signbridge-prove-');
  operator = createApiKeyCli(dataDir, 'operator');
  server = await startServerProcess(['--data-dir', dataDir]);
  const created = await postAction(server.url, 'create_tenant', operator, {
    tenant_id: TENANT,
    key_spec: 'ECC_NIST_P256',
  });
  expect(created.status).toBe(201);
  signer = createApiKeyCli(dataDir, 'signer', TENANT);
  vkey = (
    await (await fetch(`${server.url}/log/public-key`, { headers: { authorization: `Bearer ${operator}` } })).text()
  ).trim();
  expect(vkey).toMatch(/^\S+\+[0-9a-f]{8}\+\S+$/);
}, 120_000);
afterAll(async () => {
  await server?.stop();
});

describe('audit prove against the service', () => {
  it('right after `signbridge sign`, `audit prove --wait` proves it with the defaults, nobody publishing a checkpoint', async () => {
    // Issue 35's reproduction: prove at once after signing. The integrator takes the entry within 250 ms and the
    // checkpoint follows within a second; --wait covers the gap instead of failing with "not yet logged?".
    const { sig } = await signFile('fresh.bin', 'fresh build\n');
    const proved = runCli(
      ['audit', 'prove', '--tenant', TENANT, '--signature', sig, '--public-key', vkey, '--wait', '60'],
      env(),
    );
    expect(proved.code, proved.stderr).toBe(0);
    expect(proved.stdout).toContain('verified:');
  });

  it('`signbridge sign --log-proof` keeps the tlog-proof beside the signature; it verifies offline', () => {
    const file = join(dataDir, 'with-proof.bin');
    writeFileSync(file, 'a release with its proof\n');
    const signed = runCli(['sign', '--tenant', TENANT, file, '--log-proof'], env());
    expect(signed.code, signed.stderr).toBe(0);
    expect(signed.stderr).toMatch(/log proof \(index \d+\) written to .*with-proof\.bin\.sig\.tlog-proof/);
    const proof = readFileSync(`${file}.sig.tlog-proof`, 'utf8');
    expect(proof.startsWith('c2sp.org/tlog-proof@v1\n')).toBe(true);
    const offline = runCli(
      ['audit', 'prove', '--bundle', `${file}.sig.tlog-proof`, '--public-key', vkey, '--signature', `${file}.sig`],
      { ...env(), SIGNBRIDGE_SERVICE_URL: 'http://127.0.0.1:9' },
    );
    expect(offline.code, offline.stderr).toBe(0);
    expect(offline.stdout).toContain('verified:');
  });

  it('`signbridge sign --log-proof` of several files (one sign_batch request) keeps each proof beside its signature', () => {
    const files = ['one', 'two'].map((name) => {
      const file = join(dataDir, `batch-${name}.bin`);
      writeFileSync(file, `a release part with its proof: ${name}\n`);
      return file;
    });
    const signed = runCli(['sign', '--tenant', TENANT, ...files, '--log-proof'], env());
    expect(signed.code, signed.stderr).toBe(0);
    expect(signed.stderr).toMatch(/signed 2 of 2 files \(1 batch request\); 2 log proofs written/);
    for (const file of files) {
      expect(signed.stderr).toMatch(new RegExp(`log proof \\(index \\d+\\) written to ${file}\\.sig\\.tlog-proof`));
      const offline = runCli(
        ['audit', 'prove', '--bundle', `${file}.sig.tlog-proof`, '--public-key', vkey, '--signature', `${file}.sig`],
        { ...env(), SIGNBRIDGE_SERVICE_URL: 'http://127.0.0.1:9' },
      );
      expect(offline.code, offline.stderr).toBe(0);
      expect(offline.stdout).toContain('verified:');
    }
  });

  it('proves each signature of a batch (one entry for the batch) by its file, online and from the kept file', async () => {
    const files = ['a', 'b', 'c'].map((name) => {
      const file = join(dataDir, `items-${name}.bin`);
      writeFileSync(file, `one of a batch: ${name}\n`);
      return file;
    });
    const signed = runCli(['sign', '--tenant', TENANT, ...files], env());
    expect(signed.code, signed.stderr).toBe(0);
    expect(signed.stderr).toMatch(/signed 3 of 3 files \(1 batch request\)/);
    await checkpointNow();
    const indexes = new Set<string>();
    for (const file of files) {
      const out = `${file}.sig.tlog-proof`;
      const online = runCli(
        ['audit', 'prove', '--tenant', TENANT, '--signature', `${file}.sig`, '--public-key', vkey, '--out', out],
        env(),
      );
      expect(online.code, online.stderr).toBe(0);
      expect(online.stdout).toMatch(/batch item \d \(digest /);
      indexes.add(/index (\d+)/.exec(online.stdout)?.[1] as string);
      const offline = runCli(
        ['audit', 'prove', '--bundle', out, '--public-key', vkey, '--tenant', TENANT, '--signature', `${file}.sig`],
        { ...env(), SIGNBRIDGE_SERVICE_URL: 'http://127.0.0.1:9' },
      );
      expect(offline.code, offline.stderr).toBe(0);
      expect(offline.stdout).toContain('verified:');
      // Another file's signature against this file's proof: not proven.
      const other = files.find((f) => f !== file) as string;
      const wrong = runCli(['audit', 'prove', '--bundle', out, '--public-key', vkey, '--signature', `${other}.sig`], {
        ...env(),
        SIGNBRIDGE_SERVICE_URL: 'http://127.0.0.1:9',
      });
      expect(wrong.code).toBe(1);
      expect(wrong.stderr).toMatch(/names signature/);
    }
    expect(indexes.size).toBe(1);
    const [index] = [...indexes];
    const byItem = runCli(
      ['audit', 'prove', '--tenant', TENANT, '--index', index as string, '--item', '1', '--public-key', vkey],
      env(),
    );
    expect(byItem.code, byItem.stderr).toBe(0);
    expect(byItem.stdout).toMatch(/batch item 1 \(digest /);
  });

  it('proves a signature by its file, by its digest and by the log index the signing response carried', async () => {
    const { sig, digest } = await signFile('release.bin', 'release 1.0\n');
    await checkpointNow();
    const bySignature = runCli(['audit', 'prove', '--tenant', TENANT, '--signature', sig, '--public-key', vkey], env());
    expect(bySignature.code, bySignature.stderr).toBe(0);
    expect(bySignature.stdout).toContain('verified:');
    const index = /index (\d+)/.exec(bySignature.stdout)?.[1];
    expect(index).toBeDefined();
    const byDigest = runCli(['audit', 'prove', '--tenant', TENANT, '--digest', digest, '--public-key', vkey], env());
    expect(byDigest.code, byDigest.stderr).toBe(0);
    expect(byDigest.stdout).toContain(`index ${index} `);
    // A signature made over the API: its response names the entry's log index, and that index proves it.
    const other = join(dataDir, 'other.bin');
    writeFileSync(other, 'another artifact\n');
    const body = runCli(['digest', '--tenant', TENANT, other], env());
    expect(body.code, body.stderr).toBe(0);
    const { action: _action, ...request } = JSON.parse(body.stdout) as Record<string, string>;
    const signed = await postAction(server.url, 'sign', signer, request);
    expect(signed.status).toBe(200);
    const logIndex = signed.headers.get('signbridge-log-index');
    expect(logIndex).toMatch(/^\d+$/);
    await checkpointNow();
    const bundle = join(dataDir, 'other.sig.tlog-proof');
    const byIndex = runCli(
      ['audit', 'prove', '--tenant', TENANT, '--index', logIndex as string, '--public-key', vkey, '--out', bundle],
      env(),
    );
    expect(byIndex.code, byIndex.stderr).toBe(0);
    expect(byIndex.stdout).toContain(`digest ${request.hash}`);
    // The kept proof verifies with nothing but the key.
    const offline = runCli(
      ['audit', 'prove', '--bundle', bundle, '--public-key', vkey, '--digest', request.hash as string],
      {},
    );
    expect(offline.code, offline.stderr).toBe(0);
  });

  it("proves with the log's Ed25519 vkey pinned; another Ed25519 key of the same name is refused", async () => {
    const edVkey = (
      await (
        await fetch(`${server.url}/log/public-key?type=ed25519`, { headers: { authorization: `Bearer ${operator}` } })
      ).text()
    ).trim();
    const name = vkey.split('+')[0] as string;
    expect(edVkey.startsWith(`${name}+`)).toBe(true);
    const { sig } = await signFile('ed25519-pinned.bin', 'proved under the Ed25519 key\n');
    await checkpointNow();
    const proved = runCli(['audit', 'prove', '--tenant', TENANT, '--signature', sig, '--public-key', edVkey], env());
    expect(proved.code, proved.stderr).toBe(0);
    expect(proved.stdout).toContain('verified:');
    // The same name, another key: its key ID is not on the checkpoint, so nothing is proved.
    const wrong = unrelatedEd25519Vkey(name);
    const refused = runCli(['audit', 'prove', '--tenant', TENANT, '--signature', sig, '--public-key', wrong], env());
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toMatch(/not signed by/);
    // audit watch follows the log under the Ed25519 key too.
    const watched = runCli(
      ['audit', 'watch', '--state', join(dataDir, 'watch-ed25519.json'), '--public-key', edVkey, '--once'],
      env(),
    );
    expect(watched.code, watched.stderr).toBe(0);
  });

  it('a signature the tenant never made is not proved', async () => {
    const stray = join(dataDir, 'stray.sig');
    writeFileSync(stray, Buffer.alloc(72, 1));
    const res = runCli(['audit', 'prove', '--tenant', TENANT, '--signature', stray, '--public-key', vkey], env());
    expect(res.code).toBe(1);
  });

  it('an audit row edited in the database: prove fails, the served entry no longer hashes to its leaf', async () => {
    const { digest } = await signFile('edited.bin', 'to be edited\n');
    await checkpointNow();
    expect(runCli(['audit', 'prove', '--tenant', TENANT, '--digest', digest, '--public-key', vkey], env()).code).toBe(
      0,
    );
    const db = openSqlite(join(dataDir, 'signbridge.db'));
    try {
      // The entry by its digest: in its details' JSON, or in its digest column when it is packed (migration 0032).
      const row = db
        .prepare(
          "SELECT seq, actor FROM audit_log WHERE outcome = 'signed' AND (json_extract(details, '$.hash') = ? OR digest = ?)",
        )
        .get(digest, Buffer.from(digest, 'base64')) as { seq: number; actor: string };
      db.prepare('UPDATE audit_log SET actor = ? WHERE seq = ?').run('someone-else', row.seq);
    } finally {
      db.close();
    }
    const res = runCli(['audit', 'prove', '--tenant', TENANT, '--digest', digest, '--public-key', vkey], env());
    expect(res.code, res.stdout).toBe(1);
    expect(res.stderr).toMatch(/leaf|hash/i);
  });
});

describe('audit watch against the service', () => {
  it('follows the growing log; a checkpoint rewritten in the database (another root, same signature) is refused', async () => {
    const state = join(dataDir, 'watch.json');
    const first = runCli(['audit', 'watch', '--state', state, '--public-key', vkey, '--once'], env());
    expect(first.code, first.stderr).toBe(0);
    await signFile('next.bin', 'next\n');
    await checkpointNow();
    const grown = runCli(['audit', 'watch', '--state', state, '--public-key', vkey, '--once'], env());
    expect(grown.code, grown.stderr).toBe(0);
    const kept = readFileSync(state, 'utf8');
    // Someone with the database but not the key rewrites the latest checkpoint's root (what a rewritten history
    // needs, since the service never signs a checkpoint inconsistent with its last one): watch must refuse it.
    const db = openSqlite(join(dataDir, 'signbridge.db'));
    try {
      const latest = db.prepare('SELECT * FROM log_checkpoints ORDER BY tree_size DESC LIMIT 1').get() as Record<
        string,
        unknown
      >;
      expect(latest).toBeDefined();
      const forged = String(latest.note).replace(/\n([A-Za-z0-9+/=]{44})\n/, (_m, root: string) => {
        const bytes = Buffer.from(root, 'base64');
        bytes[0] = (bytes[0] as number) ^ 1;
        return `\n${bytes.toString('base64')}\n`;
      });
      db.prepare('UPDATE log_checkpoints SET note = ? WHERE tree_size = ?').run(forged, latest.tree_size as number);
    } finally {
      db.close();
    }
    const watched = runCli(['audit', 'watch', '--state', state, '--public-key', vkey, '--once'], env());
    expect(watched.code, watched.stdout + watched.stderr).toBe(1);
    expect(readFileSync(state, 'utf8')).toBe(kept);
  });
});
