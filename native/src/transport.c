#include "transport.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define SBP11_POOL_MAX 8

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static sbp11_conn *pool;
static size_t pool_size;
static sbp11_transport_config config = {"", 60000};

void sbp11_transport_configure(const sbp11_transport_config *cfg) {
  pthread_mutex_lock(&pool_lock);
  config = *cfg;
  pthread_mutex_unlock(&pool_lock);
}

const char *sbp11_transport_socket_path(void) { return config.socket_path; }
int sbp11_transport_timeout_ms(void) { return config.timeout_ms; }

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for fd to be ready until deadline. 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, long long deadline) {
  for (;;) {
    long long left = deadline - now_ms();
    if (left <= 0) return 0;
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, left > 1000000 ? 1000000 : (int)left);
    if (r > 0) return 1;
    if (r == 0) continue;
    if (errno != EINTR) return -1;
  }
}

static int write_all(int fd, const uint8_t *p, size_t n, long long deadline) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w, n -= (size_t)w;
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int r = wait_fd(fd, POLLOUT, deadline);
      if (r == 0) return SBP11_IO_TIMEOUT;
      if (r < 0) return SBP11_IO_BROKEN;
      continue;
    }
    return SBP11_IO_BROKEN;
  }
  return SBP11_IO_OK;
}

/* Reads exactly n bytes before the deadline. EOF or a socket error is BROKEN, except a reset: a Unix socket
 * closed by its owner with our bytes still unread reports ECONNRESET, so the daemon never read the request (it
 * closes a connection that is serving one only after answering it). */
static int read_all(int fd, uint8_t *p, size_t n, long long deadline) {
  while (n) {
    ssize_t r = recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r, n -= (size_t)r;
      continue;
    }
    if (r == 0) return SBP11_IO_BROKEN;
    if (errno == ECONNRESET) return SBP11_IO_UNSENT;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      int w = wait_fd(fd, POLLIN, deadline);
      if (w == 0) return SBP11_IO_TIMEOUT;
      if (w < 0) return SBP11_IO_BROKEN;
      continue;
    }
    return SBP11_IO_BROKEN;
  }
  return SBP11_IO_OK;
}

int sbp11_exchange(sbp11_conn *c, const sbw_buf *request, sbw_msg *response, char *why, size_t whylen) {
  long long deadline = now_ms() + config.timeout_ms;
  int rc = write_all(c->fd, request->p, request->len, deadline);
  if (rc != SBP11_IO_OK) {
    snprintf(why, whylen, "%s while sending", rc == SBP11_IO_TIMEOUT ? "timed out" : strerror(errno));
    /* A daemon that is gone cannot have read a frame it did not get whole. */
    return rc == SBP11_IO_BROKEN ? SBP11_IO_UNSENT : rc;
  }
  uint8_t header[SBW_FRAME_HEADER];
  rc = read_all(c->fd, header, sizeof(header), deadline);
  if (rc != SBP11_IO_OK) {
    snprintf(why, whylen, "%s",
             rc == SBP11_IO_TIMEOUT  ? "no answer in time"
             : rc == SBP11_IO_UNSENT ? "the daemon closed the connection without reading the request"
                                     : "the daemon closed the connection before answering");
    return rc;
  }
  uint32_t len = sbw_frame_length(header);
  if (!len) {
    snprintf(why, whylen, "protocol error: frame length out of range");
    return SBP11_IO_PROTOCOL;
  }
  uint8_t *body = malloc(len);
  if (!body) return SBP11_IO_NOMEM;
  body[0] = header[4];
  rc = len > 1 ? read_all(c->fd, body + 1, len - 1, deadline) : SBP11_IO_OK;
  if (rc != SBP11_IO_OK) {
    free(body);
    snprintf(why, whylen, "%s", rc == SBP11_IO_TIMEOUT ? "answer not complete in time" : "connection closed mid-frame");
    return rc == SBP11_IO_TIMEOUT ? rc : SBP11_IO_PROTOCOL; /* a frame cut short is never retried silently */
  }
  char err[200];
  rc = sbw_decode(body[0], body + 1, len - 1, response, err, sizeof(err));
  free(body);
  if (rc != 0) {
    snprintf(why, whylen, "protocol error: %s", err);
    return SBP11_IO_PROTOCOL;
  }
  return SBP11_IO_OK;
}

void sbp11_conn_close(sbp11_conn *c) {
  if (!c) return;
  if (c->fd >= 0) close(c->fd); /* never shutdown(): a forked sibling may share the socket */
  free(c);
}

static int connect_socket(const char *path, int timeout_ms, int *fd_out) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(addr.sun_path)) return ENAMETOOLONG;
  strcpy(addr.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  /* A blocking connect() to a daemon whose backlog is full waits; SO_SNDTIMEO bounds it (AF_UNIX honours it). */
  struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  while (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
    if (errno == EINTR) continue;
    int e = errno;
    close(fd);
    return e;
  }
  *fd_out = fd;
  return 0;
}

static const char *program_name(void) {
  extern char *program_invocation_short_name;
  return program_invocation_short_name ? program_invocation_short_name : "unknown";
}

