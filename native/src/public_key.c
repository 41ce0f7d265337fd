#include "public_key.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>

static const uint8_t OID_P256[] = {0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07};
static const uint8_t OID_P384[] = {0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x22};
static const uint8_t OID_P521[] = {0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23};
/* secp256k1 (SEC 2, 1.3.132.0.10): AWS KMS's ECC_SECG_P256K1, signed with CKM_ECDSA like the NIST curves. */
static const uint8_t OID_K256[] = {0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x0a};

static const struct {
  const char *spec;
  int family;
  unsigned bits;
  const char *group;
  const uint8_t *oid;
  size_t oid_len;
  int hash;
} SPECS[] = {
    {"RSA_2048", SBP11_RSA, 2048, NULL, NULL, 0, 0},
    {"RSA_3072", SBP11_RSA, 3072, NULL, NULL, 0, 0},
    {"RSA_4096", SBP11_RSA, 4096, NULL, NULL, 0, 0},
    {"ECC_NIST_P256", SBP11_EC, 256, "prime256v1", OID_P256, sizeof(OID_P256), SBP11_SHA256},
    {"ECC_NIST_P384", SBP11_EC, 384, "secp384r1", OID_P384, sizeof(OID_P384), SBP11_SHA384},
    {"ECC_NIST_P521", SBP11_EC, 521, "secp521r1", OID_P521, sizeof(OID_P521), SBP11_SHA512},
    {"ECC_SECG_P256K1", SBP11_EC, 256, "secp256k1", OID_K256, sizeof(OID_K256), SBP11_SHA256},
};

/*
 * Ed25519 (RFC 8410): CKK_EC_EDWARDS, and CKA_EC_PARAMS the DER OID 1.3.101.112 (id-Ed25519). PKCS#11 3.0 allows
 * that or the PrintableString "edwards25519"; the OID is what SoftHSM 2.6 emits, and it is the form the tools here
 * read: pkcs11-provider 1.0 and GnuTLS 3.7 map it to Ed25519 (GnuTLS knows no curve name), OpenSC's pkcs11-tool
 * prints either. CKA_EC_POINT: the 32-byte key in a DER OCTET STRING, as SoftHSM writes it.
 */
static const uint8_t OID_ED25519[] = {0x06, 0x03, 0x2b, 0x65, 0x70};
/* An Ed25519 SPKI is always these 12 bytes and the 32-byte key. */
static const uint8_t ED25519_SPKI_PREFIX[] = {0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00};
#define ED25519_KEY_LEN 32

static int parse_ed25519_spki(const uint8_t *der, size_t len, sbp11_pubkey *pk, char *why, size_t whylen) {
  if (len != sizeof(ED25519_SPKI_PREFIX) + ED25519_KEY_LEN ||
      memcmp(der, ED25519_SPKI_PREFIX, sizeof(ED25519_SPKI_PREFIX)) != 0) {
    snprintf(why, whylen, "PUBLIC_KEY is not an Ed25519 SubjectPublicKeyInfo as KEY_SPEC ECC_NIST_EDWARDS25519 says");
    return -1;
  }
  pk->ec_point[0] = 0x04; /* OCTET STRING */
  pk->ec_point[1] = ED25519_KEY_LEN;
  memcpy(pk->ec_point + 2, der + sizeof(ED25519_SPKI_PREFIX), ED25519_KEY_LEN);
  pk->ec_point_len = 2 + ED25519_KEY_LEN;
  pk->ec_params = OID_ED25519;
  pk->ec_params_len = sizeof(OID_ED25519);
  pk->info.family = SBP11_EDDSA;
  pk->info.bits = 256;
  pk->info.sig_len = SBP11_ED25519_SIG_LEN;
  return 0;
}

/*
 * The EC point, straight from the SPKI's BIT STRING (uncompressed form expected). Not from the EVP_PKEY: in a
 * process where the libp11 engine is loaded, d2i_PUBKEY makes an engine-backed legacy key that does not answer
 * OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY.
 */
