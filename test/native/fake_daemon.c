#include "fake_daemon.h"

#include <errno.h>
#include <openssl/bn.h>
#include <openssl/ec.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "wire.h"

static X509 *make_cert(EVP_PKEY *subject_key, const char *cn, EVP_PKEY *issuer_key, X509 *issuer, long serial) {
  X509 *x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
  X509_gmtime_adj(X509_getm_notBefore(x), 0);
  X509_gmtime_adj(X509_getm_notAfter(x), 86400L * 365);
  X509_set_pubkey(x, subject_key);
  X509_NAME *n = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(n, "O", MBSTRING_ASC, (const unsigned char *)"signbridge tests", -1, -1, 0);
  X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
  X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : n);
  /* Real-looking extensions, so that osslsigncode and jarsigner accept the chain. */
  X509V3_CTX v3;
  X509V3_set_ctx(&v3, issuer ? issuer : x, x, NULL, NULL, 0);
  const char *exts[][2] = {
      {"basicConstraints", issuer ? "critical,CA:FALSE" : "critical,CA:TRUE"},
      {"keyUsage", issuer ? "critical,digitalSignature" : "critical,keyCertSign,cRLSign"},
      {"extendedKeyUsage", issuer ? "codeSigning" : NULL},
      {"subjectKeyIdentifier", "hash"},
  };
  for (size_t i = 0; i < sizeof(exts) / sizeof(exts[0]); i++) {
    if (!exts[i][1]) continue;
    X509_EXTENSION *e = X509V3_EXT_conf(NULL, &v3, exts[i][0], exts[i][1]);
    if (e) X509_add_ext(x, e, -1);
    X509_EXTENSION_free(e);
  }
  X509_sign(x, issuer_key, EVP_sha256());
  return x;
}

fake_daemon *fd_start(const char *path) {
  fake_daemon *d = calloc(1, sizeof(*d));
  snprintf(d->path, sizeof(d->path), "%s", path);
  pthread_mutex_init(&d->mu, NULL);
  d->lfd = -1;
  static const struct {
    const char *spec, *tenant, *token, *label, *alg, *param;
    int field, hash;
  } specs[FD_NKEYS] = {
      {"RSA_2048", "t-rsa", "fake rsa", "rsa key", "RSA", NULL, 0, 0},
      {"ECC_NIST_P256", "t-p256", "fake p256", "p256 key", "EC", "P-256", 32, 256},
      {"ECC_NIST_P384", "t-p384", "fake p384", "p384 key", "EC", "P-384", 48, 384},
      {"ECC_NIST_P521", "t-p521", "fake p521", "p521 key", "EC", "P-521", 66, 512},
  };
  d->ca = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
  X509 *ca = make_cert(d->ca, "signbridge test CA", d->ca, NULL, 1);
  d->ca_cert_len = i2d_X509(ca, &d->ca_cert);
  for (int i = 0; i < FD_NKEYS; i++) {
    fd_key *k = &d->keys[i];
    k->spec = specs[i].spec, k->tenant = specs[i].tenant, k->token_label = specs[i].token, k->label = specs[i].label;
    k->ec_field = specs[i].field, k->ec_hash = specs[i].hash;
    k->pkey = specs[i].param ? EVP_PKEY_Q_keygen(NULL, NULL, "EC", specs[i].param)
                             : EVP_PKEY_Q_keygen(NULL, NULL, "RSA", (size_t)2048);
    if (!k->pkey) return NULL;
    for (int b = 0; b < 16; b++) k->id[b] = (uint8_t)(0xa0 + i * 16 + b);
    k->spki_len = i2d_PUBKEY(k->pkey, &k->spki);
    X509 *leaf = make_cert(k->pkey, k->label, d->ca, ca, 100 + i);
    k->cert_len = i2d_X509(leaf, &k->cert);
    X509_free(leaf);
  }
  X509_free(ca);
  d->ed.pkey = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519");
  if (!d->ed.pkey) return NULL;
  for (int b = 0; b < 16; b++) d->ed.id[b] = (uint8_t)(0xe0 + b);
  d->ed.spki_len = i2d_PUBKEY(d->ed.pkey, &d->ed.spki);
  static const struct {
    const char *spec, *tenant, *oid;
    size_t pk, sig;
  } ml[FD_NMLDSA] = {
      {"ML_DSA_44", "t-mldsa44", "\x06\x09\x60\x86\x48\x01\x65\x03\x04\x03\x11", 1312, 2420},
      {"ML_DSA_65", "t-mldsa65", "\x06\x09\x60\x86\x48\x01\x65\x03\x04\x03\x12", 1952, 3309},
      {"ML_DSA_87", "t-mldsa87", "\x06\x09\x60\x86\x48\x01\x65\x03\x04\x03\x13", 2592, 4627},
  };
  for (int i = 0; i < FD_NMLDSA; i++) {
    fd_mldsa *k = &d->mldsa[i];
    k->spec = ml[i].spec, k->tenant = ml[i].tenant, k->level = i == 0 ? 44 : i == 1 ? 65 : 87;
    k->pk_len = ml[i].pk, k->sig_len = ml[i].sig;
    for (size_t b = 0; b < k->pk_len; b++) k->pk[b] = (uint8_t)(b * 7 + (size_t)k->level);
    for (int b = 0; b < 16; b++) k->id[b] = (uint8_t)(0xd0 + i * 16 + b);
    /* SEQUENCE { SEQUENCE { OID }, BIT STRING { 0, pk } } (RFC 9881), every length in two bytes */
    size_t bits = 1 + k->pk_len, body = 2 + 11 + 4 + bits, o = 0;
    uint8_t *p = k->spki;
    p[o++] = 0x30, p[o++] = 0x82, p[o++] = (uint8_t)(body >> 8), p[o++] = (uint8_t)body;
    p[o++] = 0x30, p[o++] = 11;
    memcpy(p + o, ml[i].oid, 11), o += 11;
    p[o++] = 0x03, p[o++] = 0x82, p[o++] = (uint8_t)(bits >> 8), p[o++] = (uint8_t)bits, p[o++] = 0;
    memcpy(p + o, k->pk, k->pk_len), o += k->pk_len;
    k->spki_len = o;
  }
  if (fd_listen(d) != 0) {
    fd_free(d);
    return NULL;
  }
  return d;
}

