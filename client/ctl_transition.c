/*
 * ctl_transition: the phases of a transition from epoch N to N+1 and how a
 * change starts them (see client/ctl_transition.h for the whole picture).
 * Each phase records its progress in the store's transition record before
 * it acts, so `ringctl resume` can re-enter at the recorded phase, and
 * aborts the transition when a node refuses, fails or restarts.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "client/cport_client.h"
#include "client/ctl_pending.h"
#include "client/ctl_transition.h"
#include "client/ctl_lease.h"
#include "client/ctl_util.h"
#include "lib/mstore.h"
#include "ring/ring.h"

#define POLL_MS           150  /* status poll period during COPY and CLEANUP */
#define CAUGHT_UP_BACKLOG 1000 /* dirty keys: small enough to fence */
#define FENCE_HOLD_MS     50
#define STALL_MS          60000 /* no copy progress for this long: abort */
#define CONTROL_POLL_MS   500   /* the copying admin reads ringctl rate/pause this often */
#define BOOT_CHECK_MS     10000 /* commit: how long a planned node may take to answer Status */
#define HEARTBEAT_MS      2000  /* the copying admin re-stores its record this often */
#define NODE_LOST_MS      5000  /* a node unreachable this long during COPY: abort */
#define COMMIT_RETRY_MS   10000 /* retry Commit to a silent node this long */
#define CLEANUP_WAIT_MS   30000 /* wait this long for orphans to reach 0 */

static char err_buf[MSTORE_WHERE_MAX + 1024];

/* transition_request: see ctl_transition.h. */
struct cport_request
transition_request(struct admin *a, enum cport_req_kind kind)
{
    struct cport_request r = {
        .kind = kind,
        .membership = a->new,
        .token = a->rec.token,
        .token_len = TREC_TOKEN_BYTES,
        .from_epoch = a->rec.from_epoch,
        .rate_bytes_per_s = a->rec.rate,
        .hold_ms = FENCE_HOLD_MS,
        .epoch = a->rec.epoch,
        .failed_ids = a->failed_ptr,
        .n_failed_ids = a->n_failed,
        .stale_ids = a->stale_ptr,
        .n_stale_ids = a->n_stale,
    };

    return r;
}

/* Print a pending transition (the winner's, for a loser). */
static void
print_pending(struct admin *a, FILE *out)
{
    char hex[2 * TREC_TOKEN_BYTES + 1];

    if (!a->have_rec) {
        ctl_out_line(out, NULL, "s",
                     "pending\t%s exists without %s (a crashed create?): "
                     "run ringctl abort\n",
                     a->new != NULL ? REC_PENDING : REC_PENDING_TREC,
                     a->new != NULL ? REC_PENDING_TREC : REC_PENDING);
        return;
    }
    util_hex(a->rec.token, TREC_TOKEN_BYTES, hex);
    /* JSON: "pending": [op, "epoch A -> B", "phase P", ...] as the words. */
    ctl_out_line(out, NULL, "s",
                 "pending\t%s\tepoch %" PRIu64 " -> %" PRIu64 "\tphase %s\tadmin %s\t"
                 "started %" PRId64 "\ttoken %s\n",
                 a->rec.op, a->rec.from_epoch, a->rec.epoch, trec_phase_name(a->rec.phase),
                 a->rec.admin, a->rec.started, hex);
}

/*
 * ABORT
 */

/* do_abort: see ctl_transition.h. The store's pending records are deleted
 * with CAS on the revisions we hold (the store refuses when another admin
 * changed them), and kept as aborted.* so a repeated abort can re-notify
 * the nodes; then Abort goes to every node of N ∪ N+1. */
int
do_abort(struct admin *a)
{
    struct cport_request req = transition_request(a, CPORT_ABORT);
    struct mstore_op     ops[5];
    size_t               mlen = 0, plen = 0, tlen = 0, n = 0;
    char                *mtext = NULL, *ptext = NULL, *ttext;
    enum trec_phase      was = a->rec.phase;
    int                  rc;
    uint32_t             failed;

    a->rec.phase = TREC_ABORTED;
    mtext = trec_format(&a->rec, &mlen);
    ptext = a->new != NULL ? ctl_members_text(a->new, &plen) : NULL;
    a->rec.phase = was;
    if (mtext == NULL || (a->new != NULL &&ptext == NULL)) {
        free(mtext);
        free(ptext);
        ctl_error("out of memory");
        return -1;
    }
    ops[n++] = (struct mstore_op){ MSTORE_PUT, REC_ABORTED_TREC, MSTORE_ANY_REV, mtext, mlen };
    ttext = trec_aborted_text(a->store, &a->rec, &tlen);
    if (ttext != NULL) {
        ops[n++] =
            (struct mstore_op){ MSTORE_PUT, REC_ABORTED_TOKENS, MSTORE_ANY_REV, ttext, tlen };
    }
    if (ptext != NULL) {
        ops[n++] = (struct mstore_op){ MSTORE_PUT, REC_ABORTED, MSTORE_ANY_REV, ptext, plen };
    }
    ops[n++] = (struct mstore_op){ MSTORE_DELETE, REC_PENDING,
                                   a->pm_rev ? a->pm_rev : MSTORE_ANY_REV, NULL, 0 };
    ops[n++] = (struct mstore_op){ MSTORE_DELETE, REC_PENDING_TREC, a->rec_rev, NULL, 0 };
    rc = mstore_txn(a->store, ops, n, NULL, NULL, err_buf, sizeof(err_buf));
    free(mtext);
    free(ptext);
    free(ttext);
    if (rc != MSTORE_OK) {
        ctl_error("abort: store: %s", err_buf);
        return -1;
    }
    ctl_info("abort: store: pending epoch %" PRIu64 " deleted", a->rec.epoch);
    ctl_history_add(a, "aborted", a->abort_why != NULL ? a->abort_why : "ringctl abort");
    failed = nodes_broadcast(a, &req, LONG_TIMEOUT_MS, "abort");
    ctl_info("abort: %u of %u nodes acknowledged%s", a->n_nodes - failed, a->n_nodes,
             failed ? "; the others keep their pending until `ringctl abort` reaches them" : "");
    return (int)failed;
}

