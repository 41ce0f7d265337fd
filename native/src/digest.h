/* CKM_SHA256/384/512 as digest mechanisms, computed here with libcrypto. SunPKCS11 offers RSASSA-PSS only when the
 * token lists the digest too: it hashes on the token, then signs the digest with CKM_RSA_PKCS_PSS. */
#ifndef SBP11_DIGEST_H
#define SBP11_DIGEST_H

#include <stddef.h>

#include "sbp11_pkcs11.h"

/* The libcrypto digest (const EVP_MD *) of a digest mechanism; NULL for any other mechanism. */
const void *sbp11_digest_md(CK_MECHANISM_TYPE type);
/* The digest mechanisms, as sbp11_mech_list: the count, and up to max of them in out. */
size_t sbp11_digest_list(CK_MECHANISM_TYPE *out, size_t max);
/* CKF_DIGEST for a digest mechanism; CKR_MECHANISM_INVALID for any other. */
CK_RV sbp11_digest_mech_info(CK_MECHANISM_TYPE type, CK_MECHANISM_INFO *info);

#endif
