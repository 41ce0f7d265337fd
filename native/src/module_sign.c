/* Signing: C_SignInit, C_Sign, C_SignUpdate, C_SignFinal, and C_GetOperationState / C_SetOperationState, which
 * save and restore a sign operation. The signature itself is the daemon's (client.c); the lock is not held while
 * it is made. */
#include "module.h"

#include <openssl/evp.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "log.h"
#include "mech.h"
#include "module_state.h"
#include "objects.h"
#include "refusal.h"

#define SBP11_RAW_INPUT_MAX 1024        /* a DigestInfo or a digest, buffered across C_SignUpdate */
#define SBP11_STATE_REPLAY_MAX (64 * 1024) /* hash-and-sign data kept for C_GetOperationState */

void sbp11_sign_op_end(sbp11_sign_op *op) {
  EVP_MD_CTX_free(op->md);
  free(op->buf);
  memset(op, 0, sizeof(*op));
}

/* ---- signing ---- */

static CK_RV op_start(sbp11_session *s, const CK_MECHANISM *m, CK_OBJECT_HANDLE hKey) {
  sbp11_token *t;
  sbp11_object *o = sbp11_find_object_inlock(s, hKey, &t);
  if (!o) return CKR_KEY_HANDLE_INVALID;
  if (o->cls == CKO_PUBLIC_KEY) return CKR_KEY_FUNCTION_NOT_PERMITTED;
  if (o->cls != CKO_PRIVATE_KEY) return CKR_KEY_HANDLE_INVALID;
  sbp11_sign_op op = {0};
  const sbp11_keyinfo *key = &t->keys[o->key].info;
  CK_RV rv = sbp11_mech_plan(m, key, &op.plan);
  if (rv != CKR_OK) return rv;
  if (op.plan.mech->hash != SBP11_HASH_NONE) {
    /* ML-DSA: μ starts with tr and the empty context's two bytes (domain separator 0, context length 0), then the
     * message streams through as for a hash-and-sign mechanism, so the file never crosses the socket. */
    static const uint8_t empty_context[2] = {0, 0};
    op.md = EVP_MD_CTX_new();
    if (!op.md) return CKR_HOST_MEMORY;
    int ok = EVP_DigestInit_ex(op.md, sbp11_hash_md(op.plan.hash), NULL);
    if (ok && op.plan.hash == SBP11_MU)
      ok = EVP_DigestUpdate(op.md, key->tr, sizeof(key->tr)) && EVP_DigestUpdate(op.md, empty_context, 2);
    if (!ok) {
      EVP_MD_CTX_free(op.md);
      return CKR_GENERAL_ERROR;
    }
  }
  op.hkey = hKey;
  op.active = 1;
  sbp11_sign_op_end(&s->op);
  s->op = op;
  return CKR_OK;
}

/* The most input a mechanism without hashing buffers: CKM_EDDSA the message itself, the others a digest. */
static size_t raw_input_max(const sbp11_signplan *plan) {
  return plan->mech->scheme == SBP11_EDDSA_PURE ? SBP11_EDDSA_MESSAGE_MAX : SBP11_RAW_INPUT_MAX;
}

static CK_RV op_append(sbp11_sign_op *op, const uint8_t *p, size_t n) {
  if (op->plan.mech->hash != SBP11_HASH_NONE) {
    if (n && !EVP_DigestUpdate(op->md, p, n)) return CKR_GENERAL_ERROR;
    if (op->unsaveable) return CKR_OK;
    if (op->len + n > SBP11_STATE_REPLAY_MAX) { /* too much to keep: still signs, but cannot be saved */
      free(op->buf);
      op->buf = NULL, op->len = op->cap = 0, op->unsaveable = 1;
      return CKR_OK;
    }
  } else if (op->len + n > raw_input_max(&op->plan)) {
    return CKR_DATA_LEN_RANGE;
  }
  if (op->len + n > op->cap) {
    size_t cap = op->cap ? op->cap : 256;
    while (cap < op->len + n) cap *= 2;
    uint8_t *nb = realloc(op->buf, cap);
    if (!nb) return CKR_HOST_MEMORY;
    op->buf = nb, op->cap = cap;
  }
  if (n) memcpy(op->buf + op->len, p, n);
  op->len += n;
  return CKR_OK;
}

