// `signbridge audit prove` and `signbridge audit watch` through the real CLI against a log that can be made to lie.
// The HTTP server below STANDS IN FOR THE SIGNBRIDGE SERVICE's transparency-log endpoints (GET /log/checkpoint,
// /log/public-key, /log/proof/inclusion, /log/proof/consistency, as the contract in docs/transparency.md has them);
// the service's real endpoints are tested with the service. It serves proofs from its own RFC 9162 tree
// (test/helpers/rfc9162-tree.ts, independent of src/transparency/verify/) and signs checkpoints with a node:crypto
// ECDSA P-256 key as C2SP signed notes (type 0x02), so each case can break exactly one thing: a tampered entry, a
// truncated log, a rewritten history, a forked checkpoint, a checkpoint signed by another key.
import { createHash, createPublicKey, generateKeyPairSync, type KeyObject, sign, verify } from 'node:crypto';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCliAsync } from '../helpers/cli.js';
import { loginEnv, startCli } from '../helpers/cli-child.js';
import { consistencyProof, hashLeaf, inclusionPath, mth } from '../helpers/rfc9162-tree.js';
import { refLeaf, refVerifyInclusion } from '../helpers/rfc9162-verify.js';
import { makeTempDir } from '../helpers/service.js';

/** A CLI run loads the whole CLI: 2-5 s on a busy 2-core machine, and a test makes up to ten of them. */
const SLOW = 240_000;

const ORIGIN = 'log.example.test/signbridge';
const API_KEY = 'sbk_test_audit_reader';
const TENANT = 'acme';

interface LogKey {
  privateKey: KeyObject;
  id: Buffer;
  vkey: string;
}

function newLogKey(): LogKey {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const spki = publicKey.export({ format: 'der', type: 'spki' });
  const id = createHash('sha256').update(spki).digest().subarray(0, 4);
  return {
    privateKey,
    id,
    vkey: `${ORIGIN}+${id.toString('hex')}+${Buffer.concat([Buffer.from([2]), spki]).toString('base64')}`,
  };
}

/** Keys sorted at every level, as the audit hash chain writes an entry. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const keys = Object.keys(value).sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

interface Artifact {
  digest: string;
  signature: Buffer;
}

function entryFor(seq: number, tenant: string, a: Artifact): Buffer {
  return Buffer.from(
    canonical({
      seq,
      at: new Date(Date.UTC(2026, 10, 26, 12, 0, seq)).toISOString(),
      tenant_id: tenant,
      actor: 'key_ci',
      action: 'sign',
      outcome: 'signed',
      details: {
        key_id: `${tenant}-k1`,
        algorithm: 'ECDSA_SHA_256',
        hash: a.digest,
        signature_sha256: createHash('sha256').update(a.signature).digest('hex'),
        key_store: 'software',
      },
    }),
  );
}

const artifact = (i: number): Artifact => ({
  digest: createHash('sha256').update(`artifact ${i}`).digest('base64'),
  signature: createHash('sha512').update(`signature ${i}`).digest(),
});

/** What the stand-in serves; each test changes one part of it. */
const log = {
  entries: [] as Buffer[],
  key: newLogKey(),
  /** Serve the inclusion answer's entry with this change (the service lying about an entry). */
  tamper: undefined as undefined | ((entry: Buffer) => Buffer),
  /** Also hash the tampered entry into leaf_hash (a lie that at least hangs together). */
  tamperLeafHash: false,
  requests: [] as string[],
  /** Called when an inclusion look-up finds nothing (a test grows the log then: the entry gets logged late). */
  onMissing: undefined as undefined | (() => void),
};

function checkpointNote(size: number): string {
  const text = `${ORIGIN}\n${size}\n${mth(log.entries.slice(0, size)).toString('base64')}\n`;
  const signature = sign('sha256', Buffer.from(text), { key: log.key.privateKey, dsaEncoding: 'der' });
  return `${text}\n— ${ORIGIN} ${Buffer.concat([log.key.id, signature]).toString('base64')}\n`;
}

function answer(res: ServerResponse, status: number, body: unknown, type = 'application/json'): void {
  res.writeHead(status, { 'content-type': type });
  res.end(typeof body === 'string' ? body : JSON.stringify(body));
}

