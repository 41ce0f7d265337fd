/* The wire protocol between the module and the daemon (docs/wire-protocol.md): frame encoder and strict decoder.
 * The decoder trusts no length before checking it against the bytes that are really there; anything malformed
 * is a protocol error, after which the caller closes the connection. */
#ifndef SBW_WIRE_H
#define SBW_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* HELLO offers SBW_VERSION_MIN..SBW_VERSION; version 2 added SIGN's DATA (the message, for CKM_EDDSA). */
#define SBW_VERSION 2u
#define SBW_VERSION_MIN 1u
#define SBW_MESSAGE_SIGNING_VERSION 2u
#define SBW_MAX_FRAME (1024u * 1024u) /* largest value of a frame's length field (type + body) */
#define SBW_FRAME_HEADER 5u           /* u32 length + u8 type */
#define SBW_FIELD_HEADER 6u           /* u16 tag + u32 length */

enum sbw_type {
  SBW_HELLO = 0x01,
  SBW_LIST = 0x02,
  SBW_SIGN = 0x03,
  SBW_POLL = 0x04,
  SBW_ERROR = 0x7f,
  SBW_HELLO_OK = 0x81,
  SBW_LIST_OK = 0x82,
  SBW_SIGN_OK = 0x83,
  SBW_SIGN_PENDING = 0x84,
};

enum sbw_tag {
  SBW_T_VERSION_MIN = 0x0001,
  SBW_T_VERSION_MAX = 0x0002,
  SBW_T_CLIENT = 0x0003,
  SBW_T_PID = 0x0004,
  SBW_T_VERSION = 0x0005,
  SBW_T_SERVER = 0x0006,
  SBW_T_TOKEN = 0x0010,
  SBW_T_TOKEN_LABEL = 0x0011,
  SBW_T_TENANT = 0x0012,
  SBW_T_KEY = 0x0013,
  SBW_T_KEY_ID = 0x0014,
  SBW_T_KEY_LABEL = 0x0015,
  SBW_T_KEY_SPEC = 0x0016,
  SBW_T_PUBLIC_KEY = 0x0017,
  SBW_T_CERTIFICATE = 0x0018,
  SBW_T_CHAIN_CERTIFICATE = 0x0019,
  SBW_T_RAW_PUBLIC_KEY = 0x001A,
  SBW_T_ALGORITHM = 0x0020,
  SBW_T_DIGEST = 0x0021,
  SBW_T_SIGNATURE = 0x0022,
  SBW_T_REQUEST_ID = 0x0023,
  SBW_T_STATUS_TEXT = 0x0024,
  SBW_T_MESSAGE = 0x0025,
  SBW_T_STATUS = 0x0026,
  SBW_T_CONSOLE_URL = 0x0027,
  SBW_T_DATA = 0x0028,
  SBW_T_CTX_PROJECT = 0x0030,
  SBW_T_CTX_ENVIRONMENT = 0x0031,
  SBW_T_CTX_ARTIFACT_TYPE = 0x0032,
  SBW_T_CTX_ARTIFACT_VERSION = 0x0033,
  SBW_T_CTX_SBOM_PATH = 0x0034,
};

/* ERROR.STATUS values. */
enum sbw_status {
  SBW_S_BAD_REQUEST = 1,
  SBW_S_KEY_NOT_FOUND = 2,
  SBW_S_UNAUTHENTICATED = 3,
  SBW_S_POLICY_DENIED = 4,
  SBW_S_UNAVAILABLE = 5,
  SBW_S_TIMEOUT = 6,
  SBW_S_INTERNAL = 7,
  SBW_S_ALGORITHM_INVALID = 8,
  SBW_S_REJECTED = 9,
  SBW_S_EXPIRED = 10,
  SBW_S_VERSION_UNSUPPORTED = 11,
  SBW_S_FORBIDDEN = 12,
  SBW_S_KEY_CHANGED = 13,
};

enum sbw_kind { SBW_K_U32, SBW_K_BOOL, SBW_K_STR, SBW_K_BYTES, SBW_K_NESTED };

/* One row of the message table: a field a message (or a nested field) may carry. */
typedef struct sbw_spec {
  uint16_t tag;
  const char *name; /* the tag's name in the protocol document, e.g. "KEY_ID" */
  uint8_t kind;
  uint8_t required;
  uint8_t repeated;
  uint32_t min_len, max_len; /* byte bounds of str and bytes values; max 0 = no bound but the frame */
  const struct sbw_spec *fields; /* nested only */
  size_t nfields;
} sbw_spec;

typedef struct sbw_node sbw_node;

/* One decoded field. p/len point into the message's frame copy. */
typedef struct sbw_item {
  const sbw_spec *spec;
  const uint8_t *p;
  uint32_t len;
  uint32_t u32;     /* u32 and bool values */
  sbw_node *nested; /* nested values */
} sbw_item;

/* A decoded field* sequence: the known fields in the order they appeared (unknown tags are dropped). */
struct sbw_node {
  const sbw_spec *specs;
  size_t nspecs;
  sbw_item *items;
  size_t nitems;
};

typedef struct sbw_msg {
  uint8_t type;
  const char *name;
  sbw_node body;
  uint8_t *buf; /* owned copy of the body the items point into */
} sbw_msg;

/* The message table. Returns NULL for an unknown type. */
const sbw_spec *sbw_message_fields(uint8_t type, size_t *nfields, const char **name);
const char *sbw_status_name(uint32_t status);

/* Decodes a message from its type byte and body (copied). Returns 0, or -1 with a reason in err. */
int sbw_decode(uint8_t type, const uint8_t *body, size_t len, sbw_msg *out, char *err, size_t errlen);
/* Decodes exactly one complete frame, length prefix included (a golden file, a fuzz input). */
int sbw_decode_frame(const uint8_t *frame, size_t len, sbw_msg *out, char *err, size_t errlen);
/* Checks a frame header: returns the announced length (type + body), or 0 when it is out of range. */
uint32_t sbw_frame_length(const uint8_t header[4]);
void sbw_msg_free(sbw_msg *msg);

/* Lookups on a decoded node. */
const sbw_item *sbw_get(const sbw_node *node, uint16_t tag);
/* Copies a str value into a NUL-terminated buffer (truncating); "" when absent. */
void sbw_get_str(const sbw_node *node, uint16_t tag, char *dst, size_t dstlen);
/* A heap copy of a str value, NUL-terminated; NULL when absent or out of memory. */
char *sbw_dup_str(const sbw_node *node, uint16_t tag);

/* Encoder. Errors (out of memory, frame too large) are sticky and reported by sbw_frame_end. */
typedef struct sbw_buf {
  uint8_t *p;
  size_t len, cap;
  int failed;
} sbw_buf;

void sbw_frame_begin(sbw_buf *b, uint8_t type);
void sbw_put(sbw_buf *b, uint16_t tag, const void *value, size_t len);
void sbw_put_str(sbw_buf *b, uint16_t tag, const char *s);
void sbw_put_u32(sbw_buf *b, uint16_t tag, uint32_t v);
size_t sbw_nested_begin(sbw_buf *b, uint16_t tag);
void sbw_nested_end(sbw_buf *b, size_t mark);
/* Patches the frame length. Returns 0, or -1 if anything failed or the frame is over SBW_MAX_FRAME. */
int sbw_frame_end(sbw_buf *b);
/* Re-encodes a decoded message in table order (the canonical encoding). */
int sbw_encode_msg(const sbw_msg *msg, sbw_buf *b);
void sbw_buf_free(sbw_buf *b);

#endif
