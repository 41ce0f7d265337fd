// Issue 21 part 1, reproduced as a user did: a real `signbridge server --data-dir D` on its embedded SoftHSM token,
// whose token folder is moved away (`mv D/softhsm/tokens/<uuid> D/away`) and back, or made unreadable (`chmod 000`)
// under a service that runs as an unprivileged user. Signing answers 503 while it is away and resumes by itself when
// it is back, without a restart; the outage is audited as its start and its end (with the count refused) instead of
// one sign_failed entry per refused request, and the audit chain still verifies. On SQLite and on PostgreSQL.
import { createHash, createPublicKey, verify } from 'node:crypto';
import { chmodSync, chownSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ActionResult,
  postAction,
  type RunAs,
  runCli,
  type ServerProcess,
  startServerProcess,
} from '../helpers/cli.js';
import { digestOf } from '../helpers/crypto.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';

/** Long enough for the slowest back-off step (10 s) many times over on a loaded 2-core machine. */
const RECOVERY_DEADLINE_MS = 120_000;
/** Each test: its waits, plus starting the service and reading the audit log. */
const TEST_TIMEOUT_MS = 2 * RECOVERY_DEADLINE_MS;

async function until<T>(what: string, probe: () => Promise<T | undefined>, deadlineMs = RECOVERY_DEADLINE_MS) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

interface AuditLine {
  seq: number;
  tenant_id: string | null;
  action: string;
  outcome: string;
  details: Record<string, unknown>;
}

/** One service on a data dir (and a PostgreSQL database when given), driven through the CLI and HTTP. */
class Installation {
  readonly dataDir = makeTempDir('sb-token-away-');
  server!: ServerProcess;

  constructor(
    private readonly database: string | undefined,
    private readonly runAs: RunAs = {},
  ) {
    if (runAs.runAs) chownSync(this.dataDir, runAs.runAs.uid, runAs.runAs.gid);
  }

  private get storeArgs(): string[] {
    return ['--data-dir', this.dataDir, ...(this.database ? ['--database', this.database] : [])];
  }

  admin(...args: string[]): string {
    const res = runCli(['admin', ...args, ...this.storeArgs], { HOME: this.dataDir }, this.runAs);
    if (res.code !== 0) throw new Error(`admin ${args.join(' ')}: ${res.stderr}`);
    return res.stdout;
  }

  async start(extra: string[] = []): Promise<void> {
    // One process: each request worker's key store would see the outage and audit its own (docs/configuration.md).
    const args = [...this.storeArgs, '--workers', '1', ...extra];
    this.server = await startServerProcess(args, { HOME: this.dataDir }, this.runAs);
  }

  /** The SoftHSM token's folder (one token, named by its uuid). */
  tokenFolder(): string {
    const tokens = join(this.dataDir, 'softhsm', 'tokens');
    const [uuid, ...more] = readdirSync(tokens);
    expect(more).toEqual([]);
    return join(tokens, uuid as string);
  }

  audit(): AuditLine[] {
    return this.admin('audit', 'export')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as AuditLine);
  }

  async probe(path: '/readyz' | '/healthz'): Promise<number> {
    return (await fetch(`${this.server.url}${path}`)).status;
  }
}

/** A tenant with a signer key; signs messages of its own and checks each signature against the public key. */
class Tenant {
  private n = 0;
  publicKeyPem = '';
  signer = '';

  constructor(
    private readonly at: Installation,
    readonly id: string,
    readonly keySpec: string,
    readonly algorithm: 'ECDSA_SHA_256' | 'ML_DSA_SHAKE_256',
  ) {}

