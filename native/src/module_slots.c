/* General information, slots, tokens and mechanisms: C_GetInfo, C_GetSlotList, C_GetSlotInfo, C_GetTokenInfo,
 * C_GetMechanismList, C_GetMechanismInfo (OpenSC's pkcs11-global.c), and the LIST that the slots come from. */
#include "module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "digest.h"
#include "log.h"
#include "mech.h"
#include "module_state.h"
#include "objects.h"

static size_t slot_count(void) {
  return sbp11_g.ntokens ? sbp11_g.ntokens : (sbp11_g.list_rv != CKR_OK ? 1 : 0);
}

/* LIST (lock held: a LIST is rare and short, and keeps the slot list consistent). */
static CK_RV list_inlock(void) {
  sbw_msg m;
  char why[200] = "";
  CK_RV rv = sbp11_client_list(&m, why, sizeof(why));
  sbp11_token *tokens = NULL;
  size_t n = 0;
  if (rv == CKR_OK) {
    rv = sbp11_tokens_from_list(&m, &tokens, &n);
    sbw_msg_free(&m);
  }
  int *logged = calloc(n ? n : 1, sizeof(int));
  if (!logged) {
    sbp11_tokens_free(tokens, n);
    return CKR_HOST_MEMORY;
  }
  sbp11_tokens_free(sbp11_g.tokens, sbp11_g.ntokens);
  free(sbp11_g.logged_in);
  sbp11_g.tokens = tokens;
  sbp11_g.ntokens = n;
  sbp11_g.logged_in = logged;
  sbp11_g.listed = 1;
  sbp11_g.list_rv = rv;
  snprintf(sbp11_g.list_error, sizeof(sbp11_g.list_error), "%s", rv == CKR_OK ? "" : why);
  if (rv == CKR_OK) SBP11_DEBUG("LIST: %zu tokens", n);
  return rv;
}

static void ensure_listed(void) {
  if (!sbp11_g.listed) list_inlock();
}

CK_RV sbp11_slot_token_inlock(CK_SLOT_ID id, sbp11_token **t) {
  ensure_listed();
  if (id >= slot_count()) return CKR_SLOT_ID_INVALID;
  if (id >= sbp11_g.ntokens) return CKR_TOKEN_NOT_PRESENT;
  *t = &sbp11_g.tokens[id];
  return CKR_OK;
}

static void pad(CK_UTF8CHAR *dst, size_t n, const char *src) {
  memset(dst, ' ', n);
  size_t l = strlen(src);
  memcpy(dst, src, l < n ? l : n);
}

/* ---- general ---- */

CK_RV sbp11_get_info(CK_INFO_PTR pInfo, CK_BYTE major, CK_BYTE minor) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  if (!pInfo) {
    sbp11_unlock();
    return CKR_ARGUMENTS_BAD;
  }
  memset(pInfo, 0, sizeof(*pInfo));
  pInfo->cryptokiVersion.major = major;
  pInfo->cryptokiVersion.minor = minor;
  pad(pInfo->manufacturerID, sizeof(pInfo->manufacturerID), "signbridge");
  pad(pInfo->libraryDescription, sizeof(pInfo->libraryDescription), "signbridge PKCS#11 module");
  pInfo->libraryVersion.major = 0;
  pInfo->libraryVersion.minor = 1;
  sbp11_unlock();
  return CKR_OK;
}

/* ---- slots and tokens ---- */

CK_RV sbp11_get_slot_list(CK_BBOOL tokenPresent, CK_SLOT_ID_PTR pSlotList, CK_ULONG_PTR pulCount) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  if (!pulCount) {
    rv = CKR_ARGUMENTS_BAD;
    goto out;
  }
  /* Refresh at the start of an enumeration when nothing refers to the current tokens. */
  if (!sbp11_g.listed || (!pSlotList && sbp11_g.nsessions == 0)) {
    CK_RV lr = list_inlock();
    if (lr == CKR_HOST_MEMORY) {
      rv = lr;
      goto out;
    }
  }
  size_t n = tokenPresent ? sbp11_g.ntokens : slot_count();
  if (pSlotList) {
    if (*pulCount < n) {
      rv = CKR_BUFFER_TOO_SMALL;
    } else {
      for (size_t i = 0; i < n; i++) pSlotList[i] = i;
    }
  }
  *pulCount = n;
