// The whole path of a person, with every part real: `signbridge login --no-browser` in a child process, the person
// in Chromium entering the code, signing in at the IdP (oidc-provider) and confirming; the CLI storing the key; a
// `signbridge daemon` (child process) started from that login alone; pkcs11-tool signing through the PKCS#11 module
// for production, which the policy holds for approval; the requester refused when approving her own request in the
// console; another person approving it there; and the waiting C_Sign returning a signature openssl verifies.
// Events on the way (issue 24): the tenant's Slack-format subscription gets the held request's message with the
// console link (a real receiver on 127.0.0.1, allowed as an operator's webhooks.allow would), Carol opens that link
// to approve, and the signature.signed message arrives once the module has its signature.
import { execFile, spawn } from 'node:child_process';
import { createPublicKey } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ckaIdFor } from '../../daemon/key-id.js';
import { MODULE_PATH } from '../../src/cli/module-path.js';
import { destinations } from '../../src/events/destinations.js';
import type { Deliver } from '../../src/events/dispatcher.js';
import { addSubscription } from '../../src/events/subscription-service.js';
import { parsePolicyDocument } from '../../src/policy/policy-file.js';
import { RulesPolicyEngine } from '../../src/policy/rules-engine.js';
import { ensurePeercredBuilt, tempDir } from '../daemon/helpers.js';
import { launchBrowser, signInAtIdp, type TestBrowser } from '../helpers/browser.js';
import { CLI } from '../helpers/cli.js';
import { loginEnv, startCli } from '../helpers/cli-child.js';
import { type OidcStand, startOidcStand } from '../helpers/oidc-service.js';
import { callAction, type TestService } from '../helpers/service.js';
import type { TestIdp } from '../helpers/test-idp.js';
import { waitFor } from '../helpers/wait.js';
import { WebhookReceiver } from '../helpers/webhook-receiver.js';
import { waitForSocket } from '../module/harness.js';

const run = promisify(execFile);
const ACCOUNTS = {
  alice: { email: 'alice@example.com', email_verified: true, name: 'Alice' },
  carol: { email: 'carol@example.com', email_verified: true, name: 'Carol' },
};

let stand: OidcStand;
let idp: TestIdp;
let svc: TestService;
let browser: TestBrowser;
let base = '';
let dir = '';
let env: NodeJS.ProcessEnv;
let socket = '';
let daemonLog = '';
let stopDaemon: (() => Promise<void>) | undefined;
const chat = new WebhookReceiver();
let deliver: Deliver;
/** The Slack-format messages received, as text (title, facts and the console link). */
const chatMessages = () => chat.attempts.filter((a) => a.status === 200).map((a) => JSON.stringify(a.body));

const policy = new RulesPolicyEngine(
  parsePolicyDocument('version: 1\nrules:\n  environments:\n    requireApproval: [production]\n', 'test'),
);

beforeAll(async () => {
  ensurePeercredBuilt();
  stand = await startOidcStand({
    accounts: ACCOUNTS,
    tenants: ['acme'],
    invitations: [
      // Alice builds and may also approve (others' requests); Carol approves.
      { email: 'alice@example.com', tenant: 'acme', role: 'signer' },
      { email: 'alice@example.com', tenant: 'acme', role: 'approver' },
      { email: 'carol@example.com', tenant: 'acme', role: 'approver' },
    ],
    app: {
      policy,
      eventDelivery: { deliver: (claim) => deliver(claim), settings: { pollMs: 50, idlePollMaxMs: 200 } },
    },
  });
  ({ idp, svc, base } = stand);
  await chat.start();
  deliver = destinations(svc.store, { webhooks: { allow: ['127.0.0.1'] } });
  await addSubscription(
    svc.store,
    { tenantId: 'acme', url: chat.url, format: 'slack', eventKinds: ['signature.pending', 'signature.signed'] },
    { actor: 'test', via: 'cli' },
    async () => undefined,
  );
  browser = await launchBrowser();
  dir = tempDir('sb-web-login-');
  socket = join(dir, 'run', 'daemon.sock');
  env = loginEnv(dir);
}, 120_000);

