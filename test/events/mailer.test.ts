// The mailer (src/events/mailer.ts) against a real SMTP server: the `smtp-server` library on 127.0.0.1, with
// STARTTLS on a self-signed certificate (made here with openssl; the mailer trusts it through smtp.caFile) and
// AUTH PLAIN checked by the server. The server's answers are the ones real servers give: 550 for an unknown
// recipient, 451 for "try later", 421 for "going away", 535 for a bad login, and no STARTTLS at all.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SMTPServer, type SMTPServerOptions } from 'smtp-server';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/config.js';
import { EVENT_DATA_EXAMPLES } from '../../src/events/event-schemas.js';
import { mailMessage } from '../../src/events/formats/mail-message.js';
import { Mailer } from '../../src/events/mailer.js';
import type { SmtpSettings } from '../../src/events/smtp-settings.js';
import type { EventRecord } from '../../src/store/records/event-kinds.js';
import { selfSignedCert } from '../helpers/local-servers.js';

const USER = 'signbridge-mailer';
const PASSWORD = 'Pa55-w0rd_that-must-never-show';

interface Received {
  mailFrom: string;
  rcptTo: string[];
  raw: string;
  secure: boolean;
  user: unknown;
}

interface Server {
  port: number;
  received: Received[];
  /** Every AUTH the server saw, with whether the connection was encrypted then. */
  logins: Array<{ method: string; username?: string; secure: boolean }>;
  mailFroms: string[];
}

let dir: string;
let cert: string;
let key: string;
const servers: SMTPServer[] = [];
const mailers: Mailer[] = [];

beforeAll(() => {
  ({ cert, key } = selfSignedCert());
  dir = mkdtempSync(join(tmpdir(), 'sb-mailer-'));
  // The mailer reads its CA from smtp.caFile, as an operator configures it.
  writeFileSync(join(dir, 'cert.pem'), cert);
});

afterEach(async () => {
  for (const m of mailers.splice(0)) m.close();
  await Promise.all(servers.splice(0).map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
});

afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** An SMTP error reply as smtp-server sends it: the callback's error with its code. */
function reply(code: number, message: string): Error {
  return Object.assign(new Error(message), { responseCode: code });
}

async function startServer(options: Partial<SMTPServerOptions> = {}): Promise<Server> {
  const state: Server = { port: 0, received: [], logins: [], mailFroms: [] };
  const server = new SMTPServer({
    secure: false,
    key,
    cert,
    authMethods: ['PLAIN'],
    logger: false,
    disableReverseLookup: true,
    closeTimeout: 100,
    onAuth(auth, session, callback) {
      state.logins.push({ method: auth.method, username: auth.username, secure: session.secure });
      if (auth.username === USER && auth.password === PASSWORD) callback(null, { user: USER });
      else callback(reply(535, '5.7.8 Authentication credentials invalid'));
    },
    onMailFrom(address, _session, callback) {
      state.mailFroms.push(address.address);
      callback();
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        state.received.push({
          mailFrom: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          rcptTo: session.envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks).toString('utf8'),
          secure: session.secure,
          user: session.user,
        });
        callback();
      });
    },
    ...options,
  });
  servers.push(server);
  await new Promise<void>((resolve, reject) => {
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  state.port = (server.server.address() as AddressInfo).port;
  return state;
}

function mailer(settings: Partial<SmtpSettings> & { port: number }): Mailer {
  const m = new Mailer({
    host: '127.0.0.1',
    from: 'signbridge <signbridge@example.com>',
    tls: 'starttls',
    auth: { user: USER, pass: PASSWORD },
    caPem: cert,
    timeoutMs: 20_000,
    ...settings,
  });
  mailers.push(m);
  return m;
}

const pending: EventRecord = {
  id: 'evt_01JDMAIL0000000000000001',
  seq: 1,
  tenantId: 'acme',
  timestamp: '2026-11-26T09:40:00.000Z',
  type: 'signature.pending',
  data: EVENT_DATA_EXAMPLES['signature.pending'],
};
const content = mailMessage(pending);
const mail = (to: string[]) => ({ to, ...content });

/** Headers and decoded parts of a message as nodemailer writes it (multipart/alternative, QP or base64 parts). */
function parseMessage(raw: string): { headers: Map<string, string>; parts: Map<string, string> } {
  const [head = '', ...rest] = raw.split(/\r\n\r\n/);
  const headers = new Map<string, string>();
  for (const line of head.replace(/\r\n[ \t]+/g, ' ').split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) headers.set(line.slice(0, i).toLowerCase(), line.slice(i + 1).trim());
  }
  const body = rest.join('\r\n\r\n');
  const boundary = /boundary="?([^";]+)"?/.exec(headers.get('content-type') ?? '')?.[1];
  const parts = new Map<string, string>();
  for (const part of boundary ? body.split(`--${boundary}`).slice(1, -1) : []) {
    const [partHead = '', ...partBody] = part.replace(/^\r\n/, '').split(/\r\n\r\n/);
    const type = /content-type:\s*([^;\r\n]+)/i.exec(partHead)?.[1]?.trim() ?? '';
    const encoding = /content-transfer-encoding:\s*(\S+)/i.exec(partHead)?.[1]?.toLowerCase();
    const text = partBody.join('\r\n\r\n').replace(/\r\n$/, '');
    parts.set(type, decode(text, encoding));
  }
  return { headers, parts };
}

