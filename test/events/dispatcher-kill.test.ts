// kill -9 of the dispatcher while it sends an event read from the log (issue 46; log-events.test.ts has the
// in-process stand-in, a store that refuses the cursor's move). What each part stands for:
//
// - A real `signbridge server` (a child process) on the embedded default (SQLite) or on PostgreSQL, its dispatcher
//   polling every 50 ms (SIGNBRIDGE_EVENTS_POLL_MS), with a 2 s lease (events.leaseSeconds) so that the restarted
//   process takes the dead one's cursor over within the test, and one attempt in flight per subscription
//   (events.concurrencyPerSubscription: 1), so that the order the receiver sees the events in is the order they
//   were sent in.
// - A subscription made with the real CLI, its secret given to the receiver, which checks every request with the
//   Standard Webhooks reference library (test/helpers/webhook-receiver.ts).
// - The receiver holds every request unanswered: the first signature.signed is in flight (the receiver saw it),
//   and the dispatcher's cursor cannot have moved past it (it moves once the attempts of a read have ended), while
//   four more signatures wait behind it. Then kill -9: the answer reaches no one.
// - The server started again on the same data dir (and database): it reads from the cursor again and delivers
//   everything, with three signatures made after the restart: every event arrives, none is lost, the one that was
//   in flight comes again under the same webhook-id, and the order is the signing order.
// Nothing waits on the clock: every wait is for a condition.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { postAction, runCliAsync, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { createTestDatabase, testPostgresUrl } from '../helpers/postgres.js';
import { makeTempDir } from '../helpers/service.js';
import { until, waitFor } from '../helpers/wait.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';

const ENV = { SIGNBRIDGE_WEBHOOK_ALLOW: '127.0.0.1', SIGNBRIDGE_EVENTS_POLL_MS: '50' };
const CONFIG = 'events:\n  leaseSeconds: 2\n  concurrencyPerSubscription: 1\n';

const running: ServerProcess[] = [];
const receivers: WebhookReceiver[] = [];
afterAll(async () => {
  await Promise.all(running.map((s) => s.stop('SIGKILL')));
  await Promise.all(receivers.map((r) => r.stop()));
});

const stores = [
  { name: 'SQLite', enabled: true },
  { name: 'PostgreSQL', enabled: testPostgresUrl() !== undefined },
] as const;

describe.each(stores)('kill -9 of the dispatcher with an event read from the log in flight ($name)', (store) => {
  it.skipIf(!store.enabled)(
    'delivers every signature.signed after the restart: none lost, the one in flight again under its id, in order',
    async () => {
      const dataDir = makeTempDir('sb-dispatcher-kill-');
      const config = join(dataDir, 'config.yaml');
      writeFileSync(config, CONFIG);
      const storeArgs = ['--data-dir', dataDir];
      if (store.name === 'PostgreSQL') storeArgs.push('--database', createTestDatabase('events_dispatcher_kill'));
      const start = async () => {
        const server = await startServerProcess(['--config', config, ...storeArgs], ENV);
        running.push(server);
        return server;
      };
      const receiver = new WebhookReceiver();
      receivers.push(receiver);
      await receiver.start();
      const first = await start();
      const logs = () => running.map((s) => s.output().slice(-3000)).join('\n---\n');

      const apiKey = async (role: string, tenant?: string) => {
        const res = await runCliAsync(
          ['admin', 'api-key', 'create', '--role', role, ...(tenant ? ['--tenant', tenant] : []), ...storeArgs],
          ENV,
        );
        expect(res.code, res.stderr).toBe(0);
        return res.stdout.trim();
      };
      const operator = await apiKey('operator');
      const made = await postAction(first.url, 'create_tenant', operator, {
        tenant_id: 'kl',
        key_spec: 'ECC_NIST_P256',
      });
      expect(made.status, JSON.stringify(made.body)).toBe(201);
      const signer = await apiKey('signer', 'kl');
      // The CLI in a process of its own, asynchronously: this process's loop answers the receiver's requests.
      const added = await runCliAsync(
        [
          'admin',
          'webhook',
          'add',
          '--tenant',
          'kl',
          '--url',
          receiver.url,
          '--event',
          'signature.signed',
          ...storeArgs,
        ],
        ENV,
      );
      expect(added.code, added.stderr).toBe(0);
      receiver.secret = added.stdout.trim().split('\n')[1];

      // Each signature's digest, in signing order: its event's data.digest tells them apart.
      const digests: string[] = [];
      const sign = async (server: ServerProcess, i: number) => {
        const hash = Buffer.alloc(32, i).toString('base64');
        const res = await postAction(server.url, 'sign', signer, { tenant_id: 'kl', algorithm: 'ECDSA_SHA_256', hash });
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        digests.push(hash);
      };

      receiver.hold();
      for (let i = 1; i <= 5; i++) await sign(first, i);
      await waitFor(`the first event in flight\n${logs()}`, () => receiver.held().length === 1);
      const inFlight = receiver.held()[0]?.attempt as (typeof receiver.attempts)[number];
      expect(inFlight.body).toMatchObject({ type: 'signature.signed', data: { digest: digests[0] } });

      const exited = new Promise((resolve) => first.child.once('exit', resolve));
      process.kill(first.child.pid as number, 'SIGKILL');
      await exited;
      await waitFor('the receiver saw its sender go', () => receiver.held()[0]?.senderGone === true);
      receiver.release();

      const second = await start();
      for (let i = 6; i <= 8; i++) await sign(second, i);
      await until(`every signature told of\n${logs()}`, () =>
        digests.every((digest) => receiver.attempts.some((a) => a.status === 200 && digestOf(a) === digest))
          ? true
          : undefined,
      );
      await second.stop();

      // Every attempt: the one the kill cut off (no answer reached anyone), then each event in signing order,
      // the one that was in flight under the same webhook-id; each answered 200 once; every signature valid.
      const attempts = receiver.attempts;
      expect(attempts.map(digestOf)).toEqual([digests[0], ...digests]);
      expect(attempts[0]?.status).toBeUndefined();
      expect(attempts[1]?.id).toBe(inFlight.id);
      expect(attempts.slice(1).every((a) => a.status === 200)).toBe(true);
      expect(new Set(attempts.slice(1).map((a) => a.id)).size).toBe(digests.length);
      expect(attempts.every((a) => a.signatureValid && a.type === 'signature.signed')).toBe(true);
    },
    180_000,
  );
});

function digestOf(attempt: { body: Record<string, unknown> }): string | undefined {
  return (attempt.body.data as { digest?: string } | undefined)?.digest;
}