const fd_key *fd_key_by_spec(const fake_daemon *d, const char *spec) {
  for (int i = 0; i < FD_NKEYS; i++)
    if (!strcmp(d->keys[i].spec, spec)) return &d->keys[i];
  return NULL;
}

const fd_mldsa *fd_mldsa_by_spec(const fake_daemon *d, const char *spec) {
  for (int i = 0; i < FD_NMLDSA; i++)
    if (!strcmp(d->mldsa[i].spec, spec)) return &d->mldsa[i];
  return NULL;
}

void fd_mldsa_signature(const fd_mldsa *k, const uint8_t mu[64], uint8_t *sig) {
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  EVP_DigestInit_ex(c, EVP_shake256(), NULL);
  EVP_DigestUpdate(c, "fake ML-DSA", 11);
  EVP_DigestUpdate(c, mu, 64);
  EVP_DigestFinalXOF(c, sig, k->sig_len);
  EVP_MD_CTX_free(c);
}

/* ---- framing ---- */

static int read_full(int fd, uint8_t *p, size_t n) {
  while (n) {
    ssize_t r = recv(fd, p, n, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return -1;
    }
    p += r, n -= (size_t)r;
  }
  return 0;
}

static int send_buf(int fd, sbw_buf *b) {
  if (sbw_frame_end(b) != 0) return -1;
  size_t off = 0;
  while (off < b->len) {
    ssize_t w = send(fd, b->p + off, b->len - off, MSG_NOSIGNAL);
    if (w <= 0) return -1;
    off += (size_t)w;
  }
  return 0;
}

static int send_error(int fd, uint32_t status, const char *msg, const char *rid) {
  sbw_buf b = {0};
  sbw_frame_begin(&b, SBW_ERROR);
  sbw_put_u32(&b, SBW_T_STATUS, status);
  sbw_put_str(&b, SBW_T_MESSAGE, msg);
  if (rid) sbw_put_str(&b, SBW_T_REQUEST_ID, rid);
  int rc = send_buf(fd, &b);
  sbw_buf_free(&b);
  return rc;
}

