#include "mech.h"

#include <openssl/evp.h>
#include <string.h>

static const sbp11_mech MECHS[] = {
    {CKM_RSA_PKCS, "CKM_RSA_PKCS", SBP11_RSA, SBP11_PKCS1, SBP11_HASH_NONE},
    {CKM_SHA256_RSA_PKCS, "CKM_SHA256_RSA_PKCS", SBP11_RSA, SBP11_PKCS1, SBP11_SHA256},
    {CKM_SHA384_RSA_PKCS, "CKM_SHA384_RSA_PKCS", SBP11_RSA, SBP11_PKCS1, SBP11_SHA384},
    {CKM_SHA512_RSA_PKCS, "CKM_SHA512_RSA_PKCS", SBP11_RSA, SBP11_PKCS1, SBP11_SHA512},
    {CKM_RSA_PKCS_PSS, "CKM_RSA_PKCS_PSS", SBP11_RSA, SBP11_PSS, SBP11_HASH_NONE},
    {CKM_SHA256_RSA_PKCS_PSS, "CKM_SHA256_RSA_PKCS_PSS", SBP11_RSA, SBP11_PSS, SBP11_SHA256},
    {CKM_SHA384_RSA_PKCS_PSS, "CKM_SHA384_RSA_PKCS_PSS", SBP11_RSA, SBP11_PSS, SBP11_SHA384},
    {CKM_SHA512_RSA_PKCS_PSS, "CKM_SHA512_RSA_PKCS_PSS", SBP11_RSA, SBP11_PSS, SBP11_SHA512},
    {CKM_ECDSA, "CKM_ECDSA", SBP11_EC, SBP11_ECDSA, SBP11_HASH_NONE},
    {CKM_ECDSA_SHA256, "CKM_ECDSA_SHA256", SBP11_EC, SBP11_ECDSA, SBP11_SHA256},
    {CKM_ECDSA_SHA384, "CKM_ECDSA_SHA384", SBP11_EC, SBP11_ECDSA, SBP11_SHA384},
    {CKM_ECDSA_SHA512, "CKM_ECDSA_SHA512", SBP11_EC, SBP11_ECDSA, SBP11_SHA512},
    /* The whole message; the module computes μ and the service signs it (pure ML-DSA, empty context). */
    {CKM_ML_DSA, "CKM_ML_DSA", SBP11_MLDSA, SBP11_MLDSA_PURE, SBP11_MU},
    /* The whole message, forwarded as it is (up to SBP11_EDDSA_MESSAGE_MAX): pure Ed25519 hashes it twice, with
     * the key's own prefix in between, so no digest can stand for it. */
    {CKM_EDDSA, "CKM_EDDSA", SBP11_EDDSA, SBP11_EDDSA_PURE, SBP11_HASH_NONE},
};
#define NMECHS (sizeof(MECHS) / sizeof(MECHS[0]))

const sbp11_mech *sbp11_mech_find(CK_MECHANISM_TYPE type) {
  for (size_t i = 0; i < NMECHS; i++)
    if (MECHS[i].type == type) return &MECHS[i];
  return NULL;
}

size_t sbp11_mech_list(int family, CK_MECHANISM_TYPE *out, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < NMECHS; i++) {
    if (family && MECHS[i].family != family) continue;
    if (out && n < max) out[n] = MECHS[i].type;
    n++;
  }
  return n;
}

CK_RV sbp11_mech_info(CK_MECHANISM_TYPE type, CK_MECHANISM_INFO *info) {
  const sbp11_mech *m = sbp11_mech_find(type);
  if (!m) return CKR_MECHANISM_INVALID;
  /* No CKF_HW: pkcs11-tool --test picks CKF_HW mechanisms for a SHA-1-only signature pass the service cannot do. */
  if (m->family == SBP11_RSA) {
    info->ulMinKeySize = 2048;
    info->ulMaxKeySize = 4096;
    info->flags = CKF_SIGN;
  } else if (m->family == SBP11_EDDSA) {
    /* Ed25519 only (no Ed448): key size in bits, as SoftHSM and OpenSC give it. */
    info->ulMinKeySize = 256;
    info->ulMaxKeySize = 256;
    info->flags = CKF_SIGN;
  } else if (m->family == SBP11_MLDSA) {
    /* PKCS#11 3.2 (ML-DSA): the range of public key sizes in bytes, ML-DSA-44 to ML-DSA-87. */
    info->ulMinKeySize = 1312;
    info->ulMaxKeySize = 2592;
    info->flags = CKF_SIGN;
  } else {
    info->ulMinKeySize = 256;
    info->ulMaxKeySize = 521;
    info->flags = CKF_SIGN | CKF_EC_F_P | CKF_EC_NAMEDCURVE | CKF_EC_UNCOMPRESS;
  }
  return CKR_OK;
}

