/* Library state: initialisation, fork handling, slots and tokens, sessions, objects, signing. One global lock
 * guards the state; it is never held across a signature's network exchange (only across a LIST). */
#include "module.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "client.h"
#include "digest.h"
#include "log.h"
#include "mech.h"
#include "objects.h"
#include "refusal.h"
#include "transport.h"

#define SBP11_RAW_INPUT_MAX 1024        /* a DigestInfo or a digest, buffered across C_SignUpdate */
#define SBP11_STATE_REPLAY_MAX (64 * 1024) /* hash-and-sign data kept for C_GetOperationState */

typedef struct sign_op {
  int active, busy, multipart, unsaveable;
  sbp11_signplan plan;
  CK_OBJECT_HANDLE hkey;
  EVP_MD_CTX *md;
  uint8_t *buf; /* raw mechanisms: the input; hash-and-sign: the data so far, while it fits for saving */
  size_t len, cap;
} sign_op;

/* A digest operation (C_DigestInit ... C_Digest or C_DigestFinal), independent of the session's sign operation. */
typedef struct digest_op {
  int active, multipart;
  EVP_MD_CTX *md;
} digest_op;

typedef struct session {
  CK_SESSION_HANDLE handle;
  CK_SLOT_ID slot;
  CK_FLAGS flags;
  sign_op op;
  digest_op dg;
  int finding;
  CK_OBJECT_HANDLE *found;
  size_t nfound, pos;
} session;

static struct {
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
  session **sessions;
  size_t nsessions, cap;
  CK_SESSION_HANDLE next_handle;
} g;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void lock(void) {
  pthread_mutex_lock(&g_mu);
  if (g.use_app_mutex) g.app.LockMutex(g.app_mutex);
}

static void unlock(void) {
  if (g.use_app_mutex) g.app.UnlockMutex(g.app_mutex);
  pthread_mutex_unlock(&g_mu);
}

/* Takes the lock if the library is initialised in this process. */
static CK_RV enter(void) {
  lock();
  if (!g.initialized || g.pid != getpid()) {
    unlock();
    return CKR_CRYPTOKI_NOT_INITIALIZED;
  }
  return CKR_OK;
}

/* ---- fork: the child starts clean ---- */

static void atfork_prepare(void) {
  lock();
  sbp11_transport_atfork_prepare();
}
static void atfork_parent(void) {
  sbp11_transport_atfork_parent();
  unlock();
}
static void atfork_child(void) {
  /* The state was consistent at fork (we held the lock). Everything of the parent's stays as it is: the pid check
   * in enter() makes the child see an uninitialised library, and its C_Initialize frees it and starts over. */
  sbp11_transport_atfork_child();
  unlock();
}
static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

/* ---- state helpers (lock held) ---- */

static void op_end(sign_op *op) {
  EVP_MD_CTX_free(op->md);
  free(op->buf);
  memset(op, 0, sizeof(*op));
}

static void digest_end(digest_op *dg) {
  EVP_MD_CTX_free(dg->md);
  memset(dg, 0, sizeof(*dg));
}

static void session_free(session *s) {
  op_end(&s->op);
  digest_end(&s->dg);
  free(s->found);
  free(s);
}

static void free_state_inlock(void) {
  for (size_t i = 0; i < g.nsessions; i++) session_free(g.sessions[i]);
  free(g.sessions);
  g.sessions = NULL;
  g.nsessions = g.cap = 0;
  sbp11_tokens_free(g.tokens, g.ntokens);
  g.tokens = NULL;
  g.ntokens = 0;
  free(g.logged_in);
  g.logged_in = NULL;
  g.listed = 0;
}