/* fail_abort: see ctl_transition.h. */
int
fail_abort(struct admin *a, const char *why)
{
    ctl_info("%s: aborting the transition to epoch %" PRIu64, why, a->rec.epoch);
    a->abort_why = why;
    do_abort(a);
    return EX_FAILED;
}

/*
 * PREPARE
 */

/* Honour RINGCTL_EXIT_AFTER (tests only). */
static void
maybe_exit_after(struct admin *a, const char *phase)
{
    const char *e = getenv("RINGCTL_EXIT_AFTER");

    if (a->exit_after_ok && e != NULL && strcmp(e, phase) == 0) {
        ctl_info("RINGCTL_EXIT_AFTER=%s: exiting with the transition pending", phase);
        fflush(NULL);
        _exit(EX_INJECTED);
    }
}

/* Honour RINGCTL_PAUSE_AT=phase with RINGCTL_PAUSE_FILE=path (tests
 * only): create path, then wait (at most 30 s) until the test removes it,
 * so it can inject a fault at exactly that step. */
static void
maybe_pause_at(struct admin *a, const char *phase)
{
    const char *at = getenv("RINGCTL_PAUSE_AT"), *path = getenv("RINGCTL_PAUSE_FILE");
    int64_t     deadline = util_now_ms() + 30000;
    FILE       *f;

    if (!a->exit_after_ok || at == NULL || path == NULL || strcmp(at, phase) != 0) {
        return;
    }
    f = fopen(path, "w");
    if (f == NULL) {
        return;
    }
    fclose(f);
    ctl_info("RINGCTL_PAUSE_AT=%s: waiting for %s to be removed", phase, path);
    while (access(path, F_OK) == 0 && util_now_ms() < deadline) {
        ctl_sleep_ms(50);
    }
}

/* boot_changed: see ctl_transition.h. A node restarted since PREPARE lost
 * what it held or imported. */
struct tnode *
boot_changed(struct admin *a)
{
    uint32_t i;

    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];
        uint64_t      want = trec_boot_id(&a->rec, t->id);

        if (want != 0 && t->have_st && t->st.boot_id != 0 && t->st.boot_id != want) {
            return t;
        }
    }
    return NULL;
}

/* Did the node's last reply say it holds nothing current (recovering:
 * restarted empty; or behind a higher epoch)? */
static bool
node_fresh(const struct tnode *t)
{
    return t->have_st && (t->st.recovering || t->st.behind_epoch != 0);
}

/*
 * The plan of a transition, recorded in the store before the first Prepare
 * goes out: every node's boot id as its Status gave it, and the nodes of N
 * that hold nothing current (stale: recovering or behind). Every node
 * leaves a stale one out of each arc's holders, so the arc is copied to it
 * from an owner that has it; it imports what it owns in N+1. A resume
 * sends the recorded list again, so that every node's Prepare names the
 * same stale nodes, and any restart since the plan shows as a changed boot
 * id. Unreachable nodes (boot id 0) are filled in after the Prepare.
 */
static int
plan_record(struct admin *a)
{
    struct cport_request sreq = { .kind = CPORT_STATUS };
    uint32_t             i;

    a->rec.boot = calloc(a->n_nodes ? a->n_nodes : 1, sizeof(*a->rec.boot));
    if (a->rec.boot == NULL) {
        return fail_abort(a, "out of memory");
    }
    for (i = 0; i < a->n_nodes; i++) {
        struct tnode     *t = &a->nodes[i];
        struct trec_boot *b = &a->rec.boot[i];

        snprintf(b->id, sizeof(b->id), "%s", t->id);
        if (!t->in_old || node_call(a, t, &sreq, a->g->timeout_ms) != CPORT_OK) {
            continue;
        }
        b->boot_id = t->st.boot_id;
        b->stale = node_fresh(t);
        if (b->stale) {
            ctl_info("prepare: %s is %s: it holds nothing current; its ranges are copied "
                     "from their other owners",
                     t->id, t->st.recovering ? "recovering" : "behind a higher epoch");
        }
    }
    a->rec.n_boot = a->n_nodes;
    return trec_store(a->store, &a->rec, &a->rec_rev);
}

/* The Prepare's stale list: the plan's stale nodes (a->stale_ptr points
 * into a->rec.boot). */
static int
plan_stale_list(struct admin *a)
{
    uint32_t i;

    free(a->stale_ptr);
    a->stale_ptr = calloc(a->rec.n_boot ? a->rec.n_boot : 1, sizeof(*a->stale_ptr));
    a->n_stale = 0;
    if (a->stale_ptr == NULL) {
        return fail_abort(a, "out of memory");
    }
    for (i = 0; i < a->rec.n_boot; i++) {
        if (a->rec.boot[i].stale) {
            a->stale_ptr[a->n_stale++] = a->rec.boot[i].id;
        }
    }
    return EX_OK;
}

