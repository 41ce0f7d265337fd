// Assembles a running daemon from its configuration: upstream, key catalog, request handler, socket server.
// The CLI (src/cli/daemon.ts) and the tests both start it through here.
import type { Logger } from 'pino';
import { BusyPoll, DEFAULT_BUSY_POLL_MS } from '../src/busy-poll.js';
import { CertificateStore } from './certificate-store.js';
import type { DaemonConfig } from './config.js';
import { RequestHandler } from './handler.js';
import { KeyCatalog } from './key-catalog.js';
import { LogProofKeeper, prepareLogProofDirs } from './log-proofs.js';
import type { PeerCred } from './peercred.js';
import { loadPeerCred } from './peercred.js';
import { DaemonServer } from './server.js';
import { CoalescingUpstream } from './upstream/coalescing-upstream.js';
import { RemoteUpstream } from './upstream/remote-upstream.js';
import type { Upstream } from './upstream/upstream.js';

export interface RunningDaemon {
  socketPath: string;
  upstream: Upstream;
  catalog: KeyCatalog;
  server: DaemonServer;
  close(): Promise<void>;
}

export interface StartDaemonOptions {
  log: Logger;
  /** An upstream built by the caller (tests, or the in-process mode); default: built from config.upstream. */
  upstream?: Upstream;
  getPeerCred?: (fd: number) => PeerCred;
  allowedUids?: number[];
  helloTimeoutMs?: number;
}

export async function openUpstream(config: DaemonConfig, log?: Logger): Promise<Upstream> {
  return coalescing(await openServiceUpstream(config, log), config, log);
}

/** Wrapped in the coalescer where it is on and the upstream can sign batches. */
function coalescing(upstream: Upstream, config: DaemonConfig, log?: Logger): Upstream {
  if (!config.coalesce || !upstream.signBatch) return upstream;
  return new CoalescingUpstream(upstream as Upstream & Required<Pick<Upstream, 'signBatch'>>, {
    ...config.coalesce,
    ...(log && { log }),
  });
}

async function openServiceUpstream(config: DaemonConfig, log?: Logger): Promise<Upstream> {
  if (config.upstream.type === 'remote') {
    return new RemoteUpstream({
      url: config.upstream.url,
      apiKey: config.upstream.apiKey,
      tenantApiKeys: config.upstream.tenantApiKeys,
      timeoutMs: config.upstream.timeoutMs,
      ...(config.upstream.retryWithinMs !== undefined && { retryWithinMs: config.upstream.retryWithinMs }),
      ...(config.upstream.connections !== undefined && { connections: config.upstream.connections }),
      userAgent: 'signbridge-daemon/0.1.0',
      ...(log && { log }),
    });
  }
  // Loaded only when asked for: it pulls in the key store (graphene-pk11) and SQLite.
  const { InProcessUpstream } = await import('./upstream/in-process-upstream.js');
  return InProcessUpstream.open({
    dataDir: config.upstream.dataDir,
    configFile: config.upstream.configFile,
    // A build host signs one artifact at a time: overlap each signature with its commit (docs/benchmarks.md).
    writerSpinMs: config.busyPollMs ?? DEFAULT_BUSY_POLL_MS,
  });
}

export async function startDaemon(config: DaemonConfig, options: StartDaemonOptions): Promise<RunningDaemon> {
  // Fail closed and early: without the peer-credential addon no connection could be checked.
  const getPeerCred = options.getPeerCred ?? loadPeerCred();
  if (config.upstream.type === 'remote' && isPlaintextRemote(config.upstream.url)) {
    options.log.warn(
      { url: config.upstream.url },
      'the service URL is plain http to another host: API keys travel unencrypted',
    );
  }
  // Before anything is opened: a folder that cannot be made stops the start, with nothing to close.
  prepareLogProofDirs(config.tenants, options.log);
  const upstream = options.upstream ?? (await openUpstream(config, options.log));
  const certificateStore = new CertificateStore(config.certificateDir);
  const catalog = new KeyCatalog({
    upstream,
    tenants: config.tenants,
    ttlMs: config.cacheTtlMs,
    log: options.log,
    certificateStore,
    ...(config.tenantsFromLogin && config.login && { tenantSource: () => config.login!.tenants(config.tenants) }),
  });
  const logProofs = config.tenants.some((t) => t.logProofs !== undefined)
    ? new LogProofKeeper({
        upstream,
        dirFor: (tenantId) => config.tenants.find((t) => t.tenantId === tenantId)?.logProofs,
        log: options.log,
      })
    : undefined;
  const handler = new RequestHandler({
    ...(logProofs && { logProofs }),
    certificateStore,
    catalog,
    upstream,
    log: options.log,
    sbomMaxBytes: config.sbomMaxBytes,
    approvalWaitMs: config.approvalWaitMs,
  });
  const server = new DaemonServer({
    socketPath: config.socketPath,
    handler,
    log: options.log,
    busyPoll: new BusyPoll(config.busyPollMs ?? DEFAULT_BUSY_POLL_MS, {
      busyThreads: () => upstream.threadsBusy?.() ?? 0,
    }),
    getPeerCred,
    ...(options.allowedUids !== undefined && { allowedUids: options.allowedUids }),
    ...(options.helloTimeoutMs !== undefined && { helloTimeoutMs: options.helloTimeoutMs }),
  });
  try {
    await server.start();
  } catch (err) {
    if (!options.upstream) await upstream.close();
    throw err;
  }
  if (config.login) watchLogin(config, options.log);
  options.log.info({ upstream: upstream.description, tenants: config.tenants.map((t) => t.tenantId) }, 'daemon ready');
  return {
    socketPath: server.socketPath,
    upstream,
    catalog,
    server,
    async close() {
      config.login?.stop();
      await server.close();
      // Before the upstream goes: the proofs still awaited get their last ask through it.
      await logProofs?.stop();
      if (!options.upstream) await upstream.close();
    },
  };
}

/** Expiry warnings for a key from `signbridge login`, and a word when the login names another service or tenant. */
function watchLogin(config: DaemonConfig, log: Logger): void {
  const login = config.login;
  if (!login) return;
  const meta = login.metadata();
  if (
    meta &&
    config.upstream.type === 'remote' &&
    meta.service_url.replace(/\/$/, '') !== config.upstream.url.replace(/\/$/, '')
  ) {
    log.warn(
      { login: meta.service_url, service: config.upstream.url },
      'the key from `signbridge login` was issued by another service than the one configured',
    );
  }
  if (meta && !config.tenantsFromLogin && !config.tenants.some((t) => t.tenantId === meta.tenant_id)) {
    log.warn(
      { login: meta.tenant_id, tenants: config.tenants.map((t) => t.tenantId) },
      'the key from `signbridge login` is for a tenant this daemon does not expose',
    );
  }
  login.watch(log);
}

/** http:// to anything but the loopback interface. */
export function isPlaintextRemote(url: string): boolean {
  const u = new URL(url);
  if (u.protocol !== 'http:') return false;
  const host = u.hostname.replace(/^\[|\]$/g, '');
  return !(host === 'localhost' || host === '::1' || /^127\./.test(host));
}