static size_t slot_count(void) { return g.ntokens ? g.ntokens : (g.list_rv != CKR_OK ? 1 : 0); }

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
  sbp11_tokens_free(g.tokens, g.ntokens);
  free(g.logged_in);
  g.tokens = tokens;
  g.ntokens = n;
  g.logged_in = logged;
  g.listed = 1;
  g.list_rv = rv;
  snprintf(g.list_error, sizeof(g.list_error), "%s", rv == CKR_OK ? "" : why);
  if (rv == CKR_OK) SBP11_DEBUG("LIST: %zu tokens", n);
  return rv;
}

static void ensure_listed(void) {
  if (!g.listed) list_inlock();
}

static CK_RV slot_token(CK_SLOT_ID id, sbp11_token **t) {
  ensure_listed();
  if (id >= slot_count()) return CKR_SLOT_ID_INVALID;
  if (id >= g.ntokens) return CKR_TOKEN_NOT_PRESENT;
  *t = &g.tokens[id];
  return CKR_OK;
}

static session *find_session(CK_SESSION_HANDLE h) {
  for (size_t i = 0; i < g.nsessions; i++)
    if (g.sessions[i]->handle == h) return g.sessions[i];
  return NULL;
}

static CK_RV enter_session(CK_SESSION_HANDLE h, session **s) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  *s = find_session(h);
  if (!*s) {
    unlock();
    return CKR_SESSION_HANDLE_INVALID;
  }
  return CKR_OK;
}

static CK_OBJECT_HANDLE object_handle(CK_SLOT_ID slot, size_t idx) {
  return (CK_OBJECT_HANDLE)((slot + 1) << 16 | (idx + 1));
}

static sbp11_object *find_object(const session *s, CK_OBJECT_HANDLE h, sbp11_token **tok) {
  CK_ULONG slot = (h >> 16) - 1, idx = (h & 0xffff) - 1;
  if ((h >> 16) == 0 || (h & 0xffff) == 0 || slot != s->slot || slot >= g.ntokens) return NULL;
  sbp11_token *t = &g.tokens[slot];
  if (idx >= t->nobjects) return NULL;
  if (tok) *tok = t;
  return &t->objects[idx];
}

static void pad(CK_UTF8CHAR *dst, size_t n, const char *src) {
  memset(dst, ' ', n);
  size_t l = strlen(src);
  memcpy(dst, src, l < n ? l : n);
}

/* ---- general ---- */

CK_RV sbp11_initialize(CK_VOID_PTR pInitArgs) {
  CK_C_INITIALIZE_ARGS args = {0};
  if (pInitArgs) {
    memcpy(&args, pInitArgs, sizeof(args));
    if (args.pReserved) return CKR_ARGUMENTS_BAD;
    int given = !!args.CreateMutex + !!args.DestroyMutex + !!args.LockMutex + !!args.UnlockMutex;
    if (given != 0 && given != 4) return CKR_ARGUMENTS_BAD;
  }
  pthread_once(&atfork_once, register_atfork);
  /* g_mu alone excludes every other entry (lock() takes it first); the application's mutex is not needed here. */
  pthread_mutex_lock(&g_mu);
  if (g.initialized && g.pid == getpid()) {
    pthread_mutex_unlock(&g_mu);
    return CKR_CRYPTOKI_ALREADY_INITIALIZED;
  }
  int inherited = g.initialized; /* a forked child: drop the parent's state */
  if (inherited) {
    free_state_inlock();
    sbp11_pool_drain();
  }
  /* Application mutexes are used when given without CKF_OS_LOCKING_OK (besides our own, which is harmless). */
  int use_app = args.CreateMutex && !(args.flags & CKF_OS_LOCKING_OK);
  void *app_mutex = NULL;
  if (use_app && args.CreateMutex(&app_mutex) != CKR_OK) {
    pthread_mutex_unlock(&g_mu);
    return CKR_CANT_LOCK;
  }
  sbp11_log_init();
  sbp11_client_configure();
  memset(&g, 0, sizeof(g));
  g.pid = getpid();
  g.next_handle = 1;
  g.use_app_mutex = use_app;
  g.app = args;
  g.app_mutex = app_mutex;
  g.initialized = 1;
  pthread_mutex_unlock(&g_mu);
  SBP11_DEBUG("C_Initialize (flags 0x%lx%s%s)", (unsigned long)args.flags, use_app ? ", application mutexes" : "",
              inherited ? ", after fork" : "");
  return CKR_OK;
}