function handle(req: IncomingMessage, res: ServerResponse) {
  const url = new URL(req.url ?? '/', 'http://stand-in');
  log.requests.push(`${url.pathname}${url.search}`);
  if (req.headers.authorization !== `Bearer ${API_KEY}`) {
    return answer(res, 401, { error: 'unauthorized', reason: 'missing or invalid API key' });
  }
  const size = log.entries.length;
  const q = url.searchParams;
  if (url.pathname === '/log/public-key') return answer(res, 200, `${log.key.vkey}\n`, 'text/plain');
  if (url.pathname === '/log/checkpoint') return answer(res, 200, checkpointNote(size), 'text/plain; charset=utf-8');
  if (url.pathname === '/log/proof/inclusion') {
    const treeSize = q.has('tree_size') ? Number(q.get('tree_size')) : size;
    const tree = log.entries.slice(0, treeSize);
    const details = (e: Buffer) => (JSON.parse(e.toString()) as { details: Record<string, unknown> }).details;
    let index = -1;
    if (q.has('index')) index = Number(q.get('index'));
    else if (q.has('digest')) index = tree.findIndex((e) => details(e).hash === q.get('digest'));
    else if (q.has('signature_sha256')) {
      index = tree.findIndex((e) => details(e).signature_sha256 === q.get('signature_sha256'));
    }
    if (!(index >= 0 && index < treeSize)) {
      log.onMissing?.();
      return answer(res, 404, { error: 'not_found', reason: 'no log entry matches' });
    }
    const original = tree[index] as Buffer;
    const entry = log.tamper ? log.tamper(original) : original;
    const leaf = hashLeaf(log.tamperLeafHash ? entry : original);
    const own = (JSON.parse(original.toString()) as { tenant_id: string }).tenant_id === TENANT;
    return answer(res, 200, {
      index,
      tree_size: treeSize,
      leaf_hash: leaf.toString('base64'),
      ...(own && { entry: entry.toString('base64') }),
      proof: inclusionPath(index, tree).map((h) => h.toString('base64')),
      checkpoint: checkpointNote(treeSize),
    });
  }
  if (url.pathname === '/log/proof/consistency') {
    const from = Number(q.get('from'));
    const to = Number(q.get('to'));
    if (!(from >= 0 && from <= to && to <= size)) return answer(res, 400, { error: 'bad_request', reason: 'sizes' });
    const proof = from === 0 ? [] : consistencyProof(from, log.entries.slice(0, to));
    return answer(res, 200, { from, to, proof: proof.map((h) => h.toString('base64')) });
  }
  answer(res, 404, { error: 'not_found', reason: 'no such route' });
}

/**
 * A tlog-proof@v1 verifier written from c2sp.org/tlog-proof, tlog-checkpoint and signed-note alone (no signbridge
 * code): the header line, `extra` (the leaf's bytes, signbridge's use of it), `index`, the proof hashes, an empty
 * line, the checkpoint; the checkpoint's ECDSA signature under the pinned key; the RFC 9162 path to its root.
 */
function independentlyVerifiedTlogProof(text: string): { index: number; treeSize: number; entry: Buffer } {
  const [head, checkpoint] = [text.slice(0, text.indexOf('\n\n')), text.slice(text.indexOf('\n\n') + 2)];
  const lines = head.split('\n');
  if (lines[0] !== 'c2sp.org/tlog-proof@v1') throw new Error('not a tlog-proof');
  if (!lines[1]?.startsWith('extra ') || !/^index (0|[1-9]\d*)$/.test(lines[2] ?? '')) throw new Error('layout');
  const entry = Buffer.from((lines[1] as string).slice(6), 'base64');
  const index = Number((lines[2] as string).slice(6));
  const proof = lines.slice(3).map((l) => Buffer.from(l, 'base64'));
  const [body, sigs] = checkpoint.split('\n\n') as [string, string];
  const [origin, size, root] = body.split('\n') as [string, string, string];
  const sigLine = sigs.split('\n').find((l) => l.startsWith(`\u2014 ${origin} `)) as string;
  const sigBytes = Buffer.from(sigLine.split(' ')[2] as string, 'base64');
  if (!sigBytes.subarray(0, 4).equals(pinned.id)) throw new Error('checkpoint signed by another key');
  const publicKey = createPublicKey(pinned.privateKey);
  if (!verify('sha256', Buffer.from(`${body}\n`), publicKey, sigBytes.subarray(4))) throw new Error('bad signature');
  const treeSize = Number(size);
  if (!refVerifyInclusion(refLeaf(entry), index, treeSize, proof, Buffer.from(root, 'base64'))) {
    throw new Error('the proof does not lead to the checkpoint root');
  }
  return { index, treeSize, entry };
}

