/* The one place that maps PKCS#11 mechanisms (and DER DigestInfo) to the service's signing algorithms. */
#ifndef SBP11_MECH_H
#define SBP11_MECH_H

#include <stddef.h>
#include <stdint.h>

#include "sbp11_pkcs11.h"

enum sbp11_family { SBP11_RSA = 1, SBP11_EC = 2 };
enum sbp11_hash { SBP11_HASH_NONE = 0, SBP11_SHA256 = 1, SBP11_SHA384 = 2, SBP11_SHA512 = 3 };
enum sbp11_scheme { SBP11_PKCS1 = 1, SBP11_PSS = 2, SBP11_ECDSA = 3 };

typedef struct sbp11_mech {
  CK_MECHANISM_TYPE type;
  const char *name;
  int family;
  int scheme;
  int hash; /* SBP11_HASH_NONE: the input is already a digest (or a DigestInfo) */
} sbp11_mech;

/* What a key is, as far as signing goes. */
typedef struct sbp11_keyinfo {
  int family;
  unsigned bits;   /* RSA modulus / EC field size in bits */
  int ec_hash;     /* EC: the hash KMS pairs with the curve (every ECDSA mechanism works on every curve) */
  size_t sig_len;  /* RSA: modulus bytes; EC: 2 * field bytes */
} sbp11_keyinfo;

/* The outcome of checking C_SignInit's mechanism against a key. */
typedef struct sbp11_signplan {
  const sbp11_mech *mech;
  int hash; /* the digest algorithm the service will be told (for CKM_RSA_PKCS: from the DigestInfo, later) */
  int has_pss;
  CK_RSA_PKCS_PSS_PARAMS pss;
} sbp11_signplan;

const sbp11_mech *sbp11_mech_find(CK_MECHANISM_TYPE type);
/* Every mechanism of a family (0 = all), in a stable order. Returns how many were written (or would be). */
size_t sbp11_mech_list(int family, CK_MECHANISM_TYPE *out, size_t max);
CK_RV sbp11_mech_info(CK_MECHANISM_TYPE type, CK_MECHANISM_INFO *info);
/* The mechanisms a key allows (CKA_ALLOWED_MECHANISMS). */
size_t sbp11_mech_allowed(const sbp11_keyinfo *key, CK_MECHANISM_TYPE *out, size_t max);

/* C_SignInit's checks, before anything touches the network. */
CK_RV sbp11_mech_plan(const CK_MECHANISM *m, const sbp11_keyinfo *key, sbp11_signplan *plan);
/* Turns the data of a mechanism without hashing into the digest to sign: CKM_RSA_PKCS parses the DER DigestInfo
 * (and sets plan->hash), PSS checks the digest length, CKM_ECDSA takes any SHA-2 length (and sets plan->hash). */
CK_RV sbp11_mech_raw_digest(sbp11_signplan *plan, const sbp11_keyinfo *key, const uint8_t *in, size_t len,
                            const uint8_t **digest, size_t *dlen);

size_t sbp11_hash_len(int hash);
const void *sbp11_hash_md(int hash); /* const EVP_MD * */
/* The wire ALGORITHM name, e.g. RSASSA_PSS_SHA_384. */
const char *sbp11_algorithm_name(int scheme, int hash);
/* Strictly parses a DER DigestInfo for SHA-256/384/512. Returns 0 and the hash and digest, or -1. */
int sbp11_digestinfo_parse(const uint8_t *in, size_t len, int *hash, const uint8_t **digest);

#endif
