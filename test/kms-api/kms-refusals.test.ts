// What a KMS client is refused, through boto3 (Debian's python3-boto3) against the real service: a wrong secret, a
// revoked key, a clock 6 minutes off, another tenant's key, a retired key version, a denied signature, and one held
// for approval, approved through the API, whose repeated call then gets the signature; another tenant's alias is not
// found, exactly like an alias that names nothing. Each refusal has KMS's error code, is audited once and signs
// nothing; signatures are checked with node:crypto.

import { createHash, verify as cryptoVerify } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAwsApiKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import type { PolicyDecision, PolicyEngine } from '../../src/policy/policy.js';
import { type Boto3Call, type Boto3Outcome, botocoreMissing, runBoto3Kms } from '../helpers/botocore.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

const missing = botocoreMissing();

/** Decides by tenant, so that a KMS call (which states no policy inputs) meets each outcome. */
const policy: PolicyEngine = {
  async evaluate(input): Promise<PolicyDecision> {
    if (input.tenantId === 'held-team')
      return { outcome: 'pending_approval', rule: 'release-needs-approval', reason: 'a person approves releases' };
    if (input.tenantId === 'denied-team') {
      return {
        outcome: 'deny',
        rule: 'no-vulnerable-builds',
        reason: 'the build has a known vulnerability',
        vulnId: 'GHSA-test-0001',
        fixVersion: '2.0.1',
      };
    }
    return { outcome: 'allow', rule: 'default', reason: 'allowed' };
  },
};

let svc: TestService;
let endpoint: string;
let clockOffsetMs = 0;
const creds: Record<string, { access_key: string; secret_key: string }> = {};
const publicPem: Record<string, string> = {};
const digest = createHash('sha256').update('artifact').digest();

async function awsKey(tenant: string, role: 'signer' | 'admin' = 'signer') {
  const made = await createAwsApiKey(svc.store, svc.keyStore, role, tenant, `test ${tenant}`);
  return { access_key: made.accessKeyId, secret_key: made.secretAccessKey, id: made.record.id };
}

function signCall(
  name: string,
  who: { access_key: string; secret_key: string },
  keyId: string,
  extra: Partial<Boto3Call> = {},
): Boto3Call {
  return {
    name,
    ...who,
    region: 'eu-west-1',
    op: 'sign',
    params: {
      KeyId: keyId,
      Message: digest.toString('base64'),
      MessageType: 'DIGEST',
      SigningAlgorithm: 'ECDSA_SHA_256',
    },
    ...extra,
  };
}

/** The secret with its last character changed (to 'x', or 'y' when it was 'x': the same secret would sign). */
function otherLastCharacter(secret: string): string {
  return `${secret.slice(0, -1)}${secret.endsWith('x') ? 'y' : 'x'}`;
}

function answerOf(outcome: Boto3Outcome | undefined): Record<string, unknown> {
  if (!outcome?.ok) throw new Error(`the call failed: ${JSON.stringify(outcome)}`);
  return outcome.answer;
}

async function signedEntries(): Promise<number> {
  const rows = await svc.run<{ n: number }>(sql`SELECT count(*) AS n FROM audit_log WHERE outcome = 'signed'`);
  return Number(rows[0]!.n);
}

async function refusalsAudited(accessKeyId: string): Promise<{ tenant_id: string | null; details: string }[]> {
  return svc.run(
    sql`SELECT tenant_id, details FROM audit_log WHERE action = 'kms_request' AND actor = ${`aws:${accessKeyId}`}`,
  );
}

beforeAll(async () => {
  if (missing) return;
  svc = await startTestService({
    policy,
    now: () => new Date(Date.now() + clockOffsetMs),
    kmsApi: { enabled: true, heldWaitMs: 1500, vaultMount: 'transit' },
  });
  for (const tenant of ['team-a', 'team-b', 'held-team', 'denied-team']) {
    expect(
      (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: tenant, key_spec: 'ECC_NIST_P256' }))
        .status,
    ).toBe(201);
    creds[tenant] = await awsKey(tenant);
    const admin = await svc.apiKey('admin', tenant);
    publicPem[tenant] = (await callAction(svc.app, admin, 'get_public_key', { tenant_id: tenant })).body
      .public_key_pem as string;
  }
  endpoint = await svc.app.listen({ host: '127.0.0.1', port: 0 });
});
afterAll(async () => svc?.close());