/* A member of N and N+1 that accepted the Prepare fresh though the plan
 * counts it as current (it was unreachable when the plan was made, then
 * came back empty): every holder counts it as holding its arcs, nobody
 * would copy them to it, and its Commit would end its recovery with those
 * ranges empty. The node, or NULL. */
static struct tnode *
fresh_unplanned(struct admin *a)
{
    uint32_t i, k;

    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];
        bool          stale = false;

        for (k = 0; k < a->n_stale; k++) {
            stale = stale || strcmp(a->stale_ptr[k], t->id) == 0;
        }
        if (t->in_old && t->in_new && node_fresh(t) && !stale) {
            return t;
        }
    }
    return NULL;
}

/* Fill in the boot ids the plan could not read (nodes unreachable then, or
 * not members of N); stored when any changed. */
static int
plan_fill_boots(struct admin *a)
{
    uint32_t i;
    bool     changed = false;

    for (i = 0; i < a->rec.n_boot; i++) {
        struct trec_boot *b = &a->rec.boot[i];
        struct tnode     *t = node_find(a, b->id);

        if (b->boot_id == 0 && t != NULL && t->have_st && t->st.boot_id != 0) {
            b->boot_id = t->st.boot_id;
            changed = true;
        }
    }
    return changed ? trec_store(a->store, &a->rec, &a->rec_rev) : EX_OK;
}

/* PREPARE on the nodes (the store's pending exists): record the plan (a
 * resume reuses the recorded one), Prepare to every node, then check that
 * nobody restarted since the plan. */
static int
phase_prepare(struct admin *a)
{
    struct cport_request req;
    struct tnode        *t;
    uint32_t             failed;
    int                  rc;

    if (a->rec.n_boot == 0 && (rc = plan_record(a)) != EX_OK) {
        return rc;
    }
    if ((rc = plan_stale_list(a)) != EX_OK) {
        return rc;
    }
    req = transition_request(a, CPORT_PREPARE);
    failed = nodes_broadcast(a, &req, LONG_TIMEOUT_MS, "prepare");
    if (failed > 0) {
        return fail_abort(a, "prepare: a node refused or is unreachable");
    }
    t = boot_changed(a);
    if (t != NULL) {
        ctl_info("prepare: %s restarted since the transition was planned (boot id %016" PRIx64
                 " -> %016" PRIx64 ")",
                 t->id, trec_boot_id(&a->rec, t->id), t->st.boot_id);
        return fail_abort(a, "prepare");
    }
    t = fresh_unplanned(a);
    if (t != NULL) {
        ctl_info("prepare: %s came back empty (or behind) after the transition was planned: "
                 "this transition would not refill it",
                 t->id);
        return fail_abort(a, "prepare");
    }
    if ((rc = plan_fill_boots(a)) != EX_OK) {
        return rc;
    }
    ctl_info("prepare: %u nodes prepared for epoch %" PRIu64, a->n_nodes, a->rec.epoch);
    maybe_exit_after(a, "prepare");
    return EX_OK;
}

/*
 * COPY
 */

/* Sum of the copy progress over every source's transfers. */
struct progress {
    uint64_t items, bytes, items_total, bytes_total, backlog;
    uint32_t n_transfers;
    bool     caught_up;
};

/* Collect progress; false (with a reason in why) on a fatal condition. */
static bool
collect_progress(struct admin *a, struct progress *p, char *why, size_t whylen)
{
    uint32_t i, k;

    memset(p, 0, sizeof(*p));
    p->caught_up = true;
    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];

        if (t->down_since != 0) {
            p->caught_up = false;
            if (util_now_ms() - t->down_since > NODE_LOST_MS) {
                snprintf(why, whylen, "copy: %s unreachable for %d s: %s", t->id,
                         NODE_LOST_MS / 1000, t->err);
                return false;
            }
            continue;
        }
        if (!t->have_st) {
            p->caught_up = false;
            continue;
        }
        if (trec_boot_id(&a->rec, t->id) != 0 && t->st.boot_id != trec_boot_id(&a->rec, t->id)) {
            snprintf(why, whylen, "copy: %s restarted (boot id changed)", t->id);
            return false;
        }
        if (t->st.pending_epoch != a->rec.epoch || t->st.phase == CPORT_PHASE_ABORTED) {
            snprintf(why, whylen,
                     "copy: %s no longer has epoch %" PRIu64 " pending (it reports"
                     " pending %" PRIu64 ", phase %s)",
                     t->id, a->rec.epoch, t->st.pending_epoch, cport_phase_name(t->st.phase));
            return false;
        }
        for (k = 0; k < t->st.n_transfers; k++) {
            const struct transfer_status *x = &t->st.transfers[k];

            if (x->error[0] != '\0') {
                snprintf(why, whylen, "copy: transfer %s -> %s failed: %s", t->id, x->dest,
                         x->error);
                return false;
            }
            p->items += x->items_sent;
            p->bytes += x->bytes_sent;
            p->items_total += x->items_total > x->items_sent ? x->items_total : x->items_sent;
            p->bytes_total += x->bytes_total > x->bytes_sent ? x->bytes_total : x->bytes_sent;
            p->backlog += x->dirty_backlog;
            p->n_transfers++;
            if (!x->walk_done || x->dirty_backlog > CAUGHT_UP_BACKLOG) {
                p->caught_up = false;
            }
        }
        /* A source that has not set up its transfers yet is not done.
         * A recovering or behind node accepted the Prepare fresh: it
         * purged and imports what it owns and sources nothing (it holds
         * nothing current, server/cluster.c compute_arcs), so waiting
         * for its transfers would wait forever. */
        if (t->is_source && t->st.n_transfers == 0 && !node_fresh(t)) {
            p->caught_up = false;
        }
    }
    return true;
}

