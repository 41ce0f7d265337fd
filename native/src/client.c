#include "client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "transport.h"

static int approval_timeout_s = 600;
static int poll_interval_ms = 1000;
static int daemon_wait_s = 10;
/* Set once this process has exchanged a message with the daemon (see call()). */
static int daemon_seen;
/* How long a first contact waits when the socket file does not exist: a daemon being started (its socket
 * appears within this), or a daemon restarting that removed its socket and has not bound the new one yet. */
#define FIRST_CONTACT_NO_SOCKET_WAIT_MS 2000

static long env_long(const char *name, long def, long min, long max) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || *end || n < min || n > max) {
    SBP11_WARN("%s=%s is not a number in %ld..%ld; using %ld", name, v, min, max, def);
    return def;
  }
  return n;
}

void sbp11_client_configure(void) {
  sbp11_transport_config cfg;
  memset(&cfg, 0, sizeof(cfg));
  const char *sock = getenv("SIGNBRIDGE_SOCKET");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (sock && *sock) {
    snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s", sock);
  } else if (xdg && *xdg) {
    snprintf(cfg.socket_path, sizeof(cfg.socket_path), "%s/signbridge/daemon.sock", xdg);
  } else {
    snprintf(cfg.socket_path, sizeof(cfg.socket_path), "/tmp/signbridge-%u/daemon.sock", (unsigned)getuid());
  }
  cfg.timeout_ms = (int)env_long("SIGNBRIDGE_TIMEOUT", 60, 1, 3600) * 1000;
  approval_timeout_s = (int)env_long("SIGNBRIDGE_APPROVAL_TIMEOUT", 600, 0, 7 * 86400);
  poll_interval_ms = (int)env_long("SIGNBRIDGE_POLL_INTERVAL_MS", 1000, 1, 60000);
  daemon_wait_s = (int)env_long("SIGNBRIDGE_DAEMON_WAIT_SECONDS", 10, 0, 3600);
  sbp11_transport_configure(&cfg);
  SBP11_DEBUG("socket %s, timeout %d s per exchange, approval timeout %d s, waits up to %d s for the daemon",
              cfg.socket_path, cfg.timeout_ms / 1000, approval_timeout_s, daemon_wait_s);
}

CK_RV sbp11_status_to_ckr(uint32_t status) {
  switch (status) {
  case SBW_S_BAD_REQUEST: return CKR_DATA_INVALID;
  case SBW_S_KEY_NOT_FOUND: return CKR_KEY_HANDLE_INVALID;
  case SBW_S_UNAUTHENTICATED: return CKR_USER_NOT_LOGGED_IN;
  case SBW_S_POLICY_DENIED: return CKR_FUNCTION_REJECTED;
  case SBW_S_UNAVAILABLE: return CKR_DEVICE_ERROR;
  case SBW_S_TIMEOUT: return CKR_DEVICE_ERROR;
  case SBW_S_INTERNAL: return CKR_GENERAL_ERROR;
  case SBW_S_ALGORITHM_INVALID: return CKR_KEY_FUNCTION_NOT_PERMITTED;
  case SBW_S_REJECTED: return CKR_FUNCTION_REJECTED;
  case SBW_S_EXPIRED: return CKR_FUNCTION_REJECTED;
  case SBW_S_VERSION_UNSUPPORTED: return CKR_DEVICE_ERROR;
  case SBW_S_FORBIDDEN: return CKR_USER_NOT_LOGGED_IN;
  /* The key this module holds was rotated before the service signed: nothing was signed. */
  case SBW_S_KEY_CHANGED: return CKR_KEY_CHANGED;
  }
  return CKR_GENERAL_ERROR;
}

static CK_RV io_to_ckr(int io) {
  return io == SBP11_IO_NOMEM ? CKR_HOST_MEMORY : CKR_DEVICE_ERROR;
}

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether a failed exchange may be tried again. A request the daemon surely did not serve (no connection, the
 * connection already gone before it read the request) always may; one that may have been served only when
 * asking again changes nothing: LIST and POLL may, SIGN may not (it could sign twice). Timeouts, protocol
 * errors and refusals are not retried. */
static int may_retry(int io, int resendable) {
  return io == SBP11_IO_UNREACHABLE || io == SBP11_IO_NO_SOCKET_FILE || io == SBP11_IO_UNSENT ||
         (io == SBP11_IO_BROKEN && resendable);
}

/* One request, one answer. While the daemon cannot be reached (it restarts, or is starting) the request waits up
 * to SIGNBRIDGE_DAEMON_WAIT_SECONDS, retrying with a short backoff; a pooled connection that turns out dead is
 * replaced at once (the pool is drained: its other connections lead to the same dead daemon). A request that needs
 * a newer protocol than the daemon chose (min_version) is never sent: an older daemon would not read it as meant. */