const dir = makeTempDir('sb-audit-log-');
let server: Server;
let url: string;
const env = () => ({ ...loginEnv(dir), SIGNBRIDGE_API_KEY: API_KEY });
const run = (args: string[], extra: NodeJS.ProcessEnv = {}) => runCliAsync(['audit', ...args], { ...env(), ...extra });

/** Fresh log of n entries: every other one another tenant's, so proofs run past entries this tenant cannot read. */
function resetLog(n: number): void {
  log.entries = Array.from({ length: n }, (_, i) => entryFor(i + 1, i % 2 === 1 ? 'other' : TENANT, artifact(i)));
  log.key = pinned;
  log.tamper = undefined;
  log.tamperLeafHash = false;
  log.onMissing = undefined;
}

const pinned = newLogKey();
const sigFile = (i: number) => {
  const file = join(dir, `artifact-${i}.sig`);
  writeFileSync(file, artifact(i).signature);
  return file;
};

beforeAll(async () => {
  server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  await new Promise((resolve) => server?.close(resolve));
});

describe('audit prove', () => {
  it(
    'proves a signature by its file, keeps the proof, and verifies the kept proof with nothing but the key',
    async () => {
      resetLog(17);
      const out = join(dir, 'artifact-8.sig.tlog-proof');
      const res = await run([
        'prove',
        '--service-url',
        url,
        '--tenant',
        TENANT,
        '--signature',
        sigFile(8),
        '--public-key',
        pinned.vkey,
        '--out',
        out,
      ]);
      expect(res.stderr).not.toMatch(/warning/);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stdout).toMatch(/index 8 \(seq 9\), tenant acme, sign → signed/);
      expect(res.stdout).toMatch(/tree size 17/);
      expect(res.stdout).toMatch(/^verified: /m);
      expect(log.requests.at(-1)).toContain(
        `signature_sha256=${createHash('sha256').update(artifact(8).signature).digest('hex')}`,
      );

      // The log moved on and the service is gone: the kept proof still verifies, offline.
      const keyFile = join(dir, 'log.vkey');
      writeFileSync(keyFile, `# the audit log's key, from the operator\n${pinned.vkey}\n`);
      const offline = await run(
        ['prove', '--bundle', out, '--public-key', keyFile, '--tenant', TENANT, '--signature', sigFile(8)],
        { SIGNBRIDGE_SERVICE_URL: 'http://127.0.0.1:9' },
      );
      expect(offline.code, offline.stderr).toBe(0);
      expect(offline.stdout).toMatch(/index 8 .*\n[\s\S]*tree size 17/);

      // The kept file is a C2SP tlog-proof@v1 that a verifier knowing only that spec and the log's key accepts.
      const kept = readFileSync(out, 'utf8');
      expect(independentlyVerifiedTlogProof(kept)).toEqual({ index: 8, treeSize: 17, entry: log.entries[8] });

      // A kept proof whose entry (its extra line) was edited to another tenant's name does not verify.
      const extra = /^extra (.*)$/m.exec(kept)?.[1] as string;
      const edited = Buffer.from(extra, 'base64').toString().replace('"tenant_id":"acme"', '"tenant_id":"acmf"');
      const editedFile = join(dir, 'edited.tlog-proof');
      writeFileSync(editedFile, kept.replace(extra, Buffer.from(edited).toString('base64')));
      expect(() => independentlyVerifiedTlogProof(readFileSync(editedFile, 'utf8'))).toThrow(/does not lead/);
      const bad = await run(['prove', '--bundle', editedFile, '--public-key', pinned.vkey]);
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(/the log does not prove it: the inclusion proof does not lead from entry 8/);
      // Nor does it for another artifact than the one it was saved for.
      const other = await run(['prove', '--bundle', out, '--public-key', pinned.vkey, '--signature', sigFile(10)]);
      expect(other.code).toBe(1);
      expect(other.stderr).toMatch(/not this file's SHA-256/);
      const otherIndex = await run(['prove', '--bundle', out, '--public-key', pinned.vkey, '--index', '9']);
      expect(otherIndex.code).toBe(1);
      expect(otherIndex.stderr).toMatch(/the bundle proves index 8, not 9/);
    },
    SLOW,
  );

  it(
    'keeps the JSON bundle on --format json and still verifies it; refuses a malformed tlog-proof file',
    async () => {
      resetLog(6);
      const out = join(dir, 'artifact-4.proof.json');
      const args = ['prove', '--service-url', url, '--tenant', TENANT, '--index', '4', '--public-key', pinned.vkey];
      const saved = await run([...args, '--out', out, '--format', 'json']);
      expect(saved.code, saved.stderr).toBe(0);
      const json = JSON.parse(readFileSync(out, 'utf8')) as { entry: string; format: string };
      expect(json.format).toBe('signbridge-log-inclusion-v1');
      const offline = await run(['prove', '--bundle', out, '--public-key', pinned.vkey, '--index', '4']);
      expect(offline.code, offline.stderr).toBe(0);
      const edited = Buffer.from(json.entry, 'base64').toString().replace('"actor":"key_ci"', '"actor":"key_cj"');
      const editedFile = join(dir, 'edited.proof.json');
      writeFileSync(editedFile, JSON.stringify({ ...json, entry: Buffer.from(edited).toString('base64') }));
      const bad = await run(['prove', '--bundle', editedFile, '--public-key', pinned.vkey]);
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(/the entry does not hash to the proof’s leaf hash/);

      const leadingZero = join(dir, 'leading-zero.tlog-proof');
      const tlog = join(dir, 'artifact-4.tlog-proof');
      expect((await run([...args, '--out', tlog])).code).toBe(0);
      writeFileSync(leadingZero, readFileSync(tlog, 'utf8').replace(/^index 4$/m, 'index 04'));
      const malformed = await run(['prove', '--bundle', leadingZero, '--public-key', pinned.vkey]);
      expect(malformed.code).toBe(1);
      expect(malformed.stderr).toMatch(/line 3 is not "index N"/);
      const badFormat = await run([...args, '--out', tlog, '--format', 'xml']);
      expect(badFormat.code).toBe(2);
      expect(badFormat.stderr).toMatch(/--format must be one of tlog-proof, json, got xml/);
    },
    SLOW,
  );

  it(
    'proves a digest; without a pinned key it warns that trust on first use proves nothing',
    async () => {
      resetLog(9);
      const res = await run(['prove', '--service-url', url, '--tenant', TENANT, '--digest', artifact(4).digest]);
      expect(res.code, res.stderr).toBe(0);
      expect(res.stderr).toMatch(/warning: no --public-key/);
      expect(res.stdout).toMatch(/index 4 \(seq 5\)/);
    },
    SLOW,
  );

  it(
    '--wait asks again until the signature is logged; without it the answer names --wait',
    async () => {
      resetLog(6);
      const args = ['prove', '--service-url', url, '--tenant', TENANT, '--public-key', pinned.vkey];
      const notYet = await run([...args, '--digest', artifact(6).digest]);
      expect(notYet.code).toBe(1);
      expect(notYet.stderr).toMatch(/no log entry for this digest .*it may not be logged yet: --wait SECONDS waits/);
      // The entry is logged only after the command has asked once and been told 404.
      let misses = 0;
      log.onMissing = () => {
        if (++misses === 2) log.entries = [...log.entries, entryFor(7, TENANT, artifact(6))];
      };
      const waited = await run([...args, '--digest', artifact(6).digest, '--wait', '60']);
      expect(waited.code, waited.stderr).toBe(0);
      expect(waited.stderr).toMatch(/waiting up to 60 s for the log to include it/);
      expect(waited.stdout).toMatch(/index 6 \(seq 7\)/);
      expect(misses).toBe(2);
      const bad = await run([...args, '--digest', artifact(6).digest, '--wait', 'soon']);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/--wait must be whole seconds/);
    },
    SLOW,
  );

  it(
    'refuses a tampered entry, whether or not the service also changed its leaf hash',
    async () => {
      resetLog(8);
      log.tamper = (e) => Buffer.from(e.toString().replace('"actor":"key_ci"', '"actor":"key_cj"'));
      const args = ['prove', '--service-url', url, '--tenant', TENANT, '--index', '2', '--public-key', pinned.vkey];
      const res = await run(args);
      expect(res.code).toBe(1);
      expect(res.stderr).toMatch(/the log does not prove it: the entry does not hash to the proof’s leaf hash/);
      log.tamperLeafHash = true;
      const consistentLie = await run(args);
      expect(consistentLie.code).toBe(1);
      expect(consistentLie.stderr).toMatch(/the log does not prove it: the inclusion proof does not lead from entry 2/);
    },
    SLOW,
  );

  it(
    'refuses a checkpoint signed by another key, another tenant’s entry, and an unknown digest',
    async () => {
      resetLog(5);
      log.key = newLogKey();
      const base = ['prove', '--service-url', url, '--public-key', pinned.vkey];
      const forged = await run([...base, '--tenant', TENANT, '--index', '0']);
      expect(forged.code).toBe(1);
      expect(forged.stderr).toMatch(
        /does not prove it: checkpoint: note is not signed by log\.example\.test\/signbridge\+/,
      );
      log.key = pinned;
      const otherTenant = await run([...base, '--tenant', TENANT, '--index', '1']);
      expect(otherTenant.code).toBe(1);
      expect(otherTenant.stderr).toMatch(/carries no entry/);
      const claimed = await run([...base, '--tenant', 'other', '--index', '0']);
      expect(claimed.code).toBe(1);
      expect(claimed.stderr).toMatch(/the entry is tenant acme's, not other's/);
      const unknown = await run([...base, '--tenant', TENANT, '--digest', artifact(99).digest]);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toMatch(/the service has no log entry for this digest/);
      const notBase64 = await run([...base, '--tenant', TENANT, '--digest', 'not base64!']);
      expect(notBase64.code).toBe(2);
      expect(notBase64.stderr).toMatch(/--digest must be standard base64/);
    },
    SLOW,
  );

  it(
    'says to try again when the service cannot be reached, and names a refused key',
    async () => {
      const down = await run(['prove', '--service-url', 'http://127.0.0.1:9', '--tenant', TENANT, '--index', '0']);
      expect(down.code).toBe(2);
      expect(down.stderr).toMatch(/unreachable .*\(temporary: try again\)/);
      const refused = await run(['prove', '--service-url', url, '--tenant', TENANT, '--index', '0'], {
        SIGNBRIDGE_API_KEY: 'sbk_wrong',
      });
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/HTTP 401 unauthorized/);
    },
    SLOW,
  );
});

