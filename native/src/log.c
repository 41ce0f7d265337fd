#include "log.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_level;   /* 0: off */
static int log_fd = -1; /* stderr or the file */
static int log_owns_fd;
static int log_off; /* SIGNBRIDGE_LOG=off: not even the one-line notices */

static int parse_level(const char *s, size_t n) {
  static const char *const names[] = {"error", "warn", "info", "debug"};
  for (int i = 0; i < 4; i++)
    if (strlen(names[i]) == n && !strncasecmp(s, names[i], n)) return i + 1;
  return 0;
}

void sbp11_log_init(void) {
  pthread_mutex_lock(&log_lock);
  if (log_owns_fd && log_fd >= 0) close(log_fd);
  log_fd = -1, log_owns_fd = 0, log_level = 0, log_off = 0;
  const char *v = getenv("SIGNBRIDGE_LOG");
  if (v && !strcasecmp(v, "off")) {
    log_off = 1;
  } else if (v && *v) {
    const char *colon = strchr(v, ':');
    const char *path = NULL;
    int level;
    if (colon && (level = parse_level(v, (size_t)(colon - v))) > 0) {
      path = colon + 1;
    } else if ((level = parse_level(v, strlen(v))) == 0) {
      /* A path must contain a '/': SIGNBRIDGE_LOG=1 or =true means "info to stderr", never a file named "1". */
      level = SBP11_LOG_INFO;
      if (strchr(v, '/')) path = v;
    }
    if (path && *path) {
      log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
      log_owns_fd = log_fd >= 0;
    } else {
      log_fd = STDERR_FILENO;
    }
    if (log_fd >= 0) log_level = level;
  }
  pthread_mutex_unlock(&log_lock);
}

void sbp11_log_close(void) {
  pthread_mutex_lock(&log_lock);
  if (log_owns_fd && log_fd >= 0) close(log_fd);
  log_fd = -1, log_owns_fd = 0, log_level = 0, log_off = 0;
  pthread_mutex_unlock(&log_lock);
}

int sbp11_log_enabled(int level) { return level <= __atomic_load_n(&log_level, __ATOMIC_RELAXED); }

void sbp11_log(int level, const char *fmt, ...) {
  if (!sbp11_log_enabled(level)) return;
  static const char *const names[] = {"", "error", "warn", "info", "debug"};
  char line[2048];
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  gmtime_r(&ts.tv_sec, &tm);
  int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ signbridge-pkcs11[%d] %s: ",
                   tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                   ts.tv_nsec / 1000000, (int)getpid(), names[level]);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof(line)) n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof(line) - 1) n = (int)sizeof(line) - 2;
  line[n++] = '\n';
  pthread_mutex_lock(&log_lock);
  if (log_fd >= 0) {
    ssize_t w = write(log_fd, line, (size_t)n);
    (void)w;
  }
  pthread_mutex_unlock(&log_lock);
}

static void vnotice(int logged_at, const char *fmt, va_list ap) {
  pthread_mutex_lock(&log_lock);
  /* Off when asked; and when the log itself goes to stderr at that level, its line already says the same. */
  int quiet = log_off || (log_fd == STDERR_FILENO && log_level >= logged_at);
  pthread_mutex_unlock(&log_lock);
  if (quiet) return;
  char line[1024] = "signbridge: ";
  size_t n = strlen(line);
  int w = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
  if (w < 0) return;
  n += (size_t)w < sizeof(line) - n - 1 ? (size_t)w : sizeof(line) - n - 2;
  /* One line, whatever the service's message holds. */
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)line[i] < 0x20 || line[i] == 0x7f) line[i] = ' ';
  line[n++] = '\n';
  ssize_t r = write(STDERR_FILENO, line, n);
  (void)r;
}

void sbp11_notice(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vnotice(SBP11_LOG_ERROR, fmt, ap);
  va_end(ap);
}

void sbp11_notice_logged_at(int level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vnotice(level, fmt, ap);
  va_end(ap);
}
