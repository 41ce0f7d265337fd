// `signbridge status`: is the daemon up, can it reach the service, and which tokens and keys does it expose.
// Speaks the module's own protocol (HELLO + LIST), so it sees exactly what a PKCS#11 client would.
import { createHash } from 'node:crypto';
import type { Command } from 'commander';
import { loginFilesInUse } from '../../daemon/login-files.js';
import { defaultSocketPath } from '../../daemon/socket-path.js';
import { DaemonClient } from '../../wire/client.js';
import type { Response } from '../../wire/messages.js';
import { WireStatus, wireStatusName } from '../../wire/wire.js';
import { type LoginReport, loginStatus } from './login/login-status.js';
import { expiryText } from './login.js';

export interface StatusReport {
  socket: string;
  daemon: 'reachable' | 'unreachable';
  daemonVersion?: string;
  service: 'reachable' | 'unreachable' | 'unknown';
  error?: string;
  /** Who `signbridge login` signed in (absent when the host has no login). */
  login?: LoginReport;
  tokens: Array<{
    label: string;
    tenant: string;
    /** Why this tenant has no keys when it failed on its own (revoked key, timeout, ...); the others still work. */
    error?: string;
    /** Why its key is not in the token although nothing failed (an SM2 key: PKCS#11 has no mechanism for it). */
    note?: string;
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
      ...(t.status === undefined && t.message !== undefined && { note: t.message }),
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
  if (r.login) lines.push(...formatLogin(r.login));
  for (const t of r.tokens) {
    let none = t.note ? `no keys: ${t.note}` : 'no keys';
    if (t.error) none = `no keys, tenant ${t.tenant} failed: ${t.error}`;
    lines.push(`token "${t.label}" (tenant ${t.tenant}): ${t.keys.length === 0 ? none : ''}`.trimEnd());
    for (const k of t.keys) {
      lines.push(
        `  key ${k.label}  ${k.keySpec}  CKA_ID ${k.id}  SPKI sha256 ${k.spkiSha256.slice(0, 16)}…  certificates: ${k.certificates}`,
      );
    }
  }
  return `${lines.join('\n')}\n`;
}

function formatLogin(l: LoginReport): string[] {
  const roles = l.roles.length > 0 ? ` (${l.roles.join(', ')})` : '';
  const lines = [
    `login:   ${l.email ?? 'signed in'}, tenant ${l.tenant}${roles} at ${l.service}; key ${expiryText(l.expiresAt)}`,
  ];
  if (l.problem) lines.push(`         ${l.problem}`);
  else if (l.note) lines.push(`         (${l.note})`);
  return lines;
}

export function registerStatusCommand(program: Command): void {
  program
    .command('status')
    .description(
      'show whether the daemon and the service are reachable, the tokens and keys exposed, and who is signed in',
    )
    .option('--socket <path>', 'daemon socket (env SIGNBRIDGE_SOCKET)')
    .option('--json', 'print the report as JSON')
    .action(async (opts: { socket?: string; json?: boolean }) => {
      const [report, login] = await Promise.all([
        daemonStatus(opts.socket ?? defaultSocketPath()),
        loginStatus(loginFilesInUse()),
      ]);
      if (login) report.login = login;
      process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatStatus(report));
      const tenantFailed = report.tokens.some((t) => t.error);
      const failed = report.daemon !== 'reachable' || report.service !== 'reachable' || report.error || tenantFailed;
      if (failed || login?.problem) process.exitCode = 1;
    });
}
