/* Sessions and login: C_OpenSession, C_CloseSession, C_CloseAllSessions, C_GetSessionInfo, C_Login, C_Logout,
 * C_SessionCancel (OpenSC's pkcs11-session.c). */
#include "module.h"

#include <stdlib.h>

#include "log.h"
#include "module_state.h"

void sbp11_session_free(sbp11_session *s) {
  sbp11_sign_op_end(&s->op);
  sbp11_digest_op_end(&s->dg);
  free(s->found);
  free(s);
}

/* sbp11_g.logged_in[slot]: who is logged in to the token. */
enum { LOGGED_OUT = 0, LOGGED_IN_USER = 1, LOGGED_IN_SO = 2 };

static int login_state(CK_USER_TYPE user) { return user == CKU_SO ? LOGGED_IN_SO : LOGGED_IN_USER; }

static int read_only_session_open(CK_SLOT_ID slot) {
  for (size_t i = 0; i < sbp11_g.nsessions; i++)
    if (sbp11_g.sessions[i]->slot == slot && !(sbp11_g.sessions[i]->flags & CKF_RW_SESSION)) return 1;
  return 0;
}

CK_RV sbp11_open_session(CK_SLOT_ID slotID, CK_FLAGS flags, CK_SESSION_HANDLE_PTR phSession) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = sbp11_slot_token_inlock(slotID, &t);
  if (rv != CKR_OK) goto out;
  if (!(flags & CKF_SERIAL_SESSION)) {
    rv = CKR_SESSION_PARALLEL_NOT_SUPPORTED;
    goto out;
  }
  if (!phSession) {
    rv = CKR_ARGUMENTS_BAD;
    goto out;
  }
  if (!(flags & CKF_RW_SESSION) && sbp11_g.logged_in[slotID] == LOGGED_IN_SO) {
    rv = CKR_SESSION_READ_WRITE_SO_EXISTS;
    goto out;
  }
  if (sbp11_g.nsessions == sbp11_g.cap) {
    size_t cap = sbp11_g.cap ? sbp11_g.cap * 2 : 16;
    sbp11_session **ns = realloc(sbp11_g.sessions, cap * sizeof(*ns));
    if (!ns) {
      rv = CKR_HOST_MEMORY;
      goto out;
    }
    sbp11_g.sessions = ns, sbp11_g.cap = cap;
  }
  sbp11_session *s = calloc(1, sizeof(*s));
  if (!s) {
    rv = CKR_HOST_MEMORY;
    goto out;
  }
  s->handle = sbp11_g.next_handle++;
  s->slot = slotID;
  s->flags = flags & (CKF_SERIAL_SESSION | CKF_RW_SESSION);
  sbp11_g.sessions[sbp11_g.nsessions++] = s;
  *phSession = s->handle;
out:
  sbp11_unlock();
  return rv;
}

static void remove_session_at(size_t i) {
  CK_SLOT_ID slot = sbp11_g.sessions[i]->slot;
  sbp11_session_free(sbp11_g.sessions[i]);
  sbp11_g.sessions[i] = sbp11_g.sessions[--sbp11_g.nsessions];
  for (size_t k = 0; k < sbp11_g.nsessions; k++)
    if (sbp11_g.sessions[k]->slot == slot) return;
  if (slot < sbp11_g.ntokens) sbp11_g.logged_in[slot] = 0; /* the last session of a token logs out */
}

CK_RV sbp11_close_session(CK_SESSION_HANDLE hSession) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  for (size_t i = 0; i < sbp11_g.nsessions; i++) {
    if (sbp11_g.sessions[i] == s) {
      remove_session_at(i);
      break;
    }
  }
  sbp11_unlock();
  return CKR_OK;
}

CK_RV sbp11_close_all_sessions(CK_SLOT_ID slotID) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = sbp11_slot_token_inlock(slotID, &t);
  if (rv == CKR_OK) {
    for (size_t i = sbp11_g.nsessions; i-- > 0;)
      if (sbp11_g.sessions[i]->slot == slotID) remove_session_at(i);
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_get_session_info(CK_SESSION_HANDLE hSession, CK_SESSION_INFO_PTR pInfo) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!pInfo) {
    rv = CKR_ARGUMENTS_BAD;
  } else {
    int who = s->slot < sbp11_g.ntokens ? sbp11_g.logged_in[s->slot] : LOGGED_OUT;
    int rw = (s->flags & CKF_RW_SESSION) != 0;
    pInfo->slotID = s->slot;
    if (who == LOGGED_IN_SO) pInfo->state = CKS_RW_SO_FUNCTIONS; /* an SO login implies only r/w sessions */
    else pInfo->state = rw ? (who ? CKS_RW_USER_FUNCTIONS : CKS_RW_PUBLIC_SESSION)
                           : (who ? CKS_RO_USER_FUNCTIONS : CKS_RO_PUBLIC_SESSION);
    pInfo->flags = s->flags;
    pInfo->ulDeviceError = 0;
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_login(CK_SESSION_HANDLE hSession, CK_USER_TYPE userType, CK_UTF8CHAR_PTR pPin, CK_ULONG ulPinLen) {
  (void)pPin, (void)ulPinLen;
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (userType == CKU_CONTEXT_SPECIFIC) {
    rv = CKR_OK; /* no key needs it (CKA_ALWAYS_AUTHENTICATE is false); accepted */
  } else if (userType != CKU_USER && userType != CKU_SO) {
    rv = CKR_USER_TYPE_INVALID;
  } else if (sbp11_g.logged_in[s->slot]) {
    rv = sbp11_g.logged_in[s->slot] == login_state(userType) ? CKR_USER_ALREADY_LOGGED_IN
                                                        : CKR_USER_ANOTHER_ALREADY_LOGGED_IN;
  } else if (userType == CKU_SO && read_only_session_open(s->slot)) {
    rv = CKR_SESSION_READ_ONLY_EXISTS; /* PKCS#11 2.40 section 5.6: the SO works in read/write sessions only */
  } else {
    /* The token needs no PIN: the daemon authenticates to the service. Any PIN is accepted and ignored, for the
     * SO too (there is nothing an SO could change: C_InitPIN and C_SetPIN are not supported). */
    sbp11_g.logged_in[s->slot] = login_state(userType);
    SBP11_DEBUG("C_Login(%s) on slot %lu: no PIN needed, accepted", userType == CKU_SO ? "CKU_SO" : "CKU_USER",
                (unsigned long)s->slot);
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_logout(CK_SESSION_HANDLE hSession) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!sbp11_g.logged_in[s->slot]) rv = CKR_USER_NOT_LOGGED_IN;
  else sbp11_g.logged_in[s->slot] = 0;
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_session_cancel(CK_SESSION_HANDLE hSession, CK_FLAGS flags) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if ((flags & CKF_SIGN) && s->op.active && !s->op.busy) sbp11_sign_op_end(&s->op);
  if (flags & CKF_DIGEST) sbp11_digest_op_end(&s->dg);
  if ((flags & CKF_FIND_OBJECTS) && s->finding) sbp11_find_end(s);
  sbp11_unlock();
  return CKR_OK;
}