static int spki_ec_point(const uint8_t *der, size_t len, uint8_t *point, size_t cap, size_t *plen) {
  const unsigned char *p = der;
  X509_PUBKEY *xp = d2i_X509_PUBKEY(NULL, &p, (long)len);
  const unsigned char *pt = NULL;
  int ptlen = 0;
  int ok = xp && X509_PUBKEY_get0_param(NULL, &pt, &ptlen, NULL, xp) == 1 && ptlen > 0 && (size_t)ptlen <= cap;
  if (ok) {
    memcpy(point, pt, (size_t)ptlen);
    *plen = (size_t)ptlen;
  }
  X509_PUBKEY_free(xp);
  return ok ? 0 : -1;
}

/* ML-DSA (FIPS 204) parameter sets: RFC 9881's SPKI (OID, no parameters, the raw key in the BIT STRING). */
static const struct {
  const char *spec, *oid;
  CK_ULONG parameter_set;
  size_t pk_len, sig_len;
} ML_DSA_SPECS[] = {
    {"ML_DSA_44", "2.16.840.1.101.3.4.3.17", CKP_ML_DSA_44, 1312, 2420},
    {"ML_DSA_65", "2.16.840.1.101.3.4.3.18", CKP_ML_DSA_65, 1952, 3309},
    {"ML_DSA_87", "2.16.840.1.101.3.4.3.19", CKP_ML_DSA_87, 2592, 4627},
};

/*
 * An ML-DSA SPKI, read with X509_PUBKEY (which keeps an algorithm libcrypto 3.0 does not know), checked against
 * KEY_SPEC and against RAW_PUBLIC_KEY when the daemon sent it. Also computes tr = SHAKE256(pk, 64) once per key.
 */
static int parse_ml_dsa_spki(size_t s, const uint8_t *der, size_t len, const sbw_item *raw, sbp11_pubkey *pk, char *why,
                             size_t whylen) {
  const char *spec = ML_DSA_SPECS[s].spec;
  const unsigned char *p = der;
  X509_PUBKEY *xp = d2i_X509_PUBKEY(NULL, &p, (long)len);
  const unsigned char *key = NULL;
  int key_len = 0, ptype = V_ASN1_UNDEF;
  ASN1_OBJECT *oid = NULL;
  X509_ALGOR *alg = NULL;
  char oid_text[64] = "";
  int rc = -1;
  if (!xp || p != der + len || X509_PUBKEY_get0_param(&oid, &key, &key_len, &alg, xp) != 1) {
    snprintf(why, whylen, "PUBLIC_KEY is not a SubjectPublicKeyInfo");
    goto out;
  }
  OBJ_obj2txt(oid_text, sizeof(oid_text), oid, 1);
  X509_ALGOR_get0(NULL, &ptype, NULL, alg);
  if (strcmp(oid_text, ML_DSA_SPECS[s].oid) != 0 || ptype != V_ASN1_UNDEF) {
    snprintf(why, whylen, "PUBLIC_KEY is not an %s key as KEY_SPEC %s says (algorithm %s)", spec, spec, oid_text);
    goto out;
  }
  if ((size_t)key_len != ML_DSA_SPECS[s].pk_len) {
    snprintf(why, whylen, "PUBLIC_KEY holds a %d-byte key; %s keys have %zu bytes", key_len, spec,
             ML_DSA_SPECS[s].pk_len);
    goto out;
  }
  if (raw && (raw->len != (uint32_t)key_len || memcmp(raw->p, key, raw->len) != 0)) {
    snprintf(why, whylen, "RAW_PUBLIC_KEY is not the key in PUBLIC_KEY");
    goto out;
  }
  /* key points into xp, freed below; the SPKI ends with the same bytes (a BIT STRING with no unused bits). */
  pk->ml_dsa_pk = der + len - (size_t)key_len;
  pk->ml_dsa_pk_len = (size_t)key_len;
  if (memcmp(pk->ml_dsa_pk, key, (size_t)key_len) != 0) {
    snprintf(why, whylen, "PUBLIC_KEY has bytes after the key");
    goto out;
  }
  EVP_MD_CTX *md = EVP_MD_CTX_new();
  int ok = md && EVP_DigestInit_ex(md, EVP_shake256(), NULL) && EVP_DigestUpdate(md, key, (size_t)key_len) &&
           EVP_DigestFinalXOF(md, pk->info.tr, sizeof(pk->info.tr));
  EVP_MD_CTX_free(md);
  if (!ok) {
    snprintf(why, whylen, "libcrypto has no SHAKE256");
    goto out;
  }
  pk->info.family = SBP11_MLDSA;
  pk->info.parameter_set = ML_DSA_SPECS[s].parameter_set;
  pk->info.sig_len = ML_DSA_SPECS[s].sig_len;
  pk->info.bits = (unsigned)(ML_DSA_SPECS[s].pk_len * 8);
  rc = 0;
out:
  X509_PUBKEY_free(xp);
  return rc;
}

