/* Tests of libsignbridge-pkcs11.so through its exported interface, against the fake daemon. Each test is one
 * CTest test: `test_module <module.so> <test-name>`. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_daemon.h"
#include "sbp11_pkcs11.h"

#define SBP11_SIG_MAX_TEST 4627 /* ML-DSA-87 */

static const char *module_path;
static void *lib;
static CK_FUNCTION_LIST_3_0 *F;
static fake_daemon *D;
static char dir[256], sock[300], logfile[300];
static int failures;

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                          \
    }                                                                      \
  } while (0)
#define CHECK_RV(call, want)                                                                              \
  do {                                                                                                    \
    CK_RV rv_ = (call);                                                                                   \
    if (rv_ != (CK_RV)(want)) {                                                                           \
      fprintf(stderr, "%s:%d: %s returned 0x%lx, want 0x%lx (%s)\n", __FILE__, __LINE__, #call,          \
              (unsigned long)rv_, (unsigned long)(want), #want);                                          \
      failures++;                                                                                         \
    }                                                                                                     \
  } while (0)
#define REQUIRE(cond)                                                                  \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);       \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

/* ---- setup ---- */

static void load_module(void) {
  lib = dlopen(module_path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen %s: %s\n", module_path, dlerror());
    exit(1);
  }
  CK_C_GetInterface gi = (CK_C_GetInterface)dlsym(lib, "C_GetInterface");
  REQUIRE(gi);
  CK_INTERFACE *itf = NULL;
  CHECK_RV(gi(NULL, NULL, &itf, 0), CKR_OK);
  REQUIRE(itf && itf->pFunctionList);
  F = itf->pFunctionList;
  REQUIRE(F->version.major == 3 && F->version.minor == 0);
}

static void start_daemon(void) {
  snprintf(dir, sizeof(dir), "/tmp/sbp11-test-%d-XXXXXX", (int)getpid());
  REQUIRE(mkdtemp(dir));
  snprintf(sock, sizeof(sock), "%s/daemon.sock", dir);
  snprintf(logfile, sizeof(logfile), "%s/module.log", dir);
  setenv("SIGNBRIDGE_SOCKET", sock, 1);
  setenv("SIGNBRIDGE_LOG", logfile, 1);
  setenv("SIGNBRIDGE_POLL_INTERVAL_MS", "20", 1);
  D = fd_start(sock);
  REQUIRE(D);
}

static void teardown(void) {
  fd_free(D);
  char cmd[600];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
  if (lib) dlclose(lib);
}

static void init(void) { CHECK_RV(F->C_Initialize(NULL), CKR_OK); }
static void fin(void) { CHECK_RV(F->C_Finalize(NULL), CKR_OK); }

static int log_contains(const char *needle) {
  FILE *f = fopen(logfile, "r");
  if (!f) return 0;
  char line[4096];
  int found = 0;
  while (!found && fgets(line, sizeof(line), f)) found = strstr(line, needle) != NULL;
  fclose(f);
  return found;
}

/* Sets a fake daemon control under its lock (its threads read them). */
#define DSET(field, value)         \
  do {                             \
    pthread_mutex_lock(&D->mu);    \
    D->field = (value);            \
    pthread_mutex_unlock(&D->mu);  \
  } while (0)

static int dcount(int *counter) {
  pthread_mutex_lock(&D->mu);
  int v = *counter;
  pthread_mutex_unlock(&D->mu);
  return v;
}

/* The slot whose token carries this fake daemon key (tokens come in the daemon's order). */
static CK_SLOT_ID slot_of(const char *spec) {
  for (int i = 0; i < FD_NKEYS; i++)
    if (!strcmp(D->keys[i].spec, spec)) return (CK_SLOT_ID)i;
  REQUIRE(0);
  return 0;
}

static CK_SESSION_HANDLE open_session(const char *spec) {
  CK_SESSION_HANDLE h = 0;
  CHECK_RV(F->C_OpenSession(slot_of(spec), CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_OK);
  return h;
}

static CK_OBJECT_HANDLE find_one(CK_SESSION_HANDLE h, CK_OBJECT_CLASS cls) {
  CK_ATTRIBUTE t[] = {{CKA_CLASS, &cls, sizeof(cls)}};
  CK_OBJECT_HANDLE o = 0;
  CK_ULONG n = 0;
  CHECK_RV(F->C_FindObjectsInit(h, t, 1), CKR_OK);
  CHECK_RV(F->C_FindObjects(h, &o, 1, &n), CKR_OK);
  CHECK_RV(F->C_FindObjectsFinal(h), CKR_OK);
  CHECK(n == 1);
  return o;
}

/* ---- verification with libcrypto ---- */

enum { V_PKCS1, V_PSS, V_ECDSA };

static const EVP_MD *md_for(CK_MECHANISM_TYPE m) {
  switch (m) {
  case CKM_SHA256_RSA_PKCS: case CKM_SHA256_RSA_PKCS_PSS: case CKM_ECDSA_SHA256: case CKM_SHA256: return EVP_sha256();
  case CKM_SHA384_RSA_PKCS: case CKM_SHA384_RSA_PKCS_PSS: case CKM_ECDSA_SHA384: case CKM_SHA384: return EVP_sha384();
  case CKM_SHA512_RSA_PKCS: case CKM_SHA512_RSA_PKCS_PSS: case CKM_ECDSA_SHA512: case CKM_SHA512: return EVP_sha512();
  }
  return NULL;
}

/* Verifies sig over the digest dg with padding kind v. */
static int verify_digest(const fd_key *k, int v, const EVP_MD *md, const uint8_t *dg, size_t dlen, const uint8_t *sig,
                         size_t siglen) {
  uint8_t der[600];
  size_t derlen = siglen;
  if (v == V_ECDSA) {
    if (siglen != 2 * (size_t)k->ec_field) return 0;
    ECDSA_SIG *es = ECDSA_SIG_new();
    ECDSA_SIG_set0(es, BN_bin2bn(sig, k->ec_field, NULL), BN_bin2bn(sig + k->ec_field, k->ec_field, NULL));
    unsigned char *p = der;
    derlen = (size_t)i2d_ECDSA_SIG(es, &p);
    ECDSA_SIG_free(es);
  } else {
    memcpy(der, sig, siglen);
  }
  EVP_PKEY_CTX *c = EVP_PKEY_CTX_new(k->pkey, NULL);
  int ok = EVP_PKEY_verify_init(c) > 0 && EVP_PKEY_CTX_set_signature_md(c, md) > 0;
  if (ok && v != V_ECDSA) ok = EVP_PKEY_CTX_set_rsa_padding(c, v == V_PSS ? RSA_PKCS1_PSS_PADDING : RSA_PKCS1_PADDING) > 0;
  if (ok && v == V_PSS) ok = EVP_PKEY_CTX_set_rsa_pss_saltlen(c, RSA_PSS_SALTLEN_DIGEST) > 0;
  ok = ok && EVP_PKEY_verify(c, der, derlen, dg, dlen) == 1;
  EVP_PKEY_CTX_free(c);
  return ok;
}

static const uint8_t DI_SHA256[] = {0x30, 0x31, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                    0x65, 0x03, 0x04, 0x02, 0x01, 0x05, 0x00, 0x04, 0x20};
static const uint8_t DI_SHA384[] = {0x30, 0x41, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                    0x65, 0x03, 0x04, 0x02, 0x02, 0x05, 0x00, 0x04, 0x30};
static const uint8_t DI_SHA512[] = {0x30, 0x51, 0x30, 0x0d, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01,
                                    0x65, 0x03, 0x04, 0x02, 0x03, 0x05, 0x00, 0x04, 0x40};

typedef struct sign_case {
  CK_MECHANISM_TYPE mech;
  CK_MECHANISM_TYPE pss_hash; /* PSS: the hashAlg of the parameters */
  int multipart;
  CK_MECHANISM_TYPE ecdsa_hash; /* CKM_ECDSA: the digest handed over (any SHA-2 on any curve); 0: the curve's */
} sign_case;

static void pss_params(CK_RSA_PKCS_PSS_PARAMS *p, CK_MECHANISM_TYPE hash) {
  p->hashAlg = hash;
  p->mgf = hash == CKM_SHA256 ? CKG_MGF1_SHA256 : hash == CKM_SHA384 ? CKG_MGF1_SHA384 : CKG_MGF1_SHA512;
  p->sLen = (CK_ULONG)EVP_MD_get_size(md_for(hash));
}

/* Signs msg with the case's mechanism through the module and verifies with libcrypto. Returns 1 if verified. */
static int sign_and_verify(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE key, const fd_key *k, const sign_case *sc,
                           const uint8_t *msg, size_t msglen) {
  CK_RSA_PKCS_PSS_PARAMS pss;
  CK_MECHANISM m = {sc->mech, NULL, 0};
  if (sc->pss_hash) {
    pss_params(&pss, sc->pss_hash);
    m.pParameter = &pss;
    m.ulParameterLen = sizeof(pss);
  }
  /* The input: the message for hash-and-sign, else a digest (or a DigestInfo for CKM_RSA_PKCS). */
  const EVP_MD *md = md_for(sc->mech);
  int raw = md == NULL;
  uint8_t dg[64], in[128];
  unsigned dl = 0;
  size_t inlen;
  if (raw) {
    md = sc->pss_hash ? md_for(sc->pss_hash)
         : sc->ecdsa_hash ? md_for(sc->ecdsa_hash)
         : k->ec_field ? (k->ec_hash == 256 ? EVP_sha256() : k->ec_hash == 384 ? EVP_sha384() : EVP_sha512())
                       : EVP_sha256();
  }
  EVP_Digest(msg, msglen, dg, &dl, md, NULL);
  if (sc->mech == CKM_RSA_PKCS) {
    const uint8_t *pre = dl == 32 ? DI_SHA256 : dl == 48 ? DI_SHA384 : DI_SHA512;
    memcpy(in, pre, 19);
    memcpy(in + 19, dg, dl);
    inlen = 19 + dl;
  } else {
    memcpy(in, dg, dl);
    inlen = dl;
  }
  const uint8_t *data = raw ? in : msg;
  size_t datalen = raw ? inlen : msglen;
  CK_RV rv = F->C_SignInit(h, &m, key);
  if (rv != CKR_OK) {
    fprintf(stderr, "C_SignInit(0x%lx) = 0x%lx\n", (unsigned long)sc->mech, (unsigned long)rv);
    return 0;
  }
  uint8_t sig[600];
  CK_ULONG siglen = 0;
  if (sc->multipart) {
    size_t half = datalen / 2;
    CHECK_RV(F->C_SignUpdate(h, (CK_BYTE_PTR)data, half), CKR_OK);
    CHECK_RV(F->C_SignUpdate(h, (CK_BYTE_PTR)data + half, datalen - half), CKR_OK);
    CHECK_RV(F->C_SignFinal(h, NULL, &siglen), CKR_OK);
    rv = F->C_SignFinal(h, sig, &siglen);
  } else {
    CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR)data, datalen, NULL, &siglen), CKR_OK);
    rv = F->C_Sign(h, (CK_BYTE_PTR)data, datalen, sig, &siglen);
  }
  if (rv != CKR_OK) {
    fprintf(stderr, "sign(0x%lx) = 0x%lx\n", (unsigned long)sc->mech, (unsigned long)rv);
    return 0;
  }
  int v = k->ec_field ? V_ECDSA : (sc->mech == CKM_RSA_PKCS_PSS || sc->pss_hash) ? V_PSS : V_PKCS1;
  return verify_digest(k, v, md, dg, dl, sig, siglen);
}

static void sign_ok(const char *spec, CK_MECHANISM_TYPE mech) {
  CK_SESSION_HANDLE h = open_session(spec);
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
  sign_case sc = {mech, 0, 0, 0};
  const uint8_t msg[] = "a quick signature";
  CHECK(sign_and_verify(h, key, fd_key_by_spec(D, spec), &sc, msg, sizeof(msg)));
  CHECK_RV(F->C_CloseSession(h), CKR_OK);
}

/* ---- tests ---- */

typedef struct thread_arg {
  int index, ok, total;
} thread_arg;
static void *signer(void *p);