size_t sbp11_mech_allowed(const sbp11_keyinfo *key, CK_MECHANISM_TYPE *out, size_t max) {
  size_t n = 0;
  for (size_t i = 0; i < NMECHS; i++) {
    const sbp11_mech *m = &MECHS[i];
    if (m->family != key->family) continue;
    if (out && n < max) out[n] = m->type;
    n++;
  }
  return n;
}

size_t sbp11_hash_len(int hash) {
  switch (hash) {
  case SBP11_SHA256: return 32;
  case SBP11_SHA384: return 48;
  case SBP11_SHA512: return 64;
  case SBP11_MU: return SBP11_MU_LEN;
  }
  return 0;
}

const void *sbp11_hash_md(int hash) {
  switch (hash) {
  case SBP11_SHA256: return EVP_sha256();
  case SBP11_SHA384: return EVP_sha384();
  case SBP11_SHA512: return EVP_sha512();
  case SBP11_MU: return EVP_shake256();
  }
  return NULL;
}

const char *sbp11_algorithm_name(int scheme, int hash) {
  static const char *const names[3][3] = {
      {"RSASSA_PKCS1_V1_5_SHA_256", "RSASSA_PKCS1_V1_5_SHA_384", "RSASSA_PKCS1_V1_5_SHA_512"},
      {"RSASSA_PSS_SHA_256", "RSASSA_PSS_SHA_384", "RSASSA_PSS_SHA_512"},
      {"ECDSA_SHA_256", "ECDSA_SHA_384", "ECDSA_SHA_512"},
  };
  if (scheme == SBP11_MLDSA_PURE) return hash == SBP11_MU ? "ML_DSA_SHAKE_256" : NULL;
  if (scheme == SBP11_EDDSA_PURE) return "ED25519_SHA_512";
  if (scheme < SBP11_PKCS1 || scheme > SBP11_ECDSA || hash < SBP11_SHA256 || hash > SBP11_SHA512) return NULL;
  return names[scheme - 1][hash - 1];
}

static int hash_of_ckm(CK_MECHANISM_TYPE t) {
  switch (t) {
  case CKM_SHA256: return SBP11_SHA256;
  case CKM_SHA384: return SBP11_SHA384;
  case CKM_SHA512: return SBP11_SHA512;
  }
  return SBP11_HASH_NONE;
}

static int hash_of_mgf(CK_RSA_PKCS_MGF_TYPE t) {
  switch (t) {
  case CKG_MGF1_SHA256: return SBP11_SHA256;
  case CKG_MGF1_SHA384: return SBP11_SHA384;
  case CKG_MGF1_SHA512: return SBP11_SHA512;
  }
  return SBP11_HASH_NONE;
}

CK_RV sbp11_mech_plan(const CK_MECHANISM *m, const sbp11_keyinfo *key, sbp11_signplan *plan) {
  memset(plan, 0, sizeof(*plan));
  const sbp11_mech *mech = sbp11_mech_find(m->mechanism);
  if (!mech) return CKR_MECHANISM_INVALID;
  if (mech->family != key->family) return CKR_KEY_TYPE_INCONSISTENT;
  plan->mech = mech;
  plan->hash = mech->hash;
  if (mech->scheme == SBP11_PSS) {
    if (!m->pParameter || m->ulParameterLen != sizeof(CK_RSA_PKCS_PSS_PARAMS)) return CKR_MECHANISM_PARAM_INVALID;
    memcpy(&plan->pss, m->pParameter, sizeof(plan->pss));
    int h = hash_of_ckm(plan->pss.hashAlg);
    if (h == SBP11_HASH_NONE || hash_of_mgf(plan->pss.mgf) != h) return CKR_MECHANISM_PARAM_INVALID;
    if (mech->hash != SBP11_HASH_NONE && mech->hash != h) return CKR_MECHANISM_PARAM_INVALID;
    if (plan->pss.sLen != sbp11_hash_len(h)) return CKR_MECHANISM_PARAM_INVALID; /* the service's salt length */
    plan->hash = h;
    plan->has_pss = 1;
  } else if (mech->scheme == SBP11_MLDSA_PURE) {
    return sbp11_mldsa_params_check(m);
  } else if (mech->scheme == SBP11_EDDSA_PURE) {
    return sbp11_eddsa_params_check(m);
  } else if (m->ulParameterLen != 0) {
    return CKR_MECHANISM_PARAM_INVALID;
  }
  return CKR_OK;
}

