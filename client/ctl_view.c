/*
 * ctl_view: `ringctl status`, the report (the store's epochs, then each
 * node as it answers), and --watch, the report as a live view: on a
 * terminal the alternate screen, redrawn in place every interval, q
 * without Enter, the terminal given back on q, Ctrl-C or SIGTERM; not on
 * a terminal, one report after another.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "client/ctl.h"
#include "client/ctl_util.h"
#include "client/cport_client.h"
#include "client/ctl_pending.h"
#include "client/ctl_transition.h"
#include "ring/ring.h"

/* Append ",x" (or "x") to a column cell. */
static void
cell_add(char *buf, size_t len, const char *x)
{
    size_t n = strlen(buf);

    if (n + strlen(x) + 2 < len) {
        snprintf(buf + n, len - n, "%s%s", n > 0 ? "," : "", x);
    }
}

/* The heartbeat views around node n: which peers n sees suspect or down
 * ("id:state"), and which nodes see n down or suspect. "-" when none. */
static void
peer_views(struct admin *a, const struct tnode *n, char *sees, size_t slen, char *by, size_t blen)
{
    uint32_t i, k;

    sees[0] = by[0] = '\0';
    for (k = 0; n->have_st && k < n->st.n_peers; k++) {
        const struct cport_peer *p = &n->st.peers[k];
        char                     cell[RING_ID_MAX + 16];

        if (p->state == CPORT_PEER_DOWN || p->state == CPORT_PEER_SUSPECT) {
            snprintf(cell, sizeof(cell), "%s:%s", p->node_id, cport_peer_health_name(p->state));
            cell_add(sees, slen, cell);
        }
    }
    for (i = 0; i < a->n_nodes; i++) {
        const struct tnode *o = &a->nodes[i];

        for (k = 0; o != n && o->have_st && k < o->st.n_peers; k++) {
            const struct cport_peer *p = &o->st.peers[k];

            if (strcmp(p->node_id, n->id) == 0 &&
                (p->state == CPORT_PEER_DOWN || p->state == CPORT_PEER_SUSPECT)) {
                cell_add(by, blen, o->id);
            }
        }
    }
    if (sees[0] == '\0') {
        snprintf(sees, slen, "-");
    }
    if (by[0] == '\0') {
        snprintf(by, blen, "-");
    }
}