/* ---- signing ---- */

static const EVP_MD *md_of(const char *alg) {
  if (strstr(alg, "256")) return EVP_sha256();
  if (strstr(alg, "384")) return EVP_sha384();
  if (strstr(alg, "512")) return EVP_sha512();
  return NULL;
}

/* 0 and the signature in PKCS#11 form, or a wire status with a message. */
static uint32_t do_sign(const fd_key *k, const char *alg, const uint8_t *dg, size_t dlen, uint8_t *sig,
                        size_t *siglen, char *msg, size_t msglen) {
  const EVP_MD *md = md_of(alg);
  int rsa = !strncmp(alg, "RSASSA_", 7), ecdsa = !strncmp(alg, "ECDSA_", 6);
  if (!md || (!rsa && !ecdsa)) {
    snprintf(msg, msglen, "unknown algorithm %s", alg);
    return SBW_S_ALGORITHM_INVALID;
  }
  if ((rsa && k->ec_field) || (ecdsa && !k->ec_field)) { /* as the daemon: ECDSA with any SHA-2 on any curve */
    snprintf(msg, msglen, "a %s key does not allow %s", k->spec, alg);
    return SBW_S_ALGORITHM_INVALID;
  }
  if ((int)dlen != EVP_MD_get_size(md)) {
    snprintf(msg, msglen, "%s needs a %d-byte digest, got %zu", alg, EVP_MD_get_size(md), dlen);
    return SBW_S_BAD_REQUEST;
  }
  EVP_PKEY_CTX *c = EVP_PKEY_CTX_new(k->pkey, NULL);
  uint8_t der[600];
  size_t derlen = sizeof(der);
  int ok = EVP_PKEY_sign_init(c) > 0 && EVP_PKEY_CTX_set_signature_md(c, md) > 0;
  if (ok && rsa) {
    int pss = strstr(alg, "_PSS_") != NULL;
    ok = EVP_PKEY_CTX_set_rsa_padding(c, pss ? RSA_PKCS1_PSS_PADDING : RSA_PKCS1_PADDING) > 0;
    if (ok && pss) ok = EVP_PKEY_CTX_set_rsa_pss_saltlen(c, RSA_PSS_SALTLEN_DIGEST) > 0;
  }
  ok = ok && EVP_PKEY_sign(c, der, &derlen, dg, dlen) > 0;
  EVP_PKEY_CTX_free(c);
  if (!ok) {
    snprintf(msg, msglen, "libcrypto failed to sign");
    return SBW_S_INTERNAL;
  }
  if (rsa) {
    memcpy(sig, der, derlen);
    *siglen = derlen;
    return 0;
  }
  const unsigned char *p = der;
  ECDSA_SIG *es = d2i_ECDSA_SIG(NULL, &p, (long)derlen);
  BN_bn2binpad(ECDSA_SIG_get0_r(es), sig, k->ec_field);
  BN_bn2binpad(ECDSA_SIG_get0_s(es), sig + k->ec_field, k->ec_field);
  ECDSA_SIG_free(es);
  *siglen = 2 * (size_t)k->ec_field;
  return 0;
}

/* ML-DSA keys are numbered after the others: ki >= FD_NKEYS. */
static uint32_t do_sign_mldsa(const fd_mldsa *k, const char *alg, const uint8_t *dg, size_t dlen, uint8_t *sig,
                              size_t *siglen, char *msg, size_t msglen) {
  if (strcmp(alg, "ML_DSA_SHAKE_256") != 0) {
    snprintf(msg, msglen, "a %s key does not allow %s", k->spec, alg);
    return SBW_S_ALGORITHM_INVALID;
  }
  if (dlen != 64) {
    snprintf(msg, msglen, "ML_DSA_SHAKE_256 needs a 64-byte mu, got %zu", dlen);
    return SBW_S_BAD_REQUEST;
  }
  fd_mldsa_signature(k, dg, sig);
  *siglen = k->sig_len;
  return 0;
}