/* Show copy progress: a bar on a terminal, a line per second otherwise. */
static void
show_progress(const struct progress *p, double rate, bool tty, bool final)
{
    char   b1[32], b2[32], b3[32], eta[32] = "-";
    double frac = p->bytes_total > 0   ? (double)p->bytes / (double)p->bytes_total
                  : p->items_total > 0 ? (double)p->items / (double)p->items_total
                                       : 1.0;
    int    w = 30, fill, i;

    if (frac > 1 || final) {
        frac = 1; /* totals are estimates taken at walk start */
    }
    if (rate > 0 && p->bytes_total > p->bytes) {
        snprintf(eta, sizeof(eta), "%.0fs", (double)(p->bytes_total - p->bytes) / rate);
    }
    ctl_fmt_bytes((double)p->bytes, b1, sizeof(b1));
    ctl_fmt_bytes((double)p->bytes_total, b2, sizeof(b2));
    ctl_fmt_bytes(rate, b3, sizeof(b3));
    if (tty) {
        fill = (int)(frac * w);
        fputs("\r[", stderr);
        for (i = 0; i < w; i++) {
            fputc(i < fill ? '#' : '.', stderr);
        }
        fprintf(stderr,
                "] %3.0f%% %" PRIu64 "/%" PRIu64 " items %s/%s %s/s ETA %s backlog %" PRIu64
                "\033[K",
                frac * 100, p->items, p->items_total, b1, b2, b3, eta, p->backlog);
        if (final) {
            fputc('\n', stderr);
        }
    } else {
        fprintf(stderr,
                "ringctl: copy: %3.0f%% items %" PRIu64 "/%" PRIu64 " bytes %s/%s rate "
                "%s/s eta %s backlog %" PRIu64 "\n",
                frac * 100, p->items, p->items_total, b1, b2, b3, eta, p->backlog);
    }
    fflush(stderr);
}

/* COPY: StartCopy to every node, then poll Status until every source has
 * caught up (walk done, dirty backlog small). */
static int
phase_copy(struct admin *a)
{
    struct cport_request req = transition_request(a, CPORT_START_COPY);
    struct cport_request sreq = { .kind = CPORT_STATUS };
    struct progress      p, last = { 0 };
    char                 why[1024];
    bool                 tty = isatty(STDERR_FILENO);
    int64_t t0 = util_now_ms(), last_print = 0, last_change = util_now_ms(), rate_t = util_now_ms();
    int64_t last_beat = util_now_ms(), last_ctl = 0;
    uint64_t rate_bytes = 0, want_rate;
    double   rate = 0;
    bool     want_paused = false;
    uint32_t i;

    /* An operator's rate or pause (ringctl rate/pause) set before this
     * admin took the transition over holds from the start. */
    if (control_poll(a, &want_rate, &want_paused)) {
        a->rec.rate = want_rate;
        req.rate_bytes_per_s = want_rate;
        req.paused = want_paused;
    }
    if (a->rec.phase != TREC_COPYING) {
        a->rec.phase = TREC_COPYING;
        if (trec_store(a->store, &a->rec, &a->rec_rev) != EX_OK) {
            return EX_FAILED;
        }
    }
    if (nodes_broadcast(a, &req, LONG_TIMEOUT_MS, "copy") > 0) {
        return fail_abort(a, "copy: StartCopy failed");
    }
    maybe_pause_at(a, "copy"); /* the nodes copy on meanwhile */
    for (;;) {
        for (i = 0; i < a->n_nodes; i++) {
            int rc = node_call(a, &a->nodes[i], &sreq, a->g->timeout_ms);

            if (rc == CPORT_EREFUSED) {
                snprintf(why, sizeof(why), "copy: %s refused Status: %s", a->nodes[i].id,
                         a->nodes[i].err);
                return fail_abort(a, why);
            }
        }
        if (!collect_progress(a, &p, why, sizeof(why))) {
            if (tty) {
                fputc('\n', stderr);
            }
            return fail_abort(a, why);
        }
        if (p.items != last.items || p.bytes != last.bytes || p.backlog != last.backlog) {
            last_change = util_now_ms();
        }
        if (util_now_ms() - rate_t >= 1000) {
            rate = (double)(p.bytes - rate_bytes) * 1000.0 / (double)(util_now_ms() - rate_t);
            rate_bytes = p.bytes;
            rate_t = util_now_ms();
        }
        last = p;
        if (util_now_ms() - last_ctl >= CONTROL_POLL_MS) {
            uint64_t r = a->rec.rate;
            bool     pz = req.paused;

            last_ctl = util_now_ms();
            if (control_poll(a, &r, &pz) && (r != a->rec.rate || pz != req.paused)) {
                a->rec.rate = r;
                req.rate_bytes_per_s = r;
                req.paused = pz;
                if (nodes_broadcast(a, &req, LONG_TIMEOUT_MS, "copy") > 0) {
                    return fail_abort(a, "copy: StartCopy (a new rate or pause) failed");
                }
                ctl_info("copy: %s at %.1f MiB/s%s", pz ? "paused" : "running",
                         (double)r / 1048576.0, r == 0 ? " (unlimited)" : "");
            }
        }
        if (req.paused) {
            /* Held by the operator: no progress is expected, and the
             * fence waits for unpause. */
            last_change = util_now_ms();
        }
        if (p.caught_up && !req.paused) {
            if (rate == 0 && util_now_ms() > t0) {
                rate = (double)p.bytes * 1000.0 / (double)(util_now_ms() - t0);
            }
            show_progress(&p, rate, tty, true);
            break;
        }
        if (util_now_ms() - last_change > STALL_MS) {
            if (tty) {
                fputc('\n', stderr);
            }
            return fail_abort(a, "copy: no progress for 60 s");
        }
        if (tty || util_now_ms() - last_print >= 1000) {
            show_progress(&p, rate, tty, false);
            last_print = util_now_ms();
        }
        if (util_now_ms() - last_beat >= HEARTBEAT_MS) {
            /* The record's `written` time says this admin is alive (ringctl
             * watch takes over a transition whose admin stopped writing);
             * a lost CAS means another admin took it over. */
            if (trec_store(a->store, &a->rec, &a->rec_rev) != EX_OK) {
                return EX_FAILED;
            }
            last_beat = util_now_ms();
        }
        ctl_sleep_ms(POLL_MS);
    }
    a->copy_ms = (uint64_t)(util_now_ms() - t0);
    ctl_info("copy: caught up: %" PRIu64 " items, %" PRIu64 " bytes sent in %.1f s", p.items,
             p.bytes, (double)a->copy_ms / 1000.0);
    maybe_exit_after(a, "copy");
    return EX_OK;
}

