/*
 * log: leveled messages to stderr for ringcached. The level is process-wide
 * (-v, -vv, the `verbosity` command) and read without a lock.
 */
#ifndef SERVER_LOG_H
#define SERVER_LOG_H

enum log_level {
    LOG_ERR = 0,   /* always printed */
    LOG_INFO = 1,  /* -v */
    LOG_DEBUG = 2, /* -vv */
};

/* Set or read the current level; any thread. */
void log_set_level(int level);
int  log_get_level(void);

/* Print "ringcached: <level>: <message>\n" to stderr when level is enabled. */
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* SERVER_LOG_H */
