// A pure Ed25519 request (ED25519_SHA_512: the message itself) that the policy would hold for a person's decision
// cannot be held: the record would have to keep the message to sign it on approval, and it keeps only its SHA-512.
// So it is refused, and the refusal is recorded like any denial (src/signing/decision-step.ts): a `denied` audit
// entry naming the holding rule, the algorithm and the message's SHA-512, and a signature.denied event; nothing is
// held or signed. Shown at the doors that carry a message: KMS (`MessageType: RAW`, the JS SDK v3) and Vault
// transit (an ed25519 key's `input`, and each item of a `batch_input`), each in its own error shape. The same
// request signed as Ed25519ph (the SHA-512 DIGEST) is held as usual.

import { createHash } from 'node:crypto';
import { KMSClient, SignCommand } from '@aws-sdk/client-kms';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import type { PolicyEngine, PolicyInput } from '../../src/policy/policy.js';
import type { AuditEntry } from '../../src/store/store.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

/** Every request of tenant ed-held waits for a second person. */
const policy: PolicyEngine = {
  async evaluate(input: PolicyInput) {
    if (input.tenantId === 'ed-held') {
      return { outcome: 'pending_approval', rule: 'two-person', reason: 'needs a second person' };
    }
    return { outcome: 'allow', rule: 'default', reason: 'allowed' };
  },
};

let svc: TestService;
let endpoint: string;
let vaultToken: string;

beforeAll(async () => {
  svc = await startTestService({ policy, kmsApi: { enabled: true, heldWaitMs: 0, vaultMount: 'transit' } });
  const made = await callAction(svc.app, svc.operator, 'create_tenant', {
    tenant_id: 'ed-held',
    key_spec: 'ECC_NIST_EDWARDS25519',
  });
  expect(made.status, JSON.stringify(made.body)).toBe(201);
  vaultToken = await svc.apiKey('signer', 'ed-held');
  endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
}, 120_000);
afterAll(async () => svc?.close());

const sha512 = (data: Buffer) => createHash('sha512').update(data).digest().toString('base64');

/** The tenant's audit entries after `seq`, in order. */
async function entriesAfter(seq: number): Promise<AuditEntry[]> {
  return (await svc.store.audit.read(seq, 1_000_000)).filter((e) => e.tenantId === 'ed-held');
}

async function lastSeq(): Promise<number> {
  const rows = await svc.run<{ n: number | null }>(sql`SELECT max(seq) AS n FROM audit_log`);
  return Number(rows[0]?.n ?? 0);
}

async function heldRequests(): Promise<number> {
  const rows = await svc.run<{ n: number }>(
    sql`SELECT count(*) AS n FROM pending_requests WHERE tenant_id = 'ed-held'`,
  );
  return Number(rows[0]?.n);
}

async function deniedEvents(): Promise<Array<Record<string, unknown>>> {
  const rows = await svc.run<{ data: string }>(
    sql`SELECT data FROM event_outbox WHERE type = 'signature.denied' AND tenant_id = 'ed-held' ORDER BY seq`,
  );
  return rows.map((r) => JSON.parse(r.data));
}

/** The one `denied` entry a refused pure Ed25519 request leaves, and nothing signed or held beside it. */
function expectRecordedDenial(entries: AuditEntry[], message: Buffer, via: string): void {
  expect(entries.map((e) => e.outcome)).toEqual(['denied']);
  expect(entries[0]?.details).toMatchObject({
    algorithm: 'ED25519_SHA_512',
    hash: sha512(message),
    rule: 'two-person',
    reason: expect.stringContaining('cannot be held'),
    via: expect.objectContaining({ api: via }),
  });
}

describe('a pure Ed25519 request the policy would hold', () => {
  it('KMS (RAW): AccessDeniedException, one denied entry under the SHA-512 of the message, nothing held', async () => {
    const made = await createAwsApiKey(svc.store, svc.keyStore, 'signer', 'ed-held', 'held-pure');
    const kms = new KMSClient({
      endpoint,
      region: 'eu-central-1',
      credentials: { accessKeyId: made.accessKeyId, secretAccessKey: made.secretAccessKey },
      maxAttempts: 1,
    });
    const message = Buffer.from('a release that needs a second person');
    const from = await lastSeq();
    const eventsBefore = (await deniedEvents()).length;
    try {
      const refused = await kms
        .send(
          new SignCommand({
            KeyId: 'alias/ed-held',
            Message: message,
            MessageType: 'RAW',
            SigningAlgorithm: 'ED25519_SHA_512',
          }),
        )
        .then(
          () => undefined,
          (err: Error) => err,
        );
      expect(refused?.name).toBe('AccessDeniedException');
      expect(refused?.message).toContain('cannot be held');
    } finally {
      kms.destroy();
    }
    expectRecordedDenial(await entriesAfter(from), message, 'aws-kms');
    expect(await heldRequests()).toBe(0);
    const events = await deniedEvents();
    expect(events).toHaveLength(eventsBefore + 1);
    expect(JSON.stringify(events.at(-1))).toContain('cannot be held');
  });

  it('Vault transit (input): 403 in Vault shape, one denied entry; each batch_input item its own', async () => {
    const message = Buffer.from('a vault-signed release');
    const sign = (body: Record<string, unknown>) =>
      svc.app.inject({
        method: 'POST',
        url: '/v1/transit/sign/ed-held',
        headers: { 'x-vault-token': vaultToken },
        payload: body,
      });
    let from = await lastSeq();
    const one = await sign({ input: message.toString('base64') });
    expect(one.statusCode).toBe(403);
    expect(one.json().errors).toEqual([
      expect.stringMatching(/^signing denied by signbridge policy: .*cannot be held/),
    ]);
    expectRecordedDenial(await entriesAfter(from), message, 'vault-transit');

    from = await lastSeq();
    const second = Buffer.from('second item');
    const batch = await sign({
      batch_input: [{ input: message.toString('base64') }, { input: second.toString('base64') }],
    });
    const results = batch.json().data?.batch_results ?? batch.json().errors;
    expect(JSON.stringify(results)).toContain('cannot be held');
    const entries = await entriesAfter(from);
    expect(entries.map((e) => e.outcome)).toEqual(['denied', 'denied']);
    expect(entries.map((e) => e.details.hash)).toEqual([sha512(message), sha512(second)]);
    expect(await heldRequests()).toBe(0);
  });

  it('the same message as its SHA-512 DIGEST (Ed25519ph) is held, not refused', async () => {
    const from = await lastSeq();
    const signer = await svc.apiKey('signer', 'ed-held');
    const held = await callAction(svc.app, signer, 'sign', {
      tenant_id: 'ed-held',
      algorithm: 'ED25519_PH_SHA_512',
      hash: sha512(Buffer.from('a release that needs a second person')),
    });
    expect(held.status, JSON.stringify(held.body)).toBe(202);
    expect((await entriesAfter(from)).map((e) => e.outcome)).not.toContain('denied');
    expect(await heldRequests()).toBe(1);
  });
});
