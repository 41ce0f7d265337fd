/* Objects: handles, C_GetAttributeValue, C_GetObjectSize, C_FindObjects*, and the refusals of the functions that
 * would change an object (OpenSC's pkcs11-object.c). The objects themselves come from objects.c. */
#include "module.h"

#include <stdlib.h>

#include "module_state.h"
#include "objects.h"

static CK_OBJECT_HANDLE object_handle(CK_SLOT_ID slot, size_t idx) {
  return (CK_OBJECT_HANDLE)((slot + 1) << 16 | (idx + 1));
}

sbp11_object *sbp11_find_object_inlock(const sbp11_session *s, CK_OBJECT_HANDLE h, sbp11_token **tok) {
  CK_ULONG slot = (h >> 16) - 1, idx = (h & 0xffff) - 1;
  if ((h >> 16) == 0 || (h & 0xffff) == 0 || slot != s->slot || slot >= sbp11_g.ntokens) return NULL;
  sbp11_token *t = &sbp11_g.tokens[slot];
  if (idx >= t->nobjects) return NULL;
  if (tok) *tok = t;
  return &t->objects[idx];
}

void sbp11_find_end(sbp11_session *s) {
  free(s->found);
  s->found = NULL, s->nfound = s->pos = 0, s->finding = 0;
}

CK_RV sbp11_object_prohibited(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hObject) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  /* Every object is CKA_MODIFIABLE, CKA_COPYABLE and CKA_DESTROYABLE false. */
  rv = sbp11_find_object_inlock(s, hObject, NULL) ? CKR_ACTION_PROHIBITED : CKR_OBJECT_HANDLE_INVALID;
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_get_object_size(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hObject, CK_ULONG_PTR pulSize) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sbp11_object *o = sbp11_find_object_inlock(s, hObject, NULL);
  if (!o) rv = CKR_OBJECT_HANDLE_INVALID;
  else if (!pulSize) rv = CKR_ARGUMENTS_BAD;
  else *pulSize = sbp11_object_size(o);
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_get_attribute_value(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hObject, CK_ATTRIBUTE_PTR pTemplate,
                                CK_ULONG ulCount) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sbp11_object *o = sbp11_find_object_inlock(s, hObject, NULL);
  if (!o) rv = CKR_OBJECT_HANDLE_INVALID;
  else if (!pTemplate && ulCount) rv = CKR_ARGUMENTS_BAD;
  else rv = sbp11_object_get_attributes(o, pTemplate, ulCount);
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_find_objects_init(CK_SESSION_HANDLE hSession, CK_ATTRIBUTE_PTR pTemplate, CK_ULONG ulCount) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!pTemplate && ulCount) {
    rv = CKR_ARGUMENTS_BAD;
  } else if (s->finding) {
    rv = CKR_OPERATION_ACTIVE;
  } else if (s->slot < sbp11_g.ntokens) {
    sbp11_token *t = &sbp11_g.tokens[s->slot];
    CK_OBJECT_HANDLE *found = calloc(t->nobjects ? t->nobjects : 1, sizeof(*found));
    if (!found) {
      rv = CKR_HOST_MEMORY;
    } else {
      size_t n = 0;
      for (size_t i = 0; i < t->nobjects; i++)
        if (sbp11_object_matches(&t->objects[i], pTemplate, ulCount)) found[n++] = object_handle(s->slot, i);
      s->found = found, s->nfound = n, s->pos = 0, s->finding = 1;
    }
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_find_objects(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE_PTR phObject, CK_ULONG ulMaxObjectCount,
                         CK_ULONG_PTR pulObjectCount) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!s->finding) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
  } else if (!pulObjectCount || (!phObject && ulMaxObjectCount)) {
    rv = CKR_ARGUMENTS_BAD;
  } else {
    CK_ULONG n = 0;
    while (n < ulMaxObjectCount && s->pos < s->nfound) phObject[n++] = s->found[s->pos++];
    *pulObjectCount = n;
  }
  sbp11_unlock();
  return rv;
}

CK_RV sbp11_find_objects_final(CK_SESSION_HANDLE hSession) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!s->finding) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
  } else {
    sbp11_find_end(s);
  }
  sbp11_unlock();
  return rv;
}

