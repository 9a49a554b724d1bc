/*
 * cluster suite: the node's cluster state without a server. Arc sets, the
 * state directory (round trip through a restart, corrupt files named with
 * file:line), the PREPARE/COMMIT/ABORT rules, route decisions on a
 * 3-node membership, and the arcs a join gives its new node and old
 * primaries, checked against the rings key by key, and a range kept for
 * a restarted owner making this node its holder.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ring/ring.h"
#include "server/cluster.h"
#include "server/cluster_internal.h"
#include "server/route.h"
#include "server/statedir.h"
#include "tests/suites.h"

static const char THREE[] =
    "epoch 3\nvnodes 160\nreplicas 1\n"
    "node a 127.0.0.1:21001\nnode b 127.0.0.1:21002\nnode c 127.0.0.1:21003\n";
static const char FOUR[] =
    "epoch 4\nvnodes 160\nreplicas 1\n"
    "node a 127.0.0.1:21001\nnode b 127.0.0.1:21002\nnode c 127.0.0.1:21003\n"
    "node d 127.0.0.1:21004\n";

static char dir[64];
static char err[1400];

static void
mkstate(void)
{
    strcpy(dir, "/tmp/check_cluster.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void
rmstate(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void
put(const char *name, const char *text)
{
    ck_assert_int_eq(statedir_write_file(dir, name, text, strlen(text), err, sizeof(err)), 0);
}

static struct ring_members *
members(const char *text)
{
    struct ring_members *m = NULL;

    ck_assert_int_eq(ring_members_parse(text, strlen(text), "t", &m, err, sizeof(err)), RING_OK);
    return m;
}

static struct cluster *
open_node(const char *id)
{
    struct cluster *cl = NULL;
    int rc = cluster_new(NULL, NULL, id, dir, "ringcache", (const uint8_t *)"admin", 5, &cl, err,
                         sizeof(err));

    ck_assert_msg(rc == 0, "cluster_new: %s", err);
    return cl;
}

/* A simple 64-bit mix so samples cover the circle evenly. */
static uint64_t
sample(uint64_t i)
{
    uint64_t z = i * 0x9e3779b97f4a7c15ULL + 0x632be59bd9b4e5ULL;

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

START_TEST(test_arcset_wrap_and_merge)
{
    struct arcset a = { 0 };

    ck_assert_int_eq(arcset_add_arc(&a, 100, 200), 0);
    ck_assert_int_eq(arcset_add_arc(&a, UINT64_MAX - 10, 5), 0); /* wraps */
    ck_assert_int_eq(arcset_add_arc(&a, 200, 300), 0);           /* touches */
    arcset_finish(&a);
    ck_assert_uint_eq(a.n, 3); /* [0,5] [101,300] [max-9,max] */
    ck_assert(!arcset_has(&a, 100));
    ck_assert(arcset_has(&a, 101));
    ck_assert(arcset_has(&a, 250));
    ck_assert(arcset_has(&a, 300));
    ck_assert(!arcset_has(&a, 301));
    ck_assert(arcset_has(&a, 0));
    ck_assert(arcset_has(&a, 5));
    ck_assert(!arcset_has(&a, 6));
    ck_assert(arcset_has(&a, UINT64_MAX));
    ck_assert(!arcset_has(&a, UINT64_MAX - 10));
    arcset_clear(&a);
    ck_assert_int_eq(arcset_add_arc(&a, 7, 7), 0); /* whole circle */
    arcset_finish(&a);
    ck_assert(arcset_has(&a, 0) && arcset_has(&a, UINT64_MAX) && arcset_has(&a, 7));
    ck_assert(arcset_share(&a) > 0.999);
    arcset_clear(&a);
}
END_TEST

/* Check a prefix map against the set, prefix by prefix: outside false,
 * bit p is set when a range touches prefix p; outside true, unless one
 * range holds the whole prefix. */
static void
check_prefix_map(const struct arcset *a, const uint64_t *map, bool outside)
{
    uint32_t p, i;

    for (p = 0; p < 65536; p++) {
        uint64_t lo = (uint64_t)p << 48, hi = lo | 0xffffffffffffull;
        bool     want = outside;

        for (i = 0; i < a->n; i++) {
            if (outside ? (a->r[i].start <= lo && a->r[i].end >= hi)
                        : (a->r[i].start <= hi && a->r[i].end >= lo)) {
                want = !outside;
            }
        }
        ck_assert_msg(((map[p / 64] >> (p % 64)) & 1) == want, "prefix %#x (outside %d)", p,
                      outside);
    }
}

/* A set's prefix map has exactly the 16-bit prefixes some range touches:
 * arcs inside one prefix, across several, wrapping, and ending on a
 * prefix's last hash; the complement's map every prefix but those wholly
 * inside a range. */
START_TEST(test_arcset_prefixes)
{
    struct arcset a = { 0 };
    uint64_t     *map = malloc(8192);

    ck_assert_ptr_nonnull(map);
    ck_assert_int_eq(arcset_add_arc(&a, 0x0005000000000010ull, 0x0005000000000020ull), 0);
    ck_assert_int_eq(arcset_add_arc(&a, 0x00100000000000ffull, 0x0013ffffffffffffull), 0);
    ck_assert_int_eq(arcset_add_arc(&a, 0xfffeffffffffffffull, 0x0001000000000000ull), 0);
    arcset_finish(&a);
    arcset_prefixes(&a, 16, map);
    check_prefix_map(&a, map, false);
    ck_assert(map[0] & ((1ull << 0) | (1ull << 1) | (1ull << 5))); /* wrapped; inside one */
    ck_assert(!(map[0] & (1ull << 2)));
    ck_assert(!(map[0] & (1ull << 0x14)) && (map[0] & (1ull << 0x13)) && (map[0] & (1ull << 0x10)));
    arcset_prefixes_outside(&a, 16, map);
    check_prefix_map(&a, map, true);
    ck_assert(!(map[0] & (1ull << 0x11)) && (map[0] & (1ull << 0x10)) && (map[0] & (1ull << 5)));
    ck_assert(!(map[1023] >> 63) && !(map[0] & 1) && (map[0] & 2));
    arcset_clear(&a);
    free(map);
}
END_TEST

START_TEST(test_state_round_trip)
{
    struct ring_members *four = members(FOUR);
    struct cluster      *cl;
    bool                 again;

    mkstate();
    put("active.members", THREE);
    cl = open_node("a");
    ck_assert_uint_eq(cluster_view(cl)->epoch, 3);
    ck_assert_int_eq(cl->self_old, 0);
    ck_assert_int_eq(
        cluster_prepare(cl, four, (const uint8_t *)"t0k", 3, 3, &again, err, sizeof(err)), 0);
    ck_assert(!again);
    ck_assert_uint_eq(cluster_view(cl)->pending_epoch, 4);
    cluster_free(cl);

    /* Restart: active and pending (with token and phase) come back. */
    cl = open_node("a");
    ck_assert_uint_eq(cluster_view(cl)->epoch, 3);
    ck_assert_ptr_nonnull(cl->pending);
    ck_assert_uint_eq(cl->pending->epoch, 4);
    ck_assert_int_eq(cl->phase, CLUSTER_PHASE_PREPARED);
    ck_assert(cluster_token_ok(cl, (const uint8_t *)"t0k", 3));
    ck_assert(!cluster_token_ok(cl, (const uint8_t *)"t0K", 3));
    ck_assert_uint_eq(cl->n_dests, 1);
    ck_assert_int_eq(cluster_set_phase(cl, CLUSTER_PHASE_FENCED, err, sizeof(err)), 0);
    ck_assert_uint_gt(cluster_view(cl)->fence.n, 0);
    cluster_free(cl);

    cl = open_node("a");
    ck_assert_int_eq(cl->phase, CLUSTER_PHASE_FENCED);
    ck_assert_uint_gt(cluster_view(cl)->fence.n, 0); /* a fence survives a restart */
    ck_assert_int_eq(cluster_commit(cl, NULL, (const uint8_t *)"t0k", 3, &again, err, sizeof(err)),
                     0);
    ck_assert_uint_eq(cluster_view(cl)->epoch, 4);
    ck_assert_uint_eq(cluster_view(cl)->pending_epoch, 0);
    ck_assert_uint_eq(cluster_view(cl)->fence.n, 0);
    cluster_free(cl);

    cl = open_node("a");
    ck_assert_uint_eq(cluster_view(cl)->epoch, 4);
    ck_assert_ptr_null(cl->pending);
    {
        char path[128];

        snprintf(path, sizeof(path), "%s/pending.members", dir);
        ck_assert_int_eq(access(path, F_OK), -1);
    }
    cluster_free(cl);
    ring_members_free(four);
    rmstate();
}
END_TEST

/* A corrupt state file stops the start with file:line: reason. */
static void
expect_load_error(const char *file, const char *text, const char *want)
{
    struct cluster *cl = NULL;
    char            path[128];

    mkstate();
    put("active.members", THREE);
    if (strcmp(file, "pending.phase") == 0) {
        put("pending.members", FOUR);
    }
    put(file, text);
    ck_assert_int_eq(cluster_new(NULL, NULL, "a", dir, "ringcache", NULL, 0, &cl, err, sizeof(err)),
                     -1);
    ck_assert_ptr_null(cl);
    snprintf(path, sizeof(path), "%s/%s", dir, want);
    ck_assert_msg(strstr(err, path) != NULL, "error '%s' does not name '%s'", err, path);
    rmstate();
}

START_TEST(test_state_corrupt)
{
    expect_load_error("active.members", "epoch 3\nvnodes x\n", "active.members:2:");
    expect_load_error("pending.members", "node a\n", "pending.members:1:");
    expect_load_error("pending.phase", "token 00ff\nphse fenced\n", "pending.phase:2:");
    expect_load_error("pending.phase", "token 0g\nphase fenced\n", "pending.phase:1:");
    expect_load_error("pending.phase", "token abcd\n", "pending.phase:1: missing phase");
    expect_load_error("pending.phase", "token abcd\nphase molten\n", "pending.phase:2:");
}
END_TEST

/* The state directory holds no file `name`. */
static void
assert_gone(const char *name)
{
    char path[128];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    ck_assert_msg(access(path, F_OK) == -1, "%s is still there", path);
}

/* A state directory from before the phase record was renamed: its
 * pending.meta is read, and removed with the pending transition. */
START_TEST(test_state_legacy_phase_name)
{
    struct cluster *cl;
    char            path[128];

    mkstate();
    put("active.members", THREE);
    put("pending.members", FOUR);
    put("pending.meta", "token 74306b\nphase fenced\n");
    cl = open_node("a");
    ck_assert_ptr_nonnull(cl->pending);
    ck_assert_uint_eq(cl->pending->epoch, 4);
    ck_assert_int_eq(cl->phase, CLUSTER_PHASE_FENCED);
    ck_assert(cluster_token_ok(cl, (const uint8_t *)"t0k", 3));
    ck_assert_uint_gt(cluster_view(cl)->fence.n, 0);
    ck_assert_int_eq(cluster_abort(cl, (const uint8_t *)"t0k", 3, err, sizeof(err)), 0);
    assert_gone("pending.meta");
    assert_gone("pending.members");
    cluster_free(cl);
    rmstate();

    /* A malformed one is named in the error. */
    mkstate();
    put("active.members", THREE);
    put("pending.members", FOUR);
    put("pending.meta", "token 0g\nphase fenced\n");
    cl = NULL;
    ck_assert_int_eq(cluster_new(NULL, NULL, "a", dir, "ringcache", NULL, 0, &cl, err, sizeof(err)),
                     -1);
    snprintf(path, sizeof(path), "%s/pending.meta:1:", dir);
    ck_assert_msg(strstr(err, path) != NULL, "error '%s' does not name '%s'", err, path);
    rmstate();
}
END_TEST

/* A crash after a commit's active file was synced, before its pending
 * and phase removals (unsynced) reached the disk, in either order: the
 * stale pending is dropped whether its phase record is there or not
 * (pending without phase once failed the load: "pending.phase:1:
 * missing"). */
START_TEST(test_state_stale_pending)
{
    struct cluster *cl;
    int             with_phase;

    for (with_phase = 0; with_phase < 2; with_phase++) {
        mkstate();
        put("active.members", FOUR);
        put("pending.members", FOUR);
        if (with_phase) {
            put("pending.phase", "token 74306b\nphase fenced\n");
        }
        cl = open_node("a");
        ck_assert_ptr_null(cl->pending);
        ck_assert_uint_eq(cl->active->epoch, 4);
        ck_assert_int_eq(cl->phase, CLUSTER_PHASE_NONE);
        assert_gone("pending.members");
        assert_gone("pending.phase");
        cluster_free(cl);
        rmstate();
    }
}
END_TEST

START_TEST(test_state_dir_missing)
{
    struct cluster *cl = NULL;

    ck_assert_int_eq(
        cluster_new(NULL, NULL, "a", "/nonexistent/state", "x", NULL, 0, &cl, err, sizeof(err)),
        -1);
    ck_assert(strstr(err, "/nonexistent/state") != NULL);
    ck_assert_int_eq(
        cluster_new(NULL, NULL, "bad id!", "/tmp", "x", NULL, 0, &cl, err, sizeof(err)), -1);
}
END_TEST

START_TEST(test_prepare_rules)
{
    struct ring_members *four = members(FOUR), *five = members(FOUR);
    struct cluster      *cl;
    bool                 again;

    five->epoch = 5;
    mkstate();
    put("active.members", THREE);
    cl = open_node("b");
    /* from_epoch must be ours, epoch must follow it, token non-empty. */
    ck_assert_int_eq(
        cluster_prepare(cl, five, (const uint8_t *)"t", 1, 4, &again, err, sizeof(err)), -1);
    ck_assert(strstr(err, "active epoch is 3") != NULL);
    ck_assert_int_eq(
        cluster_prepare(cl, five, (const uint8_t *)"t", 1, 3, &again, err, sizeof(err)), -1);
    ck_assert_int_eq(
        cluster_prepare(cl, four, (const uint8_t *)"t", 0, 3, &again, err, sizeof(err)), -1);
    ck_assert_int_eq(
        cluster_prepare(cl, four, (const uint8_t *)"t1", 2, 3, &again, err, sizeof(err)), 0);
    /* Same token: idempotent. Another token: refused with our state. */
    ck_assert_int_eq(
        cluster_prepare(cl, four, (const uint8_t *)"t1", 2, 3, &again, err, sizeof(err)), 0);
    ck_assert(again);
    ck_assert_int_eq(
        cluster_prepare(cl, four, (const uint8_t *)"t2", 2, 3, &again, err, sizeof(err)), -1);
    ck_assert(strstr(err, "another transition is pending (epoch 4") != NULL);
    /* A source may not commit before it was fenced; a wrong token never. */
    ck_assert_int_eq(cluster_commit(cl, NULL, (const uint8_t *)"t2", 2, &again, err, sizeof(err)),
                     -1);
    ck_assert_int_eq(cluster_commit(cl, NULL, (const uint8_t *)"t1", 2, &again, err, sizeof(err)),
                     -1);
    ck_assert(strstr(err, "not fenced") != NULL);
    /* Abort: wrong token refused, right token clears; repeating is fine. */
    ck_assert_int_eq(cluster_abort(cl, (const uint8_t *)"t2", 2, err, sizeof(err)), -1);
    ck_assert_int_eq(cluster_abort(cl, (const uint8_t *)"t1", 2, err, sizeof(err)), 0);
    ck_assert_ptr_null(cl->pending);
    ck_assert_uint_eq(cluster_view(cl)->pending_epoch, 0);
    ck_assert_int_eq(cluster_abort(cl, (const uint8_t *)"t1", 2, err, sizeof(err)), 0);
    /* With an active epoch and no pending, a commit of another epoch is refused. */
    ck_assert_int_eq(cluster_commit(cl, four, (const uint8_t *)"", 0, &again, err, sizeof(err)),
                     -1);
    cluster_free(cl);
    cl = open_node("b");
    ck_assert_ptr_null(cl->pending);
    cluster_free(cl);
    ring_members_free(four);
    ring_members_free(five);
    rmstate();
}
END_TEST

/* ringctl init: a node without a membership takes any epoch, any token. */
START_TEST(test_commit_init)
{
    struct ring_members *three = members(THREE);
    struct cluster      *cl;
    bool                 again;

    mkstate();
    cl = open_node("c");
    ck_assert_uint_eq(cluster_view(cl)->epoch, 0);
    ck_assert_uint_eq(cluster_view(cl)->config_len, 19);
    ck_assert_mem_eq(cluster_view(cl)->config, "CONFIG 0 0\r\n\r\nEND\r\n", 19);
    ck_assert_int_eq(cluster_commit(cl, three, (const uint8_t *)"", 0, &again, err, sizeof(err)),
                     0);
    ck_assert(!again);
    ck_assert_uint_eq(cluster_view(cl)->epoch, 3);
    ck_assert_int_eq(cluster_commit(cl, three, (const uint8_t *)"", 0, &again, err, sizeof(err)),
                     0);
    ck_assert(again);
    ck_assert(strncmp(cluster_view(cl)->config, "CONFIG 3 ", 9) == 0);
    ck_assert(strstr(cluster_view(cl)->config, "node c 127.0.0.1:21003\n\r\nEND\r\n") != NULL);
    cluster_free(cl);
    cl = open_node("c");
    ck_assert_uint_eq(cluster_view(cl)->epoch, 3);
    cluster_free(cl);
    ring_members_free(three);
    rmstate();
}
END_TEST

/* The route decision as the old cluster_route answered it. */
static enum route_do
route_of(const struct cluster_view *v, uint64_t h, bool write, bool declared, uint32_t *owner)
{
    struct route rt;

    route_decide(v, h, write, declared, &rt);
    *owner = rt.target;
    return rt.action;
}

START_TEST(test_route_three_nodes)
{
    struct ring_members       *four = members(FOUR);
    struct ring               *r;
    struct cluster            *cl;
    const struct cluster_view *v;
    uint32_t                   i, owner, local = 0, fenced = 0;
    bool                       again;

    mkstate();
    put("active.members", THREE);
    cl = open_node("b");
    v = cluster_view(cl);
    r = v->ring;
    for (i = 0; i < 20000; i++) {
        uint64_t      h = sample(i);
        uint32_t      p = ring_primary(r, h);
        enum route_do rt = route_of(v, h, true, true, &owner);

        if (p == 1) {
            ck_assert_int_eq(rt, ROUTE_SERVE);
            local++;
        } else {
            ck_assert_int_eq(rt, ROUTE_MOVED);
            ck_assert_uint_eq(owner, p);
            ck_assert_int_eq(route_of(v, h, false, false, &owner), ROUTE_FORWARD);
            ck_assert_str_eq(cluster_view_addr(v, owner),
                             p == 0 ? "127.0.0.1:21001" : "127.0.0.1:21003");
        }
    }
    ck_assert_uint_gt(local, 20000 / 3 * 8 / 10);
    ck_assert_uint_lt(local, 20000 / 3 * 12 / 10);

    /* Join d, fence: the keys b hands to d answer TRYAGAIN, the rest as before. */
    ck_assert_int_eq(
        cluster_prepare(cl, four, (const uint8_t *)"tk", 2, 3, &again, err, sizeof(err)), 0);
    ck_assert_int_eq(cluster_set_phase(cl, CLUSTER_PHASE_FENCED, err, sizeof(err)), 0);
    v = cluster_view(cl);
    {
        struct ring *nr = ring_build(four);

        for (i = 0; i < 20000; i++) {
            uint64_t      h = sample(i);
            uint32_t      p = ring_primary(v->ring, h), np = ring_primary(nr, h);
            enum route_do rt = route_of(v, h, true, true, &owner);

            if (p == 1 && np == 3) {
                ck_assert_int_eq(rt, ROUTE_TRYAGAIN);
                fenced++;
            } else if (p == 1) {
                ck_assert_int_eq(rt, ROUTE_SERVE);
            } else {
                ck_assert_int_eq(rt, ROUTE_MOVED);
            }
        }
        ring_free(nr);
    }
    ck_assert_uint_gt(fenced, 0);
    cluster_free(cl);
    ring_members_free(four);
    rmstate();
}
END_TEST

/* R = 2: a write is served only by the primary; a read by either owner
 * once replication exists (CLUSTER_REPLICATED), else the primary. */
START_TEST(test_route_replicas)
{
    static const char THREE_R2[] =
        "epoch 3\nvnodes 160\nreplicas 2\n"
        "node a 127.0.0.1:21001\nnode b 127.0.0.1:21002\nnode c 127.0.0.1:21003\n";
    struct cluster            *cl;
    const struct cluster_view *v;
    uint32_t                   i, owner, list[2];
    struct route               rt;

    mkstate();
    put("active.members", THREE_R2);
    cl = open_node("c");
    v = cluster_view(cl);
    for (i = 0; i < 5000; i++) {
        uint64_t h = sample(i);

        ring_locate(v->ring, h, 2, list);
        ck_assert_int_eq(route_of(v, h, false, true, &owner) == ROUTE_SERVE,
                         list[0] == 2 || (CLUSTER_REPLICATED && list[1] == 2));
        ck_assert_int_eq(route_of(v, h, true, true, &owner) == ROUTE_SERVE, list[0] == 2);
        /* One look-up: the decision carries the preference list, and a
         * write served here replicates to it. */
        route_decide(v, h, true, true, &rt);
        ck_assert_uint_eq(rt.n_owners, 2);
        ck_assert_uint_eq(rt.owners[0], list[0]);
        ck_assert_uint_eq(rt.owners[1], list[1]);
        ck_assert_uint_eq(rt.hash, h);
        ck_assert(rt.view == v);
        ck_assert_int_eq(rt.replicate, rt.action == ROUTE_SERVE);
    }
    cluster_free(cl);
    rmstate();
}
END_TEST

/* A join's arcs: d imports exactly what it owns in epoch 4; each old
 * primary sources exactly its keys whose new primary is d. */
START_TEST(test_join_arcs)
{
    struct ring_members *four = members(FOUR), *three = members(THREE);
    struct ring         *r3 = ring_build(three), *r4 = ring_build(four);
    struct cluster      *cl[4];
    static const char   *ids[4] = { "a", "b", "c", "d" };
    char                 dirs[4][64];
    uint32_t             i, k, moved = 0;
    bool                 again;

    /* One state directory per node; d has no membership yet, so it accepts
     * the join from any epoch. */
    for (k = 0; k < 4; k++) {
        mkstate();
        strcpy(dirs[k], dir);
        if (k < 3) {
            put("active.members", THREE);
        }
        cl[k] = open_node(ids[k]);
        ck_assert_int_eq(
            cluster_prepare(cl[k], four, (const uint8_t *)"j", 1, 3, &again, err, sizeof(err)), 0);
        ck_assert(!again);
        ck_assert_uint_eq(cl[k]->n_dests, k < 3 ? 1 : 0);
        if (k < 3) {
            ck_assert_str_eq(cl[k]->dests[0].id, "d");
            ck_assert_str_eq(cl[k]->dests[0].addr, "127.0.0.1:21004");
            ck_assert_uint_eq(cl[k]->importing.n, 0);
        }
    }
    ck_assert(arcset_share(&cl[3]->importing) > 0.25 * 0.8);
    ck_assert(arcset_share(&cl[3]->importing) < 0.25 * 1.2);
    for (i = 0; i < 50000; i++) {
        uint64_t h = sample(i);
        uint32_t p3 = ring_primary(r3, h), p4 = ring_primary(r4, h);

        ck_assert_int_eq(arcset_has(&cl[3]->importing, h), p4 == 3);
        for (k = 0; k < 3; k++) {
            bool src = p3 == k && p4 == 3;

            ck_assert_int_eq(arcset_has(&cl[k]->dests[0].arcs, h), src);
            ck_assert_int_eq(arcset_has(&cl[k]->losing, h), src);
            ck_assert_int_eq(arcset_has(&cl[k]->fence_arcs, h), src);
        }
        /* Monotonicity: a key moves only to the new node. */
        ck_assert(p3 == p4 || p4 == 3);
        moved += p3 != p4;
    }
    ck_assert_uint_gt(moved, 50000 / 4 * 8 / 10);
    for (k = 0; k < 4; k++) {
        cluster_free(cl[k]);
        strcpy(dir, dirs[k]);
        rmstate();
    }
    ring_free(r3);
    ring_free(r4);
    ring_members_free(three);
    ring_members_free(four);
}
END_TEST

/* A leave at R = 2 (finding #8): b keeps every key it owns in epoch 3 as
 * held (never purged before the commit), though it is refilled from the
 * old primary where a leaves; it imports into non-held ranges only what it
 * did not own. A node accepting the transition recovering holds nothing. */
START_TEST(test_leave_r2_holds)
{
    static const char THREE_R2[] =
        "epoch 3\nvnodes 160\nreplicas 2\n"
        "node a 127.0.0.1:21001\nnode b 127.0.0.1:21002\nnode c 127.0.0.1:21003\n";
    static const char    TWO_R2[] = "epoch 4\nvnodes 160\nreplicas 2\n"
                                    "node b 127.0.0.1:21002\nnode c 127.0.0.1:21003\n";
    struct ring_members *three = members(THREE_R2), *two = members(TWO_R2);
    struct ring         *r3 = ring_build(three);
    struct cluster      *b, *c;
    char                 dir_b[64];
    uint32_t             i, lo[2], refilled = 0, gained = 0;
    bool                 again;

    mkstate();
    strcpy(dir_b, dir);
    put("active.members", THREE_R2);
    b = open_node("b");
    ck_assert_int_eq(cluster_prepare(b, two, (const uint8_t *)"l", 1, 3, &again, err, sizeof(err)),
                     0);
    for (i = 0; i < 50000; i++) {
        uint64_t h = sample(i);
        bool     owned, imp = arcset_has(&b->importing, h);

        ring_locate(r3, h, 2, lo);
        owned = lo[0] == 1 || lo[1] == 1;
        ck_assert_int_eq(cluster_holds_active(b, h), owned);
        /* Refilled while held: b was a's secondary. */
        if (imp && owned) {
            ck_assert_uint_eq(lo[0], 0);
            refilled++;
        }
        gained += imp && !owned;
    }
    ck_assert_uint_gt(refilled, 0);
    ck_assert_uint_gt(gained, 0);
    ck_assert_int_eq(cluster_abort(b, (const uint8_t *)"l", 1, err, sizeof(err)), 0);
    cluster_free(b);

    mkstate();
    put("active.members", THREE_R2);
    c = open_node("c");
    __atomic_store_n(&c->live.recovering, 1, __ATOMIC_RELAXED);
    ck_assert_int_eq(cluster_prepare(c, two, (const uint8_t *)"l", 1, 3, &again, err, sizeof(err)),
                     0);
    ck_assert(c->fresh);
    for (i = 0; i < 5000; i++) {
        ck_assert(!cluster_holds_active(c, sample(i)));
    }
    cluster_free(c);
    rmstate();
    strcpy(dir, dir_b);
    rmstate();
    ring_free(r3);
    ring_members_free(three);
    ring_members_free(two);
}
END_TEST

/* f07: a kept range (handed to d, which restarted since the copy) makes
 * this node its holder when d is removed as failed: a does not import the
 * part of it a gains (it holds it) and sources the rest to its new owners.
 * Without the kept range nobody holds d's arcs at R=1. */
START_TEST(test_kept_holder)
{
    static const char    THREE5[] = "epoch 5\nvnodes 160\nreplicas 1\n"
                                    "node a 127.0.0.1:21001\nnode b 127.0.0.1:21002\n"
                                    "node c 127.0.0.1:21003\n";
    struct ring_members *four = members(FOUR), *three = members(THREE5);
    struct ring         *r4 = ring_build(four), *r5 = ring_build(three);
    static const char   *failed[] = { "d" };
    struct cluster_prep  p = { .next = three,
                               .token = (const uint8_t *)"r",
                               .token_len = 1,
                               .from_epoch = 4,
                               .failed = failed,
                               .n_failed = 1 };
    struct cluster      *a;
    uint32_t             i, sent = 0, held = 0, pass;
    bool                 again;

    for (pass = 0; pass < 2; pass++) {
        mkstate();
        put("active.members", FOUR);
        a = open_node("a");
        if (pass == 1) {
            ck_assert_int_eq(arcset_owned(&a->kept, r4, 3), 0);
        }
        ck_assert_int_eq(cluster_prepare_failed(a, &p, &again, err, sizeof(err)), 0);
        for (i = 0; i < 50000; i++) {
            uint64_t h = sample(i);
            uint32_t p4 = ring_primary(r4, h), p5 = ring_primary(r5, h);
            bool     src = false;
            uint32_t k;

            for (k = 0; k < a->n_dests; k++) {
                src = src || arcset_has(&a->dests[k].arcs, h);
            }
            if (p4 != 3) {
                ck_assert(!src);
                continue;
            }
            /* d's key: with the range kept, a holds it (never imports) and
             * sends it to its new owner; without, a imports what it gains. */
            ck_assert_int_eq(arcset_has(&a->importing, h), pass == 0 && p5 == 0);
            ck_assert_int_eq(src, pass == 1 && p5 != 0);
            sent += src;
            held += pass == 1 && p5 == 0;
        }
        cluster_free(a);
        rmstate();
    }
    ck_assert_uint_gt(sent, 0);
    ck_assert_uint_gt(held, 0);
    ring_free(r4);
    ring_free(r5);
    ring_members_free(four);
    ring_members_free(three);
}
END_TEST

Suite *
cluster_suite(void)
{
    Suite *s = suite_create("cluster");
    TCase *tc = tcase_create("cluster");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_arcset_wrap_and_merge);
    tcase_add_test(tc, test_arcset_prefixes);
    tcase_add_test(tc, test_state_round_trip);
    tcase_add_test(tc, test_state_corrupt);
    tcase_add_test(tc, test_state_legacy_phase_name);
    tcase_add_test(tc, test_state_stale_pending);
    tcase_add_test(tc, test_state_dir_missing);
    tcase_add_test(tc, test_prepare_rules);
    tcase_add_test(tc, test_commit_init);
    tcase_add_test(tc, test_route_three_nodes);
    tcase_add_test(tc, test_route_replicas);
    tcase_add_test(tc, test_join_arcs);
    tcase_add_test(tc, test_leave_r2_holds);
    tcase_add_test(tc, test_kept_holder);
    suite_add_tcase(s, tc);
    return s;
}
