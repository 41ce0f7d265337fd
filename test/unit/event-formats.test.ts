// What an event looks like at each destination (src/events/formats/): Standard Webhooks requests checked against the
// specification's vector and the reference library (npm standardwebhooks), Slack and Teams shapes and escaping, the
// e-mail's escaping, and the summary of every kind.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { EVENT_DATA_EXAMPLES } from '../../src/events/event-schemas.js';
import { mailMessage } from '../../src/events/formats/mail-message.js';
import { escapeSlack, slackMessage } from '../../src/events/formats/slack.js';
import {
  newWebhookSecret,
  signStandardWebhook,
  standardWebhookRequest,
  verifyStandardWebhook,
} from '../../src/events/formats/standard-webhooks.js';
import { summarizeEvent, summaryText } from '../../src/events/formats/summary.js';
import { teamsMessage } from '../../src/events/formats/teams.js';
import { EVENT_KINDS, type EventKind, type EventRecord, envelope } from '../../src/store/records/event-kinds.js';
import { docSnippet } from '../helpers/doc-snippets.js';
import { EVENTS_DOC } from '../helpers/events-doc.js';

function eventOf<K extends EventKind>(kind: K, data: Record<string, unknown> = EVENT_DATA_EXAMPLES[kind]): EventRecord {
  return {
    id: `evt_${kind.replace('.', '_')}_0001`,
    seq: 7,
    tenantId: typeof data.tenant_id === 'string' ? data.tenant_id : null,
    timestamp: '2026-11-26T09:40:00.000Z',
    type: kind,
    data: data as EventRecord['data'],
  };
}

/** Text a requester or an admin chose, with every character a format might read as markup. */
const HOSTILE = '<!channel> & <https://evil.example|click> [click](https://evil.example) **bold** <script>x</script>';

describe('Standard Webhooks', () => {
  // The specification's test vector (NOTES-PIPELINES.md section 3; the library and node:crypto agree on it).
  const SPEC = {
    secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    id: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
    timestamp: 1614265330,
    body: '{"test": 2432232314}',
    signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
  };

  it("signs the specification's vector as the specification and the reference library do", () => {
    expect(signStandardWebhook(SPEC.secret, SPEC.id, SPEC.timestamp, SPEC.body)).toBe(SPEC.signature);
    expect(new Webhook(SPEC.secret).sign(SPEC.id, new Date(SPEC.timestamp * 1000), SPEC.body)).toBe(SPEC.signature);
  });

  it('makes secrets of 32 random bytes that the library accepts', () => {
    const a = newWebhookSecret();
    const b = newWebhookSecret();
    expect(a).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect(Buffer.from(a.slice('whsec_'.length), 'base64')).toHaveLength(32);
    expect(a).not.toBe(b);
    expect(() => new Webhook(a)).not.toThrow();
  });

  it.each(EVENT_KINDS)('a %s request verifies with the reference library and carries the envelope', (kind) => {
    const secret = newWebhookSecret();
    const event = eventOf(kind);
    const now = new Date();
    const request = standardWebhookRequest(event, secret, now);
    expect(request.headers).toEqual({
      'webhook-id': event.id,
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': expect.stringMatching(/^v1,[A-Za-z0-9+/]{43}=$/),
      'content-type': 'application/json',
    });
    expect(request.body).toBe(JSON.stringify(envelope(event)));
    expect(new Webhook(secret).verify(request.body, request.headers)).toEqual(envelope(event));
    expect(verifyStandardWebhook(secret, request.headers, request.body, now)).toBe(true);
  });

  it('a tampered body, a tampered timestamp, another secret or a stale timestamp fail the library', () => {
    const secret = newWebhookSecret();
    const now = new Date();
    const { headers, body } = standardWebhookRequest(eventOf('signature.pending'), secret, now);
    const library = new Webhook(secret);
    const tamperedBody = body.replace('"acme"', '"acmf"');
    expect(tamperedBody).not.toBe(body);
    expect(() => library.verify(tamperedBody, headers)).toThrow();
    expect(verifyStandardWebhook(secret, headers, tamperedBody, now)).toBe(false);
    const later = { ...headers, 'webhook-timestamp': String(Number(headers['webhook-timestamp']) + 1) };
    expect(() => library.verify(body, later)).toThrow();
    expect(verifyStandardWebhook(secret, later, body, now)).toBe(false);
    expect(() => new Webhook(newWebhookSecret()).verify(body, headers)).toThrow();
    // Signed an hour ago: a replay, refused by the library's 5-minute tolerance, as by ours.
    const old = standardWebhookRequest(eventOf('signature.pending'), secret, new Date(now.getTime() - 3600_000));
    expect(() => library.verify(old.body, old.headers)).toThrow();
    expect(verifyStandardWebhook(secret, old.headers, old.body, now)).toBe(false);
  });

  it('signs with every secret while one is being replaced; the library accepts either', () => {
    const [oldSecret, newSecret] = [newWebhookSecret(), newWebhookSecret()];
    const { headers, body } = standardWebhookRequest(eventOf('key.rotated'), [oldSecret, newSecret], new Date());
    expect(headers['webhook-signature'].split(' ')).toHaveLength(2);
    expect(() => new Webhook(oldSecret).verify(body, headers)).not.toThrow();
    expect(() => new Webhook(newSecret).verify(body, headers)).not.toThrow();
  });

  it('refuses an id with a dot and a malformed secret, without echoing the secret', () => {
    const secret = newWebhookSecret();
    expect(() => signStandardWebhook(secret, 'evt.1', 1, '{}')).toThrow(/webhook id/);
    const short = `whsec_${Buffer.alloc(8, 1).toString('base64')}`;
    for (const bad of ['secret-without-prefix', 'whsec_not base64!', short]) {
      let message = '';
      try {
        signStandardWebhook(bad, 'evt_1', 1, '{}');
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message).toMatch(/webhook secret/);
      expect(message).not.toContain(bad);
    }
  });

  it("the verification code in docs/events.md accepts the service's requests and refuses tampered ones", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sb-verify-'));
    const file = join(dir, 'verify.mjs');
    writeFileSync(file, docSnippet('verify-standard-webhook', EVENTS_DOC));
    const { verifyWebhook } = (await import(pathToFileURL(file).href)) as {
      verifyWebhook: (secret: string, headers: Record<string, string>, body: string) => boolean;
    };
    const secret = newWebhookSecret();
    const { headers, body } = standardWebhookRequest(eventOf('signature.approved'), secret, new Date());
    expect(verifyWebhook(secret, headers, body)).toBe(true);
    expect(verifyWebhook(secret, headers, `${body} `)).toBe(false);
    expect(verifyWebhook(newWebhookSecret(), headers, body)).toBe(false);
  });
});