CK_RV sbp11_finalize(CK_VOID_PTR pReserved) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  if (pReserved) {
    unlock();
    return CKR_ARGUMENTS_BAD;
  }
  free_state_inlock();
  g.initialized = 0;
  int use_app = g.use_app_mutex;
  CK_C_INITIALIZE_ARGS app = g.app;
  void *app_mutex = g.app_mutex;
  if (use_app) app.UnlockMutex(app_mutex);
  g.use_app_mutex = 0;
  g.app_mutex = NULL;
  pthread_mutex_unlock(&g_mu);
  if (use_app) app.DestroyMutex(app_mutex);
  sbp11_pool_drain();
  SBP11_DEBUG("C_Finalize");
  sbp11_log_close();
  return CKR_OK;
}

CK_RV sbp11_get_info(CK_INFO_PTR pInfo, CK_BYTE major, CK_BYTE minor) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  if (!pInfo) {
    unlock();
    return CKR_ARGUMENTS_BAD;
  }
  memset(pInfo, 0, sizeof(*pInfo));
  pInfo->cryptokiVersion.major = major;
  pInfo->cryptokiVersion.minor = minor;
  pad(pInfo->manufacturerID, sizeof(pInfo->manufacturerID), "signbridge");
  pad(pInfo->libraryDescription, sizeof(pInfo->libraryDescription), "signbridge PKCS#11 module");
  pInfo->libraryVersion.major = 0;
  pInfo->libraryVersion.minor = 1;
  unlock();
  return CKR_OK;
}

/* ---- slots and tokens ---- */

CK_RV sbp11_get_slot_list(CK_BBOOL tokenPresent, CK_SLOT_ID_PTR pSlotList, CK_ULONG_PTR pulCount) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  if (!pulCount) {
    rv = CKR_ARGUMENTS_BAD;
    goto out;
  }
  /* Refresh at the start of an enumeration when nothing refers to the current tokens. */
  if (!g.listed || (!pSlotList && g.nsessions == 0)) {
    CK_RV lr = list_inlock();
    if (lr == CKR_HOST_MEMORY) {
      rv = lr;
      goto out;
    }
  }
  size_t n = tokenPresent ? g.ntokens : slot_count();
  if (pSlotList) {
    if (*pulCount < n) {
      rv = CKR_BUFFER_TOO_SMALL;
    } else {
      for (size_t i = 0; i < n; i++) pSlotList[i] = i;
    }
  }
  *pulCount = n;
out:
  unlock();
  return rv;
}

CK_RV sbp11_get_slot_info(CK_SLOT_ID slotID, CK_SLOT_INFO_PTR pInfo) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t = NULL;
  rv = slot_token(slotID, &t);
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
      if (!strncmp(g.list_error, "cannot connect", 14)) snprintf(desc, sizeof(desc), "signbridge: daemon not running");
      else snprintf(desc, sizeof(desc), "signbridge: %s", g.list_error);
    }
    pad(pInfo->slotDescription, sizeof(pInfo->slotDescription), desc);
    pad(pInfo->manufacturerID, sizeof(pInfo->manufacturerID), "signbridge");
    pInfo->hardwareVersion.major = 1;
    pInfo->firmwareVersion.major = 1;
  }
  unlock();
  return rv;
}

CK_RV sbp11_get_token_info(CK_SLOT_ID slotID, CK_TOKEN_INFO_PTR pInfo) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = slot_token(slotID, &t);
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
    for (size_t i = 0; i < g.nsessions; i++) {
      if (g.sessions[i]->slot != slotID) continue;
      count++;
      if (g.sessions[i]->flags & CKF_RW_SESSION) rw++;
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
  unlock();
  return rv;
}