afterAll(async () => {
  await stopDaemon?.();
  await browser?.close();
  await stand?.close();
  await chat.stop();
});

/** The request the module waits on; fails at once if the signing tool ended first (its error says why). */
async function pendingRequestId(tool: { ended?: unknown }): Promise<string> {
  for (let i = 0; i < 900; i++) {
    if (tool.ended) throw new Error(`pkcs11-tool ended before a request was held: ${String(tool.ended)}`);
    const [pending] = await svc.store.requests.listPending('acme');
    if (pending) return pending.id;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no pending request appeared; daemon log:\n${daemonLog}`);
}

describe('signbridge login, the daemon, the module and an approval in the console', () => {
  let alice: Page;

  // Generous limits: several processes and a browser share two loaded cores; nothing here measures time.
  it(
    'the device flow end to end: the CLI gets a key once the person confirms in the browser',
    { timeout: 180_000 },
    async () => {
      const cli = startCli(['login', '--service-url', base, '--no-browser', '--tenant', 'acme'], env);
      await cli.waitForStderr(/confirm the code: +[A-Z]{4}-[A-Z]{4}/, 120_000);
      const userCode = /confirm the code: +([A-Z]{4}-[A-Z]{4})/.exec(cli.stderr())?.[1] as string;
      const verificationUri = /open this page[^\n]*\n\s+(\S+)/.exec(cli.stderr())?.[1] as string;
      expect(verificationUri).toBe(`${base}/oauth/device`);

      alice = await (await browser.newContext()).newPage();
      await alice.goto(verificationUri);
      await signInAtIdp(alice, idp.issuer, 'alice');
      await alice.getByLabel('Code shown on the device').fill(userCode.toLowerCase().replace('-', ' '));
      await alice.getByRole('button', { name: 'Continue' }).click();
      expect(await alice.locator('h1').textContent()).toBe('Confirm the device sign-in');
      expect(await alice.locator('[aria-label="code"]').textContent()).toBe(userCode);
      expect(await alice.locator('main').textContent()).toContain('alice@example.com');
      await alice.getByRole('button', { name: 'Confirm' }).click();
      expect(await alice.locator('h1').textContent()).toBe('Device signed in');

      const done = await cli.done;
      expect(done.code, done.stderr).toBe(0);
      expect(done.stderr).toContain('Signed in: alice@example.com, tenant acme (signer, approver)');
    },
  );

  it(
    'the daemon serves that login; C_Sign waits for approval; self-approval is refused; another person approves',
    { timeout: 180_000 },
    async () => {
      const config = join(dir, 'daemon.yaml');
      writeFileSync(config, `socket: ${socket}\nlogLevel: info\napprovalWaitSeconds: 1\n`);
      const daemon = spawn(process.execPath, [CLI, 'daemon', '--config', config], { env: { ...process.env, ...env } });
      daemon.stderr.on('data', (c: Buffer) => {
        daemonLog += c.toString();
      });
      const exited = new Promise<void>((resolve) => daemon.once('exit', () => resolve()));
      stopDaemon = async () => {
        if (daemon.exitCode === null) {
          daemon.kill('SIGTERM');
          await exited;
        }
      };
      await waitForSocket(socket).catch((err: Error) => {
        throw new Error(`${err.message}\n${daemonLog}`);
      });

      const admin = await svc.apiKey('admin', 'acme');
      const pub = await callAction(svc.app, admin, 'get_public_key', { tenant_id: 'acme' });
      const pemFile = join(dir, 'acme.pem');
      writeFileSync(
        pemFile,
        createPublicKey(pub.body.public_key_pem as string).export({ type: 'spki', format: 'pem' }),
      );
      writeFileSync(join(dir, 'msg'), 'release 3.0 of payments');
      await run('openssl', ['dgst', '-sha256', '-binary', '-out', join(dir, 'digest'), join(dir, 'msg')]);
      const id = ckaIdFor(pub.body.key_id as string).toString('hex');

      // pkcs11-tool in a child process: its C_Sign blocks there while this process serves the console.
      const signing = run(
        'pkcs11-tool',
        [
          ...['--module', MODULE_PATH, '--token-label', 'acme', '--sign', '--id', id, '-m', 'ECDSA'],
          ...['--signature-format', 'openssl', '--input-file', join(dir, 'digest'), '--output-file', join(dir, 'sig')],
        ],
        {
          env: {
            ...process.env,
            SIGNBRIDGE_SOCKET: socket,
            SIGNBRIDGE_ENVIRONMENT: 'production',
            SIGNBRIDGE_PROJECT: 'payments',
            SIGNBRIDGE_POLL_INTERVAL_MS: '200',
            SIGNBRIDGE_APPROVAL_TIMEOUT: '120',
          },
          encoding: 'utf8',
          timeout: 120_000,
        },
      );
      const tool: { ended?: unknown } = {};
      signing.then(
        () => {
          tool.ended = 'it returned';
        },
        (err: Error) => {
          tool.ended = err.message;
        },
      );
      const requestId = await pendingRequestId(tool);
      const held = await svc.store.requests.get('acme', requestId);
      const alicePerson = (await svc.store.people.findByEmail('alice@example.com'))[0];
      expect((await svc.store.apiKeys.get(held?.requester as string))?.personId).toBe(alicePerson?.id);

      // Alice holds the approver role, but she asked: the console refuses her (four eyes between people).
      await alice.goto(`${base}/console/requests`);
      const mine = alice.locator('article', { hasText: requestId });
      expect(await mine.textContent()).toContain('alice@example.com');
      await mine.getByRole('button', { name: `Approve ${requestId}` }).click();
      expect(await alice.locator('h1').textContent()).toBe('Not allowed');
      expect(await alice.locator('main').textContent()).toContain('self_approval');
      expect((await svc.store.requests.get('acme', requestId))?.status).toBe('pending_approval');

      // The approvers' chat got one message about it, with the console link; Carol follows it.
      await waitFor('the chat message about the held request', () => chatMessages().some((m) => m.includes(requestId)));
      const [message] = chatMessages().filter((m) => m.includes(requestId));
      expect(message).toContain('Signature waiting for approval in tenant acme');
      const link = `${base}/console/requests#req-${requestId}`;
      expect(message).toContain(link);

      // Carol signs in to the console in her own browser, from the link, and approves.
      const carol = await (await browser.newContext()).newPage();
      await carol.goto(link);
      await signInAtIdp(carol, idp.issuer, 'carol');
      const article = carol.locator('article', { hasText: requestId });
      await article.getByLabel(/^Reason/).fill('release checklist done');
      await article.getByRole('button', { name: `Approve ${requestId}` }).click();
      expect(await carol.getByRole('status').textContent()).toMatch(/^Approved/);

      const signed = await signing;
      expect(signed.stderr + signed.stdout).not.toMatch(/error/i);
      const verified = await run('openssl', [
        ...['dgst', '-sha256', '-verify', pemFile, '-signature', join(dir, 'sig'), join(dir, 'msg')],
      ]);
      expect(verified.stdout.trim()).toBe('Verified OK');

      const decided = await svc.store.requests.get('acme', requestId);
      const carolPerson = (await svc.store.people.findByEmail('carol@example.com'))[0];
      expect(decided?.status).toBe('approved');
      expect(decided?.decisions).toMatchObject([
        { decision: 'approve', by_person: carolPerson?.id, reason: 'release checklist done' },
      ]);
      // And the chat hears that the signature was made: once, after the pending message, and nothing else.
      await waitFor(
        'the signature.signed message',
        () => chatMessages().filter((m) => m.includes(requestId)).length >= 2,
      );
      const about = chatMessages().filter((m) => m.includes(requestId));
      expect(about).toHaveLength(2);
      expect(about[1]).toContain('Signature made after approval in tenant acme');
    },
  );
});
