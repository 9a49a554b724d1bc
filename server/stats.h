/*
 * stats: per-worker counters with memcached's names. Each worker bumps its
 * own counters without locks (relaxed atomic stores: one writer per field);
 * `stats` sums every worker's, and `stats reset` records a baseline that is
 * subtracted instead of zeroing counters that other threads are writing.
 */
#ifndef SERVER_STATS_H
#define SERVER_STATS_H

#include <stdint.h>

/* X-macro of the per-worker counters, in `stats` output order. */
/* clang-format off */
#define STATS_THREAD_FIELDS(X) \
    X(cmd_get) X(cmd_set) X(cmd_flush) X(cmd_touch) \
    X(get_hits) X(get_misses) \
    X(delete_misses) X(delete_hits) X(incr_misses) X(incr_hits) \
    X(decr_misses) X(decr_hits) X(cas_misses) X(cas_hits) X(cas_badval) \
    X(touch_hits) X(touch_misses) X(store_too_large) X(store_no_memory) \
    X(bytes_read) X(bytes_written) X(conn_yields) X(route_lookups) X(idle_kicks) \
    X(auth_cmds) X(auth_errors) X(auth_kicks)
/* clang-format on */

struct thread_stats {
#define STATS_DECL_(name) uint64_t name;
    STATS_THREAD_FIELDS(STATS_DECL_)
#undef STATS_DECL_
};

/* Add n to a counter of the calling worker's own stats (single writer). */
#define STATS_ADD(ts, field, n)                                                       \
    __atomic_store_n(&(ts)->field,                                                    \
                     __atomic_load_n(&(ts)->field, __ATOMIC_RELAXED) + (uint64_t)(n), \
                     __ATOMIC_RELAXED)

/* out += in, reading in's fields with relaxed loads; any thread. */
void stats_accumulate(struct thread_stats *out, const struct thread_stats *in);

/* out = a - b field by field (a baseline subtracted from a total). */
void stats_subtract(struct thread_stats *out, const struct thread_stats *a,
                    const struct thread_stats *b);

#endif /* SERVER_STATS_H */
