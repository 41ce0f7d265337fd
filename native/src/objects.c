#include "objects.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

/* ---- attribute lists ---- */

typedef struct attr_list {
  sbp11_attr *a;
  size_t n, cap;
  int failed;
} attr_list;

static void add(attr_list *l, CK_ATTRIBUTE_TYPE type, const void *value, size_t len, int sensitive) {
  if (l->failed) return;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 32;
    sbp11_attr *na = realloc(l->a, cap * sizeof(*na));
    if (!na) {
      l->failed = 1;
      return;
    }
    l->a = na, l->cap = cap;
  }
  sbp11_attr *at = &l->a[l->n];
  at->type = type;
  at->len = (CK_ULONG)len;
  at->sensitive = sensitive;
  at->value = NULL;
  if (len) {
    at->value = malloc(len);
    if (!at->value) {
      l->failed = 1;
      return;
    }
    memcpy(at->value, value, len);
  }
  l->n++;
}

static void add_bool(attr_list *l, CK_ATTRIBUTE_TYPE t, int v) {
  CK_BBOOL b = v ? CK_TRUE : CK_FALSE;
  add(l, t, &b, sizeof(b), 0);
}
static void add_ulong(attr_list *l, CK_ATTRIBUTE_TYPE t, CK_ULONG v) { add(l, t, &v, sizeof(v), 0); }
static void add_str(attr_list *l, CK_ATTRIBUTE_TYPE t, const char *s) { add(l, t, s, strlen(s), 0); }
static void add_sensitive(attr_list *l, CK_ATTRIBUTE_TYPE t) { add(l, t, NULL, 0, 1); }

static void attrs_free(sbp11_attr *a, size_t n) {
  for (size_t i = 0; i < n; i++) free(a[i].value);
  free(a);
}

/* ---- public keys ---- */

typedef struct pubkey {
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
} pubkey;

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