int sbp11_parse_spki(const char *spec, const uint8_t *der, size_t len, const sbw_item *raw, sbp11_pubkey *pk, char *why,
                     size_t whylen) {
  memset(pk, 0, sizeof(*pk));
  if (!strcmp(spec, "ECC_NIST_EDWARDS25519")) return parse_ed25519_spki(der, len, pk, why, whylen);
  for (size_t m = 0; m < sizeof(ML_DSA_SPECS) / sizeof(ML_DSA_SPECS[0]); m++)
    if (!strcmp(ML_DSA_SPECS[m].spec, spec)) return parse_ml_dsa_spki(m, der, len, raw, pk, why, whylen);
  size_t s;
  for (s = 0; s < sizeof(SPECS) / sizeof(SPECS[0]); s++)
    if (!strcmp(SPECS[s].spec, spec)) break;
  if (s == sizeof(SPECS) / sizeof(SPECS[0])) {
    snprintf(why, whylen, "key spec %s is not supported by this module", spec);
    return -1;
  }
  const unsigned char *p = der;
  EVP_PKEY *pkey = d2i_PUBKEY(NULL, &p, (long)len);
  if (!pkey || p != der + len) {
    snprintf(why, whylen, "PUBLIC_KEY is not a SubjectPublicKeyInfo");
    EVP_PKEY_free(pkey);
    return -1;
  }
  int rc = -1;
  BIGNUM *n = NULL, *e = NULL;
  if (SPECS[s].family == SBP11_RSA) {
    if (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_RSA || (unsigned)EVP_PKEY_get_bits(pkey) != SPECS[s].bits) {
      snprintf(why, whylen, "PUBLIC_KEY is not a %u-bit RSA key as KEY_SPEC %s says", SPECS[s].bits, spec);
      goto out;
    }
    if (!EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_RSA_N, &n) ||
        !EVP_PKEY_get_bn_param(pkey, OSSL_PKEY_PARAM_RSA_E, &e) || (size_t)BN_num_bytes(e) > sizeof(pk->exponent)) {
      snprintf(why, whylen, "cannot read the RSA public key");
      goto out;
    }
    pk->modulus_len = (size_t)BN_bn2bin(n, pk->modulus);
    pk->exponent_len = (size_t)BN_bn2bin(e, pk->exponent);
    pk->info.sig_len = SPECS[s].bits / 8;
  } else {
    char group[64] = "";
    uint8_t point[140];
    size_t plen = 0;
    if (EVP_PKEY_get_base_id(pkey) != EVP_PKEY_EC ||
        !EVP_PKEY_get_utf8_string_param(pkey, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof(group), NULL) ||
        strcmp(group, SPECS[s].group) != 0) {
      snprintf(why, whylen, "PUBLIC_KEY is not on the curve KEY_SPEC %s says", spec);
      goto out;
    }
    if (spki_ec_point(der, len, point, sizeof(point), &plen) != 0 || plen != 1 + 2 * ((SPECS[s].bits + 7) / 8) ||
        point[0] != 0x04) {
      snprintf(why, whylen, "cannot read the EC point");
      goto out;
    }
    size_t o = 0;
    pk->ec_point[o++] = 0x04; /* OCTET STRING */
    if (plen >= 128) pk->ec_point[o++] = 0x81;
    pk->ec_point[o++] = (uint8_t)plen;
    memcpy(pk->ec_point + o, point, plen);
    pk->ec_point_len = o + plen;
    pk->ec_params = SPECS[s].oid;
    pk->ec_params_len = SPECS[s].oid_len;
    pk->info.ec_hash = SPECS[s].hash;
    pk->info.sig_len = 2 * ((SPECS[s].bits + 7) / 8);
  }
  pk->info.family = SPECS[s].family;
  pk->info.bits = SPECS[s].bits;
  rc = 0;
out:
  BN_free(n);
  BN_free(e);
  EVP_PKEY_free(pkey);
  return rc;
}