/* The Ed25519 key's index, after the others. */
#define FD_ED25519_KEY (FD_NKEYS + FD_NMLDSA)

/* Pure Ed25519 over DATA, as the daemon checks SIGN: ED25519_SHA_512, DIGEST = SHA-512(DATA), at most 4096 bytes. */
static uint32_t do_sign_ed25519(const fd_ed25519 *k, const char *alg, const uint8_t *dg, size_t dlen,
                                const sbw_item *data, uint8_t *sig, size_t *siglen, char *msg, size_t msglen) {
  if (strcmp(alg, "ED25519_SHA_512") != 0) {
    snprintf(msg, msglen, "an ECC_NIST_EDWARDS25519 key does not allow %s here", alg);
    return SBW_S_ALGORITHM_INVALID;
  }
  if (!data) {
    snprintf(msg, msglen, "ED25519_SHA_512 signs the message itself, which this SIGN does not carry (DATA)");
    return SBW_S_BAD_REQUEST;
  }
  uint8_t h[64];
  if (data->len > 4096) {
    snprintf(msg, msglen, "ED25519_SHA_512 signs at most 4096 bytes of message, got %u", (unsigned)data->len);
    return SBW_S_BAD_REQUEST;
  }
  EVP_Digest(data->p, data->len, h, NULL, EVP_sha512(), NULL);
  if (dlen != 64 || memcmp(h, dg, 64) != 0) {
    snprintf(msg, msglen, "DIGEST is not the SHA-512 of DATA");
    return SBW_S_BAD_REQUEST;
  }
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  *siglen = 64;
  int ok = c && EVP_DigestSignInit(c, NULL, NULL, NULL, k->pkey) > 0 &&
           EVP_DigestSign(c, sig, siglen, data->p, data->len) > 0;
  EVP_MD_CTX_free(c);
  if (!ok) {
    snprintf(msg, msglen, "libcrypto failed to sign");
    return SBW_S_INTERNAL;
  }
  return 0;
}

static int answer_signature(fake_daemon *d, int fd, int ki, const char *alg, const uint8_t *dg, size_t dlen,
                            const sbw_item *data, const char *rid) {
  uint8_t sig[4700];
  size_t siglen = 0;
  char msg[160];
  uint32_t st;
  if (data && ki != FD_ED25519_KEY) {
    snprintf(msg, sizeof(msg), "%s signs a digest; only ED25519_SHA_512 carries DATA", alg);
    st = SBW_S_BAD_REQUEST;
  } else if (ki == FD_ED25519_KEY) {
    st = do_sign_ed25519(&d->ed, alg, dg, dlen, data, sig, &siglen, msg, sizeof(msg));
  } else if (ki >= FD_NKEYS) {
    st = do_sign_mldsa(&d->mldsa[ki - FD_NKEYS], alg, dg, dlen, sig, &siglen, msg, sizeof(msg));
  } else {
    st = do_sign(&d->keys[ki], alg, dg, dlen, sig, &siglen, msg, sizeof(msg));
  }
  if (st) return send_error(fd, st, msg, rid);
  pthread_mutex_lock(&d->mu);
  if (d->short_sig_next) {
    d->short_sig_next = 0;
    siglen--;
  }
  pthread_mutex_unlock(&d->mu);
  sbw_buf b = {0};
  sbw_frame_begin(&b, SBW_SIGN_OK);
  sbw_put(&b, SBW_T_SIGNATURE, sig, siglen);
  sbw_put_str(&b, SBW_T_REQUEST_ID, rid);
  int rc = send_buf(fd, &b);
  sbw_buf_free(&b);
  return rc;
}

/* ---- requests ---- */

