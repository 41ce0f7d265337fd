import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/config.js';
import { ConfigError } from '../../src/config-error.js';
import { parseListen } from '../../src/net/listen-address.js';
import { makeTempDir } from '../helpers/service.js';

describe('service configuration', () => {
  it('has a transparency log with defaults; log.* is checked', () => {
    const dir = makeTempDir();
    const file = (yaml: string) => {
      const path = join(dir, `l${Math.random()}.yaml`);
      writeFileSync(path, `dataDir: ${dir}\n${yaml}`);
      return path;
    };
    expect(resolveConfig({ dataDir: dir, env: {} }).log).toEqual({
      checkpointEveryEntries: 1000,
      checkpointEverySeconds: 1,
      public: false,
      intervalMs: 250,
    });
    expect(
      resolveConfig({
        configFile: file(
          'log: {checkpointEveryEntries: 5, checkpointEverySeconds: 60, public: true, origin: a.example/log, integrateEveryMs: 0}\n',
        ),
        env: {},
      }).log,
    ).toEqual({
      checkpointEveryEntries: 5,
      checkpointEverySeconds: 60,
      public: true,
      origin: 'a.example/log',
      intervalMs: 0,
    });
    expect(() => resolveConfig({ configFile: file('log: {origin: "a b"}\n'), env: {} })).toThrow(/log.origin/);
    expect(() => resolveConfig({ configFile: file('log: {origin: "a+b"}\n'), env: {} })).toThrow(/log.origin/);
    expect(() => resolveConfig({ configFile: file('log: {checkpointEveryEntries: 0}\n'), env: {} })).toThrow(/log/);
    expect(() => resolveConfig({ configFile: file('log: {everySeconds: 5}\n'), env: {} })).toThrow(/log/);
  });

  it('runs on the embedded default with only a data dir', () => {
    const config = resolveConfig({ dataDir: '/tmp/sb-x', env: {} });
    expect(config).toMatchObject({
      dataDir: '/tmp/sb-x',
      host: '127.0.0.1',
      port: 8080,
      store: { type: 'sqlite', path: '/tmp/sb-x/signbridge.db' },
      keyStore: { type: 'softhsm' },
      trial: { enabled: true, max: 10, windowMs: 3_600_000 },
    });
  });

  it('takes flags over environment over the file', () => {
    const dir = makeTempDir();
    const file = join(dir, 'c.yaml');
    writeFileSync(file, 'dataDir: /from/file\nlisten: 0.0.0.0:1111\n');
    expect(resolveConfig({ configFile: file, env: {} })).toMatchObject({ dataDir: '/from/file', port: 1111 });
    expect(resolveConfig({ configFile: file, env: { SIGNBRIDGE_LISTEN: '127.0.0.1:2222' } }).port).toBe(2222);
    expect(
      resolveConfig({ configFile: file, listen: '[::1]:3333', env: { SIGNBRIDGE_LISTEN: '127.0.0.1:2222' } }),
    ).toMatchObject({
      host: '::1',
      port: 3333,
    });
  });

  it('serves /metrics only when asked to, on loopback port 9464 unless told otherwise; the environment wins', () => {
    const dir = makeTempDir();
    const file = (yaml: string) => {
      const path = join(dir, `m${Math.random()}.yaml`);
      writeFileSync(path, `dataDir: ${dir}\n${yaml}`);
      return path;
    };
    expect(resolveConfig({ dataDir: dir, env: {} }).metrics).toBeUndefined();
    expect(resolveConfig({ configFile: file('metrics: {enabled: true}\n'), env: {} }).metrics).toEqual({
      host: '127.0.0.1',
      port: 9464,
    });
    expect(resolveConfig({ configFile: file('metrics: {listen: "0.0.0.0:9100"}\n'), env: {} }).metrics).toEqual({
      host: '0.0.0.0',
      port: 9100,
    });
    const disabled = file('metrics: {enabled: false, listen: "0.0.0.0:9100"}\n');
    expect(resolveConfig({ configFile: disabled, env: {} }).metrics).toBeUndefined();
    expect(resolveConfig({ configFile: disabled, env: { SIGNBRIDGE_METRICS_LISTEN: '[::1]:0' } }).metrics).toEqual({
      host: '::1',
      port: 0,
    });
    const on = file('metrics: {enabled: true}\n');
    expect(resolveConfig({ configFile: on, env: { SIGNBRIDGE_METRICS_LISTEN: 'off' } }).metrics).toBeUndefined();
    expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_METRICS_LISTEN: 'nine' } })).toThrow(ConfigError);
    expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_METRICS_LISTEN: 'nine' } })).toThrow(
      /SIGNBRIDGE_METRICS_LISTEN must be HOST:PORT/,
    );
    expect(() => resolveConfig({ configFile: file('metrics: {port: 1}\n'), env: {} })).toThrow(/metrics/);
  });

  it('configures another PKCS#11 HSM with a PIN file', () => {
    const dir = makeTempDir();
    writeFileSync(join(dir, 'pin'), '123456\n');
    const file = join(dir, 'c.yaml');
    writeFileSync(
      file,
      `dataDir: ${dir}\nkeyStore:\n  type: pkcs11\n  module: /usr/lib/hsm.so\n  tokenLabel: prod\n  pinFile: ${dir}/pin\n`,
    );
    expect(resolveConfig({ configFile: file, env: {} }).keyStore).toMatchObject({
      type: 'pkcs11',
      pin: '123456',
      tokenLabel: 'prod',
    });
  });

  it.each([
    ['an unknown key', 'dataDir: /x\nlistn: 1.2.3.4:5\n', /listn|additional/i],
    ['a wrong type', 'dataDir: /x\ntrial:\n  maxPerWindow: ten\n', /trial\/maxPerWindow/],
    ['broken YAML', 'dataDir: [\n', /not valid YAML/],
    ['pkcs11 without a PIN', 'dataDir: /x\nkeyStore: {type: pkcs11, module: /m.so, tokenLabel: t}\n', /needs pin/],
  ])('rejects %s with a message naming the file', (_name, text, pattern) => {
    const file = join(makeTempDir(), 'bad.yaml');
    writeFileSync(file, text);
    expect(() => resolveConfig({ configFile: file, env: {} })).toThrow(ConfigError);
    expect(() => resolveConfig({ configFile: file, env: {} })).toThrow(pattern);
  });

  it('refuses a database URL that is not one before connecting, naming where it came from and hiding the password', () => {
    const env = (url: string) => ({ SIGNBRIDGE_DATABASE_URL: url });
    expect(resolveConfig({ dataDir: '/tmp/sb-x', env: env('postgres://u:pw@db.example:5432/sb') }).store).toEqual({
      type: 'postgres',
      url: 'postgres://u:pw@db.example:5432/sb',
    });
    expect(() => resolveConfig({ dataDir: '/tmp/sb-x', env: env('mysql://u@db/sb') })).toThrow(
      /must be a postgres:\/\/user:password@host:port\/dbname URL/,
    );
    for (const bad of ['postgres://u:secret@127.0.0.1:99999/sb', 'postgres://u:secret@[::1/sb']) {
      let message = '';
      try {
        resolveConfig({ dataDir: '/tmp/sb-x', database: bad, env: {} });
      } catch (err) {
        expect(err).toBeInstanceOf(ConfigError);
        message = (err as Error).message;
      }
      expect(message).toMatch(/the database URL \(--database or SIGNBRIDGE_DATABASE_URL\) is not a valid URL/);
      expect(message).not.toContain('secret');
    }
    const dir = makeTempDir();
    const file = join(dir, 'c.yaml');
    writeFileSync(file, `dataDir: ${dir}\nstore:\n  type: postgres\n  url: "postgres://u@host:0x/sb"\n`);
    expect(() => resolveConfig({ configFile: file, env: {} })).toThrow(/the database URL \(store.url\) is not a valid/);
  });

  it('takes the PostgreSQL statement timeout and pool size from the file whichever source gives the URL', () => {
    const dir = makeTempDir();
    const file = join(dir, 'c.yaml');
    writeFileSync(file, `dataDir: ${dir}\nstore:\n  type: postgres\n  poolSize: 4\n  statementTimeoutMs: 1500\n`);
    const url = 'postgres://u@db.example/sb';
    for (const sources of [{ database: url }, { env: { SIGNBRIDGE_DATABASE_URL: url } }]) {
      expect(resolveConfig({ configFile: file, env: {}, ...sources }).store).toEqual({
        type: 'postgres',
        url,
        poolSize: 4,
        statementTimeoutMs: 1500,
      });
    }
    writeFileSync(file, `dataDir: ${dir}\nstore:\n  type: postgres\n  url: ${url}\n  statementTimeoutMs: 5\n`);
    expect(() => resolveConfig({ configFile: file, env: {} })).toThrow(
      /\/store\/statementTimeoutMs Expected integer to be greater or equal to 100/,
    );
  });

  it('the request time-out: 60 s unless the file or (winning) the environment says otherwise; nonsense refused', () => {
    const dir = makeTempDir();
    const file = join(dir, 'timeout.yaml');
    writeFileSync(file, `dataDir: ${dir}\nrequestTimeoutSeconds: 20\n`);
    expect(resolveConfig({ dataDir: dir, env: {} }).requestTimeoutMs).toBe(60_000);
    expect(resolveConfig({ configFile: file, env: {} }).requestTimeoutMs).toBe(20_000);
    expect(resolveConfig({ configFile: file, env: { SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS: '5' } }).requestTimeoutMs).toBe(
      5_000,
    );
    for (const bad of ['0', '1.5', '-1', 'ten', '3601']) {
      expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS: bad } }), bad).toThrow(
        /SIGNBRIDGE_REQUEST_TIMEOUT_SECONDS must be whole seconds from 1 to 3600/,
      );
    }
  });

  it('requires a data dir and a valid listen address', () => {
    expect(() => resolveConfig({ env: {} })).toThrow(/no data dir/);
    expect(() => parseListen('8080')).toThrow(/HOST:PORT/);
    expect(() => parseListen('h:70000')).toThrow(/HOST:PORT/);
  });

  it('trustProxy takes proxy addresses or CIDRs, and refuses true with what to write instead', () => {
    const dir = makeTempDir();
    const file = join(dir, 'c.yaml');
    const withProxy = (value: string, env: NodeJS.ProcessEnv = {}) => {
      writeFileSync(file, `dataDir: ${dir}\ntrustProxy: ${value}\n`);
      return resolveConfig({ configFile: file, env });
    };
    expect(resolveConfig({ dataDir: dir, env: {} }).trustProxy).toEqual([]);
    expect(withProxy('["10.0.0.0/8", "192.0.2.7", "::1", "loopback"]').trustProxy).toEqual([
      '10.0.0.0/8',
      '192.0.2.7',
      '::1',
      'loopback',
    ]);
    expect(withProxy('false').trustProxy).toEqual([]);
    expect(withProxy('false', { SIGNBRIDGE_TRUST_PROXY: '10.0.0.1, 10.0.0.2' }).trustProxy).toEqual([
      '10.0.0.1',
      '10.0.0.2',
    ]);
    expect(() => withProxy('true')).toThrow(/trustProxy: true would trust every hop.*list the addresses or CIDRs/);
    expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_TRUST_PROXY: 'true' } })).toThrow(ConfigError);
    expect(() => withProxy('["10.0.0.0/33"]')).toThrow(/"10.0.0.0\/33" is not an IP address, a CIDR/);
    expect(() => withProxy('["proxy.example.com"]')).toThrow(/is not an IP address/);
  });
});