CK_RV sbp11_get_mechanism_list(CK_SLOT_ID slotID, CK_MECHANISM_TYPE_PTR pList, CK_ULONG_PTR pulCount) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = slot_token(slotID, &t);
  if (rv == CKR_OK && !pulCount) rv = CKR_ARGUMENTS_BAD;
  if (rv == CKR_OK) {
    CK_MECHANISM_TYPE all[32];
    size_t n = 0;
    for (int fam = SBP11_RSA; fam <= SBP11_MLDSA; fam++)
      if (!t->families || (t->families & (1 << fam))) n += sbp11_mech_list(fam, all + n, 32 - n);
    n += sbp11_digest_list(all + n, 32 - n);
    if (pList) {
      if (*pulCount < n) rv = CKR_BUFFER_TOO_SMALL;
      else memcpy(pList, all, n * sizeof(CK_MECHANISM_TYPE));
    }
    *pulCount = n;
  }
  unlock();
  return rv;
}

CK_RV sbp11_get_mechanism_info(CK_SLOT_ID slotID, CK_MECHANISM_TYPE type, CK_MECHANISM_INFO_PTR pInfo) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = slot_token(slotID, &t);
  if (rv == CKR_OK && !pInfo) rv = CKR_ARGUMENTS_BAD;
  if (rv == CKR_OK) rv = sbp11_digest_md(type) ? sbp11_digest_mech_info(type, pInfo) : sbp11_mech_info(type, pInfo);
  unlock();
  return rv;
}

/* ---- sessions ---- */

/* g.logged_in[slot]: who is logged in to the token. */
enum { LOGGED_OUT = 0, LOGGED_IN_USER = 1, LOGGED_IN_SO = 2 };

static int login_state(CK_USER_TYPE user) { return user == CKU_SO ? LOGGED_IN_SO : LOGGED_IN_USER; }

static int read_only_session_open(CK_SLOT_ID slot) {
  for (size_t i = 0; i < g.nsessions; i++)
    if (g.sessions[i]->slot == slot && !(g.sessions[i]->flags & CKF_RW_SESSION)) return 1;
  return 0;
}

CK_RV sbp11_open_session(CK_SLOT_ID slotID, CK_FLAGS flags, CK_SESSION_HANDLE_PTR phSession) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = slot_token(slotID, &t);
  if (rv != CKR_OK) goto out;
  if (!(flags & CKF_SERIAL_SESSION)) {
    rv = CKR_SESSION_PARALLEL_NOT_SUPPORTED;
    goto out;
  }
  if (!phSession) {
    rv = CKR_ARGUMENTS_BAD;
    goto out;
  }
  if (!(flags & CKF_RW_SESSION) && g.logged_in[slotID] == LOGGED_IN_SO) {
    rv = CKR_SESSION_READ_WRITE_SO_EXISTS;
    goto out;
  }
  if (g.nsessions == g.cap) {
    size_t cap = g.cap ? g.cap * 2 : 16;
    session **ns = realloc(g.sessions, cap * sizeof(*ns));
    if (!ns) {
      rv = CKR_HOST_MEMORY;
      goto out;
    }
    g.sessions = ns, g.cap = cap;
  }
  session *s = calloc(1, sizeof(*s));
  if (!s) {
    rv = CKR_HOST_MEMORY;
    goto out;
  }
  s->handle = g.next_handle++;
  s->slot = slotID;
  s->flags = flags & (CKF_SERIAL_SESSION | CKF_RW_SESSION);
  g.sessions[g.nsessions++] = s;
  *phSession = s->handle;
out:
  unlock();
  return rv;
}

