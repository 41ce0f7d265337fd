/* Tokens and their objects, built from the daemon's LIST_OK: per key a private key, a public key, and the
 * certificates the daemon sends. Objects are immutable once built; the attribute rules of C_GetAttributeValue and
 * C_FindObjects live here. */
#ifndef SBP11_OBJECTS_H
#define SBP11_OBJECTS_H

#include <stddef.h>
#include <stdint.h>

#include "mech.h"
#include "sbp11_pkcs11.h"
#include "wire.h"

typedef struct sbp11_attr {
  CK_ATTRIBUTE_TYPE type;
  void *value;
  CK_ULONG len;
  int sensitive; /* exists, but its value never leaves (CKR_ATTRIBUTE_SENSITIVE) */
} sbp11_attr;

typedef struct sbp11_key {
  uint8_t id[64];
  size_t id_len;
  sbp11_keyinfo info;
  char spec[24];
} sbp11_key;

typedef struct sbp11_object {
  CK_OBJECT_CLASS cls;
  sbp11_attr *attrs;
  size_t nattrs;
  size_t key; /* index into the token's keys (private and public keys) */
} sbp11_object;

typedef struct sbp11_token {
  char label[33];
  char *tenant;
  char serial[17];
  sbp11_key *keys;
  size_t nkeys;
  sbp11_object *objects;
  size_t nobjects;
  int families; /* bit per sbp11_family present */
  uint32_t status; /* 0, or the wire status of this tenant's failure (the token then has no keys) */
} sbp11_token;

/* Builds tokens from a LIST_OK message. Keys the module cannot use (unknown spec, SPKI not matching it) are left
 * out with a warning. */
CK_RV sbp11_tokens_from_list(const sbw_msg *list_ok, sbp11_token **tokens, size_t *ntokens);
void sbp11_tokens_free(sbp11_token *tokens, size_t ntokens);

const sbp11_attr *sbp11_object_attr(const sbp11_object *o, CK_ATTRIBUTE_TYPE type);
/* C_GetAttributeValue for one object: every attribute of the template is processed. */
CK_RV sbp11_object_get_attributes(const sbp11_object *o, CK_ATTRIBUTE *tmpl, CK_ULONG count);
/* Does the object match every attribute of the template (same type, same bytes)? */
int sbp11_object_matches(const sbp11_object *o, const CK_ATTRIBUTE *tmpl, CK_ULONG count);
CK_ULONG sbp11_object_size(const sbp11_object *o);

#endif
