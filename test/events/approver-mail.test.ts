// Mail to the people who decide, through a real SMTP server (the `smtp-server` library on 127.0.0.1, STARTTLS on
// a self-signed certificate the service trusts through smtp.caFile, AUTH PLAIN checked by the server): a signature
// held for approval is mailed to the tenant's approvers with a verified address (not to the subscription's own
// address, not to an unverified or disabled approver, not to a signer), once however often the module polls; one
// reminder before it expires, however many sweeps run; its expiry and an exception's coming end go to the
// subscription's address. The service's clock is the test's, so the sweeps see the hours pass at once.
import type { AddressInfo } from 'node:net';
import { SMTPServer } from 'smtp-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { destinations } from '../../src/events/destinations.js';
import type { Deliver } from '../../src/events/dispatcher.js';
import { Mailer } from '../../src/events/mailer.js';
import { addSubscription } from '../../src/events/subscription-service.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { selfSignedCert } from '../helpers/local-servers.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';
import { waitFor } from '../helpers/wait.js';

const USER = 'signbridge';
const PASSWORD = 'smtp-secret-never-shown';
const HOUR = 3600_000;

interface Mail {
  to: string[];
  raw: string;
  secure: boolean;
}

const mails: Mail[] = [];
let smtp: SMTPServer;
let svc: TestService;
let deliver: Deliver;
let mailer: Mailer;
let clock = Date.parse('2026-11-26T08:00:00Z');

const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'mail-policy'),
);

beforeAll(async () => {
  const { key, cert } = selfSignedCert();
  smtp = new SMTPServer({
    secure: false,
    key,
    cert,
    authMethods: ['PLAIN'],
    onAuth(auth, _session, callback) {
      if (auth.username === USER && auth.password === PASSWORD) callback(null, { user: USER });
      else callback(Object.assign(new Error('bad login'), { responseCode: 535 }));
    },
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        mails.push({
          to: session.envelope.rcptTo.map((r) => r.address).sort(),
          raw: Buffer.concat(chunks).toString('utf8'),
          secure: session.secure,
        });
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => smtp.listen(0, '127.0.0.1', resolve));
  const port = (smtp.server.address() as AddressInfo).port;
  mailer = new Mailer({
    host: '127.0.0.1',
    port,
    from: 'signbridge@example.com',
    tls: 'starttls',
    auth: { user: USER, pass: PASSWORD },
    caPem: cert,
    timeoutMs: 10_000,
  });
  svc = await startTestService({
    policy,
    publicUrl: 'https://signbridge.example.test',
    now: () => new Date(clock),
    approvalLifetimeMs: 3 * HOUR,
    eventDelivery: {
      deliver: (claim) => deliver(claim),
      settings: { pollMs: 25, idlePollMaxMs: 200, retryBaseMs: 100 },
      sweeps: { everyMs: 0, remindBeforeMs: HOUR, exceptionWarnMs: 24 * HOUR },
    },
  });
  deliver = destinations(svc.store, { webhooks: { allow: [] }, mailer });
  await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'ml', key_spec: 'ECC_NIST_P256' });
  // People: two approvers with verified addresses, one unverified, one disabled, one signer.
  const person = async (subject: string, email: string, verified: boolean, role: 'approver' | 'signer') => {
    const p = await svc.store.people.signIn(
      { issuer: 'https://idp.example.test', subject, email, emailVerified: verified, name: subject },
      new Date(clock).toISOString(),
      [],
    );
    await svc.store.people.addMembership({
      tenantId: 'ml',
      role,
      personId: p.id,
      email,
      createdAt: new Date(clock).toISOString(),
      createdBy: 'test',
    });
    return p;
  };
  await person('ann', 'ann@example.com', true, 'approver');
  await person('bob', 'bob@example.com', true, 'approver');
  await person('eve', 'eve@example.com', false, 'approver');
  const gone = await person('dan', 'dan@example.com', true, 'approver');
  await svc.store.people.setDisabled(gone.id, new Date(clock).toISOString());
  await person('sam', 'sam@example.com', true, 'signer');
  await addSubscription(
    svc.store,
    { tenantId: 'ml', url: 'mailto:security@example.com', format: 'email', eventKinds: [] },
    { actor: 'test', via: 'cli' },
    async () => undefined,
  );
});
afterAll(async () => {
  await svc?.close();
  mailer?.close();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
});

