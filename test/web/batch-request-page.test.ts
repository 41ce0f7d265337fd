// A sign_batch held as one request, as an approver sees it in the console (src/web/request-pages.ts): the page
// says it is a batch, how many digests, their SHA-256 and the first ten; Approve there signs every digest, and the
// requester collects them all with sign_batch. Over real HTTP: the test IdP (oidc-provider) signs the approver in,
// and the browser-like jar submits the page's own form (with its CSRF token).
import { createHash, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApproverStand } from '../helpers/approver-stand.js';
import { BrowserJar } from '../helpers/browser-jar.js';
import type { OidcStand } from '../helpers/oidc-service.js';
import { callAction } from '../helpers/service.js';

let stand: OidcStand;

beforeAll(async () => {
  stand = await startApproverStand();
}, 120_000);
afterAll(async () => stand?.close());

describe('a held batch in the console', () => {
  it('shows the batch, its count and digests; Approve there signs every digest for the requester', async () => {
    const signer = await stand.svc.apiKey('signer', 'acme');
    const messages = Array.from({ length: 14 }, (_, i) => Buffer.from(`console batch file ${i}`));
    const hashes = messages.map((m) => createHash('sha256').update(m).digest('base64'));
    const held = await callAction(stand.svc.app, signer, 'sign_batch', {
      tenant_id: 'acme',
      algorithm: 'ECDSA_SHA_256',
      hashes,
      environment: 'production',
    });
    expect(held.status, JSON.stringify(held.body)).toBe(202);
    const requestId = held.body.request_id as string;

    const jar = new BrowserJar();
    const page = await jar.signInAtIdp(await jar.go(`${stand.base}/console/requests`), 'carol');
    expect(page.status).toBe(200);
    const start = page.html.indexOf(`<article aria-labelledby="req-${requestId}">`);
    expect(start).toBeGreaterThanOrEqual(0);
    const article = page.html.slice(start, page.html.indexOf('</article>', start));
    const all = createHash('sha256');
    for (const h of hashes) all.update(Buffer.from(h, 'base64'));
    expect(article).toContain(`<dt>Batch</dt><dd>14 digests (ECDSA_SHA_256), approved and signed together`);
    expect(article).toContain(`<code>${all.digest('hex')}</code>`);
    for (const h of hashes.slice(0, 10)) expect(article).toContain(`<code>${h}</code>`);
    expect(article).not.toContain(`<code>${hashes[10]}</code>`);
    expect(article).toContain('and 4 more');

    // The request's own form (the page has one per request, and others), submitted with its Approve button.
    const forms = [...page.html.matchAll(/<form[^>]*action="([^"]*)"[^>]*>([\s\S]*?)<\/form>/g)];
    const formIndex = forms.findIndex((f) => (f[2] as string).includes(`value="${requestId}"`));
    expect(formIndex).toBeGreaterThanOrEqual(0);
    const decided = await jar.submit(page, { decision: 'approve' }, formIndex);
    expect(decided.status).toBeLessThan(400);
    expect((await stand.svc.store.requests.get('acme', requestId))?.status).toBe('approved');
    const collected = await callAction(stand.svc.app, signer, 'sign_batch', {
      tenant_id: 'acme',
      hashes,
      request_id: requestId,
    });
    expect(collected.status, JSON.stringify(collected.body)).toBe(200);
    const pem = (await callAction(stand.svc.app, signer, 'get_public_key', { tenant_id: 'acme' })).body
      .public_key_pem as string;
    const results = collected.body.results as Array<{ signature: string }>;
    for (const [i, r] of results.entries()) {
      expect(verify('sha256', messages[i] as Buffer, pem, Buffer.from(r.signature, 'base64'))).toBe(true);
    }
  });
});