static void t_interfaces(void) {
  CK_C_GetInterfaceList gil = (CK_C_GetInterfaceList)dlsym(lib, "C_GetInterfaceList");
  CK_C_GetInterface gi = (CK_C_GetInterface)dlsym(lib, "C_GetInterface");
  CK_C_GetFunctionList gfl = (CK_C_GetFunctionList)dlsym(lib, "C_GetFunctionList");
  REQUIRE(gil && gi && gfl);
  CK_ULONG n = 0;
  CHECK_RV(gil(NULL, &n), CKR_OK);
  CHECK(n == 2);
  CK_INTERFACE list[2];
  n = 1;
  CHECK_RV(gil(list, &n), CKR_BUFFER_TOO_SMALL);
  n = 2;
  CHECK_RV(gil(list, &n), CKR_OK);
  CHECK(!strcmp((char *)list[0].pInterfaceName, "PKCS 11") && !strcmp((char *)list[1].pInterfaceName, "PKCS 11"));
  CHECK(((CK_VERSION *)list[0].pFunctionList)->major == 3 && ((CK_VERSION *)list[1].pFunctionList)->major == 2);
  CK_VERSION v240 = {2, 40}, v30 = {3, 0}, v99 = {9, 9};
  CK_INTERFACE *itf;
  CHECK_RV(gi((CK_UTF8CHAR_PTR) "PKCS 11", &v240, &itf, 0), CKR_OK);
  CHECK(((CK_FUNCTION_LIST *)itf->pFunctionList)->version.minor == 40);
  CHECK_RV(gi((CK_UTF8CHAR_PTR) "PKCS 11", &v30, &itf, 0), CKR_OK);
  CHECK(itf->pFunctionList == F);
  CHECK_RV(gi((CK_UTF8CHAR_PTR) "PKCS 11", &v99, &itf, 0), CKR_ARGUMENTS_BAD);
  CHECK_RV(gi((CK_UTF8CHAR_PTR) "Vendor X", NULL, &itf, 0), CKR_ARGUMENTS_BAD);
  CHECK_RV(gi(NULL, NULL, &itf, CKF_INTERFACE_FORK_SAFE), CKR_ARGUMENTS_BAD);
  CHECK_RV(gi(NULL, NULL, NULL, 0), CKR_ARGUMENTS_BAD);
  CK_FUNCTION_LIST *fl = NULL;
  CHECK_RV(gfl(&fl), CKR_OK);
  CHECK(fl && fl->version.major == 2 && fl->version.minor == 40);
  CHECK_RV(gfl(NULL), CKR_ARGUMENTS_BAD);
  /* The 2.40 list works on its own, signatures included. */
  CHECK_RV(fl->C_Initialize(NULL), CKR_OK);
  {
    CK_SESSION_HANDLE h;
    CK_OBJECT_CLASS cls = CKO_PRIVATE_KEY;
    CK_ATTRIBUTE t[] = {{CKA_CLASS, &cls, sizeof(cls)}};
    CK_OBJECT_HANDLE key = 0;
    CK_ULONG nk = 0;
    CHECK_RV(fl->C_OpenSession(slot_of("ECC_NIST_P256"), CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_OK);
    CHECK_RV(fl->C_FindObjectsInit(h, t, 1), CKR_OK);
    CHECK_RV(fl->C_FindObjects(h, &key, 1, &nk), CKR_OK);
    CHECK_RV(fl->C_FindObjectsFinal(h), CKR_OK);
    CK_MECHANISM m = {CKM_ECDSA_SHA256, NULL, 0};
    uint8_t sig[64], dg[32];
    CK_ULONG siglen = sizeof(sig);
    unsigned dl;
    CHECK_RV(fl->C_SignInit(h, &m, key), CKR_OK);
    CHECK_RV(fl->C_Sign(h, (CK_BYTE_PTR) "2.40", 4, sig, &siglen), CKR_OK);
    EVP_Digest("2.40", 4, dg, &dl, EVP_sha256(), NULL);
    CHECK(verify_digest(fd_key_by_spec(D, "ECC_NIST_P256"), V_ECDSA, EVP_sha256(), dg, 32, sig, siglen));
  }
  CK_INFO info;
  CHECK_RV(fl->C_GetInfo(&info), CKR_OK);
  CHECK(info.cryptokiVersion.major == 2 && info.cryptokiVersion.minor == 40);
  CHECK_RV(F->C_GetInfo(&info), CKR_OK);
  CHECK(info.cryptokiVersion.major == 3 && info.cryptokiVersion.minor == 0);
  CHECK(!memcmp(info.manufacturerID, "signbridge", 10));
  CHECK_RV(fl->C_Finalize(NULL), CKR_OK);
}

static int app_locks;
static CK_RV app_create(CK_VOID_PTR_PTR m) {
  pthread_mutex_t *mu = malloc(sizeof(*mu));
  pthread_mutex_init(mu, NULL);
  *m = mu;
  return CKR_OK;
}
static CK_RV app_destroy(CK_VOID_PTR m) {
  pthread_mutex_destroy(m);
  free(m);
  return CKR_OK;
}
static CK_RV app_lock(CK_VOID_PTR m) {
  pthread_mutex_lock(m);
  app_locks++;
  return CKR_OK;
}
static CK_RV app_unlock(CK_VOID_PTR m) {
  pthread_mutex_unlock(m);
  return CKR_OK;
}

static void t_initialize(void) {
  CK_ULONG n = 0;
  CK_INFO info;
  /* Before C_Initialize everything says so. */
  CHECK_RV(F->C_GetInfo(&info), CKR_CRYPTOKI_NOT_INITIALIZED);
  CHECK_RV(F->C_GetSlotList(CK_FALSE, NULL, &n), CKR_CRYPTOKI_NOT_INITIALIZED);
  CHECK_RV(F->C_Finalize(NULL), CKR_CRYPTOKI_NOT_INITIALIZED);
  CHECK_RV(F->C_EncryptInit(1, NULL, 0), CKR_CRYPTOKI_NOT_INITIALIZED);
  CHECK_RV(F->C_Sign(1, NULL, 0, NULL, &n), CKR_CRYPTOKI_NOT_INITIALIZED);
  /* NULL, twice, finalize. Initialising talks to nobody. */
  CHECK_RV(F->C_Initialize(NULL), CKR_OK);
  CHECK(dcount(&D->accepted) == 0);
  CHECK_RV(F->C_Initialize(NULL), CKR_CRYPTOKI_ALREADY_INITIALIZED);
  CHECK_RV(F->C_Finalize((CK_VOID_PTR)1), CKR_ARGUMENTS_BAD);
  fin();
  CHECK_RV(F->C_Finalize(NULL), CKR_CRYPTOKI_NOT_INITIALIZED);
  /* flags 0, CKF_OS_LOCKING_OK. */
  CK_C_INITIALIZE_ARGS a = {0};
  CHECK_RV(F->C_Initialize(&a), CKR_OK);
  fin();
  a.flags = CKF_OS_LOCKING_OK;
  CHECK_RV(F->C_Initialize(&a), CKR_OK);
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  CHECK(n == 4);
  fin();
  /* Application mutexes: used. */
  CK_C_INITIALIZE_ARGS app = {app_create, app_destroy, app_lock, app_unlock, 0, NULL};
  CHECK_RV(F->C_Initialize(&app), CKR_OK);
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  CHECK(app_locks > 0);
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  fin();
  /* Bad arguments. */
  CK_C_INITIALIZE_ARGS partial = {app_create, NULL, app_lock, app_unlock, 0, NULL};
  CHECK_RV(F->C_Initialize(&partial), CKR_ARGUMENTS_BAD);
  CK_C_INITIALIZE_ARGS reserved = {NULL, NULL, NULL, NULL, 0, (CK_VOID_PTR)1};
  CHECK_RV(F->C_Initialize(&reserved), CKR_ARGUMENTS_BAD);
  CHECK_RV(F->C_GetInfo(&info), CKR_CRYPTOKI_NOT_INITIALIZED);
}

static void t_slots(void) {
  init();
  CK_ULONG n = 0;
  CHECK_RV(F->C_GetSlotList(CK_FALSE, NULL, NULL), CKR_ARGUMENTS_BAD);
  CHECK_RV(F->C_GetSlotList(CK_FALSE, NULL, &n), CKR_OK);
  CHECK(n == 4);
  CK_SLOT_ID slots[8];
  n = 2;
  CHECK_RV(F->C_GetSlotList(CK_FALSE, slots, &n), CKR_BUFFER_TOO_SMALL);
  CHECK(n == 4);
  n = 8;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, slots, &n), CKR_OK);
  CHECK(n == 4 && slots[0] == 0 && slots[3] == 3);
  CK_SLOT_INFO si;
  CHECK_RV(F->C_GetSlotInfo(0, &si), CKR_OK);
  CHECK(si.flags & CKF_TOKEN_PRESENT);
  CHECK_RV(F->C_GetSlotInfo(4, &si), CKR_SLOT_ID_INVALID);
  CK_TOKEN_INFO ti;
  CHECK_RV(F->C_GetTokenInfo(slot_of("RSA_2048"), &ti), CKR_OK);
  CHECK(!memcmp(ti.label, "fake rsa                        ", 32));
  CHECK(!(ti.flags & CKF_LOGIN_REQUIRED) && (ti.flags & CKF_TOKEN_INITIALIZED) && (ti.flags & CKF_RNG));
  CHECK_RV(F->C_GetTokenInfo(99, &ti), CKR_SLOT_ID_INVALID);
  CHECK_RV(F->C_GetTokenInfo(0, NULL), CKR_ARGUMENTS_BAD);
  /* Mechanisms: eight for an RSA token, four for an EC token, and the three digests on every token. */
  CK_MECHANISM_TYPE mechs[32];
  n = 0;
  CHECK_RV(F->C_GetMechanismList(slot_of("RSA_2048"), NULL, &n), CKR_OK);
  CHECK(n == 8 + 3);
  n = 3;
  CHECK_RV(F->C_GetMechanismList(slot_of("RSA_2048"), mechs, &n), CKR_BUFFER_TOO_SMALL);
  n = 32;
  CHECK_RV(F->C_GetMechanismList(slot_of("ECC_NIST_P384"), mechs, &n), CKR_OK);
  CHECK(n == 4 + 3 && mechs[0] == CKM_ECDSA && mechs[4] == CKM_SHA256);
  CK_MECHANISM_INFO mi;
  CHECK_RV(F->C_GetMechanismInfo(slot_of("RSA_2048"), CKM_SHA256_RSA_PKCS_PSS, &mi), CKR_OK);
  CHECK(mi.flags == CKF_SIGN && mi.ulMinKeySize == 2048);
  CHECK_RV(F->C_GetMechanismInfo(slot_of("ECC_NIST_P521"), CKM_ECDSA, &mi), CKR_OK);
  CHECK((mi.flags & CKF_SIGN) && (mi.flags & CKF_EC_NAMEDCURVE) && mi.ulMaxKeySize == 521);
  CHECK_RV(F->C_GetMechanismInfo(0, CKM_SHA1_RSA_PKCS, &mi), CKR_MECHANISM_INVALID);
  CHECK_RV(F->C_GetMechanismInfo(77, CKM_ECDSA, &mi), CKR_SLOT_ID_INVALID);
  /* Sessions. */
  CK_SESSION_HANDLE h;
  CHECK_RV(F->C_OpenSession(0, 0, NULL, NULL, &h), CKR_SESSION_PARALLEL_NOT_SUPPORTED);
  CHECK_RV(F->C_OpenSession(9, CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_SLOT_ID_INVALID);
  CHECK_RV(F->C_OpenSession(0, CKF_SERIAL_SESSION, NULL, NULL, NULL), CKR_ARGUMENTS_BAD);
  CHECK_RV(F->C_OpenSession(0, CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &h), CKR_OK);
  CK_SESSION_INFO sinfo;
  CHECK_RV(F->C_GetSessionInfo(h, &sinfo), CKR_OK);
  CHECK(sinfo.slotID == 0 && sinfo.state == CKS_RW_PUBLIC_SESSION);
  CHECK_RV(F->C_GetTokenInfo(0, &ti), CKR_OK);
  CHECK(ti.ulSessionCount == 1 && ti.ulRwSessionCount == 1);
  CHECK_RV(F->C_CloseSession(h), CKR_OK);
  CHECK_RV(F->C_CloseSession(h), CKR_SESSION_HANDLE_INVALID);
  CHECK_RV(F->C_GetSessionInfo(h, &sinfo), CKR_SESSION_HANDLE_INVALID);
  CK_SESSION_HANDLE a = open_session("RSA_2048"), b = open_session("RSA_2048");
  CHECK_RV(F->C_CloseAllSessions(slot_of("RSA_2048")), CKR_OK);
  CHECK_RV(F->C_CloseSession(a), CKR_SESSION_HANDLE_INVALID);
  CHECK_RV(F->C_CloseSession(b), CKR_SESSION_HANDLE_INVALID);
  CHECK_RV(F->C_CloseAllSessions(42), CKR_SLOT_ID_INVALID);
  /* LIST again at the start of an enumeration while no session is open; never while one is. */
  int lists = dcount(&D->lists);
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  CHECK(dcount(&D->lists) == lists + 1);
  n = 8;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, slots, &n), CKR_OK); /* the second half of the enumeration: cached */
  CHECK(dcount(&D->lists) == lists + 1);
  a = open_session("ECC_NIST_P256");
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  CHECK(dcount(&D->lists) == lists + 1);
  CHECK_RV(F->C_CloseSession(a), CKR_OK);
  fin();

  /* No daemon: one slot without a token that says so; no token present. */
  fd_stop(D);
  setenv("SIGNBRIDGE_DAEMON_WAIT_SECONDS", "0", 1);
  init();
  n = 0;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  CHECK(n == 0);
  CHECK_RV(F->C_GetSlotList(CK_FALSE, NULL, &n), CKR_OK);
  CHECK(n == 1);
  CHECK_RV(F->C_GetSlotInfo(0, &si), CKR_OK);
  CHECK(!(si.flags & CKF_TOKEN_PRESENT));
  CHECK(!memcmp(si.slotDescription, "signbridge: daemon not running", 30));
  CHECK_RV(F->C_GetTokenInfo(0, &ti), CKR_TOKEN_NOT_PRESENT);
  CHECK_RV(F->C_OpenSession(0, CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_TOKEN_NOT_PRESENT);
  CHECK(log_contains("cannot connect to the signbridge daemon"));
  /* The daemon comes up: the next enumeration finds the tokens. */
  REQUIRE(fd_listen(D) == 0);
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  CHECK(n == 4);
  fin();

  /* A socket path longer than a Unix socket address allows is refused, not truncated. */
  char longpath[300];
  memset(longpath, 'x', sizeof(longpath) - 1);
  longpath[0] = '/';
  longpath[sizeof(longpath) - 1] = 0;
  setenv("SIGNBRIDGE_SOCKET", longpath, 1);
  init();
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  CHECK(n == 0);
  CHECK(log_contains("File name too long"));
  fin();
  setenv("SIGNBRIDGE_SOCKET", sock, 1);
  unsetenv("SIGNBRIDGE_DAEMON_WAIT_SECONDS");

  /* The daemon answers LIST with an error: the slot says why. */
  DSET(list_error, 3);
  init();
  CHECK_RV(F->C_GetSlotList(CK_FALSE, NULL, &n), CKR_OK);
  CHECK(n == 1);
  CHECK_RV(F->C_GetSlotInfo(0, &si), CKR_OK);
  CHECK(!memcmp(si.slotDescription, "signbridge: UNAUTHENTICATED", 27));
  DSET(list_error, 0);
  fin();

  /* One tenant failed on its own (its API key revoked): its token is there without keys and its slot and the log
   * say why; every other token is as usual and signs. */
  DSET(list_failed_key, 2); /* t-p256 */
  init();
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  CHECK(n == 4);
  CHECK_RV(F->C_GetSlotInfo(slot_of("ECC_NIST_P256"), &si), CKR_OK);
  CHECK((si.flags & CKF_TOKEN_PRESENT) && !memcmp(si.slotDescription, "signbridge t-p256: UNAUTHENTICATED", 34));
  CHECK(log_contains("token \"fake p256\" (tenant t-p256) has no keys: UNAUTHENTICATED: unauthorized: API key revoked"));
  {
    CK_SESSION_HANDLE hf = open_session("ECC_NIST_P256");
    CK_OBJECT_HANDLE o;
    CK_ULONG found = 1;
    CHECK_RV(F->C_FindObjectsInit(hf, NULL, 0), CKR_OK);
    CHECK_RV(F->C_FindObjects(hf, &o, 1, &found), CKR_OK);
    CHECK(found == 0);
    CHECK_RV(F->C_FindObjectsFinal(hf), CKR_OK);
    CHECK_RV(F->C_CloseSession(hf), CKR_OK);
  }
  CHECK_RV(F->C_GetSlotInfo(slot_of("ECC_NIST_P384"), &si), CKR_OK);
  CHECK(!memcmp(si.slotDescription, "signbridge t-p384 ", 18));
  sign_ok("ECC_NIST_P384", CKM_ECDSA_SHA384);
  DSET(list_failed_key, 0);
  fin();
}

