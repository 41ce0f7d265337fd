/* Decodes every golden frame of test/golden/wire/ and compares it with the JSON beside it; every bad-*.hex must be
 * a protocol error. Frames not marked "lenient" must also re-encode to the same bytes. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

/* ---- a small JSON parser: enough for the golden files (objects, arrays, strings, integers, booleans) ---- */
typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;
typedef struct jval {
  jtype t;
  double num;
  char *str; /* J_STR; key for object members */
  struct jval *kids; /* J_ARR elements / J_OBJ members */
  char **keys;
  size_t n;
} jval;

static const char *js;
static int jerr;

static void ws(void) {
  while (*js == ' ' || *js == '\n' || *js == '\r' || *js == '\t') js++;
}

static char *jstring(void) {
  if (*js != '"') return jerr = 1, NULL;
  js++;
  size_t cap = 64, n = 0;
  char *s = malloc(cap);
  while (*js && *js != '"') {
    unsigned cp = (unsigned char)*js++;
    if (cp == '\\') {
      char e = *js++;
      switch (e) {
      case 'n': cp = '\n'; break;
      case 't': cp = '\t'; break;
      case 'r': cp = '\r'; break;
      case 'b': cp = '\b'; break;
      case 'f': cp = '\f'; break;
      case 'u': {
        unsigned v = 0;
        for (int i = 0; i < 4; i++) {
          char h = *js++;
          v = v * 16 + (unsigned)(h >= 'a' ? h - 'a' + 10 : h >= 'A' ? h - 'A' + 10 : h - '0');
        }
        cp = v;
        break;
      }
      default: cp = (unsigned char)e;
      }
      if (cp >= 0x80) { /* encode as UTF-8 (no surrogate pairs in our files) */
        char tmp[4];
        size_t k = 0;
        if (cp < 0x800) {
          tmp[k++] = (char)(0xc0 | cp >> 6);
        } else {
          tmp[k++] = (char)(0xe0 | cp >> 12);
          tmp[k++] = (char)(0x80 | ((cp >> 6) & 0x3f));
        }
        tmp[k++] = (char)(0x80 | (cp & 0x3f));
        for (size_t i = 0; i < k; i++) {
          if (n + 2 > cap) s = realloc(s, cap *= 2);
          s[n++] = tmp[i];
        }
        continue;
      }
    }
    if (n + 2 > cap) s = realloc(s, cap *= 2);
    s[n++] = (char)cp;
  }
  if (*js != '"') return jerr = 1, s;
  js++;
  s[n] = 0;
  return s;
}

static void jparse(jval *v) {
  memset(v, 0, sizeof(*v));
  ws();
  if (*js == '{' || *js == '[') {
    int obj = *js == '{';
    char close = obj ? '}' : ']';
    v->t = obj ? J_OBJ : J_ARR;
    js++;
    ws();
    if (*js == close) {
      js++;
      return;
    }
    for (;;) {
      v->kids = realloc(v->kids, (v->n + 1) * sizeof(jval));
      v->keys = realloc(v->keys, (v->n + 1) * sizeof(char *));
      v->keys[v->n] = NULL;
      if (obj) {
        ws();
        v->keys[v->n] = jstring();
        ws();
        if (*js++ != ':') jerr = 1;
      }
      jparse(&v->kids[v->n++]);
      ws();
      if (*js == ',') {
        js++;
        continue;
      }
      if (*js == close) {
        js++;
        return;
      }
      jerr = 1;
      return;
    }
  } else if (*js == '"') {
    v->t = J_STR;
    v->str = jstring();
  } else if (!strncmp(js, "true", 4) || !strncmp(js, "false", 5)) {
    v->t = J_BOOL;
    v->num = *js == 't';
    js += *js == 't' ? 4 : 5;
  } else if (!strncmp(js, "null", 4)) {
    js += 4;
  } else {
    char *end;
    v->t = J_NUM;
    v->num = strtod(js, &end);
    if (end == js) jerr = 1;
    js = end;
  }
}

