/*
 * ctl_ring: ringctl's placement subcommands, computed locally from
 * membership files with the ring library: locate (preference lists of
 * keys), ring (points and share per node), plan (what a change moves).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "config.h"
#include "client/ctl.h"
#include "client/ctl_svg.h"
#include "client/ctl_util.h"
#include "ring/ring.h"

#define CTL_KEY_MAX 65536 /* longest key line read from stdin */

/* Load a membership file and build its ring: the ring, with *m its
 * membership (both the caller's to free), or NULL after printing why
 * (*m NULL too). */
static struct ring *
load_ring(const char *path, struct ring_members **m)
{
    struct ring *r;

    *m = ctl_load_members(path);
    if (*m == NULL) {
        return NULL;
    }
    r = ring_build(*m);
    if (r == NULL) {
        ctl_error("%s: cannot build the ring (more than %u points in all, "
                  "or out of memory)",
                  path, RING_POINTS_MAX);
        ring_members_free(*m);
        *m = NULL;
    }
    return r;
}

/* Parse a positive decimal <= max; -1 when it is not one. */
static long
parse_count(const char *s, long max)
{
    char *end;
    long  v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 1 || v > max) {
        return -1;
    }
    return v;
}

/* Print one key's preference list as KEY<TAB>id,id,... */
static void
print_locate(const struct ring *r, const char *key, size_t len, uint32_t want, uint32_t *out)
{
    const struct ring_members *m = ring_members(r);
    uint32_t                   n, i;
    char                      *ids = NULL;
    size_t                     lens[2] = { len, 0 };
    FILE                      *f = open_memstream(&ids, &lens[1]);

    n = ring_locate(r, ring_hash(key, len), want, out);
    for (i = 0; i < n && f != NULL; i++) {
        fprintf(f, "%s%s", i > 0 ? "," : "", m->nodes[out[i]].id);
    }
    if (f == NULL || fclose(f) != 0) {
        ctl_error("locate: out of memory");
        return;
    }
    const char *cells[2] = { key, ids };

    ctl_out_cells("owners:key,nodes", "sl", 2, cells, lens);
    free(ids);
}

/* ringctl locate --members FILE [--replicas R] [KEY...]: see ctl.h. Keys
 * come from stdin, one per line, when none are given (empty lines are
 * skipped: a cache key is never empty). */