function decode(text: string, encoding: string | undefined): string {
  if (encoding === 'base64') return Buffer.from(text.replace(/\s+/g, ''), 'base64').toString('utf8');
  if (encoding === 'quoted-printable') {
    const bytes = text.replace(/=\r\n/g, '').replace(/=([0-9A-F]{2})/gi, (_, hex: string) => `%${hex}`);
    return decodeURIComponent(bytes.replace(/%(?![0-9A-F]{2})/gi, '%25'));
  }
  return text;
}

/** A header's value with RFC 2047 encoded words decoded (a long subject is folded into several). */
function decodeHeader(value: string): string {
  return value
    .replace(/\?=\s+=\?/g, '?==?')
    .replace(/=\?utf-8\?([BQ])\?([^?]*)\?=/gi, (_, kind: string, text: string) =>
      kind.toUpperCase() === 'B'
        ? Buffer.from(text, 'base64').toString('utf8')
        : decode(text.replace(/_/g, ' '), 'quoted-printable'),
    );
}

describe('the mailer against a real SMTP server', () => {
  it('delivers over STARTTLS with AUTH PLAIN, configured from the smtp section, to every recipient', async () => {
    const server = await startServer();
    const caFile = join(dir, 'cert.pem');
    const configFile = join(dir, 'config.yaml');
    writeFileSync(
      configFile,
      `smtp:\n  host: 127.0.0.1\n  port: ${server.port}\n  from: "signbridge <signbridge@example.com>"\n` +
        `  user: ${USER}\n  caFile: ${caFile}\n  timeoutMs: 20000\n`,
    );
    const config = resolveConfig({ dataDir: dir, configFile, env: { SIGNBRIDGE_SMTP_PASSWORD: PASSWORD } });
    expect(config.smtp).toMatchObject({ host: '127.0.0.1', port: server.port, tls: 'starttls' });
    const m = new Mailer(config.smtp as SmtpSettings);
    mailers.push(m);

    const result = await m.send(mail(['approver@example.com', 'security@example.com']));

    expect(result).toEqual({
      outcome: 'delivered',
      accepted: ['approver@example.com', 'security@example.com'],
      rejected: [],
    });
    expect(server.logins).toEqual([{ method: 'PLAIN', username: USER, secure: true }]);
    expect(server.received).toHaveLength(1);
    const got = server.received[0] as Received;
    expect(got).toMatchObject({
      mailFrom: 'signbridge@example.com',
      rcptTo: ['approver@example.com', 'security@example.com'],
      secure: true,
      user: USER,
    });
    const { headers, parts } = parseMessage(got.raw);
    expect(decodeHeader(headers.get('subject') ?? '')).toBe(content.subject);
    expect(content.subject).toBe('Signature waiting for approval in tenant acme: rule release-needs-approval');
    const consoleUrl = EVENT_DATA_EXAMPLES['signature.pending'].console_url as string;
    expect(parts.get('text/plain')).toContain(consoleUrl);
    expect(parts.get('text/plain')).toContain('Requested by: CI acme/installer');
    expect(parts.get('text/html')).toContain(`href="${consoleUrl}"`);
    expect(got.raw).not.toContain(PASSWORD);
  });

  it('delivers over implicit TLS too', async () => {
    const server = await startServer({ secure: true });
    const result = await mailer({ port: server.port, tls: 'implicit' }).send(mail(['approver@example.com']));
    expect(result.outcome).toBe('delivered');
    expect(server.received[0]?.secure).toBe(true);
  });

  it('fails for good when the server refuses every recipient with 550, and names who was refused when some are', async () => {
    const server = await startServer({
      onRcptTo(address, _session, callback) {
        if (address.address === 'nobody@example.com') callback(reply(550, '5.1.1 <nobody@example.com>: no such user'));
        else callback();
      },
    });
    const m = mailer({ port: server.port });
    const refused = await m.send(mail(['nobody@example.com']));
    expect(refused.outcome).toBe('failed');
    expect(refused.outcome !== 'delivered' && refused.error).toMatch(/550|recipients/);
    expect(server.received).toHaveLength(0);

    const some = await m.send(mail(['approver@example.com', 'nobody@example.com']));
    expect(some).toEqual({
      outcome: 'delivered',
      accepted: ['approver@example.com'],
      rejected: ['nobody@example.com'],
    });
    expect(server.received[0]?.rcptTo).toEqual(['approver@example.com']);
  });

  it('retries when the server says 451 (try later) to the sender or 421 (going away) at the greeting', async () => {
    const later = await startServer({
      onMailFrom(_address, _session, callback) {
        callback(reply(451, '4.7.1 greylisted, try again later'));
      },
    });
    const greylisted = await mailer({ port: later.port }).send(mail(['approver@example.com']));
    expect(greylisted.outcome).toBe('retry');
    expect(greylisted.outcome === 'retry' && greylisted.error).toMatch(/451/);

    const away = await startServer({
      onConnect(_session, callback) {
        callback(reply(421, '4.3.2 service shutting down'));
      },
    });
    const closing = await mailer({ port: away.port }).send(mail(['approver@example.com']));
    expect(closing.outcome).toBe('retry');
    expect(closing.outcome === 'retry' && closing.error).toMatch(/421/);
    expect(later.received).toHaveLength(0);
    expect(away.received).toHaveLength(0);
  });

  it('refuses to send in clear when the server offers no STARTTLS, and the password appears in no error', async () => {
    const server = await startServer({ hideSTARTTLS: true, disabledCommands: ['STARTTLS'], allowInsecureAuth: true });
    const result = await mailer({ port: server.port }).send(mail(['approver@example.com']));
    expect(result.outcome).toBe('retry');
    const error = result.outcome === 'retry' ? result.error : '';
    expect(error).toMatch(/does not offer STARTTLS/);
    expect(error).toMatch(/not sent/);
    expect(error).not.toContain(PASSWORD);
    expect(error).not.toContain(Buffer.from(`\u0000${USER}\u0000${PASSWORD}`).toString('base64'));
    // Nothing crossed in clear: no login, no envelope, no message.
    expect(server.logins).toEqual([]);
    expect(server.mailFroms).toEqual([]);
    expect(server.received).toEqual([]);
  });

  it('a refused login is retried (the setup, not the message, is wrong) and its error holds no password', async () => {
    const server = await startServer();
    const wrong = `${PASSWORD}-but-wrong`;
    const result = await mailer({ port: server.port, auth: { user: USER, pass: wrong } }).send(
      mail(['approver@example.com']),
    );
    expect(result.outcome).toBe('retry');
    const error = result.outcome === 'retry' ? result.error : '';
    expect(error).toMatch(/535/);
    expect(error).not.toContain(wrong);
    expect(error).not.toContain(PASSWORD);
    expect(server.logins).toEqual([{ method: 'PLAIN', username: USER, secure: true }]);
    expect(server.received).toEqual([]);
  });

  it('does not trust a certificate it was not given (no caFile): retry, with the reason', async () => {
    const server = await startServer();
    const m = new Mailer({
      host: '127.0.0.1',
      port: server.port,
      from: 'signbridge@example.com',
      tls: 'starttls',
      auth: { user: USER, pass: PASSWORD },
      timeoutMs: 20_000,
    });
    mailers.push(m);
    const result = await m.send(mail(['approver@example.com']));
    expect(result.outcome).toBe('retry');
    expect(result.outcome === 'retry' && result.error).toMatch(/certificate/i);
    expect(server.logins).toEqual([]);
  });
});
