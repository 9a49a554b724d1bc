/*
 * ring suite: the golden vectors of placement contract v1 (read from
 * tests/vectors/ring-v1 at test time, every line), then properties of the
 * ring on many seeded random memberships, checked against a naive model.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include "config.h"
#include "ring/ring.h"
#include "ring/ring_testing.h"
#include "tests/suites.h"

#define VEC_DIR RC_SRCDIR "/tests/vectors/ring-v1"
#define TRIALS  200

/* ---- helpers ---- */

/* Read a whole file (NUL-terminated); fails the test when it cannot. */
static char *
slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long  n;

    ck_assert_msg(f != NULL, "cannot open %s", path);
    ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    ck_assert_int_ge(n, 0);
    rewind(f);
    buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* Parse tests/vectors/ring-v1/NAME.members. */
static struct ring_members *
load_vector_members(const char *name)
{
    char                 path[512], err[256];
    struct ring_members *m = NULL;
    size_t               len;
    char                *text;

    snprintf(path, sizeof(path), "%s/%s.members", VEC_DIR, name);
    text = slurp(path, &len);
    ck_assert_msg(ring_members_parse(text, len, path, &m, err, sizeof(err)) == RING_OK, "%s", err);
    free(text);
    return m;
}

/* A tiny cache of vector rings by membership name. */
struct vec_ring {
    char         name[64];
    struct ring *r;
};

static struct ring *
vector_ring(struct vec_ring *cache, size_t cap, const char *name)
{
    size_t               i;
    struct ring_members *m;

    for (i = 0; i < cap && cache[i].r != NULL; i++) {
        if (strcmp(cache[i].name, name) == 0) {
            return cache[i].r;
        }
    }
    ck_assert_uint_lt(i, cap);
    m = load_vector_members(name);
    cache[i].r = ring_build(m);
    ck_assert_ptr_nonnull(cache[i].r);
    snprintf(cache[i].name, sizeof(cache[i].name), "%s", name);
    ring_members_free(m);
    return cache[i].r;
}

static void
free_vector_rings(struct vec_ring *cache, size_t cap)
{
    size_t i;

    for (i = 0; i < cap; i++) {
        ring_free(cache[i].r);
    }
}

/* Split a line at tabs in place; returns the number of fields. */
static int
split_tabs(char *line, char **f, int max)
{
    int n = 0;

    f[n++] = line;
    while (n < max && (line = strchr(line, '\t')) != NULL) {
        *line++ = '\0';
        f[n++] = line;
    }
    return n;
}

/* Iterate the data lines of a vector file: calls fn with the fields. */
static int
for_each_vector(const char *file, int nf, void (*fn)(char **f, int n, void *arg), void *arg)
{
    char   path[512], *text, *line, *save = NULL, *f[8];
    size_t len;
    int    count = 0;

    snprintf(path, sizeof(path), "%s/%s", VEC_DIR, file);
    text = slurp(path, &len);
    /* strtok_r would merge empty lines; the empty key sits in hashes.tsv as
     * a line starting with a tab, which strtok_r on "\n" keeps intact. */
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        int n;

        if (line[0] == '#') {
            continue;
        }
        n = split_tabs(line, f, 8);
        ck_assert_msg(n == nf, "%s: line with %d fields", file, n);
        fn(f, n, arg);
        count++;
    }
    free(text);
    return count;
}

/* SplitMix64: a seeded PRNG so every run tests the same memberships. */
static uint64_t
rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A random membership: n nodes with random ids, weights up to max_w and
 * (when zones > 0) zones z0..z{zones-1} or none. */
static struct ring_members *
random_members(uint64_t *s, uint32_t n, uint32_t vnodes, uint32_t max_w, uint32_t zones)
{
    struct ring_members *m = ring_members_new();
    uint32_t             i;

    ck_assert_ptr_nonnull(m);
    m->epoch = 1;
    m->vnodes = vnodes;
    m->replicas = 1 + (uint32_t)(rnd(s) % 3);
    for (i = 0; i < n; i++) {
        char     id[32], addr[32], zone[8] = "";
        uint32_t w = 1 + (uint32_t)(rnd(s) % max_w);

        /* Ids share prefixes on purpose ("n1" vs "n12"). */
        snprintf(id, sizeof(id), "n%u", (unsigned)(rnd(s) % 100000));
        snprintf(addr, sizeof(addr), "10.0.%u.%u:11211", i / 250, i % 250 + 1);
        if (zones > 0) {
            uint32_t z = (uint32_t)(rnd(s) % (zones + 1));

            if (z < zones) {
                snprintf(zone, sizeof(zone), "z%u", z);
            }
        }
        if (ring_members_add(m, id, addr, w, zone) != RING_OK) {
            i--; /* duplicate id: draw again */
        }
    }
    return m;
}

/* The same membership with its nodes in a random order. */
static struct ring_members *
shuffled(const struct ring_members *m, uint64_t *s)
{
    struct ring_members *d = ring_members_dup(m);
    uint32_t             i;

    ck_assert_ptr_nonnull(d);
    for (i = d->n_nodes; i > 1; i--) {
        uint32_t         j = (uint32_t)(rnd(s) % i);
        struct ring_node t = d->nodes[i - 1];

        d->nodes[i - 1] = d->nodes[j];
        d->nodes[j] = t;
    }
    return d;
}

