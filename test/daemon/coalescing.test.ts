// The coalescer (daemon/upstream/coalescing-upstream.ts) against a scripted upstream that keeps the sign_batch
// contract, and RemoteUpstream's sign_batch and connection limit against a scripted HTTP server. The real module,
// daemon and service under concurrency: module-coalescing.test.ts.
import { createHash, randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DaemonConfigError, resolveDaemonConfig } from '../../daemon/config.js';
import { apiKeyFromEnv } from '../../daemon/credentials.js';
import { RequestHandler } from '../../daemon/handler.js';
import { KeyCatalog } from '../../daemon/key-catalog.js';
import { silentLogger } from '../../daemon/logger.js';
import {
  type CoalescingOptions,
  CoalescingUpstream,
  DEFAULT_COALESCING,
} from '../../daemon/upstream/coalescing-upstream.js';
import { RemoteUpstream } from '../../daemon/upstream/remote-upstream.js';
import {
  BatchNeedsApproval,
  BatchUnsupported,
  type CollectInput,
  type PublicKeyInfo,
  type SignBatchInput,
  type SignBatchResult,
  type SignInput,
  type SignResult,
  type Upstream,
  UpstreamError,
} from '../../daemon/upstream/upstream.js';
import { WireStatus } from '../../wire/wire.js';
import { tempDir } from './helpers.js';

/** What the scripted service "signs": a value only this digest gives, so a mix-up between callers shows. */
const sigFor = (digest: Buffer) => createHash('sha256').update('sig').update(digest).digest();

/** The sign_batch contract, scripted: each call is recorded; answers can be held back or changed per test. */
class ScriptedService implements Upstream {
  readonly description = 'scripted';
  readonly singles: SignInput[] = [];
  readonly batches: SignBatchInput[] = [];
  readonly collects: CollectInput[] = [];
  /** Held answers: each call waits until release() when set. */
  hold = false;
  private waiters: (() => void)[] = [];
  batchAnswer: (input: SignBatchInput) => SignBatchResult = (input) => ({
    kind: 'signed',
    keyId: 'k1',
    algorithm: 'ECDSA_SHA_256',
    requestId: `http-${this.batches.length}`,
    results: input.digests.map((d, i) => ({ signature: sigFor(d), logIndex: i })),
  });