static int hello(sbp11_conn *c, char *why, size_t whylen) {
  sbw_buf b = {0};
  sbw_frame_begin(&b, SBW_HELLO);
  sbw_put_u32(&b, SBW_T_VERSION_MIN, SBW_VERSION_MIN);
  sbw_put_u32(&b, SBW_T_VERSION_MAX, SBW_VERSION);
  sbw_put_str(&b, SBW_T_CLIENT, program_name());
  sbw_put_u32(&b, SBW_T_PID, (uint32_t)getpid());
  if (sbw_frame_end(&b) != 0) {
    sbw_buf_free(&b);
    return SBP11_IO_NOMEM;
  }
  sbw_msg m;
  int rc = sbp11_exchange(c, &b, &m, why, whylen);
  sbw_buf_free(&b);
  if (rc != SBP11_IO_OK) return rc;
  if (m.type == SBW_HELLO_OK) {
    uint32_t v = sbw_get(&m.body, SBW_T_VERSION)->u32;
    char server[80];
    sbw_get_str(&m.body, SBW_T_SERVER, server, sizeof(server));
    sbw_msg_free(&m);
    if (v < SBW_VERSION_MIN || v > SBW_VERSION) {
      snprintf(why, whylen, "the daemon chose protocol version %u; this module speaks %u..%u", (unsigned)v,
               SBW_VERSION_MIN, SBW_VERSION);
      return SBP11_IO_PROTOCOL;
    }
    c->version = v; /* a version 1 daemon: everything but signing a message (CKM_EDDSA) */
    SBP11_DEBUG("connected to %s (%s), protocol v%u", config.socket_path, server, (unsigned)v);
    return SBP11_IO_OK;
  }
  if (m.type == SBW_ERROR) {
    char msg[256];
    sbw_get_str(&m.body, SBW_T_MESSAGE, msg, sizeof(msg));
    snprintf(why, whylen, "HELLO refused (%s): %s", sbw_status_name(sbw_get(&m.body, SBW_T_STATUS)->u32), msg);
    sbw_msg_free(&m);
    return SBP11_IO_REFUSED;
  }
  snprintf(why, whylen, "protocol error: %s in answer to HELLO", m.name);
  sbw_msg_free(&m);
  return SBP11_IO_PROTOCOL;
}

/* The daemon never speaks unasked: an idle connection that is readable (EOF) or hung up was closed by it (a
 * restart). Found before anything is sent, so even a SIGN may then go out on a fresh connection. */
static int conn_closed_by_daemon(const sbp11_conn *c) {
  struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
  return poll(&p, 1, 0) != 0;
}

int sbp11_conn_get(sbp11_conn **out, int *fresh, char *why, size_t whylen) {
  pid_t me = getpid();
  pthread_mutex_lock(&pool_lock);
  while (pool) {
    sbp11_conn *c = pool;
    pool = c->next;
    pool_size--;
    if (c->pid != me || conn_closed_by_daemon(c)) { /* inherited across fork: not ours to use; or dead */
      sbp11_conn_close(c);
      continue;
    }
    pthread_mutex_unlock(&pool_lock);
    c->next = NULL;
    *out = c;
    *fresh = 0;
    return SBP11_IO_OK;
  }
  char path[sizeof(config.socket_path)];
  memcpy(path, config.socket_path, sizeof(path));
  int timeout_ms = config.timeout_ms;
  pthread_mutex_unlock(&pool_lock);

  *fresh = 1;
  sbp11_conn *c = calloc(1, sizeof(*c));
  if (!c) return SBP11_IO_NOMEM;
  c->pid = me;
  int e = connect_socket(path, timeout_ms, &c->fd);
  if (e) {
    snprintf(why, whylen, "cannot connect to the signbridge daemon (%s) at %s", strerror(e), path);
    free(c);
    /* Nothing listening, no socket file yet, a full backlog: a daemon (re)starting. Anything else stays so. */
    if (e == ENOENT) return SBP11_IO_NO_SOCKET_FILE;
    return e == ECONNREFUSED || e == EAGAIN ? SBP11_IO_UNREACHABLE : SBP11_IO_NO_SOCKET;
  }
  /* Digests and build context go only to a daemon of this user (or root): someone else's socket at the path
   * (a shared /tmp) is refused. The daemon makes the same check the other way. */
  struct ucred cred;
  socklen_t credlen = sizeof(cred);
  if (getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &credlen) != 0 || (cred.uid != getuid() && cred.uid != 0)) {
    snprintf(why, whylen, "the socket %s belongs to uid %d, not to this user (uid %d); refusing it", path,
             credlen == sizeof(cred) ? (int)cred.uid : -1, (int)getuid());
    sbp11_conn_close(c);
    return SBP11_IO_PEER;
  }
  int rc = hello(c, why, whylen);
  if (rc != SBP11_IO_OK) {
    sbp11_conn_close(c);
    return rc;
  }
  *out = c;
  return SBP11_IO_OK;
}

void sbp11_conn_put(sbp11_conn *c) {
  if (!c) return;
  pthread_mutex_lock(&pool_lock);
  if (c->pid == getpid() && pool_size < SBP11_POOL_MAX) {
    c->next = pool;
    pool = c;
    pool_size++;
    c = NULL;
  }
  pthread_mutex_unlock(&pool_lock);
  sbp11_conn_close(c);
}

void sbp11_pool_drain(void) {
  pthread_mutex_lock(&pool_lock);
  sbp11_conn *c = pool;
  pool = NULL;
  pool_size = 0;
  pthread_mutex_unlock(&pool_lock);
  while (c) {
    sbp11_conn *next = c->next;
    sbp11_conn_close(c);
    c = next;
  }
}

void sbp11_transport_atfork_prepare(void) { pthread_mutex_lock(&pool_lock); }
void sbp11_transport_atfork_parent(void) { pthread_mutex_unlock(&pool_lock); }
void sbp11_transport_atfork_child(void) {
  /* The child closes its copies of the parent's idle connections: two processes must never interleave frames
   * on one socket. (close() of a copy leaves the parent's connection open.) */
  sbp11_conn *c = pool;
  pool = NULL;
  pool_size = 0;
  pthread_mutex_unlock(&pool_lock);
  while (c) {
    sbp11_conn *next = c->next;
    sbp11_conn_close(c);
    c = next;
  }
}
