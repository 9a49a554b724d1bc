/*
 * stats: summing and baselining the per-worker counters. The `stats`
 * command itself is formatted in proto_text.c, which knows the store's and
 * the server's figures too.
 */
#include "config.h"
#include "server/stats.h"

/* Sum in into out; the owner of in may be writing concurrently. */
void
stats_accumulate(struct thread_stats *out, const struct thread_stats *in)
{
#define STATS_ACC_(name) out->name += __atomic_load_n(&in->name, __ATOMIC_RELAXED);
    STATS_THREAD_FIELDS(STATS_ACC_)
#undef STATS_ACC_
}

/* out = a - b; a counter below its baseline (cannot happen) reads 0. */
void
stats_subtract(struct thread_stats *out, const struct thread_stats *a, const struct thread_stats *b)
{
#define STATS_SUB_(name) out->name = a->name >= b->name ? a->name - b->name : 0;
    STATS_THREAD_FIELDS(STATS_SUB_)
#undef STATS_SUB_
}
