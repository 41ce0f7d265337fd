// The one signing entry point (src/signing/signing-entry.ts), against a signing service that records what it is
// asked: the SignRequest every door gets is built from the caller and the ask alone, the caller's authorization
// (what its door checked) must cover the tenant and action before anything is asked, the daemon in process signs
// as itself, and a held request is waited on (one digest's collect, a batch collected whole with its digests)
// until the client goes away.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { type Authorization, authorize } from '../../src/signing/caller-authorization.js';
import { signDigest, signDigests } from '../../src/signing/signing-entry.js';
import type { BatchOutcome, Pending, SigningService, SignOutcome } from '../../src/signing/signing-service.js';
import type { ApiKeyRecord } from '../../src/store/records/api-key.js';

const pending: Pending = { kind: 'pending', requestId: 'req-1', status: 'pending_approval', message: 'held' };
const signed: SignOutcome = {
  kind: 'signed',
  signature: Buffer.from('sig'),
  keyId: 'k1',
  algorithm: 'ECDSA_SHA_256',
};

/** A signing service that records each call and answers from the script it was given. */
function recordingService(answers: { first?: SignOutcome | BatchOutcome | Pending; collected?: unknown } = {}) {
  const calls: Array<{ method: string; args: unknown[] }> = [];
  const answer =
    (method: string, value: unknown) =>
    async (...args: unknown[]) => {
      calls.push({ method, args });
      return value;
    };
  const first = answers.first ?? signed;
  const service = {
    sign: answer('sign', first),
    pkcs11Sign: answer('pkcs11Sign', first),
    signBatch: answer('signBatch', first),
    collect: answer('collect', answers.collected ?? pending),
    collectBatch: answer('collectBatch', answers.collected ?? pending),
  };
  return { signing: service as unknown as SigningService, calls };
}

const signer: ApiKeyRecord = {
  id: 'key-1',
  secretHash: '',
  tenantId: 'acme',
  role: 'signer',
  label: 'ci',
  createdAt: '2026-01-01T00:00:00Z',
  revokedAt: null,
  personId: 'person-1',
};
const digest = Buffer.alloc(32, 1);
/** The signer as a door hands it on after checking it for `sign` on acme. */
const signerAtAcme = () => ({ authorized: authorize(signer, 'sign', 'acme') });

