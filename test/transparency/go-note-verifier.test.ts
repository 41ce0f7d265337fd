// The log checked by the Go ecosystem's standard code, with no verifier of signbridge's or the test's own:
// test/fixtures/go-note-verifier, built offline from Debian's golang-golang-x-mod-dev (golang.org/x/mod/sumdb/note's
// NewVerifier and Open on the log's Ed25519 vkey; sumdb/tlog's TileHashReader over the served tiles, ProveRecord /
// CheckRecord and ProveTree / CheckTree), run against a listening service. What the public witness network and
// Go's note tooling need of the log's Ed25519 line (docs/transparency.md); it fails without that line, on a
// tampered note and under another key.
import { execFile, execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unrelatedEd25519Vkey } from '../helpers/log-client.js';
import { callAction, makeTempDir, startTestService, type TestService } from '../helpers/service.js';

const SOURCE = join(import.meta.dirname, '..', 'fixtures', 'go-note-verifier');
const X_MOD = '/usr/share/gocode/src/golang.org/x/mod/sumdb/note';
const TENANT = 'gonote';

/** Builds the verifier into a temp folder (GOPATH mode on Debian's Go sources, offline); why not, when it cannot. */
function build(dir: string): { binary: string } | { why: string } {
  try {
    execFileSync('go', ['version'], { stdio: 'ignore' });
  } catch {
    return { why: 'go is not installed (scripts/setup.sh installs golang-go)' };
  }
  if (!existsSync(X_MOD)) return { why: `${X_MOD} is missing (scripts/setup.sh installs golang-golang-x-mod-dev)` };
  const binary = join(dir, 'note-verifier');
  // One Go build cache for every run, so that a rerun does not compile the standard library again.
  const cache = join(tmpdir(), 'signbridge-go-note-verifier-cache');
  mkdirSync(cache, { recursive: true });
  try {
    execFileSync('go', ['build', '-o', binary, '.'], {
      cwd: SOURCE,
      env: {
        ...process.env,
        GO111MODULE: 'off',
        GOPATH: '/usr/share/gocode',
        GOFLAGS: '',
        GOPROXY: 'off',
        GOTOOLCHAIN: 'local',
        GOCACHE: cache,
      },
      stdio: ['ignore', 'ignore', 'pipe'],
      timeout: 300_000,
    });
  } catch (err) {
    return { why: `go build failed: ${String((err as { stderr?: Buffer }).stderr ?? (err as Error).message).trim()}` };
  }
  return { binary };
}

const dir = makeTempDir('signbridge-go-note-');
const built = build(dir);
const missing = 'why' in built ? built.why : undefined;
// scripts/test.sh sets it: on a machine the README's command set up, a verifier that cannot be built is a failure,
// not a skip.
if (missing && process.env.SIGNBRIDGE_REQUIRE_GO_NOTE === '1') throw new Error(missing);

let svc: TestService;
let url: string;
let token: string;
let vkey: string;

function verifier(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      (built as { binary: string }).binary,
      ['-vkey', vkey, '-url', url, '-token', token, ...args],
      { timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

async function sign(message: string): Promise<void> {
  const r = await callAction(svc.app, token, 'sign', {
    tenant_id: TENANT,
    algorithm: 'ECDSA_SHA_256',
    hash: createHash('sha256').update(message).digest('base64'),
  });
  expect(r.status).toBe(200);
}

async function checkpointNow(): Promise<string> {
  const res = await svc.app.inject({
    method: 'POST',
    url: '/log/checkpoint',
    headers: { authorization: `Bearer ${svc.operator}` },
  });
  expect(res.statusCode).toBe(200);
  return res.body;
}

/** A file holding `note`, for -checkpoint / -old. */
function noteFile(name: string, note: string): string {
  const file = join(dir, name);
  writeFileSync(file, note);
  return file;
}

describe.skipIf(missing)(`Go's sumdb/note and tlog check the log${missing ? `: ${missing}` : ''}`, () => {
  beforeAll(async () => {
    svc = await startTestService({
      log: { checkpointEveryEntries: 1_000_000, checkpointEverySeconds: 3600, public: false, intervalMs: 20 },
    });
    url = await svc.app.listen({ host: '127.0.0.1', port: 0 });
    expect(
      (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: TENANT, key_spec: 'ECC_NIST_P256' }))
        .status,
    ).toBe(201);
    token = await svc.apiKey('signer', TENANT);
    const res = await svc.app.inject({
      method: 'GET',
      url: '/log/public-key?type=ed25519',
      headers: { authorization: `Bearer ${token}` },
    });
    expect(res.statusCode).toBe(200);
    vkey = res.body.trim();
  }, 120_000);
  afterAll(async () => svc?.close());

  it('verifies the latest checkpoint, an inclusion proof from the tiles, and consistency with an older checkpoint', async () => {
    for (let i = 0; i < 5; i++) await sign(`early ${i}`);
    const older = await checkpointNow();
    // Past one full tile of 256 leaves, so the proofs read level-1 tiles and full level-0 tiles too.
    for (let i = 0; i < 300; i++) await sign(`later ${i}`);
    const latest = await checkpointNow();
    const rows = await svc.store.audit.read(0, 100_000);
    const index = rows.findLastIndex((r) => r.tenantId === TENANT && r.action === 'sign' && r.outcome === 'signed');
    expect(index).toBeGreaterThan(256);

    const r = await verifier(['-index', String(index), '-old', noteFile('older.note', older)]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const size = latest.split('\n')[1];
    expect(r.stdout).toContain(`checkpoint ${vkey.split('+')[0]} ${size} `);
    expect(r.stdout).toContain(`inclusion ${index} ${size}\n`);
    expect(r.stdout).toContain(`consistency ${older.split('\n')[1]} ${size}\n`);
  });

  it('refuses the checkpoint without its Ed25519 line (the ECDSA line alone is no signature it knows)', async () => {
    const note = await checkpointNow();
    const ecdsaOnly = note.split('\n').slice(0, -2).join('\n');
    expect(ecdsaOnly.split('\n\u2014 ')).toHaveLength(2);
    const r = await verifier(['-checkpoint', noteFile('ecdsa-only.note', `${ecdsaOnly}\n`)]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/note\.Open: .*no verifiable signatures/);
  });

  it('refuses a tampered checkpoint (another size under the same signatures)', async () => {
    const note = await checkpointNow();
    const [origin, size, ...rest] = note.split('\n');
    const tampered = [origin, String(Number(size) + 1), ...rest].join('\n');
    const r = await verifier(['-checkpoint', noteFile('tampered.note', tampered)]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/note\.Open: invalid signature/);
  });

  it('refuses the checkpoint under another Ed25519 key of the same name', async () => {
    const note = await checkpointNow();
    const name = vkey.split('+')[0] as string;
    const other = unrelatedEd25519Vkey(name);
    const r = await new Promise<{ code: number; stderr: string }>((resolve) =>
      execFile(
        (built as { binary: string }).binary,
        ['-vkey', other, '-checkpoint', noteFile('other-key.note', note)],
        (err, _stdout, stderr) => resolve({ code: err ? 1 : 0, stderr }),
      ),
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/note\.Open: .*no verifiable signatures/);
  });
});