int
ctl_locate(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "members", required_argument, NULL, 'm' },
                                          { "replicas", required_argument, NULL, 'r' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char          usage[] = "ringctl locate --members FILE [--replicas R] [KEY...]";
    const char                *path = g->members;
    struct ring_members       *m = NULL;
    struct ring               *r = NULL;
    uint32_t                  *out = NULL;
    long                       want = 0;
    char                      *line = NULL;
    size_t                     cap = 0;
    ssize_t                    got;
    int                        c, rc = 2;

    while ((c = getopt_long(argc, argv, "m:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            path = optarg;
            break;
        case 'r':
            want = parse_count(optarg, RING_NODES_MAX);
            if (want < 0) {
                ctl_error("locate: --replicas: expected a number 1..%d", RING_NODES_MAX);
                return 2;
            }
            break;
        default:
            return ctl_getopt_default(c, usage, 0);
        }
    }
    if (path == NULL) {
        ctl_error("locate: --members FILE is required");
        return 2;
    }
    r = load_ring(path, &m);
    if (r == NULL) {
        goto out;
    }
    if (want == 0) {
        want = m->replicas;
    }
    out = malloc((size_t)want * sizeof(*out));
    if (out == NULL) {
        ctl_error("locate: out of memory");
        rc = 1;
        goto out;
    }
    if (optind < argc) {
        for (; optind < argc; optind++) {
            print_locate(r, argv[optind], strlen(argv[optind]), (uint32_t)want, out);
        }
    } else {
        while ((got = getline(&line, &cap, stdin)) >= 0) {
            size_t len = (size_t)got;

            if (len > 0 && line[len - 1] == '\n') {
                len--;
            }
            if (len > 0 && line[len - 1] == '\r') {
                len--;
            }
            if (len > CTL_KEY_MAX) {
                ctl_error("locate: key longer than %d bytes on stdin", CTL_KEY_MAX);
                goto out;
            }
            if (len > 0) {
                print_locate(r, line, len, (uint32_t)want, out);
            }
        }
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    free(line);
    free(out);
    ring_free(r);
    ring_members_free(m);
    return rc;
}

/* Sum of the weights of a membership. */
static double
weight_sum(const struct ring_members *m)
{
    double   w = 0;
    uint32_t i;

    for (i = 0; i < m->n_nodes; i++) {
        w += m->nodes[i].weight;
    }
    return w;
}

/* Width of the widest id (which 0), addr (1) or zone (2) of m, at least
 * min. */
static int
col_width(const struct ring_members *m, int which, int min)
{
    uint32_t i;
    int      w = min;

    for (i = 0; i < m->n_nodes; i++) {
        const char *s = which == 0   ? m->nodes[i].id
                        : which == 1 ? m->nodes[i].addr
                                     : m->nodes[i].zone;
        int         l = (int)strlen(s);

        if (l > w) {
            w = l;
        }
    }
    return w;
}

/* ringctl ring --members FILE: one row per node (id, addr, weight, zone,
 * points, share %), then a summary with the peak/mean ratio: the largest
 * share divided by the share its weight asks for. */
int
ctl_ring(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "members", required_argument, NULL, 'm' },
                                          { "human", no_argument, NULL, 'H' },
                                          { "svg", required_argument, NULL, 's' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char          usage[] = "ringctl [--human] ring --members FILE [--svg OUT.svg]";
    const char                *path = g->members, *svg = NULL;
    bool                       human = g->human;
    struct ring_members       *m = NULL;
    struct ring               *r = NULL;
    double                    *share = NULL, wsum, peak = 0;
    uint32_t                   i;
    int                        c, rc = 2, wid, wad, wzo;

    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            path = optarg;
            break;
        case 'H':
            human = true;
            break;
        case 's':
            svg = optarg;
            break;
        default:
            return ctl_getopt_default(c, usage, 0);
        }
    }
    if (path == NULL) {
        ctl_error("ring: --members FILE is required");
        return 2;
    }
    if (optind < argc) {
        ctl_error("ring: unexpected argument '%s'", argv[optind]);
        return 2;
    }
    r = load_ring(path, &m);
    if (r == NULL) {
        goto out;
    }
    share = malloc((size_t)m->n_nodes * sizeof(*share));
    if (share == NULL) {
        ctl_error("ring: out of memory");
        rc = 1;
        goto out;
    }
    ring_shares(r, share);
    if (svg != NULL && ctl_ring_svg(r, share, path, svg) < 0) {
        rc = 1;
        goto out;
    }
    wsum = weight_sum(m);
    for (i = 0; i < m->n_nodes; i++) {
        double ratio = share[i] / (m->nodes[i].weight / wsum);

        if (ratio > peak) {
            peak = ratio;
        }
    }
    wid = col_width(m, 0, 2);
    wad = col_width(m, 1, 4);
    wzo = col_width(m, 2, 4);
    if (human) {
        printf("%-*s  %-*s  %6s  %-*s  %9s  %8s\n", wid, "id", wad, "addr", "weight", wzo, "zone",
               "points", "share%");
    } else {
        ctl_out_line(stdout, "nodes", "ssiSif", "id\taddr\tweight\tzone\tpoints\tshare_pct\n");
    }
    for (i = 0; i < m->n_nodes; i++) {
        const struct ring_node *n = &m->nodes[i];
        const char             *zone = n->zone[0] != '\0' ? n->zone : "-";

        if (human) {
            printf("%-*s  %-*s  %6u  %-*s  %9llu  %8.4f\n", wid, n->id, wad, n->addr, n->weight,
                   wzo, zone, (unsigned long long)n->weight * m->vnodes, share[i] * 100);
        } else {
            ctl_out_line(stdout, "nodes", "ssiSif", "%s\t%s\t%u\t%s\t%llu\t%.4f\n", n->id, n->addr,
                         n->weight, zone, (unsigned long long)n->weight * m->vnodes,
                         share[i] * 100);
        }
    }
    ctl_out_line(stdout, NULL, NULL,
                 "# epoch %llu vnodes %u replicas %u nodes %u points %u "
                 "peak/mean %.4f\n",
                 (unsigned long long)m->epoch, m->vnodes, m->replicas, m->n_nodes, ring_n_points(r),
                 peak);
    ctl_out_add("epoch", json_object_new_uint64(m->epoch));
    ctl_out_add("vnodes", json_object_new_int64(m->vnodes));
    ctl_out_add("replicas", json_object_new_int64(m->replicas));
    ctl_out_add("points", json_object_new_int64(ring_n_points(r)));
    ctl_out_add("peak_mean", json_object_new_double(peak));
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    free(share);
    ring_free(r);
    ring_members_free(m);
    return rc;
}

