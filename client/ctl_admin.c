/*
 * ctl_admin: ringctl's cluster administration front ends (docs/cluster.md):
 * init, status, plan join|leave, join, leave, abort and resume, with their
 * options. Each loads the store's state (ctl_nodes.c); join and leave run
 * a transition (ctl_transition.c), abort and resume finish one. Node
 * failure (remove --failed, repair, watch) is in ctl_failure.c.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "config.h"
#include "client/cport_client.h"
#include "client/ctl.h"
#include "client/ctl_pending.h"
#include "client/ctl_transition.h"
#include "client/ctl_lease.h"
#include "client/ctl_util.h"
#include "lib/mstore.h"
#include "ring/ring.h"

/* The rows push_active prints: one per node (JSON: "nodes"). */
#define NODES_SPEC "nodes:id,addr,result,detail"

/* {"from": from, "to": to}: a transition's epochs under --json. */
static struct json_object *
epoch_pair(uint64_t from, uint64_t to)
{
    struct json_object *o = json_object_new_object();

    json_object_object_add(o, "from", json_object_new_uint64(from));
    json_object_object_add(o, "to", json_object_new_uint64(to));
    return o;
}

static char err_buf[MSTORE_WHERE_MAX + 1024];

/* The start of status, abort and resume, which take no options: parse
 * argv (usage: the command's usage line), open the store, read the token
 * and load the store's state. */
static int
admin_begin(struct admin *a, int argc, char **argv, const char *usage)
{
    if (ctl_no_options(argc, argv, usage, CTL_NO_OPERANDS) < 0) {
        return EX_USAGE;
    }
    return admin_load(a, true);
}

/* The --help lines of join and leave. */
#define JOIN_USAGE \
    CTL_USAGE_ADMIN " join ID ADDR [ID ADDR...] [--weight W] [--zone Z] [--rate MIB_PER_S]"
#define LEAVE_USAGE CTL_USAGE_ADMIN " leave ID [ID...] [--rate MIB_PER_S]"

/* Parse join/leave arguments (after the subcommand name) into the new
 * membership. kind is "join" or "leave". more (NULL: one node only)
 * receives the operands after the first node's, *n_more how many nodes. */
static int
parse_change(int argc, char **argv, const char *kind, bool with_rate, char *id, char *addr,
             uint32_t *weight, char *zone, double *rate_mib, char *const **more, size_t *n_more)
{
    int step;
    int k;

    static const struct option opts[] = { { "weight", required_argument, NULL, 'w' },
                                          { "zone", required_argument, NULL, 'z' },
                                          { "rate", required_argument, NULL, 'r' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    bool                       join = strcmp(kind, "join") == 0;
    char                      *end;
    int                        c;

    /* No "+": options may follow the operands (join ID ADDR --rate R). */
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            *weight = (uint32_t)strtoul(optarg, &end, 10);
            if (!join || *end != '\0' || *weight < 1 || *weight > RING_WEIGHT_MAX) {
                ctl_error("%s: --weight: expected 1..%d (join only)", kind, RING_WEIGHT_MAX);
                return EX_USAGE;
            }
            break;
        case 'z':
            if (!join || strlen(optarg) > RING_ZONE_MAX) {
                ctl_error("%s: --zone: at most %d bytes (join only)", kind, RING_ZONE_MAX);
                return EX_USAGE;
            }
            snprintf(zone, RING_ZONE_MAX + 1, "%s", optarg);
            break;
        case 'r':
            if (!with_rate) {
                ctl_error("%s: --rate MIB_PER_S: expected a number >= 0 (0 = unlimited)", kind);
                return EX_USAGE;
            }
            if (ctl_parse_rate(kind, optarg, rate_mib) != EX_OK) {
                return EX_USAGE;
            }
            break;
        default:
            return ctl_getopt_default(c, join ? JOIN_USAGE : LEAVE_USAGE, 0);
        }
    }
    step = join ? 2 : 1;
    if (argc - optind < step || (argc - optind) % step != 0 ||
        (more == NULL && argc - optind != step)) {
        ctl_error("usage: %s", more == NULL
                                   ? (join ? "join ID ADDR [--weight W] [--zone Z]" : "leave ID")
                               : join ? "join ID ADDR [ID ADDR...] [--weight W] [--zone Z]"
                                      : "leave ID [ID...]");
        return EX_USAGE;
    }
    for (k = optind; k < argc; k += step) {
        if (strlen(argv[k]) > RING_ID_MAX || (join && strlen(argv[k + 1]) > RING_ADDR_MAX)) {
            ctl_error("%s: id or address too long", kind);
            return EX_USAGE;
        }
    }
    strcpy(id, argv[optind]);
    if (join) {
        strcpy(addr, argv[optind + 1]);
    }
    if (more != NULL) {
        *more = argv + optind + step;
        *n_more = (size_t)(argc - optind) / (size_t)step - 1;
    }
    return EX_OK;
}

