/*
 * ctl_failure: node failure (docs/cluster.md, "Node failure"): remove
 * --failed drops a dead node without contacting it (its ranges are copied
 * from the surviving owners), repair drops a dead or restarted node and
 * joins it again, and watch does either by itself for members that stay
 * down (or restarted empty). Each is a change run by ctl_transition.c.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "client/cport_client.h"
#include "client/ctl.h"
#include "client/ctl_k8s.h"
#include "client/ctl_transition.h"
#include "client/ctl_lease.h"
#include "client/ctl_util.h"
#include "lib/mstore.h"
#include "ring/ring.h"

#define PROBE_MS 1000 /* remove --failed: a node answering Hello this fast is alive */
/* remove --failed waits this long for every other member to see the node
 * down (a peer sees a silent node down after 2 s, a refused one at once). */
#define AGREE_MS 4000

/* How the other members of a->old see one node (peers_see). */
struct peer_views {
    uint32_t others;                    /* members other than the node */
    uint32_t answered;                  /* of them, answered a Status within PROBE_MS */
    uint32_t asked;                     /* of those, hold the current epoch (their view counts) */
    uint32_t agree;                     /* of those, see it down, or up but holding nothing */
    char     alive_at[RING_ID_MAX + 1]; /* the first that hears it ("" if none) */
    char     silent[RING_ID_MAX + 1];   /* the first that did not answer ("" if none) */
};

/*
 * Ask every other member of a->old how it sees node `id` now. A member
 * holding nothing current (recovering, behind, no membership) acts for
 * nobody: it answers, but its view does not count.
 */
static void
peers_see(struct admin *a, const char *id, struct peer_views *pv)
{
    struct cport_request sreq = { .kind = CPORT_STATUS };
    uint32_t             i, k;

    memset(pv, 0, sizeof(*pv));
    for (i = 0; i < a->old->n_nodes; i++) {
        const struct ring_node *n = &a->old->nodes[i];
        struct cport_conn      *c = NULL;
        struct cport_status     st;
        char                    caddr[RING_ADDR_MAX + 16], err[512];
        bool                    sees = false;
        int                     rc;

        if (strcmp(n->id, id) == 0) {
            continue;
        }
        pv->others++;
        rc = cport_addr_of(n->addr, caddr, sizeof(caddr)) == 0
                 ? cport_connect(caddr, a->g->cluster, a->atoken, a->atoken_len, PROBE_MS, &c, NULL,
                                 err, sizeof(err))
                 : CPORT_EIO;
        if (rc == CPORT_OK) {
            rc = cport_call(c, &sreq, PROBE_MS, &st, err, sizeof(err));
            cport_close(c);
            if (rc != CPORT_OK) {
                cport_status_clear(&st);
            }
        }
        if (rc != CPORT_OK) {
            if (pv->silent[0] == '\0') {
                snprintf(pv->silent, sizeof(pv->silent), "%s", n->id);
            }
            continue;
        }
        pv->answered++;
        if (!st.recovering && st.behind_epoch == 0 && st.active_epoch == a->old->epoch) {
            pv->asked++;
            for (k = 0; k < st.n_peers; k++) {
                if (strcmp(st.peers[k].node_id, id) == 0) {
                    sees = st.peers[k].state == CPORT_PEER_DOWN ||
                           (st.peers[k].state == CPORT_PEER_UP && st.peers[k].holds_nothing);
                }
            }
            if (sees) {
                pv->agree++;
            } else if (pv->alive_at[0] == '\0') {
                snprintf(pv->alive_at, sizeof(pv->alive_at), "%s", n->id);
            }
        }
        cport_status_clear(&st);
    }
}

/* Did every other member answer, and does every one whose view counts
 * see the node gone? */
static bool
peers_all_agree(const struct peer_views *pv)
{
    return pv->answered == pv->others && pv->agree == pv->asked;
}

/*
 * Wait (up to AGREE_MS) until every other member answers and each that
 * holds the current epoch sees `id` down: each of them refuses a Prepare
 * that declares failed a node it still hears (no split brain), and one
 * that did not answer may have judged from a table it has not refreshed
 * since, so asking first gives a clear error. EX_OK, or EX_USAGE naming
 * the member that hears it (or does not answer).
 */
