// The import token of the embedded default: what get_import_params promised, sealed with AES-256-GCM under the
// token's sealing key (Pkcs11KeyStore.seal), so only this service can make or read one and any change to it fails
// the GCM tag inside the token. It binds tenant, kms_key_id, wrapping key, wrapping algorithm and expiry; opaque
// base64 to the client. (AWS KMS makes its own tokens; those pass through untouched.)
import { createHash, timingSafeEqual } from 'node:crypto';
import { ApiError } from '../../errors.js';
import type { WrappingAlgorithm, WrappingKeySpec } from '../key-store.js';
import type { Sealer } from '../sealer.js';

const VERSION = 1;
const AAD = Buffer.from('signbridge import token v1');

export interface ImportTokenClaims {
  tenantId: string;
  kmsKeyId: string;
  wrappingKeyRef: string;
  wrappingAlgorithm: WrappingAlgorithm;
  wrappingKeySpec: WrappingKeySpec;
  /** parameters_valid_to, Unix seconds. */
  validTo: number;
}

export async function makeImportToken(sealer: Sealer, claims: ImportTokenClaims): Promise<Buffer> {
  const sealed = await sealer.seal(Buffer.from(JSON.stringify(claims)), AAD);
  return Buffer.concat([Buffer.from([VERSION]), sealed]);
}

const invalid = (why: string) => new ApiError('invalid_import_token', `the import token is not valid: ${why}`);

/** Equal strings in time that does not depend on where they differ. */
function sameString(a: string, b: string): boolean {
  const h = (s: string) => createHash('sha256').update(s).digest();
  return timingSafeEqual(h(a), h(b));
}

/**
 * Opens and checks a token for (tenant, kms_key_id): invalid_import_token when it was not made here, was altered,
 * or names another tenant or key; expired_import_token after its parameters_valid_to.
 */
export async function openImportToken(
  sealer: Sealer,
  token: Buffer,
  tenantId: string,
  kmsKeyId: string,
  nowSeconds: number,
): Promise<ImportTokenClaims> {
  if (token.length < 1 + 12 + 16 || token[0] !== VERSION) throw invalid('not an import token of this service');
  let claims: ImportTokenClaims;
  try {
    claims = JSON.parse((await sealer.unseal(token.subarray(1), AAD)).toString('utf8')) as ImportTokenClaims;
  } catch (err) {
    // The token's own faults stay 503 (retry); anything else means the GCM tag or the JSON did not hold.
    if (err instanceof ApiError && err.statusCode >= 500) throw err;
    throw invalid('it was altered or made by another service');
  }
  // Both compared, whichever differs: the answer takes as long either way.
  const sameTenant = sameString(claims.tenantId, tenantId);
  const sameKey = sameString(claims.kmsKeyId, kmsKeyId);
  if (!sameTenant || !sameKey) throw invalid(`it was issued for another ${sameTenant ? 'key' : 'tenant'}`);
  if (nowSeconds >= claims.validTo) {
    throw new ApiError(
      'expired_import_token',
      `the import token expired at ${new Date(claims.validTo * 1000).toISOString()}; call get_import_params ` +
        `with kms_key_id ${kmsKeyId} for new parameters`,
    );
  }
  return claims;
}