static void t_objects(void) {
  init();
  CK_SESSION_HANDLE h = open_session("RSA_2048");
  const fd_key *k = fd_key_by_spec(D, "RSA_2048");
  /* Every object: private key, public key, leaf certificate, the CA certificate. */
  CK_OBJECT_HANDLE objs[16];
  CK_ULONG n = 0;
  CHECK_RV(F->C_FindObjects(h, objs, 16, &n), CKR_OPERATION_NOT_INITIALIZED);
  CHECK_RV(F->C_FindObjectsInit(h, NULL, 0), CKR_OK);
  CHECK_RV(F->C_FindObjectsInit(h, NULL, 0), CKR_OPERATION_ACTIVE);
  CHECK_RV(F->C_FindObjects(h, objs, 2, &n), CKR_OK);
  CHECK(n == 2);
  CHECK_RV(F->C_FindObjects(h, objs + 2, 14, &n), CKR_OK);
  CHECK(n == 2);
  CHECK_RV(F->C_FindObjects(h, objs, 16, &n), CKR_OK);
  CHECK(n == 0);
  CHECK_RV(F->C_FindObjectsFinal(h), CKR_OK);
  CHECK_RV(F->C_FindObjectsFinal(h), CKR_OPERATION_NOT_INITIALIZED);
  /* Templates: by id (private, public, leaf), by class and id, no match. */
  CK_OBJECT_CLASS cert = CKO_CERTIFICATE, priv = CKO_PRIVATE_KEY;
  CK_ATTRIBUTE by_id[] = {{CKA_ID, (void *)k->id, 16}};
  CHECK_RV(F->C_FindObjectsInit(h, by_id, 1), CKR_OK);
  CHECK_RV(F->C_FindObjects(h, objs, 16, &n), CKR_OK);
  CHECK(n == 3);
  CHECK_RV(F->C_FindObjectsFinal(h), CKR_OK);
  CK_ATTRIBUTE certs[] = {{CKA_CLASS, &cert, sizeof(cert)}};
  CHECK_RV(F->C_FindObjectsInit(h, certs, 1), CKR_OK);
  CHECK_RV(F->C_FindObjects(h, objs, 16, &n), CKR_OK);
  CHECK(n == 2);
  CHECK_RV(F->C_FindObjectsFinal(h), CKR_OK);
  uint8_t other_id[16] = {1};
  CK_ATTRIBUTE none[] = {{CKA_CLASS, &priv, sizeof(priv)}, {CKA_ID, other_id, 16}};
  CHECK_RV(F->C_FindObjectsInit(h, none, 2), CKR_OK);
  CHECK_RV(F->C_FindObjects(h, objs, 16, &n), CKR_OK);
  CHECK(n == 0);
  CHECK_RV(F->C_FindObjectsFinal(h), CKR_OK);
  CHECK_RV(F->C_FindObjectsInit(h, NULL, 1), CKR_ARGUMENTS_BAD);

  /* C_GetAttributeValue: size query, values, every attribute processed. */
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
  CK_ATTRIBUTE q[] = {{CKA_MODULUS, NULL, 0}, {CKA_ID, NULL, 0}, {CKA_LABEL, NULL, 0}};
  CHECK_RV(F->C_GetAttributeValue(h, key, q, 3), CKR_OK);
  CHECK(q[0].ulValueLen == 256 && q[1].ulValueLen == 16 && q[2].ulValueLen == strlen("rsa key"));
  uint8_t modulus[256], id[16], small[4];
  CK_BBOOL sensitive = 0, extractable = 1, sign = 0;
  CK_KEY_TYPE kt = 0;
  CK_ATTRIBUTE t[] = {
      {CKA_MODULUS, modulus, sizeof(modulus)}, {CKA_PRIVATE_EXPONENT, small, sizeof(small)},
      {CKA_ID, id, sizeof(id)},                {CKA_VENDOR_DEFINED + 7, small, sizeof(small)},
      {CKA_SENSITIVE, &sensitive, 1},          {CKA_LABEL, small, 2},
      {CKA_EXTRACTABLE, &extractable, 1},      {CKA_KEY_TYPE, &kt, sizeof(kt)},
      {CKA_SIGN, &sign, 1},
  };
  CK_RV rv = F->C_GetAttributeValue(h, key, t, 9);
  CHECK(rv == CKR_ATTRIBUTE_SENSITIVE || rv == CKR_ATTRIBUTE_TYPE_INVALID || rv == CKR_BUFFER_TOO_SMALL);
  CHECK(t[0].ulValueLen == 256 && t[2].ulValueLen == 16 && !memcmp(id, k->id, 16));
  CHECK(t[1].ulValueLen == CK_UNAVAILABLE_INFORMATION);
  CHECK(t[3].ulValueLen == CK_UNAVAILABLE_INFORMATION);
  CHECK(t[5].ulValueLen == CK_UNAVAILABLE_INFORMATION);
  CHECK(sensitive == CK_TRUE && extractable == CK_FALSE && kt == CKK_RSA && sign == CK_TRUE);
  BIGNUM *bn = NULL;
  EVP_PKEY_get_bn_param(k->pkey, OSSL_PKEY_PARAM_RSA_N, &bn);
  uint8_t want[256];
  BN_bn2binpad(bn, want, 256);
  BN_free(bn);
  CHECK(!memcmp(modulus, want, 256));
  /* One error at a time gives its own code. */
  CK_ATTRIBUTE only_sens[] = {{CKA_PRIVATE_EXPONENT, NULL, 0}};
  CHECK_RV(F->C_GetAttributeValue(h, key, only_sens, 1), CKR_ATTRIBUTE_SENSITIVE);
  CHECK(only_sens[0].ulValueLen == CK_UNAVAILABLE_INFORMATION);
  CK_ATTRIBUTE only_invalid[] = {{CKA_VALUE_LEN, NULL, 0}};
  CHECK_RV(F->C_GetAttributeValue(h, key, only_invalid, 1), CKR_ATTRIBUTE_TYPE_INVALID);
  CK_ATTRIBUTE only_small[] = {{CKA_MODULUS, small, sizeof(small)}};
  CHECK_RV(F->C_GetAttributeValue(h, key, only_small, 1), CKR_BUFFER_TOO_SMALL);
  CHECK(only_small[0].ulValueLen == CK_UNAVAILABLE_INFORMATION);
  /* CKA_ALLOWED_MECHANISMS of an RSA key: the eight RSA mechanisms. */
  CK_MECHANISM_TYPE allowed[16];
  CK_ATTRIBUTE am[] = {{CKA_ALLOWED_MECHANISMS, allowed, sizeof(allowed)}};
  CHECK_RV(F->C_GetAttributeValue(h, key, am, 1), CKR_OK);
  CHECK(am[0].ulValueLen == 8 * sizeof(CK_MECHANISM_TYPE));
  /* Handles. */
  CHECK_RV(F->C_GetAttributeValue(h, 0, q, 1), CKR_OBJECT_HANDLE_INVALID);
  CHECK_RV(F->C_GetAttributeValue(h, 0x7fff0001, q, 1), CKR_OBJECT_HANDLE_INVALID);
  CHECK_RV(F->C_GetAttributeValue(h + 100, key, q, 1), CKR_SESSION_HANDLE_INVALID);
  CK_SESSION_HANDLE h_ec = open_session("ECC_NIST_P521");
  CHECK_RV(F->C_GetAttributeValue(h_ec, key, q, 1), CKR_OBJECT_HANDLE_INVALID); /* another token's object */
  /* EC key: params, point, CKA_VALUE sensitive, two allowed mechanisms. */
  CK_OBJECT_HANDLE eckey = find_one(h_ec, CKO_PRIVATE_KEY), ecpub = find_one(h_ec, CKO_PUBLIC_KEY);
  uint8_t params[16], point[140];
  CK_ATTRIBUTE ec[] = {{CKA_EC_PARAMS, params, sizeof(params)}, {CKA_EC_POINT, point, sizeof(point)}};
  CHECK_RV(F->C_GetAttributeValue(h_ec, ecpub, ec, 2), CKR_OK);
  static const uint8_t p521[] = {0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x23};
  CHECK(ec[0].ulValueLen == sizeof(p521) && !memcmp(params, p521, sizeof(p521)));
  uint8_t raw[140];
  size_t rawlen = 0;
  EVP_PKEY_get_octet_string_param(fd_key_by_spec(D, "ECC_NIST_P521")->pkey, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, raw,
                                  sizeof(raw), &rawlen);
  CHECK(ec[1].ulValueLen == rawlen + 3 && point[0] == 0x04 && point[1] == 0x81 && point[2] == rawlen &&
        !memcmp(point + 3, raw, rawlen));
  CK_ATTRIBUTE ecv[] = {{CKA_VALUE, NULL, 0}};
  CHECK_RV(F->C_GetAttributeValue(h_ec, eckey, ecv, 1), CKR_ATTRIBUTE_SENSITIVE);
  am[0].ulValueLen = sizeof(allowed);
  CHECK_RV(F->C_GetAttributeValue(h_ec, eckey, am, 1), CKR_OK);
  CHECK(am[0].ulValueLen == 4 * sizeof(CK_MECHANISM_TYPE) && allowed[0] == CKM_ECDSA &&
        allowed[1] == CKM_ECDSA_SHA256 && allowed[2] == CKM_ECDSA_SHA384 && allowed[3] == CKM_ECDSA_SHA512);
  /* The leaf certificate: DER as sent, same subject as the private key's CKA_SUBJECT. */
  CK_ATTRIBUTE by_cert_id[] = {{CKA_CLASS, &cert, sizeof(cert)}, {CKA_ID, (void *)k->id, 16}};
  CK_OBJECT_HANDLE leaf = 0;
  CHECK_RV(F->C_FindObjectsInit(h, by_cert_id, 2), CKR_OK);
  CHECK_RV(F->C_FindObjects(h, &leaf, 1, &n), CKR_OK);
  CHECK_RV(F->C_FindObjectsFinal(h), CKR_OK);
  CHECK(n == 1);
  uint8_t der[2048], subj1[512], subj2[512];
  CK_ATTRIBUTE cv[] = {{CKA_VALUE, der, sizeof(der)}, {CKA_SUBJECT, subj1, sizeof(subj1)}};
  CHECK_RV(F->C_GetAttributeValue(h, leaf, cv, 2), CKR_OK);
  CHECK(cv[0].ulValueLen == (CK_ULONG)k->cert_len && !memcmp(der, k->cert, (size_t)k->cert_len));
  CK_ATTRIBUTE ks[] = {{CKA_SUBJECT, subj2, sizeof(subj2)}};
  CHECK_RV(F->C_GetAttributeValue(h, key, ks, 1), CKR_OK);
  CHECK(ks[0].ulValueLen == cv[1].ulValueLen && !memcmp(subj1, subj2, ks[0].ulValueLen));
  /* Objects are read-only: copy, destroy, set are prohibited; create is not offered. */
  CK_OBJECT_HANDLE copy;
  CK_BBOOL no = CK_FALSE;
  CK_ATTRIBUTE tok[] = {{CKA_TOKEN, &no, 1}};
  CHECK_RV(F->C_CopyObject(h, key, tok, 1, &copy), CKR_ACTION_PROHIBITED);
  CHECK_RV(F->C_DestroyObject(h, key), CKR_ACTION_PROHIBITED);
  CHECK_RV(F->C_DestroyObject(h, 12345), CKR_OBJECT_HANDLE_INVALID);
  CHECK_RV(F->C_SetAttributeValue(h, key, tok, 1), CKR_ACTION_PROHIBITED);
  CHECK_RV(F->C_CreateObject(h, tok, 1, &copy), CKR_FUNCTION_NOT_SUPPORTED);
  CK_ULONG size = 0;
  CHECK_RV(F->C_GetObjectSize(h, key, &size), CKR_OK);
  CHECK(size > 256);
  fin();
}

static const CK_MECHANISM_TYPE RSA_MECHS[] = {CKM_RSA_PKCS,        CKM_SHA256_RSA_PKCS,     CKM_SHA384_RSA_PKCS,
                                              CKM_SHA512_RSA_PKCS, CKM_SHA256_RSA_PKCS_PSS, CKM_SHA384_RSA_PKCS_PSS,
                                              CKM_SHA512_RSA_PKCS_PSS};

static void t_sign_all(void) {
  init();
  const uint8_t msg[] = "The quick brown fox signs over the lazy dog, with every mechanism there is.";
  int verified = 0, total = 0;
  for (int ki = 0; ki < FD_NKEYS; ki++) {
    const fd_key *k = &D->keys[ki];
    CK_SESSION_HANDLE h = open_session(k->spec);
    CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
    sign_case cases[40];
    int nc = 0;
    for (int mp = 0; mp < 2; mp++) {
      if (!k->ec_field) {
        for (size_t i = 0; i < sizeof(RSA_MECHS) / sizeof(RSA_MECHS[0]); i++) {
          CK_MECHANISM_TYPE m = RSA_MECHS[i];
          CK_MECHANISM_TYPE ph = m == CKM_SHA256_RSA_PKCS_PSS ? CKM_SHA256
                                 : m == CKM_SHA384_RSA_PKCS_PSS ? CKM_SHA384
                                 : m == CKM_SHA512_RSA_PKCS_PSS ? CKM_SHA512 : 0;
          cases[nc++] = (sign_case){m, ph, mp, 0};
        }
        cases[nc++] = (sign_case){CKM_RSA_PKCS_PSS, CKM_SHA256, mp, 0};
        cases[nc++] = (sign_case){CKM_RSA_PKCS_PSS, CKM_SHA384, mp, 0};
        cases[nc++] = (sign_case){CKM_RSA_PKCS_PSS, CKM_SHA512, mp, 0};
      } else {
        /* Every SHA-2 digest on every curve, as TLS 1.2 stacks ask of a P-384 key (SHA-256 by default). */
        static const CK_MECHANISM_TYPE EC_MECHS[] = {CKM_ECDSA_SHA256, CKM_ECDSA_SHA384, CKM_ECDSA_SHA512};
        static const CK_MECHANISM_TYPE HASHES[] = {CKM_SHA256, CKM_SHA384, CKM_SHA512};
        for (size_t i = 0; i < 3; i++) {
          cases[nc++] = (sign_case){CKM_ECDSA, 0, mp, HASHES[i]};
          cases[nc++] = (sign_case){EC_MECHS[i], 0, mp, 0};
        }
      }
    }
    for (int c = 0; c < nc; c++) {
      total++;
      /* P-521 signatures: repeat, so that short r or s values (left-padding) turn up. */
      int reps = k->ec_field == 66 ? 8 : 1;
      int ok = 1;
      for (int r = 0; r < reps; r++) ok &= sign_and_verify(h, key, k, &cases[c], msg, sizeof(msg) - (size_t)r);
      if (ok) verified++;
      else fprintf(stderr, "FAILED: %s mechanism 0x%lx multipart %d\n", k->spec, (unsigned long)cases[c].mech,
                   cases[c].multipart);
    }
    CHECK_RV(F->C_CloseSession(h), CKR_OK);
  }
  printf("%d of %d key/mechanism combinations verified\n", verified, total);
  CHECK(verified == total && total == 2 * 10 + 3 * 12);
  /* The algorithm names on the wire: the digest really signed, not the curve's hash. */
  sign_ok("RSA_2048", CKM_SHA384_RSA_PKCS);
  CHECK(!strcmp(D->last_algorithm, "RSASSA_PKCS1_V1_5_SHA_384"));
  sign_ok("ECC_NIST_P384", CKM_ECDSA);
  CHECK(!strcmp(D->last_algorithm, "ECDSA_SHA_384"));
  sign_ok("ECC_NIST_P384", CKM_ECDSA_SHA256);
  CHECK(!strcmp(D->last_algorithm, "ECDSA_SHA_256"));
  {
    CK_SESSION_HANDLE h = open_session("ECC_NIST_P384");
    CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
    sign_case sc = {CKM_ECDSA, 0, 0, CKM_SHA256};
    CHECK(sign_and_verify(h, key, fd_key_by_spec(D, "ECC_NIST_P384"), &sc, msg, sizeof(msg)));
    CHECK(!strcmp(D->last_algorithm, "ECDSA_SHA_256"));
    sc.ecdsa_hash = CKM_SHA512;
    CHECK(sign_and_verify(h, key, fd_key_by_spec(D, "ECC_NIST_P384"), &sc, msg, sizeof(msg)));
    CHECK(!strcmp(D->last_algorithm, "ECDSA_SHA_512"));
    CHECK_RV(F->C_CloseSession(h), CKR_OK);
  }
  fin();
}

