/*
 * throttle: the copy's adaptive rate (server/throttle.h). Windows of at
 * least THROTTLE_MIN_SAMPLES requests are judged by their p99 and by the
 * workers' mean run-queue wait against baselines (slow-moving minimums
 * seeded before the copy); the rate is
 * AIMD-like: cut by THROTTLE_CUT_PCT, raised by an eighth (at least a
 * quarter of the floor) per good window, doubled per quiet one.
 */
#include "config.h"
#include "server/throttle.h"

#include <math.h>
#include <string.h>

/* The rate's bounds: the cap (or unlimited) and the floor, which a cap
 * under it replaces (the operator's word wins). */
static double
ceiling(const struct throttle *t)
{
    return t->cap > 0 ? (double)t->cap : (double)THROTTLE_RATE_MAX;
}

static double
floor_rate(const struct throttle *t)
{
    return (double)t->floor < ceiling(t) ? (double)t->floor : ceiling(t);
}

static void
set_rate(struct throttle *t, double r)
{
    if (r > ceiling(t)) {
        r = ceiling(t);
    }
    if (r < floor_rate(t)) {
        r = floor_rate(t);
    }
    t->rate = r;
    if (r < t->rate_min) {
        t->rate_min = r;
    }
}

/* See throttle.h. */
void
throttle_init(struct throttle *t, uint64_t floor)
{
    memset(t, 0, sizeof(*t));
    t->floor = floor;
    t->rate = t->rate_min = ceiling(t);
}

/* d = a - b per bucket; a counter that went back (it never should)
 * counts 0. */
static void
hist_sub(struct latency_hist *d, const struct latency_hist *a, const struct latency_hist *b)
{
    unsigned i;

    for (i = 0; i <= LATENCY_BUCKETS; i++) {
        d->bucket[i] = a->bucket[i] > b->bucket[i] ? a->bucket[i] - b->bucket[i] : 0;
    }
    d->sum_ns = a->sum_ns > b->sum_ns ? a->sum_ns - b->sum_ns : 0;
}

/* See throttle.h. The rank is ceil(0.99 n); within bucket i (durations in
 * (2^(i-1), 2^i] us) the durations are taken as spread evenly on a log
 * scale, as the buckets are, so a rank f of the way into the bucket is
 * 2^(i-1+f) us. Bucket 0 ([0, 1] us) is linear; the overflow bucket has
 * no upper bound and counts as its lower one. */
uint64_t
throttle_p99_ns(const struct latency_hist *h)
{
    uint64_t n = latency_count(h), rank, below = 0;
    unsigned i;

    if (n == 0) {
        return 0;
    }
    rank = (n * 99 + 99) / 100;
    for (i = 0; i <= LATENCY_BUCKETS; i++) {
        uint64_t c = h->bucket[i];
        double   f;

        if (below + c < rank) {
            below += c;
            continue;
        }
        f = (double)(rank - below) / (double)c;
        if (i == 0) {
            return (uint64_t)(f * 1000.0);
        }
        if (i == LATENCY_BUCKETS) {
            return latency_bound_us(LATENCY_BUCKETS - 1) * 1000;
        }
        return (uint64_t)(exp2((double)(i - 1) + f) * 1000.0);
    }
    return latency_bound_us(LATENCY_BUCKETS - 1) * 1000;
}

/* See throttle.h. */
void
throttle_client_hist(const struct latency_stats *ls, struct latency_hist *out)
{
    unsigned k, i;

    memset(out, 0, sizeof(*out));
    for (k = 0; k < LATENCY_CMDS; k++) {
        for (i = 0; i <= LATENCY_BUCKETS; i++) {
            out->bucket[i] += ls->cmd[k].bucket[i];
        }
        out->sum_ns += ls->cmd[k].sum_ns;
    }
}

/* The workers' mean wait per run between two samples; false when there
 * are too few runs to tell (or no figures). */
static bool
mean_wait(const struct throttle_sample *a, const struct throttle_sample *b, uint64_t *out)
{
    uint64_t n = a->slices > b->slices ? a->slices - b->slices : 0;

    if (n < THROTTLE_MIN_SLICES) {
        return false;
    }
    *out = a->wait_ns > b->wait_ns ? (a->wait_ns - b->wait_ns) / n : 0;
    return true;
}

