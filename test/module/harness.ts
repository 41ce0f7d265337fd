// Runs the real stack for module tests: `signbridge server` and `signbridge daemon` as child processes (the test
// process loads the PKCS#11 module, whose calls block; the daemon and the service must answer from elsewhere).
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import type { KeySpec } from '../../src/crypto/algorithms.js';
import { CLI, createApiKeyCli, postAction, type ServerProcess, startServerProcess } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';

export interface Stack {
  dir: string;
  server: ServerProcess;
  socketPath: string;
  /** The daemon's certificate folder (`signbridge cert import` writes there). */
  certificateDir: string;
  publicKeys: Map<string, string>;
  keyIds: Map<string, string>;
  operator: string;
  adminOf(tenant: string): string;
  call(action: string, token: string, body: object): Promise<{ status: number; body: Record<string, unknown> }>;
  startDaemon(): Promise<void>;
  stopDaemon(signal?: NodeJS.Signals): Promise<void>;
  close(): Promise<void>;
}

export const tenantFor = (spec: KeySpec) => `m-${spec.toLowerCase().replaceAll('_', '-')}`;

/** Resolves once something accepts connections on the Unix socket `path`. */
export async function waitForSocket(path: string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (existsSync(path)) {
      const ok = await new Promise<boolean>((resolve) => {
        const s = connect(path);
        s.once('connect', () => {
          s.destroy();
          resolve(true);
        });
        s.once('error', () => resolve(false));
      });
      if (ok) return;
    }
    if (Date.now() > deadline) throw new Error(`daemon socket ${path} did not appear`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export async function startStack(
  specs: KeySpec[],
  extraPolicy?: string,
  serverEnv: NodeJS.ProcessEnv = {},
): Promise<Stack> {
  const dir = makeTempDir('sb-module-');
  const dataDir = join(dir, 'data');
  const serverArgs = ['--data-dir', dataDir];
  if (extraPolicy) {
    writeFileSync(join(dir, 'policy.yaml'), extraPolicy);
    writeFileSync(join(dir, 'server.yaml'), `dataDir: ${dataDir}\npolicyFile: ${join(dir, 'policy.yaml')}\n`);
    serverArgs.splice(0, 2, '--config', join(dir, 'server.yaml'));
  }
  const server = await startServerProcess(serverArgs, { SIGNBRIDGE_LOG_LEVEL: 'warn', ...serverEnv });
  const key = (role: string, tenant?: string) => createApiKeyCli(dataDir, role, tenant);
  const operator = key('operator');
  const call = (action: string, token: string, body: object) => postAction(server.url, action, token, body);
  const publicKeys = new Map<string, string>();
  const keyIds = new Map<string, string>();
  const admins = new Map<string, string>();
  const keysDir = join(dir, 'keys');
  mkdirSync(keysDir, { mode: 0o700 });
  const tenantsYaml: string[] = [];
  for (const spec of specs) {
    const tenant = tenantFor(spec);
    const created = await call('create_tenant', operator, { tenant_id: tenant, key_spec: spec });
    if (created.status !== 201) throw new Error(`create_tenant ${tenant}: ${JSON.stringify(created.body)}`);
    const signer = key('signer', tenant);
    admins.set(tenant, key('admin', tenant));
    writeFileSync(join(keysDir, tenant), `${signer}\n`, { mode: 0o600 });
    const pub = await call('get_public_key', signer, { tenant_id: tenant });
    publicKeys.set(tenant, pub.body.public_key_pem as string);
    keyIds.set(tenant, pub.body.key_id as string);
    tenantsYaml.push(`  - id: ${tenant}\n    apiKeyFile: ${join(keysDir, tenant)}`);
  }
  const socketPath = join(makeTempDir('sbm-'), 'run', 'daemon.sock');
  const daemonConfig = join(dir, 'daemon.yaml');
  writeFileSync(
    daemonConfig,
    `socket: ${socketPath}\ncertificateDir: ${join(dir, 'certificates')}\nlogLevel: warn\nservice:\n  url: ${server.url}\ntenants:\n${tenantsYaml.join('\n')}\napprovalWaitSeconds: 1\n`,
  );
  let daemon: ChildProcess | undefined;
  const stack: Stack = {
    dir,
    server,
    socketPath,
    certificateDir: join(dir, 'certificates'),
    publicKeys,
    keyIds,
    operator,
    adminOf: (t) => admins.get(t) as string,
    call,
    async startDaemon() {
      daemon = spawn(process.execPath, [CLI, 'daemon', '--config', daemonConfig], {
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      await waitForSocket(socketPath);
    },
    async stopDaemon(signal: NodeJS.Signals = 'SIGTERM') {
      const d = daemon;
      if (!d || d.exitCode !== null) return;
      await new Promise<void>((resolve) => {
        d.once('exit', () => resolve());
        d.kill(signal);
      });
    },
    async close() {
      await stack.stopDaemon();
      await server.stop();
    },
  };
  await stack.startDaemon();
  return stack;
}