static void t_sign_errors(void) {
  init();
  const fd_key *rk = fd_key_by_spec(D, "RSA_2048");
  CK_SESSION_HANDLE h = open_session("RSA_2048"), he = open_session("ECC_NIST_P521");
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY), pub = find_one(h, CKO_PUBLIC_KEY);
  CK_OBJECT_HANDLE cert_obj = 0, eckey = find_one(he, CKO_PRIVATE_KEY);
  {
    CK_OBJECT_CLASS c = CKO_CERTIFICATE;
    CK_ATTRIBUTE t[] = {{CKA_CLASS, &c, sizeof(c)}, {CKA_ID, (void *)rk->id, 16}};
    CK_ULONG n;
    F->C_FindObjectsInit(h, t, 2);
    F->C_FindObjects(h, &cert_obj, 1, &n);
    F->C_FindObjectsFinal(h);
  }
  int signs_before = dcount(&D->signs);
  CK_MECHANISM m = {CKM_SHA256_RSA_PKCS, NULL, 0};
  uint8_t sig[512];
  CK_ULONG siglen = sizeof(sig);
  /* Sign before init; update/final before init. */
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED);
  CHECK_RV(F->C_SignUpdate(h, (CK_BYTE_PTR) "x", 1), CKR_OPERATION_NOT_INITIALIZED);
  CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED);
  /* Handles and arguments. */
  CHECK_RV(F->C_SignInit(999, &m, key), CKR_SESSION_HANDLE_INVALID);
  CHECK_RV(F->C_SignInit(h, NULL, key), CKR_ARGUMENTS_BAD);
  CHECK_RV(F->C_SignInit(h, &m, 0), CKR_KEY_HANDLE_INVALID);
  CHECK_RV(F->C_SignInit(h, &m, 0x00050001), CKR_KEY_HANDLE_INVALID);
  CHECK_RV(F->C_SignInit(h, &m, cert_obj), CKR_KEY_HANDLE_INVALID);
  CHECK_RV(F->C_SignInit(h, &m, pub), CKR_KEY_FUNCTION_NOT_PERMITTED);
  CHECK_RV(F->C_SignInit(h, &m, eckey), CKR_KEY_HANDLE_INVALID); /* another token's key */
  /* Mechanisms against keys. */
  CK_MECHANISM bad = {CKM_SHA1_RSA_PKCS, NULL, 0};
  CHECK_RV(F->C_SignInit(h, &bad, key), CKR_MECHANISM_INVALID);
  bad.mechanism = CKM_ECDSA_SHA256;
  CHECK_RV(F->C_SignInit(h, &bad, key), CKR_KEY_TYPE_INCONSISTENT);
  bad.mechanism = CKM_SHA256_RSA_PKCS;
  CHECK_RV(F->C_SignInit(he, &bad, eckey), CKR_KEY_TYPE_INCONSISTENT);
  bad.mechanism = CKM_ECDSA_SHA1;
  CHECK_RV(F->C_SignInit(he, &bad, eckey), CKR_MECHANISM_INVALID);
  /* CKM_ECDSA takes a SHA-256, SHA-384 or SHA-512 digest on any curve; any other length is CKR_DATA_LEN_RANGE. */
  {
    CK_MECHANISM ecdsa = {CKM_ECDSA, NULL, 0};
    static const size_t bad_lens[] = {20, 28, 33, 65};
    uint8_t dg[65] = {1};
    for (size_t i = 0; i < sizeof(bad_lens) / sizeof(bad_lens[0]); i++) {
      int before = dcount(&D->signs);
      CHECK_RV(F->C_SignInit(he, &ecdsa, eckey), CKR_OK);
      siglen = sizeof(sig);
      CHECK_RV(F->C_Sign(he, dg, bad_lens[i], sig, &siglen), CKR_DATA_LEN_RANGE);
      CHECK(dcount(&D->signs) == before); /* refused before anything reached the daemon */
    }
  }
  /* PSS parameters. */
  CK_RSA_PKCS_PSS_PARAMS pss;
  CK_MECHANISM pm = {CKM_SHA256_RSA_PKCS_PSS, NULL, 0};
  CHECK_RV(F->C_SignInit(h, &pm, key), CKR_MECHANISM_PARAM_INVALID);
  pm.pParameter = &pss;
  pm.ulParameterLen = sizeof(pss);
  pss_params(&pss, CKM_SHA384); /* hashAlg differs from the mechanism's */
  CHECK_RV(F->C_SignInit(h, &pm, key), CKR_MECHANISM_PARAM_INVALID);
  pss_params(&pss, CKM_SHA256);
  pss.mgf = CKG_MGF1_SHA1;
  CHECK_RV(F->C_SignInit(h, &pm, key), CKR_MECHANISM_PARAM_INVALID);
  pss_params(&pss, CKM_SHA256);
  pss.sLen = 20;
  CHECK_RV(F->C_SignInit(h, &pm, key), CKR_MECHANISM_PARAM_INVALID);
  pss_params(&pss, CKM_SHA256);
  pss.hashAlg = CKM_SHA_1;
  pm.mechanism = CKM_RSA_PKCS_PSS;
  CHECK_RV(F->C_SignInit(h, &pm, key), CKR_MECHANISM_PARAM_INVALID);
  pm.ulParameterLen = 3;
  CHECK_RV(F->C_SignInit(h, &pm, key), CKR_MECHANISM_PARAM_INVALID);
  CK_MECHANISM with_param = {CKM_SHA256_RSA_PKCS, &pss, sizeof(pss)};
  CHECK_RV(F->C_SignInit(h, &with_param, key), CKR_MECHANISM_PARAM_INVALID);
  CHECK(dcount(&D->signs) == signs_before); /* nothing reached the daemon */

  /* Init twice. */
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OPERATION_ACTIVE);
  /* Size query and a short buffer keep the operation and sign nothing. */
  siglen = 0;
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "data", 4, NULL, &siglen), CKR_OK);
  CHECK(siglen == 256);
  siglen = 100;
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "data", 4, sig, &siglen), CKR_BUFFER_TOO_SMALL);
  CHECK(siglen == 256);
  CHECK(dcount(&D->signs) == signs_before);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "data", 4, sig, NULL), CKR_ARGUMENTS_BAD); /* ends it */
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "data", 4, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "data", 4, sig, &siglen), CKR_OK);
  CHECK(siglen == 256 && dcount(&D->signs) == signs_before + 1);
  /* After a signature the operation is over. */
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "data", 4, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED);
  /* C_Sign cannot finish a multi-part operation. */
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  CHECK_RV(F->C_SignUpdate(h, (CK_BYTE_PTR) "da", 2), CKR_OK);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "ta", 2, sig, &siglen), CKR_OPERATION_ACTIVE);
  CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED);
  /* C_SignFinal: a size query and a short buffer keep the operation. */
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  CHECK_RV(F->C_SignUpdate(h, (CK_BYTE_PTR) "data", 4), CKR_OK);
  siglen = 1;
  CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_BUFFER_TOO_SMALL);
  siglen = sizeof(sig);
  CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_OK);
  CHECK(siglen == 256);

  /* CKM_RSA_PKCS: the DigestInfo is parsed in full. */
  CK_MECHANISM raw = {CKM_RSA_PKCS, NULL, 0};
  uint8_t di[128];
  memcpy(di, DI_SHA256, 19);
  memset(di + 19, 0x5a, 32);
  static const uint8_t sha1_di[] = {0x30, 0x21, 0x30, 0x09, 0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00,
                                    0x04, 0x14, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  struct {
    const uint8_t *p;
    size_t len;
    CK_RV want;
    const char *what;
  } bad_inputs[] = {
      {sha1_di, sizeof(sha1_di), CKR_DATA_INVALID, "a SHA-1 DigestInfo"},
      {di, 19 + 31, CKR_DATA_INVALID, "a SHA-256 DigestInfo one byte short"},
      {di, 19 + 33, CKR_DATA_INVALID, "a SHA-256 DigestInfo with a trailing byte"},
      {di + 19, 32, CKR_DATA_INVALID, "a bare digest"},
      {di, 0, CKR_DATA_INVALID, "nothing"},
      {di, 300, CKR_DATA_LEN_RANGE, "more than the modulus allows"},
  };
  uint8_t big[300] = {0};
  bad_inputs[5].p = big;
  for (size_t i = 0; i < sizeof(bad_inputs) / sizeof(bad_inputs[0]); i++) {
    CHECK_RV(F->C_SignInit(h, &raw, key), CKR_OK);
    siglen = sizeof(sig);
    CK_RV rv = F->C_Sign(h, (CK_BYTE_PTR)bad_inputs[i].p, bad_inputs[i].len, sig, &siglen);
    if (rv != bad_inputs[i].want) {
      fprintf(stderr, "CKM_RSA_PKCS over %s: 0x%lx\n", bad_inputs[i].what, (unsigned long)rv);
      failures++;
    }
    /* The error ended the operation. */
    CHECK_RV(F->C_Sign(h, di, 51, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED);
  }
  uint8_t di_mod[64];
  memcpy(di_mod, di, 51);
  di_mod[14] = 0x04; /* SHA-224's OID arc */
  CHECK_RV(F->C_SignInit(h, &raw, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, di_mod, 51, sig, &siglen), CKR_DATA_INVALID);
  memcpy(di_mod, di, 51);
  di_mod[16] = 0x01; /* NULL with a non-zero byte */
  CHECK_RV(F->C_SignInit(h, &raw, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, di_mod, 51, sig, &siglen), CKR_DATA_INVALID);
  memcpy(di_mod, di, 51);
  di_mod[1] = 0x32; /* an extra byte inside the SEQUENCE, after the OCTET STRING */
  di_mod[51] = 0;
  CHECK_RV(F->C_SignInit(h, &raw, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, di_mod, 52, sig, &siglen), CKR_DATA_INVALID);
  /* Without the NULL parameters (also valid DER for SHA-2). */
  uint8_t di_nonull[49] = {0x30, 0x2f, 0x30, 0x0b, 0x06, 0x09, 0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x01,
                           0x04, 0x20};
  CHECK_RV(F->C_SignInit(h, &raw, key), CKR_OK);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, di_nonull, sizeof(di_nonull), sig, &siglen), CKR_OK);
  CHECK(!strcmp(D->last_algorithm, "RSASSA_PKCS1_V1_5_SHA_256"));
  /* Raw PSS wants exactly the digest length, raw ECDSA a SHA-2 length. */
  pss_params(&pss, CKM_SHA384);
  pm.mechanism = CKM_RSA_PKCS_PSS;
  pm.ulParameterLen = sizeof(pss);
  CHECK_RV(F->C_SignInit(h, &pm, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, di, 32, sig, &siglen), CKR_DATA_LEN_RANGE);
  CK_MECHANISM ecdsa = {CKM_ECDSA, NULL, 0};
  uint8_t esig[200];
  CK_ULONG esiglen = sizeof(esig);
  CHECK_RV(F->C_SignInit(he, &ecdsa, eckey), CKR_OK);
  CHECK_RV(F->C_Sign(he, di, 20, esig, &esiglen), CKR_DATA_LEN_RANGE); /* a SHA-1 digest: not signed */
  CHECK_RV(F->C_SignInit(he, &ecdsa, eckey), CKR_OK);
  esiglen = 0;
  CHECK_RV(F->C_Sign(he, di, 64, NULL, &esiglen), CKR_OK);
  CHECK(esiglen == 132);
  esiglen = sizeof(esig);
  CHECK_RV(F->C_Sign(he, di, 64, esig, &esiglen), CKR_OK);
  CHECK(esiglen == 132);
  /* Update with NULL data ends the operation. */
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  CHECK_RV(F->C_SignUpdate(h, NULL, 5), CKR_ARGUMENTS_BAD);
  CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED);
  /* Cancel (3.0). */
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  CHECK_RV(F->C_SessionCancel(h, CKF_SIGN), CKR_OK);
  CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED);
  fin();
}

typedef struct status_case {
  uint32_t status;
  CK_RV want;
} status_case;

static void t_daemon_errors(void) {
  init();
  CK_SESSION_HANDLE h = open_session("ECC_NIST_P256");
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
  CK_MECHANISM m = {CKM_ECDSA_SHA256, NULL, 0};
  uint8_t sig[64];
  CK_ULONG siglen;
  static const status_case cases[] = {
      {1, CKR_DATA_INVALID},         {2, CKR_KEY_HANDLE_INVALID},        {3, CKR_USER_NOT_LOGGED_IN},
      {4, CKR_FUNCTION_REJECTED},    {5, CKR_DEVICE_ERROR},              {6, CKR_DEVICE_ERROR},
      {7, CKR_GENERAL_ERROR},        {8, CKR_KEY_FUNCTION_NOT_PERMITTED}, {9, CKR_FUNCTION_REJECTED},
      {10, CKR_FUNCTION_REJECTED},   {11, CKR_DEVICE_ERROR},             {12, CKR_USER_NOT_LOGGED_IN},
      {13, CKR_KEY_CHANGED},         {99, CKR_GENERAL_ERROR},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    pthread_mutex_lock(&D->mu);
    D->fail_status = cases[i].status;
    D->fail_count = 1;
    snprintf(D->fail_msg, sizeof(D->fail_msg), "injected failure %u", cases[i].status);
    pthread_mutex_unlock(&D->mu);
    CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
    siglen = sizeof(sig);
    CK_RV rv = F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen);
    if (rv != cases[i].want) {
      fprintf(stderr, "status %u: 0x%lx, want 0x%lx\n", cases[i].status, (unsigned long)rv,
              (unsigned long)cases[i].want);
      failures++;
    }
    /* The operation is over; the next signature works. */
    CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED);
  }
  /* The reason and the request id are in the log. */
  CHECK(log_contains("POLICY_DENIED: injected failure 4; request id req-"));
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  /* A signature of the wrong length is refused. */
  DSET(short_sig_next, 1);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_DEVICE_ERROR);
  /* A malformed answer closes the connection; nothing is retried, the next signature works. */
  DSET(garbage_next, 1);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_DEVICE_ERROR);
  CHECK(log_contains("protocol error"));
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  /* A well-formed answer of the wrong type is a protocol error too. */
  DSET(wrong_type_next, 1);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_DEVICE_ERROR);
  CHECK(log_contains("protocol error: LIST_OK in answer to SIGN"));
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  fin();
  /* A daemon that does not answer in time (SIGNBRIDGE_TIMEOUT=1). */
  setenv("SIGNBRIDGE_TIMEOUT", "1", 1);
  init();
  h = open_session("ECC_NIST_P256");
  key = find_one(h, CKO_PRIVATE_KEY);
  DSET(delay_ms, 2500);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_DEVICE_ERROR);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  CHECK(took > 0.9 && took < 2.4); /* the delayed answer would come at 2.5 s */
  DSET(delay_ms, 0);
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  fin();
  unsetenv("SIGNBRIDGE_TIMEOUT");
  usleep(1600 * 1000); /* let the delayed answer drain */
}

static void t_restart(void) {
  init();
  sign_ok("RSA_2048", CKM_SHA256_RSA_PKCS);
  int accepted = dcount(&D->accepted);
  /* The daemon restarts between two signatures: the client does not notice. */
  fd_stop(D);
  REQUIRE(fd_listen(D) == 0);
  sign_ok("RSA_2048", CKM_SHA256_RSA_PKCS);
  CHECK(dcount(&D->accepted) == accepted + 1);
  /* Several idle connections in the pool, all dead after a restart: none is used, the new daemon is reached. */
  {
    enum { NT = 4 };
    pthread_t th[NT];
    thread_arg args[NT];
    for (int i = 0; i < NT; i++) {
      args[i] = (thread_arg){1, 0, 0}; /* all on the P-256 token, at the same time: one connection each */
      pthread_create(&th[i], NULL, signer, &args[i]);
    }
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    CHECK(dcount(&D->accepted) >= accepted + 2);
    fd_stop(D);
    REQUIRE(fd_listen(D) == 0);
    sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
    sign_ok("RSA_2048", CKM_SHA256_RSA_PKCS);
  }
  /* The daemon read the SIGN and closed the connection without answering: it may have signed, so the SIGN is
   * not sent again (that could sign twice); CKR_DEVICE_ERROR, and the next signature works. */
  int signs = dcount(&D->signs);
  DSET(drop_next, 1);
  CK_SESSION_HANDLE h = open_session("ECC_NIST_P384");
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
  CK_MECHANISM m384 = {CKM_ECDSA_SHA384, NULL, 0};
  uint8_t sig[256];
  CK_ULONG siglen = sizeof(sig);
  CHECK_RV(F->C_SignInit(h, &m384, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_DEVICE_ERROR);
  CHECK(dcount(&D->signs) == signs + 1);
  CHECK(log_contains("the signature may have been made, so it is not requested again"));
  sign_ok("ECC_NIST_P384", CKM_ECDSA_SHA384);
  /* The daemon closed the connection with the SIGN unread (as at its shutdown): sent again, signed once. */
  CHECK_RV(F->C_SignInit(h, &m384, key), CKR_OK);
  fd_stop(D); /* the pooled connection dies: the SIGN goes out on a fresh one, which the daemon resets */
  REQUIRE(fd_listen(D) == 0);
  signs = dcount(&D->signs);
  DSET(reset_after_hello, 1);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_OK);
  CHECK(dcount(&D->signs) == signs + 1);
  CHECK(log_contains("SIGN: the daemon closed the connection without reading the request"));
  fin();
  /* The daemon is gone and SIGNBRIDGE_DAEMON_WAIT_SECONDS=0: CKR_DEVICE_ERROR at once, and the session survives
   * for when it is back. */
  setenv("SIGNBRIDGE_DAEMON_WAIT_SECONDS", "0", 1);
  init();
  h = open_session("RSA_2048");
  key = find_one(h, CKO_PRIVATE_KEY);
  fd_stop(D);
  CK_MECHANISM m = {CKM_SHA256_RSA_PKCS, NULL, 0};
  siglen = sizeof(sig);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_DEVICE_ERROR);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  CHECK(t1.tv_sec - t0.tv_sec < 5); /* no waiting (the default wait is 10 s) */
  REQUIRE(fd_listen(D) == 0);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_OK);
  fin();
  unsetenv("SIGNBRIDGE_DAEMON_WAIT_SECONDS");
}

/* Brings the daemon back after a pause, from another thread. */
static void *relisten_later(void *ms) {
  usleep((useconds_t)(*(int *)ms) * 1000);
  if (fd_listen(D) != 0) failures++;
  return NULL;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* A daemon that is away for a while (a restart): signatures wait for it, up to SIGNBRIDGE_DAEMON_WAIT_SECONDS. */
static void t_daemon_wait(void) {
  unsetenv("SIGNBRIDGE_DAEMON_WAIT_SECONDS"); /* the default: 10 s */
  init();
  CK_SESSION_HANDLE h = open_session("ECC_NIST_P256");
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
  CK_MECHANISM m = {CKM_ECDSA_SHA256, NULL, 0};
  uint8_t sig[64];
  CK_ULONG siglen = sizeof(sig);
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  /* An open session: the daemon goes away and comes back 1.5 s later; C_Sign waits and signs. */
  fd_stop(D);
  int pause_ms = 1500;
  pthread_t th;
  pthread_create(&th, NULL, relisten_later, &pause_ms);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_OK);
  pthread_join(th, NULL);
  CHECK(log_contains("SIGN: cannot connect to the signbridge daemon"));
  CHECK(log_contains("waiting up to 10 s for the daemon (SIGNBRIDGE_DAEMON_WAIT_SECONDS)"));
  CHECK(log_contains("SIGN: the daemon is back"));
  fin();
  /* A new process's first call: the tokens are listed once the daemon is up. */
  fd_stop(D);
  pause_ms = 1000;
  pthread_create(&th, NULL, relisten_later, &pause_ms);
  init();
  CK_ULONG n = 0;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  CHECK(n == FD_NKEYS);
  pthread_join(th, NULL);
  fin();
  /* The wait has an end: SIGNBRIDGE_DAEMON_WAIT_SECONDS=1, the daemon stays away: CKR_DEVICE_ERROR after it. */
  setenv("SIGNBRIDGE_DAEMON_WAIT_SECONDS", "1", 1);
  init();
  h = open_session("ECC_NIST_P256");
  key = find_one(h, CKO_PRIVATE_KEY);
  fd_stop(D);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_DEVICE_ERROR);
  CHECK(seconds_since(&t0) >= 0.95);
  CHECK(log_contains("(waited 1."));
  REQUIRE(fd_listen(D) == 0);
  fin();
  unsetenv("SIGNBRIDGE_DAEMON_WAIT_SECONDS");
}

static int polls_before_restart;

/*
 * Restarts the daemon while C_Sign waits: once the module has polled at least once (so the restart cannot come
 * before the wait or after it, however loaded the machine), then lets the approval arrive at the next poll.
 */
static void *restart_mid_wait(void *unused) {
  (void)unused;
  for (int i = 0; i < 10000 && dcount(&D->polls) <= polls_before_restart; i++) usleep(1000);
  fd_stop(D);
  if (fd_listen(D) != 0) failures++;
  DSET(pend_left, 1);
  return NULL;
}

static void t_pending(void) {
  int accepted;
  init();
  /* Pending, polled three times, then signed. */
  DSET(pending_polls, 3);
  DSET(pending_outcome, 0);
  int polls = dcount(&D->polls);
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  CHECK(dcount(&D->polls) == polls + 3);
  CHECK(log_contains("waits for approval: request id req-"));
  /* The daemon restarts while C_Sign waits for approval: polling carries on on a new connection. */
  DSET(pending_polls, 100000); /* pending until restart_mid_wait lets it through */
  polls_before_restart = dcount(&D->polls);
  pthread_t restarter;
  pthread_create(&restarter, NULL, restart_mid_wait, NULL);
  accepted = dcount(&D->accepted);
  sign_ok("ECC_NIST_P384", CKM_ECDSA_SHA384);
  pthread_join(restarter, NULL);
  CHECK(dcount(&D->accepted) > accepted);
  /* Pending, then rejected by an approver. */
  DSET(pending_polls, 1);
  DSET(pending_outcome, 9);
  CK_SESSION_HANDLE h = open_session("RSA_2048");
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
  CK_MECHANISM m = {CKM_SHA512_RSA_PKCS, NULL, 0};
  uint8_t sig[256];
  CK_ULONG siglen = sizeof(sig);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_FUNCTION_REJECTED);
  CHECK(log_contains("REJECTED: rejected by an approver"));
  fin();
  /* Never approved within SIGNBRIDGE_APPROVAL_TIMEOUT. */
  setenv("SIGNBRIDGE_APPROVAL_TIMEOUT", "1", 1);
  init();
  DSET(pending_polls, 1000000);
  DSET(pending_outcome, 0);
  h = open_session("RSA_2048");
  key = find_one(h, CKO_PRIVATE_KEY);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_FUNCTION_REJECTED);
  CHECK(log_contains("was not approved within 1 s"));
  DSET(pending_polls, 0);
  fin();
  unsetenv("SIGNBRIDGE_APPROVAL_TIMEOUT");
}

