// Event delivery by two `signbridge server` processes on one PostgreSQL database (issue 24), with kill -9 of one
// while it has deliveries in flight and events are pending: every event is delivered, none is answered 200 twice,
// and a tenant's events arrive in the order they were written. What each part stands for:
//
// - Two real service processes (A and B) on one database and one data dir, as postgres-instances.test.ts runs them:
//   two instances behind a load balancer. Each runs its dispatcher (src/events/dispatcher.ts) with a 3 s lease
//   (events.leaseSeconds in the config file) and a 50 ms poll (SIGNBRIDGE_EVENTS_POLL_MS), so a takeover happens
//   within the test; SIGNBRIDGE_WEBHOOK_ALLOW=127.0.0.1 lets them (and the CLI's URL check) send to the receiver.
// - Subscriptions made with the real CLI (`signbridge admin webhook add --database`), as an operator makes them; the
//   secret it prints goes to the receiver, which checks every request with the Standard Webhooks reference library.
// - Two tenants, so two order keys (`tenant:T`): one delivery of each in flight at a time. The receiver holds every
//   request unanswered (a receiver slow at the moment an instance dies). Each instance sends one delivery at a time
//   (events.concurrency: 1), so once one instance holds the first tenant's delivery, the second tenant's is
//   necessarily leased by the other: each instance has a request in flight, told apart by the lease owner in
//   event_deliveries (`<pid>-...`).
// - Meanwhile 28 more rotations through both APIs: events written and pending, not yet sent.
// - kill -9 of A: its requests are answered only after its sockets closed (the receiver counts an answer only when
//   it reached a live socket), like answers lost with a crashed sender. B's request is answered 200.
// - B takes over A's leases once they end and delivers everything: each event answered 200 exactly once, every
//   signature valid, each tenant's key.rotated events in rotation order.
// - A restarted on the same data dir and database comes up and delivers (alongside B, then alone after B stops).
// Nothing waits on the clock: every wait is for a condition, with a generous deadline for reporting a hang.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postAction, type ServerProcess } from '../helpers/cli.js';
import { InstancesOnPostgres } from '../helpers/instances-on-postgres.js';
import { testPostgresUrl } from '../helpers/postgres.js';
import { until, waitFor } from '../helpers/wait.js';
import type { Attempt } from '../helpers/webhook-receiver.js';

const enabled = testPostgresUrl() !== undefined;
const TENANTS = ['evk1', 'evk2'] as const;
/** Rotations per tenant while A's request is held (plus the first one of each, which is the one held). */
const MORE_ROTATIONS = 14;
const ENV = { SIGNBRIDGE_WEBHOOK_ALLOW: '127.0.0.1', SIGNBRIDGE_EVENTS_POLL_MS: '50' };

const instances = new InstancesOnPostgres(ENV);
const { receiver } = instances;
let a: ServerProcess | undefined;
let b: ServerProcess | undefined;
let restarted: ServerProcess | undefined;
/** Each tenant's admin API key (rotate_key needs the tenant's admin role). */
const admins = new Map<string, string>();
/** Each tenant's rotations, in the order they happened: the key ids their key.rotated events carry. */
const rotations = new Map<string, string[]>(TENANTS.map((t) => [t, []]));

const admin = (...args: string[]) => instances.admin(...args);

/** What the instances logged, for a failure's message. */
function logs(): string {
  return [
    ['A', a],
    ['B', b],
    ['A restarted', restarted],
  ]
    .map(([name, s]) => `--- ${name}:\n${(s as ServerProcess | undefined)?.output().slice(-3000) ?? '(not started)'}`)
    .join('\n');
}

async function rotate(instance: ServerProcess, tenant: string): Promise<void> {
  const res = await postAction(instance.url, 'rotate_key', admins.get(tenant) as string, { tenant_id: tenant });
  expect(res.status, `${JSON.stringify(res.body)}\n${logs()}`).toBe(200);
  rotations.get(tenant)?.push(res.body.key_id as string);
}

const dataOf = (attempt: Attempt) => attempt.body.data as Record<string, unknown>;

/** Every rotation so far has its key.rotated answered 200. */
function everyRotationDelivered(): boolean {
  const ok = new Set(receiver.attempts.filter((x) => x.status === 200).map((x) => dataOf(x).key_id));
  return [...rotations.values()].flat().every((keyId) => ok.has(keyId));
}