/* join / leave: the whole transition. */
static int
change(struct ctl_globals *g, int argc, char **argv, bool join)
{
    struct change_opts o = { .join = join, .weight = 1, .rate_mib = DEFAULT_RATE_MIB };
    int                rc;

    rc = parse_change(argc, argv, join ? "join" : "leave", true, o.id, o.addr, &o.weight, o.zone,
                      &o.rate_mib, &o.more, &o.n_more);
    return rc == EX_OK ? change_run(g, &o) : rc;
}

int
ctl_join(struct ctl_globals *g, int argc, char **argv)
{
    return change(g, argc, argv, true);
}

int
ctl_leave(struct ctl_globals *g, int argc, char **argv)
{
    return change(g, argc, argv, false);
}

/*
 * init, status
 */

/* Push the active membership to nodes whose epoch is behind (init's
 * Commit, and resume with nothing pending). Returns how many failed. */
static uint32_t
push_active(struct admin *a, const char *what, bool only_behind)
{
    struct cport_request req = { .kind = CPORT_COMMIT, .membership = a->old };
    struct cport_request sreq = { .kind = CPORT_STATUS };
    uint32_t             i, failed = 0;

    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];
        int           rc;

        if (only_behind) {
            rc = node_call(a, t, &sreq, a->g->timeout_ms);
            if (rc == CPORT_OK && t->st.active_epoch >= a->old->epoch) {
                ctl_out_line(stdout, NODES_SPEC, "sssS", "%s\t%s\tok\tepoch %" PRIu64 "\n", t->id,
                             t->addr, t->st.active_epoch);
                continue;
            }
            if (rc == CPORT_OK && t->st.active_epoch == 0 && t->st.pending_epoch == 0 &&
                ring_members_find(a->old, t->id) >= 0) {
                /* A member with no state at all lost its state directory:
                 * given the epoch it would serve its ranges empty. */
                ctl_out_line(stdout, NODES_SPEC, "sssS",
                             "%s\t%s\tfailed\tno state (its state directory was lost?): "
                             "run ringctl repair %s\n",
                             t->id, t->addr, t->id);
                failed++;
                continue;
            }
        }
        rc = node_call(a, t, &req, LONG_TIMEOUT_MS);
        if (rc == CPORT_OK) {
            ctl_out_line(stdout, NODES_SPEC, "sssS", "%s\t%s\tok\n", t->id, t->addr);
        } else {
            ctl_out_line(stdout, NODES_SPEC, "sssS", "%s\t%s\tfailed\t%s\n", t->id, t->addr,
                         t->err);
            failed++;
        }
    }
    if (failed > 0) {
        ctl_info("%s: %u of %u nodes did not take epoch %" PRIu64 "; the store has it, "
                 "`ringctl resume` re-sends it",
                 what, failed, a->n_nodes, a->old->epoch);
    }
    return failed;
}