static int
wait_peers_agree(struct admin *a, const char *id)
{
    int64_t           deadline = util_now_ms() + AGREE_MS;
    struct peer_views pv;

    for (;;) {
        peers_see(a, id, &pv);
        if (peers_all_agree(&pv)) {
            return EX_OK;
        }
        if (util_now_ms() >= deadline) {
            break;
        }
        ctl_sleep_ms(200);
    }
    if (pv.answered < pv.others) {
        ctl_error("remove: member %s does not answer its cluster port (%u of %u other members "
                  "answered): it cannot say whether it still hears %s",
                  pv.silent, pv.answered, pv.others, id);
    } else {
        ctl_error("remove: %s still answers the heartbeats of %s (%u of %u members see it "
                  "down): it is not removed as failed while a member hears it",
                  id, pv.alive_at, pv.agree, pv.asked);
    }
    return EX_USAGE;
}

/*
 * remove --failed: may the node be dropped without contacting it (the
 * change's admit check)? It must not answer Hello within PROBE_MS, or
 * answer as recovering (restarted empty), behind (removed already) or
 * with no membership at all (it lost its state directory): such a node
 * holds nothing current. Otherwise refuse unless --force. EX_OK or
 * EX_USAGE (printed).
 */
static int
probe_failed(struct admin *a, const struct change_opts *o)
{
    struct cport_request sreq = { .kind = CPORT_STATUS };
    int                  idx = ring_members_find(a->old, o->id);
    struct cport_conn   *c = NULL;
    struct cport_status  st;
    char                 caddr[RING_ADDR_MAX + 16], err[512];
    int                  rc;

    if (idx < 0) {
        ctl_error("remove: %s is not a member of epoch %" PRIu64, o->id, a->old->epoch);
        return EX_USAGE;
    }
    if (a->old->replicas < 2) {
        ctl_info("warning: R = %u: %s holds the only copy of its keys; they are gone (%s)",
                 a->old->replicas, o->id,
                 o->force     ? "--force given"
                 : o->sole_ok ? "the watch removes a dead sole owner: its keys become misses; "
                                "watch --keep-sole-copies waits for it instead"
                              : "give --force to proceed");
        if (!o->force && !o->sole_ok) {
            return EX_USAGE;
        }
    }
    if (cport_addr_of(a->old->nodes[idx].addr, caddr, sizeof(caddr)) != 0) {
        return EX_OK;
    }
    rc = cport_connect(caddr, a->g->cluster, a->atoken, a->atoken_len, PROBE_MS, &c, NULL, err,
                       sizeof(err));
    if (rc != CPORT_OK) {
        ctl_info("remove: %s (%s) does not answer (%s): removing it as failed", o->id,
                 a->old->nodes[idx].addr, err);
        return wait_peers_agree(a, o->id);
    }
    rc = cport_call(c, &sreq, PROBE_MS, &st, err, sizeof(err));
    cport_close(c);
    if (rc == CPORT_OK && (st.recovering || st.behind_epoch != 0 ||
                           (st.active_epoch == 0 && st.pending_epoch == 0))) {
        ctl_info("remove: %s answers but is %s: it holds nothing current; removing it", o->id,
                 st.recovering ? "recovering (restarted empty)"
                 : st.behind_epoch != 0
                     ? "behind a higher epoch"
                     : "without state (no membership: its state directory was lost)");
        cport_status_clear(&st);
        return wait_peers_agree(a, o->id);
    }
    cport_status_clear(&st);
    {
        struct peer_views pv;

        /* Cut off from its peers (it serves nothing: it hears nobody). */
        peers_see(a, o->id, &pv);
        if (pv.asked > 0 && peers_all_agree(&pv)) {
            ctl_info("remove: %s answers, but none of the %u other members hears it: removing it "
                     "as failed",
                     o->id, pv.asked);
            return EX_OK;
        }
    }
    if (o->force) {
        ctl_info("warning: remove: %s answers its cluster port; removing it anyway (--force): "
                 "it is not contacted",
                 o->id);
        return wait_peers_agree(a, o->id);
    }
    ctl_error("remove: %s (%s) is alive (it answers its cluster port): use `ringctl leave %s`, "
              "or --force",
              o->id, a->old->nodes[idx].addr, o->id);
    return EX_USAGE;
}