static void t_operation_state(void) {
  init();
  const fd_key *k = fd_key_by_spec(D, "RSA_2048");
  CK_SESSION_HANDLE a = open_session("RSA_2048"), b = open_session("RSA_2048");
  CK_OBJECT_HANDLE key = find_one(a, CKO_PRIVATE_KEY);
  CK_ULONG len = 0;
  uint8_t state[4096];
  CHECK_RV(F->C_GetOperationState(a, NULL, &len), CKR_OPERATION_NOT_INITIALIZED);
  /* Hash-and-sign, half the data in, the state copied to another session, both finish. */
  CK_RSA_PKCS_PSS_PARAMS pss;
  pss_params(&pss, CKM_SHA384);
  CK_MECHANISM m = {CKM_SHA384_RSA_PKCS_PSS, &pss, sizeof(pss)};
  const uint8_t msg[] = "first half | second half";
  CHECK_RV(F->C_SignInit(a, &m, key), CKR_OK);
  CHECK_RV(F->C_SignUpdate(a, (CK_BYTE_PTR)msg, 12), CKR_OK);
  CHECK_RV(F->C_GetOperationState(a, NULL, &len), CKR_OK);
  CK_ULONG small = len - 1;
  CHECK_RV(F->C_GetOperationState(a, state, &small), CKR_BUFFER_TOO_SMALL);
  CHECK_RV(F->C_GetOperationState(a, state, &len), CKR_OK);
  CHECK_RV(F->C_SetOperationState(b, state, len, 0, 0), CKR_OK);
  uint8_t sa[256], sb[256], dg[48];
  CK_ULONG la = sizeof(sa), lb = sizeof(sb);
  CHECK_RV(F->C_SignUpdate(a, (CK_BYTE_PTR)msg + 12, sizeof(msg) - 12), CKR_OK);
  CHECK_RV(F->C_SignUpdate(b, (CK_BYTE_PTR)msg + 12, sizeof(msg) - 12), CKR_OK);
  CHECK_RV(F->C_SignFinal(a, sa, &la), CKR_OK);
  CHECK_RV(F->C_SignFinal(b, sb, &lb), CKR_OK);
  unsigned dl;
  EVP_Digest(msg, sizeof(msg), dg, &dl, EVP_sha384(), NULL);
  CHECK(verify_digest(k, V_PSS, EVP_sha384(), dg, dl, sa, la));
  CHECK(verify_digest(k, V_PSS, EVP_sha384(), dg, dl, sb, lb));
  /* A raw mechanism (the input buffered) restored after the first session closed. */
  CK_MECHANISM raw = {CKM_RSA_PKCS, NULL, 0};
  uint8_t di[51];
  memcpy(di, DI_SHA256, 19);
  EVP_Digest(msg, sizeof(msg), di + 19, &dl, EVP_sha256(), NULL);
  CHECK_RV(F->C_SignInit(a, &raw, key), CKR_OK);
  CHECK_RV(F->C_SignUpdate(a, di, 20), CKR_OK);
  len = sizeof(state);
  CHECK_RV(F->C_GetOperationState(a, state, &len), CKR_OK);
  CHECK_RV(F->C_CloseSession(a), CKR_OK);
  CHECK_RV(F->C_SetOperationState(b, state, len, 0, 0), CKR_OK);
  CHECK_RV(F->C_SignUpdate(b, di + 20, 31), CKR_OK);
  lb = sizeof(sb);
  CHECK_RV(F->C_SignFinal(b, sb, &lb), CKR_OK);
  CHECK(verify_digest(k, V_PKCS1, EVP_sha256(), di + 19, 32, sb, lb));
  /* More hash-and-sign data than is kept for saving: still signs, cannot be saved. */
  static uint8_t lots[70 * 1024];
  CK_MECHANISM sha = {CKM_SHA256_RSA_PKCS, NULL, 0};
  CHECK_RV(F->C_SignInit(b, &sha, key), CKR_OK);
  CHECK_RV(F->C_SignUpdate(b, lots, sizeof(lots)), CKR_OK);
  len = sizeof(state);
  CHECK_RV(F->C_GetOperationState(b, state, &len), CKR_STATE_UNSAVEABLE);
  lb = sizeof(sb);
  CHECK_RV(F->C_SignFinal(b, sb, &lb), CKR_OK);
  uint8_t dlots[32];
  EVP_Digest(lots, sizeof(lots), dlots, &dl, EVP_sha256(), NULL);
  CHECK(verify_digest(k, V_PKCS1, EVP_sha256(), dlots, 32, sb, lb));
  /* Put back the raw state for the checks below. */
  CHECK_RV(F->C_SignInit(b, &raw, key), CKR_OK);
  CHECK_RV(F->C_SignUpdate(b, di, 20), CKR_OK);
  len = sizeof(state);
  CHECK_RV(F->C_GetOperationState(b, state, &len), CKR_OK);
  CHECK_RV(F->C_SessionCancel(b, CKF_SIGN), CKR_OK);
  /* Broken states. */
  CHECK_RV(F->C_SetOperationState(b, state, 10, 0, 0), CKR_SAVED_STATE_INVALID);
  state[0] ^= 1;
  CHECK_RV(F->C_SetOperationState(b, state, len, 0, 0), CKR_SAVED_STATE_INVALID);
  state[0] ^= 1;
  CHECK_RV(F->C_SetOperationState(b, state, len + 1, 0, 0), CKR_SAVED_STATE_INVALID);
  CHECK_RV(F->C_SetOperationState(b, state, len, key, 0), CKR_KEY_NOT_NEEDED);
  CHECK_RV(F->C_SetOperationState(b, NULL, len, 0, 0), CKR_ARGUMENTS_BAD);
  /* A state from another token's session names a key this session cannot use. */
  CK_SESSION_HANDLE e = open_session("ECC_NIST_P256");
  CHECK_RV(F->C_SetOperationState(e, state, len, 0, 0), CKR_SAVED_STATE_INVALID);
  fin();
}

static void *signer(void *p) {
  thread_arg *ta = p;
  const fd_key *k = &D->keys[ta->index % FD_NKEYS];
  CK_SESSION_HANDLE h;
  if (F->C_OpenSession(slot_of(k->spec), CKF_SERIAL_SESSION, NULL, NULL, &h) != CKR_OK) return NULL;
  CK_OBJECT_CLASS cls = CKO_PRIVATE_KEY;
  CK_ATTRIBUTE t[] = {{CKA_CLASS, &cls, sizeof(cls)}};
  CK_OBJECT_HANDLE key = 0;
  CK_ULONG n = 0;
  F->C_FindObjectsInit(h, t, 1);
  F->C_FindObjects(h, &key, 1, &n);
  F->C_FindObjectsFinal(h);
  for (int i = 0; i < 12; i++) {
    sign_case sc = {k->ec_field ? CKM_ECDSA : (i % 2 ? CKM_SHA256_RSA_PKCS : CKM_SHA512_RSA_PKCS_PSS),
                    (!k->ec_field && i % 2 == 0) ? CKM_SHA512 : 0, i % 3 == 0, 0};
    char msg[64];
    snprintf(msg, sizeof(msg), "thread %d message %d", ta->index, i);
    ta->total++;
    if (sign_and_verify(h, key, k, &sc, (const uint8_t *)msg, strlen(msg))) ta->ok++;
  }
  F->C_CloseSession(h);
  return NULL;
}

static void t_threads(void) {
  CK_C_INITIALIZE_ARGS a = {NULL, NULL, NULL, NULL, CKF_OS_LOCKING_OK, NULL};
  CHECK_RV(F->C_Initialize(&a), CKR_OK);
  CK_ULONG n;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  enum { NT = 16 };
  pthread_t th[NT];
  thread_arg args[NT];
  for (int i = 0; i < NT; i++) {
    args[i] = (thread_arg){i, 0, 0};
    pthread_create(&th[i], NULL, signer, &args[i]);
  }
  int ok = 0, total = 0;
  for (int i = 0; i < NT; i++) {
    pthread_join(th[i], NULL);
    ok += args[i].ok, total += args[i].total;
  }
  printf("%d of %d concurrent signatures verified; %d connections\n", ok, total, dcount(&D->accepted));
  CHECK(total == NT * 12 && ok == total);
  fin();
}

static void t_fork(void) {
  init();
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    /* The child: the parent's library state is not ours; C_Initialize starts clean. */
    int before = failures;
    CK_ULONG n = 0;
    CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_CRYPTOKI_NOT_INITIALIZED);
    CHECK_RV(F->C_Initialize(NULL), CKR_OK);
    sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
    sign_ok("RSA_2048", CKM_SHA256_RSA_PKCS);
    CHECK_RV(F->C_Finalize(NULL), CKR_OK);
    _exit(failures == before ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  /* The parent carries on, on its own connection. */
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  fin();
}

static void t_context(void) {
  setenv("SIGNBRIDGE_PROJECT", "shop", 1);
  setenv("SIGNBRIDGE_ENVIRONMENT", "ci", 1);
  setenv("SIGNBRIDGE_ARTIFACT_TYPE", "jar", 1);
  setenv("SIGNBRIDGE_ARTIFACT_VERSION", "1.2.3", 1);
  setenv("SIGNBRIDGE_SBOM", "/tmp/sbom.cdx.json", 1);
  init();
  sign_ok("ECC_NIST_P384", CKM_ECDSA_SHA384);
  CHECK(!strcmp(D->last_project, "shop") && !strcmp(D->last_environment, "ci"));
  CHECK(!strcmp(D->last_artifact_type, "jar") && !strcmp(D->last_artifact_version, "1.2.3"));
  CHECK(!strcmp(D->last_sbom, "/tmp/sbom.cdx.json") && !strcmp(D->last_tenant, "t-p384"));
  unsetenv("SIGNBRIDGE_PROJECT");
  sign_ok("ECC_NIST_P384", CKM_ECDSA_SHA384);
  CHECK(D->last_project[0] == 0);
  fin();
}

static void t_session_misc(void) {
  init();
  CK_SESSION_HANDLE h = open_session("RSA_2048");
  /* Login: no PIN needed, any accepted, consistent state. */
  CK_SESSION_INFO si;
  CHECK_RV(F->C_Logout(h), CKR_USER_NOT_LOGGED_IN);
  /* CKU_SO is a valid user type; with a read-only session open the standard's answer is READ_ONLY_EXISTS. */
  CHECK_RV(F->C_Login(h, CKU_SO, (CK_UTF8CHAR_PTR) "x", 1), CKR_SESSION_READ_ONLY_EXISTS);
  CHECK_RV(F->C_Login(h, 7, (CK_UTF8CHAR_PTR) "x", 1), CKR_USER_TYPE_INVALID);
  {
    CK_SESSION_HANDLE rw = 0, ro = 0;
    CHECK_RV(F->C_OpenSession(slot_of("ECC_NIST_P521"), CKF_SERIAL_SESSION | CKF_RW_SESSION, NULL, NULL, &rw),
             CKR_OK);
    CHECK_RV(F->C_Login(rw, CKU_SO, (CK_UTF8CHAR_PTR) "any", 3), CKR_OK);
    CHECK_RV(F->C_GetSessionInfo(rw, &si), CKR_OK);
    CHECK(si.state == CKS_RW_SO_FUNCTIONS);
    CHECK_RV(F->C_OpenSession(slot_of("ECC_NIST_P521"), CKF_SERIAL_SESSION, NULL, NULL, &ro),
             CKR_SESSION_READ_WRITE_SO_EXISTS);
    CHECK_RV(F->C_Login(rw, CKU_SO, (CK_UTF8CHAR_PTR) "any", 3), CKR_USER_ALREADY_LOGGED_IN);
    CHECK_RV(F->C_Login(rw, CKU_USER, (CK_UTF8CHAR_PTR) "any", 3), CKR_USER_ANOTHER_ALREADY_LOGGED_IN);
    CHECK_RV(F->C_Logout(rw), CKR_OK);
    CHECK_RV(F->C_OpenSession(slot_of("ECC_NIST_P521"), CKF_SERIAL_SESSION, NULL, NULL, &ro), CKR_OK);
    CHECK_RV(F->C_CloseSession(ro), CKR_OK);
    CHECK_RV(F->C_CloseSession(rw), CKR_OK);
  }
  CHECK_RV(F->C_Login(h, CKU_USER, (CK_UTF8CHAR_PTR) "1234", 4), CKR_OK);
  CHECK_RV(F->C_Login(h, CKU_USER, (CK_UTF8CHAR_PTR) "other", 5), CKR_USER_ALREADY_LOGGED_IN);
  CHECK_RV(F->C_GetSessionInfo(h, &si), CKR_OK);
  CHECK(si.state == CKS_RO_USER_FUNCTIONS);
  CK_SESSION_HANDLE h2 = open_session("RSA_2048");
  CHECK_RV(F->C_GetSessionInfo(h2, &si), CKR_OK);
  CHECK(si.state == CKS_RO_USER_FUNCTIONS); /* login is per token */
  CHECK_RV(F->C_Logout(h), CKR_OK);
  CHECK_RV(F->C_GetSessionInfo(h2, &si), CKR_OK);
  CHECK(si.state == CKS_RO_PUBLIC_SESSION);
  CHECK_RV(F->C_LoginUser(h, CKU_USER, NULL, 0, (CK_UTF8CHAR_PTR) "me", 2), CKR_OK);
  sign_ok("RSA_2048", CKM_SHA256_RSA_PKCS);
  /* Random. */
  uint8_t r1[64] = {0}, r2[64] = {0};
  CHECK_RV(F->C_GenerateRandom(h, r1, sizeof(r1)), CKR_OK);
  CHECK_RV(F->C_GenerateRandom(h, r2, sizeof(r2)), CKR_OK);
  CHECK(memcmp(r1, r2, sizeof(r1)) != 0);
  CHECK_RV(F->C_GenerateRandom(h, NULL, 5), CKR_ARGUMENTS_BAD);
  CHECK_RV(F->C_GenerateRandom(999, r1, 5), CKR_SESSION_HANDLE_INVALID);
  CHECK_RV(F->C_SeedRandom(h, r1, 5), CKR_RANDOM_SEED_NOT_SUPPORTED);
  /* What the module does not offer. */
  CK_MECHANISM m = {CKM_SHA256_RSA_PKCS, NULL, 0};
  CHECK_RV(F->C_VerifyInit(h, &m, 1), CKR_FUNCTION_NOT_SUPPORTED);
  CHECK_RV(F->C_EncryptInit(h, &m, 1), CKR_FUNCTION_NOT_SUPPORTED);
  CHECK_RV(F->C_DigestInit(h, &m), CKR_MECHANISM_INVALID); /* digests: t_digest */
  CHECK_RV(F->C_EncryptInit(999, &m, 1), CKR_SESSION_HANDLE_INVALID);
  CHECK_RV(F->C_InitPIN(h, NULL, 0), CKR_FUNCTION_NOT_SUPPORTED);
  CHECK_RV(F->C_GetFunctionStatus(h), CKR_FUNCTION_NOT_PARALLEL);
  CHECK_RV(F->C_CancelFunction(h), CKR_FUNCTION_NOT_PARALLEL);
  CK_SLOT_ID slot;
  CHECK_RV(F->C_WaitForSlotEvent(0, &slot, NULL), CKR_FUNCTION_NOT_SUPPORTED);
  CHECK_RV(F->C_MessageSignInit(h, &m, 1), CKR_FUNCTION_NOT_SUPPORTED);
  fin();
}


/* ---- refusals: logged with their reason, and one line on stderr by default ---- */

static char captured_path[320];
static int saved_fds[2] = {-1, -1};

/* Sends this process's stdout and stderr to a file until capture_end(), which returns what stderr got (stdout
 * must get nothing: the module never writes there). */
