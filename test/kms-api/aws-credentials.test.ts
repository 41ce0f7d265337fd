// AWS-format keys as the KMS endpoint's SigV4 check finds them (src/auth/aws-credentials/): a long-term key answers
// only without a session token, a temporary key only with its own; revoked and expired keys answer nothing; the
// secret is sealed by the real SoftHSM token (no clear copy anywhere in the database file), bound to its row; and
// neither kind works as a Bearer key.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkApiKey } from '../../src/auth/api-keys.js';
import { AwsSecrets, createAwsApiKey, createTemporaryAwsKey } from '../../src/auth/aws-credentials/aws-credentials.js';
import { callAction, startTestService, type TestService } from '../helpers/service.js';

let svc: TestService;
let now = new Date();

beforeAll(async () => {
  svc = await startTestService();
  expect(
    (await callAction(svc.app, svc.operator, 'create_tenant', { tenant_id: 'acme', key_spec: 'ECC_NIST_P256' })).status,
  ).toBe(201);
});
afterAll(async () => svc?.close());

const identity = {
  issuer: 'https://ci.example.com',
  subject: 'repo:acme/app:ref:refs/heads/main',
  kind: 'github' as const,
  ruleId: 'rule-1',
  tokenId: 'jti-1',
  facts: { project: 'acme/app' },
  stableIdentity: 'repo:acme/app',
};

describe('AWS-format keys', () => {
  it('a long-term key gives its secret without a session token, and nothing with one or under the temporary prefix', async () => {
    const secrets = new AwsSecrets(svc.store, svc.keyStore, () => now);
    const made = await createAwsApiKey(svc.store, svc.keyStore, 'signer', 'acme', 'ci');
    expect(made.accessKeyId).toMatch(/^SBAK[0-9A-F]{16}$/);
    expect(made.secretAccessKey).toMatch(/^[A-Za-z0-9+/]{40}$/);
    const found = await secrets.secretFor(made.accessKeyId, undefined);
    expect(found?.secret).toBe(made.secretAccessKey);
    expect(found?.principal).toMatchObject({ id: made.record.id, tenantId: 'acme', role: 'signer' });
    expect(await secrets.secretFor(made.accessKeyId, 'sbst_0000000000000000_x')).toBeUndefined();
    expect(await secrets.secretFor(`SBTK${made.accessKeyId.slice(4)}`, undefined)).toBeUndefined();
    expect(await secrets.secretFor('SBAK0000000000000000', undefined)).toBeUndefined();

    expect(await svc.store.apiKeys.revoke(made.record.id, now.toISOString())).toBe(true);
    expect(await secrets.secretFor(made.accessKeyId, undefined)).toBeUndefined();
  });

  it('a temporary key needs its own session token, and is marked expired at its expiry', async () => {
    const secrets = new AwsSecrets(svc.store, svc.keyStore, () => now);
    const expiresAt = new Date(now.getTime() + 15 * 60_000);
    const made = await createTemporaryAwsKey(svc.store, svc.keyStore, {
      tenantId: 'acme',
      role: 'signer',
      expiresAt,
      identity,
    });
    const other = await createTemporaryAwsKey(svc.store, svc.keyStore, {
      tenantId: 'acme',
      role: 'signer',
      expiresAt,
      identity,
    });
    expect(made.accessKeyId).toMatch(/^SBTK[0-9A-F]{16}$/);
    expect((await secrets.secretFor(made.accessKeyId, made.sessionToken))?.secret).toBe(made.secretAccessKey);
    expect((await secrets.secretFor(made.accessKeyId, made.sessionToken))?.principal.workload).toMatchObject({
      subject: identity.subject,
    });
    expect(await secrets.secretFor(made.accessKeyId, undefined)).toBeUndefined();
    expect(await secrets.secretFor(made.accessKeyId, other.sessionToken)).toBeUndefined();
    const forged = `${made.sessionToken!.slice(0, -1)}${made.sessionToken!.endsWith('A') ? 'B' : 'A'}`;
    expect(await secrets.secretFor(made.accessKeyId, forged)).toBeUndefined();

    // Past its expiry the key is still found, marked expired: the SigV4 check then answers ExpiredTokenException
    // to a holder of the right secret and token (as AWS does), and nothing to anyone else.
    const later = new AwsSecrets(svc.store, svc.keyStore, () => new Date(expiresAt.getTime() + 1));
    expect(await later.secretFor(made.accessKeyId, made.sessionToken)).toMatchObject({ expired: true });
    expect(await later.secretFor(made.accessKeyId, other.sessionToken)).toBeUndefined();
  });

  it('is never a Bearer key: neither the session token nor the secret in the sbk_ form', async () => {
    const made = await createTemporaryAwsKey(svc.store, svc.keyStore, {
      tenantId: 'acme',
      role: 'signer',
      expiresAt: new Date(now.getTime() + 60_000),
      identity,
    });
    const sessionSecret = made.sessionToken!.split('_').at(-1)!;
    const asBearer = `sbk_${made.record.id}_${sessionSecret}`;
    expect(await checkApiKey(svc.store, asBearer, now)).toEqual({ problem: 'API key is invalid or revoked' });
    expect(await checkApiKey(svc.store, made.sessionToken!, now)).toEqual({ problem: 'API key is invalid or revoked' });
  });

  it('keeps the secret sealed: no clear copy in the database file, and a sealed blob moved to another key does not open', async () => {
    const first = await createAwsApiKey(svc.store, svc.keyStore, 'signer', 'acme', 'first');
    const second = await createAwsApiKey(svc.store, svc.keyStore, 'signer', 'acme', 'second');
    if (!svc.database) {
      await svc.run(sql`PRAGMA wal_checkpoint(TRUNCATE)`);
      const file = readFileSync(join(svc.dataDir, 'signbridge.db'));
      expect(file.includes(Buffer.from(first.secretAccessKey))).toBe(false);
    }
    const [row] = await svc.run<{ sealed_secret: string }>(
      sql`SELECT sealed_secret FROM api_keys WHERE id = ${first.record.id}`,
    );
    expect(row!.sealed_secret).not.toContain(first.secretAccessKey);
    await svc.run(sql`UPDATE api_keys SET sealed_secret = ${row!.sealed_secret} WHERE id = ${second.record.id}`);
    await svc.run(sql`UPDATE cache_epoch SET n = n + 1`);
    const secrets = new AwsSecrets(svc.store, svc.keyStore, () => now);
    await expect(secrets.secretFor(second.accessKeyId, undefined)).rejects.toThrow();
    now = new Date();
  });
});