int
ctl_init(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "members", required_argument, NULL, 'm' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char          usage[] = CTL_USAGE_ADMIN " init --members FILE";
    struct admin               a = { .g = g };
    struct mstore_op           ops[2];
    const char                *file = g->members;
    char                      *out = NULL;
    size_t                     olen = 0, failed = 0;
    int                        c, rc;

    optind = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            file = optarg;
            break;
        default:
            return ctl_getopt_default(c, usage, 0);
        }
    }
    if (file == NULL || optind != argc) {
        ctl_error("usage: %s", usage);
        return EX_USAGE;
    }
    rc = admin_open(&a, true);
    if (rc != EX_OK) {
        goto out;
    }
    a.old = ctl_load_members(file);
    if (a.old == NULL) {
        rc = EX_USAGE;
        goto out;
    }
    if (a.old->n_nodes == 0) {
        ctl_error("%s: no nodes", file);
        rc = EX_USAGE;
        goto out;
    }
    a.old->epoch = 1;
    out = ctl_members_text(a.old, &olen);
    if (out == NULL) {
        ctl_error("out of memory");
        rc = EX_FAILED;
        goto out;
    }
    ops[0] = (struct mstore_op){ MSTORE_CREATE, REC_ACTIVE, 0, out, olen };
    ops[1] = (struct mstore_op){ MSTORE_PUT, "history/epoch-1.members", MSTORE_ANY_REV, out, olen };
    rc = mstore_txn(a.store, ops, 2, &failed, NULL, err_buf, sizeof(err_buf));
    if (rc == MSTORE_ECONFLICT) {
        struct ring_members *cur = NULL;
        uint64_t             rev;

        admin_load_members(&a, REC_ACTIVE, &cur, &rev);
        ctl_error("init: the store already has an active membership (epoch %" PRIu64 ")",
                  cur != NULL ? cur->epoch : 0);
        ring_members_free(cur);
    }
    rc = admin_txn_status(rc, err_buf);
    if (rc != EX_OK) {
        goto out;
    }
    ctl_info("init: store: epoch 1 with %u nodes", a.old->n_nodes);
    ctl_out_add("epoch", json_object_new_uint64(1));
    rc = nodes_build(&a);
    if (rc != EX_OK) {
        goto out;
    }
    rc = push_active(&a, "init", false) > 0 ? EX_FAILED : EX_OK;
out:
    free(out);
    admin_free(&a);
    return rc;
}

int
ctl_status(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "watch", no_argument, NULL, 'w' },
                                          { "interval", required_argument, NULL, 'i' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char          usage[] = CTL_USAGE_ADMIN " status [--watch [--interval S]]";
    bool                       watch = false;
    double                     interval = 1.0;
    char                      *end;
    int                        c;

    optind = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            watch = true;
            break;
        case 'i':
            interval = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(interval >= 0.05 && interval <= 3600)) {
                ctl_error("status: --interval: expected seconds, 0.05-3600, got '%s'", optarg);
                return EX_USAGE;
            }
            break;
        default:
            return ctl_getopt_default(c, usage, CTL_USAGE_ON_ERROR);
        }
    }
    if (optind != argc) {
        ctl_error("usage: %s", usage);
        return EX_USAGE;
    }
    if (watch && ctl_out_json()) {
        ctl_error("status: --watch draws a screen; with --json, run status in a loop");
        return EX_USAGE;
    }
    return watch ? ctl_status_watch(g, interval) : ctl_status_print(g, stdout);
}

/*
 * plan join|leave
 */

/* ring_owned_arcs callback: add the arc's length to the double at arg. */
static void
add_arc_frac(uint64_t lo, uint64_t hi, void *arg)
{
    *(double *)arg += ctl_arc_frac(lo, hi);
}

/* Fraction of the keyspace node `node` of r holds (in its preference lists
 * at the ring's R). */
static double
owned_fraction(const struct ring *r, uint32_t node)
{
    double f = 0;

    ring_owned_arcs(r, node, ring_members(r)->replicas, add_arc_frac, &f);
    return f;
}

