/* A fault-injecting PKCS#11 module for tests: it loads the real module named by SBFAULT_MODULE, forwards every call
 * through the real function list, and fails the calls a control file (path in SBFAULT_CONTROL) asks it to fail.
 * The file is read again whenever it changes (one stat per wrapped call), so a test flips faults while the service
 * runs. One line:
 *
 *   <count> <ckr> <functions> [close]
 *
 *   count      calls to fail (matching calls only); -1 fails every matching call until the file changes
 *   ckr        the CK_RV to answer, hex (0x32) or decimal
 *   functions  comma-separated names (C_SignInit,C_Sign) or * for every wrapped function but the lifecycle ones
 *   close      before the first failed call, close every real session (C_CloseAllSessions on each slot of the real
 *              module): the token really logs out and every session and object handle really becomes invalid,
 *              as when an HSM is unplugged or restarts
 *
 * An empty or missing file injects nothing. Write a new file and rename it over the old one so a change is seen.
 * Modelled on the fault injection of kmsp11's fake backend. Links only libc and libdl. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <p11-kit/pkcs11.h>

#define SBFAULT_EXPORT __attribute__((visibility("default")))

static pthread_mutex_t sbfault_lock = PTHREAD_MUTEX_INITIALIZER;
static CK_FUNCTION_LIST_PTR sbfault_real;
static CK_FUNCTION_LIST sbfault_list;

/* The fault in force, as last read from the control file. */
static struct {
  struct stat seen;
  int have_seen;
  long remaining;
  CK_RV rv;
  char functions[512];
  int close_sessions;
} sbfault_state;

