// The one signing entry point: every door that asks for a signature (POST /v1/sign, pkcs11_sign and sign_batch, KMS
// Sign, Vault transit sign with `input` or `batch_input`, the daemon in process) turns its protocol's fields into a
// `SigningAsk` and calls signDigest or signDigests here; what comes back it words in its protocol's answer. Here,
// once: the caller's authorization (what its door checked) matched to the tenant and action asked for
// (caller-authorization.ts), the `SignRequest` built from the caller (who, person, workload) and
// the ask (tenant, pinned key version, policy inputs, via), one decision for one digest or many (signer.ts,
// batch-signer.ts), and the held wait for the doors whose clients know no 202 (held-wait.ts), ended when the
// client goes away. A held request is described once, in held-description.ts.
import { createHash } from 'node:crypto';
import type { KeySpec, SigningAlgorithm } from '../crypto/algorithms.js';
import type { BatchOutcome, BatchSignRequest } from './batch-signer.js';
import { type Authorization, authorizedKey } from './caller-authorization.js';
import { type HeldWaitOptions, waitForDecision } from './held-wait.js';
import type { PolicyContext } from './policy-context.js';
import type { Pending, SignOutcome, SignRequest } from './sign-outcome.js';
import type { SigningService } from './signing-service.js';

/**
 * Who asks: the API key a door authenticated (the /v1 bearer key, the key behind a SigV4 credential or a Vault
 * token) with what the door checked for it (authorize's Authorization, matched here to the request); or the
 * daemon in process, which holds the data dir itself and so no API key (its caller id is what its configuration
 * names).
 */
export type SigningCaller = { authorized: Authorization } | { inProcess: string };

/** What a door asks for, besides the digest(s) and how to sign them. */
export interface SigningAsk {
  tenantId: string;
  /** The API action, for the audit log and the role check (default sign; a batch is always sign_batch). */
  action?: SignRequest['action'];
  /** The key version pinned (SignRequest.expectedKeyId): another current version refuses with key_changed. */
  expectedKeyId?: string | undefined;
  context: PolicyContext;
  via?: Record<string, string> | undefined;
  pssSaltLength?: number | undefined;
}

/** `sign`: the algorithm named; or `pkcs11_sign`: worked out from the key spec, the digest and `pss`. */
export type SigningScheme = { algorithm: SigningAlgorithm } | { pss: boolean; keySpec?: KeySpec | undefined };

/**
 * What is signed: a digest (or ML-DSA's mu, SM2's e), or for pure Ed25519 (ED25519_SHA_512) the message itself, at
 * the doors that carry it. The message's SHA-512 then stands for it as the request's digest: what the policy, the
 * audit entries and the log name, so that no record holds the message.
 */
export type SigningInput = { digest: Buffer } | { message: Buffer };

/** The digest a request is recorded under, and the message that a pure Ed25519 key store signs. */
export function inputFields(input: SigningInput): { digest: Buffer; message?: Buffer } {
  if ('message' in input)
    return { digest: createHash('sha512').update(input.message).digest(), message: input.message };
  return { digest: input.digest };
}

/** The caller's part of every SignRequest, once its authorization is found to cover this tenant and action. */
function requestFor(caller: SigningCaller, ask: SigningAsk, action: NonNullable<SignRequest['action']>) {
  if ('inProcess' in caller) return { callerId: caller.inProcess };
  const apiKey = authorizedKey(caller.authorized, action, ask.tenantId);
  return {
    callerId: apiKey.id,
    personId: apiKey.personId ?? null,
    workload: apiKey.workload ?? null,
  };
}

/** The ask's own fields, in SignRequest's shape (absent ones left out, not undefined). */
function askFields(ask: SigningAsk) {
  return {
    tenantId: ask.tenantId,
    ...(ask.expectedKeyId !== undefined && { expectedKeyId: ask.expectedKeyId }),
    context: ask.context,
    ...(ask.via !== undefined && { via: ask.via }),
    ...(ask.pssSaltLength !== undefined && { pssSaltLength: ask.pssSaltLength }),
  };
}

/**
 * One digest (or one message, pure Ed25519): signed at once, refused (thrown: denied, rate limited, key_changed...), or held; a held one is waited
 * on when `wait` is given (it ends pending when the wait or the client ended first).
 */
export async function signDigest(
  signing: SigningService,
  caller: SigningCaller,
  ask: SigningAsk & SigningScheme & SigningInput,
  wait?: HeldWaitOptions,
): Promise<SignOutcome> {
  const input = inputFields(ask);
  const request: SignRequest = {
    ...(ask.action !== undefined && { action: ask.action }),
    ...askFields(ask),
    ...requestFor(caller, ask, ask.action ?? 'sign'),
    ...input,
  };
  const first =
    'algorithm' in ask
      ? await signing.sign({ ...request, algorithm: ask.algorithm })
      : await signing.pkcs11Sign({
          ...request,
          pss: ask.pss,
          ...(ask.keySpec !== undefined && { keySpec: ask.keySpec }),
        });
  if (first.kind !== 'pending' || wait === undefined) return first;
  return waitForDecision(signing, ask.tenantId, first, input.digest, wait);
}

/**
 * Many digests with one decision (sign_batch): all signed (each its own result), refused whole (thrown), or held as
 * one request; a held batch is waited on when `wait` is given, collected whole with its own digests.
 */
export async function signDigests(
  signing: SigningService,
  caller: SigningCaller,
  ask: Omit<SigningAsk, 'action'> & Pick<BatchSignRequest, 'digests' | 'algorithm' | 'keySpec' | 'pss'>,
  wait?: HeldWaitOptions,
): Promise<BatchOutcome | Pending> {
  const first = await signing.signBatch({
    ...askFields(ask),
    ...requestFor(caller, ask, 'sign_batch'),
    digests: ask.digests,
    ...(ask.algorithm !== undefined && { algorithm: ask.algorithm }),
    ...(ask.keySpec !== undefined && { keySpec: ask.keySpec }),
    ...(ask.pss !== undefined && { pss: ask.pss }),
  });
  if (first.kind !== 'pending' || wait === undefined) return first;
  // The collector brings the batch's own digests: the one-digest argument is unused.
  const collector = { collect: (tenantId: string, id: string) => signing.collectBatch(tenantId, id, ask.digests) };
  return waitForDecision<BatchOutcome>(collector, ask.tenantId, first, Buffer.alloc(0), wait);
}