int
ctl_status_print(struct ctl_globals *g, FILE *out)
{
    struct admin         a = { .g = g };
    struct cport_request sreq = { .kind = CPORT_STATUS };
    struct ctl_table     t = { .ncols = 15, .name = "nodes", .types = "sssiiSiifbiiSll" };
    const char          *sep;
    char                 pend[512];
    struct ring         *r = NULL;
    double              *share = NULL;
    uint32_t             i, bad = 0;
    uint64_t             epoch;
    int                  rc;

    rc = admin_load(&a, true);
    if (rc != EX_OK) {
        goto out;
    }
    epoch = a.old != NULL ? a.old->epoch : 0;
    /* Two header lines: TSV, or "name:  value" words for people. */
    sep = g->human ? " " : "\t";
    ctl_out_line(out, NULL, "i", "epoch%s%" PRIu64 "\n", g->human ? ":   " : "\t", epoch);
    if (a.have_rec) {
        snprintf(pend, sizeof(pend), "%" PRIu64 "%s%s%s%s", a.rec.epoch, sep,
                 trec_phase_name(a.rec.phase), sep, a.rec.op);
    } else if (a.new != NULL) {
        snprintf(pend, sizeof(pend), "%" PRIu64 "%sINCOMPLETE%s%s without %s", a.new->epoch, sep,
                 sep, REC_PENDING, REC_PENDING_TREC);
    } else {
        snprintf(pend, sizeof(pend), "none");
    }
    /* JSON: [epoch, phase, op], or null for none. */
    ctl_out_line(out, NULL, "iss", "pending%s%s\n", g->human ? ": " : "\t", pend);
    ctl_out_line(out, NULL, "s", "phase%s%s\n", g->human ? ":   " : "\t",
                 a.have_rec      ? trec_phase_name(a.rec.phase)
                 : a.new != NULL ? "INCOMPLETE"
                                 : "NONE");
    if (a.old == NULL) {
        goto out;
    }
    r = ring_build(a.old);
    share = calloc(a.old->n_nodes, sizeof(*share));
    if (r == NULL || share == NULL) {
        ctl_error("cannot build the ring of epoch %" PRIu64, epoch);
        rc = EX_FAILED;
        goto out;
    }
    ring_shares(r, share);
    rc = nodes_build(&a);
    if (rc != EX_OK) {
        goto out;
    }
    ctl_table_row(&t, "id\taddr\tstate\tactive\tpending\tphase\titems\tbytes\tshare\tboot_changed"
                      "\torphans\tmisrouted\tflags\tsees_down\tseen_down_by");
    /* Every node first: the seen_down_by column needs the others' views. */
    for (i = 0; i < a.n_nodes; i++) {
        if (node_call(&a, &a.nodes[i], &sreq, g->timeout_ms) != CPORT_OK) {
            a.nodes[i].have_st = false;
        }
    }
    for (i = 0; i < a.n_nodes; i++) {
        struct tnode *n = &a.nodes[i];
        int           idx = ring_members_find(a.old, n->id);
        char          sh[32];
        uint64_t      want_boot = a.have_rec ? trec_boot_id(&a.rec, n->id) : 0;

        snprintf(sh, sizeof(sh), g->human ? "%.1f%%" : "%.4f",
                 idx >= 0 ? share[idx] * (g->human ? 100 : 1) : 0.0);
        char flags[64], sees[512], by[512];

        peer_views(&a, n, sees, sizeof(sees), by, sizeof(by));
        if (!n->have_st) {
            ctl_table_row(&t, "%s\t%s\tdown\t-\t-\t-\t-\t-\t%s\t-\t-\t-\t-\t-\t%s", n->id, n->addr,
                          sh, by);
            ctl_info("status: %s (%s): %s", n->id, n->addr, n->err);
            bad++;
            continue;
        }
        if (n->st.recovering) {
            snprintf(flags, sizeof(flags), "recovering");
        } else if (n->st.behind_epoch != 0) {
            snprintf(flags, sizeof(flags), "behind:%" PRIu64, n->st.behind_epoch);
        } else {
            snprintf(flags, sizeof(flags), "-");
        }
        ctl_table_row(&t,
                      "%s\t%s\tup\t%" PRIu64 "\t%" PRIu64 "\t%s\t%" PRIu64 "\t%" PRIu64
                      "\t%s\t%s\t%" PRIu64 "\t%" PRIu64 "\t%s\t%s\t%s",
                      n->id, n->addr, n->st.active_epoch, n->st.pending_epoch,
                      cport_phase_name(n->st.phase), n->st.curr_items, n->st.bytes, sh,
                      want_boot == 0               ? "-"
                      : want_boot != n->st.boot_id ? "yes"
                                                   : "no",
                      n->st.orphans, n->st.misrouted, flags, sees, by);
        if (n->st.recovering || n->st.behind_epoch != 0) {
            ctl_info("status: %s is %s: `ringctl repair %s` brings its ranges back", n->id, flags,
                     n->id);
            bad++;
        }
        /* Nodes of the active epoch must be at it; a joining node is not yet. */
        if (idx >= 0 && n->st.active_epoch != epoch) {
            ctl_info("status: %s is at epoch %" PRIu64 ", the store at %" PRIu64, n->id,
                     n->st.active_epoch, epoch);
            bad++;
        }
    }
    ctl_table_print(&t, g->human, out);
    rc = bad > 0 ? EX_FAILED : EX_OK;
out:
    free(share);
    ring_free(r);
    admin_free(&a);
    return rc;
}