static const char *
node_id(const struct ring *r, uint32_t idx)
{
    return ring_members(r)->nodes[idx].id;
}

/* Two rings hold the same points: positions and owner ids, rank by rank. */
static void
assert_same_ring(const struct ring *a, const struct ring *b)
{
    uint32_t i, n = ring_n_points(a);

    ck_assert_uint_eq(ring_n_points(b), n);
    for (i = 0; i < n; i++) {
        uint64_t pa, pb;
        uint32_t na, nb;

        ring_point(a, i, &pa, &na, NULL);
        ring_point(b, i, &pb, &nb, NULL);
        ck_assert_msg(pa == pb && strcmp(node_id(a, na), node_id(b, nb)) == 0, "rank %u differs",
                      i);
    }
}

/* Points sharing a position must be ordered by node id, then vnode index.
 * Returns how many adjacent pairs share a position between two ids. */
static uint32_t
assert_ties_ordered(const struct ring *r)
{
    uint32_t i, n = ring_n_points(r), ties = 0;

    for (i = 1; i < n; i++) {
        uint64_t p0, p1;
        uint32_t n0, n1, v0, v1;

        ring_point(r, i - 1, &p0, &n0, &v0);
        ring_point(r, i, &p1, &n1, &v1);
        if (p0 == p1) {
            int c = strcmp(node_id(r, n0), node_id(r, n1));

            ck_assert(c < 0 || (c == 0 && v0 < v1));
            ties += c != 0;
        }
    }
    return ties;
}

/* Naive model of the contract: the first rank >= h by a linear scan. */
static uint32_t
naive_rank(const struct ring *r, uint64_t h)
{
    uint32_t i, n = ring_n_points(r);

    for (i = 0; i < n; i++) {
        uint64_t p;

        ring_point(r, i, &p, NULL, NULL);
        if (p >= h) {
            return i;
        }
    }
    return 0;
}

/* Naive two-pass zone rule from PLACEMENT.md, by node id and zone name. */
static uint32_t
naive_locate(const struct ring *r, uint64_t h, uint32_t want, uint32_t *out)
{
    const struct ring_members *m = ring_members(r);
    uint32_t                   start = naive_rank(r, h), n = ring_n_points(r), cnt = 0;
    uint32_t                   pass, s, j;

    for (pass = 1; pass <= 2; pass++) {
        for (s = 0; s < n && cnt < want; s++) {
            uint32_t nd;
            bool     skip = false;

            ring_point(r, (start + s) % n, NULL, &nd, NULL);
            for (j = 0; j < cnt && !skip; j++) {
                const char *zj = m->nodes[out[j]].zone;

                skip = out[j] == nd || (pass == 1 && m->nodes[nd].zone[0] != '\0' &&
                                        strcmp(zj, m->nodes[nd].zone) == 0);
            }
            if (!skip) {
                out[cnt++] = nd;
            }
        }
    }
    return cnt;
}

/* ---- golden vectors ---- */

static void
check_hash_line(char **f, int n, void *arg)
{
    (void)n;
    (void)arg;
    ck_assert_msg(ring_hash(f[0], strlen(f[0])) == strtoull(f[1], NULL, 10), "hash of '%s'", f[0]);
}

START_TEST(vectors_hashes)
{
    int n = for_each_vector("hashes.tsv", 2, check_hash_line, NULL);

    ck_assert_int_gt(n, 0);
}
END_TEST

static void
check_point_line(char **f, int n, void *arg)
{
    struct ring *r = vector_ring(arg, 16, f[0]);
    uint64_t     pos;
    uint32_t     node, vnode;

    (void)n;
    ring_point(r, (uint32_t)strtoul(f[1], NULL, 10), &pos, &node, &vnode);
    ck_assert_msg(pos == strtoull(f[2], NULL, 10), "%s rank %s position", f[0], f[1]);
    ck_assert_str_eq(node_id(r, node), f[3]);
    ck_assert_uint_eq(vnode, strtoul(f[4], NULL, 10));
}

START_TEST(vectors_points)
{
    struct vec_ring cache[16];
    int             n;

    memset(cache, 0, sizeof(cache));
    n = for_each_vector("points.tsv", 5, check_point_line, cache);
    ck_assert_int_gt(n, 0);
    free_vector_rings(cache, 16);
}
END_TEST

static void
check_locate_line(char **f, int n, void *arg)
{
    struct ring *r = vector_ring(arg, 16, f[0]);
    uint32_t     want = (uint32_t)strtoul(f[1], NULL, 10), out[128], got, i;
    char         list[4096] = "";

    (void)n;
    ck_assert_uint_le(want, 128);
    got = ring_locate(r, ring_hash(f[2], strlen(f[2])), want, out);
    for (i = 0; i < got; i++) {
        if (i > 0) {
            strcat(list, ",");
        }
        strcat(list, node_id(r, out[i]));
    }
    ck_assert_msg(strcmp(list, f[3]) == 0, "%s R=%s key '%s': got %s want %s", f[0], f[1], f[2],
                  list, f[3]);
    ck_assert_uint_eq(ring_primary(r, ring_hash(f[2], strlen(f[2]))), out[0]);
}