static int handle_list(fake_daemon *d, int fd) {
  pthread_mutex_lock(&d->mu);
  d->lists++;
  int err = d->list_error, failed = d->list_failed_key - 1;
  int ml_dsa = d->ml_dsa, no_raw = d->ml_dsa_no_raw, bad_raw = d->ml_dsa_bad_raw, ed25519 = d->ed25519;
  pthread_mutex_unlock(&d->mu);
  if (err) return send_error(fd, (uint32_t)err, "the daemon has no valid credentials (injected)", NULL);
  sbw_buf b = {0};
  sbw_frame_begin(&b, SBW_LIST_OK);
  for (int i = 0; i < FD_NKEYS; i++) {
    const fd_key *k = &d->keys[i];
    size_t t = sbw_nested_begin(&b, SBW_T_TOKEN);
    sbw_put_str(&b, SBW_T_TOKEN_LABEL, k->token_label);
    sbw_put_str(&b, SBW_T_TENANT, k->tenant);
    if (i == failed) { /* as the daemon lists a tenant whose own API key was revoked */
      sbw_put_u32(&b, SBW_T_STATUS, 3);
      sbw_put_str(&b, SBW_T_MESSAGE, "unauthorized: API key revoked (injected)");
      sbw_nested_end(&b, t);
      continue;
    }
    size_t km = sbw_nested_begin(&b, SBW_T_KEY);
    sbw_put(&b, SBW_T_KEY_ID, k->id, sizeof(k->id));
    sbw_put_str(&b, SBW_T_KEY_LABEL, k->label);
    sbw_put_str(&b, SBW_T_KEY_SPEC, k->spec);
    sbw_put(&b, SBW_T_PUBLIC_KEY, k->spki, (size_t)k->spki_len);
    sbw_put(&b, SBW_T_CERTIFICATE, k->cert, (size_t)k->cert_len);
    sbw_put(&b, SBW_T_CHAIN_CERTIFICATE, d->ca_cert, (size_t)d->ca_cert_len);
    sbw_nested_end(&b, km);
    sbw_nested_end(&b, t);
  }
  for (int i = 0; ml_dsa && i < FD_NMLDSA; i++) {
    const fd_mldsa *k = &d->mldsa[i];
    size_t t = sbw_nested_begin(&b, SBW_T_TOKEN);
    sbw_put_str(&b, SBW_T_TOKEN_LABEL, k->tenant);
    sbw_put_str(&b, SBW_T_TENANT, k->tenant);
    size_t km = sbw_nested_begin(&b, SBW_T_KEY);
    sbw_put(&b, SBW_T_KEY_ID, k->id, sizeof(k->id));
    sbw_put_str(&b, SBW_T_KEY_LABEL, k->spec);
    sbw_put_str(&b, SBW_T_KEY_SPEC, k->spec);
    sbw_put(&b, SBW_T_PUBLIC_KEY, k->spki, k->spki_len);
    uint8_t raw[2592];
    memcpy(raw, k->pk, k->pk_len);
    if (bad_raw) raw[0] ^= 1;
    if (!no_raw) sbw_put(&b, SBW_T_RAW_PUBLIC_KEY, raw, k->pk_len);
    sbw_nested_end(&b, km);
    sbw_nested_end(&b, t);
  }
  if (ed25519) {
    size_t t = sbw_nested_begin(&b, SBW_T_TOKEN);
    sbw_put_str(&b, SBW_T_TOKEN_LABEL, "fake ed25519");
    sbw_put_str(&b, SBW_T_TENANT, "t-ed25519");
    size_t km = sbw_nested_begin(&b, SBW_T_KEY);
    sbw_put(&b, SBW_T_KEY_ID, d->ed.id, sizeof(d->ed.id));
    sbw_put_str(&b, SBW_T_KEY_LABEL, "ed25519 key");
    sbw_put_str(&b, SBW_T_KEY_SPEC, "ECC_NIST_EDWARDS25519");
    sbw_put(&b, SBW_T_PUBLIC_KEY, d->ed.spki, (size_t)d->ed.spki_len);
    sbw_nested_end(&b, km);
    sbw_nested_end(&b, t);
  }
  int rc = send_buf(fd, &b);
  sbw_buf_free(&b);
  return rc;
}

static void copy_str(const sbw_node *n, uint16_t tag, char *dst, size_t len) { sbw_get_str(n, tag, dst, len); }