static volatile sig_atomic_t view_stop;

static void
on_stop(int sig)
{
    (void)sig;
    view_stop = 1;
}

/* SIGWINCH only has to wake the wait; the next frame reads the size. */
static void
on_winch(int sig)
{
    (void)sig;
}

/* The terminal's size, 80x24 when it does not say. */
static void
term_size(int *cols, int *rows)
{
    struct winsize ws;

    *cols = 80;
    *rows = 24;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
        *cols = ws.ws_col;
        *rows = ws.ws_row;
    }
}

/* Draw frame [buf, buf+len) over the previous one: line by line from the
 * top, each cut to the width (a wrapped line would scroll the screen) and
 * cleared to its end, then the screen below cleared. */
static void
draw_in_place(const char *buf, size_t len)
{
    const char *p = buf, *end = buf + len;
    int         cols, rows, row = 0;

    term_size(&cols, &rows);
    fputs("\033[H", stdout);
    while (p < end && row < rows) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t      n = (size_t)((nl != NULL ? nl : end) - p);

        if (row > 0) {
            fputs("\r\n", stdout);
        }
        fwrite(p, 1, n < (size_t)cols ? n : (size_t)cols, stdout);
        fputs("\033[K", stdout);
        row++;
        p = nl != NULL ? nl + 1 : end;
    }
    fputs("\033[J", stdout);
    fflush(stdout);
}

/* Wait up to ms for q on the keyboard (keys: stdin is a terminal in
 * non-canonical mode). True when the view should end. */
static bool
wait_for_quit(int ms, bool keys)
{
    struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
    char          c;

    if (poll(&pfd, keys ? 1 : 0, ms) > 0 && (pfd.revents & POLLIN)) {
        ssize_t n = read(STDIN_FILENO, &c, 1);

        if (n == 0 || (n == 1 && (c == 'q' || c == 'Q'))) {
            return true;
        }
    }
    return view_stop != 0;
}

int
ctl_status_watch(struct ctl_globals *g, double interval)
{
    struct ctl_globals frame_g = *g;
    struct sigaction   sa, old_int, old_term, old_winch;
    struct termios     saved, raw;
    bool               tty = isatty(STDOUT_FILENO), keys = false;
    int                ms = (int)(interval * 1000);

    frame_g.human = true;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop; /* no SA_RESTART: the wait returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, &old_winch);
    if (tty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
        raw = saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        keys = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    if (tty) {
        fputs("\033[?1049h\033[?25l", stdout); /* alternate screen, no cursor */
    }
    while (view_stop == 0) {
        char     *buf = NULL, when[32];
        size_t    len = 0;
        FILE     *m = open_memstream(&buf, &len);
        time_t    now = time(NULL);
        struct tm tm;

        if (m == NULL) {
            break;
        }
        gmtime_r(&now, &tm);
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
        fprintf(m, "ringctl status --watch: every %gs, %s UTC%s\n\n", interval, when,
                keys ? "  (q quits)" : "");
        /* A node that does not answer, or the store, is reported in the
         * frame, where it is seen, not under it. */
        ctl_error_to(m);
        ctl_status_print(&frame_g, m);
        ctl_error_to(NULL);
        fclose(m);
        if (view_stop != 0) {
            /* A signal cut the report short (its reads were interrupted):
             * end without showing half of it. */
            free(buf);
            break;
        }
        if (tty) {
            draw_in_place(buf, len);
        } else {
            fwrite(buf, 1, len, stdout);
            fputc('\n', stdout);
            fflush(stdout);
        }
        free(buf);
        if (wait_for_quit(ms, keys)) {
            break;
        }
    }
    if (tty) {
        fputs("\033[?25h\033[?1049l", stdout);
        fflush(stdout);
    }
    if (keys) {
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGWINCH, &old_winch, NULL);
    return EX_OK;
}