static void capture_begin(void) {
  fflush(stdout);
  fflush(stderr);
  snprintf(captured_path, sizeof(captured_path), "%s/stderr.txt", dir);
  int fd = open(captured_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  saved_fds[0] = dup(1), saved_fds[1] = dup(2);
  char outpath[340];
  snprintf(outpath, sizeof(outpath), "%s/stdout.txt", dir);
  int ofd = open(outpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  REQUIRE(ofd >= 0);
  dup2(ofd, 1), dup2(fd, 2);
  close(ofd), close(fd);
}

static void capture_end(char *got, size_t n) {
  fflush(stdout);
  fflush(stderr);
  dup2(saved_fds[0], 1), dup2(saved_fds[1], 2);
  close(saved_fds[0]), close(saved_fds[1]);
  FILE *f = fopen(captured_path, "r");
  size_t r = f ? fread(got, 1, n - 1, f) : 0;
  got[r] = 0;
  if (f) fclose(f);
  char outpath[340];
  snprintf(outpath, sizeof(outpath), "%s/stdout.txt", dir);
  struct stat st;
  CHECK(stat(outpath, &st) == 0 && st.st_size == 0); /* nothing on stdout, ever */
}

static int count_of(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* One policy denial with the given SIGNBRIDGE_LOG (NULL: unset); returns what stderr got. */
static void denied_once(const char *log_setting, char *got, size_t n) {
  if (log_setting) setenv("SIGNBRIDGE_LOG", log_setting, 1);
  else unsetenv("SIGNBRIDGE_LOG");
  capture_begin();
  init();
  CK_SESSION_HANDLE h = open_session("ECC_NIST_P256");
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
  CK_MECHANISM m = {CKM_ECDSA_SHA256, NULL, 0};
  pthread_mutex_lock(&D->mu);
  D->fail_status = 4;
  D->fail_count = 1;
  snprintf(D->fail_msg, sizeof(D->fail_msg), "artifact 1.2.3 has a critical CVE");
  pthread_mutex_unlock(&D->mu);
  uint8_t sig[64];
  CK_ULONG siglen = sizeof(sig);
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "x", 1, sig, &siglen), CKR_FUNCTION_REJECTED);
  fin();
  capture_end(got, n);
  setenv("SIGNBRIDGE_LOG", logfile, 1);
}

static void t_refusals(void) {
  char got[8192];
  const char *line = "signbridge: policy denied the signature for tenant t-p256: artifact 1.2.3 has a critical CVE "
                     "(POLICY_DENIED, request req-";
  /* Without SIGNBRIDGE_LOG: exactly one line on stderr, with the reason and the request id. */
  denied_once(NULL, got, sizeof(got));
  CHECK(count_of(got, line) == 1);
  CHECK(count_of(got, "\n") == 1);
  /* With the log in a file: the line still goes to stderr (the person at the terminal reads that). */
  denied_once(logfile, got, sizeof(got));
  CHECK(count_of(got, line) == 1);
  CHECK(log_contains("POLICY_DENIED: artifact 1.2.3 has a critical CVE; request id req-"));
  /* SIGNBRIDGE_LOG=off: nothing at all. */
  denied_once("off", got, sizeof(got));
  CHECK(got[0] == 0);
  /* The log on stderr already says it: no second line. */
  denied_once("error", got, sizeof(got));
  CHECK(count_of(got, "artifact 1.2.3 has a critical CVE") == 1 && count_of(got, line) == 0);

  /* Input the module refuses itself: logged (warn) with the reason, and one line on stderr. */
  init();
  CK_SESSION_HANDLE h = open_session("RSA_2048");
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
  uint8_t sig[256];
  CK_ULONG siglen = sizeof(sig);
  uint8_t sha1_di[] = {0x30, 0x21, 0x30, 0x09, 0x06, 0x05, 0x2b, 0x0e, 0x03, 0x02, 0x1a, 0x05, 0x00,
                       0x04, 0x14, 1,    2,    3,    4,    5,    6,    7,    8,    9,    10,   11,
                       12,   13,   14,   15,   16,   17,   18,   19,   20};
  CK_MECHANISM pkcs = {CKM_RSA_PKCS, NULL, 0};
  capture_begin();
  CHECK_RV(F->C_SignInit(h, &pkcs, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, sha1_di, sizeof(sha1_di), sig, &siglen), CKR_DATA_INVALID);
  CK_RSA_PKCS_PSS_PARAMS pp;
  pss_params(&pp, CKM_SHA256);
  CK_MECHANISM pss = {CKM_RSA_PKCS_PSS, &pp, sizeof(pp)};
  CHECK_RV(F->C_SignInit(h, &pss, key), CKR_OK);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, sha1_di + 15, 20, sig, &siglen), CKR_DATA_LEN_RANGE);
  CHECK_RV(F->C_SignInit(h, &pss, key), CKR_OK);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, sig, 48, sig, &siglen), CKR_DATA_LEN_RANGE);
  /* C_SignInit refusals are logged but not printed (clients probe mechanisms). */
  pp.sLen = 20;
  CHECK_RV(F->C_SignInit(h, &pss, key), CKR_MECHANISM_PARAM_INVALID);
  CK_MECHANISM sha1 = {CKM_SHA1_RSA_PKCS, NULL, 0}, ecdsa = {CKM_ECDSA, NULL, 0};
  CHECK_RV(F->C_SignInit(h, &sha1, key), CKR_MECHANISM_INVALID);
  CHECK_RV(F->C_SignInit(h, &ecdsa, key), CKR_KEY_TYPE_INCONSISTENT);
  capture_end(got, sizeof(got));
  CHECK(count_of(got, "signbridge: signature refused: CKM_RSA_PKCS input is a SHA-1 DigestInfo; SHA-1 is not "
                      "signed") == 1);
  CHECK(count_of(got, "signbridge: signature refused: CKM_RSA_PKCS_PSS input is 20 bytes (a SHA-1 digest?); it "
                      "takes a 32-byte SHA-256 digest") == 1);
  CHECK(count_of(got, "CKM_RSA_PKCS_PSS input is 48 bytes; it takes a 32-byte SHA-256 digest") == 1);
  CHECK(count_of(got, "\n") == 3);
  CHECK(log_contains("warn: signature refused (CKR 0x20): CKM_RSA_PKCS input is a SHA-1 DigestInfo"));
  CHECK(log_contains("warn: signature refused (CKR 0x21): CKM_RSA_PKCS_PSS input is 48 bytes"));
  CHECK(log_contains("C_SignInit refused: CKM_RSA_PKCS_PSS with hashAlg 0x250, mgf 0x2, sLen 20"));
  CHECK(log_contains("C_SignInit refused: CKM_SHA1_RSA_PKCS is not offered"));
  CHECK(log_contains("C_SignInit refused: CKM_ECDSA does not fit an RSA key"));
  /* CKM_ECDSA takes every SHA-2 length: the refusal names them all. */
  CK_SESSION_HANDLE he = open_session("ECC_NIST_P384");
  CHECK_RV(F->C_SignInit(he, &ecdsa, find_one(he, CKO_PRIVATE_KEY)), CKR_OK);
  siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(he, sig, 20, sig, &siglen), CKR_DATA_LEN_RANGE);
  CHECK(log_contains("CKM_ECDSA input is 20 bytes (a SHA-1 digest?); it takes a SHA-256, SHA-384 or SHA-512 digest "
                     "(32, 48 or 64 bytes) and SHA-1 is not signed"));
  fin();
}

/* Digests: known answers for "abc" (FIPS 180-2), and the operation rules. */
static int hex_is(const uint8_t *b, size_t n, const char *hex) {
  char got[200] = "";
  for (size_t i = 0; i < n && 2 * i + 2 < sizeof(got); i++) snprintf(got + 2 * i, 3, "%02x", b[i]);
  if (strcmp(got, hex) != 0) fprintf(stderr, "digest %s\n  want %s\n", got, hex);
  return strcmp(got, hex) == 0;
}

static const char SHA256_ABC[] = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
static const char SHA384_ABC[] =
    "cb00753f45a35e8bb5a03d699ac65007272c32ab0eded1631a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7";
static const char SHA512_ABC[] = "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a2192992a274fc1a836ba3c23a"
                                 "3feebbd454d4423643ce80e2a9ac94fa54ca49f";

static void t_digest(void) {
  init();
  CK_SESSION_HANDLE h = open_session("RSA_2048");
  /* Listed on every token, with CKF_DIGEST. */
  CK_MECHANISM_TYPE list[64];
  CK_ULONG n = 64;
  CHECK_RV(F->C_GetMechanismList(slot_of("ECC_NIST_P256"), list, &n), CKR_OK);
  int seen = 0;
  for (CK_ULONG i = 0; i < n; i++) seen += list[i] == CKM_SHA256 || list[i] == CKM_SHA384 || list[i] == CKM_SHA512;
  CHECK(seen == 3);
  CK_MECHANISM_INFO mi;
  CHECK_RV(F->C_GetMechanismInfo(slot_of("RSA_2048"), CKM_SHA384, &mi), CKR_OK);
  CHECK(mi.flags == CKF_DIGEST);
  CHECK_RV(F->C_GetMechanismInfo(slot_of("RSA_2048"), CKM_SHA_1, &mi), CKR_MECHANISM_INVALID);
  /* Single part: size query and short buffer keep the operation. */
  CK_MECHANISM m256 = {CKM_SHA256, NULL, 0}, m384 = {CKM_SHA384, NULL, 0}, m512 = {CKM_SHA512, NULL, 0};
  uint8_t out[64];
  CK_ULONG len = 0;
  CHECK_RV(F->C_Digest(h, (CK_BYTE_PTR) "abc", 3, out, &len), CKR_OPERATION_NOT_INITIALIZED);
  CHECK_RV(F->C_DigestInit(h, &m256), CKR_OK);
  CHECK_RV(F->C_DigestInit(h, &m384), CKR_OPERATION_ACTIVE);
  CHECK_RV(F->C_Digest(h, (CK_BYTE_PTR) "abc", 3, NULL, &len), CKR_OK);
  CHECK(len == 32);
  len = 31;
  CHECK_RV(F->C_Digest(h, (CK_BYTE_PTR) "abc", 3, out, &len), CKR_BUFFER_TOO_SMALL);
  CHECK(len == 32);
  len = sizeof(out);
  CHECK_RV(F->C_Digest(h, (CK_BYTE_PTR) "abc", 3, out, &len), CKR_OK);
  CHECK(len == 32 && hex_is(out, len, SHA256_ABC));
  CHECK_RV(F->C_Digest(h, (CK_BYTE_PTR) "abc", 3, out, &len), CKR_OPERATION_NOT_INITIALIZED);
  /* Multi-part. */
  CHECK_RV(F->C_DigestInit(h, &m384), CKR_OK);
  CHECK_RV(F->C_DigestUpdate(h, (CK_BYTE_PTR) "a", 1), CKR_OK);
  CHECK_RV(F->C_DigestUpdate(h, NULL, 0), CKR_OK);
  CHECK_RV(F->C_DigestUpdate(h, (CK_BYTE_PTR) "bc", 2), CKR_OK);
  CHECK_RV(F->C_DigestFinal(h, NULL, &len), CKR_OK);
  CHECK(len == 48);
  len = 10;
  CHECK_RV(F->C_DigestFinal(h, out, &len), CKR_BUFFER_TOO_SMALL);
  len = sizeof(out);
  CHECK_RV(F->C_DigestFinal(h, out, &len), CKR_OK);
  CHECK(len == 48 && hex_is(out, len, SHA384_ABC));
  CHECK_RV(F->C_DigestFinal(h, out, &len), CKR_OPERATION_NOT_INITIALIZED);
  CHECK_RV(F->C_DigestUpdate(h, (CK_BYTE_PTR) "a", 1), CKR_OPERATION_NOT_INITIALIZED);
  /* A digest runs beside a sign operation in the same session. */
  CK_OBJECT_HANDLE key = find_one(h, CKO_PRIVATE_KEY);
  CK_MECHANISM ms = {CKM_SHA256_RSA_PKCS, NULL, 0};
  CHECK_RV(F->C_SignInit(h, &ms, key), CKR_OK);
  CHECK_RV(F->C_DigestInit(h, &m512), CKR_OK);
  CHECK_RV(F->C_DigestUpdate(h, (CK_BYTE_PTR) "ab", 2), CKR_OK);
  uint8_t sig[256];
  CK_ULONG siglen = sizeof(sig);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "abc", 3, sig, &siglen), CKR_OK);
  CHECK_RV(F->C_DigestUpdate(h, (CK_BYTE_PTR) "c", 1), CKR_OK);
  len = sizeof(out);
  CHECK_RV(F->C_DigestFinal(h, out, &len), CKR_OK);
  CHECK(len == 64 && hex_is(out, len, SHA512_ABC));
  /* Errors end the operation: C_Digest after C_DigestUpdate, C_DigestKey, bad arguments. */
  CHECK_RV(F->C_DigestInit(h, &m256), CKR_OK);
  CHECK_RV(F->C_DigestUpdate(h, (CK_BYTE_PTR) "a", 1), CKR_OK);
  CHECK_RV(F->C_Digest(h, (CK_BYTE_PTR) "bc", 2, out, &len), CKR_OPERATION_ACTIVE);
  CHECK_RV(F->C_DigestFinal(h, out, &len), CKR_OPERATION_NOT_INITIALIZED);
  CHECK_RV(F->C_DigestInit(h, &m256), CKR_OK);
  CHECK_RV(F->C_DigestKey(h, key), CKR_KEY_INDIGESTIBLE);
  CHECK_RV(F->C_DigestFinal(h, out, &len), CKR_OPERATION_NOT_INITIALIZED);
  CHECK_RV(F->C_DigestInit(h, &m256), CKR_OK);
  CHECK_RV(F->C_DigestUpdate(h, NULL, 5), CKR_ARGUMENTS_BAD);
  CHECK_RV(F->C_DigestFinal(h, out, &len), CKR_OPERATION_NOT_INITIALIZED);
  /* C_SessionCancel ends a digest; the state of a digest cannot be saved. */
  CHECK_RV(F->C_DigestInit(h, &m256), CKR_OK);
  CHECK_RV(F->C_GetOperationState(h, NULL, &len), CKR_STATE_UNSAVEABLE);
  CHECK_RV(F->C_SessionCancel(h, CKF_DIGEST), CKR_OK);
  CHECK_RV(F->C_DigestFinal(h, out, &len), CKR_OPERATION_NOT_INITIALIZED);
  /* Refusals: no SHA-1, no parameters, no sign mechanism. */
  CK_MECHANISM sha1 = {CKM_SHA_1, NULL, 0}, withp = {CKM_SHA256, out, 4};
  CHECK_RV(F->C_DigestInit(h, &sha1), CKR_MECHANISM_INVALID);
  CHECK_RV(F->C_DigestInit(h, &ms), CKR_MECHANISM_INVALID);
  CHECK_RV(F->C_DigestInit(h, &withp), CKR_MECHANISM_PARAM_INVALID);
  CHECK_RV(F->C_DigestInit(h, NULL), CKR_ARGUMENTS_BAD);
  CHECK_RV(F->C_DigestInit(999, &m256), CKR_SESSION_HANDLE_INVALID);
  CHECK(log_contains("C_DigestInit refused: mechanism 0x220 is not a digest"));
  /* Closing a session with a digest in progress frees it (ASan checks for leaks). */
  CHECK_RV(F->C_DigestInit(h, &m256), CKR_OK);
  CHECK_RV(F->C_CloseSession(h), CKR_OK);
  fin();
}

/* ---- ML-DSA: objects, mechanism, mu computed in the module, refusals ---- */

static const char ML_DSA_MESSAGE[] = "signbridge: ML-DSA through PKCS#11";
/* mu of ML_DSA_MESSAGE under each fake key (pk[i] = i * 7 + level), computed with @noble/hashes (shake256), an
 * implementation independent of libcrypto: SHAKE256(SHAKE256(pk, 64) || 0x00 || 0x00 || M, 64). */
static const char *const ML_DSA_MU_HEX[FD_NMLDSA] = {
    "026dc1a77c29fcd1641791564af6a58a087bf734f46d4d45ec2eaafc3475831df8f6bd3c997018702400f2e10f990a94385cc30d3f2860dfdad71db5d32ef158",
    "d5e72df21751d421098ee26e35ccd6379e7e0ba335395914fd0cfd51f6f576a8cacbfbb68e945590e6c29f8728b9dc8a21e33417093203c2d7e418728a6e11c7",
    "6a89d895a59048053f34efc2a8a8efecd3391b273a5a6eecf40227a62e918e74549affaa312ebecf49014a07f5bce3cded144d11f98fd70fe954ed98913528f3",
};

static void unhex(const char *hex, uint8_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) sscanf(hex + 2 * i, "%2hhx", &out[i]);
}

/* The fake daemon lists the ML-DSA tokens after the FD_NKEYS others. */
static CK_SLOT_ID ml_dsa_slot(int i) { return (CK_SLOT_ID)(FD_NKEYS + i); }

/* The one object of class `cls` and key type `kt` in the session's token (a test fails unless there is one). */
static CK_OBJECT_HANDLE find_one_key_object(CK_SESSION_HANDLE h, CK_OBJECT_CLASS cls, CK_KEY_TYPE kt) {
  CK_ATTRIBUTE t[] = {{CKA_CLASS, &cls, sizeof(cls)}, {CKA_KEY_TYPE, &kt, sizeof(kt)}};
  CK_OBJECT_HANDLE o = 0;
  CK_ULONG n = 0;
  CHECK_RV(F->C_FindObjectsInit(h, t, 2), CKR_OK);
  CHECK_RV(F->C_FindObjects(h, &o, 1, &n), CKR_OK);
  CHECK_RV(F->C_FindObjectsFinal(h), CKR_OK);
  CHECK(n == 1);
  return o;
}