static int handle_sign(fake_daemon *d, int fd, const sbw_msg *m, uint32_t version) {
  char tenant[64], alg[40];
  sbw_get_str(&m->body, SBW_T_TENANT, tenant, sizeof(tenant));
  sbw_get_str(&m->body, SBW_T_ALGORITHM, alg, sizeof(alg));
  const sbw_item *id = sbw_get(&m->body, SBW_T_KEY_ID), *dg = sbw_get(&m->body, SBW_T_DIGEST);
  const sbw_item *data = sbw_get(&m->body, SBW_T_DATA);
  pthread_mutex_lock(&d->mu);
  d->signs++;
  d->last_data_len = data && data->len <= sizeof(d->last_data) ? data->len : 0;
  if (d->last_data_len) memcpy(d->last_data, data->p, d->last_data_len);
  snprintf(d->last_algorithm, sizeof(d->last_algorithm), "%s", alg);
  snprintf(d->last_tenant, sizeof(d->last_tenant), "%s", tenant);
  d->last_dlen = dg->len <= sizeof(d->last_digest) ? dg->len : sizeof(d->last_digest);
  memcpy(d->last_digest, dg->p, d->last_dlen);
  copy_str(&m->body, SBW_T_CTX_PROJECT, d->last_project, sizeof(d->last_project));
  copy_str(&m->body, SBW_T_CTX_ENVIRONMENT, d->last_environment, sizeof(d->last_environment));
  copy_str(&m->body, SBW_T_CTX_ARTIFACT_TYPE, d->last_artifact_type, sizeof(d->last_artifact_type));
  copy_str(&m->body, SBW_T_CTX_ARTIFACT_VERSION, d->last_artifact_version, sizeof(d->last_artifact_version));
  copy_str(&m->body, SBW_T_CTX_SBOM_PATH, d->last_sbom, sizeof(d->last_sbom));
  int delay = d->delay_ms, drop = d->drop_next, garbage = d->garbage_next, wrong = d->wrong_type_next;
  d->drop_next = d->garbage_next = d->wrong_type_next = 0;
  uint32_t fail = 0;
  char fail_msg[128];
  if (d->fail_count > 0) {
    d->fail_count--;
    fail = d->fail_status;
    snprintf(fail_msg, sizeof(fail_msg), "%s", d->fail_msg);
  }
  int pending = d->pending_polls;
  int reqno = d->signs;
  pthread_mutex_unlock(&d->mu);
  if (delay) usleep((useconds_t)delay * 1000);
  if (drop) return -1;
  if (garbage) {
    static const uint8_t bad[] = {0, 0, 0, 3, 0x83, 0x00, 0x22}; /* a field header cut short */
    ssize_t w = send(fd, bad, sizeof(bad), MSG_NOSIGNAL);
    (void)w;
    return -1;
  }
  if (wrong) return handle_list(d, fd);
  char rid[40];
  snprintf(rid, sizeof(rid), "req-%04d", reqno);
  if (fail) return send_error(fd, fail, fail_msg, rid);
  if (data && version < 2) return send_error(fd, SBW_S_BAD_REQUEST, "SIGN carries DATA, which version 1 lacks", rid);
  int ki = -1;
  if (!strcmp(tenant, "t-ed25519") && id->len == 16 && !memcmp(d->ed.id, id->p, 16)) ki = FD_ED25519_KEY;
  for (int i = 0; i < FD_NKEYS; i++)
    if (!strcmp(d->keys[i].tenant, tenant) && id->len == 16 && !memcmp(d->keys[i].id, id->p, 16)) ki = i;
  for (int i = 0; i < FD_NMLDSA; i++)
    if (!strcmp(d->mldsa[i].tenant, tenant) && id->len == 16 && !memcmp(d->mldsa[i].id, id->p, 16)) ki = FD_NKEYS + i;
  if (ki < 0) return send_error(fd, SBW_S_KEY_NOT_FOUND, "no such tenant or key", rid);
  if (pending > 0 && !data) { /* pure Ed25519 is never held: the service keeps no message to sign on approval */
    pthread_mutex_lock(&d->mu);
    snprintf(d->pend_id, sizeof(d->pend_id), "%s", rid);
    d->pend_key = ki;
    d->pend_left = pending;
    snprintf(d->pend_alg, sizeof(d->pend_alg), "%s", alg);
    d->pend_dlen = dg->len <= 64 ? dg->len : 64;
    memcpy(d->pend_digest, dg->p, d->pend_dlen);
    pthread_mutex_unlock(&d->mu);
    sbw_buf b = {0};
    sbw_frame_begin(&b, SBW_SIGN_PENDING);
    sbw_put_str(&b, SBW_T_REQUEST_ID, rid);
    sbw_put_str(&b, SBW_T_STATUS_TEXT, "pending_approval");
    sbw_put_str(&b, SBW_T_MESSAGE, "waiting for 1 approver (test policy)");
    int rc = send_buf(fd, &b);
    sbw_buf_free(&b);
    return rc;
  }
  return answer_signature(d, fd, ki, alg, dg->p, dg->len, data, rid);
}

