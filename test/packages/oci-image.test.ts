// The OCI image (`npm run package -- oci`, packaging/oci/build-image.sh), built here when missing. The archive's
// layout is read the way a registry client reads it (index.json -> manifest -> config and layers, every blob's
// digest checked), then the image is run for real without a container engine: its layers are unpacked in manifest
// order into a root file system, and runc (Debian's OCI runtime, what buildah and podman run containers with) runs
// the image's entrypoint and command there as the image's user, with the root file system read-only and a host
// folder as the data volume. A tenant is created with the image's own `admin` command (runc exec) and a signature
// made over HTTP is verified here. (Debian 12's crun 1.8.1 refuses hosts with cgroups in hybrid mode, as this
// build box has; runc runs there.)
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash, createPublicKey, verify } from 'node:crypto';
import { chownSync, existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postAction } from '../helpers/cli.js';
import { makeTempDir } from '../helpers/service.js';
import { ensurePackage, mb, OCI_IMAGE, runOk, SYSTEM_PATH, sizeOf, VERSION } from './helpers.js';

const hasTool = (tool: string) =>
  spawnSync('sh', ['-c', `command -v ${tool}`], { env: { PATH: SYSTEM_PATH } }).status === 0;
const isRoot = process.getuid?.() === 0;
// Building needs root, buildah and mmdebstrap; running needs root and runc (all four are Debian packages).
const canBuild = isRoot && hasTool('buildah') && hasTool('mmdebstrap');
const RUNTIME = 'runc';
const canRun = isRoot && hasTool(RUNTIME);
const available = existsSync(OCI_IMAGE) || canBuild;
if (!available) console.log('no OCI image and no root, buildah or mmdebstrap to build one: test skipped');
if (available && !canRun) console.log(`${RUNTIME} is not installed (or not root): the image is checked but not run`);

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}
interface ImageConfig {
  architecture: string;
  os: string;
  config: {
    User?: string;
    Entrypoint?: string[];
    Cmd?: string[];
    Env?: string[];
    ExposedPorts?: Record<string, object>;
    Volumes?: Record<string, object>;
    WorkingDir?: string;
    Labels?: Record<string, string>;
    StopSignal?: string;
  };
  rootfs: { type: string; diff_ids: string[] };
}

let work: string;
let layout: string;
let rootfs: string;
let index: { schemaVersion: number; manifests: Descriptor[] };
let manifest: { schemaVersion: number; mediaType: string; config: Descriptor; layers: Descriptor[] };
let image: ImageConfig;
let uid: number;
let gid: number;

const blobPath = (d: Descriptor) => join(layout, 'blobs', ...d.digest.split(':'));
const sha256File = (file: string) => `sha256:${execFileSync('sha256sum', [file], { encoding: 'utf8' }).split(' ')[0]}`;
const readJsonBlob = <T>(d: Descriptor): T => JSON.parse(readFileSync(blobPath(d), 'utf8')) as T;

/**
 * A layer applied the way runtimes do: its whiteouts first (`.wh.NAME` deletes NAME, `.wh..wh..opq` empties the
 * folder), then its files with their owners as numbers (the image's users are not this machine's).
 */