START_TEST(vectors_locate)
{
    struct vec_ring cache[16];
    int             n;

    memset(cache, 0, sizeof(cache));
    n = for_each_vector("locate.tsv", 4, check_locate_line, cache);
    ck_assert_int_gt(n, 0);
    free_vector_rings(cache, 16);
}
END_TEST

/* ---- lookup against the naive model ---- */

START_TEST(lookup_matches_naive)
{
    uint64_t s = 11;
    int      t;

    for (t = 0; t < 40; t++) {
        struct ring_members *m =
            random_members(&s, 1 + (uint32_t)(rnd(&s) % 12), 1 + (uint32_t)(rnd(&s) % 40), 3, 3);
        struct ring *r = ring_build(m);
        uint32_t     k, n;

        ck_assert_ptr_nonnull(r);
        n = ring_n_points(r);
        for (k = 0; k < 200; k++) {
            uint64_t h, p;
            uint32_t want = 1 + (uint32_t)(rnd(&s) % (m->n_nodes + 1));
            uint32_t a[64], b[64], na, nb;

            /* Random hashes, exact point positions and their neighbours,
             * and the two ends of the circle. */
            switch (k % 5) {
            case 0:
                h = rnd(&s);
                break;
            case 1:
                ring_point(r, (uint32_t)(rnd(&s) % n), &h, NULL, NULL);
                break;
            case 2:
                ring_point(r, (uint32_t)(rnd(&s) % n), &p, NULL, NULL);
                h = p + 1;
                break;
            case 3:
                h = 0;
                break;
            default:
                h = UINT64_MAX;
                break;
            }
            ck_assert_uint_eq(ring_point_rank(r, h), naive_rank(r, h));
            na = ring_locate(r, h, want, a);
            nb = naive_locate(r, h, want, b);
            ck_assert_uint_eq(na, nb);
            ck_assert_uint_eq(na, want < m->n_nodes ? want : m->n_nodes);
            ck_assert_mem_eq(a, b, na * sizeof(a[0]));
        }
        ring_free(r);
        ring_members_free(m);
    }
}
END_TEST

/* ---- properties on random memberships ---- */

START_TEST(prop_order_independent)
{
    uint64_t s = 1;
    int      t;

    for (t = 0; t < TRIALS; t++) {
        struct ring_members *m =
            random_members(&s, 1 + (uint32_t)(rnd(&s) % 20), 1 + (uint32_t)(rnd(&s) % 50), 4, 0);
        struct ring_members *p = shuffled(m, &s);
        struct ring         *a = ring_build(m), *b = ring_build(p);

        ck_assert_ptr_nonnull(a);
        ck_assert_ptr_nonnull(b);
        assert_same_ring(a, b);
        ring_free(a);
        ring_free(b);
        ring_members_free(m);
        ring_members_free(p);
    }
}
END_TEST

START_TEST(prop_remove_equals_build_without)
{
    uint64_t s = 2;
    int      t;

    for (t = 0; t < TRIALS; t++) {
        struct ring_members *m =
            random_members(&s, 2 + (uint32_t)(rnd(&s) % 20), 1 + (uint32_t)(rnd(&s) % 50), 4, 3);
        struct ring_members *removed = ring_members_dup(m), *without;
        uint32_t             victim = (uint32_t)(rnd(&s) % m->n_nodes), i;
        struct ring         *a, *b;

        ck_assert_ptr_nonnull(removed);
        ck_assert_int_eq(ring_members_remove(removed, m->nodes[victim].id), RING_OK);
        /* Build the other membership from scratch, in another order. */
        without = ring_members_new();
        without->epoch = m->epoch;
        without->vnodes = m->vnodes;
        without->replicas = m->replicas;
        for (i = m->n_nodes; i-- > 0;) {
            if (i != victim) {
                ck_assert_int_eq(ring_members_add(without, m->nodes[i].id, m->nodes[i].addr,
                                                  m->nodes[i].weight, m->nodes[i].zone),
                                 RING_OK);
            }
        }
        a = ring_build(removed);
        b = ring_build(without);
        assert_same_ring(a, b);
        ring_free(a);
        ring_free(b);
        ring_members_free(m);
        ring_members_free(removed);
        ring_members_free(without);
    }
}
END_TEST