static void remove_session_at(size_t i) {
  CK_SLOT_ID slot = g.sessions[i]->slot;
  session_free(g.sessions[i]);
  g.sessions[i] = g.sessions[--g.nsessions];
  for (size_t k = 0; k < g.nsessions; k++)
    if (g.sessions[k]->slot == slot) return;
  if (slot < g.ntokens) g.logged_in[slot] = 0; /* the last session of a token logs out */
}

CK_RV sbp11_close_session(CK_SESSION_HANDLE hSession) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  for (size_t i = 0; i < g.nsessions; i++) {
    if (g.sessions[i] == s) {
      remove_session_at(i);
      break;
    }
  }
  unlock();
  return CKR_OK;
}

CK_RV sbp11_close_all_sessions(CK_SLOT_ID slotID) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  sbp11_token *t;
  rv = slot_token(slotID, &t);
  if (rv == CKR_OK) {
    for (size_t i = g.nsessions; i-- > 0;)
      if (g.sessions[i]->slot == slotID) remove_session_at(i);
  }
  unlock();
  return rv;
}

CK_RV sbp11_get_session_info(CK_SESSION_HANDLE hSession, CK_SESSION_INFO_PTR pInfo) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!pInfo) {
    rv = CKR_ARGUMENTS_BAD;
  } else {
    int who = s->slot < g.ntokens ? g.logged_in[s->slot] : LOGGED_OUT;
    int rw = (s->flags & CKF_RW_SESSION) != 0;
    pInfo->slotID = s->slot;
    if (who == LOGGED_IN_SO) pInfo->state = CKS_RW_SO_FUNCTIONS; /* an SO login implies only r/w sessions */
    else pInfo->state = rw ? (who ? CKS_RW_USER_FUNCTIONS : CKS_RW_PUBLIC_SESSION)
                           : (who ? CKS_RO_USER_FUNCTIONS : CKS_RO_PUBLIC_SESSION);
    pInfo->flags = s->flags;
    pInfo->ulDeviceError = 0;
  }
  unlock();
  return rv;
}

CK_RV sbp11_login(CK_SESSION_HANDLE hSession, CK_USER_TYPE userType, CK_UTF8CHAR_PTR pPin, CK_ULONG ulPinLen) {
  (void)pPin, (void)ulPinLen;
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (userType == CKU_CONTEXT_SPECIFIC) {
    rv = CKR_OK; /* no key needs it (CKA_ALWAYS_AUTHENTICATE is false); accepted */
  } else if (userType != CKU_USER && userType != CKU_SO) {
    rv = CKR_USER_TYPE_INVALID;
  } else if (g.logged_in[s->slot]) {
    rv = g.logged_in[s->slot] == login_state(userType) ? CKR_USER_ALREADY_LOGGED_IN
                                                        : CKR_USER_ANOTHER_ALREADY_LOGGED_IN;
  } else if (userType == CKU_SO && read_only_session_open(s->slot)) {
    rv = CKR_SESSION_READ_ONLY_EXISTS; /* PKCS#11 2.40 section 5.6: the SO works in read/write sessions only */
  } else {
    /* The token needs no PIN: the daemon authenticates to the service. Any PIN is accepted and ignored, for the
     * SO too (there is nothing an SO could change: C_InitPIN and C_SetPIN are not supported). */
    g.logged_in[s->slot] = login_state(userType);
    SBP11_DEBUG("C_Login(%s) on slot %lu: no PIN needed, accepted", userType == CKU_SO ? "CKU_SO" : "CKU_USER",
                (unsigned long)s->slot);
  }
  unlock();
  return rv;
}

CK_RV sbp11_logout(CK_SESSION_HANDLE hSession) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!g.logged_in[s->slot]) rv = CKR_USER_NOT_LOGGED_IN;
  else g.logged_in[s->slot] = 0;
  unlock();
  return rv;
}

/* ---- objects ---- */