/* True when node index x of list l[0..n) is there. */
static bool
in_list(const uint32_t *l, uint32_t n, uint32_t x)
{
    uint32_t i;

    for (i = 0; i < n; i++) {
        if (l[i] == x) {
            return true;
        }
    }
    return false;
}

/* Per-node movement for plan, indexed by the node's row (old nodes first,
 * then the added ones). */
struct plan_row {
    const char *id;
    double      old_share, new_share;
    double      pgain, ploss, rgain, rloss;
    bool        in_new; /* the node is in the new membership */
};

/* qsort_r comparator: row indexes by id. */
static int
cmp_rows(const void *a, const void *b, void *arg)
{
    const struct plan_row *rows = arg;

    return strcmp(rows[*(const uint32_t *)a].id, rows[*(const uint32_t *)b].id);
}

/*
 * Fill rows: one per old node (row i = old node i), then one per added
 * node; bmap[j] = row of new node j. Sorting keeps this O(n log n) for
 * 10,000-node memberships. Returns the number of rows, 0 on ENOMEM.
 */
static uint32_t
plan_rows(const struct ring_members *ma, const struct ring_members *mb, struct plan_row *rows,
          uint32_t *bmap)
{
    uint32_t        *oa, *ob, i, j, n = ma->n_nodes;
    struct plan_row *tmp;

    oa = malloc((size_t)ma->n_nodes * sizeof(*oa));
    ob = malloc((size_t)mb->n_nodes * sizeof(*ob));
    tmp = calloc(mb->n_nodes, sizeof(*tmp));
    if (oa == NULL || ob == NULL || tmp == NULL) {
        n = 0;
        goto out;
    }
    for (i = 0; i < ma->n_nodes; i++) {
        rows[i].id = ma->nodes[i].id;
        oa[i] = i;
    }
    for (j = 0; j < mb->n_nodes; j++) {
        tmp[j].id = mb->nodes[j].id;
        ob[j] = j;
        bmap[j] = UINT32_MAX;
    }
    qsort_r(oa, ma->n_nodes, sizeof(*oa), cmp_rows, rows);
    qsort_r(ob, mb->n_nodes, sizeof(*ob), cmp_rows, tmp);
    for (i = 0, j = 0; i < ma->n_nodes && j < mb->n_nodes;) {
        int c = strcmp(rows[oa[i]].id, tmp[ob[j]].id);

        if (c == 0) {
            bmap[ob[j++]] = oa[i++];
        } else if (c < 0) {
            i++;
        } else {
            j++;
        }
    }
    for (j = 0; j < mb->n_nodes; j++) {
        if (bmap[j] == UINT32_MAX) {
            rows[n].id = mb->nodes[j].id;
            bmap[j] = n++;
        }
    }
out:
    free(oa);
    free(ob);
    free(tmp);
    return n;
}