START_TEST(prop_remove_absent_changes_nothing)
{
    uint64_t s = 3;
    int      t;

    for (t = 0; t < TRIALS; t++) {
        struct ring_members *m =
            random_members(&s, 1 + (uint32_t)(rnd(&s) % 20), 1 + (uint32_t)(rnd(&s) % 50), 4, 0);
        struct ring_members *d = ring_members_dup(m);
        struct ring         *a, *b;
        struct ring_diff    *diff;

        /* Random ids are "n<digits>": "absent-node" is never one. */
        ck_assert_int_eq(ring_members_remove(d, "absent-node"), RING_ENOENT);
        ck_assert_uint_eq(d->n_nodes, m->n_nodes);
        a = ring_build(m);
        b = ring_build(d);
        assert_same_ring(a, b);
        diff = ring_diff(a, b);
        ck_assert_ptr_nonnull(diff);
        ck_assert_uint_eq(diff->n_arcs, 0);
        ck_assert(diff->primary_moved == 0.0 && diff->list_moved == 0.0);
        ring_diff_free(diff);
        ring_free(a);
        ring_free(b);
        ring_members_free(m);
        ring_members_free(d);
    }
}
END_TEST

/* XXH3 truncated to 8 bits: 256 positions, collisions everywhere. */
static uint64_t
hash8(const void *data, size_t len)
{
    return ring_hash(data, len) & 0xff;
}

START_TEST(prop_collisions_lowest_id_owns)
{
    uint64_t s = 4;
    int      t;

    for (t = 0; t < TRIALS; t++) {
        /* At least 120 points on 256 positions: positions are shared. */
        struct ring_members *m =
            random_members(&s, 3 + (uint32_t)(rnd(&s) % 8), 40 + (uint32_t)(rnd(&s) % 40), 2, 0);
        struct ring_members *p = shuffled(m, &s);
        struct ring         *r = ring_build_with_hash(m, hash8);
        struct ring         *rp = ring_build_with_hash(p, hash8);
        uint32_t             i, n = ring_n_points(r);

        ck_assert_ptr_nonnull(r);
        assert_same_ring(r, rp);
        ck_assert_uint_gt(assert_ties_ordered(r), 0);
        /* The lowest claimant of each position owns it; when it leaves, the
         * next claimant (in id order) takes over. */
        for (i = 0; i < 256; i += 7) {
            uint32_t             rank = ring_point_rank(r, i), owner = ring_primary(r, i);
            uint64_t             pos;
            uint32_t             nd, j;
            struct ring_members *less = ring_members_dup(m);
            struct ring         *rl;
            const char          *next = NULL;

            ring_point(r, rank, &pos, &nd, NULL);
            ck_assert_uint_eq(nd, owner);
            if (rank > 0) {
                uint64_t before;

                /* The owner is the first of the points at its position. */
                ring_point(r, rank - 1, &before, NULL, NULL);
                ck_assert(before != pos);
            }
            for (j = rank + 1; j < n; j++) {
                uint64_t pj;
                uint32_t nj;

                ring_point(r, j, &pj, &nj, NULL);
                if (pj != pos) {
                    break;
                }
                if (nj != owner && next == NULL) {
                    next = node_id(r, nj);
                }
            }
            ck_assert_int_eq(ring_members_remove(less, node_id(r, owner)), RING_OK);
            if (less->n_nodes > 0 && next != NULL) {
                rl = ring_build_with_hash(less, hash8);
                ck_assert_str_eq(node_id(rl, ring_primary(rl, i)), next);
                ring_free(rl);
            }
            ring_members_free(less);
        }
        ring_free(r);
        ring_free(rp);
        ring_members_free(m);
        ring_members_free(p);
    }
}
END_TEST

START_TEST(prop_join_moves_to_joiner_only)
{
    uint64_t s = 5;
    double   sum = 0;
    uint32_t vn = 100;
    int      t;

    for (t = 0; t < TRIALS; t++) {
        uint32_t             n = 2 + (uint32_t)(rnd(&s) % 20), i, j;
        struct ring_members *m = random_members(&s, n, vn, 1, 0);
        struct ring_members *j1 = ring_members_dup(m);
        struct ring         *a, *b;
        struct ring_diff    *d;
        double               share[64], ratio;
        int                  joiner;

        ck_assert_int_eq(ring_members_add(j1, "joiner", "10.9.9.9:1", 1, NULL), RING_OK);
        a = ring_build(m);
        b = ring_build(j1);
        d = ring_diff(a, b);
        ck_assert_ptr_nonnull(d);
        ring_shares(b, share);
        joiner = ring_members_find(j1, "joiner");
        /* Keys move only to the joiner, and exactly its share moves. */
        ck_assert(fabs(d->primary_moved - share[joiner]) < 1e-12);
        for (i = 0; i < d->n_arcs; i++) {
            if (d->arcs[i].new_nodes[0] != (uint32_t)joiner) {
                /* This arc changed replicas, not its primary. */
                ck_assert_str_eq(m->nodes[d->arcs[i].old_nodes[0]].id,
                                 j1->nodes[d->arcs[i].new_nodes[0]].id);
            }
        }
        /* Random keys: the primary is the old one or the joiner. */
        for (j = 0; j < 200; j++) {
            uint64_t h = rnd(&s);
            uint32_t pn = ring_primary(b, h);

            ck_assert(pn == (uint32_t)joiner ||
                      strcmp(j1->nodes[pn].id, m->nodes[ring_primary(a, h)].id) == 0);
        }
        /* One joiner's share is a sum of V arcs: relative spread about
         * 1/sqrt(V); 6 sigma for a single join. */
        ratio = d->primary_moved * (n + 1);
        ck_assert_msg(fabs(ratio - 1.0) < 6.0 / sqrt(vn), "ratio %f", ratio);
        sum += ratio;
        ring_diff_free(d);
        ring_free(a);
        ring_free(b);
        ring_members_free(m);
        ring_members_free(j1);
    }
    /* The mean over TRIALS joins: 5 sigma of the mean. */
    ck_assert_msg(fabs(sum / TRIALS - 1.0) < 5.0 / sqrt((double)vn * TRIALS), "mean ratio %f",
                  sum / TRIALS);
}
END_TEST