describe('workload (the CI token exchange)', () => {
  it('reads workload.* with the SIGNBRIDGE_WORKLOAD_* variables over the file, and refuses what it cannot use', () => {
    const dir = makeTempDir();
    const ca = join(dir, 'ca.pem');
    writeFileSync(ca, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
    const file = join(dir, 'config.yml');
    writeFileSync(
      file,
      `dataDir: ${dir}\nworkload:\n  allow: [gitlab.internal, 10.1.0.0/16]\n  maxTokenAgeSeconds: 600\n`,
    );
    expect(resolveConfig({ dataDir: dir, env: {} }).workload).toEqual({
      allow: [],
      maxTokenAgeSeconds: 3600,
      clockToleranceSeconds: 60,
    });
    expect(resolveConfig({ configFile: file, env: {} }).workload).toMatchObject({
      allow: ['gitlab.internal', '10.1.0.0/16'],
      maxTokenAgeSeconds: 600,
    });
    const fromEnv = resolveConfig({
      configFile: file,
      env: { SIGNBRIDGE_WORKLOAD_ALLOW: '127.0.0.1, ::1', SIGNBRIDGE_WORKLOAD_CA_FILE: ca },
    }).workload;
    expect(fromEnv.allow).toEqual(['127.0.0.1', '::1']);
    expect(fromEnv.caPem).toContain('BEGIN CERTIFICATE');
    expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_WORKLOAD_ALLOW: '10.0.0.0/33' } })).toThrow(
      /workload.allow: "10.0.0.0\/33" is not a host name, an IP address or a CIDR/,
    );
    expect(() =>
      resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_WORKLOAD_CA_FILE: join(dir, 'missing.pem') } }),
    ).toThrow(/workload.caFile .*missing.pem cannot be read/);
    expect(() => resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_WORKLOAD_CA_FILE: file } })).toThrow(
      /holds no PEM certificate/,
    );
  });
});

