// The PKCS#11 return code of a pkcs11js call, as a name: pkcs11js throws an Error whose message holds it.

/** The CKR_ name a call failed with, CKR_OK when it did not fail (the error's text if it names none). */
export function ckr(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return /CKR_[A-Z_]+/.exec(String(err))?.[0] ?? String(err);
  }
  return 'CKR_OK';
}