/* remove --failed ID: the whole transition, the node never contacted
 * (see probe_failed for when that is allowed; sole_ok: at R = 1 its keys
 * may go without force). */
static int
remove_failed(struct ctl_globals *g, const char *id, bool force, bool sole_ok, double rate_mib)
{
    struct change_opts o = { .remove_failed = true,
                             .force = force,
                             .sole_ok = sole_ok,
                             .weight = 1,
                             .rate_mib = rate_mib,
                             .admit = probe_failed };

    snprintf(o.id, sizeof(o.id), "%s", id);
    return change_run(g, &o);
}

int
ctl_remove(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "failed", no_argument, NULL, 'f' },
                                          { "force", no_argument, NULL, 'F' },
                                          { "rate", required_argument, NULL, 'r' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char usage[] = CTL_USAGE_ADMIN " remove --failed ID [--force] [--rate MIB_PER_S]";
    double            rate = DEFAULT_RATE_MIB;
    bool              failed = false, force = false;
    int               c;

    /* No "+": options may follow the operands (remove --failed ID --force). */
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'f':
            failed = true;
            break;
        case 'F':
            force = true;
            break;
        case 'r':
            if (ctl_parse_rate("remove", optarg, &rate) != EX_OK) {
                return EX_USAGE;
            }
            break;
        default:
            return ctl_getopt_default(c, usage, 0);
        }
    }
    if (!failed || argc - optind != 1 || strlen(argv[optind]) > RING_ID_MAX) {
        ctl_error("usage: remove --failed ID [--force] [--rate MIB_PER_S] (a live node "
                  "leaves with `ringctl leave ID`)");
        return EX_USAGE;
    }
    return remove_failed(g, argv[optind], force, false, rate);
}

/* The node `id` of the store's active epoch, copied into *out. 0 found,
 * 1 absent, -1 on a store error (printed). */
static int
active_node(struct ctl_globals *g, const char *id, struct ring_node *out, uint64_t *epoch)
{
    struct admin a = { .g = g };
    int          rc, idx;

    rc = admin_load(&a, false);
    if (rc != EX_OK || a.old == NULL) {
        if (rc == EX_OK) {
            ctl_error("the store has no active membership");
        }
        admin_free(&a);
        return -1;
    }
    *epoch = a.old->epoch;
    idx = ring_members_find(a.old, id);
    if (idx >= 0) {
        *out = a.old->nodes[idx];
    }
    admin_free(&a);
    return idx >= 0 ? 0 : 1;
}

/* Drop a dead or recovering member and join it again (it comes back
 * empty): the way to bring a restarted node's ranges back. */
static int
repair_node(struct ctl_globals *g, const char *id, const char *addr_arg, bool force, bool sole_ok,
            double rate_mib)
{
    struct change_opts o = { .join = true, .rate_mib = rate_mib };
    struct ring_node   n;
    uint64_t           epoch = 0;
    int                rc;

    memset(&n, 0, sizeof(n));
    rc = active_node(g, id, &n, &epoch);
    if (rc < 0) {
        return EX_USAGE;
    }
    if (rc == 0) {
        ctl_info("repair: %s: removing it from epoch %" PRIu64 " (copies of its ranges come from "
                 "the surviving owners)",
                 id, epoch);
        rc = remove_failed(g, id, force, sole_ok, rate_mib);
        if (rc != EX_OK) {
            return rc;
        }
    } else if (addr_arg == NULL) {
        ctl_error("repair: %s is not a member of epoch %" PRIu64 ": give its ADDR to join it", id,
                  epoch);
        return EX_USAGE;
    }
    snprintf(o.id, sizeof(o.id), "%s", id);
    snprintf(o.addr, sizeof(o.addr), "%s", addr_arg != NULL ? addr_arg : n.addr);
    snprintf(o.zone, sizeof(o.zone), "%s", addr_arg != NULL ? "" : n.zone);
    o.weight = addr_arg != NULL || n.weight == 0 ? 1 : n.weight;
    ctl_info("repair: %s: joining it again at %s", id, o.addr);
    rc = change_run(g, &o);
    if (rc != EX_OK) {
        /* Its removal stands: it is out of the ring, and a plain repair
         * (no ADDR) no longer finds it. */
        ctl_error("repair: %s was removed but joining it again failed: `ringctl repair %s %s` "
                  "joins it",
                  id, id, o.addr);
    }
    return rc;
}