describe.skipIf(missing)('KMS refusals with boto3', () => {
  it('signs with the right key and names the audit entry in Signbridge-Log-Index', async () => {
    const out = await runBoto3Kms(endpoint, [signCall('ok', creds['team-a']!, 'alias/team-a')]);
    const ok = out.ok!;
    expect(ok.ok).toBe(true);
    if (!ok.ok) return;
    const signature = Buffer.from(ok.answer.Signature as string, 'base64');
    expect(cryptoVerify('sha256', Buffer.from('artifact'), publicPem['team-a']!, signature)).toBe(true);
    const index = Number(ok.headers['signbridge-log-index']);
    // Read through the store: on SQLite the row holds its details packed (migration 0032).
    const [entry] = await svc.store.audit.read(index, 1);
    expect(entry).toMatchObject({ seq: index + 1, action: 'sign', outcome: 'signed' });
    expect(entry?.details.via).toEqual({
      api: 'aws-kms',
      region: 'eu-west-1',
      access_key_id: creds['team-a']!.access_key,
      message_type: 'DIGEST',
    });
  });

  it("refuses a wrong secret, a revoked key and another tenant's key, audits each once and signs nothing", async () => {
    const revoked = await awsKey('team-a');
    expect(await svc.store.apiKeys.revoke(revoked.id, new Date().toISOString())).toBe(true);
    const before = await signedEntries();
    const teamB = await svc.store.tenants.currentKey('team-b');
    const out = await runBoto3Kms(endpoint, [
      signCall(
        'wrong secret',
        { ...creds['team-a']!, secret_key: otherLastCharacter(creds['team-a']!.secret_key) },
        'alias/team-a',
      ),
      signCall('revoked', revoked, 'alias/team-a'),
      signCall('other tenant alias', creds['team-a']!, 'alias/team-b'),
      signCall('other tenant key arn', creds['team-a']!, `arn:aws:kms:eu-west-1:team-b:key/${teamB!.id}`),
    ]);
    expect(out['wrong secret']).toMatchObject({ ok: false, code: 'InvalidSignatureException', status: 400 });
    expect(out.revoked).toMatchObject({ ok: false, code: 'UnrecognizedClientException', status: 400 });
    // An alias is a name in the caller's own account (as at AWS): another tenant's is not found there.
    expect(out['other tenant alias']).toMatchObject({
      ok: false,
      code: 'NotFoundException',
      status: 400,
      message: 'Alias arn:aws:kms:eu-west-1:team-a:alias/team-b is not found.',
    });
    expect(out['other tenant key arn']).toMatchObject({ ok: false, code: 'AccessDeniedException', status: 400 });
    expect((out['other tenant key arn'] as { message: string }).message).toMatch(
      /not authorized to perform: kms:Sign on resource: arn:aws:kms:eu-west-1:team-b:/,
    );
    expect(await signedEntries()).toBe(before);

    const wrongSecret = await refusalsAudited(creds['team-a']!.access_key);
    expect(wrongSecret).toHaveLength(1);
    expect(wrongSecret[0]!.tenant_id).toBe('team-a');
    expect(JSON.parse(wrongSecret[0]!.details)).toMatchObject({
      error: 'InvalidSignatureException',
      operation: 'Sign',
    });
    expect(await refusalsAudited(revoked.access_key)).toHaveLength(1);
    for (const row of [...wrongSecret]) expect(row.details).not.toContain(creds['team-a']!.secret_key);
  });

  it("answers another tenant's alias exactly as one that names nothing: NotFoundException, whichever operation", async () => {
    const a = creds['team-a']!;
    const names = {
      existing: 'alias/team-b',
      absent: 'alias/no-such-tenant',
      'existing arn': 'arn:aws:kms:eu-west-1:team-b:alias/team-b',
      'absent arn': 'arn:aws:kms:eu-west-1:no-such-tenant:alias/no-such-tenant',
    };
    const calls: Boto3Call[] = Object.entries(names).flatMap(([name, keyId]) => [
      signCall(`sign ${name}`, a, keyId),
      { name: `describe ${name}`, ...a, region: 'eu-west-1', op: 'describe_key', params: { KeyId: keyId } },
      { name: `public key ${name}`, ...a, region: 'eu-west-1', op: 'get_public_key', params: { KeyId: keyId } },
    ]);
    const out = await runBoto3Kms(endpoint, calls);
    const shape = (outcome: Boto3Outcome | undefined, tenant: string) => {
      expect(outcome).toMatchObject({ ok: false, status: 400 });
      const refused = outcome as { code: string; message: string };
      // The answer with the tenant's name taken out: what tells the two apart, if anything did.
      return { code: refused.code, message: refused.message.replaceAll(tenant, '<name>') };
    };
    for (const op of ['sign', 'describe', 'public key']) {
      const existing = shape(out[`${op} existing`], 'team-b');
      expect(existing).toEqual({
        code: 'NotFoundException',
        message: 'Alias arn:aws:kms:eu-west-1:team-a:alias/<name> is not found.',
      });
      expect(shape(out[`${op} absent`], 'no-such-tenant')).toEqual(existing);
      const existingArn = shape(out[`${op} existing arn`], 'team-b');
      expect(existingArn).toEqual({
        code: 'NotFoundException',
        message: 'Alias arn:aws:kms:eu-west-1:<name>:alias/<name> is not found.',
      });
      expect(shape(out[`${op} absent arn`], 'no-such-tenant')).toEqual(existingArn);
    }
  });

  it('refuses a request signed with a clock 6 minutes off, either way', async () => {
    for (const offset of [6 * 60_000, -6 * 60_000]) {
      clockOffsetMs = offset;
      try {
        const out = await runBoto3Kms(endpoint, [signCall('skewed', creds['team-b']!, 'alias/team-b')]);
        expect(out.skewed).toMatchObject({ ok: false, code: 'InvalidSignatureException' });
        expect((out.skewed as { message: string }).message).toMatch(
          offset > 0 ? /^Signature expired/ : /^Signature not yet current/,
        );
      } finally {
        clockOffsetMs = 0;
      }
    }
  });

  it('refuses a retired key version (DisabledException) but still verifies with it', async () => {
    const admin = await svc.apiKey('admin', 'team-b');
    const old = await svc.store.tenants.currentKey('team-b');
    const first = await runBoto3Kms(endpoint, [signCall('before rotation', creds['team-b']!, old!.id)]);
    expect(first['before rotation']!.ok).toBe(true);
    expect((await callAction(svc.app, admin, 'rotate_key', { tenant_id: 'team-b' })).status).toBe(200);
    const signature = answerOf(first['before rotation']).Signature as string;
    const out = await runBoto3Kms(endpoint, [
      signCall('retired', creds['team-b']!, old!.id),
      {
        name: 'verify with retired',
        ...creds['team-b']!,
        op: 'verify',
        params: {
          KeyId: old!.id,
          Message: digest.toString('base64'),
          MessageType: 'DIGEST',
          Signature: signature,
          SigningAlgorithm: 'ECDSA_SHA_256',
        },
      },
      { name: 'describe retired', ...creds['team-b']!, op: 'describe_key', params: { KeyId: old!.id } },
    ]);
    expect(out.retired).toMatchObject({ ok: false, code: 'DisabledException' });
    expect(out['verify with retired']).toMatchObject({ ok: true, answer: { SignatureValid: true } });
    expect(out['describe retired']).toMatchObject({
      ok: true,
      answer: { KeyMetadata: { KeyState: 'Disabled', Enabled: false } },
    });
  });

  it('answers a denied signature with AccessDeniedException naming the rule, the reason and the vulnerability', async () => {
    const out = await runBoto3Kms(endpoint, [signCall('denied', creds['denied-team']!, 'alias/denied-team')]);
    expect(out.denied).toMatchObject({ ok: false, code: 'AccessDeniedException' });
    expect((out.denied as { message: string }).message).toMatch(
      /no-vulnerable-builds: the build has a known vulnerability.*GHSA-test-0001, fixed in 2\.0\.1/,
    );
  });

  it('holds a signature for approval: the call fails naming the request, and once approved the same call gets it', async () => {
    const before = await signedEntries();
    const held = await runBoto3Kms(endpoint, [signCall('held', creds['held-team']!, 'alias/held-team')]);
    expect(held.held).toMatchObject({ ok: false, code: 'KMSInvalidStateException' });
    const message = (held.held as { message: string }).message;
    const requestId = /signing request (\S+) is held for approval \(pending_approval\)/.exec(message)?.[1];
    expect(requestId, message).toBeDefined();
    expect(message).toContain('repeat this call');
    expect(await signedEntries()).toBe(before);

    const approver = await svc.apiKey('approver', 'held-team');
    const approved = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 'held-team',
      request_id: requestId,
    });
    expect(approved.status).toBe(200);
    // The approval's `signed` entry names the API and credential the request came through, as its pending entry
    // does (issue 44): the approver only decided it.
    const ofRequest = (
      await svc.run<{ outcome: string; details: string }>(
        sql`SELECT outcome, details FROM audit_log WHERE outcome IN ('pending_approval', 'signed') ORDER BY seq`,
      )
    )
      .map((e) => ({ outcome: e.outcome, details: JSON.parse(e.details) as Record<string, unknown> }))
      .filter((e) => e.details.request_id === requestId);
    expect(ofRequest.map((e) => e.outcome)).toEqual(['pending_approval', 'signed']);
    const kmsVia = {
      api: 'aws-kms',
      region: 'eu-west-1',
      access_key_id: creds['held-team']!.access_key,
      message_type: 'DIGEST',
    };
    expect(ofRequest[0]?.details.via).toEqual(kmsVia);
    expect(ofRequest[1]?.details.via).toEqual(kmsVia);
    const again = await runBoto3Kms(endpoint, [signCall('repeated', creds['held-team']!, 'alias/held-team')]);
    expect(again.repeated!.ok).toBe(true);
    const signature = Buffer.from(answerOf(again.repeated).Signature as string, 'base64');
    expect(cryptoVerify('sha256', Buffer.from('artifact'), publicPem['held-team']!, signature)).toBe(true);
    const rows = await svc.run<{ n: number }>(
      sql`SELECT count(*) AS n FROM pending_requests WHERE tenant_id = 'held-team'`,
    );
    expect(Number(rows[0]!.n)).toBe(1); // the repeated call continued the request, it opened none
  });

  it('holds a signature, and once a person rejects it the same call gets AccessDeniedException at once', async () => {
    const other = createHash('sha256').update('artifact to be rejected').digest().toString('base64');
    const params = {
      KeyId: 'alias/held-team',
      Message: other,
      MessageType: 'DIGEST',
      SigningAlgorithm: 'ECDSA_SHA_256',
    };
    const held = await runBoto3Kms(endpoint, [signCall('held', creds['held-team']!, 'alias/held-team', { params })]);
    expect(held.held).toMatchObject({ ok: false, code: 'KMSInvalidStateException' });
    const requestId = /signing request (\S+) is held/.exec((held.held as { message: string }).message)?.[1];
    const approver = await svc.apiKey('approver', 'held-team');
    const rejected = await callAction(svc.app, approver, 'approve_sign', {
      tenant_id: 'held-team',
      request_id: requestId,
      decision: 'reject',
      reason: 'not this build',
    });
    expect(rejected.status).toBe(200);
    const before = await signedEntries();
    const again = await runBoto3Kms(endpoint, [
      signCall('repeated', creds['held-team']!, 'alias/held-team', { params }),
    ]);
    expect(again.repeated).toMatchObject({ ok: false, code: 'AccessDeniedException' });
    expect((again.repeated as { message: string }).message).toMatch(new RegExp(`${requestId}.*rejected`));
    expect(await signedEntries()).toBe(before);
  });

  it('a call held for approval returns the signature when a person approves while it waits', async () => {
    // A service of its own whose calls wait a minute: the approval below lands within the wait however slow the
    // machine is (the other service's 1.5 s wait would make that a race).
    const waiter = await startTestService({
      policy,
      kmsApi: { enabled: true, heldWaitMs: 60_000, vaultMount: 'transit' },
    });
    try {
      expect(
        (
          await callAction(waiter.app, waiter.operator, 'create_tenant', {
            tenant_id: 'held-team',
            key_spec: 'ECC_NIST_P256',
          })
        ).status,
      ).toBe(201);
      const made = await createAwsApiKey(waiter.store, waiter.keyStore, 'signer', 'held-team', 'waiter');
      const who = { access_key: made.accessKeyId, secret_key: made.secretAccessKey };
      const url = await waiter.app.listen({ host: '127.0.0.1', port: 0 });
      const waiting = runBoto3Kms(url, [signCall('waits', who, 'alias/held-team', { read_timeout: 120 })]);
      let requestId: string | undefined;
      while (requestId === undefined) {
        const rows = await waiter.run<{ id: string }>(
          sql`SELECT id FROM pending_requests WHERE tenant_id = 'held-team'`,
        );
        requestId = rows[0]?.id;
        if (requestId === undefined) await new Promise((r) => setTimeout(r, 50));
      }
      const approver = await waiter.apiKey('approver', 'held-team');
      const approved = await callAction(waiter.app, approver, 'approve_sign', {
        tenant_id: 'held-team',
        request_id: requestId,
      });
      expect(approved.status).toBe(200);
      const out = await waiting;
      expect(out.waits, JSON.stringify(out.waits)).toMatchObject({ ok: true });
      const admin = await waiter.apiKey('admin', 'held-team');
      const pem = (await callAction(waiter.app, admin, 'get_public_key', { tenant_id: 'held-team' })).body
        .public_key_pem as string;
      const signature = Buffer.from(answerOf(out.waits).Signature as string, 'base64');
      expect(cryptoVerify('sha256', Buffer.from('artifact'), pem, signature)).toBe(true);
    } finally {
      await waiter.close();
    }
  });

  it('answers KMS validation errors for what KMS refuses, and UnsupportedOperationException for other operations', async () => {
    const a = creds['team-a']!;
    const out = await runBoto3Kms(endpoint, [
      signCall('short digest', a, 'alias/team-a', {
        params: {
          KeyId: 'alias/team-a',
          Message: Buffer.alloc(20).toString('base64'),
          MessageType: 'DIGEST',
          SigningAlgorithm: 'ECDSA_SHA_256',
        },
      }),
      signCall('rsa algorithm on an EC key', a, 'alias/team-a', {
        params: {
          KeyId: 'alias/team-a',
          Message: digest.toString('base64'),
          MessageType: 'DIGEST',
          SigningAlgorithm: 'RSASSA_PSS_SHA_256',
        },
      }),
      signCall('unknown alias', a, 'alias/nobody'),
      { name: 'encrypt', ...a, op: 'encrypt', params: { KeyId: 'alias/team-a', Plaintext: 'aGk=' } },
    ]);
    expect(out['short digest']).toMatchObject({ ok: false, code: 'ValidationException' });
    expect(out['rsa algorithm on an EC key']).toMatchObject({ ok: false, code: 'InvalidKeyUsageException' });
    expect(out['unknown alias']).toMatchObject({ ok: false, code: 'NotFoundException' });
    expect(out.encrypt).toMatchObject({ ok: false, code: 'UnsupportedOperationException' });
  });
});