START_TEST(prop_leave_moves_leavers_keys_only)
{
    uint64_t s = 6;
    int      t;

    for (t = 0; t < TRIALS; t++) {
        struct ring_members *m =
            random_members(&s, 2 + (uint32_t)(rnd(&s) % 20), 1 + (uint32_t)(rnd(&s) % 100), 3, 0);
        struct ring_members *l = ring_members_dup(m);
        uint32_t             victim = (uint32_t)(rnd(&s) % m->n_nodes), i;
        struct ring         *a, *b;
        struct ring_diff    *d;
        double               share[64];

        ck_assert_int_eq(ring_members_remove(l, m->nodes[victim].id), RING_OK);
        a = ring_build(m);
        b = ring_build(l);
        ring_shares(a, share);
        d = ring_diff(a, b);
        ck_assert_ptr_nonnull(d);
        ck_assert(fabs(d->primary_moved - share[victim]) < 1e-12);
        for (i = 0; i < d->n_arcs; i++) {
            if (d->arcs[i].old_nodes[0] != victim) {
                ck_assert_str_eq(m->nodes[d->arcs[i].old_nodes[0]].id,
                                 l->nodes[d->arcs[i].new_nodes[0]].id);
            }
        }
        ring_diff_free(d);
        ring_free(a);
        ring_free(b);
        ring_members_free(m);
        ring_members_free(l);
    }
}
END_TEST

START_TEST(prop_shares_follow_weights)
{
    uint64_t s = 7;
    int      t;

    for (t = 0; t < TRIALS; t++) {
        uint32_t             vn = 200 + (uint32_t)(rnd(&s) % 200), i, wsum = 0;
        struct ring_members *m = random_members(&s, 2 + (uint32_t)(rnd(&s) % 10), vn, 5, 0);
        struct ring         *r = ring_build(m);
        double               share[64], total = 0;

        ring_shares(r, share);
        for (i = 0; i < m->n_nodes; i++) {
            wsum += m->nodes[i].weight;
        }
        for (i = 0; i < m->n_nodes; i++) {
            double expect = (double)m->nodes[i].weight / wsum;

            total += share[i];
            /* Relative spread 1/sqrt(weight*V); 6 sigma. */
            ck_assert_msg(fabs(share[i] / expect - 1.0) <
                              6.0 / sqrt((double)m->nodes[i].weight * vn),
                          "node %u share %f expect %f", i, share[i], expect);
        }
        ck_assert(fabs(total - 1.0) < 1e-9);
        ring_free(r);
        ring_members_free(m);
    }
}
END_TEST

START_TEST(prop_zones_spread)
{
    uint64_t s = 8;
    int      t;

    for (t = 0; t < TRIALS; t++) {
        uint32_t             zones = 1 + (uint32_t)(rnd(&s) % 5);
        struct ring_members *m = random_members(&s, 2 + (uint32_t)(rnd(&s) % 15),
                                                1 + (uint32_t)(rnd(&s) % 40), 2, zones);
        struct ring         *r = ring_build(m);
        uint32_t             k, nz = 0, i, j;
        char                 seen[64][RING_ZONE_MAX + 1];

        /* Count the distinct zones (an unzoned node is a zone alone). */
        for (i = 0; i < m->n_nodes; i++) {
            for (j = 0; j < i; j++) {
                if (m->nodes[i].zone[0] != '\0' &&
                    strcmp(m->nodes[i].zone, m->nodes[j].zone) == 0) {
                    break;
                }
            }
            nz += j == i;
        }
        for (k = 0; k < 50; k++) {
            uint32_t want = 1 + (uint32_t)(rnd(&s) % m->n_nodes), out[64], got;
            uint32_t distinct = 0;

            got = ring_locate(r, rnd(&s), want, out);
            ck_assert_uint_eq(got, want);
            for (i = 0; i < got; i++) {
                for (j = 0; j < i; j++) {
                    ck_assert_uint_ne(out[i], out[j]);
                }
            }
            /* The first min(R, zones) replicas are in distinct zones. */
            for (i = 0; i < got && i < nz; i++) {
                const char *z = m->nodes[out[i]].zone;

                for (j = 0; j < distinct; j++) {
                    ck_assert(z[0] == '\0' || strcmp(seen[j], z) != 0);
                }
                snprintf(seen[distinct++], sizeof(seen[0]), "%s", z);
            }
        }
        ring_free(r);
        ring_members_free(m);
    }
}
END_TEST