function applyLayer(blob: string, into: string): void {
  const entries = execFileSync('tar', ['-tf', blob], { encoding: 'utf8', maxBuffer: 256 * 1024 * 1024 }).split('\n');
  for (const entry of entries) {
    const name = entry.replace(/^\.\//, '').replace(/\/$/, '');
    const base = name.split('/').pop() ?? '';
    if (base === '.wh..wh..opq') {
      const dir = join(into, dirname(name));
      if (existsSync(dir)) for (const f of readdirSync(dir)) rmSync(join(dir, f), { recursive: true, force: true });
    } else if (base.startsWith('.wh.')) {
      rmSync(join(into, dirname(name), base.slice('.wh.'.length)), { recursive: true, force: true });
    }
  }
  execFileSync('tar', ['-xf', blob, '-C', into, '--numeric-owner', '--exclude=.wh.*']);
}

beforeAll(() => {
  if (!available) return;
  const archive = ensurePackage('oci');
  work = makeTempDir('sb-oci-');
  layout = join(work, 'layout');
  rootfs = join(work, 'bundle', 'rootfs');
  execFileSync('mkdir', ['-p', layout, rootfs]);
  execFileSync('tar', ['-xf', archive, '-C', layout]);
  index = JSON.parse(readFileSync(join(layout, 'index.json'), 'utf8'));
  manifest = readJsonBlob(index.manifests[0] as Descriptor);
  image = readJsonBlob(manifest.config);
  [uid, gid] = (image.config.User ?? '0').split(':').map(Number) as [number, number];
  for (const layer of manifest.layers) applyLayer(blobPath(layer), rootfs);
  console.log(`signbridge-service OCI archive: ${mb(sizeOf(archive))}, root file system ${mb(sizeOf(rootfs))}`);
}, 1_800_000);

afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe.skipIf(!available)('the OCI archive', () => {
  it('is an OCI layout whose index names one manifest, with the version as its reference', () => {
    expect(JSON.parse(readFileSync(join(layout, 'oci-layout'), 'utf8'))).toEqual({ imageLayoutVersion: '1.0.0' });
    expect(index.schemaVersion).toBe(2);
    expect(index.manifests).toHaveLength(1);
    const [m] = index.manifests as [Descriptor];
    expect(m.mediaType).toBe('application/vnd.oci.image.manifest.v1+json');
    expect(m.annotations?.['org.opencontainers.image.ref.name']).toBe(`signbridge-service:${VERSION}`);
    expect(manifest.schemaVersion).toBe(2);
    expect(manifest.config.mediaType).toBe('application/vnd.oci.image.config.v1+json');
    expect(manifest.layers.length).toBeGreaterThan(0);
  });

  it('holds every blob it names, with the digest and size named', () => {
    for (const d of [index.manifests[0] as Descriptor, manifest.config, ...manifest.layers]) {
      expect(sha256File(blobPath(d)), d.digest).toBe(d.digest);
      expect(statSync(blobPath(d)).size, d.digest).toBe(d.size);
    }
  });

  it("has gzip layers whose uncompressed digests are the config's diff_ids", () => {
    expect(image.rootfs.type).toBe('layers');
    expect(image.rootfs.diff_ids).toHaveLength(manifest.layers.length);
    manifest.layers.forEach((layer, i) => {
      expect(layer.mediaType).toBe('application/vnd.oci.image.layer.v1.tar+gzip');
      const diffId = execFileSync('sh', ['-c', 'gzip -dc "$1" | sha256sum', 'sh', blobPath(layer)], {
        encoding: 'utf8',
      }).split(' ')[0];
      expect(`sha256:${diffId}`).toBe(image.rootfs.diff_ids[i]);
    });
  });

  it('configures the launcher, the server command, a non-root user, the port, the volume and the labels', () => {
    expect(image.os).toBe('linux');
    expect(image.architecture).toBe('amd64');
    const c = image.config;
    expect(c.Entrypoint).toEqual(['/opt/signbridge/bin/signbridge']);
    expect(c.Cmd).toEqual(['server', '--data-dir', '/var/lib/signbridge']);
    expect(c.User).toMatch(/^\d+:\d+$/); // numeric: a runtime's runAsNonRoot check needs no passwd lookup
    expect(uid).not.toBe(0);
    expect(gid).not.toBe(0);
    expect(c.Env).toContain('SIGNBRIDGE_LISTEN=0.0.0.0:8080');
    // The primary's young generation capped as the workers' is (docs/deployment.md "Memory"); the server run below
    // starts under it.
    expect(c.Env).toContain('NODE_OPTIONS=--max-semi-space-size=8');
    expect(Object.keys(c.ExposedPorts ?? {})).toEqual(['8080/tcp']);
    expect(Object.keys(c.Volumes ?? {})).toEqual(['/var/lib/signbridge']);
    expect(c.WorkingDir).toBe('/var/lib/signbridge');
    expect(c.StopSignal).toBe('SIGTERM');
    const labels = c.Labels ?? {};
    expect(labels['org.opencontainers.image.title']).toBe('signbridge-service');
    expect(labels['org.opencontainers.image.version']).toBe(VERSION);
    expect(labels['org.opencontainers.image.licenses']).toBe('Apache-2.0');
    expect(labels['org.opencontainers.image.revision']).toMatch(/^[0-9a-f]{40}$/);
    expect(labels['org.opencontainers.image.created']).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  });
});

describe.skipIf(!available)('its root file system', () => {
  const at = (p: string) => join(rootfs, p);

  it('is Debian 12 with the service in /opt/signbridge and the user signbridge owning the volume', () => {
    expect(readFileSync(at('etc/debian_version'), 'utf8')).toMatch(/^12\./);
    expect(statSync(at('opt/signbridge/bin/signbridge')).mode & 0o111).toBe(0o111);
    expect(existsSync(at('opt/signbridge/node/bin/node'))).toBe(true);
    expect(existsSync(at('opt/signbridge/app/node_modules/better-sqlite3/package.json'))).toBe(true);
    const passwd = readFileSync(at('etc/passwd'), 'utf8');
    expect(passwd).toMatch(new RegExp(`^signbridge:x:${uid}:${gid}:[^:]*:/var/lib/signbridge:/usr/sbin/nologin$`, 'm'));
    const data = statSync(at('var/lib/signbridge'));
    expect([data.uid, data.gid, data.mode & 0o777]).toEqual([uid, gid, 0o700]);
  });

  it('has what the service loads (SoftHSM, CA certificates, libstdc++) and nothing of the test stack', () => {
    expect(existsSync(at('usr/lib/softhsm/libsofthsm2.so'))).toBe(true);
    expect(existsSync(at('etc/ssl/certs/ca-certificates.crt'))).toBe(true);
    expect(existsSync(at('usr/lib/x86_64-linux-gnu/libstdc++.so.6'))).toBe(true);
    const installed = [...readFileSync(at('var/lib/dpkg/status'), 'utf8').matchAll(/^Package: (\S+)$/gm)].map(
      (m) => m[1] as string,
    );
    expect(installed).toEqual(expect.arrayContaining(['softhsm2', 'ca-certificates', 'libstdc++6']));
    // No compiler, JDK, browser, database, system Node or Python; no full Perl (usrmerge would pull it in).
    // gcc-12-base (libgcc's copyright) and perl-base (essential) are not those.
    const forbidden =
      /^(gcc(-\d+)?|g\+\+(-\d+)?|cpp(-\d+)?|clang(-\d+)?|make|cmake|openjdk-.*|default-j.*|chromium.*|firefox.*|postgresql.*|pgbouncer|nodejs|npm|python3(\.\d+)?|perl|usrmerge)$/;
    expect(installed.filter((p) => forbidden.test(p))).toEqual([]);
    for (const dev of ['vitest', 'typescript', 'playwright-core', 'esbuild', '@biomejs']) {
      expect(existsSync(at(`opt/signbridge/app/node_modules/${dev}`)), dev).toBe(false);
    }
  });

  it('keeps no apt lists, downloaded packages or logs of the build', () => {
    expect(readdirSync(at('var/lib/apt/lists')).filter((f) => f !== 'partial' && f !== 'lock')).toEqual([]);
    // debconf's database lives in /var/cache/debconf: it is the packages' configuration, not a cache of downloads.
    const prune = ['-path', at('var/cache/debconf'), '-prune', '-o', '-type', 'f', '-print'];
    expect(execFileSync('find', [at('var/cache'), at('var/log'), ...prune], { encoding: 'utf8' })).toBe('');
  });
});

describe.skipIf(!available || !canRun)(`the image run by ${RUNTIME}`, () => {
  const id = `signbridge-oci-test-${process.pid}`;
  let bundle: string;
  let dataDir: string;
  let container: ChildProcess | undefined;
  let exited: Promise<number | null>;
  let output = '';
  let url = '';

  /** The image's own CLI inside the running container, as `docker exec` runs it. */
  const exec = (...args: string[]) =>
    runOk(RUNTIME, ['exec', '--user', `${uid}:${gid}`, id, ...(image.config.Entrypoint ?? []), ...args], {
      PATH: SYSTEM_PATH,
    }).stdout.trim();

  beforeAll(async () => {
    bundle = dirname(rootfs);
    dataDir = makeTempDir('sb-oci-volume-');
    // A fresh named volume starts with the ownership of the image's folder; a host folder must be given it.
    chownSync(dataDir, uid, gid);
    runOk(RUNTIME, ['spec'], { PATH: SYSTEM_PATH }, bundle);
    const spec = JSON.parse(readFileSync(join(bundle, 'config.json'), 'utf8'));
    const c = image.config;
    spec.process.terminal = false;
    spec.process.user = { uid, gid };
    spec.process.cwd = c.WorkingDir;
    spec.process.args = [...(c.Entrypoint ?? []), ...(c.Cmd ?? [])];
    // The image's environment, listening on all interfaces as it says but on a free port of the host's network.
    spec.process.env = (c.Env ?? []).map((e) =>
      e.startsWith('SIGNBRIDGE_LISTEN=') ? 'SIGNBRIDGE_LISTEN=0.0.0.0:0' : e,
    );
    spec.root = { path: 'rootfs', readonly: true };
    spec.hostname = 'signbridge';
    spec.mounts.push(
      { destination: '/var/lib/signbridge', type: 'bind', source: dataDir, options: ['rbind', 'rw'] },
      { destination: '/tmp', type: 'tmpfs', source: 'tmpfs', options: ['nosuid', 'nodev', 'mode=1777'] },
    );
    spec.linux.namespaces = spec.linux.namespaces.filter((n: { type: string }) => n.type !== 'network');
    writeFileSync(join(bundle, 'config.json'), JSON.stringify(spec, null, 2));

    container = spawn(RUNTIME, ['run', '--bundle', bundle, id], { env: { PATH: SYSTEM_PATH } });
    exited = new Promise((resolve) => container?.once('exit', (code) => resolve(code)));
    url = await new Promise<string>((resolve, reject) => {
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        const m = /signbridge server listening on http:\/\/[^:]+:(\d+)/.exec(output);
        if (m) resolve(`http://127.0.0.1:${m[1]}`);
      };
      container?.stdout?.on('data', onData);
      container?.stderr?.on('data', onData);
      exited.then((code) => reject(new Error(`the container exited with ${code}:\n${output}`)));
    });
  }, 300_000);

  afterAll(async () => {
    if (container && container.exitCode === null && container.signalCode === null) {
      spawnSync(RUNTIME, ['kill', id, 'KILL'], { env: { PATH: SYSTEM_PATH } });
      await exited;
    }
    spawnSync(RUNTIME, ['delete', '--force', id], { env: { PATH: SYSTEM_PATH } });
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it("runs the launcher's Node as PID 1 of the container, as the image's user", () => {
    const state = JSON.parse(runOk(RUNTIME, ['state', id], { PATH: SYSTEM_PATH }).stdout) as { pid: number };
    const status = readFileSync(`/proc/${state.pid}/status`, 'utf8');
    expect(status).toMatch(new RegExp(`^Uid:\\t${uid}\\t${uid}\\t${uid}\\t${uid}$`, 'm'));
    expect(status).toMatch(/^NSpid:\t\d+\t1$/m);
    expect(readFileSync(`/proc/${state.pid}/cmdline`, 'utf8').split('\0').slice(0, 2)).toEqual([
      '/opt/signbridge/bin/../node/bin/node',
      '/opt/signbridge/bin/../app/bin/signbridge.js',
    ]);
  });

  it('creates a tenant and signs over HTTP; the signature verifies with the tenant public key', async () => {
    const operator = exec('admin', 'api-key', 'create', '--data-dir', '/var/lib/signbridge', '--role', 'operator');
    const created = await postAction(url, 'create_tenant', operator, { tenant_id: 'oci', key_spec: 'ECC_NIST_P256' });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const signer = exec(
      'admin',
      'api-key',
      'create',
      '--data-dir',
      '/var/lib/signbridge',
      '--role',
      'signer',
      '--tenant',
      'oci',
    );
    const message = Buffer.from('signed by the service from its OCI image\n');
    const hash = createHash('sha256').update(message).digest('base64');
    const signed = await postAction(url, 'sign', signer, { tenant_id: 'oci', algorithm: 'ECDSA_SHA_256', hash });
    expect(signed.status, JSON.stringify(signed.body)).toBe(200);
    const pub = await postAction(url, 'get_public_key', signer, { tenant_id: 'oci' });
    const key = createPublicKey(pub.body.public_key_pem as string);
    const signature = Buffer.from(signed.body.signature as string, 'base64');
    expect(verify('sha256', message, key, signature)).toBe(true);
    expect(verify('sha256', Buffer.from('another message'), key, signature)).toBe(false);
    exec('admin', 'audit', 'verify', '--data-dir', '/var/lib/signbridge');
    // The keys and the database are in the volume, owned by the image's user.
    for (const f of readdirSync(dataDir)) expect(statSync(join(dataDir, f)).uid, f).toBe(uid);
  });

  it('stops on the stop signal (PID 1 handles SIGTERM) with exit code 0', async () => {
    runOk(RUNTIME, ['kill', id, image.config.StopSignal ?? 'SIGTERM'], { PATH: SYSTEM_PATH });
    expect(await exited, output).toBe(0);
  });
});