static int sbfault_same_file(const struct stat *a, const struct stat *b) {
  return a->st_ino == b->st_ino && a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
         a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

/* Re-reads the control file when it changed; the lock is held. */
static void sbfault_reload_inlock(void) {
  const char *path = getenv("SBFAULT_CONTROL");
  struct stat st;
  if (path == NULL || stat(path, &st) != 0) {
    if (sbfault_state.have_seen) memset(&sbfault_state, 0, sizeof sbfault_state);
    return;
  }
  if (sbfault_state.have_seen && sbfault_same_file(&st, &sbfault_state.seen)) return;
  memset(&sbfault_state, 0, sizeof sbfault_state);
  sbfault_state.seen = st;
  sbfault_state.have_seen = 1;
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  char line[640] = {0};
  char rv[32] = {0};
  char close_word[16] = {0};
  long count = 0;
  if (fgets(line, sizeof line, f) != NULL &&
      sscanf(line, "%ld %31s %511s %15s", &count, rv, sbfault_state.functions, close_word) >= 3) {
    sbfault_state.remaining = count;
    sbfault_state.rv = (CK_RV)strtoul(rv, NULL, 0);
    sbfault_state.close_sessions = strcmp(close_word, "close") == 0;
  }
  fclose(f);
}

static int sbfault_names(const char *list, const char *name) {
  if (strcmp(list, "*") == 0) return 1;
  size_t len = strlen(name);
  for (const char *p = list; (p = strstr(p, name)) != NULL; p += len) {
    int starts = p == list || p[-1] == ',';
    int ends = p[len] == '\0' || p[len] == ',';
    if (starts && ends) return 1;
  }
  return 0;
}

/* Closes every real session of every slot: the token logs out and forgets its handles. The lock is held. */
static void sbfault_close_all_inlock(void) {
  CK_SLOT_ID slots[64];
  CK_ULONG count = 64;
  if (sbfault_real->C_GetSlotList(CK_FALSE, slots, &count) != CKR_OK) return;
  for (CK_ULONG i = 0; i < count; i++) sbfault_real->C_CloseAllSessions(slots[i]);
}

/* CKR_OK to go on to the real module, or the CK_RV to answer instead. */
static CK_RV sbfault_inject(const char *name) {
  pthread_mutex_lock(&sbfault_lock);
  sbfault_reload_inlock();
  CK_RV rv = CKR_OK;
  if (sbfault_state.remaining != 0 && sbfault_names(sbfault_state.functions, name)) {
    if (sbfault_state.close_sessions) {
      sbfault_close_all_inlock();
      sbfault_state.close_sessions = 0;
    }
    if (sbfault_state.remaining > 0) sbfault_state.remaining--;
    rv = sbfault_state.rv;
  }
  pthread_mutex_unlock(&sbfault_lock);
  return rv;
}

/* One wrapper per function the key store uses; every other entry of the list is the real module's own. */
#define SBFAULT_WRAP(name, params, args)                     \
  static CK_RV sbfault_##name params {                       \
    CK_RV rv = sbfault_inject(#name);                        \
    return rv != CKR_OK ? rv : sbfault_real->name args;      \
  }

SBFAULT_WRAP(C_GetSlotList, (CK_BBOOL present, CK_SLOT_ID_PTR list, CK_ULONG_PTR count), (present, list, count))
SBFAULT_WRAP(C_GetSlotInfo, (CK_SLOT_ID slot, CK_SLOT_INFO_PTR info), (slot, info))
SBFAULT_WRAP(C_GetTokenInfo, (CK_SLOT_ID slot, CK_TOKEN_INFO_PTR info), (slot, info))
SBFAULT_WRAP(C_OpenSession,
             (CK_SLOT_ID slot, CK_FLAGS flags, CK_VOID_PTR app, CK_NOTIFY notify, CK_SESSION_HANDLE_PTR session),
             (slot, flags, app, notify, session))
SBFAULT_WRAP(C_CloseSession, (CK_SESSION_HANDLE session), (session))
SBFAULT_WRAP(C_GetSessionInfo, (CK_SESSION_HANDLE session, CK_SESSION_INFO_PTR info), (session, info))
SBFAULT_WRAP(C_Login, (CK_SESSION_HANDLE session, CK_USER_TYPE user, CK_UTF8CHAR_PTR pin, CK_ULONG len),
             (session, user, pin, len))
SBFAULT_WRAP(C_Logout, (CK_SESSION_HANDLE session), (session))
SBFAULT_WRAP(C_GetAttributeValue,
             (CK_SESSION_HANDLE session, CK_OBJECT_HANDLE object, CK_ATTRIBUTE_PTR attrs, CK_ULONG count),
             (session, object, attrs, count))
SBFAULT_WRAP(C_FindObjectsInit, (CK_SESSION_HANDLE session, CK_ATTRIBUTE_PTR attrs, CK_ULONG count),
             (session, attrs, count))
SBFAULT_WRAP(C_FindObjects,
             (CK_SESSION_HANDLE session, CK_OBJECT_HANDLE_PTR objects, CK_ULONG max, CK_ULONG_PTR count),
             (session, objects, max, count))
SBFAULT_WRAP(C_FindObjectsFinal, (CK_SESSION_HANDLE session), (session))
SBFAULT_WRAP(C_DestroyObject, (CK_SESSION_HANDLE session, CK_OBJECT_HANDLE object), (session, object))
SBFAULT_WRAP(C_SignInit, (CK_SESSION_HANDLE session, CK_MECHANISM_PTR mechanism, CK_OBJECT_HANDLE key),
             (session, mechanism, key))
SBFAULT_WRAP(C_Sign,
             (CK_SESSION_HANDLE session, CK_BYTE_PTR data, CK_ULONG len, CK_BYTE_PTR sig, CK_ULONG_PTR sig_len),
             (session, data, len, sig, sig_len))
SBFAULT_WRAP(C_GenerateKeyPair,
             (CK_SESSION_HANDLE session, CK_MECHANISM_PTR mechanism, CK_ATTRIBUTE_PTR pub, CK_ULONG pub_count,
              CK_ATTRIBUTE_PTR priv, CK_ULONG priv_count, CK_OBJECT_HANDLE_PTR pub_key,
              CK_OBJECT_HANDLE_PTR priv_key),
             (session, mechanism, pub, pub_count, priv, priv_count, pub_key, priv_key))

static CK_RV sbfault_load(void) {
  if (sbfault_real != NULL) return CKR_OK;
  const char *path = getenv("SBFAULT_MODULE");
  if (path == NULL || *path == '\0') {
    fprintf(stderr, "sbfault: SBFAULT_MODULE is not set (the real PKCS#11 module to wrap)\n");
    return CKR_GENERAL_ERROR;
  }
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "sbfault: cannot load %s: %s\n", path, dlerror());
    return CKR_GENERAL_ERROR;
  }
  CK_C_GetFunctionList get = (CK_C_GetFunctionList)dlsym(lib, "C_GetFunctionList");
  CK_FUNCTION_LIST_PTR real = NULL;
  if (get == NULL || get(&real) != CKR_OK || real == NULL) {
    fprintf(stderr, "sbfault: %s has no usable C_GetFunctionList\n", path);
    return CKR_GENERAL_ERROR;
  }
  sbfault_list = *real;
#define SBFAULT_USE(name) sbfault_list.name = sbfault_##name
  SBFAULT_USE(C_GetSlotList);
  SBFAULT_USE(C_GetSlotInfo);
  SBFAULT_USE(C_GetTokenInfo);
  SBFAULT_USE(C_OpenSession);
  SBFAULT_USE(C_CloseSession);
  SBFAULT_USE(C_GetSessionInfo);
  SBFAULT_USE(C_Login);
  SBFAULT_USE(C_Logout);
  SBFAULT_USE(C_GetAttributeValue);
  SBFAULT_USE(C_FindObjectsInit);
  SBFAULT_USE(C_FindObjects);
  SBFAULT_USE(C_FindObjectsFinal);
  SBFAULT_USE(C_DestroyObject);
  SBFAULT_USE(C_SignInit);
  SBFAULT_USE(C_Sign);
  SBFAULT_USE(C_GenerateKeyPair);
#undef SBFAULT_USE
  sbfault_real = real;
  return CKR_OK;
}

SBFAULT_EXPORT CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR list);

SBFAULT_EXPORT CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR list) {
  if (list == NULL) return CKR_ARGUMENTS_BAD;
  pthread_mutex_lock(&sbfault_lock);
  CK_RV rv = sbfault_load();
  pthread_mutex_unlock(&sbfault_lock);
  if (rv != CKR_OK) return rv;
  *list = &sbfault_list;
  return CKR_OK;
}
