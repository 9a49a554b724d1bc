/*
 * What the client probes (client_probe.c, meta_probe.c) share: a monotonic
 * clock in ms and the short names of libringcache's return codes, which
 * the tests match.
 */
#ifndef TESTS_IT_PROBE_COMMON_H
#define TESTS_IT_PROBE_COMMON_H

#include <time.h>

#include "client/ringcache.h"

static inline double
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Short names of the codes, for the test to match. */
static inline const char *
code_name(int code)
{
    static const char *names[] = {
        "OK",          "ENOTFOUND", "ENOTSTORED", "EEXISTS",   "EINVAL",       "EKEY",    "ETOOBIG",
        "ENOMEM",      "EDOWN",     "ETIMEDOUT",  "EIO",       "EPROTO",       "ECLIENT", "ESERVER",
        "ENONNUMERIC", "EMEMBERS",  "EMOVED",     "ETRYAGAIN", "EUNAVAILABLE", "ETLS",
        "EAUTH",
    };

    _Static_assert(sizeof(names) / sizeof(names[0]) == 1 - RINGCACHE_ERRNO_MIN,
                   "a name for every code");
    if (code > 0 || code < RINGCACHE_ERRNO_MIN) {
        return "E?";
    }
    return names[-code];
}

#endif