interface DeliveryRow {
  event_id: string;
  type: string;
  tenant_id: string;
  status: string;
  attempts: number;
  lease_owner: string | null;
}

/** The deliveries the service made for the subscriptions, oldest event first. */
async function deliveries(): Promise<DeliveryRow[]> {
  return instances.query<DeliveryRow>(
    `SELECT e.id AS event_id, e.type, e.tenant_id, d.status, d.attempts, d.lease_owner
       FROM event_deliveries d JOIN event_outbox e ON e.seq = d.event_seq ORDER BY d.event_seq`,
  );
}

/** The process a lease owner names (EventDispatcher.owner is `<pid>-<random>`). */
const ownedBy = (row: DeliveryRow, instance: ServerProcess) => row.lease_owner?.startsWith(`${instance.child.pid}-`);

beforeAll(async () => {
  if (!enabled) return;
  [a, b] = await instances.open(
    'events_kill',
    'events:\n  leaseSeconds: 3\n  pollMs: 50\n  idlePollMaxMs: 500\n  concurrency: 1\n',
    2,
  );
});
afterAll(async () => {
  receiver.release();
  await Promise.all([a?.stop('SIGKILL'), b?.stop(), restarted?.stop()]);
  await instances.close();
});

describe.skipIf(!enabled)(
  enabled
    ? 'event delivery by two instances on PostgreSQL, one killed with deliveries in flight'
    : 'event delivery by two instances on PostgreSQL (skipped: no PostgreSQL cluster for this run; PostgreSQL is not installed)',
  () => {
    it('subscribes a receiver to two tenants with the CLI', async () => {
      if (!a || !b) throw new Error('instances not started');
      const operator = await admin('api-key', 'create', '--role', 'operator');
      expect(operator.code, operator.stderr).toBe(0);
      for (const [i, tenant] of TENANTS.entries()) {
        const created = await postAction((i === 0 ? a : b).url, 'create_tenant', operator.stdout.trim(), {
          tenant_id: tenant,
          key_spec: 'ECC_NIST_P256',
        });
        expect(created.status, JSON.stringify(created.body)).toBe(201);
        const key = await admin('api-key', 'create', '--role', 'admin', '--tenant', tenant);
        expect(key.code, key.stderr).toBe(0);
        admins.set(tenant, key.stdout.trim());
      }
      // What happened before the subscriptions (tenant.created, api_key.created) is fanned out to nobody first, so
      // what the receiver gets is exactly what follows.
      await until('the events so far fanned out', async () => {
        const rows = await instances.query<{ n: number }>(
          'SELECT count(*)::int AS n FROM event_outbox WHERE fanned_out = 0',
        );
        return rows[0]?.n === 0 ? true : undefined;
      });
      for (const tenant of TENANTS) {
        const added = await admin('webhook', 'add', '--tenant', tenant, '--url', receiver.urlFor(tenant));
        expect(added.code, added.stderr).toBe(0);
        const [id, secret] = added.stdout.trim().split('\n');
        expect(id).toMatch(/^wh_[0-9a-f]{16}$/);
        expect(secret).toMatch(/^whsec_/);
        receiver.secrets.set(receiver.pathOf(tenant), secret as string);
      }
    }, 180_000);

    it('delivers every event once after kill -9 of an instance with requests in flight', async () => {
      if (!a || !b) throw new Error('instances not started');
      const [first, second] = TENANTS;
      const [killed, survivor] = [a, b];
      receiver.hold();
      // One delivery in flight per order key: the first tenant's goes to whichever instance passes first, and
      // that instance has no room for another (concurrency 1), so the second tenant's can only be leased by the
      // other instance.
      await rotate(a, first);
      await waitFor(`the receiver to hold ${first}'s first delivery\n${logs()}`, () => receiver.held().length === 1);
      await rotate(b, second);
      await waitFor(`the receiver to hold ${second}'s first delivery\n${logs()}`, () => receiver.held().length === 2);
      const inFlight = (await deliveries()).filter((d) => d.status === 'pending' && d.lease_owner !== null);
      const ofA = inFlight.filter((d) => a && ownedBy(d, a)).map((d) => d.event_id);
      const ofB = inFlight.filter((d) => b && ownedBy(d, b)).map((d) => d.event_id);
      expect([ofA.length, ofB.length], JSON.stringify(inFlight)).toEqual([1, 1]);
      expect(
        receiver
          .held()
          .map((h) => h.attempt.id)
          .sort(),
      ).toEqual([...ofA, ...ofB].sort());
      // More changes through both instances while both requests are held: events written, not yet sent.
      await Promise.all(
        TENANTS.map(async (tenant) => {
          for (let i = 0; i < MORE_ROTATIONS; i++) await rotate(i % 2 === 0 ? killed : survivor, tenant);
        }),
      );
      // kill -9 of A; its request is answered only once its connection is gone, so the answer reaches no one.
      const exited = new Promise((resolve) => killed.child.once('exit', resolve));
      process.kill(killed.child.pid as number, 'SIGKILL');
      await exited;
      await waitFor("A's held request to lose its connection", () =>
        receiver.held().some((h) => h.attempt.id === ofA[0] && h.senderGone),
      );
      receiver.release();
      await waitFor(`every rotation answered 200\n${logs()}`, everyRotationDelivered, 120_000);
      await until('every delivery recorded as delivered', async () => {
        const rows = await deliveries();
        return rows.every((d) => d.status === 'delivered') ? rows : undefined;
      });
      const rows = await deliveries();
      expect(rows).toHaveLength(2 * (MORE_ROTATIONS + 1));
      // A's attempt got no answer; B took the delivery over once A's lease ended, and it was delivered once.
      const aAttempts = receiver.attempts.filter((x) => x.id === ofA[0]);
      expect(aAttempts[0]?.status).toBeUndefined();
      expect(aAttempts.filter((x) => x.status === 200)).toHaveLength(1);
      const takenOver = rows.find((d) => d.event_id === ofA[0]);
      expect(takenOver && ownedBy(takenOver, b), JSON.stringify(takenOver)).toBe(true);
      expect(takenOver?.attempts).toBeGreaterThanOrEqual(2);
      // B's delivery was answered 200: its held request (or a retry, had the hold outlasted B's 10 s time-out).
      expect(receiver.attempts.filter((x) => x.id === ofB[0]).map((x) => x.status)).toContain(200);
      // Every event answered 200 exactly once, signed with its subscription's secret.
      const delivered = receiver.delivered();
      for (const row of rows) expect(delivered.get(row.event_id), row.event_id).toBe(1);
      expect([...delivered].filter(([, n]) => n > 1)).toEqual([]);
      expect(receiver.attempts.filter((x) => !x.signatureValid)).toEqual([]);
      // Per tenant: the key.rotated events arrived in the order of the rotations, each at its tenant's URL.
      for (const tenant of TENANTS) {
        const arrived = receiver.attempts
          .filter((x) => x.status === 200 && dataOf(x).tenant_id === tenant)
          .map((x) => {
            expect(x.path).toBe(receiver.pathOf(tenant));
            expect(x.type).toBe('key.rotated');
            return dataOf(x).key_id;
          });
        expect(arrived, tenant).toEqual(rotations.get(tenant));
      }
      a = undefined;
    }, 240_000);

    it('delivers normally from the killed instance started again, alongside B and then alone', async () => {
      if (!b) throw new Error('instance B not running');
      restarted = await instances.start();
      const [first, second] = TENANTS;
      await rotate(restarted, first);
      await waitFor(`the rotation through the restarted instance\n${logs()}`, everyRotationDelivered);
      // B stops (SIGTERM): what is written now can only be sent by the restarted instance.
      expect(await b.stop()).toBe(0);
      b = undefined;
      await rotate(restarted, second);
      await waitFor(`the rotation with only the restarted instance up\n${logs()}`, everyRotationDelivered);
      const last = rotations.get(second)?.at(-1);
      const attempt = receiver.attempts.find((x) => x.status === 200 && dataOf(x).key_id === last);
      const row = (await deliveries()).find((d) => d.event_id === attempt?.id);
      expect(row && ownedBy(row, restarted), JSON.stringify(row)).toBe(true);
      expect([...receiver.delivered()].filter(([, n]) => n > 1)).toEqual([]);
      expect(receiver.attempts.filter((x) => !x.signatureValid)).toEqual([]);
      for (const tenant of TENANTS) {
        const arrived = receiver.attempts
          .filter((x) => x.status === 200 && dataOf(x).tenant_id === tenant)
          .map((x) => dataOf(x).key_id);
        expect(arrived, tenant).toEqual(rotations.get(tenant));
      }
    }, 120_000);
  },
);