/* One side of a plan under --json: {"file", "epoch", "nodes", "replicas"}. */
static struct json_object *
plan_side(const char *file, const struct ring_members *m)
{
    struct json_object *o = json_object_new_object();

    json_object_object_add(o, "file", json_object_new_string(file));
    json_object_object_add(o, "epoch", json_object_new_uint64(m->epoch));
    json_object_object_add(o, "nodes", json_object_new_int64(m->n_nodes));
    json_object_object_add(o, "replicas", json_object_new_int64(m->replicas));
    return o;
}

/* Print the ids of rows [lo, hi) that are (or are not) in the new
 * membership, comma separated, "-" for none. */
static void
print_rows(const struct plan_row *rows, uint32_t lo, uint32_t hi, bool in_new, const char *label,
           bool human)
{
    uint32_t i;
    int      n = 0;
    char    *ids = NULL;
    size_t   len = 0;
    FILE    *f = open_memstream(&ids, &len);

    for (i = lo; i < hi && f != NULL; i++) {
        if (rows[i].in_new == in_new) {
            fprintf(f, "%s%s", n++ > 0 ? "," : "", rows[i].id);
        }
    }
    if (f != NULL && fclose(f) == 0) {
        ctl_out_line(stdout, NULL, "l", human ? "%-14s %s\n" : "%s\t%s\n", label,
                     n == 0 ? "-" : ids);
    }
    free(ids);
}

/* ringctl plan --from A --to B: fractions of the keyspace whose primary
 * and whose preference list change, nodes added and removed, and per node
 * the share before/after and what it gains and loses as primary and as a
 * holder of the list (the data a handoff moves), in % of the keyspace. */