  release(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private async gate(): Promise<void> {
    if (this.hold) await new Promise<void>((r) => this.waiters.push(r));
  }

  async getPublicKey(): Promise<PublicKeyInfo> {
    throw new Error('not used');
  }

  async pkcs11Sign(input: SignInput): Promise<SignResult> {
    this.singles.push(input);
    await this.gate();
    return { kind: 'signed', signature: sigFor(input.digest), keyId: 'k1', algorithm: 'ECDSA_SHA_256' };
  }

  async signBatch(input: SignBatchInput): Promise<SignBatchResult> {
    this.batches.push(input);
    await this.gate();
    return this.batchAnswer(input);
  }

  async collect(input: CollectInput): Promise<SignResult> {
    this.collects.push(input);
    throw new UpstreamError(WireStatus.BAD_REQUEST, 'not a request of the scripted service');
  }

  async close(): Promise<void> {}
}

const options = (o: Partial<CoalescingOptions> = {}): CoalescingOptions => ({
  windowMs: 1,
  maxBatch: 100,
  lanes: 2,
  ...o,
});
const signInput = (digest: Buffer, context: SignInput['context'] = {}): SignInput => ({
  tenantId: 't',
  digest,
  keySpec: 'ECC_NIST_P256',
  pss: false,
  context,
});
const digests = (n: number) => Array.from({ length: n }, () => randomBytes(32));

describe('CoalescingUpstream', () => {
  it('sends a lone signature at once as pkcs11_sign, without waiting for a window', async () => {
    const service = new ScriptedService();
    const up = new CoalescingUpstream(service, options({ windowMs: 1 }));
    const d = randomBytes(32);
    const answer = up.pkcs11Sign(signInput(d));
    // Already at the service in the same turn: no timer stood between the call and the request.
    expect(service.singles).toHaveLength(1);
    expect(await answer).toMatchObject({ kind: 'signed', signature: sigFor(d) });
    expect(service.batches).toHaveLength(0);
  });

  it('sends concurrent signatures of one key as batches, each caller getting its own signature', async () => {
    const service = new ScriptedService();
    service.hold = true;
    const up = new CoalescingUpstream(service, options({ lanes: 2 }));
    const ds = digests(50);
    const answers = ds.map((d) => up.pkcs11Sign(signInput(d)));
    // Two lanes go at once; the other 48 wait for the window (1 ms), then go as one batch.
    expect(service.singles).toHaveLength(2);
    await new Promise((r) => setTimeout(r, 20));
    expect(service.batches).toHaveLength(1);
    expect(service.batches[0]?.digests).toEqual(ds.slice(2));
    service.hold = false;
    service.release();
    const results = await Promise.all(answers);
    results.forEach((r, i) => {
      expect(r).toMatchObject({ kind: 'signed', keyId: 'k1', algorithm: 'ECDSA_SHA_256' });
      expect((r as { signature: Buffer }).signature).toEqual(sigFor(ds[i] as Buffer));
    });
    // The batch's items keep their own log index.
    expect(results.slice(2).map((r) => (r as { logIndex?: number }).logIndex)).toEqual(ds.slice(2).map((_, i) => i));
  });

  it('sends what waited as soon as an answer frees a lane, before the window ends', async () => {
    const service = new ScriptedService();
    service.hold = true;
    // A window far longer than the configuration allows (1 ms), so that only the lane's answer can send the rest.
    const up = new CoalescingUpstream(service, options({ lanes: 1, windowMs: 60_000 }));
    const first = up.pkcs11Sign(signInput(randomBytes(32)));
    const rest = digests(5).map((d) => up.pkcs11Sign(signInput(d)));
    expect(service.singles).toHaveLength(1);
    expect(service.batches).toHaveLength(0);
    service.release(); // the lane's answer: the five go now, together
    await first;
    await new Promise((r) => setImmediate(r));
    expect(service.batches).toHaveLength(1);
    expect(service.batches[0]?.digests).toHaveLength(5);
    service.hold = false;
    service.release();
    await Promise.all(rest);
  });

  it('never puts more than maxBatch digests in one batch', async () => {
    const service = new ScriptedService();
    const up = new CoalescingUpstream(service, options({ lanes: 1, maxBatch: 4 }));
    service.hold = true;
    const answers = digests(11).map((d) => up.pkcs11Sign(signInput(d)));
    await new Promise((r) => setTimeout(r, 20));
    service.hold = false;
    service.release();
    await Promise.all(answers);
    expect(service.batches.every((b) => b.digests.length <= 4)).toBe(true);
    expect(service.singles.length + service.batches.reduce((n, b) => n + b.digests.length, 0)).toBe(11);
  });

  it('never mixes tenants, key specs, paddings, digest lengths or policy inputs in one batch', async () => {
    const service = new ScriptedService();
    service.hold = true;
    const up = new CoalescingUpstream(service, options({ lanes: 1 }));
    const variants: SignInput[] = [
      signInput(randomBytes(32)),
      { ...signInput(randomBytes(32)), tenantId: 'u' },
      { ...signInput(randomBytes(32)), keySpec: 'RSA_2048' },
      { ...signInput(randomBytes(32)), keySpec: 'RSA_2048', pss: true },
      signInput(randomBytes(48)),
      signInput(randomBytes(32), { project: 'p' }),
      signInput(randomBytes(32), { project: 'p', environment: 'prod' }),
      signInput(randomBytes(32), { sbom: '{}' }),
    ];
    // Each variant three times: the first takes its group's lane, the other two wait and go together.
    const answers = [0, 1, 2].flatMap(() =>
      variants.map((v) => up.pkcs11Sign({ ...v, digest: randomBytes(v.digest.length) })),
    );
    await new Promise((r) => setTimeout(r, 20));
    expect(service.singles).toHaveLength(variants.length);
    expect(service.batches).toHaveLength(variants.length);
    for (const [i, b] of service.batches.entries()) {
      const v = variants[i] as SignInput;
      expect(b).toMatchObject({ tenantId: v.tenantId, keySpec: v.keySpec, pss: v.pss, context: v.context });
      expect(b.digests.map((d) => d.length)).toEqual([v.digest.length, v.digest.length]);
    }
    service.hold = false;
    service.release();
    await Promise.all(answers);
  });

  it("fails only the caller whose item failed, with that item's status", async () => {
    const service = new ScriptedService();
    service.hold = true;
    const up = new CoalescingUpstream(service, options({ lanes: 1 }));
    const ds = digests(4);
    service.batchAnswer = (input) => ({
      kind: 'signed',
      keyId: 'k1',
      algorithm: 'ECDSA_SHA_256',
      results: input.digests.map((d, i) =>
        i === 1
          ? { error: new UpstreamError(WireStatus.UNAVAILABLE, 'key_store_unavailable: token gone') }
          : { signature: sigFor(d) },
      ),
    });
    const answers = ds.map((d) =>
      up.pkcs11Sign(signInput(d)).then(
        (r) => r,
        (e: unknown) => e,
      ),
    );
    await new Promise((r) => setTimeout(r, 20));
    service.hold = false;
    service.release();
    const out = await Promise.all(answers);
    // ds[0] went alone; ds[1..3] as a batch whose item 1 (ds[2]) failed.
    expect(out[0]).toMatchObject({ kind: 'signed', signature: sigFor(ds[0] as Buffer) });
    expect(out[1]).toMatchObject({ kind: 'signed', signature: sigFor(ds[1] as Buffer) });
    expect(out[2]).toBeInstanceOf(UpstreamError);
    expect(out[2]).toMatchObject({ status: WireStatus.UNAVAILABLE, message: 'key_store_unavailable: token gone' });
    expect(out[3]).toMatchObject({ kind: 'signed', signature: sigFor(ds[3] as Buffer) });
  });

  it('fails every caller of a batch the service refused as a whole, and no other', async () => {
    const service = new ScriptedService();
    service.hold = true;
    const up = new CoalescingUpstream(service, options({ lanes: 1 }));
    service.batchAnswer = () => {
      throw new UpstreamError(WireStatus.POLICY_DENIED, 'policy_denied: no');
    };
    const answers = digests(4).map((d) =>
      up.pkcs11Sign(signInput(d)).then(
        (r) => r,
        (e: unknown) => e,
      ),
    );
    await new Promise((r) => setTimeout(r, 20));
    service.hold = false;
    service.release();
    const out = await Promise.all(answers);
    expect(out[0]).toMatchObject({ kind: 'signed' });
    for (const e of out.slice(1)) expect(e).toMatchObject({ status: WireStatus.POLICY_DENIED });
  });

  it('signs one by one, from then on, when the service has no sign_batch', async () => {
    const service = new ScriptedService();
    service.hold = true;
    const up = new CoalescingUpstream(service, options({ lanes: 1 }));
    service.batchAnswer = () => {
      throw new BatchUnsupported('no sign_batch');
    };
    const ds = digests(4);
    const answers = ds.map((d) => up.pkcs11Sign(signInput(d)));
    await new Promise((r) => setTimeout(r, 20));
    service.hold = false;
    service.release();
    const out = await Promise.all(answers);
    for (const [i, r] of out.entries()) expect(r).toMatchObject({ signature: sigFor(ds[i] as Buffer) });
    expect(service.batches).toHaveLength(1);
    expect(service.singles).toHaveLength(4);
    await Promise.all(digests(3).map((d) => up.pkcs11Sign(signInput(d))));
    expect(service.batches).toHaveLength(1);
    expect(service.singles).toHaveLength(7);
  });

  it('signs a batch the policy would hold one by one (batch_needs_approval), and batches again after', async () => {
    const service = new ScriptedService();
    service.hold = true;
    const up = new CoalescingUpstream(service, options({ lanes: 1 }));
    let held = true;
    const normal = service.batchAnswer;
    service.batchAnswer = (input) => {
      if (held) throw new BatchNeedsApproval('production: needs approval');
      return normal(input);
    };
    const ds = digests(4);
    const answers = ds.map((d) => up.pkcs11Sign(signInput(d)));
    await new Promise((r) => setTimeout(r, 20));
    service.hold = false;
    service.release();
    const out = await Promise.all(answers);
    for (const [i, r] of out.entries()) expect(r).toMatchObject({ signature: sigFor(ds[i] as Buffer) });
    expect(service.singles).toHaveLength(4);
    held = false;
    service.hold = true;
    const more = digests(3).map((d) => up.pkcs11Sign(signInput(d)));
    await new Promise((r) => setTimeout(r, 20));
    service.hold = false;
    service.release();
    await Promise.all(more);
    expect(service.batches.length).toBeGreaterThanOrEqual(2);
  });

  it('hands a held batch to each caller, and collects it whole for each with its own signature', async () => {
    const service = new ScriptedService();
    service.hold = true;
    const up = new CoalescingUpstream(service, options({ lanes: 1 }));
    let approved = false;
    service.batchAnswer = (input) =>
      input.requestId === undefined || !approved
        ? { kind: 'pending', requestId: 'req-1', status: 'pending_approval', message: 'held for approval' }
        : {
            kind: 'signed',
            keyId: 'k1',
            algorithm: 'ECDSA_SHA_256',
            requestId: 'http-x',
            results: input.digests.map((d) => ({ signature: sigFor(d) })),
          };
    const ds = digests(4);
    const answers = ds.map((d) => up.pkcs11Sign(signInput(d, { project: 'p' })));
    await new Promise((r) => setTimeout(r, 20));
    service.hold = false;
    service.release();
    const out = await Promise.all(answers);
    for (const r of out.slice(1)) expect(r).toMatchObject({ kind: 'pending', requestId: 'req-1' });
    const collect = (d: Buffer, tenantId = 't') => up.collect({ tenantId, requestId: 'req-1', digest: d });
    expect(await collect(ds[1] as Buffer)).toMatchObject({ kind: 'pending', requestId: 'req-1' });
    await expect(collect(randomBytes(32))).rejects.toMatchObject({ status: WireStatus.BAD_REQUEST });
    await expect(collect(ds[1] as Buffer, 'u')).rejects.toMatchObject({ status: WireStatus.BAD_REQUEST });
    approved = true;
    // Collected once for the three callers polling together; each gets its own signature under the held request's id.
    const before = service.batches.length;
    const collected = await Promise.all([3, 1, 2].map((i) => collect(ds[i] as Buffer)));
    expect(service.batches.length).toBe(before + 1);
    const last = service.batches.at(-1);
    expect(last).toMatchObject({ requestId: 'req-1', context: { project: 'p' } });
    expect(last?.digests).toEqual(ds.slice(1));
    for (const [n, i] of [3, 1, 2].entries()) {
      expect(collected[n]).toMatchObject({ kind: 'signed', requestId: 'req-1', signature: sigFor(ds[i] as Buffer) });
    }
    // Every item handed out: the batch is forgotten, a later poll goes to the service as any other.
    await expect(collect(ds[1] as Buffer)).rejects.toThrow('not a request of the scripted service');
  });

  it('lets every SIGN of a held batch POLL through the handler with its own digest', async () => {
    const service = new ScriptedService();
    const { publicKey } = await import('node:crypto').then((c) =>
      c.generateKeyPairSync('ec', { namedCurve: 'prime256v1' }),
    );
    const pem = publicKey.export({ type: 'spki', format: 'pem' }).toString();
    service.getPublicKey = async () => ({
      keyId: 'k1',
      keySpec: 'ECC_NIST_P256',
      publicKeyPem: pem,
      signingAlgorithms: ['ECDSA_SHA_256'],
    });
    let approved = false;
    const { ecdsaRawToDer } = await import('../../src/crypto/der.js');
    service.batchAnswer = (input) =>
      input.requestId === undefined || !approved
        ? { kind: 'pending', requestId: 'req-h', status: 'pending_approval', message: 'held' }
        : {
            kind: 'signed',
            keyId: 'k1',
            algorithm: 'ECDSA_SHA_256',
            results: input.digests.map((d) => ({ signature: ecdsaRawToDer(Buffer.concat([d, d])) })),
          };
    service.hold = true;
    const up = new CoalescingUpstream(service, options({ lanes: 1 }));
    const catalog = new KeyCatalog({
      upstream: up,
      tenants: [{ tenantId: 't', label: 't', certificates: {} }],
      ttlMs: 60_000,
      log: silentLogger(),
    });
    const handler = new RequestHandler({
      catalog,
      upstream: up,
      log: silentLogger(),
      sbomMaxBytes: 1024,
      approvalWaitMs: 0,
    });
    const entry = await catalog.current('t');
    const peer = { pid: process.pid, uid: 0 };
    const ds = digests(3).map((d) => {
      d[0] = 1; // a valid P-256 scalar for the scripted r||s
      return d;
    });
    const signs = ds.map((digest) =>
      handler.handle({ type: 'SIGN', tenant: 't', keyId: entry.ckaId, algorithm: 'ECDSA_SHA_256', digest }, peer),
    );
    await new Promise((r) => setTimeout(r, 20));
    service.hold = false;
    service.release();
    const answers = await Promise.all(signs);
    expect(answers.slice(1).map((a) => a.type)).toEqual(['SIGN_PENDING', 'SIGN_PENDING']);
    approved = true;
    for (const i of [2, 1]) {
      const polled = await handler.handle(
        { type: 'POLL', tenant: 't', requestId: 'req-h', digest: ds[i] as Buffer },
        peer,
      );
      expect(polled).toMatchObject({ type: 'SIGN_OK', requestId: 'req-h' });
      expect((polled as { signature: Buffer }).signature).toEqual(Buffer.concat([ds[i] as Buffer, ds[i] as Buffer]));
    }
  });
});

describe('RemoteUpstream: sign_batch and the connection limit, against a scripted HTTP server', () => {
  async function serve(
    handler: (req: IncomingMessage, body: Record<string, unknown>, res: ServerResponse) => void,
    connections?: number,
  ) {
    let sockets = 0;
    const server = createHttpServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => handler(req, JSON.parse(Buffer.concat(chunks).toString('utf8')), res));
    });
    server.on('connection', () => sockets++);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    const { port } = server.address() as { port: number };
    const upstream = new RemoteUpstream({
      url: `http://127.0.0.1:${port}`,
      apiKey: apiKeyFromEnv('sbk_test'),
      timeoutMs: 15_000,
      ...(connections !== undefined && { connections }),
    });
    const close = async () => {
      await upstream.close();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    };
    return { upstream, sockets: () => sockets, close };
  }
  const json = (res: ServerResponse, status: number, body: unknown) => {
    res.statusCode = status;
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(body));
  };
  const batch = (ds: Buffer[], requestId?: string): SignBatchInput => ({
    tenantId: 't',
    keySpec: 'RSA_2048',
    pss: true,
    context: { project: 'p', artifactType: 'deb' },
    digests: ds,
    ...(requestId !== undefined && { requestId }),
  });

  it('sends the hashes with key_spec, pss_padding and the policy inputs, and reads each item', async () => {
    const seen: { path: string | undefined; key: unknown; body: Record<string, unknown> }[] = [];
    const srv = await serve((req, body, res) => {
      seen.push({ path: req.url, key: req.headers['idempotency-key'], body });
      const hashes = body.hashes as string[];
      json(res, 200, {
        tenant_id: 't',
        key_id: 'k9',
        algorithm: 'RSASSA_PSS_SHA_256',
        results: hashes.map((h, i) =>
          i === 1
            ? { error: { code: 'key_store_unavailable', message: 'token gone', retryable: true } }
            : i === 2
              ? { error: { code: 'something_new', message: 'odd', retryable: false } }
              : { signature: Buffer.from(`s-${h}`).toString('base64'), log_index: 40 + i, signature_id: `sig-${i}` },
        ),
      });
    });
    try {
      const ds = digests(3);
      const out = await srv.upstream.signBatch(batch(ds));
      expect(seen[0]?.path).toBe('/v1/sign_batch');
      expect(seen[0]?.key).toMatch(/^[0-9a-f-]{36}$/);
      expect(seen[0]?.body).toEqual({
        action: 'sign_batch',
        tenant_id: 't',
        hashes: ds.map((d) => d.toString('base64')),
        key_spec: 'RSA_2048',
        pss_padding: true,
        project: 'p',
        artifact_type: 'deb',
      });
      expect(out).toMatchObject({ kind: 'signed', keyId: 'k9', algorithm: 'RSASSA_PSS_SHA_256' });
      if (out.kind !== 'signed') throw new Error('not signed');
      expect(out.results[0]).toEqual({ signature: Buffer.from(`s-${ds[0]?.toString('base64')}`), logIndex: 40 });
      expect(out.results[1]).toMatchObject({ error: { status: WireStatus.UNAVAILABLE } });
      expect(out.results[2]).toMatchObject({ error: { status: WireStatus.INTERNAL, message: 'something_new: odd' } });
      // Collecting a held batch: request_id, the same hashes, no Idempotency-Key.
      await srv.upstream.signBatch(batch(ds, 'req-7'));
      expect(seen[1]?.key).toBeUndefined();
      expect(seen[1]?.body).toMatchObject({ request_id: 'req-7', hashes: ds.map((d) => d.toString('base64')) });
    } finally {
      await srv.close();
    }
  });

  it('reads a held batch, a refused batch, a short answer, and a service without sign_batch', async () => {
    let answer: [number, unknown] = [202, { request_id: 'req-1', status: 'pending_approval', message: 'held' }];
    const srv = await serve((_req, _body, res) => json(res, answer[0], answer[1]));
    try {
      const ds = digests(2);
      expect(await srv.upstream.signBatch(batch(ds))).toEqual({
        kind: 'pending',
        requestId: 'req-1',
        status: 'pending_approval',
        message: 'held',
      });
      answer = [403, { error: 'policy_denied', reason: 'no' }];
      await expect(srv.upstream.signBatch(batch(ds))).rejects.toMatchObject({ status: WireStatus.POLICY_DENIED });
      answer = [200, { key_id: 'k', algorithm: 'RSASSA_PSS_SHA_256', results: [{ signature: 'AA==' }] }];
      await expect(srv.upstream.signBatch(batch(ds))).rejects.toMatchObject({ status: WireStatus.INTERNAL });
      answer = [404, { error: 'unknown_action', reason: 'unknown action sign_batch' }];
      await expect(srv.upstream.signBatch(batch(ds))).rejects.toBeInstanceOf(BatchUnsupported);
      answer = [404, { error: 'tenant_not_found', reason: 'no tenant t' }];
      const gone = await srv.upstream.signBatch(batch(ds)).catch((e: unknown) => e);
      expect(gone).not.toBeInstanceOf(BatchUnsupported);
      expect(gone).toMatchObject({ status: WireStatus.KEY_NOT_FOUND });
    } finally {
      await srv.close();
    }
  });

  it.each([
    [3, 3],
    [undefined, 16],
  ])('opens at most service.connections (%s) connections, however many signatures wait', async (connections, most) => {
    let open = 0;
    let peak = 0;
    const srv = await serve((_req, body, res) => {
      open++;
      peak = Math.max(peak, open);
      setTimeout(() => {
        open--;
        json(res, 200, { signature: 'AA==', key_id: 'k', signing_algorithm: 'ECDSA_SHA_256', echo: body.hash });
      }, 20);
    }, connections);
    try {
      const all = digests(40).map((d) => srv.upstream.pkcs11Sign(signInput(d)));
      await Promise.all(all);
      expect(srv.sockets()).toBe(most);
      expect(peak).toBe(most);
    } finally {
      await srv.close();
    }
  });
});

