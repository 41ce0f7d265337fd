/* The socket to the daemon: connect (with HELLO), one request/response exchange, a small pool of idle
 * connections. Knows nothing of PKCS#11. */
#ifndef SBP11_TRANSPORT_H
#define SBP11_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "wire.h"

enum sbp11_io {
  SBP11_IO_OK = 0,
  SBP11_IO_UNREACHABLE = 1, /* cannot connect: no daemon (yet), or one restarting */
  SBP11_IO_BROKEN = 2,      /* the connection closed after the request was sent: it may have been served */
  SBP11_IO_TIMEOUT = 3,     /* no answer in time */
  SBP11_IO_PROTOCOL = 4,    /* a malformed frame or an unexpected answer: the connection is closed */
  SBP11_IO_REFUSED = 5,     /* HELLO answered with an ERROR */
  SBP11_IO_NOMEM = 6,
  SBP11_IO_PEER = 7,        /* the socket belongs to another user: not our daemon */
  SBP11_IO_UNSENT = 8,      /* the connection was gone before the daemon read the request: it was not served */
  SBP11_IO_NO_SOCKET = 9,   /* cannot connect, and waiting will not help (path too long, permission denied) */
  SBP11_IO_NO_SOCKET_FILE = 10, /* cannot connect: no socket file at all (no daemon has run, or one just stopped) */
};

typedef struct sbp11_conn {
  int fd;
  uint32_t version; /* the protocol version HELLO chose */
  pid_t pid; /* the process that opened it: a forked child never uses its parent's connections */
  struct sbp11_conn *next;
} sbp11_conn;

typedef struct sbp11_transport_config {
  char socket_path[4096]; /* longer than sun_path on purpose: an overlong path is refused, never truncated */
  int timeout_ms; /* per exchange */
} sbp11_transport_config;

void sbp11_transport_configure(const sbp11_transport_config *cfg);
const char *sbp11_transport_socket_path(void);
int sbp11_transport_timeout_ms(void);

/* A connection that has completed HELLO: from the pool (one the daemon has closed meanwhile is dropped, never
 * handed out), or new. *fresh tells which. The error message of a refused HELLO is copied to why. */
int sbp11_conn_get(sbp11_conn **out, int *fresh, char *why, size_t whylen);
/* Back to the pool (or closed when the pool is full or the connection is from another process). */
void sbp11_conn_put(sbp11_conn *c);
void sbp11_conn_close(sbp11_conn *c);
/* Sends one frame and reads the answer. On anything but SBP11_IO_OK the caller must close the connection. */
int sbp11_exchange(sbp11_conn *c, const sbw_buf *request, sbw_msg *response, char *why, size_t whylen);
/* Closes every pooled connection (C_Finalize; a forked child). */
void sbp11_pool_drain(void);
void sbp11_transport_atfork_prepare(void);
void sbp11_transport_atfork_parent(void);
void sbp11_transport_atfork_child(void);

#endif
