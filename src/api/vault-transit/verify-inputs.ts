// Transit's verify: a `vault:v<N>:...` signature checked against version N of the tenant's key (older versions too,
// as Vault verifies with any version still available), over the input's digest, μ or e as sign made it (an ed25519
// key: over the input itself). Nothing is
// signed or recorded; an input that cannot be checked (no such version, a malformed signature) is an error.
import { checkSigningRequest } from '../../crypto/algorithms.js';
import { ApiError } from '../../errors.js';
import { verifySigningInput } from '../../kms-api/verify-input.js';
import type { KeyRecord } from '../../store/store.js';
import { VaultError, vaultErrorOf } from './errors.js';
import { verifyingSaltLength } from './pss-salt.js';
import { algorithmFor, hashNameOf, type Scheme, signingInputOf } from './request-fields.js';
import { decodeSignature, parseSignature } from './signature-marshaling.js';

export interface VerifyItem {
  input: Buffer;
  signature: string;
}

export function verifyItem(versions: KeyRecord[], scheme: Scheme, item: VerifyItem): boolean | VaultError {
  try {
    const { version, encoded } = parseSignature(item.signature);
    const key = versions.find((k) => k.version === version);
    if (!key) throw new VaultError(400, [`key ${versions[0]?.tenantId ?? ''} has no version ${version}`]);
    const algorithm = algorithmFor(key.keySpec, scheme);
    const signed = signingInputOf(key, scheme, item.input);
    if ('digest' in signed) checkSigningRequest(key.keySpec, algorithm, signed.digest);
    const signature = decodeSignature(key.keySpec, encoded, scheme.marshaling);
    return verifySigningInput(key, algorithm, signed, signature, {
      pssSaltLength: verifyingSaltLength(hashNameOf(scheme), scheme.salt),
    });
  } catch (err) {
    if (err instanceof VaultError || err instanceof ApiError) return vaultErrorOf(err);
    throw err;
  }
}