describe('daemon configuration: coalesce and service.connections', () => {
  const write = (yaml: string) => {
    const dir = tempDir('sbd-coalesce-');
    const file = join(dir, 'daemon.yaml');
    writeFileSync(file, `service:\n  url: https://svc.example\ntenants:\n  - id: t\n${yaml}`);
    return file;
  };
  const env = { SIGNBRIDGE_API_KEY: 'sbk_env' };

  it("coalesces by default, with the file's settings, and SIGNBRIDGE_COALESCE=0 turns it off", () => {
    expect(resolveDaemonConfig({ configFile: write(''), env }).coalesce).toEqual(DEFAULT_COALESCING);
    const file = write('coalesce:\n  windowMs: 0.5\n  maxBatch: 50\n  lanes: 4\n');
    expect(resolveDaemonConfig({ configFile: file, env }).coalesce).toEqual({ windowMs: 0.5, maxBatch: 50, lanes: 4 });
    expect(
      resolveDaemonConfig({ configFile: file, env: { ...env, SIGNBRIDGE_COALESCE: '0' } }).coalesce,
    ).toBeUndefined();
    const off = write('coalesce:\n  enabled: false\n');
    expect(resolveDaemonConfig({ configFile: off, env }).coalesce).toBeUndefined();
    expect(resolveDaemonConfig({ configFile: off, env: { ...env, SIGNBRIDGE_COALESCE: '1' } }).coalesce).toEqual(
      DEFAULT_COALESCING,
    );
    expect(() => resolveDaemonConfig({ configFile: off, env: { ...env, SIGNBRIDGE_COALESCE: 'yes' } })).toThrow(
      DaemonConfigError,
    );
    // A wait over 1 ms is refused: a signature never waits longer than that for others.
    expect(() => resolveDaemonConfig({ configFile: write('coalesce:\n  windowMs: 5\n'), env })).toThrow(/windowMs/);
  });

  it('reads service.connections', () => {
    const c = resolveDaemonConfig({ configFile: write(''), env });
    if (c.upstream.type !== 'remote') throw new Error('expected remote');
    expect(c.upstream.connections).toBeUndefined();
    const dir = tempDir('sbd-conn-');
    const withConnections = join(dir, 'daemon.yaml');
    writeFileSync(withConnections, 'service:\n  url: https://svc.example\n  connections: 4\ntenants:\n  - id: t\n');
    const d = resolveDaemonConfig({ configFile: withConnections, env });
    if (d.upstream.type !== 'remote') throw new Error('expected remote');
    expect(d.upstream.connections).toBe(4);
  });
});
