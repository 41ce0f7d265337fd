// KMS's Sign and Verify. Sign goes through the same seam as POST /v1/sign (velocity limits, the policy, approvals,
// the audit entry, events, the transparency log); a call held for a decision waits heldWaitMs for it, since a KMS
// client knows no 202, and then fails with KMSInvalidStateException naming the request and where to approve it; the
// same call repeated continues that request. docs/kms-api.md, "Sign" and "Held for approval".

import { SIGNING_ALGORITHMS, type SigningAlgorithm } from '../../../crypto/algorithms.js';
import { ApiError } from '../../../errors.js';
import { keyArn } from '../../../kms-api/key-ids.js';
import { MAX_MESSAGE_BYTES, MESSAGE_TYPES, signingInput } from '../../../kms-api/sign-input.js';
import { verifySigningInput } from '../../../kms-api/verify-input.js';
import { describeHeld } from '../../../signing/held-description.js';
import { signDigest } from '../../../signing/signing-entry.js';
import type { Pending, SigningService } from '../../../signing/signing-service.js';
import type { LogService } from '../../../transparency/log-service.js';
import { logPreferenceOf, logProofHeaders, logProofsOf } from '../../log-proof-preference.js';
import { LOG_INDEX_HEADER } from '../../responses.js';
import { signingContext } from '../../signing-inputs.js';
import { AwsJsonError } from './errors.js';
import { resolveKey } from './key-resolver.js';
import type { KmsCall, KmsOperation, KmsResult } from './operation.js';
import { enumValue, grantTokens, optionalBoolean, requiredBlob, requiredString } from './request-fields.js';

export interface SignOperationsOptions {
  signing: SigningService;
  heldWaitMs: number;
  publicUrl?: string | undefined;
  /** The transparency log, for `Prefer: wait-for-log` (logProofHeaders). */
  log?: LogService | undefined;
}

/**
 * KMS Sign's answer is KMS's JSON, which an SDK parses into its own shape: `Prefer: wait-for-log` puts the
 * tlog-proof in this header instead, as base64 of its text (a header holds no newlines).
 */
export const LOG_PROOF_HEADER = 'Signbridge-Log-Proof';

/** KMS's largest signature input is 4096 bytes; its largest signature (ML-DSA-87) 4627. */
const MAX_SIGNATURE_BYTES = 6144;

/** Still undecided after the wait: what is held, where a person decides it, and that a retry continues it. */
export function heldMessage(pending: Pending, publicUrl: string | undefined, waitedMs: number): string {
  const held = describeHeld(pending, publicUrl);
  const where = held.consolePage ? `at ${held.consolePage}` : 'in the web console';
  return (
    `signing request ${held.requestId} is held for ${held.awaits} (${held.status}) and was not decided within ` +
    `${Math.round(waitedMs / 1000)} s; decide it ${where} (or with POST /v1/approve_sign), then repeat this call: ` +
    `it continues the same request and returns the signature (${held.message})`
  );
}

/**
 * The KeyId resolved to a version that was rotated out before it signed: as KMS answers a key that cannot sign in
 * its state (KMSInvalidStateException, 400), naming the key; the client must call again (DescribeKey / GetPublicKey
 * of the alias gives the new version).
 */
function keyChanged(arn: string, tenantId: string): AwsJsonError {
  return new AwsJsonError(
    'KMSInvalidStateException',
    `${arn} is no longer the current version of tenant ${tenantId}'s key: it was rotated while this Sign call was ` +
      `under way, and nothing was signed; call Sign again (alias/${tenantId} names the current version)`,
  );
}

function dryRun(): never {
  throw new AwsJsonError(
    'DryRunOperationException',
    'The request would have succeeded, but the DryRun option is set.',
    412,
  );
}

