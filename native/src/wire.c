/* Wire protocol codec (versions 1 and 2: version 2 added SIGN's DATA). The message table below is docs/wire-protocol.md's, row for row; the decoder is driven
 * by it alone. */
#include "wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F(tag, kind, req, rep, min, max) \
  { SBW_T_##tag, #tag, SBW_K_##kind, req, rep, min, max, NULL, 0 }
#define N(tag, req, rep, sub) \
  { SBW_T_##tag, #tag, SBW_K_NESTED, req, rep, 0, 0, sub, sizeof(sub) / sizeof(sub[0]) }

static const sbw_spec KEY_FIELDS[] = {
    F(KEY_ID, BYTES, 1, 0, 1, 64),
    F(KEY_LABEL, STR, 1, 0, 0, 0),
    F(KEY_SPEC, STR, 1, 0, 0, 0),
    F(PUBLIC_KEY, BYTES, 1, 0, 0, 0),
    F(CERTIFICATE, BYTES, 0, 0, 0, 0),
    F(CHAIN_CERTIFICATE, BYTES, 0, 1, 0, 0),
    F(RAW_PUBLIC_KEY, BYTES, 0, 0, 0, 0), /* ML-DSA keys: the raw public key (its SPKI's BIT STRING) */
};
static const sbw_spec TOKEN_FIELDS[] = {
    F(TOKEN_LABEL, STR, 1, 0, 0, 32),
    F(TENANT, STR, 1, 0, 0, 0),
    N(KEY, 0, 1, KEY_FIELDS),
    F(STATUS, U32, 0, 0, 0, 0), /* the tenant's own failure: the token is listed without keys */
    F(MESSAGE, STR, 0, 0, 0, 0),
};
static const sbw_spec HELLO_FIELDS[] = {
    F(VERSION_MIN, U32, 1, 0, 0, 0),
    F(VERSION_MAX, U32, 1, 0, 0, 0),
    F(CLIENT, STR, 1, 0, 0, 0),
    F(PID, U32, 1, 0, 0, 0),
};
static const sbw_spec HELLO_OK_FIELDS[] = {
    F(VERSION, U32, 1, 0, 0, 0),
    F(SERVER, STR, 1, 0, 0, 0),
};
static const sbw_spec LIST_OK_FIELDS[] = {
    N(TOKEN, 0, 1, TOKEN_FIELDS),
};
static const sbw_spec SIGN_FIELDS[] = {
    F(TENANT, STR, 1, 0, 0, 0),
    F(KEY_ID, BYTES, 1, 0, 1, 64),
    F(ALGORITHM, STR, 1, 0, 0, 0),
    F(DIGEST, BYTES, 1, 0, 0, 0),
    F(DATA, BYTES, 0, 0, 1, 0), /* version 2: the message pure Ed25519 signs; DIGEST is then its SHA-512 */
    F(CTX_PROJECT, STR, 0, 0, 0, 0),
    F(CTX_ENVIRONMENT, STR, 0, 0, 0, 0),
    F(CTX_ARTIFACT_TYPE, STR, 0, 0, 0, 0),
    F(CTX_ARTIFACT_VERSION, STR, 0, 0, 0, 0),
    F(CTX_SBOM_PATH, STR, 0, 0, 0, 0),
};
static const sbw_spec SIGN_OK_FIELDS[] = {
    F(SIGNATURE, BYTES, 1, 0, 0, 0),
    F(REQUEST_ID, STR, 0, 0, 0, 0),
};
static const sbw_spec SIGN_PENDING_FIELDS[] = {
    F(REQUEST_ID, STR, 1, 0, 0, 0),
    F(STATUS_TEXT, STR, 1, 0, 0, 0),
    F(MESSAGE, STR, 1, 0, 0, 0),
    F(CONSOLE_URL, STR, 0, 0, 0, 0), /* where a person approves it; absent from daemons before it */
};
static const sbw_spec POLL_FIELDS[] = {
    F(TENANT, STR, 1, 0, 0, 0),
    F(REQUEST_ID, STR, 1, 0, 0, 0),
    F(DIGEST, BYTES, 1, 0, 0, 0),
};
static const sbw_spec ERROR_FIELDS[] = {
    F(STATUS, U32, 1, 0, 0, 0),
    F(MESSAGE, STR, 1, 0, 0, 0),
    F(REQUEST_ID, STR, 0, 0, 0, 0),
};

#define M(type, arr) \
  { SBW_##type, #type, arr, sizeof(arr) / sizeof(arr[0]) }
static const struct {
  uint8_t type;
  const char *name;
  const sbw_spec *fields;
  size_t nfields;
} MESSAGES[] = {
    M(HELLO, HELLO_FIELDS),
    {SBW_LIST, "LIST", NULL, 0},
    M(SIGN, SIGN_FIELDS),
    M(POLL, POLL_FIELDS),
    M(ERROR, ERROR_FIELDS),
    M(HELLO_OK, HELLO_OK_FIELDS),
    M(LIST_OK, LIST_OK_FIELDS),
    M(SIGN_OK, SIGN_OK_FIELDS),
    M(SIGN_PENDING, SIGN_PENDING_FIELDS),
};

const sbw_spec *sbw_message_fields(uint8_t type, size_t *nfields, const char **name) {
  for (size_t i = 0; i < sizeof(MESSAGES) / sizeof(MESSAGES[0]); i++) {
    if (MESSAGES[i].type == type) {
      *nfields = MESSAGES[i].nfields;
      if (name) *name = MESSAGES[i].name;
      /* LIST has no fields; a non-NULL pointer still says "known type". */
      return MESSAGES[i].fields ? MESSAGES[i].fields : HELLO_FIELDS;
    }
  }
  return NULL;
}

const char *sbw_status_name(uint32_t status) {
  static const char *const names[] = {
      "STATUS_0",   "BAD_REQUEST", "KEY_NOT_FOUND", "UNAUTHENTICATED",      "POLICY_DENIED",
      "UNAVAILABLE", "TIMEOUT",     "INTERNAL",      "ALGORITHM_INVALID",    "REJECTED",
      "EXPIRED",     "VERSION_UNSUPPORTED", "FORBIDDEN", "KEY_CHANGED",
  };
  return status < sizeof(names) / sizeof(names[0]) ? names[status] : "UNKNOWN_STATUS";
}

/* ---- decoding ---- */

static uint32_t be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}
static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return -1;
}

/* Strict UTF-8 (as a fatal TextDecoder): no overlong forms, no surrogates, nothing above U+10FFFF. */
static int utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t need;
    uint32_t cp, min;
    if (c >= 0xc2 && c <= 0xdf) {
      need = 1, cp = c & 0x1f, min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
      need = 2, cp = c & 0x0f, min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
      need = 3, cp = c & 0x07, min = 0x10000;
    } else {
      return 0;
    }
    if (n - i - 1 < need) return 0;
    for (size_t k = 1; k <= need; k++) {
      if ((s[i + k] & 0xc0) != 0x80) return 0;
      cp = cp << 6 | (s[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += need + 1;
  }
  return 1;
}

static void node_free(sbw_node *node) {
  if (!node) return;
  for (size_t i = 0; i < node->nitems; i++) {
    if (node->items[i].nested) {
      node_free(node->items[i].nested);
      free(node->items[i].nested);
    }
  }
  free(node->items);
  node->items = NULL;
  node->nitems = 0;
}

static const sbw_spec *spec_for(const sbw_spec *specs, size_t n, uint16_t tag) {
  for (size_t i = 0; i < n; i++)
    if (specs[i].tag == tag) return &specs[i];
  return NULL;
}

static int decode_fields(const sbw_spec *specs, size_t nspecs, const uint8_t *p, size_t len, const char *where,
                         sbw_node *out, char *err, size_t errlen) {
  out->specs = specs;
  out->nspecs = nspecs;
  out->items = NULL;
  out->nitems = 0;
  /* First pass: structure and count, so the items array is allocated once. */
  size_t off = 0, known = 0;
  while (off < len) {
    if (len - off < SBW_FIELD_HEADER) return fail(err, errlen, "%s: truncated field header at offset %zu", where, off);
    uint16_t tag = be16(p + off);
    uint32_t flen = be32(p + off + 2);
    size_t start = off + SBW_FIELD_HEADER;
    if (flen > len - start)
      return fail(err, errlen, "%s: field 0x%04x of %u bytes runs past the end", where, tag, (unsigned)flen);
    if (spec_for(specs, nspecs, tag)) known++;
    off = start + flen;
  }
  if (known == 0) goto required;
  out->items = calloc(known, sizeof(sbw_item));
  if (!out->items) return fail(err, errlen, "%s: out of memory", where);
  for (off = 0; off < len;) {
    uint16_t tag = be16(p + off);
    uint32_t flen = be32(p + off + 2);
    const uint8_t *v = p + off + SBW_FIELD_HEADER;
    off += SBW_FIELD_HEADER + (size_t)flen;
    const sbw_spec *spec = spec_for(specs, nspecs, tag);
    if (!spec) continue; /* unknown tags are ignored (forward compatibility) */
    if (!spec->repeated && sbw_get(out, tag)) goto dup;
    sbw_item *it = &out->items[out->nitems];
    it->spec = spec;
    it->p = v;
    it->len = flen;
    switch (spec->kind) {
    case SBW_K_U32:
      if (flen != 4) goto bad_u32;
      it->u32 = be32(v);
      break;
    case SBW_K_BOOL:
      if (flen != 1 || v[0] > 1) goto bad_bool;
      it->u32 = v[0];
      break;
    case SBW_K_STR:
      if (!utf8_valid(v, flen)) goto bad_utf8;
      /* fall through */
    case SBW_K_BYTES:
      if (flen < spec->min_len || (spec->max_len && flen > spec->max_len)) goto bad_bounds;
      break;
    case SBW_K_NESTED:
      it->nested = calloc(1, sizeof(sbw_node));
      if (!it->nested) goto oom;
      out->nitems++; /* owned from here on, freed with the node */
      if (decode_fields(spec->fields, spec->nfields, v, flen, spec->name, it->nested, err, errlen) != 0) goto fail;
      continue;
    }
    out->nitems++;
    continue;
  dup:
    fail(err, errlen, "%s: field %s appears twice", where, spec->name);
    goto fail;
  bad_u32:
    fail(err, errlen, "%s: %s: a u32 must be 4 bytes, got %u", where, spec->name, (unsigned)flen);
    goto fail;
  bad_bool:
    fail(err, errlen, "%s: %s: a bool must be one byte 0 or 1", where, spec->name);
    goto fail;
  bad_utf8:
    fail(err, errlen, "%s: %s: not valid UTF-8", where, spec->name);
    goto fail;
  bad_bounds:
    fail(err, errlen, "%s: %s is %u bytes, outside %u..%u", where, spec->name, (unsigned)flen,
         (unsigned)spec->min_len, (unsigned)spec->max_len);
    goto fail;
  oom:
    fail(err, errlen, "%s: out of memory", where);
    goto fail;
  }
required:
  for (size_t i = 0; i < nspecs; i++) {
    if (specs[i].required && !specs[i].repeated && !sbw_get(out, specs[i].tag)) {
      fail(err, errlen, "%s: missing %s", where, specs[i].name);
      goto fail;
    }
  }
  return 0;
fail:
  node_free(out);
  return -1;
}

int sbw_decode(uint8_t type, const uint8_t *body, size_t len, sbw_msg *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  size_t nspecs;
  const char *name;
  const sbw_spec *specs = sbw_message_fields(type, &nspecs, &name);
  if (!specs) return fail(err, errlen, "unknown message type 0x%02x", type);
  if (len + 1 > SBW_MAX_FRAME) return fail(err, errlen, "frame of %zu bytes is too large", len + 1);
  out->buf = malloc(len ? len : 1);
  if (!out->buf) return fail(err, errlen, "out of memory");
  if (len) memcpy(out->buf, body, len);
  out->type = type;
  out->name = name;
  if (decode_fields(specs, nspecs, out->buf, len, name, &out->body, err, errlen) != 0) {
    free(out->buf);
    out->buf = NULL;
    return -1;
  }
  return 0;
}

uint32_t sbw_frame_length(const uint8_t header[4]) {
  uint32_t n = be32(header);
  return (n == 0 || n > SBW_MAX_FRAME) ? 0 : n;
}

int sbw_decode_frame(const uint8_t *frame, size_t len, sbw_msg *out, char *err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  if (len < 4) return fail(err, errlen, "truncated frame header (%zu bytes)", len);
  uint32_t n = sbw_frame_length(frame);
  if (!n) return fail(err, errlen, "frame length %u is outside 1..%u", (unsigned)be32(frame), SBW_MAX_FRAME);
  if (len - 4 != n)
    return fail(err, errlen, "frame announces %u bytes, %zu present", (unsigned)n, len - 4);
  return sbw_decode(frame[4], frame + SBW_FRAME_HEADER, n - 1, out, err, errlen);
}

void sbw_msg_free(sbw_msg *msg) {
  if (!msg) return;
  node_free(&msg->body);
  free(msg->buf);
  msg->buf = NULL;
}

const sbw_item *sbw_get(const sbw_node *node, uint16_t tag) {
  for (size_t i = 0; i < node->nitems; i++)
    if (node->items[i].spec->tag == tag) return &node->items[i];
  return NULL;
}

void sbw_get_str(const sbw_node *node, uint16_t tag, char *dst, size_t dstlen) {
  const sbw_item *it = sbw_get(node, tag);
  if (!dstlen) return;
  size_t n = it ? it->len : 0;
  if (n >= dstlen) n = dstlen - 1;
  if (n) memcpy(dst, it->p, n);
  dst[n] = 0;
}

char *sbw_dup_str(const sbw_node *node, uint16_t tag) {
  const sbw_item *it = sbw_get(node, tag);
  if (!it) return NULL;
  char *s = malloc((size_t)it->len + 1);
  if (!s) return NULL;
  memcpy(s, it->p, it->len);
  s[it->len] = 0;
  return s;
}

/* ---- encoding ---- */

static void put_raw(sbw_buf *b, const void *p, size_t n) {
  if (b->failed) return;
  if (b->len + n > (size_t)SBW_MAX_FRAME + 4) {
    b->failed = 1;
    return;
  }
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n) cap *= 2;
    uint8_t *np = realloc(b->p, cap);
    if (!np) {
      b->failed = 1;
      return;
    }
    b->p = np;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
}

static void put_be32_at(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

void sbw_frame_begin(sbw_buf *b, uint8_t type) {
  b->len = 0;
  b->failed = 0;
  uint8_t h[5] = {0, 0, 0, 0, type};
  put_raw(b, h, sizeof(h));
}

void sbw_put(sbw_buf *b, uint16_t tag, const void *value, size_t len) {
  if (len > SBW_MAX_FRAME) {
    b->failed = 1;
    return;
  }
  uint8_t h[6] = {(uint8_t)(tag >> 8), (uint8_t)tag};
  put_be32_at(h + 2, (uint32_t)len);
  put_raw(b, h, sizeof(h));
  put_raw(b, value, len);
}

void sbw_put_str(sbw_buf *b, uint16_t tag, const char *s) { sbw_put(b, tag, s, strlen(s)); }

void sbw_put_u32(sbw_buf *b, uint16_t tag, uint32_t v) {
  uint8_t x[4];
  put_be32_at(x, v);
  sbw_put(b, tag, x, 4);
}

size_t sbw_nested_begin(sbw_buf *b, uint16_t tag) {
  size_t mark = b->len;
  sbw_put(b, tag, NULL, 0);
  return mark;
}

void sbw_nested_end(sbw_buf *b, size_t mark) {
  if (b->failed) return;
  put_be32_at(b->p + mark + 2, (uint32_t)(b->len - mark - SBW_FIELD_HEADER));
}

int sbw_frame_end(sbw_buf *b) {
  if (b->failed || b->len < SBW_FRAME_HEADER || b->len - 4 > SBW_MAX_FRAME) return -1;
  put_be32_at(b->p, (uint32_t)(b->len - 4));
  return 0;
}

static void encode_node(sbw_buf *b, const sbw_node *node) {
  for (size_t s = 0; s < node->nspecs; s++) {
    for (size_t i = 0; i < node->nitems; i++) {
      const sbw_item *it = &node->items[i];
      if (it->spec != &node->specs[s]) continue;
      if (it->spec->kind == SBW_K_NESTED) {
        size_t mark = sbw_nested_begin(b, it->spec->tag);
        encode_node(b, it->nested);
        sbw_nested_end(b, mark);
      } else {
        sbw_put(b, it->spec->tag, it->p, it->len);
      }
    }
  }
}

int sbw_encode_msg(const sbw_msg *msg, sbw_buf *b) {
  sbw_frame_begin(b, msg->type);
  encode_node(b, &msg->body);
  return sbw_frame_end(b);
}

void sbw_buf_free(sbw_buf *b) {
  free(b->p);
  b->p = NULL;
  b->len = b->cap = 0;
}