out:
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_get_slot_info(CK_SLOT_ID slotID, CK_SLOT_INFO_PTR pInfo) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t = NULL;
  rv = sbp11_slot_token_inlock(slotID, &t);
  if (rv == CKR_TOKEN_NOT_PRESENT) rv = CKR_OK;
  if (rv == CKR_OK && !pInfo) rv = CKR_ARGUMENTS_BAD;
  if (rv == CKR_OK) {
    char desc[300];
    memset(pInfo, 0, sizeof(*pInfo));
    if (t) {
      /* A tenant that failed on its own is still a token (without keys); its slot says why in brief. */
      if (t->status) snprintf(desc, sizeof(desc), "signbridge %s: %s", t->tenant, sbw_status_name(t->status));
      else snprintf(desc, sizeof(desc), "signbridge %s", t->tenant);
      pInfo->flags = CKF_TOKEN_PRESENT;
    } else {
      /* 64 characters: the reason in brief; SIGNBRIDGE_LOG shows it in full. */
      if (!strncmp(sbp11_g.list_error, "cannot connect", 14))
        snprintf(desc, sizeof(desc), "signbridge: daemon not running");
      else snprintf(desc, sizeof(desc), "signbridge: %s", sbp11_g.list_error);
    }
    pad(pInfo->slotDescription, sizeof(pInfo->slotDescription), desc);
    pad(pInfo->manufacturerID, sizeof(pInfo->manufacturerID), "signbridge");
    pInfo->hardwareVersion.major = 1;
    pInfo->firmwareVersion.major = 1;
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_get_token_info(CK_SLOT_ID slotID, CK_TOKEN_INFO_PTR pInfo) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = sbp11_slot_token_inlock(slotID, &t);
  if (rv == CKR_OK && !pInfo) rv = CKR_ARGUMENTS_BAD;
  if (rv == CKR_OK) {
    memset(pInfo, 0, sizeof(*pInfo));
    pad(pInfo->label, sizeof(pInfo->label), t->label);
    pad(pInfo->manufacturerID, sizeof(pInfo->manufacturerID), "signbridge");
    pad(pInfo->model, sizeof(pInfo->model), "daemon v1");
    pad(pInfo->serialNumber, sizeof(pInfo->serialNumber), t->serial);
    /* No CKF_LOGIN_REQUIRED: the daemon holds the credentials. C_Login is accepted with any PIN. */
    pInfo->flags = CKF_TOKEN_INITIALIZED | CKF_USER_PIN_INITIALIZED | CKF_RNG;
    pInfo->ulMaxSessionCount = CK_EFFECTIVELY_INFINITE;
    pInfo->ulMaxRwSessionCount = CK_EFFECTIVELY_INFINITE;
    CK_ULONG count = 0, rw = 0;
    for (size_t i = 0; i < sbp11_g.nsessions; i++) {
      if (sbp11_g.sessions[i]->slot != slotID) continue;
      count++;
      if (sbp11_g.sessions[i]->flags & CKF_RW_SESSION) rw++;
    }
    pInfo->ulSessionCount = count;
    pInfo->ulRwSessionCount = rw;
    pInfo->ulMaxPinLen = 255;
    pInfo->ulMinPinLen = 0;
    pInfo->ulTotalPublicMemory = CK_UNAVAILABLE_INFORMATION;
    pInfo->ulFreePublicMemory = CK_UNAVAILABLE_INFORMATION;
    pInfo->ulTotalPrivateMemory = CK_UNAVAILABLE_INFORMATION;
    pInfo->ulFreePrivateMemory = CK_UNAVAILABLE_INFORMATION;
    pInfo->hardwareVersion.major = 1;
    pInfo->firmwareVersion.major = 1;
    memset(pInfo->utcTime, '0', sizeof(pInfo->utcTime));
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_get_mechanism_list(CK_SLOT_ID slotID, CK_MECHANISM_TYPE_PTR pList, CK_ULONG_PTR pulCount) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = sbp11_slot_token_inlock(slotID, &t);
  if (rv == CKR_OK && !pulCount) rv = CKR_ARGUMENTS_BAD;
  if (rv == CKR_OK) {
    CK_MECHANISM_TYPE all[32];
    size_t n = 0;
    for (int fam = SBP11_RSA; fam <= SBP11_FAMILY_LAST; fam++)
      if (!t->families || (t->families & (1 << fam))) n += sbp11_mech_list(fam, all + n, 32 - n);
    n += sbp11_digest_list(all + n, 32 - n);
    if (pList) {
      if (*pulCount < n) rv = CKR_BUFFER_TOO_SMALL;
      else memcpy(pList, all, n * sizeof(CK_MECHANISM_TYPE));
    }
    *pulCount = n;
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_get_mechanism_info(CK_SLOT_ID slotID, CK_MECHANISM_TYPE type, CK_MECHANISM_INFO_PTR pInfo) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = sbp11_slot_token_inlock(slotID, &t);
  if (rv == CKR_OK && !pInfo) rv = CKR_ARGUMENTS_BAD;
  if (rv == CKR_OK) rv = sbp11_digest_md(type) ? sbp11_digest_mech_info(type, pInfo) : sbp11_mech_info(type, pInfo);
  sbp11_unlock();
  return rv;
}

