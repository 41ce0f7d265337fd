// `signbridge status`: is the daemon up, can it reach the service, and which tokens and keys does it expose.
// Speaks the module's own protocol (HELLO + LIST), so it sees exactly what a PKCS#11 client would.
import { createHash } from 'node:crypto';
import type { Command } from 'commander';
import { DaemonClient } from '../../daemon/client.js';
import type { Response } from '../../daemon/protocol/messages.js';
import { WireStatus, wireStatusName } from '../../daemon/protocol/wire.js';
import { defaultSocketPath } from '../../daemon/socket-path.js';

export interface StatusReport {
  socket: string;
  daemon: 'reachable' | 'unreachable';
  daemonVersion?: string;
  service: 'reachable' | 'unreachable' | 'unknown';
  error?: string;
  tokens: Array<{
    label: string;
    tenant: string;
    /** Why this tenant has no keys when it failed on its own (revoked key, timeout, ...); the others still work. */
    error?: string;
    keys: Array<{ label: string; id: string; keySpec: string; spkiSha256: string; certificates: number }>;
  }>;
}

export async function daemonStatus(socket: string): Promise<StatusReport> {
  const report: StatusReport = { socket, daemon: 'unreachable', service: 'unknown', tokens: [] };
  let client: DaemonClient | undefined;
  try {
    const opened = await DaemonClient.open(socket, 'signbridge status');
    client = opened.client;
    if (opened.hello.type !== 'HELLO_OK') {
      report.error = describeError(opened.hello);
      return report;
    }
    report.daemon = 'reachable';
    report.daemonVersion = opened.hello.server;
    const list = await client.request({ type: 'LIST' });
    if (list.type !== 'LIST_OK') {
      report.error = describeError(list);
      // Any other error (bad credentials, forbidden, ...) came from a service that answered.
      const unreachable =
        list.type === 'ERROR' && (list.status === WireStatus.UNAVAILABLE || list.status === WireStatus.TIMEOUT);
      report.service = unreachable ? 'unreachable' : 'reachable';
      return report;
    }
    report.service = 'reachable';
    report.tokens = list.tokens.map((t) => ({
      label: t.label,
      tenant: t.tenant,
      ...(t.status !== undefined && { error: `${wireStatusName(t.status)}: ${t.message ?? ''}`.trimEnd() }),
      keys: t.keys.map((k) => ({
        label: k.label,
        id: k.keyId.toString('hex'),
        keySpec: k.keySpec,
        spkiSha256: createHash('sha256').update(k.publicKey).digest('hex'),
        certificates: (k.certificate ? 1 : 0) + k.chain.length,
      })),
    }));
    return report;
  } catch (err) {
    report.error = (err as Error).message;
    return report;
  } finally {
    client?.close();
  }
}

function describeError(res: Response): string {
  if (res.type !== 'ERROR') return `unexpected answer ${res.type}`;
  return `${wireStatusName(res.status)}: ${res.message}${res.requestId ? ` (request ${res.requestId})` : ''}`;
}

export function formatStatus(r: StatusReport): string {
  const lines = [`daemon:  ${r.daemon} at ${r.socket}${r.daemonVersion ? ` (${r.daemonVersion})` : ''}`];
  lines.push(`service: ${r.service}`);
  if (r.error) lines.push(`error:   ${r.error}`);
  for (const t of r.tokens) {
    const none = t.error ? `no keys, tenant ${t.tenant} failed: ${t.error}` : 'no keys';
    lines.push(`token "${t.label}" (tenant ${t.tenant}): ${t.keys.length === 0 ? none : ''}`.trimEnd());
    for (const k of t.keys) {
      lines.push(
        `  key ${k.label}  ${k.keySpec}  CKA_ID ${k.id}  SPKI sha256 ${k.spkiSha256.slice(0, 16)}…  certificates: ${k.certificates}`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

export function registerStatusCommand(program: Command): void {
  program
    .command('status')
    .description('show whether the daemon and the service are reachable, and the tokens and keys exposed')
    .option('--socket <path>', 'daemon socket (env SIGNBRIDGE_SOCKET)')
    .option('--json', 'print the report as JSON')
    .action(async (opts: { socket?: string; json?: boolean }) => {
      const report = await daemonStatus(opts.socket ?? defaultSocketPath());
      process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatStatus(report));
      const tenantFailed = report.tokens.some((t) => t.error);
      if (report.daemon !== 'reachable' || report.service !== 'reachable' || report.error || tenantFailed) {
        process.exitCode = 1;
      }
    });
}
