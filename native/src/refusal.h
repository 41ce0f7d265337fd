/* Why the module refused a signature before asking the daemon: one log line per refusal (warn, so any
 * SIGNBRIDGE_LOG level shows it), and for input refused at C_Sign also the one-line notice on stderr. Only
 * lengths, mechanisms and parameters are described, never the data. */
#ifndef SBP11_REFUSAL_H
#define SBP11_REFUSAL_H

#include <stddef.h>
#include <stdint.h>

#include "mech.h"

/* C_SignInit refused with rv. key is NULL when the handle is not a private key. No notice: clients probe. */
void sbp11_refusal_sign_init(CK_RV rv, const CK_MECHANISM *m, const sbp11_keyinfo *key, CK_OBJECT_HANDLE hkey);
/* C_Sign/C_SignFinal/C_SignUpdate refused the input (CKR_DATA_INVALID, CKR_DATA_LEN_RANGE). */
void sbp11_refusal_input(CK_RV rv, const sbp11_signplan *plan, const sbp11_keyinfo *key, const uint8_t *in,
                         size_t len);

#endif
