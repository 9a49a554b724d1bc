/*
 * What the client probes (client_probe.c, meta_probe.c) share: a monotonic
 * clock in ms, the short names of libringcache's return codes, which the
 * tests match, and the options the tests set in the environment.
 */
#ifndef TESTS_IT_PROBE_COMMON_H
#define TESTS_IT_PROBE_COMMON_H

#include <stdlib.h>
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

/* Library defaults, then what the environment asks for: RC_PROBE_TLS (on
 * when set), RC_PROBE_TLS_CA, _CERT, _KEY, RC_PROBE_TLS_SKIP_NAME (set),
 * RC_PROBE_AUTH_USER and RC_PROBE_AUTH_PASSWORD (-Y login). */
static inline void
probe_options(struct ringcache_options *opt)
{
    ringcache_options_init(opt);
    opt->tls = getenv("RC_PROBE_TLS") != NULL;
    opt->tls_ca_file = getenv("RC_PROBE_TLS_CA");
    opt->tls_cert_file = getenv("RC_PROBE_TLS_CERT");
    opt->tls_key_file = getenv("RC_PROBE_TLS_KEY");
    opt->tls_skip_name_check = getenv("RC_PROBE_TLS_SKIP_NAME") != NULL;
    opt->auth_user = getenv("RC_PROBE_AUTH_USER");
    opt->auth_password = getenv("RC_PROBE_AUTH_PASSWORD");
}

#endif