/*
 * FENCE
 */

/*
 * Fence every node at once: each fences its moving ranges and drains, so
 * the ranges are held for the slowest node's drain, not for the sum of
 * all of them as with one call after the other. Returns how many nodes
 * failed, as nodes_broadcast().
 */
static uint32_t
fence_all(struct admin *a, const struct cport_request *req)
{
    int     *rc = calloc(a->n_nodes ? a->n_nodes : 1, sizeof(*rc));
    uint32_t i, failed = 0;

    if (rc == NULL) {
        return nodes_broadcast(a, req, LONG_TIMEOUT_MS, "fence");
    }
    nodes_call_parallel(a, req, LONG_TIMEOUT_MS, 0, a->n_nodes, NULL, rc);
    for (i = 0; i < a->n_nodes; i++) {
        if (rc[i] != CPORT_OK) {
            ctl_info("fence: %s (%s): %s", a->nodes[i].id, a->nodes[i].addr, a->nodes[i].err);
            failed++;
        }
    }
    free(rc);
    return failed;
}

/* FENCE: Fence to every node at once (sources drain and reply when the
 * last batch is acked); then record FENCED in the store. */
static int
phase_fence(struct admin *a)
{
    struct cport_request req = transition_request(a, CPORT_FENCE);
    struct progress      p;
    char                 why[1024];
    int64_t              t0 = util_now_ms();
    uint32_t             i;

    if (fence_all(a, &req) > 0) {
        return fail_abort(a, "fence: a node refused or is unreachable");
    }
    a->fence_ms = (uint64_t)(util_now_ms() - t0);
    for (i = 0; i < a->n_nodes; i++) {
        if (a->nodes[i].st.fence_held_ms > a->fence_ms) {
            a->fence_ms = a->nodes[i].st.fence_held_ms;
        }
    }
    if (!collect_progress(a, &p, why, sizeof(why))) {
        return fail_abort(a, why);
    }
    a->moved_items = p.items;
    a->moved_bytes = p.bytes;
    a->rec.phase = TREC_FENCED;
    if (trec_store(a->store, &a->rec, &a->rec_rev) != EX_OK) {
        return fail_abort(a, "fence: cannot record FENCED");
    }
    ctl_info("fence: %u nodes fenced in %" PRIu64 " ms", a->n_nodes, a->fence_ms);
    maybe_exit_after(a, "fence");
    return EX_OK;
}

/*
 * COMMIT and CLEANUP
 */

/* Ask every node its Status and report a boot id changed since PREPARE
 * (nodes that do not answer are left to Commit's retries). */
static bool
boot_changed_now(struct admin *a)
{
    struct cport_request sreq = { .kind = CPORT_STATUS };
    struct tnode        *t;
    uint32_t             i;
    int                 *rc = calloc(a->n_nodes ? a->n_nodes : 1, sizeof(*rc));

    int64_t deadline = util_now_ms() + BOOT_CHECK_MS;

    /* Every node at once first (the moving ranges are fenced meanwhile);
     * then one after the other, again, those that did not answer. */
    if (rc != NULL) {
        nodes_call_parallel(a, &sreq, a->g->timeout_ms, 0, a->n_nodes, NULL, rc);
    }
    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *n = &a->nodes[i];

        if (rc != NULL && rc[i] == CPORT_OK) {
            continue;
        }
        /* A connection to a node that restarted fails once; the next call
         * connects again and reads the new boot id. A node the plan had a
         * boot id for is asked again until it answers (one restarting
         * may take a moment to serve its cluster port): its old Status
         * would hide the restart, and committing a joiner that lost its
         * copy loses the keys it gained (R=1). */
        while (node_call(a, n, &sreq, a->g->timeout_ms) != CPORT_OK &&
               trec_boot_id(&a->rec, n->id) != 0 && util_now_ms() < deadline) {
            ctl_sleep_ms(100);
        }
    }
    free(rc);
    t = boot_changed(a);
    if (t == NULL) {
        return false;
    }
    ctl_info("commit: %s restarted since PREPARE (boot id %016" PRIx64 " -> %016" PRIx64
             "): it lost what it imported",
             t->id, trec_boot_id(&a->rec, t->id), t->st.boot_id);
    return true;
}

