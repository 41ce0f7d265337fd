// Transit's verify: a `vault:v<N>:...` signature checked against version N of the tenant's key (older versions too,
// as Vault verifies with any version still available), over the input's digest, μ or e as sign made it. Nothing is
// signed or recorded; an input that cannot be checked (no such version, a malformed signature) is an error.
import { checkSigningRequest } from '../../crypto/algorithms.js';
import { verifyDigestSignature } from '../../crypto/verify-digest.js';
import { ApiError } from '../../errors.js';
import type { KeyRecord } from '../../store/store.js';
import { VaultError, vaultErrorOf } from './errors.js';
import { verifyingSaltLength } from './pss-salt.js';
import { algorithmFor, hashNameOf, representativeOf, type Scheme } from './request-fields.js';
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
    const representative = representativeOf(key, scheme, item.input);
    checkSigningRequest(key.keySpec, algorithm, representative);
    const signature = decodeSignature(key.keySpec, encoded, scheme.marshaling);
    return verifyDigestSignature(key, algorithm, representative, signature, {
      pssSaltLength: verifyingSaltLength(hashNameOf(scheme), scheme.salt),
    });
  } catch (err) {
    if (err instanceof VaultError || err instanceof ApiError) return vaultErrorOf(err);
    throw err;
  }
}
