/* The fake daemon as a program, for clients that run in their own process (pkcs11-tool):
 *   fake_daemon SOCKET    listens until SIGTERM or SIGINT; prints "ready" on stdout once listening. */
#include <signal.h>
#include <stdio.h>

#include "fake_daemon.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SOCKET\n", argv[0]);
    return 2;
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts: they inherit the mask */
  fake_daemon *d = fd_start(argv[1]);
  if (!d) return 1;
  printf("ready\n");
  fflush(stdout);
  int sig;
  sigwait(&set, &sig);
  fd_free(d);
  return 0;
}
