/* sbp11_bench: signatures per second and latency through any PKCS#11 module, from T threads, so that SoftHSM
 * direct, p11-kit's forwarder and libsignbridge-pkcs11.so are measured by the same client.
 *
 *   sbp11_bench MODULE TOKEN_LABEL PIN rsa|ec SECONDS THREADS
 *
 * Signs a fixed 32-byte digest: CKM_RSA_PKCS over a SHA-256 DigestInfo for RSA keys, CKM_ECDSA for EC keys, with
 * the first private key of that type on the token. Prints one JSON line.
 *
 * Every thread signs for a warm-up period first (SBP11_BENCH_WARMUP seconds, default 1), uncounted: the first
 * signatures through a daemon or service pay for JIT compilation, connection set-up and caches filling, which a
 * steady client does not see. Only signatures started inside the timed window that follows are counted. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sbp11_pkcs11.h"

static CK_FUNCTION_LIST_PTR f;
static CK_SLOT_ID slot;
static CK_OBJECT_HANDLE key;
static int is_rsa;
static double seconds;
static double start_at, end_at; /* the timed window, after the warm-up */

struct result {
  long count;
  double *lat;
  long cap;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, CK_RV rv) {
  fprintf(stderr, "sbp11_bench: %s failed: 0x%lx\n", what, (unsigned long)rv);
  exit(1);
}

static void *worker(void *arg) {
  struct result *r = arg;
  CK_SESSION_HANDLE s;
  CK_RV rv = f->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &s);
  if (rv != CKR_OK) die("C_OpenSession", rv);
  static const unsigned char prefix[] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                         0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};
  unsigned char in[sizeof(prefix) + 32], sig[1024];
  memcpy(in, prefix, sizeof(prefix));
  memset(in + sizeof(prefix), 7, 32);
  CK_MECHANISM m = {is_rsa ? CKM_RSA_PKCS : CKM_ECDSA, NULL, 0};
  unsigned char *data = is_rsa ? in : in + sizeof(prefix);
  CK_ULONG len = is_rsa ? sizeof(in) : 32;
  while (now_s() < end_at) {
    double t0 = now_s();
    CK_ULONG siglen = sizeof(sig);
    if ((rv = f->C_SignInit(s, &m, key)) != CKR_OK) die("C_SignInit", rv);
    if ((rv = f->C_Sign(s, data, len, sig, &siglen)) != CKR_OK) die("C_Sign", rv);
    if (t0 < start_at) continue; /* warm-up */
    if (r->count == r->cap) {
      r->cap = r->cap ? r->cap * 2 : 4096;
      r->lat = realloc(r->lat, (size_t)r->cap * sizeof(double));
      if (!r->lat) die("realloc", 0);
    }
    r->lat[r->count++] = (now_s() - t0) * 1000.0;
  }
  f->C_CloseSession(s);
  return NULL;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: sbp11_bench MODULE TOKEN_LABEL PIN rsa|ec SECONDS THREADS\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "sbp11_bench: %s\n", dlerror());
    return 1;
  }
  CK_C_GetFunctionList gfl = (CK_C_GetFunctionList)dlsym(h, "C_GetFunctionList");
  if (!gfl || gfl(&f) != CKR_OK) die("C_GetFunctionList", 0);
  CK_C_INITIALIZE_ARGS init = {0};
  init.flags = CKF_OS_LOCKING_OK;
  CK_RV rv = f->C_Initialize(&init);
  if (rv != CKR_OK) die("C_Initialize", rv);
  is_rsa = strcmp(argv[4], "rsa") == 0;
  seconds = atof(argv[5]);
  int threads = atoi(argv[6]);
  if (threads < 1 || threads > 64 || seconds <= 0) return 2;

  CK_SLOT_ID slots[64];
  CK_ULONG n = 64;
  if ((rv = f->C_GetSlotList(CK_TRUE, slots, &n)) != CKR_OK) die("C_GetSlotList", rv);
  int found = 0;
  for (CK_ULONG i = 0; i < n && !found; i++) {
    CK_TOKEN_INFO ti;
    if (f->C_GetTokenInfo(slots[i], &ti) != CKR_OK) continue;
    char label[33];
    memcpy(label, ti.label, 32);
    label[32] = 0;
    for (int j = 31; j >= 0 && label[j] == ' '; j--) label[j] = 0;
    if (strcmp(label, argv[2]) == 0) {
      slot = slots[i];
      found = 1;
    }
  }
  if (!found) {
    fprintf(stderr, "sbp11_bench: no token labelled %s\n", argv[2]);
    return 1;
  }
  CK_SESSION_HANDLE s;
  if ((rv = f->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &s)) != CKR_OK) die("C_OpenSession", rv);
  rv = f->C_Login(s, CKU_USER, (CK_UTF8CHAR_PTR)argv[3], strlen(argv[3]));
  if (rv != CKR_OK && rv != CKR_USER_ALREADY_LOGGED_IN) die("C_Login", rv);
  CK_OBJECT_CLASS cls = CKO_PRIVATE_KEY;
  CK_KEY_TYPE kt = is_rsa ? CKK_RSA : CKK_EC;
  CK_ATTRIBUTE t[] = {{CKA_CLASS, &cls, sizeof(cls)}, {CKA_KEY_TYPE, &kt, sizeof(kt)}};
  CK_ULONG got = 0;
  if ((rv = f->C_FindObjectsInit(s, t, 2)) != CKR_OK) die("C_FindObjectsInit", rv);
  f->C_FindObjects(s, &key, 1, &got);
  f->C_FindObjectsFinal(s);
  if (got != 1) {
    fprintf(stderr, "sbp11_bench: no %s private key on %s\n", argv[4], argv[2]);
    return 1;
  }

  pthread_t tids[64];
  struct result res[64];
  memset(res, 0, sizeof(res));
  const char *warmup_env = getenv("SBP11_BENCH_WARMUP");
  double warmup = warmup_env ? atof(warmup_env) : 1.0;
  if (warmup < 0) warmup = 0;
  start_at = now_s() + warmup;
  end_at = start_at + seconds;
  for (int i = 0; i < threads; i++) pthread_create(&tids[i], NULL, worker, &res[i]);
  for (int i = 0; i < threads; i++) pthread_join(tids[i], NULL);
  double elapsed = seconds;

  long total = 0;
  for (int i = 0; i < threads; i++) total += res[i].count;
  double *all = malloc((size_t)(total ? total : 1) * sizeof(double));
  long k = 0;
  for (int i = 0; i < threads; i++) {
    memcpy(all + k, res[i].lat, (size_t)res[i].count * sizeof(double));
    k += res[i].count;
    free(res[i].lat);
  }
  qsort(all, (size_t)total, sizeof(double), cmp);
  double p50 = total ? all[total / 2] : 0, p99 = total ? all[(long)(total * 0.99)] : 0;
  printf("{\"perSecond\":%.1f,\"p50Ms\":%.3f,\"p99Ms\":%.3f,\"count\":%ld,\"threads\":%d}\n", total / elapsed, p50, p99,
         total, threads);
  free(all);
  f->C_CloseSession(s);
  f->C_Finalize(NULL);
  return 0;
}
