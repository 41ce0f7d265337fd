#include "refusal.h"

#include <stdio.h>
#include <string.h>

#include "log.h"

static const char *mech_name(CK_MECHANISM_TYPE t, char *buf, size_t n) {
  const sbp11_mech *m = sbp11_mech_find(t);
  if (m) return m->name;
  switch (t) { /* the ones people try: SHA-1 and raw RSA */
  case CKM_SHA1_RSA_PKCS: return "CKM_SHA1_RSA_PKCS";
  case CKM_SHA1_RSA_PKCS_PSS: return "CKM_SHA1_RSA_PKCS_PSS";
  case CKM_ECDSA_SHA1: return "CKM_ECDSA_SHA1";
  case CKM_RSA_X_509: return "CKM_RSA_X_509";
  }
  snprintf(buf, n, "mechanism 0x%lx", (unsigned long)t);
  return buf;
}

static const char *hash_name(int hash) {
  switch (hash) {
  case SBP11_SHA256: return "SHA-256";
  case SBP11_SHA384: return "SHA-384";
  case SBP11_SHA512: return "SHA-512";
  }
  return "?";
}

/* Which rule a CKM_ML_DSA parameter broke (sbp11_mldsa_params_check's order). */
static void mldsa_param_refusal(const CK_MECHANISM *m, const char *name) {
  if (!m->pParameter || m->ulParameterLen != sizeof(CK_SIGN_ADDITIONAL_CONTEXT)) {
    SBP11_WARN("C_SignInit refused: %s takes no parameter or a CK_SIGN_ADDITIONAL_CONTEXT (%lu bytes given)", name,
               (unsigned long)m->ulParameterLen);
    return;
  }
  CK_SIGN_ADDITIONAL_CONTEXT p;
  memcpy(&p, m->pParameter, sizeof(p));
  if (p.ulContextLen != 0) {
    SBP11_WARN("C_SignInit refused: %s with a %lu-byte context; the service signs ML-DSA with the empty context "
               "(the module computes mu for it, as KMS's EXTERNAL_MU takes it), so a context cannot be signed",
               name, (unsigned long)p.ulContextLen);
  } else if (p.hedgeVariant == CKH_DETERMINISTIC_REQUIRED) {
    SBP11_WARN("C_SignInit refused: %s with CKH_DETERMINISTIC_REQUIRED; the service signs ML-DSA hedged "
               "(randomized), never deterministically: use CKH_HEDGE_PREFERRED or CKH_HEDGE_REQUIRED", name);
  } else {
    SBP11_WARN("C_SignInit refused: %s with hedgeVariant 0x%lx, which is not a CKH_ value", name,
               (unsigned long)p.hedgeVariant);
  }
}

void sbp11_refusal_sign_init(CK_RV rv, const CK_MECHANISM *m, const sbp11_keyinfo *key, CK_OBJECT_HANDLE hkey) {
  char buf[40];
  const char *name = m ? mech_name(m->mechanism, buf, sizeof(buf)) : "no mechanism";
  switch (rv) {
  case CKR_MECHANISM_INVALID:
    /* CKM_HASH_ML_DSA (0x1F) and CKM_HASH_ML_DSA_SHA224 .. _SHAKE256 (0x23..0x2C), PKCS#11 3.2 */
    if (m->mechanism == 0x1F || (m->mechanism >= 0x23 && m->mechanism <= 0x2C))
      SBP11_WARN("C_SignInit refused: %s is HashML-DSA, which is not offered (its signatures differ from pure "
                 "ML-DSA's, which the service makes): sign the whole message with CKM_ML_DSA", name);
    else if (!sbp11_mech_find(m->mechanism))
      SBP11_WARN("C_SignInit refused: %s is not offered (the service signs SHA-256/384/512 digests only: no "
                 "SHA-1, no raw RSA)", name);
    else
      SBP11_WARN("C_SignInit refused: %s is not among this key's CKA_ALLOWED_MECHANISMS", name);
    return;
  case CKR_KEY_TYPE_INCONSISTENT:
    SBP11_WARN("C_SignInit refused: %s does not fit a%s key%s", name,
               !key                          ? " private"
               : key->family == SBP11_EC     ? "n EC"
               : key->family == SBP11_MLDSA  ? "n ML-DSA"
               : key->family == SBP11_EDDSA  ? "n Ed25519"
                                             : "n RSA",
               key && key->family == SBP11_MLDSA   ? " (ML-DSA keys sign with CKM_ML_DSA)"
               : key && key->family == SBP11_EDDSA ? " (Ed25519 keys sign with CKM_EDDSA)"
                                                   : "");
    return;
  case CKR_MECHANISM_PARAM_INVALID: {
    const sbp11_mech *mech = sbp11_mech_find(m->mechanism);
    if (mech && mech->scheme == SBP11_MLDSA_PURE) {
      mldsa_param_refusal(m, name);
    } else if (mech && mech->scheme == SBP11_EDDSA_PURE) {
      SBP11_WARN("C_SignInit refused: %s with CK_EDDSA_PARAMS asking for Ed25519ph (phFlag) or Ed25519ctx (a "
                 "context); the service signs pure Ed25519 only: pass no parameter, or phFlag false and no context",
                 name);
    } else if (!mech || mech->scheme != SBP11_PSS) {
      SBP11_WARN("C_SignInit refused: %s takes no parameters", name);
    } else if (!m->pParameter || m->ulParameterLen != sizeof(CK_RSA_PKCS_PSS_PARAMS)) {
      SBP11_WARN("C_SignInit refused: %s needs CK_RSA_PKCS_PSS_PARAMS (%lu bytes given)", name,
                 (unsigned long)m->ulParameterLen);
    } else {
      CK_RSA_PKCS_PSS_PARAMS p;
      memcpy(&p, m->pParameter, sizeof(p));
      SBP11_WARN("C_SignInit refused: %s with hashAlg 0x%lx, mgf 0x%lx, sLen %lu; the service signs PSS with "
                 "SHA-256/384/512, MGF1 of the same hash and a salt as long as the digest (32, 48, 64)",
                 name, (unsigned long)p.hashAlg, (unsigned long)p.mgf, (unsigned long)p.sLen);
    }
    return;
  }
  case CKR_KEY_FUNCTION_NOT_PERMITTED:
    SBP11_WARN("C_SignInit refused: object 0x%lx is a public key; sign with the private key", (unsigned long)hkey);
    return;
  case CKR_KEY_HANDLE_INVALID:
    SBP11_WARN("C_SignInit refused: object 0x%lx is not a private key of this session's token", (unsigned long)hkey);
    return;
  }
  SBP11_WARN("C_SignInit(%s) refused (CKR 0x%lx)", name, (unsigned long)rv);
}

