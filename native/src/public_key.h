/* A key's public half as the daemon's LIST_OK sends it (a SubjectPublicKeyInfo and its KEY_SPEC), read into what
 * the PKCS#11 objects show: RSA modulus and exponent, the EC or Ed25519 point and curve OID, the ML-DSA key. */
#ifndef SBP11_PUBLIC_KEY_H
#define SBP11_PUBLIC_KEY_H

#include <stddef.h>
#include <stdint.h>

#include "mech.h"
#include "wire.h"

typedef struct sbp11_pubkey {
  sbp11_keyinfo info;
  uint8_t modulus[512];
  size_t modulus_len;
  uint8_t exponent[16];
  size_t exponent_len;
  const uint8_t *ec_params; /* DER OID of the named curve */
  size_t ec_params_len;
  uint8_t ec_point[140]; /* DER OCTET STRING around the uncompressed point (Ed25519: around the 32-byte key) */
  size_t ec_point_len;
  const uint8_t *ml_dsa_pk; /* ML-DSA: the raw public key, inside the SPKI */
  size_t ml_dsa_pk_len;
} sbp11_pubkey;

/* Parses the SPKI and checks it is what KEY_SPEC says (and RAW_PUBLIC_KEY, when sent, for ML-DSA). Returns 0, or -1
 * with a reason in `why`. */
int sbp11_parse_spki(const char *spec, const uint8_t *der, size_t len, const sbw_item *raw, sbp11_pubkey *pk, char *why,
                     size_t whylen);

#endif