/** The message's text as a reader sees it: quoted-printable soft breaks and escapes undone. */
const readable = (m: Mail) =>
  m.raw
    .replace(/=\r?\n/g, '')
    .replace(/=([0-9A-F]{2})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
const subjectOf = (m: Mail) => /^Subject: (.*)$/m.exec(m.raw)?.[1] ?? '';
const about = (requestId: string) => mails.filter((m) => readable(m).includes(requestId));

describe('mail for held signatures', () => {
  let requestId: string;
  const sign = async () => {
    const signer = await svc.apiKey('signer', 'ml');
    return callAction(svc.app, signer, 'sign', {
      tenant_id: 'ml',
      algorithm: 'ECDSA_SHA_256',
      hash: Buffer.alloc(32, 3).toString('base64'),
      environment: 'production',
    });
  };

  it('mails a held signature to the approvers with verified addresses, over STARTTLS, once', async () => {
    const held = await sign();
    expect(held.status).toBe(202);
    requestId = held.body.request_id as string;
    await waitFor('the pending mail', () => about(requestId).length >= 1);
    // The module polls: a retry continues the request and mails nobody.
    expect((await sign()).status).toBe(202);
    await svc.app.eventDispatcher?.runOnce();
    const [mail] = about(requestId);
    expect(mail?.to).toEqual(['ann@example.com', 'bob@example.com']);
    expect(mail?.secure).toBe(true);
    expect(subjectOf(mail as Mail)).toMatch(/waiting for approval in tenant ml/);
    expect(readable(mail as Mail)).toContain(`https://signbridge.example.test/console/requests#req-${requestId}`);
    expect(mail?.raw).not.toContain(PASSWORD);
    expect(about(requestId)).toHaveLength(1);
  });

  it('reminds the approvers once when an hour is left, however many sweeps run', async () => {
    clock += 2 * HOUR + 60_000;
    await waitFor('the reminder mail', () => about(requestId).length >= 2);
    for (let i = 0; i < 3; i++) await svc.app.eventDispatcher?.runOnce();
    const reminders = about(requestId).filter((m) => /^Reminder/.test(subjectOf(m)));
    expect(reminders).toHaveLength(1);
    expect(reminders[0]?.to).toEqual(['ann@example.com', 'bob@example.com']);
  });

  it('tells the subscription of the expiry when it happens, not when somebody looks', async () => {
    clock += HOUR;
    await waitFor('the expiry mail', () => about(requestId).some((m) => /expired/.test(subjectOf(m))));
    const expiry = about(requestId).filter((m) => /expired/.test(subjectOf(m)));
    expect(expiry).toHaveLength(1);
    expect(expiry[0]?.to).toEqual(['security@example.com']);
    // Read through the API afterwards: already expired, and no second event.
    const approver = await svc.apiKey('approver', 'ml');
    const res = await callAction(svc.app, approver, 'approve_sign', { tenant_id: 'ml', request_id: requestId });
    expect(res.status).toBe(409);
    await svc.app.eventDispatcher?.runOnce();
    expect(about(requestId).filter((m) => /expired/.test(subjectOf(m)))).toHaveLength(1);
  });

  it("warns once of an exception's end a day ahead", async () => {
    const admin = await svc.apiKey('admin', 'ml');
    const created = await callAction(svc.app, admin, 'create_exception', {
      tenant_id: 'ml',
      vuln_id: 'GHSA-mail-test-0001',
      reason: 'fixed upstream next week',
      expires_at: new Date(clock + 3 * 24 * HOUR).toISOString(),
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const forVuln = () => mails.filter((m) => readable(m).includes('GHSA-mail-test-0001'));
    await waitFor('the created mail', () => forVuln().length >= 1);
    clock += 2 * 24 * HOUR + HOUR;
    await waitFor('the expiring mail', () => forVuln().some((m) => /ends/.test(subjectOf(m))));
    for (let i = 0; i < 3; i++) await svc.app.eventDispatcher?.runOnce();
    expect(forVuln().filter((m) => /ends/.test(subjectOf(m)))).toHaveLength(1);
  });
});
