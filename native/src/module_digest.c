/* What the module answers without the daemon: message digesting (C_DigestInit ... C_DigestFinal, CKM_SHA256/384/512
 * with libcrypto; the mechanisms are in digest.c), C_GenerateRandom and C_SeedRandom. */
#include "module.h"

#include <errno.h>
#include <openssl/evp.h>
#include <string.h>
#include <sys/random.h>

#include "digest.h"
#include "log.h"
#include "module_state.h"

void sbp11_digest_op_end(sbp11_digest_op *dg) {
  EVP_MD_CTX_free(dg->md);
  memset(dg, 0, sizeof(*dg));
}

/* ---- digesting: CKM_SHA256/384/512 with libcrypto, no network ---- */

CK_RV sbp11_digest_init(CK_SESSION_HANDLE hSession, CK_MECHANISM_PTR pMechanism) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  const EVP_MD *md = pMechanism ? sbp11_digest_md(pMechanism->mechanism) : NULL;
  if (!pMechanism) {
    rv = CKR_ARGUMENTS_BAD;
  } else if (s->dg.active) {
    rv = CKR_OPERATION_ACTIVE;
  } else if (!md) {
    rv = CKR_MECHANISM_INVALID;
    SBP11_WARN("C_DigestInit refused: mechanism 0x%lx is not a digest this token offers (CKM_SHA256, CKM_SHA384, "
               "CKM_SHA512)", (unsigned long)pMechanism->mechanism);
  } else if (pMechanism->ulParameterLen != 0) {
    rv = CKR_MECHANISM_PARAM_INVALID;
    SBP11_WARN("C_DigestInit refused: digest mechanisms take no parameters");
  } else {
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) rv = CKR_HOST_MEMORY;
    else if (!EVP_DigestInit_ex(ctx, md, NULL)) rv = CKR_GENERAL_ERROR;
    if (rv == CKR_OK) s->dg = (sbp11_digest_op){.active = 1, .md = ctx};
    else EVP_MD_CTX_free(ctx);
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_digest_update(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pPart, CK_ULONG ulPartLen) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!s->dg.active) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
  } else {
    if (!pPart && ulPartLen) rv = CKR_ARGUMENTS_BAD;
    else if (ulPartLen && !EVP_DigestUpdate(s->dg.md, pPart, ulPartLen)) rv = CKR_GENERAL_ERROR;
    s->dg.multipart = 1;
    if (rv != CKR_OK) sbp11_digest_op_end(&s->dg); /* an error ends the operation */
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_digest_key(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hKey) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!s->dg.active) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
  } else {
    /* Only secret keys can be digested, and a token here holds none. */
    rv = sbp11_find_object_inlock(s, hKey, NULL) ? CKR_KEY_INDIGESTIBLE : CKR_KEY_HANDLE_INVALID;
    sbp11_digest_op_end(&s->dg);
  }
  sbp11_unlock();
  return rv;
}

/* C_Digest (final = 0) and C_DigestFinal (final = 1), in C_Sign's shape: a NULL or short buffer gets the size and
 * keeps the operation; anything else ends it. */
static CK_RV digest_common(CK_SESSION_HANDLE hSession, const uint8_t *data, size_t len, int final, CK_BYTE_PTR out,
                           CK_ULONG_PTR outlen) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sbp11_digest_op *dg = &s->dg;
  if (!dg->active) {
    sbp11_unlock();
    return CKR_OPERATION_NOT_INITIALIZED;
  }
  size_t size = (size_t)EVP_MD_CTX_get_size(dg->md);
  unsigned int got = 0;
  if (!outlen || (!final && !data && len)) {
    rv = CKR_ARGUMENTS_BAD;
  } else if (!final && dg->multipart) {
    rv = CKR_OPERATION_ACTIVE; /* C_Digest cannot finish a multi-part operation */
  } else if (!out) {
    *outlen = size;
    goto keep;
  } else if (*outlen < size) {
    *outlen = size;
    rv = CKR_BUFFER_TOO_SMALL;
    goto keep;
  } else if ((!final && len && !EVP_DigestUpdate(dg->md, data, len)) || !EVP_DigestFinal_ex(dg->md, out, &got)) {
    rv = CKR_GENERAL_ERROR;
  } else {
    *outlen = got;
  }
  sbp11_digest_op_end(dg);
keep:
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_digest(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pData, CK_ULONG ulDataLen, CK_BYTE_PTR pDigest,
                   CK_ULONG_PTR pulDigestLen) {
  return digest_common(hSession, pData, ulDataLen, 0, pDigest, pulDigestLen);
}

CK_RV sbp11_digest_final(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pDigest, CK_ULONG_PTR pulDigestLen) {
  return digest_common(hSession, NULL, 0, 1, pDigest, pulDigestLen);
}

/* ---- random numbers ---- */

CK_RV sbp11_generate_random(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pRandomData, CK_ULONG ulRandomLen) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sbp11_unlock();
  if (!pRandomData && ulRandomLen) return CKR_ARGUMENTS_BAD;
  size_t done = 0;
  while (done < ulRandomLen) {
    ssize_t r = getrandom(pRandomData + done, ulRandomLen - done, 0);
    if (r < 0) {
      if (errno == EINTR) continue;
      return CKR_FUNCTION_FAILED;
    }
    done += (size_t)r;
  }
  return CKR_OK;
}

CK_RV sbp11_seed_random(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pSeed, CK_ULONG ulSeedLen) {
  (void)pSeed, (void)ulSeedLen;
  return sbp11_unsupported_session(hSession, CKR_RANDOM_SEED_NOT_SUPPORTED);
}

