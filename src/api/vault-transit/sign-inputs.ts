// Transit's sign of one `input`: one digest through the signing entry point (src/signing/signing-entry.ts: the
// policy, velocity limits, audit entry, events, transparency log), as POST /v1/sign makes it, with the policy inputs
// of the caller's key (a `batch_input` is one sign_batch request: sign-batch-inputs.ts). A request held for a
// person's decision is waited on up to heldWaitMs (Vault's clients know no 202); still waiting, it is an error that
// names the request and where to decide it, and the same call sent again continues it.
import { ApiError } from '../../errors.js';
import type { Authorization } from '../../signing/caller-authorization.js';
import { describeHeld } from '../../signing/held-description.js';
import { type SigningAsk, signDigest } from '../../signing/signing-entry.js';
import type { Pending, SigningService, SignOutcome } from '../../signing/signing-service.js';
import type { KeyRecord } from '../../store/store.js';
import { storeFault } from '../../store/store-errors.js';
import { signingContext } from '../signing-inputs.js';
import { VaultError, vaultErrorOf } from './errors.js';
import { signingSaltLength } from './pss-salt.js';
import { algorithmFor, checkKeyVersion, hashNameOf, type Scheme, signingInputOf } from './request-fields.js';
import { marshalSignature } from './signature-marshaling.js';

export interface TransitSigning {
  signing: SigningService;
  heldWaitMs: number;
  publicUrl?: string | undefined;
}

export interface SignedInput {
  signature: string;
  key_version: number;
  /** Index of the `signed` audit entry (Signbridge-Log-Index); absent only for approvals from before migration 0019. */
  log_index?: number;
}

export type InputOutcome = SignedInput | VaultError;

/** The error of a request still held when the wait ended: what it is, where to decide it, and what to do then. */
export function heldError(pending: Pending, publicUrl: string | undefined): VaultError {
  const held = describeHeld(pending, publicUrl);
  const where = held.consolePage
    ? `approve it at ${held.consolePage} (or with POST /v1/approve_sign)`
    : 'approve it in the signbridge console or with POST /v1/approve_sign';
  return new VaultError(400, [
    `signing request ${held.requestId} is ${held.status}: it waits for a person's decision; ${where}, then ` +
      'send the same request again: it continues this request and returns the signature once approved',
  ]);
}

/** A refusal or a fault a batch item carries as its own error; anything else fails the call (and is logged). */
export function itemError(err: unknown): VaultError {
  if (err instanceof VaultError || err instanceof ApiError || storeFault(err)) return vaultErrorOf(err);
  throw err;
}

/**
 * The key a transit sign uses and what it signs with: the tenant's current version (checked against key_version),
 * the scheme's algorithm and PSS salt, and the ask every item shares, pinned to that version (expectedKeyId: a
 * rotation before the signature refuses it rather than signing with another key) and naming the door and the
 * credential in `via` (the API key's id, never the token itself).
 */
export async function transitSigningKey(
  signing: SigningService,
  authorized: Authorization,
  scheme: Scheme,
  keyVersion: number | string | undefined,
) {
  const { tenantId, apiKey: caller } = authorized;
  const current = await signing.getKey(tenantId);
  checkKeyVersion(keyVersion, current);
  const algorithm = algorithmFor(current.keySpec, scheme);
  const pssSaltLength = scheme.rsa === 'pss' ? signingSaltLength(current, hashNameOf(scheme), scheme.salt) : undefined;
  const ask: SigningAsk = {
    tenantId,
    expectedKeyId: current.id,
    context: signingContext({}, caller),
    via: { api: 'vault-transit', api_key_id: caller.id },
    pssSaltLength,
  };
  return { current, algorithm, ask };
}

/**
 * Transit's `input`: one item, so one sign request. Vault treats `input` as a batch of one (its sign path runs the
 * batch loop over one item), and one digest through sign keeps the audit action `sign` that such calls always had;
 * `batch_input` is the batch path (sign-batch-inputs.ts). Held, it is waited on up to heldWaitMs.
 */
export async function signInput(
  deps: TransitSigning,
  authorized: Authorization,
  scheme: Scheme,
  keyVersion: number | string | undefined,
  input: Buffer,
  signal: AbortSignal,
): Promise<InputOutcome> {
  const signingKey = await transitSigningKey(deps.signing, authorized, scheme, keyVersion);
  return signOneInput(deps, authorized, signingKey, scheme, input, signal);
}

/** One input through one sign request, with the key transitSigningKey chose. */
export async function signOneInput(
  deps: TransitSigning,
  authorized: Authorization,
  { current, algorithm, ask }: Awaited<ReturnType<typeof transitSigningKey>>,
  scheme: Scheme,
  input: Buffer,
  signal: AbortSignal,
): Promise<InputOutcome> {
  const { signing } = deps;
  const outcome = await signDigest(
    signing,
    { authorized },
    { ...ask, algorithm, ...signingInputOf(current, scheme, input) },
    { waitMs: deps.heldWaitMs, signal },
  ).catch(itemError);
  if (outcome instanceof VaultError) return outcome;
  if (outcome.kind === 'pending') return heldError(outcome, deps.publicUrl);
  return signedInput(signing, ask.tenantId, new Map([[current.id, current]]), outcome, scheme);
}

export async function signedInput(
  signing: SigningService,
  tenantId: string,
  versions: Map<string, KeyRecord>,
  outcome: Extract<SignOutcome, { kind: 'signed' }>,
  scheme: Scheme,
): Promise<SignedInput> {
  // The version that signed (the pinned one: a rotation since is refused with key_changed, signInputs above).
  let key = versions.get(outcome.keyId);
  if (!key) {
    key = await signing.getKey(tenantId, outcome.keyId);
    versions.set(key.id, key);
  }
  return {
    signature: marshalSignature(key.keySpec, key.version, outcome.signature, scheme.marshaling),
    key_version: key.version,
    ...(outcome.logIndex !== undefined && { log_index: outcome.logIndex }),
  };
}
