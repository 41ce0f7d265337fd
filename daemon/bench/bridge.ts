// What the bridge costs: signatures per second through the daemon's socket (in-process upstream, so no HTTP)
// against the same SigningService called directly, side by side in one run. Run after a build:
//   node dist/daemon/bench/bridge.js [seconds per case, default 3] [concurrent clients, default 8]
// The clients run in the daemon's process (one event loop for both sides), so the socket figure is a lower bound
// for a daemon serving module clients in other processes.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { DaemonClient } from '../../wire/client.js';
import { startDaemon } from '../daemon.js';
import { ckaIdFor } from '../key-id.js';
import { silentLogger } from '../logger.js';
import { InProcessUpstream } from '../upstream/in-process-upstream.js';

const seconds = Number(process.argv[2] ?? 3);
const concurrency = Number(process.argv[3] ?? 8);

async function loop(durationMs: number, workers: number, once: () => Promise<void>): Promise<number> {
  let count = 0;
  const end = Date.now() + durationMs;
  await Promise.all(
    Array.from({ length: workers }, async () => {
      while (Date.now() < end) {
        await once();
        count++;
      }
    }),
  );
  return count / (durationMs / 1000);
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), 'sb-bridge-bench-'));
  const upstream = await InProcessUpstream.open({ dataDir, callerId: 'bench' });
  const cases: Array<{ tenant: string; spec: KeySpec; algorithm: string }> = [
    { tenant: 'bench-rsa', spec: 'RSA_2048', algorithm: 'RSASSA_PKCS1_V1_5_SHA_256' },
    { tenant: 'bench-p256', spec: 'ECC_NIST_P256', algorithm: 'ECDSA_SHA_256' },
  ];
  const keyIds = new Map<string, string>();
  for (const c of cases) {
    const create = upstream.signing.createTenant.bind(upstream.signing) as unknown as (
      t: string,
      s: KeySpec,
      actor: string,
    ) => Promise<{ key: { id: string } }>;
    keyIds.set(c.tenant, (await create(c.tenant, c.spec, 'bench')).key.id);
  }
  const socketPath = join(mkdtempSync('/tmp/sb-bench-'), 'run', 'daemon.sock');
  const daemon = await startDaemon(
    {
      socketPath,
      certificateDir: join(dirname(socketPath), 'certificates'),
      logLevel: 'silent',
      upstream: { type: 'in-process', dataDir },
      tenants: cases.map((c) => ({ tenantId: c.tenant, label: c.tenant, certificates: {} })),
      cacheTtlMs: 60_000,
      approvalWaitMs: 5_000,
      sbomMaxBytes: 1 << 20,
    },
    { log: silentLogger(), upstream },
  );
  const clients = await Promise.all(
    Array.from({ length: concurrency }, async () => (await DaemonClient.open(socketPath, 'bench')).client),
  );
  const digest = Buffer.alloc(32, 7);
  const rows: string[] = [];
  for (const c of cases) {
    const direct = await loop(seconds * 1000, concurrency, async () => {
      await upstream.pkcs11Sign({ tenantId: c.tenant, digest, keySpec: c.spec, pss: false, context: {} });
    });
    let next = 0;
    const keyId = ckaIdFor(keyIds.get(c.tenant) as string);
    const bridged = await loop(seconds * 1000, concurrency, async () => {
      const client = clients[next++ % clients.length] as DaemonClient;
      const res = await client.request({ type: 'SIGN', tenant: c.tenant, keyId, algorithm: c.algorithm, digest });
      if (res.type !== 'SIGN_OK') throw new Error(JSON.stringify(res));
    });
    rows.push(
      `| ${c.spec} | ${direct.toFixed(0)}/s | ${bridged.toFixed(0)}/s | ${((1 - bridged / direct) * 100).toFixed(0)}% |`,
    );
  }
  for (const client of clients) client.close();
  await daemon.close();
  await upstream.close();
  rmSync(dataDir, { recursive: true, force: true });
  process.stdout.write(
    `concurrency ${concurrency}, ${seconds} s per case\n| key | SigningService direct | through the daemon socket | cost |\n|---|---|---|---|\n${rows.join('\n')}\n`,
  );
}

main().catch((err) => {
  process.stderr.write(`${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
