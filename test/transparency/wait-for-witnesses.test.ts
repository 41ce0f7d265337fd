// `Prefer: wait-for-log=witnessed` and `signbridge sign --log-proof --witness-policy`, end to end: the real service
// (SQLite, SoftHSM, the integrator at its defaults, listening on a port) with three witnesses written from the C2SP
// specs (test/helpers/tlog-witness.ts): Ed25519 and ML-DSA-44 cosigners, and one that recorded another history and
// refuses the log. A signing answer waits for a checkpoint both honest witnesses cosigned (the refusing one is not
// waited for), so the proof kept at signing time passes `audit prove --bundle --witness-policy` offline; a witness
// that is away makes the wait end at its bound, and the answer says it is not witnessed.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCliAsync } from '../helpers/cli.js';
import { makeTempDir, type TestService } from '../helpers/service.js';
import type { TestWitness } from '../helpers/tlog-witness.js';
import { waitFor } from '../helpers/wait.js';
import {
  honestAndForkedWitnesses,
  startWitnessedService,
  type WitnessedService,
} from '../helpers/witnessed-service.js';

const TENANT = 'witnessed';
const { ed, pq, forked, all } = honestAndForkedWitnesses();
const dir = makeTempDir('sb-wait-witnessed-');
let svc: TestService;
let url: string;
let vkey: string;
let signer: string;
let warnings: string[];
let stand: WitnessedService;

async function signPreferring(prefer: string, message: string) {
  const res = await svc.app.inject({
    method: 'POST',
    url: '/v1/sign',
    headers: { authorization: `Bearer ${signer}`, prefer },
    payload: {
      action: 'sign',
      tenant_id: TENANT,
      algorithm: 'ECDSA_SHA_256',
      hash: createHash('sha256').update(message).digest('base64'),
    },
  });
  expect(res.statusCode, res.body).toBe(200);
  const proof = res.json().log_proof as string;
  expect(proof, 'the answer carries a log_proof').toBeTypeOf('string');
  return { res, proof, checkpoint: proof.slice(proof.indexOf('\n\n') + 2) };
}

const cosignedBy = (checkpoint: string, w: TestWitness) => checkpoint.includes(`\n\u2014 ${w.name} `);

function policyFile(name: string, quorumLines: string): string {
  const file = join(dir, name);
  writeFileSync(
    file,
    `log ${vkey}\nwitness ed ${ed.vkey}\nwitness pq ${pq.vkey}\nwitness forked ${forked.vkey}\n${quorumLines}\n`,
  );
  return file;
}

beforeAll(async () => {
  stand = await startWitnessedService(TENANT, all, { listen: true, trust: 'at-once' });
  ({ svc, url, vkey, signer, warnings } = stand);
  // The forked witness refuses the log (and so is not waited for) once it has been sent a checkpoint.
  await waitFor('the forked witness to refuse the log', () =>
    warnings.some((w) => w.includes(forked.name) && /another history|another root/.test(w)),
  );
}, 120_000);
afterAll(async () => stand?.close());

describe('Prefer: wait-for-log=witnessed', () => {
  it('answers with a proof against a checkpoint every witness that does not refuse the log cosigned', async () => {
    const { res, checkpoint } = await signPreferring('wait-for-log=witnessed, wait=30', 'witnessed 1');
    expect(res.headers['preference-applied']).toBe('wait-for-log=witnessed');
    expect(res.headers['signbridge-log-witnessed']).toBe('yes');
    expect(cosignedBy(checkpoint, ed)).toBe(true);
    expect(cosignedBy(checkpoint, pq)).toBe(true);
    expect(cosignedBy(checkpoint, forked)).toBe(false);
  });

  it('answers when its wait is over with what the log has, and says it is not witnessed', async () => {
    // Away (503 to everything), not refusing: it is waited for, to the bound the request set.
    pq.failNext = 1_000_000;
    try {
      const { res, checkpoint } = await signPreferring('wait-for-log=witnessed; wait=10', 'witnessed 2');
      expect(res.headers['preference-applied']).toBe('wait-for-log');
      expect(res.headers['signbridge-log-witnessed']).toBe('no');
      expect(cosignedBy(checkpoint, pq)).toBe(false);
    } finally {
      pq.failNext = 0;
    }
  });
});

