// `node dist/bench/signed-events.js` (after `npm run bench`'s build): what telling of every signature costs (issue
// 31). `signbridge server` on the embedded default (SQLite + SoftHSM), P-256 `sign` under autocannon at
// concurrency 32, in rounds that alternate the tenant's subscriptions:
// - none: no subscription (the signing path asks its cache and writes no event);
// - other: a subscription to signature.pending only (the same, with a subscription to look at);
// - signed: a subscription to signature.signed, delivered to a receiver on 127.0.0.1 that answers 204: since issue
//   46 the dispatcher reads each signature's `signed` entry after the subscription's cursor and sends its event
//   (before, each signature wrote its event in its group commit, and the dispatcher fanned it out and sent it);
// - paused: the same subscription, but the receiver answers its first delivery 410 Gone, which pauses it: nothing
//   is sent, and since issue 46 nothing is written for the event either (the cursor waits).
// Issue 46's lag under full load (p50/p99, backlog): bench/event-lag.ts.
// Per round: signatures/s while signing, and the service's CPU per signature counted until the receiver has every
// event of the round (so delivery is in the cost). Rounds alternate so that drift on a shared machine spreads over
// every mode; the medians are printed as a Markdown table. BENCH_SECONDS (default 6) per round, BENCH_ROUNDS (3),
// BENCH_MODES (none,other,signed,paused; an older build without the events takes BENCH_MODES=none for the "before").
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../test/helpers/cli.js';
import { makeTempDir } from '../test/helpers/service.js';
import { until } from '../test/helpers/wait.js';
import { countCpu } from './cpu.js';
import { signLoad } from './sign-load.js';

type Mode = 'none' | 'other' | 'signed' | 'paused';
const seconds = Number(process.env.BENCH_SECONDS ?? 6);
const rounds = Number(process.env.BENCH_ROUNDS ?? 3);
const modes = (process.env.BENCH_MODES ?? 'none,other,signed').split(',') as Mode[];
const log = (msg: string) => process.stderr.write(`[bench:events] ${msg}\n`);

let received = 0;
/** Answer the next delivery 410 Gone (the paused mode). */
let gone = false;
const receiver = createServer((req, res) => {
  req.resume();
  req.on('end', () => {
    received++;
    res.writeHead(gone ? 410 : 204).end();
    gone = false;
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;

const dataDir = makeTempDir('sb-bench-events-');
const env = { SIGNBRIDGE_WEBHOOK_ALLOW: '127.0.0.1' };
const server: ServerProcess = await startServerProcess(['--data-dir', dataDir], env);
const admin = (...args: string[]) => {
  const res = runCli(['admin', ...args, '--data-dir', dataDir], env);
  if (res.code !== 0) throw new Error(`admin ${args.join(' ')}: ${res.stderr}`);
  return res.stdout.trim();
};
const results: Record<Mode, { perSecond: number; serviceUs: number }[]> = {
  none: [],
  other: [],
  signed: [],
  paused: [],
};
try {
  const operator = createApiKeyCli(dataDir, 'operator');
  const made = await postAction(server.url, 'create_tenant', operator, { tenant_id: 'bev', key_spec: 'ECC_NIST_P256' });
  if (made.status !== 201) throw new Error(`create_tenant: ${JSON.stringify(made.body)}`);
  const signer = createApiKeyCli(dataDir, 'signer', 'bev');
  const load = (duration: number) => signLoad({ url: server.url, signer, tenantId: 'bev', connections: 32, duration });
  log('warming up, 3 s (unrecorded)');
  await load(3);
  let subscription: string | undefined;
  for (let round = 1; round <= rounds; round++) {
    for (const mode of modes) {
      if (subscription) admin('webhook', 'remove', subscription);
      subscription =
        mode === 'none'
          ? undefined
          : admin(
              'webhook',
              'add',
              '--tenant',
              'bev',
              '--url',
              receiverUrl,
              '--event',
              mode === 'other' ? 'signature.pending' : 'signature.signed',
            ).split('\n')[0];
      gone = mode === 'paused';
      const before = received;
      const cpu = countCpu([server.child.pid as number]);
      const result = await load(seconds);
      const signed = result.requests.total - result.non2xx - result.errors;
      const expected = mode === 'signed' ? signed : 0;
      // Delivery is part of the cost: count the CPU until the receiver has every event of the round.
      await until(`${expected} deliveries`, () => (received - before >= expected ? true : undefined), 300_000);
      const share = cpu(signed, result.duration);
      const perSecond = signed / result.duration;
      results[mode].push({ perSecond, serviceUs: share.serviceUs });
      log(
        `round ${round} ${mode}: ${perSecond.toFixed(0)}/s, service ${share.serviceUs} µs/signature, errors ${result.non2xx + result.errors}`,
      );
    }
  }
} finally {
  await server.stop();
  receiver.close();
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] ?? Number.NaN;
};
const baseline = results.none.length > 0 ? results.none : undefined;
process.stdout.write(
  `| subscriptions of the tenant | signatures/s (median of ${rounds}) | service µs/signature, delivery included |\n|---|---|---|\n`,
);
for (const mode of modes) {
  const perSecond = median(results[mode].map((r) => r.perSecond));
  const us = median(results[mode].map((r) => r.serviceUs));
  const ratio = baseline
    ? ` (${(perSecond / median(baseline.map((r) => r.perSecond))).toFixed(2)}x, ${(us / median(baseline.map((r) => r.serviceUs))).toFixed(2)}x)`
    : '';
  process.stdout.write(`| ${mode} | ${perSecond.toFixed(0)} | ${us}${ratio} |\n`);
}
