// What the daemon's key-changed tests (test/daemon/key-changed.test.ts, in-process; remote-key-changed.test.ts,
// over HTTP) share: the key types they rotate, what a refused request must leave as it was, the key id the module
// was shown, and a burst of coalesced signatures with a key id rotated away, each refused KEY_CHANGED.

import { expect } from 'vitest';
import type { Upstream } from '../../daemon/upstream/upstream.js';
import type { KeySpec, SigningAlgorithm } from '../../src/crypto/algorithms.js';
import type { Store } from '../../src/store/store.js';
import type { DaemonClient } from '../../wire/client.js';
import { WireStatus } from '../../wire/wire.js';

export interface KeyChangedCase {
  spec: KeySpec;
  algorithm: SigningAlgorithm;
  digestBytes: number;
}

/**
 * RSA, P-256 and ML-DSA tenants named `<prefix>-rsa`, `<prefix>-p256`, `<prefix>-mldsa` (the daemon's token leaves
 * SM2 keys out). ML-DSA's "digest" is μ, 64 bytes.
 */
export function keyChangedTenants(prefix: string): Record<string, KeyChangedCase> {
  return {
    [`${prefix}-rsa`]: { spec: 'RSA_2048', algorithm: 'RSASSA_PKCS1_V1_5_SHA_256', digestBytes: 32 },
    [`${prefix}-p256`]: { spec: 'ECC_NIST_P256', algorithm: 'ECDSA_SHA_256', digestBytes: 32 },
    [`${prefix}-mldsa`]: { spec: 'ML_DSA_44', algorithm: 'ML_DSA_SHAKE_256', digestBytes: 64 },
  };
}

/** The tenant's `signed` audit entries and signature records: what a refused request must leave as they were. */
export async function signedState(
  store: Pick<Store, 'audit' | 'signatures'>,
  tenant: string,
): Promise<{ signatures: number; signedEntries: number }> {
  const entries = await store.audit.read(0, 1_000_000);
  return {
    signatures: (await store.signatures.list(tenant, 100_000)).length,
    signedEntries: entries.filter((e) => e.tenantId === tenant && e.outcome === 'signed').length,
  };
}

/** The key id LIST shows for the tenant (its CKA_LABEL), which the daemon's catalog now holds. */
export async function listedKeyId(client: DaemonClient, tenant: string): Promise<string> {
  const res = await client.request({ type: 'LIST' });
  if (res.type !== 'LIST_OK') throw new Error(JSON.stringify(res));
  const token = res.tokens.find((t) => t.tenant === tenant);
  const label = token?.keys[0]?.label;
  if (!label) throw new Error(`LIST shows no key for ${tenant}: ${JSON.stringify(token)}`);
  return label;
}

/** 12 signatures at once through `coalescer`, each naming `keyId` (no longer current): every one is KEY_CHANGED. */
export async function expectCoalescedRefused(
  coalescer: Pick<Upstream, 'pkcs11Sign'>,
  tenant: string,
  { spec, digestBytes }: KeyChangedCase,
  keyId: string,
): Promise<void> {
  const results = await Promise.allSettled(
    Array.from({ length: 12 }, (_, i) =>
      coalescer.pkcs11Sign({
        tenantId: tenant,
        digest: Buffer.alloc(digestBytes, i + 1),
        keySpec: spec,
        pss: false,
        keyId,
        context: {},
      }),
    ),
  );
  for (const r of results) {
    expect(r.status, tenant).toBe('rejected');
    if (r.status === 'rejected') expect(r.reason).toMatchObject({ status: WireStatus.KEY_CHANGED });
  }
}