CK_RV sbp11_object_prohibited(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hObject) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  /* Every object is CKA_MODIFIABLE, CKA_COPYABLE and CKA_DESTROYABLE false. */
  rv = find_object(s, hObject, NULL) ? CKR_ACTION_PROHIBITED : CKR_OBJECT_HANDLE_INVALID;
  unlock();
  return rv;
}

CK_RV sbp11_get_object_size(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hObject, CK_ULONG_PTR pulSize) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sbp11_object *o = find_object(s, hObject, NULL);
  if (!o) rv = CKR_OBJECT_HANDLE_INVALID;
  else if (!pulSize) rv = CKR_ARGUMENTS_BAD;
  else *pulSize = sbp11_object_size(o);
  unlock();
  return rv;
}

CK_RV sbp11_get_attribute_value(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hObject, CK_ATTRIBUTE_PTR pTemplate,
                                CK_ULONG ulCount) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sbp11_object *o = find_object(s, hObject, NULL);
  if (!o) rv = CKR_OBJECT_HANDLE_INVALID;
  else if (!pTemplate && ulCount) rv = CKR_ARGUMENTS_BAD;
  else rv = sbp11_object_get_attributes(o, pTemplate, ulCount);
  unlock();
  return rv;
}

CK_RV sbp11_find_objects_init(CK_SESSION_HANDLE hSession, CK_ATTRIBUTE_PTR pTemplate, CK_ULONG ulCount) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!pTemplate && ulCount) {
    rv = CKR_ARGUMENTS_BAD;
  } else if (s->finding) {
    rv = CKR_OPERATION_ACTIVE;
  } else if (s->slot < g.ntokens) {
    sbp11_token *t = &g.tokens[s->slot];
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
  unlock();
  return rv;
}

CK_RV sbp11_find_objects(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE_PTR phObject, CK_ULONG ulMaxObjectCount,
                         CK_ULONG_PTR pulObjectCount) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
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
  unlock();
  return rv;
}

CK_RV sbp11_find_objects_final(CK_SESSION_HANDLE hSession) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!s->finding) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
  } else {
    free(s->found);
    s->found = NULL, s->nfound = s->pos = 0, s->finding = 0;
  }
  unlock();
  return rv;
}

/* ---- signing ---- */

static CK_RV op_start(session *s, const CK_MECHANISM *m, CK_OBJECT_HANDLE hKey) {
  sbp11_token *t;
  sbp11_object *o = find_object(s, hKey, &t);
  if (!o) return CKR_KEY_HANDLE_INVALID;
  if (o->cls == CKO_PUBLIC_KEY) return CKR_KEY_FUNCTION_NOT_PERMITTED;
  if (o->cls != CKO_PRIVATE_KEY) return CKR_KEY_HANDLE_INVALID;
  sign_op op = {0};
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
  op_end(&s->op);
  s->op = op;
  return CKR_OK;
}

static CK_RV op_append(sign_op *op, const uint8_t *p, size_t n) {
  if (op->plan.mech->hash != SBP11_HASH_NONE) {
    if (n && !EVP_DigestUpdate(op->md, p, n)) return CKR_GENERAL_ERROR;
    if (op->unsaveable) return CKR_OK;
    if (op->len + n > SBP11_STATE_REPLAY_MAX) { /* too much to keep: still signs, but cannot be saved */
      free(op->buf);
      op->buf = NULL, op->len = op->cap = 0, op->unsaveable = 1;
      return CKR_OK;
    }
  } else if (op->len + n > SBP11_RAW_INPUT_MAX) {
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
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!pMechanism) rv = CKR_ARGUMENTS_BAD;
  else if (s->op.active) rv = CKR_OPERATION_ACTIVE;
  else rv = op_start(s, pMechanism, hKey);
  if (rv != CKR_OK && rv != CKR_OPERATION_ACTIVE && rv != CKR_ARGUMENTS_BAD && rv != CKR_HOST_MEMORY) {
    sbp11_token *t;
    sbp11_object *o = find_object(s, hKey, &t);
    const sbp11_keyinfo *key = o && o->cls == CKO_PRIVATE_KEY ? &t->keys[o->key].info : NULL;
    sbp11_refusal_sign_init(rv, pMechanism, key, hKey);
  }
  unlock();
  return rv;
}