static void jfree(jval *v) {
  for (size_t i = 0; i < v->n; i++) {
    jfree(&v->kids[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->kids);
  free(v->keys);
  free(v->str);
}

static const jval *jget(const jval *obj, const char *key) {
  if (!obj || obj->t != J_OBJ) return NULL;
  for (size_t i = 0; i < obj->n; i++)
    if (!strcmp(obj->keys[i], key)) return &obj->kids[i];
  return NULL;
}

/* ---- comparison of a decoded node with its JSON ---- */
static char why[512];

static int value_matches(const sbw_item *it, const jval *j) {
  switch (it->spec->kind) {
  case SBW_K_U32:
    return j->t == J_NUM && j->num == (double)it->u32;
  case SBW_K_BOOL:
    return j->t == J_BOOL && (j->num != 0) == (it->u32 != 0);
  case SBW_K_STR:
    return j->t == J_STR && strlen(j->str) == it->len && !memcmp(j->str, it->p, it->len);
  case SBW_K_BYTES: {
    if (j->t != J_STR || strlen(j->str) != 2 * (size_t)it->len) return 0;
    for (uint32_t i = 0; i < it->len; i++) {
      char hx[3];
      snprintf(hx, sizeof(hx), "%02x", it->p[i]);
      if (strncmp(hx, j->str + 2 * i, 2)) return 0;
    }
    return 1;
  }
  }
  return 0;
}

static int node_matches(const sbw_node *node, const jval *j, const char *where);

static int item_matches(const sbw_item *it, const jval *j, const char *where) {
  if (it->spec->kind == SBW_K_NESTED) return node_matches(it->nested, j, it->spec->name);
  if (!value_matches(it, j)) {
    snprintf(why, sizeof(why), "%s.%s differs", where, it->spec->name);
    return 0;
  }
  return 1;
}

static int node_matches(const sbw_node *node, const jval *j, const char *where) {
  if (!j || j->t != J_OBJ) {
    snprintf(why, sizeof(why), "%s: JSON is not an object", where);
    return 0;
  }
  size_t named = 0;
  for (size_t s = 0; s < node->nspecs; s++) {
    const sbw_spec *spec = &node->specs[s];
    const jval *jv = jget(j, spec->name);
    size_t count = 0;
    for (size_t i = 0; i < node->nitems; i++) {
      const sbw_item *it = &node->items[i];
      if (it->spec != spec) continue;
      if (spec->repeated) {
        if (!jv || jv->t != J_ARR || count >= jv->n) {
          snprintf(why, sizeof(why), "%s.%s: more values decoded than in the JSON", where, spec->name);
          return 0;
        }
        if (!item_matches(it, &jv->kids[count], where)) return 0;
      } else {
        if (!jv) {
          snprintf(why, sizeof(why), "%s.%s decoded but not in the JSON", where, spec->name);
          return 0;
        }
        if (!item_matches(it, jv, where)) return 0;
      }
      count++;
    }
    if (jv) named++;
    if (spec->repeated && jv && (jv->t != J_ARR || jv->n != count)) {
      snprintf(why, sizeof(why), "%s.%s: %zu values decoded, JSON differs", where, spec->name, count);
      return 0;
    }
    if (!spec->repeated && jv && count == 0) {
      snprintf(why, sizeof(why), "%s.%s in the JSON but not decoded", where, spec->name);
      return 0;
    }
  }
  if (named != j->n) {
    snprintf(why, sizeof(why), "%s: the JSON names fields the message does not have", where);
    return 0;
  }
  return 1;
}

/* ---- files ---- */
static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  buf[got] = 0;
  if (len) *len = got;
  return buf;
}

/* Hex with whitespace and '#' comments (to the end of the line) ignored. */
static uint8_t *read_hex(const char *path, size_t *len) {
  char *text = slurp(path, NULL);
  if (!text) return NULL;
  uint8_t *out = malloc(strlen(text) / 2 + 1);
  size_t n = 0;
  int half = -1;
  for (const char *p = text; *p; p++) {
    if (*p == '#') {
      while (*p && *p != '\n') p++;
      if (!*p) break;
      continue;
    }
    int v;
    if (*p >= '0' && *p <= '9') v = *p - '0';
    else if (*p >= 'a' && *p <= 'f') v = *p - 'a' + 10;
    else if (*p >= 'A' && *p <= 'F') v = *p - 'A' + 10;
    else continue;
    if (half < 0) half = v;
    else out[n++] = (uint8_t)(half << 4 | v), half = -1;
  }
  free(text);
  *len = n;
  return out;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : "test/golden/wire";
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "cannot open %s\n", dir);
    return 1;
  }
  char *names[256];
  size_t count = 0;
  struct dirent *e;
  while ((e = readdir(d)) && count < 256) {
    size_t l = strlen(e->d_name);
    if (l > 4 && !strcmp(e->d_name + l - 4, ".hex")) names[count++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, count, sizeof(char *), cmp);
  int failures = 0, good = 0, bad = 0;
  for (size_t i = 0; i < count; i++) {
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
    size_t len = 0;
    uint8_t *frame = read_hex(path, &len);
    if (!frame) {
      printf("FAIL %s: unreadable\n", names[i]);
      failures++;
      continue;
    }
    sbw_msg msg;
    char err[256] = "";
    int rc = sbw_decode_frame(frame, len, &msg, err, sizeof(err));
    if (!strncmp(names[i], "bad-", 4)) {
      bad++;
      if (rc == 0) {
        printf("FAIL %s: decoded, but must be a protocol error\n", names[i]);
        sbw_msg_free(&msg);
        failures++;
      } else {
        printf("ok   %s: rejected (%s)\n", names[i], err);
      }
      free(frame);
      continue;
    }
    good++;
    if (rc != 0) {
      printf("FAIL %s: %s\n", names[i], err);
      failures++;
      free(frame);
      continue;
    }
    snprintf(path + strlen(path) - 4, 6, ".json");
    char *text = slurp(path, NULL);
    jval doc;
    js = text ? text : "";
    jerr = !text;
    jparse(&doc);
    const jval *type = jget(&doc, "type"), *fields = jget(&doc, "fields"), *lenient = jget(&doc, "lenient");
    jval empty = {.t = J_OBJ};
    if (!fields) fields = &empty;
    why[0] = 0;
    if (jerr || !type || type->t != J_STR) {
      printf("FAIL %s: bad JSON beside it\n", names[i]);
      failures++;
    } else if (strcmp(type->str, msg.name)) {
      printf("FAIL %s: type %s, JSON says %s\n", names[i], msg.name, type->str);
      failures++;
    } else if (!node_matches(&msg.body, fields, msg.name)) {
      printf("FAIL %s: %s\n", names[i], why);
      failures++;
    } else {
      sbw_buf b = {0};
      if (!(lenient && lenient->t == J_BOOL && lenient->num) &&
          (sbw_encode_msg(&msg, &b) != 0 || b.len != len || memcmp(b.p, frame, len))) {
        printf("FAIL %s: does not re-encode to the same bytes\n", names[i]);
        failures++;
      } else {
        printf("ok   %s\n", names[i]);
      }
      sbw_buf_free(&b);
    }
    jfree(&doc);
    free(text);
    sbw_msg_free(&msg);
    free(frame);
  }
  for (size_t i = 0; i < count; i++) free(names[i]);
  printf("%d good frames, %d bad frames, %d failures\n", good, bad, failures);
  if (good < 9 || bad < 5) {
    printf("FAIL: expected at least one frame per message type and five bad frames\n");
    return 1;
  }
  return failures ? 1 : 0;
}
