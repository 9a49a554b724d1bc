/*
 * latency: classifying and timing requests into the worker's histograms,
 * and summing the workers' for readers (server/latency.h).
 */
#include "config.h"
#include "server/latency.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "server/conn.h"
#include "server/thread.h"

/* Sum in into out; see latency.h. */
void
latency_accumulate(struct latency_hist *out, const struct latency_hist *in)
{
    unsigned i;

    for (i = 0; i <= LATENCY_BUCKETS; i++) {
        out->bucket[i] += __atomic_load_n(&in->bucket[i], __ATOMIC_RELAXED);
    }
    out->sum_ns += __atomic_load_n(&in->sum_ns, __ATOMIC_RELAXED);
}

uint64_t
latency_count(const struct latency_hist *h)
{
    uint64_t n = 0;
    unsigned i;

    for (i = 0; i <= LATENCY_BUCKETS; i++) {
        n += h->bucket[i];
    }
    return n;
}

#define IS(s) (ncmd == sizeof(s) - 1 && memcmp(cmd, s, sizeof(s) - 1) == 0)

/* The command word's timed command; as proto_text.c dispatches on it. */
enum latency_cmd
latency_classify(const char *cmd, size_t ncmd)
{
    if (ncmd == 2 && cmd[0] == 'm') {
        switch (cmd[1]) {
        case 'g':
            return LATENCY_META_GET;
        case 's':
            return LATENCY_META_SET;
        case 'd':
            return LATENCY_META_DELETE;
        case 'a':
            return LATENCY_META_ARITHMETIC;
        case 'n':
            return LATENCY_META_NOOP;
        case 'e':
            return LATENCY_META_DEBUG;
        default:
            return LATENCY_NONE;
        }
    }
#define LATENCY_IS_(e, name) \
    if (IS(name)) {          \
        return LATENCY_##e;  \
    }
    LATENCY_TEXT_COMMANDS(LATENCY_IS_)
#undef LATENCY_IS_
    return LATENCY_NONE;
}

#undef IS

const char *
latency_cmd_name(enum latency_cmd k)
{
    static const char *const NAMES[LATENCY_CMDS] = { [LATENCY_NONE] = "none",
#define LATENCY_NAME_(e, name) [LATENCY_##e] = name,
                                                     LATENCY_COMMANDS(LATENCY_NAME_)
#undef LATENCY_NAME_
    };

    return (unsigned)k < LATENCY_CMDS ? NAMES[k] : "none";
}

/* Sum every worker's; see latency.h. */
void
latency_sum(struct server *srv, struct latency_stats *out)
{
    int      i;
    unsigned k;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < srv->nworkers; i++) {
        const struct latency_stats *ls = &srv->workers[i].lat;

        for (k = 0; k < LATENCY_CMDS; k++) {
            latency_accumulate(&out->cmd[k], &ls->cmd[k]);
        }
        latency_accumulate(&out->repl, &ls->repl);
    }
}

/* See latency.h. /proc/self/task/TID/schedstat: "time on a CPU (ns), time
 * waiting on a run queue (ns), runs on a CPU". */
int
latency_sched_wait(struct server *srv, uint64_t *wait_ns, uint64_t *slices)
{
    int i;

    *wait_ns = *slices = 0;
    for (i = 0; i < srv->nworkers; i++) {
        int      tid = __atomic_load_n(&srv->workers[i].ktid, __ATOMIC_RELAXED);
        char     path[64], buf[128];
        uint64_t run, wait, n;
        ssize_t  len;
        int      fd;

        if (tid <= 0) {
            return -1;
        }
        snprintf(path, sizeof(path), "/proc/self/task/%d/schedstat", tid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            return -1;
        }
        len = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (len <= 0) {
            return -1;
        }
        buf[len] = '\0';
        if (sscanf(buf, "%" SCNu64 " %" SCNu64 " %" SCNu64, &run, &wait, &n) != 3) {
            return -1;
        }
        *wait_ns += wait;
        *slices += n;
    }
    return 0;
}

/* A new batch of input is about to be parsed: its clock is read lazily,
 * by the first command line of it. */
void
latency_batch(struct conn *c)
{
    c->lat_batch = 0;
}

/* The batch is parsed and its replies are about to be written: count the
 * commands of it that were answered here, with one clock read. */
void
latency_batch_end(struct conn *c)
{
    uint64_t ns;

    if (c->lat_mask == 0) {
        return;
    }
    ns = latency_now() - c->lat_batch;
    while (c->lat_mask != 0) {
        unsigned k = (unsigned)__builtin_ctz(c->lat_mask);

        latency_record_n(&c->w->lat.cmd[k], ns, c->lat_done[k]);
        c->lat_done[k] = 0;
        c->lat_mask &= c->lat_mask - 1;
    }
}

/* A command line starts: note what it is and when its batch came. */
void
latency_begin(struct conn *c, const char *cmd, size_t ncmd)
{
    c->lat_cmd = (uint8_t)latency_classify(cmd, ncmd);
    c->lat_hold = NULL;
    if (c->lat_cmd == LATENCY_NONE) {
        return;
    }
    if (c->lat_batch == 0) {
        c->lat_batch = latency_now();
    }
    c->lat_t0 = c->lat_batch;
}

/* The command is executed: hand its start to the last hold it created
 * (still unfilled) for latency_hold_done, or count it at the end of the
 * batch, or now when it began in an earlier batch (its data block came
 * later, or its get paused). A hold already filled, or written and freed
 * (chunk_free forgets it), is not waited for. */
void
latency_end(struct conn *c)
{
    struct out_chunk *h = c->lat_hold;

    if (h != NULL && h->owner != NULL) {
        h->lat_cmd = c->lat_cmd;
        h->lat_t0 = c->lat_t0;
    } else if (c->lat_t0 == c->lat_batch) {
        c->lat_done[c->lat_cmd]++;
        c->lat_mask |= 1u << c->lat_cmd;
    } else {
        latency_record(&c->w->lat.cmd[c->lat_cmd], latency_now() - c->lat_t0);
    }
    c->lat_cmd = LATENCY_NONE;
    c->lat_hold = NULL;
}

/* Hold h was filled: the reply of the command it ends is queued. */
void
latency_hold_done(struct conn *c, struct out_chunk *h)
{
    if (h->lat_cmd != LATENCY_NONE) {
        uint64_t now = latency_loop_now(&c->w->clock);

        if (now <= h->lat_t0) {
            /* Filled in the iteration its command began in, after the
             * loop's reading (the batch's clock is read lazily): rare (no
             * replica to wait for, a call failed at once); read again. */
            now = latency_now();
        }
        latency_record(&c->w->lat.cmd[h->lat_cmd], now - h->lat_t0);
        h->lat_cmd = LATENCY_NONE;
    }
}