START_TEST(diff_arcs_match_lists)
{
    uint64_t s = 9;
    int      t;

    for (t = 0; t < 60; t++) {
        struct ring_members *m =
            random_members(&s, 3 + (uint32_t)(rnd(&s) % 10), 1 + (uint32_t)(rnd(&s) % 30), 2, 2);
        struct ring_members *m2 = ring_members_dup(m);
        struct ring         *a, *b;
        struct ring_diff    *d;
        uint32_t             k;

        /* One node leaves, another joins. */
        ck_assert_int_eq(ring_members_remove(m2, m->nodes[0].id), RING_OK);
        ck_assert_int_eq(ring_members_add(m2, "x-new", "10.9.9.9:1", 2, "z0"), RING_OK);
        a = ring_build(m);
        b = ring_build(m2);
        d = ring_diff(a, b);
        ck_assert_ptr_nonnull(d);
        ck_assert(d->list_moved >= d->primary_moved);
        for (k = 0; k < 300; k++) {
            uint64_t h = rnd(&s);
            uint32_t la[8], lb[8], na, nb, i;
            bool     same, inside = false;

            na = ring_locate(a, h, m->replicas, la);
            nb = ring_locate(b, h, m2->replicas, lb);
            same = na == nb;
            for (i = 0; same && i < na; i++) {
                same = strcmp(m->nodes[la[i]].id, m2->nodes[lb[i]].id) == 0;
            }
            for (i = 0; i < d->n_arcs && !inside; i++) {
                const struct ring_arc *arc = &d->arcs[i];

                inside = arc->lo == arc->hi || (arc->lo < arc->hi ? (h > arc->lo && h <= arc->hi)
                                                                  : (h > arc->lo || h <= arc->hi));
                if (inside) {
                    ck_assert_uint_eq(arc->n_old, na);
                    ck_assert_mem_eq(arc->old_nodes, la, na * sizeof(la[0]));
                    ck_assert_mem_eq(arc->new_nodes, lb, nb * sizeof(lb[0]));
                }
            }
            ck_assert_msg(inside == !same, "key hash %llu", (unsigned long long)h);
        }
        ring_diff_free(d);
        ring_free(a);
        ring_free(b);
        ring_members_free(m);
        ring_members_free(m2);
    }
}
END_TEST

/* ring_owned_arcs's arcs, as reported. */
struct owned {
    uint32_t n, cap;
    uint64_t (*arc)[2]; /* lo, hi */
};

static void
owned_add(uint64_t lo, uint64_t hi, void *arg)
{
    struct owned *o = arg;

    if (o->n == o->cap) {
        o->cap = o->cap ? o->cap * 2 : 64;
        o->arc = realloc(o->arc, o->cap * sizeof(*o->arc));
        ck_assert_ptr_nonnull(o->arc);
    }
    o->arc[o->n][0] = lo;
    o->arc[o->n][1] = hi;
    o->n++;
}

/* Is h in the arc (lo, hi] clockwise (lo == hi: the whole circle)? */
static bool
arc_has(uint64_t lo, uint64_t hi, uint64_t h)
{
    return lo == hi || (lo < hi ? h > lo && h <= hi : h > lo || h <= hi);
}

/* Is h in one of the arcs? They come in ring order: at most the first
 * wraps, the others ascend, so a binary search on hi finds the one that
 * may hold h. */
static bool
owned_has(const struct owned *o, uint64_t h)
{
    uint32_t lo = 0, hi = o->n;

    if (o->n == 0) {
        return false;
    }
    if (arc_has(o->arc[0][0], o->arc[0][1], h)) {
        return true;
    }
    lo = 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (o->arc[mid][1] < h) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo < o->n && arc_has(o->arc[lo][0], o->arc[lo][1], h);
}

/* Brute force: is node among the first want owners of h? */
static bool
locate_has(const struct ring *r, uint64_t h, uint32_t want, uint32_t node)
{
    uint32_t out[64], n = ring_locate(r, h, want, out), i;

    for (i = 0; i < n; i++) {
        if (out[i] == node) {
            return true;
        }
    }
    return false;
}

/* Number of distinct point positions of r: its arcs. */
static uint32_t
distinct_positions(const struct ring *r)
{
    uint32_t i, n = ring_n_points(r), d = 0;
    uint64_t p, prev = 0;

    for (i = 0; i < n; i++) {
        ring_point(r, i, &p, NULL, NULL);
        d += i == 0 || p != prev;
        prev = p;
    }
    return d;
}

/*
 * Check ring_owned_arcs on r at R = want for every node against ring_locate:
 * the arcs are in ring order and disjoint; both ends of each, the key
 * hashes just outside and `keys` random ones agree with ring_locate. Every
 * arc is in the lists of min(want, n_nodes) nodes, so the nodes' arcs number
 * that many per distinct position and cover the circle that many times.
 */