static CK_OBJECT_HANDLE find_class_in(CK_SESSION_HANDLE h, CK_OBJECT_CLASS cls) {
  return find_one_key_object(h, cls, CKK_ML_DSA);
}

/* Signs msg with CKM_ML_DSA (mech), in parts of `part` bytes when part > 0; returns the signature's length. */
static CK_ULONG ml_dsa_sign(CK_SESSION_HANDLE h, CK_OBJECT_HANDLE key, CK_MECHANISM *mech, const uint8_t *msg,
                            size_t len, size_t part, uint8_t *sig) {
  CK_ULONG siglen = 0;
  CHECK_RV(F->C_SignInit(h, mech, key), CKR_OK);
  if (!part) {
    CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR)msg, len, NULL, &siglen), CKR_OK); /* size query: no network */
    CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR)msg, len, sig, &siglen), CKR_OK);
    return siglen;
  }
  for (size_t off = 0; off < len; off += part)
    CHECK_RV(F->C_SignUpdate(h, (CK_BYTE_PTR)msg + off, len - off < part ? len - off : part), CKR_OK);
  CHECK_RV(F->C_SignFinal(h, NULL, &siglen), CKR_OK);
  CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_OK);
  return siglen;
}

static void last_mu(uint8_t mu[64]) {
  pthread_mutex_lock(&D->mu);
  CHECK(D->last_dlen == 64 && !strcmp(D->last_algorithm, "ML_DSA_SHAKE_256"));
  memcpy(mu, D->last_digest, 64);
  pthread_mutex_unlock(&D->mu);
}

static void t_ml_dsa_objects(void) {
  DSET(ml_dsa, 1);
  init();
  CK_ULONG nslots = 0;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &nslots), CKR_OK);
  CHECK(nslots == FD_NKEYS + FD_NMLDSA);
  static const CK_ULONG sets[FD_NMLDSA] = {CKP_ML_DSA_44, CKP_ML_DSA_65, CKP_ML_DSA_87};
  for (int i = 0; i < FD_NMLDSA; i++) {
    const fd_mldsa *k = &D->mldsa[i];
    CK_SESSION_HANDLE h = 0;
    CHECK_RV(F->C_OpenSession(ml_dsa_slot(i), CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_OK);
    CK_OBJECT_HANDLE priv = find_class_in(h, CKO_PRIVATE_KEY), pub = find_class_in(h, CKO_PUBLIC_KEY);
    CK_ULONG set = 0, kt = 0, gen = 0;
    CK_MECHANISM_TYPE allowed[4];
    uint8_t id[64], value[2592], spki[2700];
    CK_BBOOL sign = 0, sensitive = 0;
    CK_ATTRIBUTE pt[] = {{CKA_KEY_TYPE, &kt, sizeof(kt)},        {CKA_PARAMETER_SET, &set, sizeof(set)},
                         {CKA_VALUE, value, sizeof(value)},       {CKA_PUBLIC_KEY_INFO, spki, sizeof(spki)},
                         {CKA_ID, id, sizeof(id)},                {CKA_ALLOWED_MECHANISMS, allowed, sizeof(allowed)},
                         {CKA_KEY_GEN_MECHANISM, &gen, sizeof(gen)}};
    CHECK_RV(F->C_GetAttributeValue(h, pub, pt, 7), CKR_OK);
    CHECK(kt == CKK_ML_DSA && set == sets[i] && gen == CKM_ML_DSA_KEY_PAIR_GEN);
    CHECK(pt[2].ulValueLen == k->pk_len && !memcmp(value, k->pk, k->pk_len));
    CHECK(pt[3].ulValueLen == k->spki_len && !memcmp(spki, k->spki, k->spki_len));
    CHECK(pt[4].ulValueLen == 16 && !memcmp(id, k->id, 16));
    CHECK(pt[5].ulValueLen == sizeof(CK_MECHANISM_TYPE) && allowed[0] == CKM_ML_DSA);
    /* The private key: same id, type and parameter set; its value and seed never leave. */
    set = kt = 0;
    CK_ATTRIBUTE kt2[] = {{CKA_KEY_TYPE, &kt, sizeof(kt)}, {CKA_PARAMETER_SET, &set, sizeof(set)},
                          {CKA_SIGN, &sign, 1},            {CKA_SENSITIVE, &sensitive, 1},
                          {CKA_ID, id, sizeof(id)},        {CKA_PUBLIC_KEY_INFO, spki, sizeof(spki)}};
    CHECK_RV(F->C_GetAttributeValue(h, priv, kt2, 6), CKR_OK);
    CHECK(kt == CKK_ML_DSA && set == sets[i] && sign && sensitive && kt2[4].ulValueLen == 16);
    CHECK(kt2[5].ulValueLen == k->spki_len);
    CK_ATTRIBUTE secret[] = {{CKA_VALUE, value, sizeof(value)}, {CKA_SEED, value, sizeof(value)}};
    CHECK_RV(F->C_GetAttributeValue(h, priv, secret, 2), CKR_ATTRIBUTE_SENSITIVE);
    CHECK(secret[0].ulValueLen == CK_UNAVAILABLE_INFORMATION && secret[1].ulValueLen == CK_UNAVAILABLE_INFORMATION);
    /* Mechanisms: CKM_ML_DSA (sign only, key sizes in bytes, PKCS#11 3.2) and the digests; no RSA or EC ones. */
    CK_MECHANISM_TYPE mechs[32];
    CK_ULONG nm = 32;
    CHECK_RV(F->C_GetMechanismList(ml_dsa_slot(i), mechs, &nm), CKR_OK);
    int has_ml_dsa = 0, has_other = 0;
    for (CK_ULONG m = 0; m < nm; m++) {
      if (mechs[m] == CKM_ML_DSA) has_ml_dsa = 1;
      if (mechs[m] == CKM_RSA_PKCS || mechs[m] == CKM_ECDSA) has_other = 1;
    }
    CHECK(has_ml_dsa && !has_other);
    CK_MECHANISM_INFO info;
    CHECK_RV(F->C_GetMechanismInfo(ml_dsa_slot(i), CKM_ML_DSA, &info), CKR_OK);
    CHECK(info.ulMinKeySize == 1312 && info.ulMaxKeySize == 2592 && info.flags == CKF_SIGN);
    CHECK_RV(F->C_CloseSession(h), CKR_OK);
  }
  /* Tokens of other keys do not list CKM_ML_DSA. */
  CK_MECHANISM_TYPE mechs[32];
  CK_ULONG nm = 32;
  CHECK_RV(F->C_GetMechanismList(slot_of("RSA_2048"), mechs, &nm), CKR_OK);
  for (CK_ULONG m = 0; m < nm; m++) CHECK(mechs[m] != CKM_ML_DSA);
  fin();

  /* A RAW_PUBLIC_KEY that is not the SPKI's key: the key is left out, with the reason in the log. Without
   * RAW_PUBLIC_KEY (the SPKI alone) the key is usable. */
  DSET(ml_dsa_bad_raw, 1);
  init();
  CK_ULONG count = 0;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &count), CKR_OK);
  CK_SESSION_HANDLE h = 0;
  CHECK_RV(F->C_OpenSession(ml_dsa_slot(0), CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_OK);
  CK_OBJECT_CLASS cls = CKO_PRIVATE_KEY;
  CK_ATTRIBUTE t[] = {{CKA_CLASS, &cls, sizeof(cls)}};
  CK_OBJECT_HANDLE o;
  CK_ULONG n = 1;
  CHECK_RV(F->C_FindObjectsInit(h, t, 1), CKR_OK);
  CHECK_RV(F->C_FindObjects(h, &o, 1, &n), CKR_OK);
  CHECK_RV(F->C_FindObjectsFinal(h), CKR_OK);
  CHECK(n == 0);
  CHECK(log_contains("key ML_DSA_44 left out: RAW_PUBLIC_KEY is not the key in PUBLIC_KEY"));
  fin();
  DSET(ml_dsa_bad_raw, 0);
  DSET(ml_dsa_no_raw, 1);
  init();
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &count), CKR_OK);
  CHECK_RV(F->C_OpenSession(ml_dsa_slot(1), CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_OK);
  find_class_in(h, CKO_PRIVATE_KEY);
  fin();
}

static void t_ml_dsa_sign(void) {
  DSET(ml_dsa, 1);
  init();
  CK_ULONG nslots = 0;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &nslots), CKR_OK);
  size_t biglen = 3 * 1024 * 1024 + 17; /* a "file" far larger than a wire frame: only mu crosses the socket */
  uint8_t *big = malloc(biglen);
  REQUIRE(big);
  for (size_t i = 0; i < biglen; i++) big[i] = (uint8_t)(i * 31 + (i >> 11));
  for (int i = 0; i < FD_NMLDSA; i++) {
    const fd_mldsa *k = &D->mldsa[i];
    CK_SESSION_HANDLE h = 0, h2 = 0;
    CHECK_RV(F->C_OpenSession(ml_dsa_slot(i), CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_OK);
    CHECK_RV(F->C_OpenSession(ml_dsa_slot(i), CKF_SERIAL_SESSION, NULL, NULL, &h2), CKR_OK);
    CK_OBJECT_HANDLE key = find_class_in(h, CKO_PRIVATE_KEY);
    CK_MECHANISM plain = {CKM_ML_DSA, NULL, 0};
    uint8_t sig[SBP11_SIG_MAX_TEST], want_sig[SBP11_SIG_MAX_TEST], mu[64], want_mu[64], mu2[64];
    unhex(ML_DSA_MU_HEX[i], want_mu, 64);

    /* Size query, then a short buffer: the size, no signature made, the operation kept. */
    int signs = dcount(&D->signs);
    CK_ULONG siglen = 0;
    CHECK_RV(F->C_SignInit(h, &plain, key), CKR_OK);
    CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR)ML_DSA_MESSAGE, strlen(ML_DSA_MESSAGE), NULL, &siglen), CKR_OK);
    CHECK(siglen == k->sig_len);
    siglen = k->sig_len - 1;
    CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR)ML_DSA_MESSAGE, strlen(ML_DSA_MESSAGE), sig, &siglen), CKR_BUFFER_TOO_SMALL);
    CHECK(siglen == k->sig_len && dcount(&D->signs) == signs);
    /* Single part: the daemon gets the known mu, and the signature it made comes back whole. */
    siglen = sizeof(sig);
    CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR)ML_DSA_MESSAGE, strlen(ML_DSA_MESSAGE), sig, &siglen), CKR_OK);
    CHECK(siglen == k->sig_len && dcount(&D->signs) == signs + 1);
    last_mu(mu);
    CHECK(!memcmp(mu, want_mu, 64));
    fd_mldsa_signature(k, want_mu, want_sig);
    CHECK(!memcmp(sig, want_sig, k->sig_len));
    /* Multi-part over the same message, one byte at a time, with CK_SIGN_ADDITIONAL_CONTEXT (hedge required,
     * empty context): the same mu. */
    CK_SIGN_ADDITIONAL_CONTEXT hedged = {CKH_HEDGE_REQUIRED, NULL, 0};
    CK_MECHANISM with = {CKM_ML_DSA, &hedged, sizeof(hedged)};
    CHECK(ml_dsa_sign(h, key, &with, (const uint8_t *)ML_DSA_MESSAGE, strlen(ML_DSA_MESSAGE), 1, sig) == k->sig_len);
    last_mu(mu);
    CHECK(!memcmp(mu, want_mu, 64));
    /* A large message: single part and odd-sized parts give the same mu; neither is mu of another message. */
    CHECK(ml_dsa_sign(h, key, &plain, big, biglen, 0, sig) == k->sig_len);
    last_mu(mu);
    CHECK(ml_dsa_sign(h, key, &plain, big, biglen, 65521, sig) == k->sig_len);
    last_mu(mu2);
    CHECK(!memcmp(mu, mu2, 64) && memcmp(mu, want_mu, 64) != 0);
    fd_mldsa_signature(k, mu, want_sig);
    CHECK(!memcmp(sig, want_sig, k->sig_len));
    /* The operation state moves a half-done ML-DSA signature to another session (pkcs11-provider does so). */
    CHECK_RV(F->C_SignInit(h, &plain, key), CKR_OK);
    CHECK_RV(F->C_SignUpdate(h, (CK_BYTE_PTR)ML_DSA_MESSAGE, 10), CKR_OK);
    uint8_t state[512];
    CK_ULONG slen = sizeof(state);
    CHECK_RV(F->C_GetOperationState(h, state, &slen), CKR_OK);
    CHECK_RV(F->C_SetOperationState(h2, state, slen, CK_INVALID_HANDLE, CK_INVALID_HANDLE), CKR_OK);
    CHECK_RV(F->C_SignUpdate(h2, (CK_BYTE_PTR)ML_DSA_MESSAGE + 10, strlen(ML_DSA_MESSAGE) - 10), CKR_OK);
    siglen = sizeof(sig);
    CHECK_RV(F->C_SignFinal(h2, sig, &siglen), CKR_OK);
    last_mu(mu);
    CHECK(!memcmp(mu, want_mu, 64));
    CHECK_RV(F->C_SessionCancel(h, CKF_SIGN), CKR_OK);
    /* Pending approval: POLL repeats mu (the service hands the signature out only against it). */
    DSET(pending_polls, 2);
    int polls = dcount(&D->polls);
    CHECK(ml_dsa_sign(h, key, &plain, (const uint8_t *)ML_DSA_MESSAGE, strlen(ML_DSA_MESSAGE), 0, sig) ==
          k->sig_len);
    DSET(pending_polls, 0);
    CHECK(dcount(&D->polls) == polls + 2);
    fd_mldsa_signature(k, want_mu, want_sig);
    CHECK(!memcmp(sig, want_sig, k->sig_len));
    CHECK_RV(F->C_CloseSession(h), CKR_OK);
    CHECK_RV(F->C_CloseSession(h2), CKR_OK);
  }
  free(big);
  fin();
}

static void t_ml_dsa_refusals(void) {
  DSET(ml_dsa, 1);
  init();
  CK_ULONG nslots = 0;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &nslots), CKR_OK);
  CK_SESSION_HANDLE h = 0;
  CHECK_RV(F->C_OpenSession(ml_dsa_slot(1), CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_OK);
  CK_OBJECT_HANDLE key = find_class_in(h, CKO_PRIVATE_KEY), pub = find_class_in(h, CKO_PUBLIC_KEY);
  int signs = dcount(&D->signs);
  /* A context: mu is computed with the empty one (as KMS's EXTERNAL_MU), so a context cannot be honoured. */
  uint8_t ctx[] = "release-2026";
  CK_SIGN_ADDITIONAL_CONTEXT with_ctx = {CKH_HEDGE_PREFERRED, ctx, sizeof(ctx) - 1};
  CK_MECHANISM m = {CKM_ML_DSA, &with_ctx, sizeof(with_ctx)};
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_MECHANISM_PARAM_INVALID);
  CHECK(log_contains("C_SignInit refused: CKM_ML_DSA with a 12-byte context; the service signs ML-DSA with the "
                     "empty context"));
  /* Deterministic signing: the service signs hedged. An unknown hedge, a parameter of the wrong size: refused. */
  CK_SIGN_ADDITIONAL_CONTEXT det = {CKH_DETERMINISTIC_REQUIRED, NULL, 0};
  m.pParameter = &det;
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_MECHANISM_PARAM_INVALID);
  CHECK(log_contains("CKM_ML_DSA with CKH_DETERMINISTIC_REQUIRED; the service signs ML-DSA hedged"));
  det.hedgeVariant = 7;
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_MECHANISM_PARAM_INVALID);
  CHECK(log_contains("hedgeVariant 0x7, which is not a CKH_ value"));
  m.ulParameterLen = 4;
  CHECK_RV(F->C_SignInit(h, &m, key), CKR_MECHANISM_PARAM_INVALID);
  CHECK(log_contains("CKM_ML_DSA takes no parameter or a CK_SIGN_ADDITIONAL_CONTEXT (4 bytes given)"));
  /* Other mechanisms with an ML-DSA key, and CKM_ML_DSA with RSA and EC keys: the key type does not fit. */
  CK_MECHANISM ecdsa = {CKM_ECDSA, NULL, 0}, rsa = {CKM_SHA256_RSA_PKCS, NULL, 0}, plain = {CKM_ML_DSA, NULL, 0};
  CHECK_RV(F->C_SignInit(h, &ecdsa, key), CKR_KEY_TYPE_INCONSISTENT);
  CHECK_RV(F->C_SignInit(h, &rsa, key), CKR_KEY_TYPE_INCONSISTENT);
  CHECK(log_contains("C_SignInit refused: CKM_SHA256_RSA_PKCS does not fit an ML-DSA key (ML-DSA keys sign with "
                     "CKM_ML_DSA)"));
  CHECK_RV(F->C_SignInit(h, &plain, pub), CKR_KEY_FUNCTION_NOT_PERMITTED);
  CK_MECHANISM hash_ml_dsa = {0x23 /* CKM_HASH_ML_DSA_SHA256 */, NULL, 0};
  CHECK_RV(F->C_SignInit(h, &hash_ml_dsa, key), CKR_MECHANISM_INVALID);
  CHECK(log_contains("C_SignInit refused: mechanism 0x23 is HashML-DSA, which is not offered"));
  /* Verification is not offered, for ML-DSA as for the other keys: verify with the public key anywhere. */
  CHECK_RV(F->C_VerifyInit(h, &plain, pub), CKR_FUNCTION_NOT_SUPPORTED);
  for (int i = 0; i < 2; i++) {
    CK_SESSION_HANDLE o = open_session(i ? "ECC_NIST_P384" : "RSA_2048");
    CHECK_RV(F->C_SignInit(o, &plain, find_one(o, CKO_PRIVATE_KEY)), CKR_KEY_TYPE_INCONSISTENT);
    CHECK_RV(F->C_CloseSession(o), CKR_OK);
  }
  CHECK(log_contains("C_SignInit refused: CKM_ML_DSA does not fit an RSA key"));
  CHECK(log_contains("C_SignInit refused: CKM_ML_DSA does not fit an EC key"));
  /* None of it reached the daemon, and the session still signs. */
  CHECK(dcount(&D->signs) == signs);
  uint8_t sig[SBP11_SIG_MAX_TEST];
  CHECK(ml_dsa_sign(h, key, &plain, (const uint8_t *)"x", 1, 0, sig) == D->mldsa[1].sig_len);
  CHECK_RV(F->C_CloseSession(h), CKR_OK);
  fin();
}