static CK_RV call_v(const sbw_buf *req, sbw_msg *resp, const char *what, int resendable, uint32_t min_version,
                    char *why, size_t whylen) {
  long long start = now_ms();
  long long deadline = start + (long long)daemon_wait_s * 1000;
  int io = SBP11_IO_OK, nap_ms = 50, waited = 0, pooled_retries = 0;
  for (;;) {
    sbp11_conn *c;
    int fresh = 1;
    io = sbp11_conn_get(&c, &fresh, why, whylen);
    if (io == SBP11_IO_OK && c->version < min_version) {
      snprintf(why, whylen, "the daemon speaks wire protocol version %u, and %s needs version %u; update the "
               "signbridge daemon", (unsigned)c->version, what, (unsigned)min_version);
      sbp11_conn_put(c);
      SBP11_ERR("%s: %s", what, why);
      return CKR_DEVICE_ERROR;
    }
    if (io == SBP11_IO_OK) {
      io = sbp11_exchange(c, req, resp, why, whylen);
      if (io == SBP11_IO_OK) {
        sbp11_conn_put(c);
        __atomic_store_n(&daemon_seen, 1, __ATOMIC_RELAXED);
        if (waited) SBP11_INFO("%s: the daemon is back", what);
        return CKR_OK;
      }
      sbp11_conn_close(c);
    }
    if (!may_retry(io, resendable)) break;
    if (!fresh && pooled_retries++ < 16) { /* a pooled connection of a daemon since restarted: a fresh one now */
      SBP11_INFO("%s: %s; reconnecting", what, why);
      sbp11_pool_drain();
      continue;
    }
    /* A process that has never reached the daemon, finding no socket file at all, waits only for a daemon that is
     * just starting: with none running, every tool that lists tokens (p11-kit loads every registered module) would
     * otherwise stall for the whole wait. A socket file nobody listens on (a daemon restarting), or a daemon this
     * process has already talked to, gets the whole wait. */
    if (!__atomic_load_n(&daemon_seen, __ATOMIC_RELAXED) && io == SBP11_IO_NO_SOCKET_FILE &&
        deadline > start + FIRST_CONTACT_NO_SOCKET_WAIT_MS)
      deadline = start + FIRST_CONTACT_NO_SOCKET_WAIT_MS;
    long long left = deadline - now_ms();
    if (left <= 0) break;
    if (!waited) SBP11_INFO("%s: %s; waiting up to %d s for the daemon (SIGNBRIDGE_DAEMON_WAIT_SECONDS)", what, why,
                            daemon_wait_s);
    waited = 1;
    usleep((useconds_t)(left < nap_ms ? left : nap_ms) * 1000);
    nap_ms = nap_ms * 2 > 500 ? 500 : nap_ms * 2;
  }
  if (io == SBP11_IO_BROKEN && !resendable) {
    snprintf(why, whylen, "the daemon closed the connection after the request was sent and before answering; the "
             "signature may have been made, so it is not requested again");
  } else if ((io == SBP11_IO_UNREACHABLE || io == SBP11_IO_NO_SOCKET_FILE) && daemon_wait_s > 0) {
    size_t n = strlen(why);
    snprintf(why + n, whylen - n, " (waited %.1f s)", (double)(now_ms() - start) / 1000.0);
  }
  SBP11_ERR("%s: %s (daemon socket %s)", what, why, sbp11_transport_socket_path());
  return io_to_ckr(io);
}

static CK_RV call(const sbw_buf *req, sbw_msg *resp, const char *what, int resendable, char *why, size_t whylen) {
  return call_v(req, resp, what, resendable, SBW_VERSION_MIN, why, whylen);
}

/* What the person running the tool is told when the service refuses a signature. */
static const char *refusal_phrase(uint32_t status) {
  switch (status) {
  case SBW_S_POLICY_DENIED: return "policy denied the signature";
  case SBW_S_REJECTED: return "an approver rejected the signature";
  case SBW_S_EXPIRED: return "the signature request expired before anyone approved it";
  case SBW_S_UNAUTHENTICATED: return "the daemon has no valid credentials";
  case SBW_S_FORBIDDEN: return "the daemon's credentials may not sign";
  case SBW_S_KEY_NOT_FOUND: return "the key is gone (rotated or removed; reload the token)";
  case SBW_S_KEY_CHANGED: return "the key was rotated before it signed; nothing was signed (reload the token)";
  case SBW_S_UNAVAILABLE: return "the signing service cannot be reached (retry later)";
  case SBW_S_TIMEOUT: return "the signing service did not answer in time (retry later)";
  }
  return "the signature failed";
}