static void
check_owned(const struct ring *r, uint32_t want, uint32_t keys, uint64_t *s)
{
    const struct ring_members *m = ring_members(r);
    uint32_t                   node, k, total = 0, owners = want < m->n_nodes ? want : m->n_nodes;
    long double                cover = 0;

    for (node = 0; node < m->n_nodes; node++) {
        struct owned o = { 0 };
        uint32_t     got = ring_owned_arcs(r, node, want, owned_add, &o);

        ck_assert_uint_eq(got, o.n);
        total += got;
        for (k = 0; k < o.n; k++) {
            uint64_t lo = o.arc[k][0], hi = o.arc[k][1];

            ck_assert(k == 0 || (lo < hi && o.arc[k - 1][1] <= lo));
            ck_assert(lo != hi || o.n == 1);
            ck_assert_msg(locate_has(r, hi, want, node), "node %u arc %u: hi", node, k);
            ck_assert_msg(locate_has(r, lo + 1, want, node), "node %u arc %u: lo+1", node, k);
            cover += lo == hi ? 18446744073709551616.0L : (long double)(uint64_t)(hi - lo);
            /* Just past either end: another arc of the node, or not its. */
            ck_assert_uint_eq(locate_has(r, hi + 1, want, node), owned_has(&o, hi + 1));
            ck_assert_uint_eq(locate_has(r, lo, want, node), owned_has(&o, lo));
        }
        for (k = 0; k < keys; k++) {
            uint64_t h = rnd(s);

            ck_assert_msg(locate_has(r, h, want, node) == owned_has(&o, h),
                          "node %u R %u key hash %llu", node, want, (unsigned long long)h);
        }
        free(o.arc);
    }
    ck_assert_uint_eq(total, distinct_positions(r) * owners);
    cover /= 18446744073709551616.0L;
    ck_assert(fabsl(cover - owners) < 1e-9L);
}

START_TEST(owned_arcs_match_locate)
{
    uint64_t s = 14;
    uint32_t want, t, none = 0;

    for (t = 0; t < 30; t++) {
        struct ring_members *m =
            random_members(&s, 1 + (uint32_t)(rnd(&s) % 9), 1 + (uint32_t)(rnd(&s) % 40), 3, t % 3);
        struct ring *r = ring_build(m);
        /* Shared positions: 8-bit point hashes. */
        struct ring *r8 = ring_build_with_hash(m, hash8);

        ck_assert_ptr_nonnull(r);
        ck_assert_ptr_nonnull(r8);
        for (want = 1; want <= 3; want++) {
            check_owned(r, want, 2000, &s);
            check_owned(r8, want, 500, &s);
        }
        /* Out of range, or R = 0: nothing. */
        none += ring_owned_arcs(r, m->n_nodes, 1, owned_add, NULL);
        none += ring_owned_arcs(r, 0, 0, owned_add, NULL);
        ring_free(r);
        ring_free(r8);
        ring_members_free(m);
    }
    ck_assert_uint_eq(none, 0);
}
END_TEST

/* Every point hashes to one position. */
static uint64_t
hash_const(const void *data, size_t len)
{
    (void)data;
    (void)len;
    return 42;
}

START_TEST(owned_arcs_whole_circle)
{
    uint64_t             s = 15;
    struct ring_members *m = random_members(&s, 4, 3, 2, 0);
    struct ring         *r = ring_build_with_hash(m, hash_const);
    struct ring         *one;
    uint32_t             want, node, owners;
    struct owned         o = { 0 };

    ck_assert_ptr_nonnull(r);
    for (want = 1; want <= 4; want++) {
        owners = 0;
        for (node = 0; node < m->n_nodes; node++) {
            o.n = 0;
            owners += ring_owned_arcs(r, node, want, owned_add, &o);
            ck_assert_uint_le(o.n, 1);
            if (o.n == 1) {
                ck_assert(o.arc[0][0] == 42 && o.arc[0][1] == 42);
                ck_assert(locate_has(r, 7, want, node) && locate_has(r, UINT64_MAX, want, node));
            } else {
                ck_assert(!locate_has(r, 7, want, node));
            }
        }
        ck_assert_uint_eq(owners, want);
        check_owned(r, want, 100, &s);
    }
    /* One node of one point (vnodes 1): the whole circle too. */
    while (m->n_nodes > 1) {
        ck_assert_int_eq(ring_members_remove(m, m->nodes[0].id), RING_OK);
    }
    m->nodes[0].weight = 1;
    m->vnodes = 1;
    one = ring_build(m);
    ck_assert_ptr_nonnull(one);
    o.n = 0;
    ck_assert_uint_eq(ring_owned_arcs(one, 0, 3, owned_add, &o), 1);
    ck_assert(o.arc[0][0] == o.arc[0][1]);
    free(o.arc);
    ring_free(one);
    ring_free(r);
    ring_members_free(m);
}
END_TEST

START_TEST(build_rejects_invalid)
{
    struct ring_members *m = ring_members_new();

    /* No nodes, then a node with weight 0 forced in. */
    ck_assert_ptr_null(ring_build(m));
    ck_assert_int_eq(ring_members_add(m, "a", "h:1", 1, NULL), RING_OK);
    m->nodes[0].weight = 0;
    ck_assert_ptr_null(ring_build(m));
    /* More points than RING_POINTS_MAX. */
    m->nodes[0].weight = 1000;
    m->vnodes = 65535 + 1;
    ck_assert_ptr_null(ring_build(m));
    m->vnodes = 65535;
    ck_assert_int_eq(ring_members_add(m, "b", "h:2", 1000, NULL), RING_OK);
    ck_assert_ptr_null(ring_build(m));
    ring_members_free(m);
}
END_TEST