describe('smtp (outgoing mail for e-mail subscriptions)', () => {
  const PASSWORD = 'smtp-Pa55word-never-shown';
  const setup = (yaml: string) => {
    const dir = makeTempDir();
    const file = join(dir, 'c.yaml');
    writeFileSync(file, `dataDir: ${dir}\n${yaml}`);
    return { dir, file };
  };

  it('is absent without a section; STARTTLS on 587 and a 30 s timeout by default; the port follows tls', () => {
    const { dir } = setup('');
    expect(resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_SMTP_PASSWORD: PASSWORD } }).smtp).toBeUndefined();
    const { file } = setup('smtp: {host: smtp.example.com, from: signbridge@example.com}\n');
    expect(resolveConfig({ configFile: file, env: {} }).smtp).toEqual({
      host: 'smtp.example.com',
      port: 587,
      from: 'signbridge@example.com',
      tls: 'starttls',
      timeoutMs: 30_000,
    });
    const implicit = setup('smtp: {host: smtp.example.com, from: a@example.com, tls: implicit}\n').file;
    expect(resolveConfig({ configFile: implicit, env: {} }).smtp).toMatchObject({ port: 465, tls: 'implicit' });
    const none = setup('smtp: {host: relay.local, from: a@example.com, tls: none, port: 2525}\n').file;
    expect(resolveConfig({ configFile: none, env: {} }).smtp).toMatchObject({ port: 2525, tls: 'none' });
  });

  it('takes the password from SIGNBRIDGE_SMTP_PASSWORD over passwordFile, and reads caFile at start', () => {
    const dir = makeTempDir();
    const passwordFile = join(dir, 'smtp-password');
    writeFileSync(passwordFile, 'from-the-file\n');
    const ca = join(dir, 'ca.pem');
    writeFileSync(ca, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
    const file = join(dir, 's.yaml');
    writeFileSync(
      file,
      `dataDir: ${dir}\nsmtp:\n  host: smtp.example.com\n  from: "signbridge <signbridge@example.com>"\n  user: sb\n` +
        `  passwordFile: ${passwordFile}\n  caFile: ${ca}\n  timeoutMs: 5000\n`,
    );
    expect(resolveConfig({ configFile: file, env: {} }).smtp).toMatchObject({
      auth: { user: 'sb', pass: 'from-the-file' },
      caPem: expect.stringContaining('BEGIN CERTIFICATE'),
      timeoutMs: 5000,
    });
    expect(resolveConfig({ configFile: file, env: { SIGNBRIDGE_SMTP_PASSWORD: PASSWORD } }).smtp?.auth).toEqual({
      user: 'sb',
      pass: PASSWORD,
    });
  });

  it('stops the start with the setting named, never the password', () => {
    const cases: Array<[string, NodeJS.ProcessEnv, RegExp]> = [
      ['smtp: {host: h, from: a@example.com, tls: ssl}\n', {}, /\/smtp\/tls must be one of starttls, implicit, none/],
      ['smtp: {from: a@example.com}\n', {}, /\/smtp\/host/],
      ['smtp: {host: h, from: nobody}\n', {}, /smtp.from must be one address/],
      ['smtp: {host: h, from: a@example.com, user: sb}\n', {}, /smtp.user is set: give its password/],
      ['smtp: {host: h, from: a@example.com}\n', { SIGNBRIDGE_SMTP_PASSWORD: PASSWORD }, /but smtp.user is not/],
      [
        'smtp: {host: h, from: a@example.com, user: sb, passwordFile: /nonexistent/pw}\n',
        {},
        /passwordFile \/nonexistent\/pw cannot be read/,
      ],
      [
        'smtp: {host: h, from: a@example.com, caFile: /nonexistent/ca.pem}\n',
        {},
        /smtp.caFile \/nonexistent\/ca.pem cannot be read/,
      ],
      ['smtp: {host: h, from: a@example.com, timeoutMs: 10}\n', {}, /\/smtp\/timeoutMs/],
      ['smtp: {host: h, from: a@example.com, password: x}\n', {}, /\/smtp\/password/],
    ];
    for (const [yaml, env, message] of cases) {
      const { file } = setup(yaml);
      let error: unknown;
      try {
        resolveConfig({ configFile: file, env });
      } catch (err) {
        error = err;
      }
      expect(error, yaml).toBeInstanceOf(ConfigError);
      expect((error as Error).message, yaml).toMatch(message);
      expect((error as Error).message).not.toContain(PASSWORD);
    }
  });
});

