// Transit's sign with `batch_input`: the items that decode are one sign_batch request (batch-signer.ts), as
// POST /v1/sign_batch makes it: one velocity count of all of them, one policy decision, then each signed with its
// own record, `signed` entry and log leaf. An item that does not decode, or whose digest the key cannot sign, fails
// alone in its place. A batch the policy denies, or a velocity limit or a rotated key refuses, gives every one of its
// items that error; a batch held for a person is one request, waited on up to heldWaitMs, then every item names it,
// and the same call sent again (the same digests) continues it and collects its signatures whole. An ed25519 key
// signs each message with a sign request of its own (sign_batch carries digests, pure Ed25519 the message).
import { checkSigningRequest, keyInfo } from '../../crypto/algorithms.js';
import { ApiError } from '../../errors.js';
import type { Authorization } from '../../signing/caller-authorization.js';
import { signDigests } from '../../signing/signing-entry.js';
import type { KeyRecord } from '../../store/store.js';
import { VaultError, vaultErrorOf } from './errors.js';
import { representativeOf, type Scheme } from './request-fields.js';
import {
  heldError,
  type InputOutcome,
  itemError,
  signedInput,
  signOneInput,
  type TransitSigning,
  transitSigningKey,
} from './sign-inputs.js';

export async function signBatchInputs(
  deps: TransitSigning,
  authorized: Authorization,
  scheme: Scheme,
  keyVersion: number | string | undefined,
  inputs: Array<Buffer | VaultError>,
  signal: AbortSignal,
): Promise<InputOutcome[]> {
  const { signing } = deps;
  const { tenantId } = authorized;
  const signingKey = await transitSigningKey(signing, authorized, scheme, keyVersion);
  const { current, algorithm, ask } = signingKey;
  if (keyInfo(current.keySpec).family === 'ed25519') {
    // Pure Ed25519 signs each message, and sign_batch carries digests: each item is a sign request of its own, as
    // `input` is (its own decision), in order.
    const results: InputOutcome[] = [];
    for (const input of inputs) {
      results.push(
        input instanceof VaultError ? input : await signOneInput(deps, authorized, signingKey, scheme, input, signal),
      );
    }
    return results;
  }
  // Checked one by one here: sign_batch refuses a whole batch for one digest of the wrong length.
  const digests = inputs.map((input): Buffer | VaultError => {
    if (input instanceof VaultError) return input;
    try {
      const digest = representativeOf(current, scheme, input);
      checkSigningRequest(current.keySpec, algorithm, digest);
      return digest;
    } catch (err) {
      if (err instanceof ApiError || err instanceof VaultError) return vaultErrorOf(err);
      throw err;
    }
  });
  const signable = digests.flatMap((d, index) => (d instanceof VaultError ? [] : [index]));
  // One sign_batch request: the schema's MAX_BATCH_ITEMS (100) is within BATCH_MAX. A batch held for a person is
  // waited on whole, and collected with its own digests.
  const outcome =
    signable.length === 0
      ? undefined
      : await signDigests(
          signing,
          { authorized },
          { ...ask, algorithm, digests: signable.map((i) => digests[i] as Buffer) },
          { waitMs: deps.heldWaitMs, signal },
        ).catch(itemError);
  // The items that failed alone already hold their error; every other one is filled in from the batch's outcome.
  const results = digests.map((d) => (d instanceof VaultError ? d : undefined)) as InputOutcome[];
  const versions = new Map<string, KeyRecord>([[current.id, current]]);
  for (const [position, index] of signable.entries()) {
    if (outcome instanceof VaultError) results[index] = outcome;
    else if (outcome?.kind === 'pending') results[index] = heldError(outcome, deps.publicUrl);
    else {
      const item = outcome?.items[position];
      if (item?.kind === 'signed') {
        results[index] = await signedInput(signing, tenantId, versions, item.signed, scheme);
      } else results[index] = itemError(item?.error);
    }
  }
  return results;
}