describe('signDigest', () => {
  it('hands a pure Ed25519 message on as the message, recorded under its SHA-512 (held: collected by that)', async () => {
    const { signing, calls } = recordingService({ first: pending, collected: signed });
    const message = Buffer.from('the message itself');
    const sha512 = createHash('sha512').update(message).digest();
    await signDigest(
      signing,
      signerAtAcme(),
      { tenantId: 'acme', message, algorithm: 'ED25519_SHA_512', context: {} },
      { waitMs: 1000, signal: new AbortController().signal },
    );
    const request = calls[0]?.args[0] as { digest: Buffer; message: Buffer };
    expect(request.message).toEqual(message);
    expect(request.digest).toEqual(sha512);
    expect(calls[1]).toMatchObject({ method: 'collect', args: ['acme', 'req-1', sha512] });
  });

  it('builds the SignRequest from the caller and the ask: who, person, workload, pin, inputs, via', async () => {
    const { signing, calls } = recordingService();
    const outcome = await signDigest(signing, signerAtAcme(), {
      action: 'sign',
      tenantId: 'acme',
      digest,
      algorithm: 'ECDSA_SHA_256',
      expectedKeyId: 'k1',
      context: { project: 'p' },
      via: { api: 'signbridge', api_key_id: 'key-1' },
    });
    expect(outcome).toBe(signed);
    expect(calls).toEqual([
      {
        method: 'sign',
        args: [
          {
            action: 'sign',
            tenantId: 'acme',
            expectedKeyId: 'k1',
            context: { project: 'p' },
            via: { api: 'signbridge', api_key_id: 'key-1' },
            callerId: 'key-1',
            personId: 'person-1',
            workload: null,
            digest,
            algorithm: 'ECDSA_SHA_256',
          },
        ],
      },
    ]);
  });

  it('refuses, before the service is asked, an authorization that does not cover the tenant and action asked', async () => {
    const { signing, calls } = recordingService();
    const ask = { tenantId: 'acme', digest, pss: false, context: {} };
    const operator = { ...signer, tenantId: null };
    const refused: Array<[string, Authorization]> = [
      ['checked for another tenant', authorize(operator, 'sign', 'other')],
      ['checked for reading keys, which more roles may do', authorize(signer, 'get_public_key', 'acme')],
      ['built by hand, not by authorize', { apiKey: signer, action: 'sign', tenantId: 'acme' }],
    ];
    for (const [why, authorized] of refused) {
      await expect(signDigest(signing, { authorized }, ask), why).rejects.toMatchObject({ code: 'forbidden' });
    }
    expect(calls).toEqual([]);
    // The door's own check refuses a key of another tenant, or without the signer role, in its protocol's words.
    expect(() => authorize(signer, 'sign', 'other')).toThrow(/another tenant/);
    expect(() => authorize({ ...signer, role: 'approver' }, 'sign', 'acme')).toThrow(/may not call sign/);
  });

  it('signs for the daemon in process as itself, the algorithm worked out as pkcs11_sign does', async () => {
    const { signing, calls } = recordingService();
    await signDigest(
      signing,
      { inProcess: 'signbridge-daemon' },
      {
        tenantId: 'acme',
        digest,
        pss: true,
        keySpec: 'RSA_2048',
        context: {},
      },
    );
    expect(calls).toEqual([
      {
        method: 'pkcs11Sign',
        args: [
          { tenantId: 'acme', context: {}, callerId: 'signbridge-daemon', digest, pss: true, keySpec: 'RSA_2048' },
        ],
      },
    ]);
  });

  it('answers a held request at once without a wait, and collects it when asked to wait', async () => {
    const held = recordingService({ first: pending, collected: signed });
    const ask = { tenantId: 'acme', digest, algorithm: 'ECDSA_SHA_256' as const, context: {} };
    expect(await signDigest(held.signing, signerAtAcme(), ask)).toBe(pending);
    expect(await signDigest(held.signing, signerAtAcme(), ask, { waitMs: 60_000, pollMs: 0 })).toBe(signed);
    expect(held.calls.map((c) => c.method)).toEqual(['sign', 'sign', 'collect']);
    expect(held.calls[2]?.args).toEqual(['acme', 'req-1', digest]);
  });

  it('stops waiting when the client has gone', async () => {
    const held = recordingService({ first: pending });
    const gone = new AbortController();
    gone.abort();
    const ask = { tenantId: 'acme', digest, algorithm: 'ECDSA_SHA_256' as const, context: {} };
    const outcome = await signDigest(held.signing, signerAtAcme(), ask, {
      waitMs: 3_600_000,
      signal: gone.signal,
    });
    expect(outcome).toBe(pending);
    expect(held.calls.map((c) => c.method)).toEqual(['sign']);
  });
});

describe('signDigests', () => {
  it("asks for one batch as sign_batch (which a door's check for sign covers: the same roles) and collects a held one with its digests", async () => {
    const batch: BatchOutcome = { kind: 'signed', batchId: 'b', keyId: 'k1', algorithm: 'ECDSA_SHA_256', items: [] };
    const held = recordingService({ first: pending, collected: batch });
    const digests = [digest, Buffer.alloc(32, 2)];
    const outcome = await signDigests(
      held.signing,
      signerAtAcme(),
      { tenantId: 'acme', digests, pss: false, expectedKeyId: 'k1', context: {} },
      { waitMs: 60_000, pollMs: 0 },
    );
    expect(outcome).toBe(batch);
    expect(held.calls[0]).toEqual({
      method: 'signBatch',
      args: [
        {
          tenantId: 'acme',
          expectedKeyId: 'k1',
          context: {},
          callerId: 'key-1',
          personId: 'person-1',
          workload: null,
          digests,
          pss: false,
        },
      ],
    });
    expect(held.calls[1]).toEqual({ method: 'collectBatch', args: ['acme', 'req-1', digests] });
  });
});