describe('audit watch', () => {
  const state = join(dir, 'watch-state.json');
  const watch = (extra: string[] = []) =>
    run(['watch', '--service-url', url, '--state', state, '--public-key', pinned.vkey, '--once', ...extra]);
  const stateText = () => readFileSync(state, 'utf8');

  it(
    'records the first checkpoint, follows a growing log, and catches truncation, rewriting and forks',
    async () => {
      resetLog(5);
      const first = await watch();
      expect(first.code, first.stderr).toBe(0);
      expect(first.stderr).toMatch(/first checkpoint recorded .*tree size 5/);
      expect(statSync(state).mode & 0o777).toBe(0o600);

      // Grows from 5 (not a power of two) to 9, then to 16: consistency proofs verified each time.
      log.entries = [...log.entries, ...[5, 6, 7, 8].map((i) => entryFor(i + 1, TENANT, artifact(i)))];
      const grown = await watch();
      expect(grown.code, grown.stderr).toBe(0);
      expect(grown.stderr).toMatch(/consistent: .* grew from 5 to 9 entries/);
      expect(log.requests.at(-1)).toBe('/log/proof/consistency?from=5&to=9');
      log.entries = [...log.entries, ...Array.from({ length: 7 }, (_, i) => entryFor(i + 10, TENANT, artifact(i + 9)))];
      expect((await watch()).stderr).toMatch(/grew from 9 to 16/);
      const same = await watch();
      expect(same.code).toBe(0);
      expect(same.stderr).toMatch(/unchanged: .*tree size 16/);
      const verified = stateText();

      // Truncated: the last three entries gone, the shorter tree signed.
      const full = log.entries;
      log.entries = full.slice(0, 13);
      const truncated = await watch();
      expect(truncated.code).toBe(1);
      expect(truncated.stderr).toMatch(/the log does not prove it: the log shrank from 16 to 13 entries/);
      expect(truncated.stderr).toMatch(/now served:\n {2}\| log\.example\.test\/signbridge\n {2}\| 13\n/);
      expect(stateText()).toBe(verified);

      // Rewritten: entry 3 replaced, then more appended; every checkpoint correctly signed, but not an extension.
      log.entries = [
        ...full.slice(0, 3),
        entryFor(4, TENANT, artifact(77)),
        ...full.slice(4),
        entryFor(17, TENANT, artifact(16)),
      ];
      const rewritten = await watch();
      expect(rewritten.code).toBe(1);
      expect(rewritten.stderr).toMatch(/the consistency proof from tree size 16 to 17 does not verify/);
      expect(stateText()).toBe(verified);

      // Forked: the same size as verified, another root.
      log.entries = [...full.slice(0, 15), entryFor(16, TENANT, artifact(88))];
      const forked = await watch();
      expect(forked.code).toBe(1);
      expect(forked.stderr).toMatch(/fork: two signed checkpoints of tree size 16 with different roots/);
      expect(stateText()).toBe(verified);

      // Signed by another key (same origin): refused, whatever the tree.
      log.entries = full;
      log.key = newLogKey();
      const otherKey = await watch();
      expect(otherKey.code).toBe(1);
      expect(otherKey.stderr).toMatch(/checkpoint: note is not signed by/);
      expect(stateText()).toBe(verified);

      // The honest log again: consistent with what was verified.
      log.key = pinned;
      expect((await watch()).code).toBe(0);
    },
    SLOW,
  );

  it(
    'pins the key in the state file on the first run; a later run without --public-key uses it',
    async () => {
      resetLog(3);
      const tofuState = join(dir, 'tofu-state.json');
      const first = await run(['watch', '--service-url', url, '--state', tofuState]);
      expect(first.code, first.stderr).toBe(0);
      expect(first.stderr).toMatch(/warning: no --public-key/);
      log.key = newLogKey(); // the service now sends (and signs with) another key
      const later = await run(['watch', '--service-url', url, '--state', tofuState]);
      expect(later.code).toBe(1);
      expect(later.stderr).not.toMatch(/warning/);
      expect(later.stderr).toMatch(/not signed by/);
    },
    SLOW,
  );

  it(
    '--interval keeps following the log and ends on the first fork',
    async () => {
      resetLog(4);
      const loopState = join(dir, 'loop-state.json');
      const child = startCli(
        ['audit', 'watch', '--service-url', url, '--state', loopState, '--public-key', pinned.vkey, '--interval', '1'],
        env(),
      );
      try {
        await child.waitForStderr(/first checkpoint recorded .*tree size 4/);
        log.entries = [...log.entries, entryFor(5, TENANT, artifact(4))];
        await child.waitForStderr(/grew from 4 to 5/);
        log.entries = [...log.entries.slice(0, 4), entryFor(5, TENANT, artifact(55))];
        const end = await child.done;
        expect(end.code).toBe(1);
        expect(end.stderr).toMatch(/fork: two signed checkpoints of tree size 5/);
      } finally {
        if (child.child.exitCode === null) child.child.kill();
      }
    },
    SLOW,
  );

  it(
    'refuses a state file it cannot read instead of starting over',
    async () => {
      resetLog(3);
      const broken = join(dir, 'broken-state.json');
      writeFileSync(broken, '{"format":"something else"}');
      const res = await run(['watch', '--service-url', url, '--state', broken, '--public-key', pinned.vkey]);
      expect(res.code).toBe(2);
      expect(res.stderr).toMatch(/is not a signbridge-log-watch-v1 state file/);
      expect(readFileSync(broken, 'utf8')).toBe('{"format":"something else"}');
    },
    SLOW,
  );
});
