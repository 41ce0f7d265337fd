// Issue 31: a signature writes its signature.signed event only where a subscription of its tenant wants it, and
// each instance answers "does one?" from memory (the store's exact cache, src/store/access-cache.ts). Here that
// cache is shown right across processes: two `signbridge server` instances (A and B) on one PostgreSQL database
// sign for a tenant without a subscription (so both have cached "nobody wants signature.signed"), then an operator
// adds a subscription with the real CLI, a third process, and from the first signature after the CLI returned,
// every signature on either instance is told of: N signatures, N events, each delivered once to a real receiver
// (checked with the Standard Webhooks reference library) and schema-valid. After `admin webhook remove` neither
// instance writes one again. Every wait is for a condition, with a deadline only for reporting a hang. Issue 46: the
// events of signatures made at once are read from their `signed` entries after the subscription's cursor (none is
// an outbox row), which starts at the log's head when the subscription is made and goes with it when removed.
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventDataProblem } from '../../src/events/event-schemas.js';
import { postAction, type ServerProcess } from '../helpers/cli.js';
import { InstancesOnPostgres } from '../helpers/instances-on-postgres.js';
import { testPostgresUrl } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

const enabled = testPostgresUrl() !== undefined;
const ENV = { SIGNBRIDGE_WEBHOOK_ALLOW: '127.0.0.1', SIGNBRIDGE_EVENTS_POLL_MS: '50' };
/** Signatures per instance in each phase. */
const EACH = 5;

const instances = new InstancesOnPostgres(ENV);
const { receiver } = instances;
let a: ServerProcess | undefined;
let b: ServerProcess | undefined;
let signer: string;

const admin = (...args: string[]) => instances.admin(...args);

beforeAll(async () => {
  if (!enabled) return;
  [a, b] = await instances.open('signed_events', 'events:\n  pollMs: 50\n  idlePollMaxMs: 500\n', 2);
});
afterAll(async () => {
  await Promise.all([a?.stop(), b?.stop()]);
  await instances.close();
});

let n = 0;
/** EACH signatures on each instance at once; returns their digests. */
async function signOnBoth(): Promise<string[]> {
  const instances = [a, b] as ServerProcess[];
  const digests = await Promise.all(
    instances.flatMap((instance) =>
      Array.from({ length: EACH }, async () => {
        const hash = createHash('sha256').update(`artifact ${n++}`).digest('base64');
        const res = await postAction(instance.url, 'sign', signer, {
          tenant_id: 'pse',
          algorithm: 'ECDSA_SHA_256',
          hash,
        });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        return hash;
      }),
    ),
  );
  return digests;
}

async function signedEventsWritten(): Promise<string[]> {
  const rows = await instances.query<{ data: string }>(
    "SELECT data FROM event_outbox WHERE type = 'signature.signed' AND tenant_id = 'pse' ORDER BY seq",
  );
  return rows.map((r) => (JSON.parse(r.data) as { digest: string }).digest);
}

describe.skipIf(!enabled)(
  enabled
    ? 'signature.signed on two instances when a subscription is added and removed by another process'
    : 'signature.signed on two instances (skipped: no PostgreSQL cluster for this run; PostgreSQL is not installed)',
  () => {
    it('tells of every signature made on either instance after the CLI added the subscription, and none after its removal', async () => {
      if (!a || !b) throw new Error('instances not started');
      const operator = await admin('api-key', 'create', '--role', 'operator');
      expect(operator.code, operator.stderr).toBe(0);
      const created = await postAction(a.url, 'create_tenant', operator.stdout.trim(), {
        tenant_id: 'pse',
        key_spec: 'ECC_NIST_P256',
      });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      const key = await admin('api-key', 'create', '--role', 'signer', '--tenant', 'pse');
      expect(key.code, key.stderr).toBe(0);
      signer = key.stdout.trim();

      // Both instances sign with nobody subscribed: each caches that, and writes no event.
      const before = await signOnBoth();
      expect(await signedEventsWritten()).toEqual([]);

      const added = await admin(
        'webhook',
        'add',
        '--tenant',
        'pse',
        '--url',
        receiver.url,
        '--event',
        'signature.signed',
      );
      expect(added.code, added.stderr).toBe(0);
      const [id, secret] = added.stdout.trim().split('\n');
      receiver.secret = secret;
      const told = await signOnBoth();
      expect(await signedEventsWritten()).toEqual([]);
      const ofThese = () =>
        receiver.attempts.filter(
          (x) => x.status === 200 && told.includes((x.body.data as Record<string, unknown>).digest as string),
        );
      await waitFor(`${told.length} signature.signed deliveries`, () => ofThese().length >= told.length, 30_000);
      expect(new Set(ofThese().map((x) => x.id)).size).toBe(told.length);
      for (const attempt of ofThese()) {
        expect(attempt.signatureValid).toBe(true);
        expect(attempt.type).toBe('signature.signed');
        expect(eventDataProblem('signature.signed', attempt.body.data)).toBeUndefined();
      }

      // Nothing signed before the subscription was told of.
      const digestsSent = receiver.attempts.map((x) => (x.body.data as Record<string, unknown>).digest as string);
      expect(digestsSent.filter((d) => before.includes(d))).toEqual([]);

      const removed = await admin('webhook', 'remove', id as string);
      expect(removed.code, removed.stderr).toBe(0);
      await signOnBoth();
      expect(await signedEventsWritten()).toEqual([]);
      // Its cursor went with it: nothing is read from the log for it any more.
      expect(await instances.query(`SELECT * FROM event_log_cursors WHERE subscription_id = '${id}'`)).toEqual([]);
    }, 180_000);
  },
);