CK_RV sbp11_sign_init(CK_SESSION_HANDLE hSession, CK_MECHANISM_PTR pMechanism, CK_OBJECT_HANDLE hKey) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!pMechanism) rv = CKR_ARGUMENTS_BAD;
  else if (s->op.active) rv = CKR_OPERATION_ACTIVE;
  else rv = op_start(s, pMechanism, hKey);
  if (rv != CKR_OK && rv != CKR_OPERATION_ACTIVE && rv != CKR_ARGUMENTS_BAD && rv != CKR_HOST_MEMORY) {
    sbp11_token *t;
    sbp11_object *o = sbp11_find_object_inlock(s, hKey, &t);
    const sbp11_keyinfo *key = o && o->cls == CKO_PRIVATE_KEY ? &t->keys[o->key].info : NULL;
    sbp11_refusal_sign_init(rv, pMechanism, key, hKey);
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_sign_update(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pPart, CK_ULONG ulPartLen) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!s->op.active) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
  } else if (s->op.busy) {
    rv = CKR_OPERATION_ACTIVE;
  } else {
    rv = (!pPart && ulPartLen) ? CKR_ARGUMENTS_BAD : op_append(&s->op, pPart, ulPartLen);
    if (rv == CKR_DATA_LEN_RANGE) {
      const char *takes = s->op.plan.mech->scheme == SBP11_EDDSA_PURE ? "signs a message of at most that" : "takes a digest";
      SBP11_WARN("signature refused (CKR 0x%lx): more than %zu bytes of input for %s, which %s",
                 (unsigned long)rv, raw_input_max(&s->op.plan), s->op.plan.mech->name, takes);
      sbp11_notice("signature refused: more than %zu bytes of input for %s, which %s", raw_input_max(&s->op.plan),
                   s->op.plan.mech->name, takes);
    }
    s->op.multipart = 1;
    if (rv != CKR_OK) sbp11_sign_op_end(&s->op); /* an error ends the operation */
  }
  sbp11_unlock();
  return rv;
}

/* C_Sign (final = 0) and C_SignFinal (final = 1): OpenSC's shape. Work out the signature size; answer a NULL or
 * short buffer with it and no state change; otherwise compute the digest, and sign it without holding the lock. */
