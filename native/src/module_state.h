/* The library state the module_*.c files share (inside the module only; module.h is what exports.c calls).
 * module.c owns the state, the lock, fork handling, C_Initialize and C_Finalize; the PKCS#11 function groups are
 * each in their own file, as in OpenSC's src/pkcs11/pkcs11-global.c, pkcs11-session.c and pkcs11-object.c:
 *   module_slots.c     C_GetInfo, slots, tokens, mechanisms; LIST
 *   module_sessions.c  sessions, login, C_SessionCancel
 *   module_objects.c   object handles, attributes, C_FindObjects*
 *   module_sign.c      sign operations (C_SignInit ... C_SignFinal) and their C_Get/SetOperationState
 *   module_digest.c    C_Digest*, C_GenerateRandom, C_SeedRandom: what needs no daemon
 * One global lock guards the state; it is never held across a signature's network exchange (only across a LIST).
 * A function whose name ends in _inlock must be called with the lock held. */
#ifndef SBP11_MODULE_STATE_H
#define SBP11_MODULE_STATE_H

#include <openssl/evp.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mech.h"
#include "objects.h"
#include "sbp11_pkcs11.h"

typedef struct sbp11_sign_op {
  int active, busy, multipart, unsaveable;
  sbp11_signplan plan;
  CK_OBJECT_HANDLE hkey;
  EVP_MD_CTX *md;
  uint8_t *buf; /* raw mechanisms: the input; hash-and-sign: the data so far, while it fits for saving */
  size_t len, cap;
} sbp11_sign_op;

/* A digest operation (C_DigestInit ... C_Digest or C_DigestFinal), independent of the session's sign operation. */
typedef struct sbp11_digest_op {
  int active, multipart;
  EVP_MD_CTX *md;
} sbp11_digest_op;

typedef struct sbp11_session {
  CK_SESSION_HANDLE handle;
  CK_SLOT_ID slot;
  CK_FLAGS flags;
  sbp11_sign_op op;
  sbp11_digest_op dg;
  int finding;
  CK_OBJECT_HANDLE *found;
  size_t nfound, pos;
} sbp11_session;

typedef struct sbp11_module_state {
  int initialized;
  pid_t pid;
  int use_app_mutex;
  CK_C_INITIALIZE_ARGS app;
  void *app_mutex;
  int listed;
  CK_RV list_rv;
  char list_error[200];
  sbp11_token *tokens;
  size_t ntokens;
  int *logged_in; /* per slot */
  sbp11_session **sessions;
  size_t nsessions, cap;
  CK_SESSION_HANDLE next_handle;
} sbp11_module_state;

/* The state (module.c), guarded by the lock. */
extern sbp11_module_state sbp11_g;

/* ---- the lock (module.c) ---- */

/* Takes the lock if the library is initialised in this process, else CKR_CRYPTOKI_NOT_INITIALIZED. */
CK_RV sbp11_enter(void);
/* sbp11_enter, then finds the session: CKR_SESSION_HANDLE_INVALID (lock released) if there is none. */
CK_RV sbp11_enter_session(CK_SESSION_HANDLE h, sbp11_session **s);
void sbp11_unlock(void);
sbp11_session *sbp11_find_session_inlock(CK_SESSION_HANDLE h);

/* ---- slots and tokens (module_slots.c) ---- */

/* The token of a slot, listing first if nothing was listed yet: CKR_SLOT_ID_INVALID or CKR_TOKEN_NOT_PRESENT. */
CK_RV sbp11_slot_token_inlock(CK_SLOT_ID id, sbp11_token **t);

/* ---- sessions (module_sessions.c) ---- */

void sbp11_session_free(sbp11_session *s);

/* ---- objects (module_objects.c) ---- */

/* The object a handle names in the session's token (and the token, when tok is not NULL), or NULL. */
sbp11_object *sbp11_find_object_inlock(const sbp11_session *s, CK_OBJECT_HANDLE h, sbp11_token **tok);
/* Ends a C_FindObjects operation. */
void sbp11_find_end(sbp11_session *s);

/* ---- operations (module_sign.c, module_digest.c): end one, freeing what it holds ---- */

void sbp11_sign_op_end(sbp11_sign_op *op);
void sbp11_digest_op_end(sbp11_digest_op *dg);

#endif