/* A DigestInfo naming SHA-1 (OID 1.3.14.3.2.26), with or without NULL parameters. */
static int is_sha1_digestinfo(const uint8_t *in, size_t len) {
  static const uint8_t sha1_oid[] = {0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a};
  return len >= 4 + sizeof(sha1_oid) && in[0] == 0x30 && in[2] == 0x30 &&
         !memcmp(in + 4, sha1_oid, sizeof(sha1_oid));
}

void sbp11_refusal_input(CK_RV rv, const sbp11_signplan *plan, const sbp11_keyinfo *key, const uint8_t *in,
                         size_t len) {
  char why[300];
  const char *name = plan->mech->name;
  if (plan->mech->scheme == SBP11_PKCS1 && rv == CKR_DATA_INVALID && is_sha1_digestinfo(in, len)) {
    snprintf(why, sizeof(why), "%s input is a SHA-1 DigestInfo; SHA-1 is not signed, use SHA-256, SHA-384 or "
             "SHA-512", name);
  } else if (plan->mech->scheme == SBP11_PKCS1 && rv == CKR_DATA_INVALID) {
    snprintf(why, sizeof(why), "%s input (%zu bytes) is not a DER DigestInfo of SHA-256, SHA-384 or SHA-512", name,
             len);
  } else if (plan->mech->scheme == SBP11_PKCS1) {
    snprintf(why, sizeof(why), "%s input is %zu bytes, more than a %zu-byte key signs", name, len,
             key ? key->sig_len : 0);
  } else if (plan->mech->scheme == SBP11_EDDSA_PURE) {
    snprintf(why, sizeof(why), "%s input is %zu bytes; it signs a message of 1 to %d bytes (the service's bound "
             "for pure Ed25519)", name, len, SBP11_EDDSA_MESSAGE_MAX);
  } else if (plan->mech->scheme == SBP11_ECDSA && plan->mech->hash == SBP11_HASH_NONE) {
    /* CKM_ECDSA takes any SHA-2 digest, so no one length is "the" one. */
    snprintf(why, sizeof(why), "%s input is %zu bytes%s; it takes a SHA-256, SHA-384 or SHA-512 digest (32, 48 or "
             "64 bytes)%s", name, len, len == 20 ? " (a SHA-1 digest?)" : "", len == 20 ? " and SHA-1 is not signed" : "");
  } else if (len == 20) {
    snprintf(why, sizeof(why), "%s input is 20 bytes (a SHA-1 digest?); it takes a %zu-byte %s digest and SHA-1 "
             "is not signed", name, sbp11_hash_len(plan->hash), hash_name(plan->hash));
  } else {
    snprintf(why, sizeof(why), "%s input is %zu bytes; it takes a %zu-byte %s digest", name, len,
             sbp11_hash_len(plan->hash), hash_name(plan->hash));
  }
  SBP11_WARN("signature refused (CKR 0x%lx): %s", (unsigned long)rv, why);
  sbp11_notice("signature refused: %s", why);
}
