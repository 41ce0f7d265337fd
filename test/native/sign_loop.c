/* sbp11_sign_loop: threads that sign without pause through a PKCS#11 module and verify every signature, until a
 * stop file appears. For the test that restarts the daemon underneath (test/daemon/restart.test.ts).
 *
 *   sbp11_sign_loop MODULE TOKEN_LABEL THREADS STOP_FILE
 *
 * Signs distinct SHA-256 digests with CKM_RSA_PKCS (DigestInfo) on the token's RSA key, verifies each with the
 * key's CKA_PUBLIC_KEY_INFO and libcrypto. Prints "signed N failed F bad B" to stdout every 50 ms and once at the
 * end; each failure's CKR code goes to stderr. Exit 0 when nothing failed and every signature verified. */
#include <dlfcn.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbp11_pkcs11.h"

static CK_FUNCTION_LIST_PTR f;
static CK_SLOT_ID slot;
static const char *stop_file;
static int signed_ok, failed, bad; /* atomics */

static int stopped(void) { return access(stop_file, F_OK) == 0; }

static CK_OBJECT_HANDLE find_key(CK_SESSION_HANDLE h, CK_OBJECT_CLASS cls) {
  CK_ATTRIBUTE t[] = {{CKA_CLASS, &cls, sizeof(cls)}};
  CK_OBJECT_HANDLE o = CK_INVALID_HANDLE;
  CK_ULONG n = 0;
  if (f->C_FindObjectsInit(h, t, 1) != CKR_OK) return o;
  f->C_FindObjects(h, &o, 1, &n);
  f->C_FindObjectsFinal(h);
  return n ? o : CK_INVALID_HANDLE;
}

static EVP_PKEY *public_key(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE pub) {
  uint8_t der[2048];
  CK_ATTRIBUTE a = {CKA_PUBLIC_KEY_INFO, der, sizeof(der)};
  if (f->C_GetAttributeValue(h, pub, &a, 1) != CKR_OK) return NULL;
  const uint8_t *p = der;
  return d2i_PUBKEY(NULL, &p, (long)a.ulValueLen);
}

static int verify(EVP_PKEY *k, const uint8_t *digest, const uint8_t *sig, size_t siglen) {
  EVP_PKEY_CTX *c = EVP_PKEY_CTX_new(k, NULL);
  int ok = c && EVP_PKEY_verify_init(c) == 1 && EVP_PKEY_CTX_set_rsa_padding(c, RSA_PKCS1_PADDING) == 1 &&
           EVP_PKEY_CTX_set_signature_md(c, EVP_sha256()) == 1 && EVP_PKEY_verify(c, sig, siglen, digest, 32) == 1;
  EVP_PKEY_CTX_free(c);
  return ok;
}

static void *signer(void *arg) {
  long id = (long)arg;
  CK_SESSION_HANDLE h;
  if (f->C_OpenSession(slot, CKF_SERIAL_SESSION, NULL, NULL, &h) != CKR_OK) {
    __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  CK_OBJECT_HANDLE priv = find_key(h, CKO_PRIVATE_KEY);
  EVP_PKEY *pub = public_key(h, find_key(h, CKO_PUBLIC_KEY));
  if (!priv || !pub) {
    fprintf(stderr, "thread %ld: no RSA key pair on the token\n", id);
    __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
    return NULL;
  }
  static const uint8_t prefix[19] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                     0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};
  for (long i = 0; !stopped(); i++) {
    uint8_t di[51], sig[512];
    char msg[64];
    int n = snprintf(msg, sizeof(msg), "thread %ld signature %ld", id, i);
    memcpy(di, prefix, sizeof(prefix));
    EVP_Digest(msg, (size_t)n, di + 19, NULL, EVP_sha256(), NULL);
    CK_MECHANISM m = {CKM_RSA_PKCS, NULL, 0};
    CK_ULONG siglen = sizeof(sig);
    CK_RV rv = f->C_SignInit(h, &m, priv);
    if (rv == CKR_OK) rv = f->C_Sign(h, di, sizeof(di), sig, &siglen);
    if (rv != CKR_OK) {
      fprintf(stderr, "thread %ld signature %ld: CKR 0x%lx\n", id, i, (unsigned long)rv);
      __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
    } else if (!verify(pub, di + 19, sig, siglen)) {
      fprintf(stderr, "thread %ld signature %ld does not verify\n", id, i);
      __atomic_add_fetch(&bad, 1, __ATOMIC_RELAXED);
    } else {
      __atomic_add_fetch(&signed_ok, 1, __ATOMIC_RELAXED);
    }
  }
  EVP_PKEY_free(pub);
  f->C_CloseSession(h);
  return NULL;
}

static void report(void) {
  printf("signed %d failed %d bad %d\n", __atomic_load_n(&signed_ok, __ATOMIC_RELAXED),
         __atomic_load_n(&failed, __ATOMIC_RELAXED), __atomic_load_n(&bad, __ATOMIC_RELAXED));
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s MODULE TOKEN_LABEL THREADS STOP_FILE\n", argv[0]);
    return 2;
  }
  stop_file = argv[4];
  int nthreads = atoi(argv[3]);
  void *lib = dlopen(argv[1], RTLD_NOW);
  CK_C_GetFunctionList gfl = lib ? (CK_C_GetFunctionList)dlsym(lib, "C_GetFunctionList") : NULL;
  if (!gfl || gfl(&f) != CKR_OK) {
    fprintf(stderr, "cannot load %s\n", argv[1]);
    return 2;
  }
  CK_C_INITIALIZE_ARGS init = {NULL, NULL, NULL, NULL, CKF_OS_LOCKING_OK, NULL};
  if (f->C_Initialize(&init) != CKR_OK) return 2;
  CK_SLOT_ID slots[16];
  CK_ULONG n = 16;
  int found = 0;
  if (f->C_GetSlotList(CK_TRUE, slots, &n) == CKR_OK) {
    char label[33];
    snprintf(label, sizeof(label), "%-32s", argv[2]);
    for (CK_ULONG i = 0; i < n && !found; i++) {
      CK_TOKEN_INFO ti;
      if (f->C_GetTokenInfo(slots[i], &ti) == CKR_OK && !memcmp(ti.label, label, 32)) slot = slots[i], found = 1;
    }
  }
  if (!found) {
    fprintf(stderr, "no token labelled %s\n", argv[2]);
    return 2;
  }
  pthread_t th[64];
  if (nthreads < 1 || nthreads > 64) nthreads = 8;
  for (long i = 0; i < nthreads; i++) pthread_create(&th[i], NULL, signer, (void *)i);
  while (!stopped()) {
    report();
    usleep(50 * 1000);
  }
  for (int i = 0; i < nthreads; i++) pthread_join(th[i], NULL);
  report();
  f->C_Finalize(NULL);
  return failed || bad ? 1 : 0;
}