/* Whether v is over bounds of its baseline. */
static bool
over_base(uint64_t v, uint64_t base, uint64_t slack)
{
    return v * 100 > base * THROTTLE_OVER_PCT && v > base + slack;
}

/* A baseline follows a lower figure a quarter of the way. */
static void
follow_down(uint64_t *base, uint64_t v)
{
    if (v < *base) {
        *base -= (*base - v) / 4;
    }
}

/* See throttle.h. */
void
throttle_observe(struct throttle *t, const struct throttle_sample *snap)
{
    t->ring[(t->ring_head + t->ring_n) % THROTTLE_HISTORY] = *snap;
    if (t->ring_n < THROTTLE_HISTORY) {
        t->ring_n++;
    } else {
        t->ring_head = (t->ring_head + 1) % THROTTLE_HISTORY;
    }
}

/* See throttle.h. A baseline from fewer requests than a window needs
 * would be noise: the first judged window of the copy sets it then. */
void
throttle_start(struct throttle *t, const struct throttle_sample *snap, uint64_t sent, uint64_t cap,
               uint64_t now_ms)
{
    struct latency_hist d;

    t->cap = cap;
    t->running = true;
    t->rate = t->rate_min = ceiling(t);
    t->base_ns = 0;
    t->p99_ns = 0;
    t->wait_based = false;
    t->wait_base_ns = t->wait_ns = 0;
    t->hold = 0;
    if (t->ring_n > 0) {
        hist_sub(&d, &snap->hist, &t->ring[t->ring_head].hist);
        if (latency_count(&d) >= THROTTLE_MIN_SAMPLES) {
            t->base_ns = t->p99_ns = throttle_p99_ns(&d);
        }
        t->wait_based = mean_wait(snap, &t->ring[t->ring_head], &t->wait_base_ns);
        t->wait_ns = t->wait_base_ns;
    }
    t->win = *snap;
    t->win_sent = sent;
    t->win_ms = now_ms;
    t->win_ticks = 0;
}

/* See throttle.h. */
void
throttle_set_cap(struct throttle *t, uint64_t cap)
{
    if (cap == t->cap) {
        return;
    }
    t->cap = cap;
    t->rate = ceiling(t);
    if (t->rate < t->rate_min) {
        t->rate_min = t->rate;
    }
}

/* A good window: up by an eighth, at least a quarter of the floor, so a
 * cut rate comes back from the floor within a few seconds. */
static void
rise(struct throttle *t)
{
    double step = t->rate / 8 > (double)t->floor / 4 ? t->rate / 8 : (double)t->floor / 4;

    t->rises++;
    set_rate(t, t->rate + step);
}

/*
 * See throttle.h. The decision waits until the window holds
 * THROTTLE_MIN_SAMPLES requests (or THROTTLE_MAX_TICKS ticks passed: too
 * quiet to judge, so the copy may go faster). Over bounds, the cut takes
 * the rate the copy actually sent at if lower than the rate allowed (a
 * copy bound by its window or its destination would not slow down for a
 * cut of an unused allowance). The baseline follows a lower p99 by a
 * quarter of the way per window, and a higher one (by 1/32) only while
 * the rate sits at the floor: the copy cannot do less, so what is left is
 * the load's own.
 */
