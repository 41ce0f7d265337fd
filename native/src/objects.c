#include "objects.h"

#include <openssl/sha.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "public_key.h"

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

static void add_key_common(attr_list *l, const sbp11_pubkey *pk, const uint8_t *spki, size_t spki_len,
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
  sbp11_pubkey pk;
  char why[160];
  if (sbp11_parse_spki(spec, spki->p, spki->len, sbw_get(kn, SBW_T_RAW_PUBLIC_KEY), &pk, why, sizeof(why)) != 0) {
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
