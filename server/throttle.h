/*
 * throttle: the adaptive rate of a handoff copy (issue 23; docs/cluster.md,
 * "The adaptive throttle"). Pure logic, no I/O: fed successive snapshots of
 * the node's client-request histograms (server/latency.h), of its workers'
 * run-queue waits and of the bytes the copy sent, it keeps a copy rate that
 * falls multiplicatively while the p99 of the requests or the workers'
 * mean wait for a CPU is well over its baseline and rises otherwise, within
 * [floor, the operator's cap]. server/handoff.c drives it from a timer.
 */
#ifndef SERVER_THROTTLE_H
#define SERVER_THROTTLE_H

#include <stdbool.h>
#include <stdint.h>

#include "server/latency.h"

#define THROTTLE_TICK_MS       100          /* how often the handoff feeds a snapshot */
#define THROTTLE_HISTORY       20           /* snapshots kept before a copy (2 s): the baseline */
#define THROTTLE_FLOOR         (8ull << 20) /* bytes/s: a move always finishes */
#define THROTTLE_RATE_MAX      (4ull << 30) /* no cap and at least this: unlimited */
#define THROTTLE_MIN_SAMPLES   200          /* requests a window needs to judge its p99 */
#define THROTTLE_MAX_TICKS     10           /* a window still short of them then: quiet */
#define THROTTLE_OVER_PCT      130          /* p99 over baseline * this / 100 ... */
#define THROTTLE_SLACK_NS      50000        /* ... and over baseline + this: a cut */
#define THROTTLE_CUT_PCT       70           /* a cut: min(rate, sent rate) * this / 100 */
#define THROTTLE_HOLD          2            /* decisions after a cut that do not cut */
#define THROTTLE_MIN_SLICES    50           /* worker runs a window needs to judge their wait */
#define THROTTLE_WAIT_SLACK_NS 20000        /* a mean, not a tail: a smaller margin */

/* What one call of throttle_tick decided. */
enum throttle_verdict {
    THROTTLE_WAIT = 0, /* the window has too few requests yet: nothing */
    THROTTLE_QUIET,    /* a whole window with too few requests: the rate doubles */
    THROTTLE_BASELINE, /* the first judged window without a baseline: it is one */
    THROTTLE_RISE,     /* the p99 is within bounds: the rate rises */
    THROTTLE_UNSENT,   /* over bounds, but the copy sent nothing: not its doing */
    THROTTLE_HELD,     /* over bounds right after a cut: its effect is not seen yet */
    THROTTLE_CUT,      /* over bounds: the rate falls */
    THROTTLE_FLOOR_HIT /* over bounds at the floor: it stays there */
};

/* One snapshot of the node, cumulative since its start. */
struct throttle_sample {
    struct latency_hist hist;    /* client requests: every timed command summed */
    uint64_t            wait_ns; /* the workers' time runnable but not running */
    uint64_t            slices;  /* their runs on a CPU; 0 (and wait_ns 0): unknown */
};

/* A controller; owned by one thread (the cluster thread). Zeroed by
 * throttle_init; the fields are read by the unit tests. */
struct throttle {
    uint64_t floor;   /* bytes/s */
    uint64_t cap;     /* the operator's, bytes/s; 0 = none */
    bool     running; /* between throttle_start and throttle_stop */
    double   rate;    /* bytes/s in force */
    double   rate_min;
    uint64_t base_ns;      /* baseline p99; 0 = none yet */
    uint64_t p99_ns;       /* the last judged window's */
    uint64_t wait_base_ns; /* baseline of the workers' mean wait per run */
    bool     wait_based;   /* wait_base_ns is set */
    uint64_t wait_ns;      /* the last judged window's mean wait per run */
    uint32_t hold;
    /* The window being pooled: its start and how many ticks it spans. */
    struct throttle_sample win;
    uint64_t               win_sent;
    uint64_t               win_ms; /* when it started (the caller's clock) */
    uint32_t               win_ticks;
    /* Before a copy: the last THROTTLE_HISTORY snapshots, a ring. */
    struct throttle_sample ring[THROTTLE_HISTORY];
    uint32_t               ring_n, ring_head;
    uint64_t               cuts, rises, decisions; /* over the node's life */
    uint64_t               cuts_wait;              /* of the cuts, those for the wait alone */
};

/* The figures `stats` and /metrics show; written by the controller's
 * thread with relaxed atomic stores (throttle_publish), read by any
 * (throttle_pub_read). */
struct throttle_pub {
    uint64_t on;       /* 1: -o copy_throttle=on (the default) */
    uint64_t rate;     /* bytes/s in force (0: unlimited) */
    uint64_t rate_min; /* the lowest rate of the current (or last) copy */
    uint64_t cuts, rises, decisions, cuts_wait;
    uint64_t p99_us, base_us, wait_us, wait_base_us;
};

/* Reset t with a floor in bytes/s (THROTTLE_FLOOR by default). */
void throttle_init(struct throttle *t, uint64_t floor);

/* Before a copy: keep snap (the client histograms summed over every timed
 * command, throttle_client_hist, and the workers' waits) in the ring the
 * baselines come from. */
void throttle_observe(struct throttle *t, const struct throttle_sample *snap);

/* A copy starts at now_ms (a monotonic clock in ms): sent is the copy's
 * byte count now, cap the operator's (0: none). The rate starts at the
 * ceiling (the cap, or unlimited); the baselines are the p99 and the mean
 * wait of the ring's span if it has enough requests (worker runs). */
void throttle_start(struct throttle *t, const struct throttle_sample *snap, uint64_t sent,
                    uint64_t cap, uint64_t now_ms);

/* The operator's cap changed: the rate starts over from it. */
void throttle_set_cap(struct throttle *t, uint64_t cap);

/* One tick of a running copy (every THROTTLE_TICK_MS): snap the node
 * now, sent the copy's byte count now, now_ms the same
 * clock as throttle_start's (a late timer does not skew the sent rate). */
enum throttle_verdict throttle_tick(struct throttle *t, const struct throttle_sample *snap,
                                    uint64_t sent, uint64_t now_ms);

/* The copy ended; the ring starts over. */
void throttle_stop(struct throttle *t);

/* The rate in force, bytes/s; 0 = unlimited. */
uint64_t throttle_rate(const struct throttle *t);

/* The p99 of a histogram in ns, interpolated within its log2 bucket (log-
 * uniform); 0 for an empty one. */
uint64_t throttle_p99_ns(const struct latency_hist *h);

/* out = every timed command's histogram of ls summed (replication's not). */
void throttle_client_hist(const struct latency_stats *ls, struct latency_hist *out);

/* Store t's figures into pub (relaxed atomics); on: the option's value. */
void throttle_publish(const struct throttle *t, bool on, struct throttle_pub *pub);

/* Read pub into out (relaxed atomics). Any thread. */
void throttle_pub_read(const struct throttle_pub *pub, struct throttle_pub *out);

#endif /* SERVER_THROTTLE_H */
