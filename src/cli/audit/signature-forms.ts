// The forms one signature file may hold. The log names a signature by the SHA-256 of the bytes the signing response
// carried (ECDSA: the X9.62 DER SEQUENCE, as KMS returns it); a signature made through the PKCS#11 module is what
// CKM_ECDSA returns, the fixed-width r‖s (64, 96 or 132 bytes for P-256, P-384, P-521): the same signature, which
// the look-up converts to DER.
import { createHash } from 'node:crypto';
import { EC_FIELD_BYTES } from '../../crypto/algorithms.js';
import { ecdsaRawToDer } from '../../crypto/der.js';

/** r‖s lengths: twice the field size of P-256, P-384 and P-521. */
const RAW_ECDSA_LENGTHS = Object.values(EC_FIELD_BYTES).map((field) => 2 * field);

/** SHA-256 (hex) of each form the log may know the signature by: the bytes as they are first, then their DER. */
export function signatureSha256Forms(signature: Buffer): string[] {
  const sha256 = (bytes: Buffer) => createHash('sha256').update(bytes).digest('hex');
  const forms = [sha256(signature)];
  // An Ed25519 signature is 64 bytes too: its own hash comes first, and its "DER" form matches nothing.
  if (RAW_ECDSA_LENGTHS.includes(signature.length)) forms.push(sha256(ecdsaRawToDer(signature)));
  return forms;
}
