// `node dist/bench/event-lag.js` (after `npm run build`): whether events keep up with signing at full rate (issue
// 46). `signbridge server` on the embedded default (SQLite + SoftHSM), one subscription to every event kind of the
// tenant, a receiver on 127.0.0.1 that answers 204 at once, and P-256 `sign` under autocannon at concurrency 32 for
// BENCH_SECONDS (default 60). The receiver takes each event's lag from its envelope's `timestamp` (when the
// signature was recorded) to its arrival. Printed: signatures/s, events received per second while signing, the lag's
// p50, p99 and max over the run and its p99 over the last 10 s of it (a backlog that grows shows there), how many
// events were still to come when the load stopped (the backlog), and how long they took to drain. BENCH_WORKERS=N
// runs the server with `--workers N`: the dispatcher then runs in the primary, a process of its own. BENCH_BATCH=N
// signs with `sign_batch` of N digests at 4 connections instead (as bench/batch-signing.ts): one event per item.
// CPU per signature (the service's, and this process's: the load generator and the receiver) while signing, and the
// service's per event while the backlog drains (bench/cpu.ts).
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { createApiKeyCli, postAction, runCli, type ServerProcess, startServerProcess } from '../test/helpers/cli.js';
import { makeTempDir } from '../test/helpers/service.js';
import { until } from '../test/helpers/wait.js';
import { countCpu } from './cpu.js';
import { signLoad } from './sign-load.js';

const seconds = Number(process.env.BENCH_SECONDS ?? 60);
const workers = process.env.BENCH_WORKERS;
const batch = process.env.BENCH_BATCH ? Number(process.env.BENCH_BATCH) : undefined;
const log = (msg: string) => process.stderr.write(`[bench:event-lag] ${msg}\n`);

/** Each signature.signed received: when, and how late. */
const arrivals: Array<{ at: number; lagMs: number }> = [];
const receiver = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    res.writeHead(204).end();
    try {
      const body = JSON.parse(Buffer.concat(chunks).toString()) as { type: string; timestamp: string };
      if (body.type === 'signature.signed')
        arrivals.push({ at: Date.now(), lagMs: Date.now() - Date.parse(body.timestamp) });
    } catch {
      // Not an envelope: not counted.
    }
  });
});
await new Promise<void>((resolve) => receiver.listen(0, '127.0.0.1', resolve));
const receiverUrl = `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`;

const dataDir = makeTempDir('sb-bench-event-lag-');
const env = { SIGNBRIDGE_WEBHOOK_ALLOW: '127.0.0.1' };
// BENCH_PER_SUBSCRIPTION: events.concurrencyPerSubscription (attempts in flight per subscription), else the default.
const perSubscription = process.env.BENCH_PER_SUBSCRIPTION;
const config = join(dataDir, 'config.yaml');
writeFileSync(config, perSubscription ? `events:\n  concurrencyPerSubscription: ${perSubscription}\n` : '{}\n');
const server: ServerProcess = await startServerProcess(
  ['--config', config, '--data-dir', dataDir, ...(workers ? ['--workers', workers] : [])],
  env,
);
const percentile = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((s.length * p) / 100))] ?? Number.NaN;
};
try {
  const operator = createApiKeyCli(dataDir, 'operator');
  const made = await postAction(server.url, 'create_tenant', operator, { tenant_id: 'lag', key_spec: 'ECC_NIST_P256' });
  if (made.status !== 201) throw new Error(`create_tenant: ${JSON.stringify(made.body)}`);
  const signer = createApiKeyCli(dataDir, 'signer', 'lag');
  const added = runCli(
    ['admin', 'webhook', 'add', '--tenant', 'lag', '--url', receiverUrl, '--data-dir', dataDir],
    env,
  );
  if (added.code !== 0) throw new Error(`webhook add: ${added.stderr}`);
  log(
    `signing ${batch ? `sign_batch of ${batch} at c=4` : 'at c=32'} for ${seconds} s, one subscription to every kind, workers: ${workers ?? 'none'}, in flight per subscription: ${perSubscription ?? 'default'}`,
  );
  const start = Date.now();
  const signing = countCpu([server.child.pid as number]);
  const result = batch
    ? await autocannon({
        url: `${server.url}/v1/sign_batch`,
        method: 'POST',
        headers: { authorization: `Bearer ${signer}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          action: 'sign_batch',
          tenant_id: 'lag',
          algorithm: 'ECDSA_SHA_256',
          hashes: Array.from({ length: batch }, () => Buffer.alloc(32, 7).toString('base64')),
        }),
        connections: 4,
        duration: seconds,
      })
    : await signLoad({ url: server.url, signer, tenantId: 'lag', connections: 32, duration: seconds });
  const stopped = Date.now();
  const signed = (result.requests.total - result.non2xx - result.errors) * (batch ?? 1);
  const duringLoad = arrivals.filter((a) => a.at <= stopped);
  const backlog = signed - duringLoad.length;
  // CPU while signing, per signature (the service's, and this process's: autocannon and the receiver).
  const cpuSigning = signing((stopped - start) / 1000 > 0 ? signed : 0, (stopped - start) / 1000);
  const draining = countCpu([server.child.pid as number]);
  await until(`${signed} events received`, () => (arrivals.length >= signed ? true : undefined), 600_000);
  const drainMs = Date.now() - stopped;
  // The service's CPU per event once signing stopped: what delivering one event costs on its own.
  const cpuDraining = draining(Math.max(1, arrivals.length - duringLoad.length), drainMs / 1000);
  const lags = arrivals.map((a) => a.lagMs);
  const last10 = arrivals.filter((a) => a.at > stopped - 10_000 && a.at <= stopped).map((a) => a.lagMs);
  const row = {
    seconds,
    signaturesPerSecond: Math.round(signed / ((stopped - start) / 1000)),
    receivedPerSecondWhileSigning: Math.round(duringLoad.length / ((stopped - start) / 1000)),
    lagP50Ms: percentile(lags, 50),
    lagP99Ms: percentile(lags, 99),
    lagMaxMs: percentile(lags, 100),
    lagP99Last10sMs: percentile(last10, 99),
    backlogAtStop: backlog,
    drainMs,
    errors: result.non2xx + result.errors,
    serviceUsPerSignatureWhileSigning: cpuSigning.serviceUs,
    benchUsPerSignatureWhileSigning: cpuSigning.loadUs,
    serviceUsPerEventDraining: cpuDraining.serviceUs,
  };
  log(JSON.stringify(row));
  process.stdout.write(
    '| s | signatures/s | events received/s while signing | lag p50 | lag p99 | lag max | lag p99, last 10 s | backlog at stop | drained in |\n|---|---|---|---|---|---|---|---|---|\n' +
      `| ${row.seconds} | ${row.signaturesPerSecond} | ${row.receivedPerSecondWhileSigning} | ${row.lagP50Ms} ms | ${row.lagP99Ms} ms | ${row.lagMaxMs} ms | ${row.lagP99Last10sMs} ms | ${row.backlogAtStop} | ${row.drainMs} ms |\n`,
  );
} finally {
  await server.stop();
  receiver.close();
}