static int parse_ed25519_spki(const uint8_t *der, size_t len, pubkey *pk, char *why, size_t whylen) {
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
static int parse_ml_dsa_spki(size_t s, const uint8_t *der, size_t len, const sbw_item *raw, pubkey *pk, char *why,
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

/* Parses the SPKI and checks it is what KEY_SPEC says. Returns 0, or -1 with a reason. */
static int parse_spki(const char *spec, const uint8_t *der, size_t len, const sbw_item *raw, pubkey *pk, char *why,
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

/* ---- certificates ---- */

typedef struct certinfo {
  uint8_t *subject, *issuer, *serial;
  int subject_len, issuer_len, serial_len;
  char cn[65];
} certinfo;

static int parse_cert(const uint8_t *der, size_t len, certinfo *ci) {
  memset(ci, 0, sizeof(*ci));
  const unsigned char *p = der;
  X509 *x = d2i_X509(NULL, &p, (long)len);
  if (!x || p != der + len) {
    X509_free(x);
    return -1;
  }
  ci->subject_len = i2d_X509_NAME(X509_get_subject_name(x), &ci->subject);
  ci->issuer_len = i2d_X509_NAME(X509_get_issuer_name(x), &ci->issuer);
  ci->serial_len = i2d_ASN1_INTEGER((ASN1_INTEGER *)X509_get0_serialNumber(x), &ci->serial);
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, ci->cn, sizeof(ci->cn)) < 0) ci->cn[0] = 0;
  X509_free(x);
  if (ci->subject_len <= 0 || ci->issuer_len <= 0 || ci->serial_len <= 0) return -1;
  return 0;
}

static void cert_free(certinfo *ci) {
  OPENSSL_free(ci->subject);
  OPENSSL_free(ci->issuer);
  OPENSSL_free(ci->serial);
}

/* ---- building a token ---- */

typedef struct obj_list {
  sbp11_object *o;
  size_t n, cap;
} obj_list;

static int push_object(obj_list *ol, CK_OBJECT_CLASS cls, attr_list *al, size_t key) {
  if (al->failed) return -1;
  if (ol->n == ol->cap) {
    size_t cap = ol->cap ? ol->cap * 2 : 8;
    sbp11_object *no = realloc(ol->o, cap * sizeof(*no));
    if (!no) return -1;
    ol->o = no, ol->cap = cap;
  }
  ol->o[ol->n++] = (sbp11_object){.cls = cls, .attrs = al->a, .nattrs = al->n, .key = key};
  al->a = NULL, al->n = al->cap = 0;
  return 0;
}

static void add_common(attr_list *l, CK_OBJECT_CLASS cls, const char *label, const uint8_t *id, size_t id_len) {
  add_ulong(l, CKA_CLASS, cls);
  add_bool(l, CKA_TOKEN, 1);
  add_bool(l, CKA_PRIVATE, 0); /* the token needs no login: nothing is hidden before C_Login */
  add_bool(l, CKA_MODIFIABLE, 0);
  add_bool(l, CKA_COPYABLE, 0);
  add_bool(l, CKA_DESTROYABLE, 0);
  add_str(l, CKA_LABEL, label);
  add(l, CKA_ID, id, id_len, 0);
}

static void add_key_common(attr_list *l, const pubkey *pk, const uint8_t *spki, size_t spki_len,
                           const certinfo *leaf) {
  int family = pk->info.family;
  add_ulong(l, CKA_KEY_TYPE,
            family == SBP11_RSA     ? CKK_RSA
            : family == SBP11_EC    ? CKK_EC
            : family == SBP11_EDDSA ? CKK_EC_EDWARDS
                                    : CKK_ML_DSA);
  add(l, CKA_START_DATE, NULL, 0, 0);
  add(l, CKA_END_DATE, NULL, 0, 0);
  add_bool(l, CKA_DERIVE, 0);
  add_bool(l, CKA_LOCAL, 1);
  add_ulong(l, CKA_KEY_GEN_MECHANISM,
            family == SBP11_RSA     ? CKM_RSA_PKCS_KEY_PAIR_GEN
            : family == SBP11_EC    ? CKM_EC_KEY_PAIR_GEN
            : family == SBP11_EDDSA ? CKM_EC_EDWARDS_KEY_PAIR_GEN
                                    : CKM_ML_DSA_KEY_PAIR_GEN);
  CK_MECHANISM_TYPE allowed[16];
  size_t na = sbp11_mech_allowed(&pk->info, allowed, 16);
  add(l, CKA_ALLOWED_MECHANISMS, allowed, na * sizeof(CK_MECHANISM_TYPE), 0);
  add(l, CKA_SUBJECT, leaf ? leaf->subject : NULL, leaf ? (size_t)leaf->subject_len : 0, 0);
  add(l, CKA_PUBLIC_KEY_INFO, spki, spki_len, 0);
  if (family == SBP11_RSA) {
    add(l, CKA_MODULUS, pk->modulus, pk->modulus_len, 0);
    add_ulong(l, CKA_MODULUS_BITS, pk->info.bits);
    add(l, CKA_PUBLIC_EXPONENT, pk->exponent, pk->exponent_len, 0);
  } else if (family == SBP11_MLDSA) {
    add_ulong(l, CKA_PARAMETER_SET, pk->info.parameter_set); /* CKA_VALUE: the public key's, the private's is secret */
  } else {
    add(l, CKA_EC_PARAMS, pk->ec_params, pk->ec_params_len, 0);
    add(l, CKA_EC_POINT, pk->ec_point, pk->ec_point_len, 0);
  }
}

static int add_cert(obj_list *ol, const uint8_t *der, size_t len, const char *label, const uint8_t *id,
                    size_t id_len, CK_ULONG category, size_t key) {
  certinfo ci;
  if (parse_cert(der, len, &ci) != 0) {
    cert_free(&ci);
    SBP11_WARN("a certificate for key %s is not X.509 DER; left out", label);
    return 0;
  }
  uint8_t own_id[8];
  if (!id) { /* chain certificates: a short id of their own, from their content */
    uint8_t h[32];
    SHA256(der, len, h);
    memcpy(own_id, h, sizeof(own_id));
    id = own_id, id_len = sizeof(own_id);
    if (ci.cn[0]) label = ci.cn;
  }
  attr_list l = {0};
  add_common(&l, CKO_CERTIFICATE, label, id, id_len);
  add_ulong(&l, CKA_CERTIFICATE_TYPE, CKC_X_509);
  add_bool(&l, CKA_TRUSTED, 0);
  add_ulong(&l, CKA_CERTIFICATE_CATEGORY, category);
  add(&l, CKA_SUBJECT, ci.subject, (size_t)ci.subject_len, 0);
  add(&l, CKA_ISSUER, ci.issuer, (size_t)ci.issuer_len, 0);
  add(&l, CKA_SERIAL_NUMBER, ci.serial, (size_t)ci.serial_len, 0);
  add(&l, CKA_VALUE, der, len, 0);
  add(&l, CKA_START_DATE, NULL, 0, 0);
  add(&l, CKA_END_DATE, NULL, 0, 0);
  cert_free(&ci);
  if (push_object(ol, CKO_CERTIFICATE, &l, key) != 0) {
    attrs_free(l.a, l.n);
    return -1;
  }
  return 0;
}

static int have_cert(const obj_list *ol, const uint8_t *der, size_t len) {
  for (size_t i = 0; i < ol->n; i++) {
    if (ol->o[i].cls != CKO_CERTIFICATE) continue;
    const sbp11_attr *v = sbp11_object_attr(&ol->o[i], CKA_VALUE);
    if (v && v->len == len && !memcmp(v->value, der, len)) return 1;
  }
  return 0;
}

static int build_key(sbp11_token *t, obj_list *ol, const sbw_node *kn) {
  char spec[24], label[128];
  sbw_get_str(kn, SBW_T_KEY_SPEC, spec, sizeof(spec));
  sbw_get_str(kn, SBW_T_KEY_LABEL, label, sizeof(label));
  const sbw_item *id = sbw_get(kn, SBW_T_KEY_ID), *spki = sbw_get(kn, SBW_T_PUBLIC_KEY);
  pubkey pk;
  char why[160];
  if (parse_spki(spec, spki->p, spki->len, sbw_get(kn, SBW_T_RAW_PUBLIC_KEY), &pk, why, sizeof(why)) != 0) {
    SBP11_WARN("token \"%s\": key %s left out: %s", t->label, label, why);
    return 0;
  }
  sbp11_key *nk = realloc(t->keys, (t->nkeys + 1) * sizeof(*nk));
  if (!nk) return -1;
  t->keys = nk;
  size_t ki = t->nkeys++;
  sbp11_key *k = &t->keys[ki];
  memset(k, 0, sizeof(*k));
  memcpy(k->id, id->p, id->len);
  k->id_len = id->len;
  k->info = pk.info;
  snprintf(k->spec, sizeof(k->spec), "%s", spec);
  t->families |= 1 << pk.info.family;

  const sbw_item *cert = sbw_get(kn, SBW_T_CERTIFICATE);
  certinfo leaf;
  int have_leaf = cert && parse_cert(cert->p, cert->len, &leaf) == 0;
  if (cert && !have_leaf) cert_free(&leaf);

  attr_list l = {0};
  add_common(&l, CKO_PRIVATE_KEY, label, id->p, id->len);
  add_key_common(&l, &pk, spki->p, spki->len, have_leaf ? &leaf : NULL);
  add_bool(&l, CKA_SENSITIVE, 1);
  add_bool(&l, CKA_ALWAYS_SENSITIVE, 1);
  add_bool(&l, CKA_EXTRACTABLE, 0);
  add_bool(&l, CKA_NEVER_EXTRACTABLE, 1);
  add_bool(&l, CKA_SIGN, 1);
  add_bool(&l, CKA_SIGN_RECOVER, 0);
  add_bool(&l, CKA_DECRYPT, 0);
  add_bool(&l, CKA_UNWRAP, 0);
  add_bool(&l, CKA_WRAP_WITH_TRUSTED, 0);
  add_bool(&l, CKA_ALWAYS_AUTHENTICATE, 0);
  if (pk.info.family == SBP11_RSA) {
    static const CK_ATTRIBUTE_TYPE secret[] = {CKA_PRIVATE_EXPONENT, CKA_PRIME_1, CKA_PRIME_2,
                                               CKA_EXPONENT_1, CKA_EXPONENT_2, CKA_COEFFICIENT};
    for (size_t i = 0; i < sizeof(secret) / sizeof(secret[0]); i++) add_sensitive(&l, secret[i]);
  } else if (pk.info.family == SBP11_MLDSA) {
    add_sensitive(&l, CKA_VALUE);
    add_sensitive(&l, CKA_SEED);
  } else {
    add_sensitive(&l, CKA_VALUE);
  }
  int rc = push_object(ol, CKO_PRIVATE_KEY, &l, ki);

  attr_list pl = {0};
  add_common(&pl, CKO_PUBLIC_KEY, label, id->p, id->len);
  add_key_common(&pl, &pk, spki->p, spki->len, have_leaf ? &leaf : NULL);
  add_bool(&pl, CKA_VERIFY, 1);
  add_bool(&pl, CKA_VERIFY_RECOVER, 0);
  add_bool(&pl, CKA_ENCRYPT, 0);
  add_bool(&pl, CKA_WRAP, 0);
  add_bool(&pl, CKA_TRUSTED, 0);
  if (pk.info.family == SBP11_MLDSA) add(&pl, CKA_VALUE, pk.ml_dsa_pk, pk.ml_dsa_pk_len, 0);
  if (rc == 0) rc = push_object(ol, CKO_PUBLIC_KEY, &pl, ki);
  attrs_free(l.a, l.n);
  attrs_free(pl.a, pl.n);
  if (have_leaf) cert_free(&leaf);
  if (rc != 0) return -1;

  if (cert && add_cert(ol, cert->p, cert->len, label, id->p, id->len, 1, ki) != 0) return -1;
  for (size_t i = 0; i < kn->nitems; i++) {
    const sbw_item *it = &kn->items[i];
    if (it->spec->tag != SBW_T_CHAIN_CERTIFICATE || have_cert(ol, it->p, it->len)) continue;
    if (add_cert(ol, it->p, it->len, "chain certificate", NULL, 0, 2, ki) != 0) return -1;
  }
  return 0;
}

CK_RV sbp11_tokens_from_list(const sbw_msg *msg, sbp11_token **tokens_out, size_t *ntokens_out) {
  size_t count = 0;
  for (size_t i = 0; i < msg->body.nitems; i++) count++;
  sbp11_token *tokens = calloc(count ? count : 1, sizeof(*tokens));
  if (!tokens) return CKR_HOST_MEMORY;
  size_t nt = 0;
  for (size_t i = 0; i < msg->body.nitems; i++) {
    const sbw_node *tn = msg->body.items[i].nested;
    sbp11_token *t = &tokens[nt++];
    sbw_get_str(tn, SBW_T_TOKEN_LABEL, t->label, sizeof(t->label));
    t->tenant = sbw_dup_str(tn, SBW_T_TENANT);
    if (!t->tenant) goto oom;
    uint8_t h[32];
    SHA256((const uint8_t *)t->tenant, strlen(t->tenant), h);
    for (int k = 0; k < 8; k++) snprintf(t->serial + 2 * k, 3, "%02x", h[k]);
    const sbw_item *st = sbw_get(tn, SBW_T_STATUS);
    if (st) {
      /* This tenant failed (revoked key, timeout, ...); the others are usable. Say why once, in the log. */
      char why[256];
      sbw_get_str(tn, SBW_T_MESSAGE, why, sizeof(why));
      t->status = st->u32;
      SBP11_WARN("token \"%s\" (tenant %s) has no keys: %s: %s", t->label, t->tenant, sbw_status_name(st->u32), why);
    } else if (sbw_get(tn, SBW_T_MESSAGE)) {
      /* No failure, but the daemon left the key out and says why (an SM2 key: PKCS#11 has no mechanism for it). */
      char why[256];
      sbw_get_str(tn, SBW_T_MESSAGE, why, sizeof(why));
      SBP11_WARN("token \"%s\" (tenant %s): %s", t->label, t->tenant, why);
    }
    obj_list ol = {0};
    for (size_t k = 0; k < tn->nitems; k++) {
      if (tn->items[k].spec->tag != SBW_T_KEY) continue;
      if (build_key(t, &ol, tn->items[k].nested) != 0) {
        t->objects = ol.o, t->nobjects = ol.n;
        goto oom;
      }
    }
    t->objects = ol.o, t->nobjects = ol.n;
  }
  *tokens_out = tokens;
  *ntokens_out = nt;
  return CKR_OK;
oom:
  sbp11_tokens_free(tokens, nt);
  return CKR_HOST_MEMORY;
}

void sbp11_tokens_free(sbp11_token *tokens, size_t ntokens) {
  if (!tokens) return;
  for (size_t i = 0; i < ntokens; i++) {
    for (size_t k = 0; k < tokens[i].nobjects; k++) attrs_free(tokens[i].objects[k].attrs, tokens[i].objects[k].nattrs);
    free(tokens[i].objects);
    free(tokens[i].keys);
    free(tokens[i].tenant);
  }
  free(tokens);
}

/* ---- attribute rules ---- */

const sbp11_attr *sbp11_object_attr(const sbp11_object *o, CK_ATTRIBUTE_TYPE type) {
  for (size_t i = 0; i < o->nattrs; i++)
    if (o->attrs[i].type == type) return &o->attrs[i];
  return NULL;
}

CK_RV sbp11_object_get_attributes(const sbp11_object *o, CK_ATTRIBUTE *tmpl, CK_ULONG count) {
  CK_RV rv = CKR_OK;
  for (CK_ULONG i = 0; i < count; i++) {
    const sbp11_attr *a = sbp11_object_attr(o, tmpl[i].type);
    CK_RV r = CKR_OK;
    if (!a) {
      r = CKR_ATTRIBUTE_TYPE_INVALID;
    } else if (a->sensitive) {
      r = CKR_ATTRIBUTE_SENSITIVE;
    } else if (!tmpl[i].pValue) {
      tmpl[i].ulValueLen = a->len;
      continue;
    } else if (tmpl[i].ulValueLen < a->len) {
      r = CKR_BUFFER_TOO_SMALL;
    } else {
      if (a->len) memcpy(tmpl[i].pValue, a->value, a->len);
      tmpl[i].ulValueLen = a->len;
      continue;
    }
    tmpl[i].ulValueLen = CK_UNAVAILABLE_INFORMATION;
    if (rv == CKR_OK) rv = r;
  }
  return rv;
}

int sbp11_object_matches(const sbp11_object *o, const CK_ATTRIBUTE *tmpl, CK_ULONG count) {
  for (CK_ULONG i = 0; i < count; i++) {
    const sbp11_attr *a = sbp11_object_attr(o, tmpl[i].type);
    if (!a || a->sensitive || a->len != tmpl[i].ulValueLen) return 0;
    if (a->len && (!tmpl[i].pValue || memcmp(a->value, tmpl[i].pValue, a->len))) return 0;
  }
  return 1;
}

CK_ULONG sbp11_object_size(const sbp11_object *o) {
  CK_ULONG n = 0;
  for (size_t i = 0; i < o->nattrs; i++) n += o->attrs[i].len;
  return n;
}
