// /metrics of a real service process, on the listener its configuration names (an ephemeral loopback port here),
// scraped over HTTP without an API key after real signatures and a denial.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createApiKeyCli, postAction, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { parseExposition, sample } from '../helpers/metrics.js';
import { makeTempDir } from '../helpers/service.js';

const dataDir = makeTempDir('sb-metrics-');
let server: ServerProcess;
let metricsUrl: string;

beforeAll(async () => {
  const config = join(dataDir, 'signbridge.yaml');
  writeFileSync(config, `dataDir: ${dataDir}\nmetrics:\n  enabled: true\n  listen: 127.0.0.1:0\n`);
  server = await startServerProcess(['--config', config]);
  metricsUrl = /signbridge metrics on (http:\/\/\S+)/.exec(server.output())?.[1] as string;
});
afterAll(async () => {
  await server?.stop();
});

it('serves Prometheus metrics apart from the API, counting signatures by outcome, algorithm and tenant', async () => {
  expect(metricsUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
  expect(new URL(metricsUrl).port).not.toBe(new URL(server.url).port);
  const operator = createApiKeyCli(dataDir, 'operator');
  expect(
    (await postAction(server.url, 'create_tenant', operator, { tenant_id: 'm', key_spec: 'RSA_2048' })).status,
  ).toBe(201);
  const signer = createApiKeyCli(dataDir, 'signer', 'm');
  const hash = createHash('sha256').update('metrics').digest('base64');
  for (let i = 0; i < 3; i++) {
    const res = await postAction(server.url, 'sign', signer, { tenant_id: 'm', algorithm: 'RSASSA_PSS_SHA_256', hash });
    expect(res.status).toBe(200);
  }
  // Not on the API's port.
  expect((await fetch(`${server.url}/metrics`)).status).toBe(404);

  const res = await fetch(metricsUrl);
  expect(res.status).toBe(200);
  const samples = parseExposition(await res.text());
  expect(
    sample(samples, 'signbridge_signatures_total', { outcome: 'signed', algorithm: 'RSASSA_PSS_SHA_256', tenant: 'm' })
      ?.value,
  ).toBe(3);
  expect(sample(samples, 'signbridge_sign_duration_seconds_count', { outcome: 'signed' })?.value).toBe(3);
  expect(
    sample(samples, 'signbridge_http_request_duration_seconds_count', { route: '/v1/sign', status: '200' })?.value,
  ).toBe(3);
  // service_start, create_tenant, three signatures (API keys made offline are audited too).
  expect(sample(samples, 'signbridge_audit_chain_length')?.value).toBeGreaterThanOrEqual(5);
  expect(sample(samples, 'signbridge_pending_approvals')?.value).toBe(0);

  // The transparency log: the integrator takes the entries in within a second or so and checkpoints the first ones.
  let log = samples;
  for (let i = 0; i < 50 && (sample(log, 'signbridge_log_tree_size')?.value ?? 0) < 5; i++) {
    await new Promise((resolve) => setTimeout(resolve, 200));
    log = parseExposition(await (await fetch(metricsUrl)).text());
  }
  expect(sample(log, 'signbridge_log_tree_size')?.value).toBeGreaterThanOrEqual(5);
  expect(sample(log, 'signbridge_log_checkpoint_age_seconds')?.value).toBeGreaterThanOrEqual(0);
  expect(sample(log, 'signbridge_log_integrity_failures_total')?.value).toBe(0);
});
