#include "digest.h"

#include <openssl/evp.h>

static const CK_MECHANISM_TYPE DIGESTS[] = {CKM_SHA256, CKM_SHA384, CKM_SHA512};
#define NDIGESTS (sizeof(DIGESTS) / sizeof(DIGESTS[0]))

const void *sbp11_digest_md(CK_MECHANISM_TYPE type) {
  switch (type) {
  case CKM_SHA256: return EVP_sha256();
  case CKM_SHA384: return EVP_sha384();
  case CKM_SHA512: return EVP_sha512();
  }
  return NULL; /* no SHA-1: the service signs nothing made with it, so the token does not offer it either */
}

size_t sbp11_digest_list(CK_MECHANISM_TYPE *out, size_t max) {
  for (size_t i = 0; i < NDIGESTS && i < max; i++) out[i] = DIGESTS[i];
  return NDIGESTS;
}

CK_RV sbp11_digest_mech_info(CK_MECHANISM_TYPE type, CK_MECHANISM_INFO *info) {
  if (!sbp11_digest_md(type)) return CKR_MECHANISM_INVALID;
  info->ulMinKeySize = 0;
  info->ulMaxKeySize = 0;
  info->flags = CKF_DIGEST;
  return CKR_OK;
}
