/* Diagnostics. Nothing is ever written to stdout. The log is written only when SIGNBRIDGE_LOG asks:
 *   SIGNBRIDGE_LOG=error|warn|info|debug        that level and above, to stderr
 *   SIGNBRIDGE_LOG=/path/file                   info and above, appended to the file (a path has a '/')
 *   SIGNBRIDGE_LOG=1 (any other value)          info and above, to stderr
 *   SIGNBRIDGE_LOG=debug:/path/file             both
 *   SIGNBRIDGE_LOG=off                          nothing at all, not even notices
 * A notice (a signature refused or impossible, or one that starts to wait for approval) is one line
 * "signbridge: ..." to stderr by default, so a person running a signing tool learns why without setting anything. */
#ifndef SBP11_LOG_H
#define SBP11_LOG_H

enum sbp11_level { SBP11_LOG_ERROR = 1, SBP11_LOG_WARN, SBP11_LOG_INFO, SBP11_LOG_DEBUG };

void sbp11_log_init(void);
void sbp11_log_close(void);
int sbp11_log_enabled(int level);
void sbp11_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The one line for the person at the terminal, once per refused signature: to stderr unless SIGNBRIDGE_LOG=off
 * or the log already goes to stderr. Never a secret: reasons, tenants and request ids only. */
void sbp11_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same for news whose log line is at `level` rather than error (a signature that starts to wait: warn). */
void sbp11_notice_logged_at(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define SBP11_ERR(...) sbp11_log(SBP11_LOG_ERROR, __VA_ARGS__)
#define SBP11_WARN(...) sbp11_log(SBP11_LOG_WARN, __VA_ARGS__)
#define SBP11_INFO(...) sbp11_log(SBP11_LOG_INFO, __VA_ARGS__)
#define SBP11_DEBUG(...) sbp11_log(SBP11_LOG_DEBUG, __VA_ARGS__)

#endif