export function signOperations(opts: SignOperationsOptions): { Sign: KmsOperation; Verify: KmsOperation } {
  const { signing } = opts;

  async function sign(call: KmsCall): Promise<KmsResult> {
    const { input, caller } = call;
    const keyId = requiredString(input, 'KeyId');
    const message = requiredBlob(input, 'Message', MAX_MESSAGE_BYTES);
    const algorithm = enumValue<SigningAlgorithm>(input, 'SigningAlgorithm', SIGNING_ALGORITHMS);
    const messageType = enumValue(input, 'MessageType', MESSAGE_TYPES, 'RAW');
    grantTokens(input);
    const resolved = await resolveKey(signing, caller, call.accessKeyId, call.region, keyId, 'kms:Sign');
    const arn = keyArn(call.region, resolved.key.tenantId, resolved.key.id);
    if (!resolved.current) {
      throw new AwsJsonError(
        'DisabledException',
        `${arn} is disabled: it is an older version of tenant ${resolved.key.tenantId}'s key, which signs only with ` +
          `its current version (alias/${resolved.key.tenantId}); older versions still verify`,
      );
    }
    // A digest, or for pure Ed25519 the message itself (the entry point records its SHA-512 in its place).
    const toSign = signingInput(resolved.key, algorithm, messageType, message);
    if (optionalBoolean(input, 'DryRun')) dryRun();
    const outcome = await signDigest(
      signing,
      { authorized: resolved.authorization },
      {
        action: 'sign',
        tenantId: resolved.key.tenantId,
        ...toSign,
        algorithm,
        // The digest was built from this version (ML-DSA's mu and SM2's e depend on its public key): only it signs.
        expectedKeyId: resolved.key.id,
        context: signingContext({}, caller),
        via: { api: 'aws-kms', region: call.region, access_key_id: call.accessKeyId, message_type: messageType },
      },
      // A KMS client knows no 202: a held call waits for the decision, until the client goes away.
      { waitMs: opts.heldWaitMs, signal: call.signal },
    ).catch((err: unknown) => {
      if (err instanceof ApiError && err.code === 'key_changed') throw keyChanged(arn, resolved.key.tenantId);
      throw err;
    });
    if (outcome.kind === 'pending') {
      throw new AwsJsonError('KMSInvalidStateException', heldMessage(outcome, opts.publicUrl, opts.heldWaitMs));
    }
    return {
      body: {
        KeyId: keyArn(call.region, resolved.key.tenantId, outcome.keyId),
        Signature: outcome.signature.toString('base64'),
        SigningAlgorithm: outcome.algorithm,
      },
      ...(outcome.logIndex !== undefined && { headers: await logHeaders(outcome.logIndex, call.prefer) }),
    };
  }

  /** Signbridge-Log-Index, and with `Prefer: wait-for-log` the proof once logged (as /v1/sign, in headers). */
  async function logHeaders(logIndex: number, prefer: KmsCall['prefer']): Promise<Record<string, string>> {
    const headers = { [LOG_INDEX_HEADER]: String(logIndex) };
    const preference = opts.log ? logPreferenceOf(prefer) : undefined;
    if (!opts.log || !preference) return headers;
    const got = await logProofsOf(opts.log, [logIndex], preference);
    if (!got) return headers;
    return {
      ...headers,
      ...logProofHeaders(preference, got),
      [LOG_PROOF_HEADER]: Buffer.from(got.proofs[0] as string).toString('base64'),
    };
  }

  async function verify(call: KmsCall): Promise<KmsResult> {
    const { input } = call;
    const keyId = requiredString(input, 'KeyId');
    const message = requiredBlob(input, 'Message', MAX_MESSAGE_BYTES);
    const signature = requiredBlob(input, 'Signature', MAX_SIGNATURE_BYTES);
    const algorithm = enumValue<SigningAlgorithm>(input, 'SigningAlgorithm', SIGNING_ALGORITHMS);
    const messageType = enumValue(input, 'MessageType', MESSAGE_TYPES, 'RAW');
    grantTokens(input);
    const { key } = await resolveKey(signing, call.caller, call.accessKeyId, call.region, keyId, 'kms:Verify');
    const signed = signingInput(key, algorithm, messageType, message);
    if (optionalBoolean(input, 'DryRun')) dryRun();
    // KMS answers an invalid signature with an error, not with SignatureValid false.
    if (!verifySigningInput(key, algorithm, signed, signature, { pssSaltLength: 'hash' })) {
      throw new AwsJsonError(
        'KMSInvalidSignatureException',
        'the signature is not valid for this key, message and algorithm',
      );
    }
    return {
      body: { KeyId: keyArn(call.region, key.tenantId, key.id), SignatureValid: true, SigningAlgorithm: algorithm },
    };
  }

  return { Sign: sign, Verify: verify };
}