describe('webhooks (where the URLs of subscriptions may point)', () => {
  it('reads webhooks.* with SIGNBRIDGE_WEBHOOK_ALLOW over the file, and names allow entries it cannot use', () => {
    const dir = makeTempDir();
    const ca = join(dir, 'ca.pem');
    writeFileSync(ca, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
    const file = join(dir, 'config.yml');
    writeFileSync(file, `dataDir: ${dir}\nwebhooks:\n  allow: [hooks.internal, 10.2.0.0/16]\n  timeoutMs: 3000\n`);
    expect(resolveConfig({ dataDir: dir, env: {} }).webhooks).toEqual({ allow: [], timeoutMs: 10_000 });
    expect(resolveConfig({ configFile: file, env: {} }).webhooks).toEqual({
      allow: ['hooks.internal', '10.2.0.0/16'],
      timeoutMs: 3000,
    });
    const fromEnv = resolveConfig({
      configFile: file,
      env: { SIGNBRIDGE_WEBHOOK_ALLOW: ' 127.0.0.1 ,fd00::/8,', SIGNBRIDGE_WEBHOOK_CA_FILE: ca },
    }).webhooks;
    expect(fromEnv.allow).toEqual(['127.0.0.1', 'fd00::/8']);
    expect(fromEnv.extraCaPem).toContain('BEGIN CERTIFICATE');
    expect(() =>
      resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_WEBHOOK_ALLOW: 'ok.example.com, 10.0.0.0/33, a b' } }),
    ).toThrow(/webhooks.allow: "10.0.0.0\/33", "a b" is not a host name, an IP address or a CIDR/);
    expect(() =>
      resolveConfig({ dataDir: dir, env: { SIGNBRIDGE_WEBHOOK_CA_FILE: join(dir, 'missing.pem') } }),
    ).toThrow(/webhooks.caFile .*missing.pem cannot be read/);
    writeFileSync(file, `dataDir: ${dir}\nwebhooks:\n  timeoutMs: 5\n`);
    expect(() => resolveConfig({ configFile: file, env: {} })).toThrow(/timeoutMs/);
  });
});