static int handle_poll(fake_daemon *d, int fd, const sbw_msg *m) {
  char rid[40];
  sbw_get_str(&m->body, SBW_T_REQUEST_ID, rid, sizeof(rid));
  const sbw_item *dg = sbw_get(&m->body, SBW_T_DIGEST);
  pthread_mutex_lock(&d->mu);
  d->polls++;
  int known = !strcmp(rid, d->pend_id) && dg->len == d->pend_dlen && !memcmp(dg->p, d->pend_digest, dg->len);
  int left = known ? --d->pend_left : 0;
  uint32_t outcome = d->pending_outcome;
  int ki = d->pend_key;
  char alg[40];
  snprintf(alg, sizeof(alg), "%s", d->pend_alg);
  pthread_mutex_unlock(&d->mu);
  if (!known) return send_error(fd, SBW_S_BAD_REQUEST, "POLL names another request or digest", rid);
  if (left > 0) {
    sbw_buf b = {0};
    sbw_frame_begin(&b, SBW_SIGN_PENDING);
    sbw_put_str(&b, SBW_T_REQUEST_ID, rid);
    sbw_put_str(&b, SBW_T_STATUS_TEXT, "pending_approval");
    sbw_put_str(&b, SBW_T_MESSAGE, "still waiting");
    int rc = send_buf(fd, &b);
    sbw_buf_free(&b);
    return rc;
  }
  if (outcome) return send_error(fd, outcome, "rejected by an approver (test)", rid);
  return answer_signature(d, fd, ki, alg, dg->p, dg->len, NULL, rid);
}

typedef struct conn_arg {
  fake_daemon *d;
  int fd;
} conn_arg;

/* A daemon that goes away with a request still unread (closed while idle, as the real one does at shutdown):
 * close() with data in the receive queue, so the module's read fails with ECONNRESET. */
static void close_unread(fake_daemon *d, int fd) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  while (poll(&p, 1, 5000) < 0) {
  }
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < d->nconns; i++)
    if (d->conns[i].fd == fd) d->conns[i].fd = -1; /* fd_stop must not touch the number again */
  pthread_mutex_unlock(&d->mu);
  close(fd);
}