int
ctl_repair(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "force", no_argument, NULL, 'F' },
                                          { "rate", required_argument, NULL, 'r' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char usage[] = CTL_USAGE_ADMIN " repair ID [ADDR] [--force] [--rate MIB_PER_S]";
    double            rate = DEFAULT_RATE_MIB;
    bool              force = false;
    int               c;

    /* No "+": options may follow the operands (repair ID --force). */
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'F':
            force = true;
            break;
        case 'r':
            if (ctl_parse_rate("repair", optarg, &rate) != EX_OK) {
                return EX_USAGE;
            }
            break;
        default:
            return ctl_getopt_default(c, usage, 0);
        }
    }
    if (argc - optind < 1 || argc - optind > 2 || strlen(argv[optind]) > RING_ID_MAX ||
        (argc - optind == 2 && strlen(argv[optind + 1]) > RING_ADDR_MAX)) {
        ctl_error("usage: repair ID [ADDR] [--force] [--rate MIB_PER_S]");
        return EX_USAGE;
    }
    return repair_node(g, argv[optind], argc - optind == 2 ? argv[optind + 1] : NULL, force, false,
                       rate);
}

static volatile sig_atomic_t watch_stop;

/* Does every other member that answered (crc[] of a->nodes) and is current
 * see a->nodes[x] down? Then x is cut off from its peers: it serves
 * nothing (it hears nobody), and only its removal gives its keys back. */
static bool
unheard(const struct admin *a, const int *crc, uint32_t x)
{
    uint32_t i, k, asked = 0;

    for (i = 0; i < a->n_nodes; i++) {
        const struct tnode *t = &a->nodes[i];
        bool                sees = false;

        if (i == x || crc[i] != CPORT_OK || !t->in_old || t->st.recovering ||
            t->st.behind_epoch != 0) {
            continue;
        }
        asked++;
        for (k = 0; k < t->st.n_peers; k++) {
            if (strcmp(t->st.peers[k].node_id, a->nodes[x].id) == 0) {
                sees = t->st.peers[k].state == CPORT_PEER_DOWN;
            }
        }
        if (!sees) {
            return false;
        }
    }
    return asked > 0;
}

static void
watch_signal(int sig)
{
    (void)sig;
    watch_stop = 1;
}

/* Wait out one interval of the watch loop, or less: until the store
 * changes after revision *seen (a liveness lease expired, a transition was
 * recorded or ended), so the watch acts on a store event at once instead of
 * at its next poll. With the store down, the whole interval. */
static void
watch_pause(struct mstore *ws, uint64_t *seen, double interval)
{
    int      ms = (int)(interval * 1000);
    int64_t  t0 = util_now_ms();
    uint64_t now = 0;
    char     werr[512];
    int      rc = ws != NULL ? mstore_wait(ws, *seen, ms, &now, werr, sizeof(werr)) : MSTORE_EIO;
    int64_t  left;

    if (rc == MSTORE_OK && now > *seen) {
        *seen = now;
        return;
    }
    left = ms - (util_now_ms() - t0);
    if (left > 0) {
        ctl_sleep_ms((int)left);
    }
}

/* One member as the watch loop sees it. */
struct watched {
    char    id[RING_ID_MAX + 1];
    int64_t bad_since;  /* ms; 0 = healthy */
    bool    recovering; /* answers, but restarted empty or behind */
    bool    lease_said; /* "its lease is still held" logged */
};

/* Is id among names[0..n)? */
static bool
names_has(char **names, size_t n, const char *id)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (strcmp(names[i], id) == 0) {
            return true;
        }
    }
    return false;
}

/*
 * watch: poll every member; one that stays unreachable for --down-after
 * seconds is removed (remove --failed), one that stays recovering (it
 * restarted empty) is repaired (removed, then joined again). At R = 1 that
 * drops the only copy of its keys, which become misses, as memcached
 * clients eject a dead server (--keep-sole-copies: leave such a node to an
 * admin). One action at a time; a pending transition (another admin's) is
 * left alone. Runs until SIGINT/SIGTERM, or one round with --once.
 */