static CK_RV sign_common(CK_SESSION_HANDLE hSession, const uint8_t *data, size_t len, int final, CK_BYTE_PTR out,
                         CK_ULONG_PTR outlen) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sbp11_sign_op *op = &s->op;
  int keep = 0;
  uint8_t digest[SBP11_MU_LEN]; /* the largest: SHA-512 and μ */
  size_t dlen = 0;
  sbp11_sign_request req = {0};
  uint8_t key_id[64];
  char tenant[256];
  uint8_t message[SBP11_EDDSA_MESSAGE_MAX]; /* CKM_EDDSA: a copy, so that it outlives the lock */
  size_t mlen = 0;
  if (!op->active) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
    keep = 1;
    goto out;
  }
  if (op->busy) {
    rv = CKR_OPERATION_ACTIVE;
    keep = 1;
    goto out;
  }
  if (!outlen || (!final && !data && len)) {
    rv = CKR_ARGUMENTS_BAD;
    goto out;
  }
  if (!final && op->multipart) { /* C_Sign cannot finish a multi-part operation */
    rv = CKR_OPERATION_ACTIVE;
    goto out;
  }
  sbp11_token *t;
  sbp11_object *o = sbp11_find_object_inlock(s, op->hkey, &t);
  if (!o) {
    rv = CKR_KEY_HANDLE_INVALID;
    goto out;
  }
  const sbp11_key *key = &t->keys[o->key];
  size_t siglen = key->info.sig_len;
  if (!out) { /* a size query never signs */
    *outlen = siglen;
    keep = 1;
    goto out;
  }
  if (*outlen < siglen) {
    *outlen = siglen;
    rv = CKR_BUFFER_TOO_SMALL;
    keep = 1;
    goto out;
  }
  if (op->plan.mech->hash != SBP11_HASH_NONE) {
    unsigned int dl = SBP11_MU_LEN;
    int ok = final || !len || EVP_DigestUpdate(op->md, data, len);
    if (ok && op->plan.hash == SBP11_MU) ok = EVP_DigestFinalXOF(op->md, digest, SBP11_MU_LEN); /* 64 bytes */
    else if (ok) ok = EVP_DigestFinal_ex(op->md, digest, &dl);
    if (!ok) {
      rv = CKR_GENERAL_ERROR;
      goto out;
    }
    dlen = dl;
  } else if (op->plan.mech->scheme == SBP11_EDDSA_PURE) {
    /* Pure Ed25519: the message itself travels (SIGN's DATA), with its SHA-512, which the service records. */
    const uint8_t *in = final ? op->buf : data;
    mlen = final ? op->len : len;
    if (mlen < 1 || mlen > SBP11_EDDSA_MESSAGE_MAX) {
      rv = CKR_DATA_LEN_RANGE;
      sbp11_refusal_input(rv, &op->plan, &key->info, in, mlen);
      goto out;
    }
    memcpy(message, in, mlen);
    SHA512(message, mlen, digest);
    dlen = SHA512_DIGEST_LENGTH;
  } else {
    const uint8_t *in = final ? op->buf : data, *dp;
    size_t inlen = final ? op->len : len;
    rv = sbp11_mech_raw_digest(&op->plan, &key->info, in, inlen, &dp, &dlen);
    if (rv != CKR_OK) {
      sbp11_refusal_input(rv, &op->plan, &key->info, in, inlen);
      goto out;
    }
    memcpy(digest, dp, dlen);
  }
  snprintf(tenant, sizeof(tenant), "%s", t->tenant);
  memcpy(key_id, key->id, key->id_len);
  req.tenant = tenant;
  req.key_id = key_id;
  req.key_id_len = key->id_len;
  req.algorithm = sbp11_algorithm_name(op->plan.mech->scheme, op->plan.hash);
  req.digest = digest;
  req.digest_len = dlen;
  if (mlen) {
    req.data = message;
    req.data_len = mlen;
  }
  req.sig_len = siglen;
  op->busy = 1;
  sbp11_unlock();

  uint8_t sig[SBP11_SIG_MAX];
  SBP11_DEBUG("%s: %s with tenant %s's key", final ? "C_SignFinal" : "C_Sign", req.algorithm, tenant);
  rv = sbp11_client_sign(&req, sig);

  if (sbp11_enter() != CKR_OK) return CKR_CRYPTOKI_NOT_INITIALIZED; /* finalised meanwhile */
  s = sbp11_find_session_inlock(hSession);
  if (s && s->op.busy) sbp11_sign_op_end(&s->op);
  sbp11_unlock();
  if (!s) return CKR_SESSION_CLOSED;
  if (rv == CKR_OK) {
    memcpy(out, sig, siglen);
    *outlen = siglen;
  }
  return rv;
out:
  if (!keep) sbp11_sign_op_end(op);
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_sign(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pData, CK_ULONG ulDataLen, CK_BYTE_PTR pSignature,
                 CK_ULONG_PTR pulSignatureLen) {
  return sign_common(hSession, pData, ulDataLen, 0, pSignature, pulSignatureLen);
}

CK_RV sbp11_sign_final(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pSignature, CK_ULONG_PTR pulSignatureLen) {
  return sign_common(hSession, NULL, 0, 1, pSignature, pulSignatureLen);
}

/* ---- operation state: a sign operation as mechanism, parameters, key and the data so far ---- */

static const uint8_t STATE_MAGIC[8] = {'S', 'B', 'P', '1', '1', 'S', 'T', '1'};
#define STATE_HEADER (8 + 8 + 8 + 1 + 1 + 8 + 8 + 8 + 4)