describe('signbridge sign --log-proof --witness-policy', () => {
  const env = () => ({ SIGNBRIDGE_SERVICE_URL: url, SIGNBRIDGE_API_KEY: signer, HOME: dir });

  it('keeps a proof, written at signing time, that passes audit prove --bundle --witness-policy offline', async () => {
    const file = join(dir, 'release.bin');
    writeFileSync(file, 'a witnessed release\n');
    const honest = policyFile('honest.policy', 'group honest all ed pq\nquorum honest');
    const signed = await runCliAsync(
      ['sign', '--tenant', TENANT, file, '--log-proof', '--witness-policy', honest],
      env(),
    );
    expect(signed.code, signed.stderr).toBe(0);
    expect(signed.stderr).toMatch(/witnessed: cosigned by ed, pq; quorum 2 of \(ed, pq\) met/);
    expect(readFileSync(`${file}.sig.tlog-proof`, 'utf8').startsWith('c2sp.org/tlog-proof@v1\n')).toBe(true);
    const offline = await runCliAsync(
      [
        'audit',
        'prove',
        '--bundle',
        `${file}.sig.tlog-proof`,
        '--witness-policy',
        honest,
        '--tenant',
        TENANT,
        '--signature',
        `${file}.sig`,
      ],
      { ...env(), SIGNBRIDGE_SERVICE_URL: 'http://127.0.0.1:9' },
    );
    expect(offline.code, offline.stderr).toBe(0);
    expect(offline.stderr).toMatch(/quorum 2 of \(ed, pq\) met/);
    expect(offline.stdout).toContain('verified:');
  }, 120_000);

  it('keeps no proof when the quorum is not met, says what it needs, and exits 1 (the signature is written)', async () => {
    const file = join(dir, 'unmet.bin');
    writeFileSync(file, 'a release its policy cannot witness\n');
    const everyone = policyFile('everyone.policy', 'group everyone all ed pq forked\nquorum everyone');
    const signed = await runCliAsync(
      ['sign', '--tenant', TENANT, file, '--log-proof', '--witness-policy', everyone],
      env(),
    );
    expect(signed.code).toBe(1);
    expect(signed.stderr).toMatch(
      /not witnessed as the policy requires \(it needs 3 of \(ed, pq, forked\), cosigned by ed, pq\)/,
    );
    expect(signed.stderr).toMatch(/audit prove --tenant witnessed --signature .*unmet\.bin\.sig --witness-policy/);
    expect(existsSync(`${file}.sig`)).toBe(true);
    expect(existsSync(`${file}.sig.tlog-proof`)).toBe(false);
  }, 120_000);

  it('several files (one sign_batch request): each proof is kept beside its signature and passes audit prove --bundle', async () => {
    const files = ['a', 'b', 'c'].map((name) => {
      const file = join(dir, `batch-${name}.bin`);
      writeFileSync(file, `release part ${name}\n`);
      return file;
    });
    const honest = policyFile('honest-batch.policy', 'group honest all ed pq\nquorum honest');
    const signed = await runCliAsync(
      ['sign', '--tenant', TENANT, ...files, '--log-proof', '--witness-policy', honest],
      env(),
    );
    expect(signed.code, signed.stderr).toBe(0);
    expect(signed.stderr).toMatch(/signed 3 of 3 files \(1 batch request\); 3 log proofs written/);
    expect(signed.stderr.match(/witnessed: cosigned by ed, pq; quorum 2 of \(ed, pq\) met/g)).toHaveLength(3);
    const offline = { ...env(), SIGNBRIDGE_SERVICE_URL: 'http://127.0.0.1:9' };
    for (const file of files) {
      expect(signed.stderr).toContain(`written to ${file}.sig.tlog-proof`);
      const bundle = ['audit', 'prove', '--bundle', `${file}.sig.tlog-proof`, '--signature', `${file}.sig`];
      const witnessed = await runCliAsync([...bundle, '--witness-policy', honest, '--tenant', TENANT], offline);
      expect(witnessed.code, witnessed.stderr).toBe(0);
      expect(witnessed.stderr).toMatch(/quorum 2 of \(ed, pq\) met/);
      expect(witnessed.stdout).toContain('verified:');
      // Without a policy: the log's own signature and the entry, with the pinned key.
      const plain = await runCliAsync([...bundle, '--public-key', vkey], offline);
      expect(plain.code, plain.stderr).toBe(0);
      expect(plain.stdout).toContain('verified:');
    }
  }, 180_000);

  it('several files whose policy the checkpoint cannot meet: every signature written, no proof, exit 1', async () => {
    const files = ['x', 'y'].map((name) => {
      const file = join(dir, `unmet-${name}.bin`);
      writeFileSync(file, `unwitnessable part ${name}\n`);
      return file;
    });
    const everyone = policyFile('everyone-batch.policy', 'group everyone all ed pq forked\nquorum everyone');
    const signed = await runCliAsync(
      ['sign', '--tenant', TENANT, ...files, '--log-proof', '--witness-policy', everyone],
      env(),
    );
    expect(signed.code).toBe(1);
    expect(signed.stderr).toMatch(/signed 2 of 2 files \(1 batch request\); 0 log proofs written/);
    for (const file of files) {
      expect(signed.stderr).toContain(`--signature ${file}.sig --witness-policy ${everyone} --wait 60`);
      expect(existsSync(`${file}.sig`)).toBe(true);
      expect(existsSync(`${file}.sig.tlog-proof`)).toBe(false);
    }
    expect(
      signed.stderr.match(
        /not witnessed as the policy requires \(it needs 3 of \(ed, pq, forked\), cosigned by ed, pq\)/g,
      ),
    ).toHaveLength(2);
  }, 180_000);

  it('refuses a witness policy it cannot read, or one without --log-proof, before signing', async () => {
    const file = join(dir, 'bad.bin');
    writeFileSync(file, 'never signed\n');
    const bad = join(dir, 'bad.policy');
    writeFileSync(bad, 'quorum nobody\n');
    const refused = await runCliAsync(
      ['sign', '--tenant', TENANT, file, '--log-proof', '--witness-policy', bad],
      env(),
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /--witness-policy .*bad\.policy: line 1: the quorum nobody is not a witness or group/,
    );
    const alone = await runCliAsync(['sign', '--tenant', TENANT, file, '--witness-policy', bad], env());
    expect(alone.code).toBe(1);
    expect(alone.stderr).toMatch(/--witness-policy is what --log-proof checks/);
    expect(existsSync(`${file}.sig`)).toBe(false);
    // Several files: the same, before the batch is sent.
    const other = join(dir, 'bad-too.bin');
    writeFileSync(other, 'never signed either\n');
    const several = await runCliAsync(
      ['sign', '--tenant', TENANT, file, other, '--log-proof', '--witness-policy', bad],
      env(),
    );
    expect(several.code).toBe(1);
    expect(several.stderr).toMatch(
      /--witness-policy .*bad\.policy: line 1: the quorum nobody is not a witness or group/,
    );
    const severalAlone = await runCliAsync(['sign', '--tenant', TENANT, file, other, '--witness-policy', bad], env());
    expect(severalAlone.code).toBe(1);
    expect(severalAlone.stderr).toMatch(/--witness-policy is what --log-proof checks/);
    for (const f of [file, other]) expect(existsSync(`${f}.sig`)).toBe(false);
  }, 120_000);
});