/* plan join|leave: a dry run from the store's active membership. */
static int
plan_change(struct ctl_globals *g, int argc, char **argv)
{
    struct admin         a = { .g = g };
    struct cport_request sreq = { .kind = CPORT_STATUS };
    char id[RING_ID_MAX + 1] = "", addr[RING_ADDR_MAX + 1] = "", zone[RING_ZONE_MAX + 1] = "";
    bool join = strcmp(argv[1], "join") == 0, have_token;
    struct ring      *ro = NULL, *rn = NULL;
    struct ring_diff *d = NULL;
    double           *sold = NULL, *snew = NULL, *moving = NULL, rate = 0;
    struct ctl_table  t = { .ncols = 7, .name = "nodes", .types = "sffiiff" };
    uint32_t          i, j, k, weight = 1, unknown = 0;
    double            tot_items = 0, tot_bytes = 0;
    int               rc;

    rc = parse_change(argc - 1, argv + 1, join ? "join" : "leave", false, id, addr, &weight, zone,
                      &rate, NULL, NULL);
    if (rc != EX_OK) {
        goto out;
    }
    rc = admin_load(&a, false);
    if (rc != EX_OK) {
        goto out;
    }
    if (a.old == NULL) {
        ctl_error("plan: the store has no active membership (ringctl init first)");
        rc = EX_USAGE;
        goto out;
    }
    ring_members_free(a.new);
    a.new = NULL;
    rc = make_new(&a, join, id, addr, weight, zone);
    if (rc != EX_OK) {
        goto out;
    }
    have_token = g->token_file != NULL && admin_read_token(&a) == EX_OK;
    ro = ring_build(a.old);
    rn = ring_build(a.new);
    d = ro != NULL && rn != NULL ? ring_diff(ro, rn) : NULL;
    sold = calloc(a.old->n_nodes, sizeof(double));
    moving = calloc(a.old->n_nodes, sizeof(double));
    snew = calloc(a.new->n_nodes, sizeof(double));
    if (d == NULL || sold == NULL || snew == NULL || moving == NULL) {
        ctl_error("plan: cannot build the rings (out of memory?)");
        rc = EX_FAILED;
        goto out;
    }
    ring_shares(ro, sold);
    ring_shares(rn, snew);
    /* Keyspace each old node sends: its arcs as primary, once per gaining node. */
    for (k = 0; k < d->n_arcs; k++) {
        const struct ring_arc *arc = &d->arcs[k];
        uint32_t               gain = 0;

        for (j = 0; j < arc->n_new; j++) {
            gain += arc_gained(a.old, a.new, arc, j);
        }
        if (arc->n_old > 0) {
            moving[arc->old_nodes[0]] += ctl_arc_frac(arc->lo, arc->hi) * gain;
        }
    }
    ctl_out_line(stdout, NULL, "s", "plan%s%s %s%s%s\n", g->human ? ":  " : "\t",
                 join ? "join" : "leave", id, join ? " " : "", addr);
    ctl_out_line(stdout, NULL, "s", "epoch%s%" PRIu64 " -> %" PRIu64 "\n", g->human ? ": " : "\t",
                 a.old->epoch, a.new->epoch);
    ctl_out_add("epoch", epoch_pair(a.old->epoch, a.new->epoch));
    ctl_table_row(&t, "id\tshare_before\tshare_after\titems\tbytes\tmove_items\tmove_bytes");
    rc = nodes_build(&a);
    if (rc != EX_OK) {
        goto out;
    }
    for (i = 0; i < a.n_nodes; i++) {
        struct tnode *n = &a.nodes[i];
        int           io = ring_members_find(a.old, n->id), in = ring_members_find(a.new, n->id);
        char          b[5][48];

        snprintf(b[0], sizeof(b[0]), "%.4f", io >= 0 ? sold[io] : 0.0);
        snprintf(b[1], sizeof(b[1]), "%.4f", in >= 0 ? snew[in] : 0.0);
        strcpy(b[2], "?");
        strcpy(b[3], "?");
        strcpy(b[4], "0");
        if (io >= 0 && have_token && node_call(&a, n, &sreq, g->timeout_ms) == CPORT_OK) {
            double own = owned_fraction(ro, (uint32_t)io), f = own > 0 ? moving[io] / own : 0;
            double mi = (double)n->st.curr_items * f, mb = (double)n->st.bytes * f;

            snprintf(b[2], sizeof(b[2]), "%" PRIu64, n->st.curr_items);
            snprintf(b[3], sizeof(b[3]), "%" PRIu64, n->st.bytes);
            snprintf(b[4], sizeof(b[4]), "%.0f", mi);
            tot_items += mi;
            tot_bytes += mb;
            snprintf(b[4] + strlen(b[4]), sizeof(b[4]) - strlen(b[4]), "\t%.0f", mb);
        } else if (io >= 0 && moving[io] > 0) {
            strcpy(b[4], "?\t?");
            unknown++;
        } else {
            strcpy(b[4], "0\t0");
        }
        ctl_table_row(&t, "%s\t%s\t%s\t%s\t%s\t%s", n->id, b[0], b[1], b[2], b[3], b[4]);
    }
    ctl_table_print(&t, g->human, stdout);
    ctl_out_line(stdout, NULL, "f", "primary_moved\t%.4f\n", d->primary_moved);
    ctl_out_line(stdout, NULL, "f", "list_moved\t%.4f\n", d->list_moved);
    if (unknown > 0) {
        ctl_out_line(stdout, NULL, "f", "move_items_estimate\t?\n");
        ctl_out_line(stdout, NULL, "f", "move_bytes_estimate\t?\n");
    } else {
        ctl_out_line(stdout, NULL, "f", "move_items_estimate\t%.0f\n", tot_items);
        ctl_out_line(stdout, NULL, "f", "move_bytes_estimate\t%.0f\n", tot_bytes);
    }
    if (!have_token) {
        ctl_info("plan: no --token-file: node item and byte counts unknown");
    }
    ctl_info("plan: items and bytes to move are estimates: each node's items and bytes times "
             "the fraction of its keyspace that moves");
    rc = EX_OK;
out:
    free(sold);
    free(snew);
    free(moving);
    ring_diff_free(d);
    ring_free(ro);
    ring_free(rn);
    admin_free(&a);
    return rc;
}