int
ctl_watch(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "down-after", required_argument, NULL, 'd' },
                                          { "interval", required_argument, NULL, 'i' },
                                          { "transition-timeout", required_argument, NULL, 't' },
                                          { "force", no_argument, NULL, 'F' },
                                          { "keep-sole-copies", no_argument, NULL, 'k' },
                                          { "kubernetes", required_argument, NULL, 'K' },
                                          { "k8s-namespace", required_argument, NULL, 'N' },
                                          { "k8s-api", required_argument, NULL, 'A' },
                                          { "k8s-port", required_argument, NULL, 'P' },
                                          { "once", no_argument, NULL, 'o' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char          usage[] =
        CTL_USAGE_ADMIN " watch [--down-after S] [--interval S] [--transition-timeout S] [--force] "
                        "[--keep-sole-copies] [--kubernetes STATEFULSET [--k8s-namespace NS] "
                        "[--k8s-api URL] [--k8s-port PORT]] [--once]";
    struct sigaction sa;
    struct watched  *w = NULL;
    uint32_t         nw = 0;
    double           down_after = 1, interval = 0.5, tr_timeout = 30;
    int64_t          stuck_since = 0;
    uint64_t         seen_rev = 0;
    struct mstore   *ws = NULL;
    struct ctl_role *role = NULL;
    bool             force = false, once = false, admin_gone_seen = false, keep_sole = false;
    struct k8s_conf  k8s = { .port = 11211 };
    char             k8s_why[K8S_WHY_MAX] = "";
    bool             standby = false, fatal = false;
    int              c, rc = EX_OK;
    char            *end;

    optind = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
        case 'i':
            errno = 0;
            *(c == 'd' ? &down_after : &interval) = strtod(optarg, &end);
            if (errno != 0 || *end != '\0' || !(down_after >= 0) || !(interval >= 0.05) ||
                down_after > 86400 || interval > 3600) {
                ctl_error("watch: --down-after S (>= 0), --interval S (>= 0.05)");
                return EX_USAGE;
            }
            break;
        case 't':
            errno = 0;
            tr_timeout = strtod(optarg, &end);
            if (errno != 0 || *end != '\0' || !(tr_timeout >= 0) || tr_timeout > 86400) {
                ctl_error("watch: --transition-timeout S (>= 0)");
                return EX_USAGE;
            }
            break;
        case 'F':
            force = true;
            break;
        case 'k':
            keep_sole = true;
            break;
        case 'K':
            k8s.sts = optarg;
            break;
        case 'N':
            k8s.ns = optarg;
            break;
        case 'A':
            k8s.api = optarg;
            break;
        case 'P':
            errno = 0;
            k8s.port = (unsigned)strtoul(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || k8s.port == 0 || k8s.port > 55535) {
                ctl_error("watch: --k8s-port PORT (1..55535: the cluster port is +10000)");
                return EX_USAGE;
            }
            break;
        case 'o':
            once = true;
            break;
        default:
            return ctl_getopt_default(c, usage, 0);
        }
    }
    if (optind != argc) {
        ctl_error("usage:%s", usage + strlen(CTL_USAGE_ADMIN));
        return EX_USAGE;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = watch_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    /* A daemon's lines are its log: each one carries its time. */
    ctl_error_stamp(true);
    ctl_info("watch: a member unreachable (or recovering) for %.1f s is removed (repaired); "
             "polling every %.2f s, and at once when the store changes",
             down_after, interval);
    /* With etcd, one watch of several acts: the holder of role/watch. */
    role = ctl_role_start(g->store, "watch");
    while (!watch_stop) {
        struct admin         a = { .g = g };
        struct cport_request sreq = { .kind = CPORT_STATUS };
        char                 act_id[RING_ID_MAX + 1] = "";
        char                 holder[256];
        bool                 act_repair = false, take_over = false;
        bool                 node_pending = false, any_bad = false, idle = false;
        uint32_t             i, k;
        char                 when[40];

        if (!ctl_role_held(role, holder, sizeof(holder))) {
            if (!standby) {
                ctl_info("watch: standing by: the watch role (role/watch) is held by %s",
                         holder[0] != '\0' ? holder : "another watch (or the store is down)");
                standby = true;
            }
            if (once) {
                break;
            }
            if (ws == NULL) {
                ws = mstore_open(g->store, NULL, 0);
            }
            watch_pause(ws, &seen_rev, interval);
            continue;
        }
        if (standby) {
            /* What was seen before standing by is old: start afresh. */
            ctl_info("watch: this watch holds the watch role now");
            standby = false;
            admin_gone_seen = false;
            stuck_since = 0;
            for (k = 0; k < nw; k++) {
                w[k].bad_since = 0;
            }
        }
        rc = admin_open(&a, true);
        if (rc != EX_OK) {
            admin_free(&a); /* a bad store spec or token file */
            fatal = true;
            break;
        }
        if (admin_load_state(&a) != EX_OK) {
            /* The store is down or a record is malformed (printed): the
             * nodes keep serving; try again next interval. */
            admin_free(&a);
            rc = EX_FAILED;
            if (once) {
                break;
            }
            ctl_info("watch: cannot read the store; trying again");
            watch_pause(NULL, &seen_rev, interval);
            continue;
        }
        rc = EX_OK;
        if (a.old == NULL || (a.new == NULL && !a.have_rec)) {
            admin_gone_seen = false;
        }
        if (a.old != NULL && (a.new != NULL || a.have_rec)) {
            /* Its admin re-stores the record at least every few seconds
             * while it runs (`written`): one silent for --transition-timeout
             * died, and its fence would hold the moving ranges at TRYAGAIN
             * for good. resume finishes it, or aborts it (finding 12). */
            int64_t at = a.have_rec ? (a.rec.written != 0 ? a.rec.written : a.rec.started) : 0;
            int64_t age = at != 0 ? (int64_t)time(NULL) - at : 0;

            bool known, held = admin_lease_held(a.store, &known);

            /* The admin holds admin/HOST-PID (an etcd lease, or a record
             * renewed with its time: client/ctl_lease.h) from before the
             * pending record exists until it ends; none live beside a
             * pending record seen twice: its admin died. */
            if (known && !held && a.have_rec && admin_gone_seen) {
                ctl_info("watch: the transition (%s) has no admin lease in the store: its "
                         "admin is gone; resuming it",
                         a.rec.op);
                take_over = true;
                admin_gone_seen = false;
            } else if (known) {
                admin_gone_seen = !held && a.have_rec;
                ctl_info("watch: a transition is pending (%s); %s", a.rec.op,
                         held ? "its admin holds its lease: waiting" : "no admin lease");
                /* At least 5 s: a live admin re-stores it every 2 s (whole
                 * seconds), so a shorter timeout could take over from it. */
            } else if (a.have_rec && (double)age >= (tr_timeout > 5 ? tr_timeout : 5)) {
                ctl_info("watch: the transition (%s) has not been written for %" PRId64
                         " s: its admin is gone; resuming it",
                         a.rec.op, age);
                take_over = true;
            } else {
                ctl_info("watch: a transition is pending (%s); waiting",
                         a.have_rec ? a.rec.op : "?");
            }
        } else if (a.old != NULL && nodes_build(&a) == EX_OK) {
            int *crc = calloc(a.n_nodes + 1, sizeof(*crc));

            idle = crc != NULL;
            char **alive = NULL;
            size_t n_alive = 0;
            char   lerr[512];

            /* Nodes that keep liveness leases in the store (etcd, nodes
             * run with --store): one that stopped answering is failed
             * over only once the store let its lease expire. */
            if (mstore_has_leases(a.store) &&
                mstore_list(a.store, "alive", &alive, &n_alive, lerr, sizeof(lerr)) != MSTORE_OK) {
                ctl_info("watch: store: %s", lerr);
            }

            for (i = 0; crc != NULL && i < a.n_nodes; i++) {
                crc[i] = node_call(&a, &a.nodes[i], &sreq,
                                   (int)(interval * 1000) < 1000 ? 1000 : (int)(interval * 1000));
                /* Pending while the store has nothing pending: the store
                 * committed (or aborted) and this node never heard. */
                if (crc[i] == CPORT_OK && a.nodes[i].st.pending_epoch != 0) {
                    node_pending = true;
                }
            }
            for (i = 0; crc != NULL && i < a.n_nodes; i++) {
                struct tnode   *t = &a.nodes[i];
                struct watched *me = NULL;
                bool            cut = crc[i] == CPORT_OK && unheard(&a, crc, i);
                bool bad = crc[i] != CPORT_OK || t->st.recovering || t->st.behind_epoch != 0 || cut;

                for (k = 0; k < nw; k++) {
                    if (strcmp(w[k].id, t->id) == 0) {
                        me = &w[k];
                    }
                }
                if (me == NULL) {
                    struct watched *nwp = realloc(w, (nw + 1) * sizeof(*w));

                    if (nwp == NULL) {
                        continue;
                    }
                    w = nwp;
                    me = &w[nw++];
                    memset(me, 0, sizeof(*me));
                    snprintf(me->id, sizeof(me->id), "%s", t->id);
                }
                any_bad |= bad;
                if (!bad) {
                    if (me->bad_since != 0) {
                        ctl_info("watch: %s is healthy again", t->id);
                    }
                    me->bad_since = 0;
                    me->lease_said = false;
                    continue;
                }
                me->recovering = crc[i] == CPORT_OK && !cut;
                if (me->bad_since == 0) {
                    me->bad_since = util_now_ms();
                    ctl_info("watch: %s %s", t->id,
                             crc[i] != CPORT_OK ? t->err
                             : cut              ? "answers, but none of its peers hears it"
                             : t->st.recovering ? "is recovering (restarted empty)"
                                                : "is behind a higher epoch");
                }
                if (act_id[0] == '\0' &&
                    util_now_ms() - me->bad_since >= (int64_t)(down_after * 1000)) {
                    if (!me->recovering && n_alive > 0 && names_has(alive, n_alive, t->id)) {
                        if (!me->lease_said) {
                            ctl_info("watch: %s: its liveness lease in the store is still held; "
                                     "waiting for it to expire",
                                     t->id);
                            me->lease_said = true;
                        }
                        continue;
                    }
                    snprintf(act_id, sizeof(act_id), "%s", t->id);
                    act_repair = me->recovering;
                }
            }
            mstore_names_free(alive, n_alive);
            free(crc);
        }
        admin_free(&a);
        if (!node_pending) {
            stuck_since = 0;
        } else if (stuck_since == 0) {
            stuck_since = util_now_ms();
        } else if ((double)(util_now_ms() - stuck_since) >= tr_timeout * 1000) {
            ctl_info("watch: a node is still pending with nothing pending in the store; "
                     "resuming");
            take_over = true;
            stuck_since = 0;
        }
        if (take_over) {
            char *args[] = { (char *)"resume", NULL };

            rc = ctl_resume(g, 1, args);
            ctl_out_event(WATCH_EVENT, "ssSss", "%s\twatch\t-\tresume\t%s\n",
                          ctl_now_stamp(when, sizeof(when)), rc == EX_OK ? "done" : "failed");
        } else if (act_id[0] != '\0') {
            ctl_info("watch: %s: %s", act_id,
                     act_repair ? "repair (remove --failed, then join)" : "remove --failed");
            rc = act_repair ? repair_node(g, act_id, NULL, force, !keep_sole, DEFAULT_RATE_MIB)
                            : remove_failed(g, act_id, force, !keep_sole, DEFAULT_RATE_MIB);
            ctl_out_event(
                WATCH_EVENT, "ssSss", "%s\twatch\t%s\t%s\t%s\n", ctl_now_stamp(when, sizeof(when)),
                act_id, act_repair ? "repair" : "remove --failed", rc == EX_OK ? "done" : "failed");
            for (k = 0; k < nw; k++) {
                if (strcmp(w[k].id, act_id) == 0) {
                    w[k].bad_since = 0;
                }
            }
        } else if (k8s.sts != NULL && idle && !any_bad && !node_pending) {
            /* Every member healthy, nothing pending: make the ring follow
             * the StatefulSet (a join or a leave). */
            rc = k8s_round(g, &k8s, k8s_why);
        }
        if (once) {
            break;
        }
        if (ws == NULL) {
            ws = mstore_open(g->store, NULL, 0);
        }
        watch_pause(ws, &seen_rev, interval);
    }
    ctl_role_stop(role);
    mstore_close(ws);
    free(w);
    /* Stopped by a signal, a daemon that ran as it should exits 0: its
     * failed actions were printed as they happened. */
    return watch_stop && !fatal ? EX_OK : rc;
}
