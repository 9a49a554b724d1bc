/*
 * latency: per-command and replication latency histograms. Each worker owns
 * one struct latency_stats and is its only writer (relaxed atomic stores,
 * as server/stats.h), so the request path takes no lock and shares no
 * line; /metrics and `stats latency` sum every worker's. Buckets are fixed
 * and log-spaced: bucket i counts durations of at most 2^i microseconds
 * (1 us .. 1.048576 s), one more counts the rest.
 *
 * A command is timed from when the batch of input that brought it was
 * first parsed to when its reply is queued: a reply of its own at the end
 * of that batch's parsing, just before the batch's replies are written
 * (so a batch of pipelined commands costs two clock reads in all); a reply
 * another node gives (forwarded, replicated) when the last hold
 * (server/conn.h) the command created is filled, for a get relayed to
 * several owners when the last one relayed answers; a command whose data
 * block came in a later batch, when it is executed.
 */
#ifndef SERVER_LATENCY_H
#define SERVER_LATENCY_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct conn;
struct out_chunk;
struct server;

#define LATENCY_BUCKETS 21 /* finite bounds: 2^0 .. 2^20 us */

/* X-macros of the timed commands: enum suffix, label. A classic command's
 * label is its command word; a meta command's is spelt out. */
/* clang-format off */
#define LATENCY_TEXT_COMMANDS(X) \
    X(GET, "get") X(GETS, "gets") X(GAT, "gat") X(GATS, "gats") \
    X(SET, "set") X(ADD, "add") X(REPLACE, "replace") X(APPEND, "append") \
    X(PREPEND, "prepend") X(CAS, "cas") X(DELETE, "delete") X(INCR, "incr") \
    X(DECR, "decr") X(TOUCH, "touch") X(FLUSH_ALL, "flush_all")
#define LATENCY_META_COMMANDS(X) \
    X(META_GET, "meta_get") X(META_SET, "meta_set") X(META_DELETE, "meta_delete") \
    X(META_ARITHMETIC, "meta_arithmetic") X(META_NOOP, "meta_noop") \
    X(META_DEBUG, "meta_debug")
#define LATENCY_COMMANDS(X) LATENCY_TEXT_COMMANDS(X) LATENCY_META_COMMANDS(X)
/* clang-format on */

/* LATENCY_NONE: not timed (stats, version, cluster commands, bad lines). */
enum latency_cmd {
    LATENCY_NONE = 0,
#define LATENCY_ENUM_(e, name) LATENCY_##e,
    LATENCY_COMMANDS(LATENCY_ENUM_)
#undef LATENCY_ENUM_
    LATENCY_CMDS
};

_Static_assert(LATENCY_CMDS <= 32, "a connection keeps its batch's commands in a 32-bit mask");

/* One histogram: counts per bucket (not cumulative; [LATENCY_BUCKETS] is
 * the overflow) and the sum of the durations. The count is the sum of the
 * buckets, so a reader never sees a count that disagrees with them. */
struct latency_hist {
    uint64_t bucket[LATENCY_BUCKETS + 1];
    uint64_t sum_ns;
};

/* A worker's histograms; cmd[LATENCY_NONE] stays empty. */
struct latency_stats {
    struct latency_hist cmd[LATENCY_CMDS];
    struct latency_hist repl; /* a post-image sent to a replica until its OK */
};

/* CLOCK_MONOTONIC in nanoseconds (vDSO: no system call). */
static inline uint64_t
latency_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * A worker's clock for one event callback (a client's input, a peer's
 * replies): CLOCK_MONOTONIC (as latency_now) read by the first
 * latency_loop_now between latency_loop_enter and latency_loop_leave and
 * returned by the later ones, so a callback's batch of replicated writes
 * or of their acks costs one clock read; a time taken with it is when the
 * callback first needed the time. Outside (depth 0) each call reads the
 * clock. The worker's thread only.
 */
struct latency_clock {
    uint64_t ns;    /* the callback's reading, 0 before it */
    uint32_t depth; /* callbacks entered (one may run another) */
};

static inline void
latency_loop_enter(struct latency_clock *k)
{
    if (k->depth++ == 0) {
        k->ns = 0;
    }
}

static inline void
latency_loop_leave(struct latency_clock *k)
{
    k->depth--;
}

static inline uint64_t
latency_loop_now(struct latency_clock *k)
{
    if (k->depth == 0) {
        return latency_now();
    }
    if (k->ns == 0) {
        k->ns = latency_now();
    }
    return k->ns;
}

/* Index of the bucket of a duration: the least i with ns <= 2^i us, or
 * LATENCY_BUCKETS above the last bound. */
static inline unsigned
latency_bucket(uint64_t ns)
{
    uint64_t us = ns > 0 ? (ns - 1) / 1000 : 0; /* ns <= 2^i us  <=>  us < 2^i */
    unsigned i = us == 0 ? 0 : 64u - (unsigned)__builtin_clzll(us);

    return i < LATENCY_BUCKETS ? i : LATENCY_BUCKETS;
}

/* Upper bound of bucket i < LATENCY_BUCKETS in microseconds. */
static inline uint64_t
latency_bound_us(unsigned i)
{
    return (uint64_t)1 << i;
}

/* Count n durations of ns each in h; its owner only (the single writer). */
static inline void
latency_record_n(struct latency_hist *h, uint64_t ns, uint64_t n)
{
    uint64_t *b = &h->bucket[latency_bucket(ns)];

    __atomic_store_n(b, __atomic_load_n(b, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
    __atomic_store_n(&h->sum_ns, __atomic_load_n(&h->sum_ns, __ATOMIC_RELAXED) + ns * n,
                     __ATOMIC_RELAXED);
}

/* Count one duration. */
static inline void
latency_record(struct latency_hist *h, uint64_t ns)
{
    latency_record_n(h, ns, 1);
}

/* out += in with relaxed loads; in's owner may be writing. Any thread. */
void latency_accumulate(struct latency_hist *out, const struct latency_hist *in);

/* Sum of a histogram's buckets (its count). */
uint64_t latency_count(const struct latency_hist *h);

/* The timed command a command word names (the text before the first
 * space of a line), or LATENCY_NONE. */
enum latency_cmd latency_classify(const char *cmd, size_t ncmd);

/* The label of a command ("get", "meta_get", ...). */
const char *latency_cmd_name(enum latency_cmd k);

/* Every worker's histograms summed into out (zeroed first). Any thread. */
void latency_sum(struct server *srv, struct latency_stats *out);

/* The other half of a request's time on the node: the workers' time
 * runnable but waiting for a CPU (wait_ns) and their runs on one
 * (slices), summed since they started, from the kernel's schedstat of each
 * worker thread. 0, or -1 when a worker has not started or /proc does not
 * tell (no CONFIG_SCHED_INFO). Any thread; reads a small /proc file per
 * worker. */
int latency_sched_wait(struct server *srv, uint64_t *wait_ns, uint64_t *slices);

/*
 * The request path (the connection's worker only). latency_batch: the
 * parsing of a batch starts. latency_begin: a command line is being
 * executed (cmd, ncmd its command word); the first one of the batch takes
 * the clock. latency_end: it is done; its own reply is counted at
 * latency_batch_end (the parsing of the batch is over), one in the last
 * hold it created when latency_hold_done sees that hold filled.
 */
void latency_batch(struct conn *c);
void latency_begin(struct conn *c, const char *cmd, size_t ncmd);
void latency_end(struct conn *c);
void latency_batch_end(struct conn *c);
void latency_hold_done(struct conn *c, struct out_chunk *h);

#endif /* SERVER_LATENCY_H */