describe('the summary', () => {
  const TITLES: Record<EventKind, string> = {
    'signature.pending': 'Signature waiting for approval in tenant acme: rule release-needs-approval',
    'signature.reminder': 'Reminder: signature still waiting for approval in tenant acme: rule release-needs-approval',
    'signature.approved': 'Signature approved in tenant acme: rule release-needs-approval',
    'signature.rejected': 'Signature rejected in tenant acme: rule release-needs-approval',
    'signature.signed': 'Signature made in tenant acme',
    'signature.denied': 'Signature denied in tenant acme: rule sbom-no-critical',
    'signature.expired': 'Signature request expired without a decision in tenant acme: rule release-needs-approval',
    'exception.created': 'Policy exception for GHSA-xxxx-2026-0001 created in tenant acme',
    'exception.revoked': 'Policy exception for GHSA-xxxx-2026-0001 revoked in tenant acme',
    'exception.expiring': 'Policy exception for GHSA-xxxx-2026-0001 in tenant acme ends 2026-12-10 00:00 UTC',
    'key.rotated': 'Key of tenant acme rotated to version 3',
    'key.imported': 'Key imported into tenant acme as version 3',
    'tenant.created': 'Tenant acme created',
    'trust.changed': 'Trust rule tr_4f3e2d1c0b9a8f7e added to tenant acme',
    'api_key.created': 'API key a1b2c3d4e5f60718 created in tenant acme',
    'api_key.revoked': 'API key a1b2c3d4e5f60718 revoked in tenant acme',
    'webhook.test': 'Test message for subscription wh_0123456789abcdef in tenant acme',
  };

  it.each(EVENT_KINDS)('%s has a title, labelled one-line facts and the console link', (kind) => {
    const data = EVENT_DATA_EXAMPLES[kind] as Record<string, unknown>;
    const summary = summarizeEvent(eventOf(kind));
    expect(summary.title).toBe(TITLES[kind]);
    expect(summary.facts.length).toBeGreaterThanOrEqual(3);
    for (const fact of summary.facts) {
      expect(fact.label).not.toBe('');
      expect(fact.value).not.toBe('');
      expect(fact.value).not.toMatch(/[\r\n]|undefined|\[object/);
    }
    if (typeof data.console_url === 'string') expect(summary.link?.url).toBe(data.console_url);
    else expect(summary.link).toBeUndefined();
  });

  it('titles a signature made after an approval with its rule, one made at once without', () => {
    const atOnce = EVENT_DATA_EXAMPLES['signature.signed'];
    const approved = { ...atOnce, rule: 'release-needs-approval', request_id: '3f0c7a52-5d1e-4c1b-9a57-2f8e6b0d9c41' };
    expect(summarizeEvent(eventOf('signature.signed', approved)).title).toBe(
      'Signature made after approval in tenant acme: rule release-needs-approval',
    );
    expect(summarizeEvent(eventOf('signature.signed')).title).toBe('Signature made in tenant acme');
  });

  it('says who asked, what, with which key, the rule and the expiry of a held signature', () => {
    const facts = Object.fromEntries(summarizeEvent(eventOf('signature.pending')).facts.map((f) => [f.label, f.value]));
    expect(facts).toMatchObject({
      'Requested by':
        'CI acme/installer, run https://github.com/acme/installer/actions/runs/12345678901/attempts/1 (key 9b2f4c1d8e7a6b5c)',
      Project: 'acme/installer',
      Environment: 'production',
      Artifact: 'msi 4.2.0',
      Key: 'e2c1b0a9-8f7e-4d6c-b5a4-938271605f4e (ECDSA_SHA_256)',
      Digest: 'n4bQgYhMfWWaL+qg…',
      Rule: 'release-needs-approval: production releases need an approver',
      'Waiting for': 'approval',
      Expires: '2026-11-27 09:40 UTC',
    });
    const denied = Object.fromEntries(summarizeEvent(eventOf('signature.denied')).facts.map((f) => [f.label, f.value]));
    expect(denied['Requested by']).toBe('bob@example.com (key c4d5e6f7a8b9c0d1)');
    const approved = summarizeEvent(eventOf('signature.approved')).facts.find((f) => f.label === 'Approved by');
    expect(approved?.value).toBe('alice@example.com (console)');
  });

  it('names the next stage when a stage passes, and the command line as an actor', () => {
    const stage = summarizeEvent(
      eventOf('signature.approved', {
        ...EVENT_DATA_EXAMPLES['signature.approved'],
        stage: 'pending_security_review',
        status: 'pending_approval',
      }),
    );
    expect(stage.title).toBe(
      'Security review passed in tenant acme; now waiting for approval: rule release-needs-approval',
    );
    const tenant = summarizeEvent(eventOf('tenant.created'));
    expect(tenant.facts).toContainEqual({ label: 'Created by', value: 'command line (root)' });
    const operatorKey = summarizeEvent(
      eventOf('api_key.created', { ...EVENT_DATA_EXAMPLES['api_key.created'], tenant_id: null, role: 'operator' }),
    );
    expect(operatorKey.title).toBe('Operator API key a1b2c3d4e5f60718 created');
  });

  it('reads only the documented fields: nothing else in data reaches a person', () => {
    const data = {
      ...EVENT_DATA_EXAMPLES['api_key.created'],
      token: 'sbk_a1b2c3d4e5f60718_SECRETSECRETSECRETSECRETSECRETSECRETSECRETS',
      inputs: { sbom: '{"bomFormat":"CycloneDX","components":[{"name":"secret-internal-lib"}]}' },
    };
    const text = summaryText(summarizeEvent(eventOf('api_key.created', data)));
    expect(text).not.toContain('SECRET');
    expect(text).not.toContain('secret-internal-lib');
  });

  it('keeps every value on one line and short, and offers only http(s) links', () => {
    const data = {
      ...EVENT_DATA_EXAMPLES['signature.denied'],
      reason: `first line\r\nsecond line\u0007 ${'x'.repeat(1000)}`,
      console_url: 'javascript:alert(1)',
    };
    const summary = summarizeEvent(eventOf('signature.denied', data));
    const rule = summary.facts.find((f) => f.label === 'Rule')?.value ?? '';
    expect(rule).toMatch(/^sbom-no-critical: first line second line x+…$/);
    expect(rule.length).toBeLessThanOrEqual(300);
    expect(summary.link).toBeUndefined();
  });
});

describe('Slack', () => {
  it('sends text, a bold title, facts in sections of at most 10 and a button to the console', () => {
    const event = eventOf('signature.pending');
    const message = slackMessage(event);
    const summary = summarizeEvent(event);
    expect(message.text).toBe(summaryText(summary));
    const [title, ...rest] = message.blocks;
    expect(title).toEqual({ type: 'section', text: { type: 'mrkdwn', text: `*${summary.title}*` } });
    const sections = rest.filter((b) => b.type === 'section') as Array<{
      fields: Array<{ type: string; text: string }>;
    }>;
    expect(sections.flatMap((s) => s.fields)).toHaveLength(summary.facts.length);
    for (const s of sections) expect(s.fields.length).toBeLessThanOrEqual(10);
    expect(sections[0]?.fields[0]).toEqual({ type: 'mrkdwn', text: `*Requested by*\n${summary.facts[0]?.value}` });
    expect(rest.at(-1)).toEqual({
      type: 'actions',
      elements: [
        {
          type: 'button',
          text: { type: 'plain_text', text: 'Review in the console' },
          url: EVENT_DATA_EXAMPLES['signature.pending'].console_url,
          action_id: 'open_console',
        },
      ],
    });
  });

  it("escapes Slack's &, < and > in text someone chose, so it cannot mention, link or break the markup", () => {
    expect(escapeSlack('a & <b> <!channel>')).toBe('a &amp; &lt;b&gt; &lt;!channel&gt;');
    const data = { ...EVENT_DATA_EXAMPLES['api_key.created'], label: HOSTILE };
    const message = slackMessage(eventOf('api_key.created', data));
    const texts = [message.text, ...JSON.stringify(message.blocks).match(/"text":"[^"]*(?:\\.[^"]*)*"/g)!];
    for (const text of texts) expect(text).not.toMatch(/<|>/);
    expect(JSON.stringify(message)).toContain('&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;');
  });

  it('has no button without a console URL', () => {
    const { console_url: _, ...data } = EVENT_DATA_EXAMPLES['tenant.created'] as Record<string, unknown>;
    expect(slackMessage(eventOf('tenant.created', data)).blocks.some((b) => b.type === 'actions')).toBe(false);
  });
});

describe('Teams', () => {
  it('sends the Workflows message with one Adaptive Card 1.4 and an Action.OpenUrl to the console', () => {
    const message = teamsMessage(eventOf('exception.expiring'));
    expect(message.type).toBe('message');
    expect(message.attachments).toHaveLength(1);
    const [attachment] = message.attachments;
    expect(attachment?.contentType).toBe('application/vnd.microsoft.card.adaptive');
    expect(attachment?.content).toMatchObject({ type: 'AdaptiveCard', version: '1.4' });
    expect(attachment?.content.actions).toEqual([
      {
        type: 'Action.OpenUrl',
        title: 'Open in the console',
        url: EVENT_DATA_EXAMPLES['exception.expiring'].console_url,
      },
    ]);
    const body = attachment?.content.body as Array<{ type: string; inlines: Array<{ type: string; text: string }> }>;
    expect(body[0]?.inlines[0]?.text).toBe(summarizeEvent(eventOf('exception.expiring')).title);
    expect(body.slice(1).map((b) => b.inlines.map((r) => r.text).join(''))).toContain(
      'Reason: not reachable: the vulnerable parser is never called (ticket SEC-1432)',
    );
  });

  it('puts text only in TextRuns, which Adaptive Cards never read as Markdown: a chosen label stays as written', () => {
    const data = { ...EVENT_DATA_EXAMPLES['api_key.revoked'], label: HOSTILE };
    const message = teamsMessage(eventOf('api_key.revoked', data));
    const body = message.attachments[0]?.content.body as Array<{ type: string; inlines: Array<{ type: string }> }>;
    for (const block of body) {
      expect(block.type).toBe('RichTextBlock');
      for (const inline of block.inlines) expect(inline.type).toBe('TextRun');
    }
    expect(JSON.stringify(body)).not.toMatch(/"type":"(TextBlock|FactSet)"/);
    expect(body.some((b) => JSON.stringify(b).includes(JSON.stringify(HOSTILE)))).toBe(true);
  });

  it('has no action without a console URL', () => {
    const { console_url: _, ...data } = EVENT_DATA_EXAMPLES['key.rotated'] as Record<string, unknown>;
    expect(teamsMessage(eventOf('key.rotated', data)).attachments[0]?.content.actions).toBeUndefined();
  });
});

describe('e-mail', () => {
  it('subject is the title, the text part has the facts and the link, the HTML escapes every value', () => {
    const data = { ...EVENT_DATA_EXAMPLES['exception.created'], reason: HOSTILE };
    const event = eventOf('exception.created', data);
    const mail = mailMessage(event);
    expect(mail.subject).toBe('Policy exception for GHSA-xxxx-2026-0001 created in tenant acme');
    expect(mail.text).toContain(`Reason: ${HOSTILE}`);
    expect(mail.text).toContain(`Open in the console: ${EVENT_DATA_EXAMPLES['exception.created'].console_url}`);
    expect(mail.text).toContain(event.id);
    expect(mail.html).not.toContain('<script>');
    expect(mail.html).not.toContain('<!channel>');
    expect(mail.html).toContain('&lt;script&gt;x&lt;/script&gt;');
    expect(mail.html).toContain(`<a href="${EVENT_DATA_EXAMPLES['exception.created'].console_url}">`);
    // The only element with an href is the console link.
    expect(mail.html.match(/href=/g)).toHaveLength(1);
  });

  it('keeps a subject on one line whatever the data holds', () => {
    const data = { ...EVENT_DATA_EXAMPLES['exception.revoked'], vuln_id: 'CVE-1\r\nBcc: victim@example.com' };
    const mail = mailMessage(eventOf('exception.revoked', data));
    expect(mail.subject).toBe('Policy exception for CVE-1 Bcc: victim@example.com revoked in tenant acme');
    expect(mail.subject).not.toMatch(/[\r\n]/);
  });
});