enum throttle_verdict
throttle_tick(struct throttle *t, const struct throttle_sample *snap, uint64_t sent,
              uint64_t now_ms)
{
    struct latency_hist d;
    uint64_t            n, p99, sent_d, ms, wait = 0;
    bool                over, over_wait, has_wait;

    if (!t->running) {
        return THROTTLE_WAIT;
    }
    t->win_ticks++;
    hist_sub(&d, &snap->hist, &t->win.hist);
    n = latency_count(&d);
    if (n < THROTTLE_MIN_SAMPLES && t->win_ticks < THROTTLE_MAX_TICKS) {
        return THROTTLE_WAIT;
    }
    ms = now_ms > t->win_ms ? now_ms - t->win_ms : 1;
    sent_d = sent > t->win_sent ? sent - t->win_sent : 0;
    has_wait = mean_wait(snap, &t->win, &wait);
    t->win = *snap;
    t->win_sent = sent;
    t->win_ms = now_ms;
    t->win_ticks = 0;
    t->decisions++;
    if (n < THROTTLE_MIN_SAMPLES) {
        t->rises++;
        set_rate(t, t->rate * 2);
        return THROTTLE_QUIET;
    }
    p99 = throttle_p99_ns(&d);
    t->p99_ns = p99;
    if (has_wait) {
        t->wait_ns = wait;
    }
    if (t->base_ns == 0 || (has_wait && !t->wait_based)) {
        if (t->base_ns == 0) {
            t->base_ns = p99 > 0 ? p99 : 1;
        }
        if (has_wait && !t->wait_based) {
            t->wait_base_ns = wait;
            t->wait_based = true;
        }
        return THROTTLE_BASELINE;
    }
    over_wait = has_wait && over_base(wait, t->wait_base_ns, THROTTLE_WAIT_SLACK_NS);
    over = over_base(p99, t->base_ns, THROTTLE_SLACK_NS) || over_wait;
    if (has_wait) {
        follow_down(&t->wait_base_ns, wait);
    }
    follow_down(&t->base_ns, p99);
    if (!over) {
        if (t->hold > 0) {
            t->hold--;
        }
        rise(t);
        return THROTTLE_RISE;
    }
    if (sent_d == 0) {
        return THROTTLE_UNSENT;
    }
    if (t->hold > 0) {
        t->hold--;
        return THROTTLE_HELD;
    }
    if (t->rate <= floor_rate(t)) {
        if (p99 > t->base_ns) {
            t->base_ns += (p99 - t->base_ns) / 32;
        }
        if (over_wait) {
            t->wait_base_ns += (wait - t->wait_base_ns) / 32;
        }
        return THROTTLE_FLOOR_HIT;
    }
    {
        double sent_rate = (double)sent_d * 1000.0 / (double)ms;
        double from = sent_rate < t->rate ? sent_rate : t->rate;

        set_rate(t, from * THROTTLE_CUT_PCT / 100);
    }
    t->cuts++;
    if (!over_base(p99, t->base_ns, THROTTLE_SLACK_NS)) {
        t->cuts_wait++;
    }
    t->hold = THROTTLE_HOLD;
    return THROTTLE_CUT;
}

/* See throttle.h. */
void
throttle_stop(struct throttle *t)
{
    t->running = false;
    t->ring_n = 0;
    t->ring_head = 0;
}

/* See throttle.h. */
uint64_t
throttle_rate(const struct throttle *t)
{
    if (t->cap == 0 && t->rate >= (double)THROTTLE_RATE_MAX) {
        return 0;
    }
    return (uint64_t)t->rate;
}

#define PUT(f, v) __atomic_store_n(&pub->f, (v), __ATOMIC_RELAXED)
#define GET(f)    out->f = __atomic_load_n(&pub->f, __ATOMIC_RELAXED)

/* See throttle.h. */
void
throttle_publish(const struct throttle *t, bool on, struct throttle_pub *pub)
{
    uint64_t min =
        t->cap == 0 && t->rate_min >= (double)THROTTLE_RATE_MAX ? 0 : (uint64_t)t->rate_min;

    PUT(on, on ? 1 : 0);
    PUT(rate, throttle_rate(t));
    PUT(rate_min, min);
    PUT(cuts, t->cuts);
    PUT(rises, t->rises);
    PUT(decisions, t->decisions);
    PUT(cuts_wait, t->cuts_wait);
    PUT(p99_us, t->p99_ns / 1000);
    PUT(base_us, t->base_ns / 1000);
    PUT(wait_us, t->wait_ns / 1000);
    PUT(wait_base_us, t->wait_base_ns / 1000);
}

/* See throttle.h. */
void
throttle_pub_read(const struct throttle_pub *pub, struct throttle_pub *out)
{
    GET(on);
    GET(rate);
    GET(rate_min);
    GET(cuts);
    GET(rises);
    GET(decisions);
    GET(cuts_wait);
    GET(p99_us);
    GET(base_us);
    GET(wait_us);
    GET(wait_base_us);
}

#undef PUT
#undef GET
