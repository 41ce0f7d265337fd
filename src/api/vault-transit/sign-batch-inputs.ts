// Transit's sign with `batch_input`: the items that decode are one sign_batch request (batch-signer.ts), as
// POST /v1/sign_batch makes it: one velocity count of all of them, one policy decision, then each signed with its
// own record, `signed` entry and log leaf. An item that does not decode, or whose digest the key cannot sign, fails
// alone in its place. A batch the policy denies, or a velocity limit or a rotated key refuses, gives every one of its
// items that error; a batch held for a person is one request, waited on up to heldWaitMs, then every item names it,
// and the same call sent again (the same digests) continues it and collects its signatures whole.
import { checkSigningRequest } from '../../crypto/algorithms.js';
import { ApiError } from '../../errors.js';
import { waitForDecision } from '../../signing/held-wait.js';
import { BATCH_MAX, type BatchOutcome, type Pending } from '../../signing/signing-service.js';
import type { ApiKeyRecord, KeyRecord } from '../../store/store.js';
import { VaultError, vaultErrorOf } from './errors.js';
import { representativeOf, type Scheme } from './request-fields.js';
import {
  heldError,
  type InputOutcome,
  itemError,
  signedInput,
  type TransitSigning,
  transitSigningKey,
} from './sign-inputs.js';

export async function signBatchInputs(
  deps: TransitSigning,
  caller: ApiKeyRecord,
  tenantId: string,
  scheme: Scheme,
  keyVersion: number | string | undefined,
  inputs: Array<Buffer | VaultError>,
  signal: AbortSignal,
): Promise<InputOutcome[]> {
  const { signing } = deps;
  const { current, algorithm, request } = await transitSigningKey(signing, caller, tenantId, scheme, keyVersion);
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
  const chunks: number[][] = [];
  for (let at = 0; at < signable.length; at += BATCH_MAX) chunks.push(signable.slice(at, at + BATCH_MAX));
  const first: Array<BatchOutcome | Pending | VaultError> = [];
  // Batches of at most BATCH_MAX digests (the schema allows 100, so one), one after another.
  for (const chunk of chunks) {
    const chunkDigests = chunk.map((i) => digests[i] as Buffer);
    first.push(await signing.signBatch({ ...request, digests: chunkDigests }).catch(itemError));
  }
  // A held batch is collected whole, with its digests; held ones wait together, for one heldWaitMs in all.
  const decided = await Promise.all(
    first.map((outcome, c) => {
      if (outcome instanceof VaultError || outcome.kind === 'signed') return outcome;
      const chunkDigests = (chunks[c] as number[]).map((i) => digests[i] as Buffer);
      // The collector brings the batch's own digests: the one-digest argument is unused.
      const collector = { collect: (t: string, id: string) => signing.collectBatch(t, id, chunkDigests) };
      return waitForDecision<BatchOutcome>(collector, tenantId, outcome, Buffer.alloc(0), {
        waitMs: deps.heldWaitMs,
        signal,
      }).catch(itemError);
    }),
  );
  // The items that failed alone already hold their error; every other one is filled in from its batch's outcome.
  const results = digests.map((d) => (d instanceof VaultError ? d : undefined)) as InputOutcome[];
  const versions = new Map<string, KeyRecord>([[current.id, current]]);
  for (const [c, outcome] of decided.entries()) {
    const chunk = chunks[c] as number[];
    for (const [position, index] of chunk.entries()) {
      if (outcome instanceof VaultError) results[index] = outcome;
      else if (outcome.kind === 'pending') results[index] = heldError(outcome, deps.publicUrl);
      else {
        const item = outcome.items[position];
        if (item?.kind === 'signed') {
          results[index] = await signedInput(signing, tenantId, versions, item.signed, scheme);
        } else results[index] = itemError(item?.error);
      }
    }
  }
  return results;
}