/* The store's commit: active N -> N+1, history, delete pending, keep the
 * record as committed.meta, and the move's line in the history of moves
 * (ringctl history), in one transaction: a crash leaves it whole (resume
 * re-sends Commit) or not begun (resume commits again); one store write
 * while the moving ranges are fenced. */
static int
store_commit(struct admin *a)
{
    struct mstore_op ops[6];
    char             name[64];
    size_t           len = 0, rlen = 0, hlen = 0, nops = 5;
    char            *text = ctl_members_text(a->new, &len);
    char            *rtext = trec_format(&a->rec, &rlen);
    char            *htext = ctl_history_text(a, "committed", NULL, &hlen);
    int              rc;

    if (text == NULL || rtext == NULL) {
        free(text);
        free(rtext);
        free(htext);
        ctl_error("out of memory");
        return EX_FAILED;
    }
    snprintf(name, sizeof(name), "history/epoch-%" PRIu64 ".members", a->new->epoch);
    ops[0] = (struct mstore_op){ MSTORE_PUT, REC_ACTIVE, a->active_rev, text, len };
    ops[1] = (struct mstore_op){ MSTORE_PUT, name, MSTORE_ANY_REV, text, len };
    ops[2] = (struct mstore_op){ MSTORE_DELETE, REC_PENDING, a->pm_rev, NULL, 0 };
    ops[3] = (struct mstore_op){ MSTORE_DELETE, REC_PENDING_TREC, a->rec_rev, NULL, 0 };
    /* The record stays, as the last committed one: nodes still pending
     * with its token (the admin died right after this, or a node missed
     * every Commit retry) take `resume`'s Commit only with it. */
    ops[4] = (struct mstore_op){ MSTORE_PUT, REC_COMMITTED_TREC, MSTORE_ANY_REV, rtext, rlen };
    if (htext != NULL) {
        ops[nops++] =
            (struct mstore_op){ MSTORE_PUT, CTL_HISTORY_RECORD, MSTORE_ANY_REV, htext, hlen };
    } else {
        ctl_info("history: the move will not be recorded (the store's history cannot be read)");
    }
    rc = mstore_txn(a->store, ops, nops, NULL, NULL, err_buf, sizeof(err_buf));
    free(text);
    free(rtext);
    free(htext);
    if (rc != MSTORE_OK) {
        ctl_error("commit: store: %s%s", err_buf,
                  rc == MSTORE_ECONFLICT
                      ? " (another admin aborted or changed the store; nothing was committed)"
                      : "");
        return rc == MSTORE_ECONFLICT ? EX_FAILED : EX_USAGE;
    }
    ctl_info("commit: store: epoch %" PRIu64 " is active", a->new->epoch);
    return EX_OK;
}

/* Deliver Commit in commit order — destinations, then the others, sources
 * last — with the nodes of one rank at once (the fenced ranges wait for the
 * slowest of each rank, not for the sum of all nodes), retrying silent
 * nodes for a bounded time. Returns how many never acknowledged. */
uint32_t
deliver_commit(struct admin *a)
{
    struct cport_request req = transition_request(a, CPORT_COMMIT);
    int64_t              deadline = util_now_ms() + COMMIT_RETRY_MS;
    uint32_t             n = a->n_nodes ? a->n_nodes : 1;
    bool                *done = calloc(n, sizeof(*done));
    int                 *rc = calloc(n, sizeof(*rc));
    uint32_t             i, lo, hi, left = a->n_nodes;

    if (done == NULL || rc == NULL) {
        free(done);
        free(rc);
        return a->n_nodes;
    }
    for (;;) {
        /* a->nodes is sorted by rank, so each rank is one run [lo, hi). */
        for (lo = 0; lo < a->n_nodes; lo = hi) {
            for (hi = lo + 1; hi < a->n_nodes && a->nodes[hi].rank == a->nodes[lo].rank; hi++)
                ;
            nodes_call_parallel(a, &req, LONG_TIMEOUT_MS, lo, hi, done, rc);
            for (i = lo; i < hi; i++) {
                /* A node already at N+1 (a repeated commit) is done too. */
                if (!done[i] &&
                    (rc[i] == CPORT_OK ||
                     (a->nodes[i].have_st && a->nodes[i].st.active_epoch >= a->new->epoch))) {
                    done[i] = true;
                    left--;
                }
            }
        }
        if (left == 0 || util_now_ms() >= deadline) {
            break;
        }
        ctl_sleep_ms(200);
    }
    for (i = 0; i < a->n_nodes; i++) {
        if (!done[i]) {
            ctl_info("warning: commit: %s (%s) did not acknowledge epoch %" PRIu64 ": %s; the "
                     "commit stands (the store decided it); `ringctl resume` re-sends it",
                     a->nodes[i].id, a->nodes[i].addr, a->new->epoch, a->nodes[i].err);
        }
    }
    free(done);
    free(rc);
    return left;
}

/* CLEANUP: wait (bounded) for every reachable node to report no orphans
 * (wait_cleanup: see ctl_transition.h). */
bool
wait_cleanup(struct admin *a)
{
    struct cport_request sreq = { .kind = CPORT_STATUS };
    int64_t              deadline = util_now_ms() + CLEANUP_WAIT_MS;
    uint64_t             orphans;
    uint32_t             i;

    for (;;) {
        orphans = 0;
        for (i = 0; i < a->n_nodes; i++) {
            if (node_call(a, &a->nodes[i], &sreq, a->g->timeout_ms) == CPORT_OK) {
                orphans += a->nodes[i].st.orphans;
            }
        }
        if (orphans == 0) {
            return true;
        }
        if (util_now_ms() >= deadline) {
            ctl_info("warning: cleanup: %" PRIu64 " orphan items still held after %d s", orphans,
                     CLEANUP_WAIT_MS / 1000);
            return false;
        }
        ctl_sleep_ms(200);
    }
}