/* ---- Ed25519: CKK_EC_EDWARDS, CKM_EDDSA forwarding the message (SIGN's DATA, protocol version 2) ---- */

/* The Ed25519 token comes after the FD_NKEYS others (the ML-DSA ones are not listed in these tests). */
static CK_SLOT_ID ed25519_slot(void) { return (CK_SLOT_ID)FD_NKEYS; }

static CK_OBJECT_HANDLE find_ed25519(CK_SESSION_HANDLE h, CK_OBJECT_CLASS cls) {
  return find_one_key_object(h, cls, CKK_EC_EDWARDS);
}

/* The module initialised against a daemon that also lists the Ed25519 key (DSETs made before stay), and a session
 * on the Ed25519 token; *nslots (when not NULL): how many slots with a token the module shows. */
static CK_SESSION_HANDLE open_ed25519_session(CK_ULONG *nslots) {
  DSET(ed25519, 1);
  init();
  CK_ULONG n = 0;
  CHECK_RV(F->C_GetSlotList(CK_TRUE, NULL, &n), CKR_OK);
  if (nslots) *nslots = n;
  CK_SESSION_HANDLE h = 0;
  CHECK_RV(F->C_OpenSession(ed25519_slot(), CKF_SERIAL_SESSION, NULL, NULL, &h), CKR_OK);
  return h;
}

/* Pure Ed25519 verification with libcrypto, against the fake daemon's key. */
static int ed25519_verifies(const uint8_t *msg, size_t len, const uint8_t *sig, size_t siglen) {
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  int ok = c && EVP_DigestVerifyInit(c, NULL, NULL, NULL, D->ed.pkey) > 0 &&
           EVP_DigestVerify(c, sig, siglen, msg, len) == 1;
  EVP_MD_CTX_free(c);
  return ok;
}

static void t_ed25519_objects(void) {
  CK_ULONG nslots = 0;
  CK_SESSION_HANDLE h = open_ed25519_session(&nslots);
  CHECK(nslots == FD_NKEYS + 1);
  CK_OBJECT_HANDLE priv = find_ed25519(h, CKO_PRIVATE_KEY), pub = find_ed25519(h, CKO_PUBLIC_KEY);
  uint8_t params[16], point[40], spki[64], raw[32];
  CK_MECHANISM_TYPE allowed[4];
  CK_ULONG gen = 0;
  CK_ATTRIBUTE pt[] = {{CKA_EC_PARAMS, params, sizeof(params)},
                       {CKA_EC_POINT, point, sizeof(point)},
                       {CKA_PUBLIC_KEY_INFO, spki, sizeof(spki)},
                       {CKA_ALLOWED_MECHANISMS, allowed, sizeof(allowed)},
                       {CKA_KEY_GEN_MECHANISM, &gen, sizeof(gen)}};
  CHECK_RV(F->C_GetAttributeValue(h, pub, pt, 5), CKR_OK);
  /* CKA_EC_PARAMS: the DER OID 1.3.101.112 (id-Ed25519), as SoftHSM writes it. */
  static const uint8_t oid[] = {0x06, 0x03, 0x2b, 0x65, 0x70};
  CHECK(pt[0].ulValueLen == sizeof(oid) && !memcmp(params, oid, sizeof(oid)));
  /* CKA_EC_POINT: the 32-byte key in a DER OCTET STRING. */
  size_t rawlen = sizeof(raw);
  REQUIRE(EVP_PKEY_get_raw_public_key(D->ed.pkey, raw, &rawlen) == 1 && rawlen == 32);
  CHECK(pt[1].ulValueLen == 34 && point[0] == 0x04 && point[1] == 32 && !memcmp(point + 2, raw, 32));
  CHECK(pt[2].ulValueLen == (CK_ULONG)D->ed.spki_len && !memcmp(spki, D->ed.spki, pt[2].ulValueLen));
  CHECK(pt[3].ulValueLen == sizeof(CK_MECHANISM_TYPE) && allowed[0] == CKM_EDDSA);
  CHECK(gen == CKM_EC_EDWARDS_KEY_PAIR_GEN);
  CK_BBOOL sign = 0;
  CK_ATTRIBUTE st[] = {{CKA_SIGN, &sign, 1}, {CKA_EC_PARAMS, params, sizeof(params)}};
  CHECK_RV(F->C_GetAttributeValue(h, priv, st, 2), CKR_OK);
  CHECK(sign && st[1].ulValueLen == sizeof(oid));
  CK_ATTRIBUTE secret[] = {{CKA_VALUE, raw, sizeof(raw)}};
  CHECK_RV(F->C_GetAttributeValue(h, priv, secret, 1), CKR_ATTRIBUTE_SENSITIVE);
  /* CKM_EDDSA in the token's mechanisms (sign only, 256-bit keys); no RSA, ECDSA or ML-DSA ones. */
  CK_MECHANISM_TYPE mechs[32];
  CK_ULONG nm = 32;
  CHECK_RV(F->C_GetMechanismList(ed25519_slot(), mechs, &nm), CKR_OK);
  int has_eddsa = 0, has_other = 0;
  for (CK_ULONG m = 0; m < nm; m++) {
    if (mechs[m] == CKM_EDDSA) has_eddsa = 1;
    if (mechs[m] == CKM_RSA_PKCS || mechs[m] == CKM_ECDSA || mechs[m] == CKM_ML_DSA) has_other = 1;
  }
  CHECK(has_eddsa && !has_other);
  CK_MECHANISM_INFO info;
  CHECK_RV(F->C_GetMechanismInfo(ed25519_slot(), CKM_EDDSA, &info), CKR_OK);
  CHECK(info.ulMinKeySize == 256 && info.ulMaxKeySize == 256 && info.flags == CKF_SIGN);
  nm = 32;
  CHECK_RV(F->C_GetMechanismList(slot_of("ECC_NIST_P256"), mechs, &nm), CKR_OK);
  for (CK_ULONG m = 0; m < nm; m++) CHECK(mechs[m] != CKM_EDDSA);
  CHECK_RV(F->C_CloseSession(h), CKR_OK);
  fin();
}

static void t_ed25519_sign(void) {
  CK_SESSION_HANDLE h = open_ed25519_session(NULL);
  CK_OBJECT_HANDLE key = find_ed25519(h, CKO_PRIVATE_KEY);
  static const char msg[] = "signbridge: pure Ed25519 through PKCS#11";
  size_t len = sizeof(msg) - 1;
  uint8_t sig[128], h512[64];
  SHA512((const uint8_t *)msg, len, h512);
  /* No parameter, and CK_EDDSA_PARAMS with phFlag false and no context: both pure Ed25519. */
  CK_EDDSA_PARAMS pure = {CK_FALSE, 0, NULL};
  CK_MECHANISM mechs[2] = {{CKM_EDDSA, NULL, 0}, {CKM_EDDSA, &pure, sizeof(pure)}};
  for (int i = 0; i < 2; i++) {
    CK_ULONG siglen = 0;
    CHECK_RV(F->C_SignInit(h, &mechs[i], key), CKR_OK);
    int signs = dcount(&D->signs);
    CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR)msg, len, NULL, &siglen), CKR_OK); /* size query: no network */
    CHECK(siglen == 64 && dcount(&D->signs) == signs);
    siglen = 10;
    CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR)msg, len, sig, &siglen), CKR_BUFFER_TOO_SMALL);
    CHECK(siglen == 64 && dcount(&D->signs) == signs);
    siglen = sizeof(sig);
    CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR)msg, len, sig, &siglen), CKR_OK);
    CHECK(siglen == 64 && ed25519_verifies((const uint8_t *)msg, len, sig, siglen));
    /* The daemon got the message itself as DATA, and its SHA-512 as DIGEST, with ED25519_SHA_512. */
    pthread_mutex_lock(&D->mu);
    CHECK(!strcmp(D->last_algorithm, "ED25519_SHA_512"));
    CHECK(D->last_data_len == len && !memcmp(D->last_data, msg, len));
    CHECK(D->last_dlen == 64 && !memcmp(D->last_digest, h512, 64));
    pthread_mutex_unlock(&D->mu);
  }
  /* In parts (C_SignUpdate, C_SignFinal), up to the bound of 4,096 bytes. */
  uint8_t big[4096];
  for (size_t i = 0; i < sizeof(big); i++) big[i] = (uint8_t)(i * 13);
  CK_ULONG siglen = sizeof(sig);
  CHECK_RV(F->C_SignInit(h, &mechs[0], key), CKR_OK);
  CHECK_RV(F->C_SignUpdate(h, big, 1000), CKR_OK);
  CHECK_RV(F->C_SignUpdate(h, big + 1000, sizeof(big) - 1000), CKR_OK);
  CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_OK);
  CHECK(siglen == 64 && ed25519_verifies(big, sizeof(big), sig, siglen));
  CHECK_RV(F->C_CloseSession(h), CKR_OK);
  fin();
}

static void t_ed25519_refusals(void) {
  CK_SESSION_HANDLE h = open_ed25519_session(NULL);
  CK_OBJECT_HANDLE key = find_ed25519(h, CKO_PRIVATE_KEY);
  int signs = dcount(&D->signs);
  /* Ed25519ph (phFlag) and Ed25519ctx (a context) are not what the service signs. */
  CK_BYTE ctx[] = {'c'};
  CK_EDDSA_PARAMS ph = {CK_TRUE, 0, NULL}, withctx = {CK_FALSE, 1, ctx};
  CK_MECHANISM m_ph = {CKM_EDDSA, &ph, sizeof(ph)}, m_ctx = {CKM_EDDSA, &withctx, sizeof(withctx)},
               m_short = {CKM_EDDSA, &ph, 1}, plain = {CKM_EDDSA, NULL, 0};
  CHECK_RV(F->C_SignInit(h, &m_ph, key), CKR_MECHANISM_PARAM_INVALID);
  CHECK_RV(F->C_SignInit(h, &m_ctx, key), CKR_MECHANISM_PARAM_INVALID);
  CHECK_RV(F->C_SignInit(h, &m_short, key), CKR_MECHANISM_PARAM_INVALID);
  CHECK(log_contains("asking for Ed25519ph (phFlag) or Ed25519ctx"));
  /* CKM_ECDSA on the Ed25519 key, CKM_EDDSA on an EC key: the mechanism does not fit the key. */
  CK_MECHANISM ecdsa = {CKM_ECDSA, NULL, 0};
  CHECK_RV(F->C_SignInit(h, &ecdsa, key), CKR_KEY_TYPE_INCONSISTENT);
  CK_SESSION_HANDLE hp = open_session("ECC_NIST_P256");
  CHECK_RV(F->C_SignInit(hp, &plain, find_one(hp, CKO_PRIVATE_KEY)), CKR_KEY_TYPE_INCONSISTENT);
  CHECK_RV(F->C_CloseSession(hp), CKR_OK);
  /* A message past the bound: CKR_DATA_LEN_RANGE in one part and in parts, and an empty one; nothing sent. */
  static uint8_t big[4097];
  uint8_t sig[64];
  CK_ULONG siglen = sizeof(sig);
  CHECK_RV(F->C_SignInit(h, &plain, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, big, sizeof(big), sig, &siglen), CKR_DATA_LEN_RANGE);
  CHECK(log_contains("CKM_EDDSA input is 4097 bytes; it signs a message of 1 to 4096 bytes"));
  CHECK_RV(F->C_SignInit(h, &plain, key), CKR_OK);
  CHECK_RV(F->C_SignUpdate(h, big, 4000), CKR_OK);
  CHECK_RV(F->C_SignUpdate(h, big, 97), CKR_DATA_LEN_RANGE);
  CHECK_RV(F->C_SignFinal(h, sig, &siglen), CKR_OPERATION_NOT_INITIALIZED); /* the error ended it */
  CHECK_RV(F->C_SignInit(h, &plain, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, big, 0, sig, &siglen), CKR_DATA_LEN_RANGE);
  CHECK(dcount(&D->signs) == signs);
  CHECK_RV(F->C_CloseSession(h), CKR_OK);
  fin();
}

/* A daemon that speaks only version 1 (older than DATA): the module never sends it a message to sign, and says
 * why; the other keys sign as before. */
static void t_ed25519_old_daemon(void) {
  /* The Ed25519 key listed as if a version 2 daemon had listed it before an older one took its place. */
  DSET(hello_version, 1);
  CK_SESSION_HANDLE h = open_ed25519_session(NULL);
  CK_OBJECT_HANDLE key = find_ed25519(h, CKO_PRIVATE_KEY);
  CK_MECHANISM plain = {CKM_EDDSA, NULL, 0};
  uint8_t sig[64];
  CK_ULONG siglen = sizeof(sig);
  int signs = dcount(&D->signs);
  CHECK_RV(F->C_SignInit(h, &plain, key), CKR_OK);
  CHECK_RV(F->C_Sign(h, (CK_BYTE_PTR) "m", 1, sig, &siglen), CKR_DEVICE_ERROR);
  CHECK(dcount(&D->signs) == signs);
  CHECK(log_contains("the daemon speaks wire protocol version 1, and SIGN with a message (CKM_EDDSA) needs version 2"));
  CHECK_RV(F->C_CloseSession(h), CKR_OK);
  sign_ok("ECC_NIST_P256", CKM_ECDSA_SHA256);
  fin();
}

static const struct {
  const char *name;
  void (*fn)(void);
  int needs_init_free; /* t_interfaces, t_initialize manage C_Initialize themselves */
} TESTS[] = {
    {"interfaces", t_interfaces, 0},   {"initialize", t_initialize, 0},   {"slots", t_slots, 0},
    {"objects", t_objects, 0},         {"sign_all", t_sign_all, 0},       {"sign_errors", t_sign_errors, 0},
    {"daemon_errors", t_daemon_errors, 0}, {"restart", t_restart, 0},     {"pending", t_pending, 0},
    {"operation_state", t_operation_state, 0}, {"threads", t_threads, 0}, {"fork", t_fork, 0},
    {"context", t_context, 0},         {"session_misc", t_session_misc, 0}, {"digest", t_digest, 0},
    {"refusals", t_refusals, 0},       {"daemon_wait", t_daemon_wait, 0},
    {"ml_dsa_objects", t_ml_dsa_objects, 0}, {"ml_dsa_sign", t_ml_dsa_sign, 0},
    {"ml_dsa_refusals", t_ml_dsa_refusals, 0},
    {"ed25519_objects", t_ed25519_objects, 0}, {"ed25519_sign", t_ed25519_sign, 0},
    {"ed25519_refusals", t_ed25519_refusals, 0}, {"ed25519_old_daemon", t_ed25519_old_daemon, 0},
};

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODULE.so TEST|all\n", argv[0]);
    return 2;
  }
  module_path = argv[1];
  int ran = 0;
  for (size_t i = 0; i < sizeof(TESTS) / sizeof(TESTS[0]); i++) {
    if (strcmp(argv[2], "all") && strcmp(argv[2], TESTS[i].name)) continue;
    start_daemon();
    load_module();
    int before = failures;
    TESTS[i].fn();
    if (failures != before) {
      fprintf(stderr, "--- module log (%s) ---\n", logfile);
      char cmd[400];
      snprintf(cmd, sizeof(cmd), "tail -n 40 '%s' >&2", logfile);
      if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
    }
    printf("%s %s\n", failures == before ? "ok  " : "FAIL", TESTS[i].name);
    teardown();
    ran++;
  }
  if (!ran) {
    fprintf(stderr, "no test named %s\n", argv[2]);
    return 2;
  }
  return failures ? 1 : 0;
}