int
ctl_admin_plan(struct ctl_globals *g, int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "join") == 0 || strcmp(argv[1], "leave") == 0)) {
        return plan_change(g, argc, argv);
    }
    return ctl_plan(g, argc, argv);
}

/*
 * abort, resume
 */

/* Re-notify nodes of an abort recorded in aborted.* (abort with nothing
 * pending is idempotent: nodes that missed the Abort still get it). Only
 * the nodes pending an epoch above `above` (0: any); quiet: the summary
 * goes to stderr (resume's pass, whose stdout is its own). */
static int
reabort(struct admin *a, uint64_t above, bool quiet)
{
    static const char *const names[] = { REC_ABORTED_TREC, REC_ABORTED };
    struct cport_request     sreq = { .kind = CPORT_STATUS };
    struct cport_request     req;
    struct mstore_record     recs[2];
    uint64_t                 rev;
    uint32_t                 i, failed = 0, sent = 0;
    int                      rc;

    /* The pair at one revision; each step returns EX_OK or EX_USAGE. */
    if (admin_read_records(a, names, 2, recs) != EX_OK) {
        return EX_USAGE;
    }
    rc = trec_of_record(&recs[0], &a->rec, &a->have_rec, &a->rec_rev);
    if (rc == EX_OK) {
        rc = admin_members_of_record(&recs[1], &a->new, &rev);
    }
    mstore_record_clear(&recs[0]);
    mstore_record_clear(&recs[1]);
    if (rc != EX_OK) {
        return EX_USAGE;
    }
    if (!a->have_rec) {
        if (!quiet) {
            ctl_out_line(stdout, "=result", "s", "nothing pending\n");
        }
        return EX_OK;
    }
    if (nodes_build(a) != EX_OK) {
        return EX_FAILED;
    }
    req = transition_request(a, CPORT_ABORT);
    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];

        if (node_call(a, t, &sreq, a->g->timeout_ms) != CPORT_OK) {
            ctl_info("abort: %s (%s): %s", t->id, t->addr, t->err);
            failed++;
            continue;
        }
        if (t->st.pending_epoch == 0 || t->st.pending_epoch <= above) {
            continue;
        }
        if (t->st.pending_epoch == a->rec.epoch &&
            node_call(a, t, &req, LONG_TIMEOUT_MS) == CPORT_OK) {
            sent++;
            continue;
        }
        /* Pending with an older aborted transition (an abort since then
         * replaced aborted.meta): try the recent aborted tokens of its
         * epoch; the node takes only the right one. */
        {
            struct trec_aborted  ab[TREC_ABORTED_KEEP];
            uint32_t             nab = trec_aborted_load(a->store, ab, TREC_ABORTED_KEEP), k;
            struct cport_request areq = req;

            for (k = 0; k < nab; k++) {
                if (ab[k].epoch != t->st.pending_epoch) {
                    continue;
                }
                areq.token = ab[k].token;
                areq.epoch = ab[k].epoch;
                if (node_call(a, t, &areq, LONG_TIMEOUT_MS) == CPORT_OK) {
                    break;
                }
            }
            if (k < nab) {
                sent++;
            } else {
                ctl_info("abort: %s (%s) is pending with epoch %" PRIu64 " of no transition "
                         "this store knows: %s",
                         t->id, t->addr, t->st.pending_epoch, t->err);
                failed++;
            }
        }
    }
    if (!quiet) {
        ctl_out_line(stdout, "=result", "s",
                     "nothing pending\tlast aborted epoch %" PRIu64 " (%s): re-sent Abort to %u "
                     "nodes, %u unreachable or failed\n",
                     a->rec.epoch, a->rec.op, sent, failed);
    } else if (sent > 0 || failed > 0) {
        ctl_info("resume: re-sent an Abort its node missed to %u nodes, %u unreachable or failed",
                 sent, failed);
    }
    return failed > 0 ? EX_FAILED : EX_OK;
}

