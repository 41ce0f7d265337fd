/* The daemon's requests in PKCS#11 terms: LIST and SIGN (with POLL while a signature waits for approval). The one
 * place that maps wire statuses and transport failures to CKR codes. */
#ifndef SBP11_CLIENT_H
#define SBP11_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "sbp11_pkcs11.h"
#include "wire.h"

/* Reads SIGNBRIDGE_SOCKET / XDG_RUNTIME_DIR, SIGNBRIDGE_TIMEOUT, SIGNBRIDGE_APPROVAL_TIMEOUT,
 * SIGNBRIDGE_POLL_INTERVAL_MS. Cheap: no I/O. */
void sbp11_client_configure(void);

/* LIST. On success *list_ok holds the LIST_OK message (free with sbw_msg_free). On failure, why says what went
 * wrong, for the placeholder slot. */
CK_RV sbp11_client_list(sbw_msg *list_ok, char *why, size_t whylen);

typedef struct sbp11_sign_request {
  const char *tenant;
  const uint8_t *key_id;
  size_t key_id_len;
  const char *algorithm;
  const uint8_t *digest; /* with data: the SHA-512 of data, which the service records */
  size_t digest_len;
  const uint8_t *data; /* CKM_EDDSA: the message itself (SIGN's DATA, protocol version 2); NULL otherwise */
  size_t data_len;
  size_t sig_len; /* the exact signature length the key makes */
} sbp11_sign_request;

/* SIGN, then POLL while pending. Writes exactly req->sig_len bytes to sig on success. */
CK_RV sbp11_client_sign(const sbp11_sign_request *req, uint8_t *sig);

CK_RV sbp11_status_to_ckr(uint32_t status);

#endif