  async create(operator: string): Promise<void> {
    const created = await postAction(this.at.server.url, 'create_tenant', operator, {
      tenant_id: this.id,
      key_spec: this.keySpec,
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    this.signer = this.at.admin('api-key', 'create', '--role', 'signer', '--tenant', this.id).trim();
    const key = await postAction(this.at.server.url, 'get_public_key', this.signer, { tenant_id: this.id });
    this.publicKeyPem = String(key.body.public_key_pem);
  }

  async sign(): Promise<{ res: ActionResult; message: Buffer }> {
    const message = Buffer.from(`${this.id} artifact ${this.n++} ${process.pid}`);
    const hash = digestOf(this.algorithm, message).toString('base64');
    const res = await postAction(this.at.server.url, 'sign', this.signer, {
      tenant_id: this.id,
      algorithm: this.algorithm,
      hash,
    });
    return { res, message };
  }

  verifies(message: Buffer, signature: unknown): boolean {
    if (this.algorithm !== 'ECDSA_SHA_256') return typeof signature === 'string' && signature.length > 0;
    return verify('sha256', message, createPublicKey(this.publicKeyPem), Buffer.from(String(signature), 'base64'));
  }
}

/** A refusal while the token is away: 503 key_store_unavailable, told to retry. */
function expectRefused(res: ActionResult): void {
  expect(res.status, JSON.stringify(res.body)).toBe(503);
  expect(res.body).toMatchObject({ error: 'key_store_unavailable' });
  expect(res.headers.get('retry-after')).toBe('5');
}

/**
 * The audit log after an outage: a started and an ended entry per outage, the ended ones counting what was refused
 * meanwhile; with the sign_failed entries of `tenants`, every refused request is recorded exactly once.
 */
function expectOutagesAudited(entries: AuditLine[], tenants: string[], refused: number): void {
  const outages = entries.filter((e) => e.action === 'key_store_outage');
  const started = outages.filter((e) => e.outcome === 'started');
  const ended = outages.filter((e) => e.outcome === 'ended');
  expect(started.length).toBeGreaterThanOrEqual(1);
  expect(ended.map((e) => e.details.started_at)).toEqual(started.map((e) => e.details.started_at));
  for (const e of outages) expect(e).toMatchObject({ tenant_id: null, details: { key_store: expect.any(String) } });
  const counted = ended.reduce((n, e) => n + Number(e.details.refused), 0);
  const failed = entries.filter((e) => e.outcome === 'sign_failed' && tenants.includes(String(e.tenant_id)));
  expect(counted + failed.length).toBe(refused);
}

const stores = [
  { store: 'SQLite', enabled: true, database: () => undefined },
  {
    store: 'PostgreSQL',
    enabled: testPostgresUrl() !== undefined,
    database: () => createTestDatabase('token_away'),
  },
];

describe.each(stores)('$store', ({ enabled, database }) => {
  describe.skipIf(!enabled)('the embedded default, token folder moved away and back (the reproduction)', () => {
    let at: Installation;
    let ec: Tenant;
    let pq: Tenant;
    beforeAll(async () => {
      at = new Installation(database());
      const operator = at.admin('api-key', 'create', '--role', 'operator').trim();
      await at.start();
      ec = new Tenant(at, 'acme', 'ECC_NIST_P256', 'ECDSA_SHA_256');
      // ML-DSA lives in the software key store, sealed by the token: it is away with the token and back with it.
      pq = new Tenant(at, 'pq', 'ML_DSA_44', 'ML_DSA_SHAKE_256');
      await ec.create(operator);
      await pq.create(operator);
    });
    afterAll(async () => {
      await at?.server?.stop('SIGKILL');
    });

    it(
      'answers 503 while it is away, /readyz 503 and /healthz 200; signs again by itself once it is back',
      async () => {
        for (const tenant of [ec, pq]) {
          const { res, message } = await tenant.sign();
          expect(res.status, JSON.stringify(res.body)).toBe(200);
          expect(tenant.verifies(message, res.body.signature)).toBe(true);
        }
        const folder = at.tokenFolder();
        const away = join(at.dataDir, 'away');
        renameSync(folder, away); // mv D/softhsm/tokens/<uuid> D/away
        let refused = 0;
        for (let i = 0; i < 3; i++) {
          for (const tenant of [ec, pq]) {
            expectRefused((await tenant.sign()).res);
            refused++;
          }
        }
        expect(await at.probe('/readyz')).toBe(503);
        expect(await at.probe('/healthz')).toBe(200);

        renameSync(away, folder); // mv it back
        for (const tenant of [ec, pq]) {
          const back = await until(`${tenant.id} signs again`, async () => {
            const { res, message } = await tenant.sign();
            if (res.status === 200) return { res, message };
            expectRefused(res);
            refused++;
            return undefined;
          });
          expect(tenant.verifies(back.message, back.res.body.signature)).toBe(true);
        }
        await until('/readyz is 200 again', async () => ((await at.probe('/readyz')) === 200 ? true : undefined));
        expect(await at.probe('/healthz')).toBe(200);
        // Recovered by finalizing and initialising the module again: re-opening sessions alone does not see it.
        expect(at.server.output()).toMatch(/only usable again after C_Finalize \+ C_Initialize/);
        expect(at.server.child.exitCode).toBeNull(); // no restart
        // Each refused request is one warning naming the fault, never an error with a stack trace.
        const refusedLines = at.server
          .output()
          .split('\n')
          .filter((line) => line.includes('"key_store_unavailable"'));
        expect(refusedLines.length).toBeGreaterThanOrEqual(refused);
        for (const line of refusedLines) {
          expect(JSON.parse(line)).toMatchObject({ level: 40, msg: 'request failed' });
          expect(line).not.toContain('"stack"');
        }

        const entries = at.audit();
        expect(entries.filter((e) => e.outcome === 'sign_failed')).toEqual([]);
        expectOutagesAudited(entries, [ec.id, pq.id], refused);
        expect(at.admin('audit', 'verify')).toMatch(/^audit log intact/);
      },
      TEST_TIMEOUT_MS,
    );
  });
});

describe.each(stores)('$store', ({ enabled, database }) => {
  describe.skipIf(!enabled)('under load on the signing threads, token folder moved away and back', () => {
    let at: Installation;
    let tenant: Tenant;
    beforeAll(async () => {
      at = new Installation(database());
      const operator = at.admin('api-key', 'create', '--role', 'operator').trim();
      // Every signature on a signing thread (none inline on the event loop), two threads.
      const config = join(at.dataDir, 'config.yaml');
      writeFileSync(config, 'keyStore:\n  type: softhsm\n  signThreads: 2\n  inlineSignBelowMs: 0\n');
      await at.start(['--config', config]);
      tenant = new Tenant(at, 'load', 'ECC_NIST_P256', 'ECDSA_SHA_256');
      await tenant.create(operator);
    });
    afterAll(async () => {
      await at?.server?.stop('SIGKILL');
    });

    it(
      'every request gets a verified signature or a 503; signed entries equal 200s; each refusal recorded once',
      async () => {
        const signed: { message: Buffer; signature: string }[] = [];
        let refused = 0;
        let phase: 'before' | 'away' | 'back' = 'before';
        const sawBack = new Set<number>();
        const CLIENTS = 6;
        // Bounded: each client stops once it signed after the token came back, or at the deadline.
        const deadline = Date.now() + RECOVERY_DEADLINE_MS;
        const client = async (index: number) => {
          while (!sawBack.has(index) && Date.now() < deadline) {
            const { res, message } = await tenant.sign();
            if (res.status === 200) {
              signed.push({ message, signature: String(res.body.signature) });
              if (phase === 'back') sawBack.add(index);
            } else {
              expectRefused(res);
              refused++;
              await new Promise((resolve) => setTimeout(resolve, 20)); // a client that waits a little before retrying
            }
          }
        };
        const clients = Array.from({ length: CLIENTS }, (_, i) => client(i));
        const folder = at.tokenFolder();
        const away = join(at.dataDir, 'away');
        await until('signatures under load', async () => (signed.length >= 50 ? true : undefined));
        renameSync(folder, away);
        phase = 'away';
        await until('refusals while the token is away', async () => (refused >= 30 ? true : undefined));
        renameSync(away, folder);
        phase = 'back';
        await Promise.all(clients);
        expect(sawBack.size, 'every client signed again after the token came back').toBe(CLIENTS);

        for (const s of signed) expect(tenant.verifies(s.message, s.signature)).toBe(true);
        const entries = at.audit();
        const signedEntries = entries.filter((e) => e.tenant_id === tenant.id && e.outcome === 'signed');
        // Nothing lost, nothing signed twice: one signed entry per signature handed out, for the same hashes.
        expect(signedEntries.length).toBe(signed.length);
        const handedOut = signed.map((s) => createHash('sha256').update(s.message).digest('base64')).sort();
        expect(signedEntries.map((e) => String(e.details.hash)).sort()).toEqual(handedOut);
        expect(new Set(signedEntries.map((e) => e.details.signature_id)).size).toBe(signed.length);
        expectOutagesAudited(entries, [tenant.id], refused);
        expect(at.admin('audit', 'verify')).toMatch(/^audit log intact/);
        expect(await at.probe('/readyz')).toBe(200);
      },
      TEST_TIMEOUT_MS,
    );
  });
});

// As root a folder with mode 000 is still readable; the reporter's second variant needs a service that is not root.
const nobody = { uid: 65534, gid: 65534 };
describe.skipIf(process.getuid?.() !== 0)(
  'an unprivileged service whose token folder is made unreadable (chmod 000)',
  () => {
    let at: Installation;
    let tenant: Tenant;
    beforeAll(async () => {
      at = new Installation(undefined, { runAs: nobody });
      const operator = at.admin('api-key', 'create', '--role', 'operator').trim();
      await at.start();
      tenant = new Tenant(at, 'acme', 'ECC_NIST_P256', 'ECDSA_SHA_256');
      await tenant.create(operator);
    });
    afterAll(async () => {
      await at?.server?.stop('SIGKILL');
    });

    it(
      'answers 503 while the folder is unreadable and signs again by itself after chmod 700',
      async () => {
        expect((await tenant.sign()).res.status).toBe(200);
        const folder = at.tokenFolder();
        chmodSync(folder, 0o000);
        let refused = 0;
        try {
          for (let i = 0; i < 3; i++) {
            expectRefused((await tenant.sign()).res);
            refused++;
          }
          expect(await at.probe('/readyz')).toBe(503);
          expect(await at.probe('/healthz')).toBe(200);
        } finally {
          chmodSync(folder, 0o700);
        }
        const back = await until('signs again', async () => {
          const { res, message } = await tenant.sign();
          if (res.status === 200) return { res, message };
          expectRefused(res);
          refused++;
          return undefined;
        });
        expect(tenant.verifies(back.message, back.res.body.signature)).toBe(true);
        await until('/readyz is 200 again', async () => ((await at.probe('/readyz')) === 200 ? true : undefined));
        const entries = at.audit();
        expectOutagesAudited(entries, [tenant.id], refused);
        expect(at.admin('audit', 'verify')).toMatch(/^audit log intact/);
      },
      TEST_TIMEOUT_MS,
    );
  },
);