int
ctl_abort(struct ctl_globals *g, int argc, char **argv)
{
    struct admin a = { .g = g };
    int          rc;

    rc = admin_begin(&a, argc, argv, CTL_USAGE_ADMIN " abort");
    if (rc != EX_OK) {
        goto out;
    }
    if (!a.have_rec && a.new == NULL) {
        rc = reabort(&a, 0, false);
        goto out;
    }
    if (a.have_rec && a.old != NULL && a.old->epoch >= a.rec.epoch) {
        ctl_error("abort: epoch %" PRIu64 " is already committed in the store; "
                  "`ringctl resume` finishes it",
                  a.rec.epoch);
        rc = EX_FAILED;
        goto out;
    }
    if (!a.have_rec) {
        /* pending.members without its meta: a create that crashed half-way.
         * No node was ever prepared (meta is written with it): just delete. */
        rc = mstore_delete(a.store, REC_PENDING, a.pm_rev, err_buf, sizeof(err_buf));
        if (rc != MSTORE_OK) {
            ctl_error("abort: store: %s", err_buf);
            rc = EX_FAILED;
            goto out;
        }
        ctl_out_line(stdout, "=result", "s", "aborted\tincomplete pending record removed\n");
        rc = EX_OK;
        goto out;
    }
    rc = nodes_build(&a);
    if (rc != EX_OK) {
        goto out;
    }
    rc = do_abort(&a);
    if (rc < 0) {
        rc = EX_FAILED;
        goto out;
    }
    ctl_out_line(stdout, "=result", "s", "aborted\tepoch %" PRIu64 "\t%s\t%d nodes not reached\n",
                 a.rec.epoch, a.rec.op, rc);
    ctl_out_add("epoch", json_object_new_uint64(a.rec.epoch));
    ctl_out_add("op", json_object_new_string(a.rec.op));
    ctl_out_add("nodes_not_reached", json_object_new_int(rc));
    rc = rc > 0 ? EX_FAILED : EX_OK;
out:
    admin_free(&a);
    return rc;
}

/* resume with nothing pending: bring the nodes that missed a commit (or
 * init) up to the store's epoch. */
static int
resume_active(struct admin *a)
{
    int rc = nodes_build(a);

    if (rc != EX_OK) {
        return rc;
    }
    ctl_info("resume: nothing pending; making sure every node has epoch %" PRIu64, a->old->epoch);
    return push_active(a, "resume", true) > 0 ? EX_FAILED : EX_OK;
}

/* resume of a transition the store committed (its CAS is the decision):
 * finish it: drop the leftover pending records (leftover: with the
 * record still pending.meta), re-send Commit with its token so that every
 * node still pending with it commits. */
static int
resume_committed(struct admin *a, bool leftover)
{
    struct mstore_op ops[2];
    uint32_t         i = 0, missed;
    bool             clean;
    int              rc;

    ctl_info("resume: epoch %" PRIu64 " was committed; finishing", a->rec.epoch);
    ring_members_free(a->new);
    a->new = ring_members_dup(a->old);
    if (a->new == NULL) {
        ctl_error("out of memory");
        return EX_FAILED;
    }
    /* The nodes of the transition are those of both epochs (a node that
     * left is pending too, and purges once it commits): epoch N comes back
     * from the store's history. */
    {
        struct ring_members *from = NULL;
        char                 name[64];
        uint64_t             rev;

        snprintf(name, sizeof(name), "history/epoch-%" PRIu64 ".members", a->rec.from_epoch);
        rc = admin_load_members(a, name, &from, &rev);
        if (rc != EX_OK) {
            return rc;
        }
        if (from != NULL) {
            ring_members_free(a->old);
            a->old = from;
        }
    }
    if (leftover && a->pm_rev != 0) {
        ops[i++] = (struct mstore_op){ MSTORE_DELETE, REC_PENDING, a->pm_rev, NULL, 0 };
    }
    if (leftover) {
        ops[i++] = (struct mstore_op){ MSTORE_DELETE, REC_PENDING_TREC, a->rec_rev, NULL, 0 };
    }
    if (i > 0 && mstore_txn(a->store, ops, i, NULL, NULL, err_buf, sizeof(err_buf)) != MSTORE_OK) {
        ctl_error("resume: store: %s", err_buf);
        return EX_FAILED;
    }
    rc = nodes_build(a);
    if (rc != EX_OK) {
        return rc;
    }
    missed = deliver_commit(a);
    clean = wait_cleanup(a);
    ctl_out_line(stdout, NULL, "i", "epoch\t%" PRIu64 "\n", a->new->epoch);
    ctl_out_line(stdout, NULL, "s", "op\t%s\n", a->rec.op);
    ctl_out_line(stdout, NULL, "i", "nodes_not_committed\t%u\n", missed);
    ctl_out_line(stdout, NULL, "s", "cleanup\t%s\n", clean ? "done" : "incomplete");
    return EX_OK;
}