static void put64(uint8_t **p, uint64_t v) {
  for (int i = 7; i >= 0; i--) *(*p)++ = (uint8_t)(v >> (8 * i));
}
static uint64_t get64(const uint8_t **p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v = v << 8 | *(*p)++;
  return v;
}

CK_RV sbp11_get_operation_state(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pState, CK_ULONG_PTR pulLen) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sbp11_sign_op *op = &s->op;
  if (!pulLen) {
    rv = CKR_ARGUMENTS_BAD;
  } else if (!op->active) {
    rv = s->finding || s->dg.active ? CKR_STATE_UNSAVEABLE : CKR_OPERATION_NOT_INITIALIZED;
  } else if (op->busy) {
    rv = CKR_OPERATION_ACTIVE;
  } else if (op->unsaveable) {
    rv = CKR_STATE_UNSAVEABLE;
  } else {
    CK_ULONG need = STATE_HEADER + op->len;
    if (pState && *pulLen < need) {
      rv = CKR_BUFFER_TOO_SMALL;
    } else if (pState) {
      uint8_t *p = pState;
      memcpy(p, STATE_MAGIC, 8);
      p += 8;
      put64(&p, op->plan.mech->type);
      put64(&p, op->hkey);
      *p++ = (uint8_t)op->multipart;
      *p++ = (uint8_t)op->plan.has_pss;
      put64(&p, op->plan.pss.hashAlg);
      put64(&p, op->plan.pss.mgf);
      put64(&p, op->plan.pss.sLen);
      *p++ = (uint8_t)(op->len >> 24), *p++ = (uint8_t)(op->len >> 16), *p++ = (uint8_t)(op->len >> 8);
      *p++ = (uint8_t)op->len;
      if (op->len) memcpy(p, op->buf, op->len);
    }
    *pulLen = need;
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_set_operation_state(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pState, CK_ULONG ulLen,
                                CK_OBJECT_HANDLE hEncryptionKey, CK_OBJECT_HANDLE hAuthenticationKey) {
  (void)hAuthenticationKey; /* the state names its key */
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!pState) {
    rv = CKR_ARGUMENTS_BAD;
    goto out;
  }
  if (ulLen < STATE_HEADER || memcmp(pState, STATE_MAGIC, 8) != 0) {
    rv = CKR_SAVED_STATE_INVALID;
    goto out;
  }
  if (hEncryptionKey != CK_INVALID_HANDLE) {
    rv = CKR_KEY_NOT_NEEDED;
    goto out;
  }
  const uint8_t *p = pState + 8;
  CK_RSA_PKCS_PSS_PARAMS pss;
  CK_MECHANISM m = {0};
  m.mechanism = (CK_MECHANISM_TYPE)get64(&p);
  CK_OBJECT_HANDLE hkey = (CK_OBJECT_HANDLE)get64(&p);
  uint8_t multipart = *p++, has_pss = *p++;
  pss.hashAlg = (CK_MECHANISM_TYPE)get64(&p);
  pss.mgf = (CK_RSA_PKCS_MGF_TYPE)get64(&p);
  pss.sLen = (CK_ULONG)get64(&p);
  uint32_t dlen = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
  p += 4;
  if (multipart > 1 || has_pss > 1 || dlen != ulLen - STATE_HEADER) {
    rv = CKR_SAVED_STATE_INVALID;
    goto out;
  }
  if (has_pss) {
    m.pParameter = &pss;
    m.ulParameterLen = sizeof(pss);
  }
  if (s->op.busy) {
    rv = CKR_OPERATION_ACTIVE;
    goto out;
  }
  sbp11_sign_op_end(&s->op);
  rv = op_start(s, &m, hkey);
  if (rv == CKR_OK) rv = op_append(&s->op, p, dlen);
  if (rv != CKR_OK) {
    sbp11_sign_op_end(&s->op);
    rv = CKR_SAVED_STATE_INVALID;
    goto out;
  }
  s->op.multipart = multipart;
out:
  sbp11_unlock();
  return rv;
}

