/* The one place that maps PKCS#11 mechanisms (and DER DigestInfo) to the service's signing algorithms. */
#ifndef SBP11_MECH_H
#define SBP11_MECH_H

#include <stddef.h>
#include <stdint.h>

#include "sbp11_pkcs11.h"

enum sbp11_family { SBP11_RSA = 1, SBP11_EC = 2, SBP11_MLDSA = 3, SBP11_EDDSA = 4 };
#define SBP11_FAMILY_LAST SBP11_EDDSA
/* SBP11_MU: ML-DSA's message representative μ = SHAKE256(tr || 0x00 || 0x00 || M, 64), tr = SHAKE256(pk, 64)
 * (FIPS 204, pure ML-DSA with the empty context): what the service signs for an ML-DSA key (KMS EXTERNAL_MU). */
enum sbp11_hash { SBP11_HASH_NONE = 0, SBP11_SHA256 = 1, SBP11_SHA384 = 2, SBP11_SHA512 = 3, SBP11_MU = 4 };
/* SBP11_EDDSA_PURE: CKM_EDDSA on an Ed25519 key, pure Ed25519: the message itself goes to the daemon. */
enum sbp11_scheme { SBP11_PKCS1 = 1, SBP11_PSS = 2, SBP11_ECDSA = 3, SBP11_MLDSA_PURE = 4, SBP11_EDDSA_PURE = 5 };

#define SBP11_MU_LEN 64
/* The most bytes of message CKM_EDDSA signs: the service's one bound for pure Ed25519 at every door (AWS KMS's
 * RAW bound, ED25519_MAX_MESSAGE_BYTES in src/crypto/algorithms.ts). Past it: CKR_DATA_LEN_RANGE. */
#define SBP11_EDDSA_MESSAGE_MAX 4096
#define SBP11_ED25519_SIG_LEN 64
#define SBP11_SIG_MAX 4627 /* the largest signature a key makes: ML-DSA-87 */

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
  size_t sig_len;  /* RSA: modulus bytes; EC: 2 * field bytes; ML-DSA: 2420, 3309, 4627 */
  CK_ULONG parameter_set; /* ML-DSA: CKP_ML_DSA_44/65/87 */
  uint8_t tr[64];         /* ML-DSA: SHAKE256(pk, 64), the start of every μ */
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

/* C_SignInit's checks, before anything touches the network. CKM_ML_DSA takes no parameter or a
 * CK_SIGN_ADDITIONAL_CONTEXT with an empty context and a hedge the service gives (not CKH_DETERMINISTIC_REQUIRED). */
CK_RV sbp11_mech_plan(const CK_MECHANISM *m, const sbp11_keyinfo *key, sbp11_signplan *plan);
/* CKM_EDDSA's parameter alone: none, or CK_EDDSA_PARAMS with phFlag false and no context (pure Ed25519). */
CK_RV sbp11_eddsa_params_check(const CK_MECHANISM *m);
/* CKM_ML_DSA's parameter alone: CKR_OK or CKR_MECHANISM_PARAM_INVALID (refusal.c says which rule). */
CK_RV sbp11_mldsa_params_check(const CK_MECHANISM *m);
/* Turns the data of a mechanism without hashing into the digest to sign: CKM_RSA_PKCS parses the DER DigestInfo
 * (and sets plan->hash), PSS checks the digest length, CKM_ECDSA takes any SHA-2 length (and sets plan->hash). */
CK_RV sbp11_mech_raw_digest(sbp11_signplan *plan, const sbp11_keyinfo *key, const uint8_t *in, size_t len,
                            const uint8_t **digest, size_t *dlen);

size_t sbp11_hash_len(int hash);
const void *sbp11_hash_md(int hash); /* const EVP_MD * */
/* The wire ALGORITHM name, e.g. RSASSA_PSS_SHA_384, ML_DSA_SHAKE_256. */
const char *sbp11_algorithm_name(int scheme, int hash);
/* Strictly parses a DER DigestInfo for SHA-256/384/512. Returns 0 and the hash and digest, or -1. */
int sbp11_digestinfo_parse(const uint8_t *in, size_t len, int *hash, const uint8_t **digest);

#endif
