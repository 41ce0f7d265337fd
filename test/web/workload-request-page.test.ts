// Issue 22: the console's request page shows the approver who asked when a CI job did: issuer, subject, repository,
// ref, workflow, the run (a link to it when the issuer's run pages are known) and the commit, all escaped. Over real
// HTTP without a browser: the test IdP (oidc-provider) signs the approver in, and the page's HTML is read.
// The workload key is made directly with createWorkloadApiKey and a hand-built WorkloadIdentity, the record the
// token exchange (built on the ci-exchange branch) stores.
import { createHash, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWorkloadApiKey } from '../../src/auth/api-keys.js';
import { runUrlOf, type WorkloadFacts, type WorkloadIdentity } from '../../src/auth/workload/workload-identity.js';
import { startApproverStand } from '../helpers/approver-stand.js';
import { BrowserJar } from '../helpers/browser-jar.js';
import type { OidcStand } from '../helpers/oidc-service.js';
import { callAction } from '../helpers/service.js';

const GITHUB = 'https://token.actions.githubusercontent.com';
let stand: OidcStand;

beforeAll(async () => {
  stand = await startApproverStand();
}, 120_000);
afterAll(async () => stand?.close());

async function heldByJob(facts: WorkloadFacts, message: string): Promise<string> {
  const runUrl = runUrlOf('github', GITHUB, facts);
  const identity: WorkloadIdentity = {
    issuer: GITHUB,
    subject: `repo:${facts.project}:environment:production`,
    kind: 'github',
    ruleId: 'tr_0123456789abcdef',
    tokenId: randomUUID(),
    facts,
    ...(runUrl && { runUrl }),
  };
  const key = await createWorkloadApiKey(stand.svc.store, {
    tenantId: 'acme',
    role: 'signer',
    expiresAt: new Date(Date.now() + 15 * 60_000),
    identity,
  });
  const res = await callAction(stand.svc.app, key.token, 'sign', {
    tenant_id: 'acme',
    algorithm: 'ECDSA_SHA_256',
    hash: createHash('sha256').update(message).digest('base64'),
  });
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  return res.body.request_id as string;
}

/** The HTML of one request's article on the approver's request page. */
function articleOf(html: string, requestId: string): string {
  const start = html.indexOf(`<article aria-labelledby="req-${requestId}">`);
  expect(start, `request ${requestId} is on the page`).toBeGreaterThanOrEqual(0);
  return html.slice(start, html.indexOf('</article>', start));
}

describe('the request page and a CI job', () => {
  it("shows the approver the job's issuer, subject, repository, ref, workflow, run link and commit, escaped", async () => {
    const id = await heldByJob(
      {
        project: 'acme/app',
        environment: 'production',
        ref: 'refs/heads/main',
        refProtected: true,
        workflow: 'acme/app/.github/workflows/release.yml@refs/heads/main',
        sha: 'c0ffee0000000000000000000000000000000001',
        runId: '31337',
        runAttempt: '2',
        runnerEnvironment: 'github-hosted',
      },
      'release page',
    );
    // A fact with markup in it (a workflow path is whatever the repository names it) is shown as text.
    const hostile = await heldByJob(
      {
        project: 'acme/app',
        environment: 'production',
        ref: 'refs/heads/<img src=x onerror=alert(1)>',
        workflow: 'acme/app/.github/workflows/"><script>alert(1)</script>.yml@refs/heads/main',
        runId: '5',
      },
      'hostile page',
    );

    const jar = new BrowserJar();
    const page = await jar.signInAtIdp(await jar.go(`${stand.base}/console/requests`), 'carol');
    expect(page.status).toBe(200);
    expect(new URL(page.url).pathname).toBe('/console/requests');

    const article = articleOf(page.html, id);
    expect(article).toContain(`<dt>CI issuer</dt><dd>${GITHUB}</dd>`);
    expect(article).toContain('<code>repo:acme/app:environment:production</code>');
    expect(article).toContain('<dt>Repository</dt><dd>acme/app</dd>');
    expect(article).toContain('<dt>Ref</dt><dd>refs/heads/main (protected)</dd>');
    expect(article).toContain('<dt>Workflow</dt><dd>acme/app/.github/workflows/release.yml@refs/heads/main</dd>');
    expect(article).toContain(
      '<a href="https://github.com/acme/app/actions/runs/31337/attempts/2" rel="noreferrer">31337 (attempt 2)</a>',
    );
    expect(article).toContain('<code>c0ffee0000000000000000000000000000000001</code>');
    expect(article).toContain('<dt>Runner</dt><dd>github-hosted</dd>');

    const shown = articleOf(page.html, hostile);
    expect(shown).not.toContain('<script>');
    expect(shown).not.toContain('<img');
    expect(shown).toContain('refs/heads/&lt;img src=x onerror=alert(1)&gt;');
    expect(shown).toContain('&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;.yml');
    // The link is built from the project and the run id only (runUrlOf), never from the hostile facts.
    expect(shown).toContain('<a href="https://github.com/acme/app/actions/runs/5" rel="noreferrer">5</a>');
  });
});