CK_RV sbp11_sign_update(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pPart, CK_ULONG ulPartLen) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!s->op.active) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
  } else if (s->op.busy) {
    rv = CKR_OPERATION_ACTIVE;
  } else {
    rv = (!pPart && ulPartLen) ? CKR_ARGUMENTS_BAD : op_append(&s->op, pPart, ulPartLen);
    if (rv == CKR_DATA_LEN_RANGE) {
      SBP11_WARN("signature refused (CKR 0x%lx): more than %d bytes of input for %s, which takes a digest",
                 (unsigned long)rv, SBP11_RAW_INPUT_MAX, s->op.plan.mech->name);
      sbp11_notice("signature refused: more than %d bytes of input for %s, which takes a digest",
                   SBP11_RAW_INPUT_MAX, s->op.plan.mech->name);
    }
    s->op.multipart = 1;
    if (rv != CKR_OK) op_end(&s->op); /* an error ends the operation */
  }
  unlock();
  return rv;
}

/* C_Sign (final = 0) and C_SignFinal (final = 1): OpenSC's shape. Work out the signature size; answer a NULL or
 * short buffer with it and no state change; otherwise compute the digest, and sign it without holding the lock. */
static CK_RV sign_common(CK_SESSION_HANDLE hSession, const uint8_t *data, size_t len, int final, CK_BYTE_PTR out,
                         CK_ULONG_PTR outlen) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sign_op *op = &s->op;
  int keep = 0;
  uint8_t digest[SBP11_MU_LEN]; /* the largest: SHA-512 and μ */
  size_t dlen = 0;
  sbp11_sign_request req = {0};
  uint8_t key_id[64];
  char tenant[256];
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
  sbp11_object *o = find_object(s, op->hkey, &t);
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
  req.sig_len = siglen;
  op->busy = 1;
  unlock();

  uint8_t sig[SBP11_SIG_MAX];
  SBP11_DEBUG("%s: %s with tenant %s's key", final ? "C_SignFinal" : "C_Sign", req.algorithm, tenant);
  rv = sbp11_client_sign(&req, sig);

  if (enter() != CKR_OK) return CKR_CRYPTOKI_NOT_INITIALIZED; /* finalised meanwhile */
  s = find_session(hSession);
  if (s && s->op.busy) op_end(&s->op);
  unlock();
  if (!s) return CKR_SESSION_CLOSED;
  if (rv == CKR_OK) {
    memcpy(out, sig, siglen);
    *outlen = siglen;
  }
  return rv;
out:
  if (!keep) op_end(op);
  unlock();
  return rv;
}

CK_RV sbp11_sign(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pData, CK_ULONG ulDataLen, CK_BYTE_PTR pSignature,
                 CK_ULONG_PTR pulSignatureLen) {
  return sign_common(hSession, pData, ulDataLen, 0, pSignature, pulSignatureLen);
}

CK_RV sbp11_sign_final(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pSignature, CK_ULONG_PTR pulSignatureLen) {
  return sign_common(hSession, NULL, 0, 1, pSignature, pulSignatureLen);
}

/* ---- digesting: CKM_SHA256/384/512 with libcrypto, no network ---- */

CK_RV sbp11_digest_init(CK_SESSION_HANDLE hSession, CK_MECHANISM_PTR pMechanism) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
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
    if (rv == CKR_OK) s->dg = (digest_op){.active = 1, .md = ctx};
    else EVP_MD_CTX_free(ctx);
  }
  unlock();
  return rv;
}

