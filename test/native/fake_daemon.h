/* A daemon for the module's tests: speaks wire protocol v1 and v2 on a Unix socket from threads of the test process,
 * serves LIST from real keys (RSA-2048, P-256, P-384, P-521; Ed25519 on request) with certificates, signs for real
 * with libcrypto (Ed25519: pure, over SIGN's DATA),
 * and injects errors, delays, pending approvals, dropped connections and restarts on request. */
#ifndef FAKE_DAEMON_H
#define FAKE_DAEMON_H

#include <openssl/evp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define FD_NKEYS 4

typedef struct fd_key {
  const char *spec, *tenant, *token_label, *label;
  int ec_field;   /* EC: bytes per coordinate; 0 for RSA */
  int ec_hash;    /* EC: 256/384/512 */
  EVP_PKEY *pkey; /* the key pair */
  uint8_t id[16];
  uint8_t *spki, *cert;
  int spki_len, cert_len;
} fd_key;

/* ML-DSA keys (libcrypto 3.0 has no ML-DSA): a fixed public key pk[i] = i * 7 + level, and a stand-in signature
 * SHAKE256("fake ML-DSA" || mu) of the real length, so a test can check mu and what came back. The real
 * signatures are checked in test/module/ml-dsa.test.ts against the service, with @noble/post-quantum. */
#define FD_NMLDSA 3
typedef struct fd_mldsa {
  const char *spec, *tenant;
  int level;
  uint8_t id[16];
  uint8_t pk[2592], spki[2614];
  size_t pk_len, spki_len, sig_len;
} fd_mldsa;

/* The Ed25519 key (listed when fake_daemon.ed25519 is set): tenant "t-ed25519", signed for real over SIGN's DATA. */
typedef struct fd_ed25519 {
  EVP_PKEY *pkey;
  uint8_t id[16];
  uint8_t *spki;
  int spki_len;
} fd_ed25519;

typedef struct fake_daemon {
  char path[108];
  int lfd;
  int running; /* atomic */
  pthread_t acceptor;
  pthread_mutex_t mu;
  fd_key keys[FD_NKEYS];
  fd_mldsa mldsa[FD_NMLDSA];
  int ml_dsa;         /* list the ML-DSA tokens too (after the FD_NKEYS others) */
  int ml_dsa_no_raw;  /* leave RAW_PUBLIC_KEY out of their KEY fields */
  int ml_dsa_bad_raw; /* send a RAW_PUBLIC_KEY that differs from the SPKI's key */
  fd_ed25519 ed;
  int ed25519;          /* list the Ed25519 token too (after the others) */
  uint32_t hello_version; /* 0: the highest the module offers, up to 2; else always this one (an older daemon) */
  EVP_PKEY *ca;
  uint8_t *ca_cert;
  int ca_cert_len;
  struct {
    int fd;
    pthread_t th;
  } conns[512];
  int nconns;
  /* Controls (set under mu; fd_set helpers below). */
  uint32_t fail_status; /* answer the next fail_count SIGNs with ERROR(fail_status, fail_msg) */
  int fail_count;
  char fail_msg[128];
  int delay_ms;       /* before answering each SIGN */
  int pending_polls;  /* >0: SIGN goes pending; POLL answers pending this many times, then the outcome */
  uint32_t pending_outcome; /* 0: signs; else ERROR with this status */
  int drop_next;      /* close the connection instead of answering the next SIGN */
  int garbage_next;   /* answer the next SIGN with a malformed frame */
  int short_sig_next; /* answer the next SIGN with a signature one byte short */
  int wrong_type_next; /* answer the next SIGN with a well-formed LIST_OK */
  int reset_after_hello; /* the next connection: after HELLO, wait for the next request and close unread */
  int list_error;     /* answer LIST with ERROR(status) */
  int list_failed_key; /* >0: key list_failed_key-1's tenant failed on its own (token with STATUS 3, no keys) */
  /* What happened. */
  int hellos, lists, signs, polls, accepted;
  uint8_t last_digest[64];
  size_t last_dlen;
  uint8_t last_data[4200]; /* the last SIGN's DATA (the message CKM_EDDSA forwards) */
  size_t last_data_len;
  char last_algorithm[40], last_tenant[64], last_project[64], last_environment[64], last_artifact_type[64],
      last_artifact_version[64], last_sbom[256];
  /* The pending request. */
  char pend_id[40];
  int pend_key, pend_left;
  char pend_alg[40];
  uint8_t pend_digest[64];
  size_t pend_dlen;
} fake_daemon;

/* Generates the keys and certificates and starts listening at path. NULL on failure. */
fake_daemon *fd_start(const char *path);
/* Stops listening and closes every connection (a daemon that went away). */
void fd_stop(fake_daemon *d);
/* Listens again with the same keys (a restarted daemon). 0 on success. */
int fd_listen(fake_daemon *d);
void fd_free(fake_daemon *d);
const fd_key *fd_key_by_spec(const fake_daemon *d, const char *spec);
const fd_mldsa *fd_mldsa_by_spec(const fake_daemon *d, const char *spec);
/* The stand-in signature the fake daemon makes for an ML-DSA key over mu. */
void fd_mldsa_signature(const fd_mldsa *k, const uint8_t mu[64], uint8_t *sig);

#endif