/* resume with nothing pending: a node still pending a transition the
 * store aborted (it missed the Abort, e.g. cut off during it) holds the
 * next transition up; it is told the abort, as `ringctl abort` would. */
static int
resume_reabort(struct ctl_globals *g, int argc, char **argv, uint64_t active)
{
    struct admin b = { .g = g };
    int          rc = admin_begin(&b, argc, argv, CTL_USAGE_ADMIN " resume");

    if (rc == EX_OK && !b.have_rec && b.new == NULL) {
        rc = reabort(&b, active, true);
    }
    admin_free(&b);
    return rc;
}

int
ctl_resume(struct ctl_globals *g, int argc, char **argv)
{
    struct admin        a = { .g = g };
    struct admin_lease *lease = NULL;
    struct tnode       *t;
    uint32_t            i;
    int                 rc;

    a.t_start = util_now_ms();
    rc = admin_begin(&a, argc, argv, CTL_USAGE_ADMIN " resume");
    if (rc != EX_OK) {
        goto out;
    }
    if (a.old == NULL) {
        ctl_error("resume: the store has no active membership");
        rc = EX_USAGE;
        goto out;
    }
    if (!a.have_rec) {
        if (a.new != NULL) {
            ctl_error("resume: %s without %s: a create that crashed half-way; "
                      "run ringctl abort",
                      REC_PENDING, REC_PENDING_TREC);
            rc = EX_FAILED;
            goto out;
        }
        /* The last committed transition: nodes may still be pending
         * with its token (the admin died right after the store's commit). */
        rc = trec_load(a.store, REC_COMMITTED_TREC, &a.rec, &a.have_rec, &a.rec_rev);
        if (rc != EX_OK) {
            goto out;
        }
        if (a.have_rec && a.rec.epoch == a.old->epoch) {
            rc = resume_committed(&a, false);
        } else {
            rc = resume_active(&a);
        }
        if (rc == EX_OK) {
            rc = resume_reabort(g, argc, argv, a.old->epoch);
        }
        goto out;
    }
    if (a.old->epoch >= a.rec.epoch) {
        rc = resume_committed(&a, true);
        goto out;
    }
    if (a.new == NULL || a.new->epoch != a.rec.epoch || a.old->epoch != a.rec.from_epoch) {
        ctl_error("resume: the store's pending (epoch %" PRIu64 ") does not follow its active "
                  "epoch %" PRIu64 "; run ringctl abort",
                  a.rec.epoch, a.old->epoch);
        rc = EX_FAILED;
        goto out;
    }
    rc = nodes_build(&a);
    if (rc != EX_OK) {
        goto out;
    }
    /* A node that restarted since PREPARE lost what it held or imported:
     * the transition cannot be resumed. */
    if (a.rec.n_boot > 0) {
        struct cport_request sreq = { .kind = CPORT_STATUS };

        for (i = 0; i < a.n_nodes; i++) {
            node_call(&a, &a.nodes[i], &sreq, g->timeout_ms);
        }
        t = boot_changed(&a);
        if (t != NULL) {
            ctl_info("resume: %s restarted since PREPARE (boot id changed): the transition "
                     "cannot be resumed",
                     t->id);
            rc = fail_abort(&a, "resume");
            goto out;
        }
    }
    ctl_info("resume: %s: epoch %" PRIu64 " -> %" PRIu64 " from phase %s", a.rec.op,
             a.rec.from_epoch, a.rec.epoch, trec_phase_name(a.rec.phase));
    lease = admin_lease_start(g->store, a.rec.op);
    rc = run_from(&a, a.rec.phase);
out:
    admin_lease_stop(lease);
    admin_free(&a);
    return rc;
}