/* An ERROR answer: logged in full; for a signature (tenant set) also the one-line notice. */
static CK_RV error_answer(const sbw_msg *m, const char *what, const char *tenant) {
  uint32_t status = sbw_get(&m->body, SBW_T_STATUS)->u32;
  char msg[512], rid[128];
  sbw_get_str(&m->body, SBW_T_MESSAGE, msg, sizeof(msg));
  sbw_get_str(&m->body, SBW_T_REQUEST_ID, rid, sizeof(rid));
  CK_RV rv = sbp11_status_to_ckr(status);
  SBP11_ERR("%s failed: %s: %s%s%s (CKR 0x%lx)", what, sbw_status_name(status), msg, rid[0] ? "; request id " : "",
            rid, (unsigned long)rv);
  if (tenant)
    sbp11_notice("%s for tenant %s: %s (%s%s%s)", refusal_phrase(status), tenant, msg[0] ? msg : "no reason given",
                 sbw_status_name(status), rid[0] ? ", request " : "", rid);
  return rv;
}

CK_RV sbp11_client_list(sbw_msg *out, char *why, size_t whylen) {
  sbw_buf b = {0};
  sbw_frame_begin(&b, SBW_LIST);
  if (sbw_frame_end(&b) != 0) {
    sbw_buf_free(&b);
    return CKR_HOST_MEMORY;
  }
  CK_RV rv = call(&b, out, "LIST", 1, why, whylen);
  sbw_buf_free(&b);
  if (rv != CKR_OK) return rv;
  if (out->type == SBW_LIST_OK) return CKR_OK;
  if (out->type == SBW_ERROR) {
    rv = error_answer(out, "LIST", NULL);
    char msg[200];
    sbw_get_str(&out->body, SBW_T_MESSAGE, msg, sizeof(msg));
    snprintf(why, whylen, "%s: %s", sbw_status_name(sbw_get(&out->body, SBW_T_STATUS)->u32), msg);
  } else {
    snprintf(why, whylen, "protocol error: %s in answer to LIST", out->name);
    SBP11_ERR("%s", why);
    rv = CKR_DEVICE_ERROR;
  }
  sbw_msg_free(out);
  return rv;
}

static void put_context(sbw_buf *b) {
  static const struct {
    const char *env;
    uint16_t tag;
  } ctx[] = {
      {"SIGNBRIDGE_PROJECT", SBW_T_CTX_PROJECT},
      {"SIGNBRIDGE_ENVIRONMENT", SBW_T_CTX_ENVIRONMENT},
      {"SIGNBRIDGE_ARTIFACT_TYPE", SBW_T_CTX_ARTIFACT_TYPE},
      {"SIGNBRIDGE_ARTIFACT_VERSION", SBW_T_CTX_ARTIFACT_VERSION},
      {"SIGNBRIDGE_SBOM", SBW_T_CTX_SBOM_PATH},
  };
  for (size_t i = 0; i < sizeof(ctx) / sizeof(ctx[0]); i++) {
    const char *v = getenv(ctx[i].env);
    if (v && *v) sbw_put_str(b, ctx[i].tag, v);
  }
}

/* SIGN_OK: the signature must have exactly the key's length (fixed-width r||s for ECDSA). */
static CK_RV take_signature(const sbw_msg *m, const sbp11_sign_request *req, uint8_t *sig) {
  const sbw_item *s = sbw_get(&m->body, SBW_T_SIGNATURE);
  char rid[128];
  sbw_get_str(&m->body, SBW_T_REQUEST_ID, rid, sizeof(rid));
  if (s->len != req->sig_len) {
    SBP11_ERR("SIGN: the daemon sent a %u-byte signature, the key makes %zu bytes (request id %s)",
              (unsigned)s->len, req->sig_len, rid[0] ? rid : "none");
    sbp11_notice("cannot sign for tenant %s: the daemon sent a signature of the wrong length (request %s)",
                 req->tenant, rid[0] ? rid : "none");
    return CKR_DEVICE_ERROR;
  }
  memcpy(sig, s->p, s->len);
  SBP11_INFO("signed with tenant %s's key (%s)%s%s", req->tenant, req->algorithm, rid[0] ? ", request id " : "", rid);
  return CKR_OK;
}