/* COMMIT + CLEANUP + summary. */
static int
phase_commit(struct admin *a)
{
    uint32_t missed;
    bool     clean;
    int      rc;

    /* The last moment the transition can still be undone: a node that
     * restarted since PREPARE lost what it imported (or held), so it must
     * not be committed as an owner of it. The Fence replies were checked;
     * this closes the window up to the store's commit. */
    maybe_pause_at(a, "commit");
    if (boot_changed_now(a)) {
        return fail_abort(a, "commit: a node restarted since the transition began");
    }
    rc = store_commit(a);
    if (rc != EX_OK) {
        return rc;
    }
    maybe_exit_after(a, "commit");
    missed = deliver_commit(a);
    clean = wait_cleanup(a);
    ctl_out_line(stdout, NULL, "i", "epoch\t%" PRIu64 "\n", a->new->epoch);
    ctl_out_line(stdout, NULL, "s", "op\t%s\n", a->rec.op);
    ctl_out_line(stdout, NULL, "i", "moved_items\t%" PRIu64 "\n", a->moved_items);
    ctl_out_line(stdout, NULL, "i", "moved_bytes\t%" PRIu64 "\n", a->moved_bytes);
    ctl_out_line(stdout, NULL, "i", "fence_ms\t%" PRIu64 "\n", a->fence_ms);
    ctl_out_line(stdout, NULL, "f", "seconds\t%.2f\n",
                 (double)(util_now_ms() - a->t_start) / 1000.0);
    ctl_out_line(stdout, NULL, "i", "nodes_not_committed\t%u\n", missed);
    ctl_out_line(stdout, NULL, "s", "cleanup\t%s\n", clean ? "done" : "incomplete");
    return EX_OK;
}

/* The phases before the commit, in order, each with the last recorded
 * phase it runs from: `ringctl resume` of a transition recorded as
 * COPYING starts over at the copy. The commit always runs. */
static const struct {
    int (*run)(struct admin *a);
    enum trec_phase upto;
} phases[] = {
    { phase_prepare, TREC_PREPARED },
    { phase_copy, TREC_COPYING },
    { phase_fence, TREC_FENCED },
};

/* run_from: see ctl_transition.h. */
int
run_from(struct admin *a, enum trec_phase from)
{
    size_t i;
    int    rc = EX_OK;

    for (i = 0; rc == EX_OK && i < sizeof(phases) / sizeof(phases[0]); i++) {
        if (from <= phases[i].upto) {
            rc = phases[i].run(a);
        }
    }
    return rc == EX_OK ? phase_commit(a) : rc;
}

/*
 * Starting a change
 */

/* Apply one join or leave to a->new (the membership being built: an id or
 * an address another change of the same transition took counts too). */
static int
apply_one(struct admin *a, bool join, const char *id, const char *addr, uint32_t weight,
          const char *zone)
{
    uint32_t i;

    if (join) {
        if (ring_members_find(a->new, id) >= 0) {
            ctl_error("join: %s is already a member of epoch %" PRIu64 "%s", id, a->old->epoch,
                      ring_members_find(a->old, id) >= 0 ? "" : " (or named twice)");
            return EX_USAGE;
        }
        /* Two members at one address: the node there answers as itself,
         * so the joiner's ranges would be copied to the wrong node and
         * the copy refused mid-transition. Refuse it before the store. */
        for (i = 0; i < a->new->n_nodes; i++) {
            if (strcmp(a->new->nodes[i].addr, addr) == 0) {
                ctl_error("join: %s is already the address of %s in epoch %" PRIu64, addr,
                          a->new->nodes[i].id, a->old->epoch);
                return EX_USAGE;
            }
        }
        if (ring_members_add(a->new, id, addr, weight, zone) != RING_OK) {
            ctl_error("join: invalid node '%s' '%s' (id [A-Za-z0-9._:-]{1,64}, "
                      "addr host:port)",
                      id, addr);
            return EX_USAGE;
        }
    } else {
        if (ring_members_remove(a->new, id) != RING_OK) {
            ctl_error("leave: %s is not a member of epoch %" PRIu64 "%s", id, a->old->epoch,
                      ring_members_find(a->old, id) >= 0 ? " (named twice)" : "");
            return EX_USAGE;
        }
        if (a->new->n_nodes == 0) {
            ctl_error("leave: %s is the last node; a cluster cannot be empty", id);
            return EX_USAGE;
        }
    }
    return EX_OK;
}

/* make_new: see ctl_transition.h. EX_USAGE for a refused change (printed),
 * EX_FAILED when out of memory. */
int
make_new(struct admin *a, bool join, const char *id, const char *addr, uint32_t weight,
         const char *zone)
{
    a->new = ring_members_dup(a->old);
    if (a->new == NULL) {
        ctl_error("out of memory");
        return EX_FAILED;
    }
    a->new->epoch = a->old->epoch + 1;
    return apply_one(a, join, id, addr, weight, zone);
}

/* change_run: see ctl_transition.h. PREPARE in the store: pending.members
 * and the transition record are created in one transaction, conditional on
 * the active epoch N, which is how two admins racing are told apart. */
