/*
 * log: leveled messages to stderr. One fprintf per message so lines from
 * different threads do not interleave (stdio locks the stream).
 */
#include "config.h"
#include "server/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static int log_level = LOG_ERR;

/* Set the level (negative clamps to errors only); any thread. */
void
log_set_level(int level)
{
    if (level < LOG_ERR) {
        level = LOG_ERR;
    }
    __atomic_store_n(&log_level, level, __ATOMIC_RELAXED);
}

/* The current level; any thread. */
int
log_get_level(void)
{
    return __atomic_load_n(&log_level, __ATOMIC_RELAXED);
}

/* Format the message into one buffer, then write it in one call. Each
 * line starts with the UTC time to the millisecond, so the logs of several
 * nodes can be merged in order. */
void
log_msg(int level, const char *fmt, ...)
{
    static const char *const names[] = { "error", "info", "debug" };
    char                     buf[1024], when[32];
    struct timeval           tv;
    struct tm                tm;
    va_list                  ap;

    if (level > log_get_level()) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    fprintf(stderr, "%s.%03ldZ ringcached: %s: %s\n", when, (long)(tv.tv_usec / 1000),
            names[level > LOG_DEBUG ? LOG_DEBUG : level], buf);
}