CK_RV sbp11_client_sign(const sbp11_sign_request *req, uint8_t *sig) {
  sbw_buf b = {0};
  sbw_frame_begin(&b, SBW_SIGN);
  sbw_put_str(&b, SBW_T_TENANT, req->tenant);
  sbw_put(&b, SBW_T_KEY_ID, req->key_id, req->key_id_len);
  sbw_put_str(&b, SBW_T_ALGORITHM, req->algorithm);
  sbw_put(&b, SBW_T_DIGEST, req->digest, req->digest_len);
  if (req->data) sbw_put(&b, SBW_T_DATA, req->data, req->data_len);
  put_context(&b);
  if (sbw_frame_end(&b) != 0) {
    sbw_buf_free(&b);
    return CKR_HOST_MEMORY;
  }
  char why[300] = "";
  sbw_msg m;
  CK_RV rv = call_v(&b, &m, req->data ? "SIGN with a message (CKM_EDDSA)" : "SIGN", 0,
                    req->data ? SBW_MESSAGE_SIGNING_VERSION : SBW_VERSION_MIN, why, sizeof(why));
  sbw_buf_free(&b);
  if (rv != CKR_OK) {
    sbp11_notice("cannot sign for tenant %s: %s", req->tenant, why);
    return rv;
  }

  long long deadline = now_ms() + (long long)approval_timeout_s * 1000;
  char rid[256] = "";
  for (;;) {
    if (m.type == SBW_SIGN_OK) {
      rv = take_signature(&m, req, sig);
      break;
    }
    if (m.type == SBW_ERROR) {
      rv = error_answer(&m, rid[0] ? "POLL" : "SIGN", req->tenant);
      break;
    }
    if (m.type != SBW_SIGN_PENDING) {
      SBP11_ERR("protocol error: %s in answer to SIGN", m.name);
      sbp11_notice("cannot sign for tenant %s: the daemon answered with %s (protocol error)", req->tenant, m.name);
      rv = CKR_DEVICE_ERROR;
      break;
    }
    char status[64], msg[512], console_url[512];
    int first = !rid[0];
    sbw_get_str(&m.body, SBW_T_REQUEST_ID, rid, sizeof(rid));
    sbw_get_str(&m.body, SBW_T_STATUS_TEXT, status, sizeof(status));
    sbw_get_str(&m.body, SBW_T_MESSAGE, msg, sizeof(msg));
    sbw_get_str(&m.body, SBW_T_CONSOLE_URL, console_url, sizeof(console_url));
    sbw_msg_free(&m);
    long long left = deadline - now_ms();
    if (first) {
      /* Once per signature, not per poll: the person at the terminal learns why the tool is quiet, and where to
       * approve (the daemon names the console page; a daemon without one, or before it, names none). */
      const char *what = !strcmp(status, "pending_security_review") ? "security review" : "approval";
      SBP11_WARN("signature for tenant %s waits for %s: request id %s (%s): %s; %s%s; waiting up to %d s", req->tenant,
                 what, rid, status, msg, console_url[0] ? "approve it at " : "approve it with approve_sign",
                 console_url, approval_timeout_s);
      sbp11_notice_logged_at(SBP11_LOG_WARN, "signature for tenant %s waits for %s: request %s (%s); %s%s; waiting up "
                             "to %d s (SIGNBRIDGE_APPROVAL_TIMEOUT)", req->tenant, what, rid, status,
                             console_url[0] ? "approve it at " : "approve it with approve_sign", console_url,
                             approval_timeout_s);
    } else {
      SBP11_INFO("request %s still %s (%lld s left)", rid, status, left > 0 ? left / 1000 : 0);
    }
    if (left <= 0) {
      SBP11_ERR("request %s was not approved within %d s (SIGNBRIDGE_APPROVAL_TIMEOUT); giving up", rid,
                approval_timeout_s);
      sbp11_notice("signature for tenant %s not approved within %d s (SIGNBRIDGE_APPROVAL_TIMEOUT); it stays "
                   "pending at the service (request %s)", req->tenant, approval_timeout_s, rid);
      return CKR_FUNCTION_REJECTED;
    }
    long long t0 = now_ms();
    sbw_frame_begin(&b, SBW_POLL);
    sbw_put_str(&b, SBW_T_TENANT, req->tenant);
    sbw_put_str(&b, SBW_T_REQUEST_ID, rid);
    sbw_put(&b, SBW_T_DIGEST, req->digest, req->digest_len);
    if (sbw_frame_end(&b) != 0) {
      sbw_buf_free(&b);
      return CKR_HOST_MEMORY;
    }
    rv = call(&b, &m, "POLL", 1, why, sizeof(why));
    sbw_buf_free(&b);
    if (rv != CKR_OK) {
      sbp11_notice("cannot learn the outcome of request %s for tenant %s: %s", rid, req->tenant, why);
      return rv;
    }
    /* The daemon may hold a POLL back for a while; when it answers at once, do not poll busily. */
    long long took = now_ms() - t0;
    if (m.type == SBW_SIGN_PENDING && took < poll_interval_ms) {
      long long nap = poll_interval_ms - took;
      if (nap > deadline - now_ms()) nap = deadline - now_ms();
      if (nap > 0) usleep((useconds_t)(nap * 1000));
    }
  }
  sbw_msg_free(&m);
  return rv;
}
