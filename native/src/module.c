/* Library state: the global state and its lock, fork handling, C_Initialize and C_Finalize. One global lock guards
 * the state; it is never held across a signature's network exchange (only across a LIST). The PKCS#11 functions
 * are in module_*.c by function group (module_state.h lists them). */
#include "module.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "log.h"
#include "module_state.h"
#include "transport.h"

sbp11_module_state sbp11_g;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void lock(void) {
  pthread_mutex_lock(&g_mu);
  if (sbp11_g.use_app_mutex) sbp11_g.app.LockMutex(sbp11_g.app_mutex);
}

void sbp11_unlock(void) {
  if (sbp11_g.use_app_mutex) sbp11_g.app.UnlockMutex(sbp11_g.app_mutex);
  pthread_mutex_unlock(&g_mu);
}

CK_RV sbp11_enter(void) {
  lock();
  if (!sbp11_g.initialized || sbp11_g.pid != getpid()) {
    sbp11_unlock();
    return CKR_CRYPTOKI_NOT_INITIALIZED;
  }
  return CKR_OK;
}

sbp11_session *sbp11_find_session_inlock(CK_SESSION_HANDLE h) {
  for (size_t i = 0; i < sbp11_g.nsessions; i++)
    if (sbp11_g.sessions[i]->handle == h) return sbp11_g.sessions[i];
  return NULL;
}

CK_RV sbp11_enter_session(CK_SESSION_HANDLE h, sbp11_session **s) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  *s = sbp11_find_session_inlock(h);
  if (!*s) {
    sbp11_unlock();
    return CKR_SESSION_HANDLE_INVALID;
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
  sbp11_unlock();
}
static void atfork_child(void) {
  /* The state was consistent at fork (we held the lock). Everything of the parent's stays as it is: the pid check
   * in sbp11_enter() makes the child see an uninitialised library, and its C_Initialize frees it and starts over. */
  sbp11_transport_atfork_child();
  sbp11_unlock();
}
static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

static void free_state_inlock(void) {
  for (size_t i = 0; i < sbp11_g.nsessions; i++) sbp11_session_free(sbp11_g.sessions[i]);
  free(sbp11_g.sessions);
  sbp11_g.sessions = NULL;
  sbp11_g.nsessions = sbp11_g.cap = 0;
  sbp11_tokens_free(sbp11_g.tokens, sbp11_g.ntokens);
  sbp11_g.tokens = NULL;
  sbp11_g.ntokens = 0;
  free(sbp11_g.logged_in);
  sbp11_g.logged_in = NULL;
  sbp11_g.listed = 0;
}

/* ---- C_Initialize, C_Finalize ---- */

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
  if (sbp11_g.initialized && sbp11_g.pid == getpid()) {
    pthread_mutex_unlock(&g_mu);
    return CKR_CRYPTOKI_ALREADY_INITIALIZED;
  }
  int inherited = sbp11_g.initialized; /* a forked child: drop the parent's state */
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
  memset(&sbp11_g, 0, sizeof(sbp11_g));
  sbp11_g.pid = getpid();
  sbp11_g.next_handle = 1;
  sbp11_g.use_app_mutex = use_app;
  sbp11_g.app = args;
  sbp11_g.app_mutex = app_mutex;
  sbp11_g.initialized = 1;
  pthread_mutex_unlock(&g_mu);
  SBP11_DEBUG("C_Initialize (flags 0x%lx%s%s)", (unsigned long)args.flags, use_app ? ", application mutexes" : "",
              inherited ? ", after fork" : "");
  return CKR_OK;
}

CK_RV sbp11_finalize(CK_VOID_PTR pReserved) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  if (pReserved) {
    sbp11_unlock();
    return CKR_ARGUMENTS_BAD;
  }
  free_state_inlock();
  sbp11_g.initialized = 0;
  int use_app = sbp11_g.use_app_mutex;
  CK_C_INITIALIZE_ARGS app = sbp11_g.app;
  void *app_mutex = sbp11_g.app_mutex;
  if (use_app) app.UnlockMutex(app_mutex);
  sbp11_g.use_app_mutex = 0;
  sbp11_g.app_mutex = NULL;
  pthread_mutex_unlock(&g_mu);
  if (use_app) app.DestroyMutex(app_mutex);
  sbp11_pool_drain();
  SBP11_DEBUG("C_Finalize");
  sbp11_log_close();
  return CKR_OK;
}

/* ---- functions the module does not offer ---- */

CK_RV sbp11_unsupported(CK_RV code) {
  CK_RV rv = sbp11_enter();
  if (rv != CKR_OK) return rv;
  sbp11_unlock();
  return code;
}

CK_RV sbp11_unsupported_session(CK_SESSION_HANDLE hSession, CK_RV code) {
  sbp11_session *s;
  CK_RV rv = sbp11_enter_session(hSession, &s);
  if (rv != CKR_OK) return rv;
  sbp11_unlock();
  return code;
}