int
change_run(struct ctl_globals *g, const struct change_opts *o)
{
    struct admin        a = { .g = g, .exit_after_ok = true };
    const char         *id = o->id, *addr = o->addr, *zone = o->zone;
    char                host[128] = "?", *ptext = NULL, *mtext = NULL;
    const char         *user = getenv("USER");
    const char         *kind = o->reshape != NULL ? o->op
                               : o->join          ? "join"
                               : o->remove_failed ? "remove"
                                                  : "leave";
    bool                join = o->join;
    uint32_t            weight = o->weight;
    double              rate_mib = o->rate_mib;
    struct mstore_op    ops[3];
    struct admin_lease *lease = NULL;
    size_t              plen = 0, mlen = 0, failed = 0;
    int                 rc;

    a.t_start = util_now_ms();
    rc = admin_load(&a, true);
    if (rc != EX_OK) {
        goto out;
    }
    if (a.old == NULL) {
        ctl_error("%s: the store has no active membership (ringctl init first)", kind);
        rc = EX_USAGE;
        goto out;
    }
    if (a.new != NULL || a.have_rec) {
        ctl_error("another transition is pending (exit 3):");
        print_pending(&a, stderr);
        rc = EX_PENDING;
        goto out;
    }
    if (o->admit != NULL) {
        rc = o->admit(&a, o);
        if (rc != EX_OK) {
            goto out;
        }
    }
    if (o->remove_failed) {
        admin_add_failed(&a, id); /* nothing is pending: the only one */
    }
    rc = o->reshape != NULL ? o->reshape(&a, o) : make_new(&a, join, id, addr, weight, zone);
    for (size_t k = 0; rc == EX_OK && o->reshape == NULL && k < o->n_more; k++) {
        /* More nodes of the same join or leave: one transition. */
        rc = apply_one(&a, join, o->more[k * (join ? 2 : 1)], join ? o->more[k * 2 + 1] : NULL,
                       weight, zone);
    }
    if (rc != EX_OK) {
        goto out;
    }
    /* PREPARE in the store: create pending, conditional on active N. */
    if (getrandom(a.rec.token, TREC_TOKEN_BYTES, 0) != TREC_TOKEN_BYTES) {
        ctl_error("getrandom: %s", strerror(errno));
        rc = EX_FAILED;
        goto out;
    }
    gethostname(host, sizeof(host) - 1);
    a.rec.phase = TREC_PREPARED;
    a.rec.from_epoch = a.old->epoch;
    a.rec.epoch = a.new->epoch;
    a.rec.rate = (uint64_t)(rate_mib * 1048576.0);
    a.rec.started = (int64_t)time(NULL);
    if (o->reshape != NULL) {
        snprintf(a.rec.op, sizeof(a.rec.op), "%s", o->op);
    } else if (join) {
        snprintf(a.rec.op, sizeof(a.rec.op), "join %s %s", id, addr);
    } else if (o->remove_failed) {
        snprintf(a.rec.op, sizeof(a.rec.op), "%s%s", OP_REMOVE_FAILED, id);
    } else {
        snprintf(a.rec.op, sizeof(a.rec.op), "leave %s", id);
    }
    for (size_t k = 0; k < o->n_more; k++) {
        /* The others of a multi-node change: " +ID" each, while they fit. */
        size_t used = strlen(a.rec.op);

        snprintf(a.rec.op + used, sizeof(a.rec.op) - used, " +%s", o->more[k * (join ? 2 : 1)]);
    }
    snprintf(a.rec.admin, sizeof(a.rec.admin), "%s@%s pid %ld", user ? user : "?", host,
             (long)getpid());
    /* Held before the pending record exists: a pending record with no
     * admin lease beside it has lost its admin (client/ctl_lease.h). */
    lease = admin_lease_start(g->store, a.rec.op);
    ptext = ctl_members_text(a.new, &plen);
    mtext = trec_format(&a.rec, &mlen);
    if (ptext == NULL || mtext == NULL) {
        ctl_error("out of memory");
        rc = EX_FAILED;
        goto out;
    }
    ops[0] = (struct mstore_op){ MSTORE_CHECK, REC_ACTIVE, a.active_rev, NULL, 0 };
    ops[1] = (struct mstore_op){ MSTORE_CREATE, REC_PENDING, 0, ptext, plen };
    ops[2] = (struct mstore_op){ MSTORE_CREATE, REC_PENDING_TREC, 0, mtext, mlen };
    rc = mstore_txn(a.store, ops, 3, &failed, &a.pm_rev, err_buf, sizeof(err_buf));
    if (rc == MSTORE_ECONFLICT) {
        ctl_error("%s: another admin won (%s)", kind,
                  failed == 0 ? "the active epoch changed" : "a transition is pending");
        if (admin_load_state(&a) == EX_OK) {
            print_pending(&a, stderr);
        }
    }
    rc = admin_txn_status(rc, err_buf);
    if (rc != EX_OK) {
        goto out;
    }
    a.rec_rev = a.pm_rev;
    a.have_rec = true;
    ctl_info("plan: %s: epoch %" PRIu64 " -> %" PRIu64 "; pending recorded in the store", a.rec.op,
             a.rec.from_epoch, a.rec.epoch);
    rc = nodes_build(&a);
    if (rc == EX_OK) {
        rc = run_from(&a, TREC_PREPARED);
    } else {
        rc = fail_abort(&a, "plan");
    }
out:
    admin_lease_stop(lease);
    free(ptext);
    free(mtext);
    admin_free(&a);
    return rc;
}