CK_RV sbp11_digest_update(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pPart, CK_ULONG ulPartLen) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!s->dg.active) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
  } else {
    if (!pPart && ulPartLen) rv = CKR_ARGUMENTS_BAD;
    else if (ulPartLen && !EVP_DigestUpdate(s->dg.md, pPart, ulPartLen)) rv = CKR_GENERAL_ERROR;
    s->dg.multipart = 1;
    if (rv != CKR_OK) digest_end(&s->dg); /* an error ends the operation */
  }
  unlock();
  return rv;
}

CK_RV sbp11_digest_key(CK_SESSION_HANDLE hSession, CK_OBJECT_HANDLE hKey) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if (!s->dg.active) {
    rv = CKR_OPERATION_NOT_INITIALIZED;
  } else {
    /* Only secret keys can be digested, and a token here holds none. */
    rv = find_object(s, hKey, NULL) ? CKR_KEY_INDIGESTIBLE : CKR_KEY_HANDLE_INVALID;
    digest_end(&s->dg);
  }
  unlock();
  return rv;
}

/* C_Digest (final = 0) and C_DigestFinal (final = 1), in C_Sign's shape: a NULL or short buffer gets the size and
 * keeps the operation; anything else ends it. */
static CK_RV digest_common(CK_SESSION_HANDLE hSession, const uint8_t *data, size_t len, int final, CK_BYTE_PTR out,
                           CK_ULONG_PTR outlen) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  digest_op *dg = &s->dg;
  if (!dg->active) {
    unlock();
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
  digest_end(dg);
keep:
  unlock();
  return rv;
}

CK_RV sbp11_digest(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pData, CK_ULONG ulDataLen, CK_BYTE_PTR pDigest,
                   CK_ULONG_PTR pulDigestLen) {
  return digest_common(hSession, pData, ulDataLen, 0, pDigest, pulDigestLen);
}

CK_RV sbp11_digest_final(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pDigest, CK_ULONG_PTR pulDigestLen) {
  return digest_common(hSession, NULL, 0, 1, pDigest, pulDigestLen);
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
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sign_op *op = &s->op;
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
  unlock();
  return rv;
}

CK_RV sbp11_set_operation_state(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pState, CK_ULONG ulLen,
                                CK_OBJECT_HANDLE hEncryptionKey, CK_OBJECT_HANDLE hAuthenticationKey) {
  (void)hAuthenticationKey; /* the state names its key */
  session *s;
  CK_RV rv = enter_session(hSession, &s);
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
  op_end(&s->op);
  rv = op_start(s, &m, hkey);
  if (rv == CKR_OK) rv = op_append(&s->op, p, dlen);
  if (rv != CKR_OK) {
    op_end(&s->op);
    rv = CKR_SAVED_STATE_INVALID;
    goto out;
  }
  s->op.multipart = multipart;
out:
  unlock();
  return rv;
}

/* ---- the rest ---- */

CK_RV sbp11_generate_random(CK_SESSION_HANDLE hSession, CK_BYTE_PTR pRandomData, CK_ULONG ulRandomLen) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  unlock();
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

CK_RV sbp11_session_cancel(CK_SESSION_HANDLE hSession, CK_FLAGS flags) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  if ((flags & CKF_SIGN) && s->op.active && !s->op.busy) op_end(&s->op);
  if (flags & CKF_DIGEST) digest_end(&s->dg);
  if ((flags & CKF_FIND_OBJECTS) && s->finding) {
    free(s->found);
    s->found = NULL, s->nfound = s->pos = 0, s->finding = 0;
  }
  unlock();
  return CKR_OK;
}

CK_RV sbp11_unsupported(CK_RV code) {
  CK_RV rv = enter();
  if (rv != CKR_OK) return rv;
  unlock();
  return code;
}

CK_RV sbp11_unsupported_session(CK_SESSION_HANDLE hSession, CK_RV code) {
  session *s;
  CK_RV rv = enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  unlock();
  return code;
}