CK_RV sbp11_eddsa_params_check(const CK_MECHANISM *m) {
  if (!m->pParameter && m->ulParameterLen == 0) return CKR_OK; /* pure Ed25519 */
  if (!m->pParameter || m->ulParameterLen != sizeof(CK_EDDSA_PARAMS)) return CKR_MECHANISM_PARAM_INVALID;
  CK_EDDSA_PARAMS p;
  memcpy(&p, m->pParameter, sizeof(p));
  /* Ed25519ph (phFlag) and Ed25519ctx (a context) are other signatures than the pure Ed25519 the service makes. */
  if (p.phFlag != CK_FALSE || p.ulContextDataLen != 0) return CKR_MECHANISM_PARAM_INVALID;
  return CKR_OK;
}

CK_RV sbp11_mldsa_params_check(const CK_MECHANISM *m) {
  if (!m->pParameter && m->ulParameterLen == 0) return CKR_OK; /* the default: hedge preferred, no context */
  if (!m->pParameter || m->ulParameterLen != sizeof(CK_SIGN_ADDITIONAL_CONTEXT)) return CKR_MECHANISM_PARAM_INVALID;
  CK_SIGN_ADDITIONAL_CONTEXT p;
  memcpy(&p, m->pParameter, sizeof(p));
  if (p.ulContextLen != 0) return CKR_MECHANISM_PARAM_INVALID; /* μ is computed with the empty context */
  if (p.hedgeVariant != CKH_HEDGE_PREFERRED && p.hedgeVariant != CKH_HEDGE_REQUIRED)
    return CKR_MECHANISM_PARAM_INVALID; /* deterministic (or unknown): the service signs hedged */
  return CKR_OK;
}

/* DER DigestInfo prefixes (SEQUENCE { SEQUENCE { OID, NULL }, OCTET STRING }) and the same without the NULL
 * parameters, which RFC 8017 section 9.2 note 2 and RFC 4055 also allow for SHA-2. */
static const struct {
  int hash;
  uint8_t oid_last; /* 2.16.840.1.101.3.4.2.<n> */
} DI_HASHES[] = {{SBP11_SHA256, 1}, {SBP11_SHA384, 2}, {SBP11_SHA512, 3}};

int sbp11_digestinfo_parse(const uint8_t *in, size_t len, int *hash, const uint8_t **digest) {
  static const uint8_t oid_prefix[] = {0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02};
  /* Every length here is below 128, so every DER length is one byte: anything else is not a SHA-2 DigestInfo. */
  if (len < 2 || in[0] != 0x30 || in[1] != len - 2) return -1;
  const uint8_t *p = in + 2, *end = in + len;
  if (end - p < 2 || p[0] != 0x30) return -1;
  size_t alglen = p[1];
  if (alglen != 11 && alglen != 13) return -1;
  if ((size_t)(end - p - 2) < alglen) return -1;
  const uint8_t *alg = p + 2;
  if (memcmp(alg, oid_prefix, sizeof(oid_prefix)) != 0) return -1;
  int h = SBP11_HASH_NONE;
  for (size_t i = 0; i < 3; i++)
    if (alg[sizeof(oid_prefix)] == DI_HASHES[i].oid_last) h = DI_HASHES[i].hash;
  if (h == SBP11_HASH_NONE) return -1;
  if (alglen == 13 && (alg[11] != 0x05 || alg[12] != 0x00)) return -1;
  p = alg + alglen;
  size_t dlen = sbp11_hash_len(h);
  if (end - p < 2 || p[0] != 0x04 || p[1] != dlen || (size_t)(end - p - 2) != dlen) return -1;
  *hash = h;
  *digest = p + 2;
  return 0;
}

CK_RV sbp11_mech_raw_digest(sbp11_signplan *plan, const sbp11_keyinfo *key, const uint8_t *in, size_t len,
                            const uint8_t **digest, size_t *dlen) {
  switch (plan->mech->scheme) {
  case SBP11_PKCS1: {
    if (len > key->sig_len - 11) return CKR_DATA_LEN_RANGE;
    int h;
    if (sbp11_digestinfo_parse(in, len, &h, digest) != 0) return CKR_DATA_INVALID;
    plan->hash = h;
    *dlen = sbp11_hash_len(h);
    return CKR_OK;
  }
  case SBP11_PSS:
    if (len != sbp11_hash_len(plan->hash)) return CKR_DATA_LEN_RANGE;
    *digest = in;
    *dlen = len;
    return CKR_OK;
  case SBP11_ECDSA: {
    /* Any SHA-2 digest on any curve, as a plain HSM signs it (TLS 1.2 stacks hand a P-384 key a SHA-256 digest);
     * the length says which, and the service is told that digest, not the curve's. */
    int h = SBP11_HASH_NONE;
    for (int c = SBP11_SHA256; c <= SBP11_SHA512; c++)
      if (len == sbp11_hash_len(c)) h = c;
    if (h == SBP11_HASH_NONE) return CKR_DATA_LEN_RANGE;
    plan->hash = h;
    *digest = in;
    *dlen = len;
    return CKR_OK;
  }
  }
  return CKR_GENERAL_ERROR;
}