static void *serve(void *arg) {
  conn_arg *ca = arg;
  fake_daemon *d = ca->d;
  int fd = ca->fd;
  free(ca);
  int greeted = 0;
  uint32_t version = 0;
  for (;;) {
    uint8_t h[5];
    if (read_full(fd, h, 5) != 0) break;
    uint32_t len = sbw_frame_length(h);
    if (!len) break;
    uint8_t *body = malloc(len);
    if (len > 1 && read_full(fd, body, len - 1) != 0) {
      free(body);
      break;
    }
    sbw_msg m;
    char err[200];
    int rc = sbw_decode(h[4], body, len - 1, &m, err, sizeof(err));
    free(body);
    if (rc != 0) break; /* protocol error: close */
    if (!greeted && m.type != SBW_HELLO) {
      send_error(fd, SBW_S_BAD_REQUEST, "HELLO first", NULL);
      sbw_msg_free(&m);
      break;
    }
    switch (m.type) {
    case SBW_HELLO: {
      pthread_mutex_lock(&d->mu);
      d->hellos++;
      uint32_t max = sbw_get(&m.body, SBW_T_VERSION_MAX)->u32;
      version = d->hello_version ? d->hello_version : max < 2 ? max : 2;
      pthread_mutex_unlock(&d->mu);
      greeted = 1;
      sbw_buf b = {0};
      sbw_frame_begin(&b, SBW_HELLO_OK);
      sbw_put_u32(&b, SBW_T_VERSION, version);
      sbw_put_str(&b, SBW_T_SERVER, "fake-daemon");
      rc = send_buf(fd, &b);
      sbw_buf_free(&b);
      pthread_mutex_lock(&d->mu);
      int reset = d->reset_after_hello;
      d->reset_after_hello = 0;
      pthread_mutex_unlock(&d->mu);
      if (reset && rc == 0) {
        close_unread(d, fd);
        sbw_msg_free(&m);
        return NULL;
      }
      break;
    }
    case SBW_LIST: rc = handle_list(d, fd); break;
    case SBW_SIGN: rc = handle_sign(d, fd, &m, version); break;
    case SBW_POLL: rc = handle_poll(d, fd, &m); break;
    default: rc = send_error(fd, SBW_S_BAD_REQUEST, "not a request", NULL);
    }
    sbw_msg_free(&m);
    if (rc != 0) break;
  }
  shutdown(fd, SHUT_RDWR);
  return NULL;
}

static void *accept_loop(void *arg) {
  fake_daemon *d = arg;
  while (__atomic_load_n(&d->running, __ATOMIC_ACQUIRE)) {
    struct pollfd p = {.fd = d->lfd, .events = POLLIN};
    if (poll(&p, 1, 50) <= 0) continue;
    int fd = accept(d->lfd, NULL, NULL);
    if (fd < 0) continue;
    pthread_mutex_lock(&d->mu);
    if (d->nconns == (int)(sizeof(d->conns) / sizeof(d->conns[0]))) {
      pthread_mutex_unlock(&d->mu);
      close(fd);
      continue;
    }
    d->accepted++;
    conn_arg *ca = malloc(sizeof(*ca));
    ca->d = d, ca->fd = fd;
    d->conns[d->nconns].fd = fd;
    pthread_create(&d->conns[d->nconns].th, NULL, serve, ca);
    d->nconns++;
    pthread_mutex_unlock(&d->mu);
  }
  return NULL;
}

int fd_listen(fake_daemon *d) {
  unlink(d->path);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof(a.sun_path), "%s", d->path);
  d->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (d->lfd < 0 || bind(d->lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(d->lfd, 64) != 0) {
    perror("fake daemon: listen");
    return -1;
  }
  __atomic_store_n(&d->running, 1, __ATOMIC_RELEASE);
  pthread_create(&d->acceptor, NULL, accept_loop, d);
  return 0;
}

void fd_stop(fake_daemon *d) {
  if (!__atomic_load_n(&d->running, __ATOMIC_ACQUIRE)) return;
  __atomic_store_n(&d->running, 0, __ATOMIC_RELEASE);
  pthread_join(d->acceptor, NULL);
  close(d->lfd);
  d->lfd = -1;
  unlink(d->path);
  pthread_mutex_lock(&d->mu);
  int n = d->nconns;
  for (int i = 0; i < n; i++)
    if (d->conns[i].fd >= 0) shutdown(d->conns[i].fd, SHUT_RDWR);
  pthread_mutex_unlock(&d->mu);
  for (int i = 0; i < n; i++) {
    pthread_join(d->conns[i].th, NULL);
    if (d->conns[i].fd >= 0) close(d->conns[i].fd);
  }
  d->nconns = 0;
}

void fd_free(fake_daemon *d) {
  if (!d) return;
  fd_stop(d);
  for (int i = 0; i < FD_NKEYS; i++) {
    EVP_PKEY_free(d->keys[i].pkey);
    OPENSSL_free(d->keys[i].spki);
    OPENSSL_free(d->keys[i].cert);
  }
  EVP_PKEY_free(d->ca);
  OPENSSL_free(d->ca_cert);
  EVP_PKEY_free(d->ed.pkey);
  OPENSSL_free(d->ed.spki);
  pthread_mutex_destroy(&d->mu);
  free(d);
}