/* The build sorts ids on 16-byte prefixes and checks duplicates itself:
 * ids sharing long prefixes tie in id order, a duplicate is refused, and a
 * ring big enough for the widest bucket sort and a huge-page block for its
 * arrays (1.6M points) is order independent. */
START_TEST(build_long_ids_and_large_ring)
{
    static const char *ids[] = {
        "aaaaaaaaaaaaaaa",
        "aaaaaaaaaaaaaaaa",
        "aaaaaaaaaaaaaaaa0",
        "aaaaaaaaaaaaaaaa00",
        "aaaaaaaaaaaaaaab",
        "aaaaaaaaaaaaaaaaz",
        "aaaaaaaab",
        "aaaaaaaa",
        "b",
        "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
        "ccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc",
    };
    struct ring_members *m = ring_members_new(), *p, *big, *bigp;
    struct ring         *r, *rp;
    uint64_t             s = 12, prev = 0;
    uint32_t             i, bad;

    ck_assert_ptr_nonnull(m);
    m->epoch = 1;
    m->vnodes = 40;
    for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
        char addr[32];

        snprintf(addr, sizeof(addr), "10.0.0.%u:1", i + 1);
        ck_assert_int_eq(ring_members_add(m, ids[i], addr, 1, NULL), RING_OK);
    }
    p = shuffled(m, &s);
    r = ring_build_with_hash(m, hash8);
    rp = ring_build_with_hash(p, hash8);
    ck_assert_ptr_nonnull(r);
    assert_same_ring(r, rp);
    ck_assert_uint_gt(assert_ties_ordered(r), 0);
    ring_free(r);
    ring_free(rp);
    /* Two nodes with one id (forced past ring_members_add). */
    memcpy(p->nodes[3].id, p->nodes[5].id, sizeof(p->nodes[3].id));
    ck_assert_ptr_null(ring_build(p));
    ring_members_free(p);
    ring_members_free(m);

    /* 1.6M points: positions ascend, lookups land on them, any order. */
    big = random_members(&s, 1000, 1600, 1, 0);
    bigp = shuffled(big, &s);
    r = ring_build(big);
    rp = ring_build(bigp);
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_nonnull(rp);
    ck_assert_uint_eq(ring_n_points(r), 1600000);
    ck_assert_uint_eq(ring_n_points(rp), 1600000);
    /* One assertion at the end: Check reports every passing one. */
    for (i = 0, bad = 0; i < ring_n_points(r); i++) {
        uint64_t pi, pj;
        uint32_t ni, nj;

        ring_point(r, i, &pi, &ni, NULL);
        ring_point(rp, i, &pj, &nj, NULL);
        bad += pi != pj || strcmp(node_id(r, ni), node_id(rp, nj)) != 0;
        bad += i > 0 && pi < prev;
        bad += (i == 0 || pi != prev) && ring_point_rank(r, pi) != i;
        prev = pi;
    }
    ck_assert_uint_eq(bad, 0);
    ring_free(r);
    ring_free(rp);
    ring_members_free(big);
    ring_members_free(bigp);
}
END_TEST

START_TEST(ring_bytes_per_point)
{
    uint64_t             s = 10;
    struct ring_members *m = random_members(&s, 1000, 160, 1, 0);
    struct ring         *r = ring_build(m);

    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(ring_n_points(r), 160000);
    ck_assert_uint_le(ring_bytes(r), 16u * 160000);
    ring_free(r);
    ring_members_free(m);
}
END_TEST

Suite *
ring_suite(void)
{
    Suite *s = suite_create("ring");
    TCase *tc;

    tc = tcase_create("vectors");
    tcase_add_test(tc, vectors_hashes);
    tcase_add_test(tc, vectors_points);
    tcase_add_test(tc, vectors_locate);
    suite_add_tcase(s, tc);

    tc = tcase_create("properties");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, lookup_matches_naive);
    tcase_add_test(tc, prop_order_independent);
    tcase_add_test(tc, prop_remove_equals_build_without);
    tcase_add_test(tc, prop_remove_absent_changes_nothing);
    tcase_add_test(tc, prop_collisions_lowest_id_owns);
    tcase_add_test(tc, prop_join_moves_to_joiner_only);
    tcase_add_test(tc, prop_leave_moves_leavers_keys_only);
    tcase_add_test(tc, prop_shares_follow_weights);
    tcase_add_test(tc, prop_zones_spread);
    tcase_add_test(tc, diff_arcs_match_lists);
    tcase_add_test(tc, owned_arcs_match_locate);
    tcase_add_test(tc, owned_arcs_whole_circle);
    tcase_add_test(tc, build_rejects_invalid);
    tcase_add_test(tc, ring_bytes_per_point);
    suite_add_tcase(s, tc);

    tc = tcase_create("build");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, build_long_ids_and_large_ring);
    suite_add_tcase(s, tc);
    return s;
}
