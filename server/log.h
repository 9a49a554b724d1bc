/*
 * log: leveled messages to stderr for ringcached, one line each, in the
 * format --log-format chose (text, logfmt or json), every line carrying the
 * node's --id. The verbosity is process-wide (-v, -vv, the `verbosity`
 * command) and read without a lock.
 */
#ifndef SERVER_LOG_H
#define SERVER_LOG_H

#include <stdbool.h>

/* Severities. Errors, warnings and notices (cluster events: epochs,
 * peers, repairs) print at the default verbosity 0; -v adds info, -vv
 * debug. */
enum log_level {
    LOG_ERR = 0,
    LOG_WARN = 1,
    LOG_NOTICE = 2,
    LOG_INFO = 3,
    LOG_DEBUG = 4,
};

/* Verbosities for log_set_level: quiet (errors only; the fuzz targets and
 * unit tests), the default, the most (-vv). */
#define LOG_QUIET         (-2)
#define LOG_VERBOSITY_MAX 2

/* Line formats (--log-format). */
enum log_format {
    LOG_FORMAT_TEXT = 0, /* 2026-01-02T03:04:05.678Z ringcached[ID]: info: message */
    LOG_FORMAT_LOGFMT,   /* ts=... level=info node=ID msg="message" */
    LOG_FORMAT_JSON,     /* {"ts":"...","level":"info","node":"ID","msg":"message"} */
};

/* Set or read the verbosity: 0 by default, one more per -v (at most
 * LOG_VERBOSITY_MAX), LOG_QUIET for errors only; any thread. */
void log_set_level(int verbosity);
int  log_get_level(void);

/* The format of every line from now on; call before any thread starts. */
void log_set_format(enum log_format f);

/* Parse a --log-format name (text, logfmt, json); 0, or -1 if it is none. */
int log_parse_format(const char *name, enum log_format *out);

/* The node id every line carries from now on ("" or NULL: none, as a
 * node without --id); copied. Call before any thread starts. */
void log_set_node(const char *id);

/* Print one line to stderr when level is enabled at the verbosity. */
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* SERVER_LOG_H */