int
ctl_plan(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "from", required_argument, NULL, 'f' },
                                          { "to", required_argument, NULL, 't' },
                                          { "human", no_argument, NULL, 'H' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char          usage[] = "ringctl [--human] plan --from A.members --to B.members";
    const char                *from = NULL, *to = NULL;
    bool                       human = g->human;
    struct ring_members       *ma = NULL, *mb = NULL;
    struct ring               *ra = NULL, *rb = NULL;
    struct ring_diff          *d = NULL;
    struct plan_row           *rows = NULL;
    double                    *sa = NULL, *sb = NULL;
    uint32_t                  *bmap = NULL, i, k, n_rows = 0;
    int                        c, rc = 2, wid;

    while ((c = getopt_long(argc, argv, "f:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            from = optarg;
            break;
        case 't':
            to = optarg;
            break;
        case 'H':
            human = true;
            break;
        default:
            return ctl_getopt_default(c, usage, 0);
        }
    }
    if (from == NULL || to == NULL) {
        ctl_error("plan: --from FILE and --to FILE are required");
        return 2;
    }
    if (optind < argc) {
        ctl_error("plan: unexpected argument '%s'", argv[optind]);
        return 2;
    }
    ra = load_ring(from, &ma);
    rb = ra != NULL ? load_ring(to, &mb) : NULL;
    if (rb == NULL) {
        goto out;
    }
    rc = 1;
    d = ring_diff(ra, rb);
    sa = malloc((size_t)ma->n_nodes * sizeof(*sa));
    sb = malloc((size_t)mb->n_nodes * sizeof(*sb));
    rows = calloc((size_t)ma->n_nodes + mb->n_nodes, sizeof(*rows));
    bmap = malloc((size_t)mb->n_nodes * sizeof(*bmap));
    if (d == NULL || sa == NULL || sb == NULL || rows == NULL || bmap == NULL) {
        ctl_error("plan: out of memory");
        goto out;
    }
    ring_shares(ra, sa);
    ring_shares(rb, sb);
    n_rows = plan_rows(ma, mb, rows, bmap);
    if (n_rows == 0) {
        ctl_error("plan: out of memory");
        goto out;
    }
    for (i = 0; i < ma->n_nodes; i++) {
        rows[i].old_share = sa[i];
    }
    for (i = 0; i < mb->n_nodes; i++) {
        rows[bmap[i]].new_share = sb[i];
        rows[bmap[i]].in_new = true;
    }
    for (k = 0; k < d->n_arcs; k++) {
        const struct ring_arc *a = &d->arcs[k];
        double                 f = ctl_arc_frac(a->lo, a->hi);
        uint32_t               lo[8] = { 0 }, ln[8] = { 0 };

        /* Both lists as rows, so old and new entries compare by id. */
        for (i = 0; i < a->n_old; i++) {
            lo[i] = a->old_nodes[i];
        }
        for (i = 0; i < a->n_new; i++) {
            ln[i] = bmap[a->new_nodes[i]];
        }
        if (lo[0] != ln[0]) {
            rows[lo[0]].ploss += f;
            rows[ln[0]].pgain += f;
        }
        for (i = 0; i < a->n_old; i++) {
            if (!in_list(ln, a->n_new, lo[i])) {
                rows[lo[i]].rloss += f;
            }
        }
        for (i = 0; i < a->n_new; i++) {
            if (!in_list(lo, a->n_old, ln[i])) {
                rows[ln[i]].rgain += f;
            }
        }
    }
    ctl_out_line(stdout, NULL, NULL,
                 "# from %s (epoch %llu, %u nodes, R=%u) to %s (epoch %llu, %u nodes, R=%u)\n",
                 from, (unsigned long long)ma->epoch, ma->n_nodes, ma->replicas, to,
                 (unsigned long long)mb->epoch, mb->n_nodes, mb->replicas);
    ctl_out_add("from", plan_side(from, ma));
    ctl_out_add("to", plan_side(to, mb));
    /* TSV carries fractions (as the library does), --human percents. */
    ctl_out_line(stdout, NULL, "f", human ? "%-14s %.4f%%\n" : "%s\t%.6f\n", "primary_moved",
                 d->primary_moved * (human ? 100 : 1));
    ctl_out_line(stdout, NULL, "f", human ? "%-14s %.4f%%\n" : "%s\t%.6f\n", "list_moved",
                 d->list_moved * (human ? 100 : 1));
    print_rows(rows, ma->n_nodes, n_rows, true, "added", human);
    print_rows(rows, 0, ma->n_nodes, false, "removed", human);
    wid = 2;
    for (i = 0; i < n_rows; i++) {
        if ((int)strlen(rows[i].id) > wid) {
            wid = (int)strlen(rows[i].id);
        }
    }
    if (human) {
        printf("%-*s  %9s  %9s  %9s  %9s  %9s  %9s\n", wid, "id", "old%", "new%", "+primary%",
               "-primary%", "+list%", "-list%");
    } else {
        ctl_out_line(stdout, "nodes", "sf",
                     "id\told_share_pct\tnew_share_pct\tprimary_gain_pct\t"
                     "primary_loss_pct\tlist_gain_pct\tlist_loss_pct\n");
    }
    for (i = 0; i < n_rows; i++) {
        const struct plan_row *w = &rows[i];

        ctl_out_line(stdout, "nodes", "sf",
                     human ? "%-*s  %9.4f  %9.4f  %9.4f  %9.4f  %9.4f  %9.4f\n"
                           : "%-*s\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\n",
                     human ? wid : 0, w->id, w->old_share * 100, w->new_share * 100, w->pgain * 100,
                     w->ploss * 100, w->rgain * 100, w->rloss * 100);
    }
    rc = fflush(stdout) == 0 ? 0 : 1;
out:
    free(bmap);
    free(rows);
    free(sa);
    free(sb);
    ring_diff_free(d);
    ring_free(ra);
    ring_free(rb);
    ring_members_free(ma);
    ring_members_free(mb);
    return rc;
}
