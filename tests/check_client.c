/*
 * client_suite: libringcache without real nodes. Key and value checks, the
 * reply parser as a table (bytes -> parsed unit or error), the cluster
 * replies (MOVED, TRYAGAIN, CONFIG, EPOCH), error mapping, multi-get
 * grouping against ring_locate, handle creation errors, ringcache_strerror
 * for every code, and the epoch rules against a scripted fake node on
 * loopback (adoption of higher epochs only, the hop cap, TRYAGAIN budget,
 * epoch declaration).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "client/mcproto.h"
#include "client/ringcache.h"
#include "client/route.h"
#include "ring/ring.h"
#include "tests/suites.h"

static const char three_members[] =
    "epoch 1\nvnodes 160\nreplicas 1\n"
    "node cache-a 127.0.0.1:11311\n"
    "node cache-b 127.0.0.1:11312\n"
    "node cache-c 127.0.0.1:11313\n";

/*
 * Keys
 */

START_TEST(test_key_check)
{
    static const struct {
        const char *key;
        size_t      len;
        int         want;
    } cases[] = {
        { "a", 1, 0 },
        { "user:42", 7, 0 },
        { "caf\xc3\xa9", 5, 0 },          /* UTF-8 bytes are fine */
        { "", 0, RINGCACHE_EKEY },
        { "a b", 3, RINGCACHE_EKEY },
        { "a\tb", 3, RINGCACHE_EKEY },
        { "a\rb", 3, RINGCACHE_EKEY },
        { "a\nb", 3, RINGCACHE_EKEY },
        { "a\0b", 3, RINGCACHE_EKEY },
        { "a\x7f", 2, RINGCACHE_EKEY },
        { "\x01", 1, RINGCACHE_EKEY },
    };
    char longkey[300];
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_msg(mcp_check_key(cases[i].key, cases[i].len) == cases[i].want,
                      "case %zu", i);
    }
    memset(longkey, 'k', sizeof(longkey));
    ck_assert_int_eq(mcp_check_key(longkey, 250), 0);
    ck_assert_int_eq(mcp_check_key(longkey, 251), RINGCACHE_EKEY);
    ck_assert_int_eq(mcp_check_key(NULL, 3), RINGCACHE_EKEY);
}
END_TEST

/*
 * Reply parser table
 */

struct parse_case {
    const char   *bytes;
    long          want;       /* bytes consumed, 0 = need more, < 0 error */
    enum mcp_kind kind;
    const char   *key;        /* VALUE key / STAT name */
    const char   *data;       /* VALUE data / STAT value / error message */
    uint32_t      flags;
    int           has_cas;
    uint64_t      cas;
    uint64_t      number;
};

static const struct parse_case parse_cases[] = {
    { "END\r\n", 5, MCP_END, NULL, NULL, 0, 0, 0, 0 },
    { "STORED\r\n", 8, MCP_STORED, NULL, NULL, 0, 0, 0, 0 },
    { "NOT_STORED\r\n", 12, MCP_NOT_STORED, NULL, NULL, 0, 0, 0, 0 },
    { "EXISTS\r\n", 8, MCP_EXISTS, NULL, NULL, 0, 0, 0, 0 },
    { "NOT_FOUND\r\n", 11, MCP_NOT_FOUND, NULL, NULL, 0, 0, 0, 0 },
    { "DELETED\r\n", 9, MCP_DELETED, NULL, NULL, 0, 0, 0, 0 },
    { "TOUCHED\r\n", 9, MCP_TOUCHED, NULL, NULL, 0, 0, 0, 0 },
    { "OK\r\n", 4, MCP_OK, NULL, NULL, 0, 0, 0, 0 },
    { "42\r\n", 4, MCP_NUMBER, NULL, NULL, 0, 0, 0, 42 },
    { "18446744073709551615\r\n", 22, MCP_NUMBER, NULL, NULL, 0, 0, 0, UINT64_MAX },
    { "VALUE k 5 3\r\nabc\r\n", 18, MCP_VALUE, "k", "abc", 5, 0, 0, 0 },
    { "VALUE k 0 0\r\n\r\n", 15, MCP_VALUE, "k", "", 0, 0, 0, 0 },
    { "VALUE key 4294967295 2 77\r\nhi\r\nEND\r\n", 31, MCP_VALUE, "key", "hi", UINT32_MAX, 1, 77, 0 },
    { "VALUE k 0 4\r\na\r\nb\r\n", 19, MCP_VALUE, "k", "a\r\nb", 0, 0, 0, 0 },
    { "STAT pid 123\r\n", 14, MCP_STAT, "pid", "123", 0, 0, 0, 0 },
    { "STAT version 1.6.18 x\r\n", 23, MCP_STAT, "version", "1.6.18 x", 0, 0, 0, 0 },
    { "ERROR\r\n", 7, MCP_ERROR, NULL, "", 0, 0, 0, 0 },
    { "CLIENT_ERROR bad data chunk\r\n", 29, MCP_CLIENT_ERROR, NULL, "bad data chunk", 0, 0, 0, 0 },
    { "SERVER_ERROR out of memory\r\n", 28, MCP_SERVER_ERROR, NULL, "out of memory", 0, 0, 0, 0 },
    /* incomplete: more bytes needed */
    { "", 0, 0, NULL, NULL, 0, 0, 0, 0 },
    { "EN", 0, 0, NULL, NULL, 0, 0, 0, 0 },
    { "END\r", 0, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k 0 3\r\nab", 0, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k 0 3\r\nabc\r", 0, 0, NULL, NULL, 0, 0, 0, 0 },
    /* garbage */
    { "END\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "end\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "ENDX\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "STORED \r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "HTTP/1.1 200 OK\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "12a\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "18446744073709551616\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k 0 3\r\nabcXY", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k 0\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k 0 1 2 3\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k  0 1\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k -1 1\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k 4294967296 1\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k 0 x\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k 0 1 c\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "VALUE k 0 2000000\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },  /* over max_value */
    { "VALUE k\x01 0 1\r\nx\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "STAT\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "STAT x\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "ERRORS\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "EN\rD\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    /* the cluster extensions (docs/cluster.md) */
    { "SERVER_ERROR MOVED 7 127.0.0.1:11312\r\n", 38, MCP_MOVED, "127.0.0.1:11312", NULL, 0, 0, 0, 0 },
    { "SERVER_ERROR TRYAGAIN 7\r\n", 25, MCP_TRYAGAIN, NULL, NULL, 0, 0, 0, 0 },
    { "SERVER_ERROR MOVED 7\r\n", 22, MCP_SERVER_ERROR, NULL, "MOVED 7", 0, 0, 0, 0 },
    { "SERVER_ERROR MOVED x 127.0.0.1:1\r\n", 34, MCP_SERVER_ERROR, NULL, NULL, 0, 0, 0, 0 },
    { "SERVER_ERROR TRYAGAIN 7 8\r\n", 27, MCP_SERVER_ERROR, NULL, NULL, 0, 0, 0, 0 },
    { "CONFIG 3 4\r\nabcd\r\n", 18, MCP_CONFIG, NULL, "abcd", 0, 0, 0, 0 },
    { "CONFIG 0 0\r\n\r\n", 14, MCP_CONFIG, NULL, "", 0, 0, 0, 0 },
    { "CONFIG 3 4\r\nab", 0, 0, NULL, NULL, 0, 0, 0, 0 },
    { "CONFIG 3 4\r\nabcdXY", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "CONFIG 3\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "CONFIG 3 2000000\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "EPOCH 3 4\r\n", 11, MCP_EPOCH, NULL, NULL, 0, 0, 0, 0 },
    { "EPOCH 3\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "EPOCH 3 x\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
};

START_TEST(test_parse_table)
{
    const struct parse_case *pc = &parse_cases[_i];
    struct mcp_reply r;
    size_t len = strlen(pc->bytes), need = 0;
    char *buf;
    long got;

    /* A private copy so a read past the end shows up under ASan. */
    buf = malloc(len + 1);
    memcpy(buf, pc->bytes, len);
    got = mcp_parse(buf, len, 1048576, &r, &need);
    ck_assert_msg(got == pc->want, "case %d \"%s\": got %ld want %ld", _i,
                  pc->bytes, got, pc->want);
    if (got == 0) {
        ck_assert_msg(need > len, "case %d: need %zu <= len %zu", _i, need, len);
    }
    if (got > 0) {
        ck_assert_int_eq(r.kind, pc->kind);
        if (pc->key != NULL) {
            ck_assert_uint_eq(r.key_len, strlen(pc->key));
            ck_assert(memcmp(r.key, pc->key, r.key_len) == 0);
        }
        if (pc->data != NULL) {
            ck_assert_uint_eq(r.data_len, strlen(pc->data));
            ck_assert(memcmp(r.data, pc->data, r.data_len) == 0);
        }
        ck_assert_uint_eq(r.flags, pc->flags);
        ck_assert_int_eq(r.has_cas, pc->has_cas);
        ck_assert(r.cas == pc->cas);
        ck_assert(r.number == pc->number);
    }
    free(buf);
}
END_TEST

START_TEST(test_parse_long_line)
{
    char buf[MCP_LINE_MAX + 10];
    struct mcp_reply r;
    size_t need;

    /* A reply line that never ends is garbage, not a reason to buffer
     * forever. */
    memset(buf, 'A', sizeof(buf));
    ck_assert_int_eq(mcp_parse(buf, MCP_LINE_MAX - 1, 1048576, &r, &need), 0);
    ck_assert_int_eq(mcp_parse(buf, sizeof(buf), 1048576, &r, &need), RINGCACHE_EPROTO);
}
END_TEST

START_TEST(test_parse_stream)
{
    /* A multi-get reply consumed unit by unit, fed one byte at a time. */
    static const char stream[] =
        "VALUE a 1 1\r\nx\r\nVALUE bb 2 3 9\r\nyyy\r\nEND\r\n";
    static const enum mcp_kind kinds[] = { MCP_VALUE, MCP_VALUE, MCP_END };
    size_t have, off = 0, k = 0, need;
    struct mcp_reply r;
    long got;

    for (have = 0; have <= sizeof(stream) - 1; have++) {
        while (off < have) {
            got = mcp_parse(stream + off, have - off, 100, &r, &need);
            ck_assert(got >= 0);
            if (got == 0) {
                break;
            }
            ck_assert_uint_lt(k, 3);
            ck_assert_int_eq(r.kind, kinds[k]);
            k++;
            off += (size_t)got;
        }
    }
    ck_assert_uint_eq(k, 3);
    ck_assert_uint_eq(off, sizeof(stream) - 1);
}
END_TEST

START_TEST(test_error_codes)
{
    static const struct {
        const char *line;
        int         code;
    } cases[] = {
        { "ERROR\r\n", RINGCACHE_ECLIENT },
        { "CLIENT_ERROR bad command line format\r\n", RINGCACHE_ECLIENT },
        { "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n", RINGCACHE_ENONNUMERIC },
        { "SERVER_ERROR object too large for cache\r\n", RINGCACHE_ETOOBIG },
        { "SERVER_ERROR out of memory storing object\r\n", RINGCACHE_ESERVER },
        { "SERVER_ERROR MOVED 4 127.0.0.1:1\r\n", RINGCACHE_EMOVED },
        { "SERVER_ERROR TRYAGAIN 4\r\n", RINGCACHE_ETRYAGAIN },
        { "SERVER_ERROR MOVED 4\r\n", RINGCACHE_ESERVER },
        { "STORED\r\n", 0 },
    };
    struct mcp_reply r;
    size_t i, need;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert(mcp_parse(cases[i].line, strlen(cases[i].line), 10, &r, &need) > 0);
        ck_assert_msg(mcp_error_code(&r) == cases[i].code, "case %zu", i);
    }
}
END_TEST

START_TEST(test_format_storage)
{
    char buf[MCP_LINE_MAX];
    size_t n;

    n = mcp_format_storage(buf, "set", "key", 3, 7, -1, 5, false, 0);
    ck_assert_uint_eq(n, strlen("set key 7 -1 5\r\n"));
    ck_assert(memcmp(buf, "set key 7 -1 5\r\n", n) == 0);
    n = mcp_format_storage(buf, "cas", "key", 3, UINT32_MAX, 60, 0, true, UINT64_MAX);
    ck_assert_str_eq(buf, "cas key 4294967295 60 0 18446744073709551615\r\n");
    ck_assert_uint_eq(n, strlen(buf));
}
END_TEST

/*
 * strerror
 */

START_TEST(test_strerror_every_code)
{
    const char *unknown = ringcache_strerror(-1000);
    int a, b;

    ck_assert_ptr_nonnull(unknown);
    ck_assert_str_eq(ringcache_strerror(1), unknown);
    ck_assert_str_eq(ringcache_strerror(RINGCACHE_ERRNO_MIN - 1), unknown);
    for (a = RINGCACHE_ERRNO_MIN; a <= 0; a++) {
        const char *s = ringcache_strerror(a);

        ck_assert_ptr_nonnull(s);
        ck_assert_msg(strcmp(s, unknown) != 0, "code %d has no message", a);
        for (b = a + 1; b <= 0; b++) {
            ck_assert_msg(strcmp(s, ringcache_strerror(b)) != 0,
                          "codes %d and %d share a message", a, b);
        }
    }
}
END_TEST

/*
 * Routing and multi-get grouping
 */

static struct ring *
build_ring(const char *text)
{
    struct ring_members *m = NULL;
    struct ring *r;
    char err[256];

    ck_assert_int_eq(ring_members_parse(text, strlen(text), "test", &m, err, sizeof(err)), RING_OK);
    r = ring_build(m);
    ring_members_free(m);
    ck_assert_ptr_nonnull(r);
    return r;
}

/* usable callback: a bitmask of usable nodes, counting the questions. */
struct usable_mask {
    uint32_t mask;
    unsigned asked[8];
};

static bool
mask_usable(void *arg, uint32_t node)
{
    struct usable_mask *u = arg;

    u->asked[node]++;
    return (u->mask >> node) & 1;
}

#define N_GROUP_KEYS 500

static void
make_keys(struct route_key *keys, char (*names)[32], const struct ring *r,
          uint32_t replicas)
{
    size_t i;

    for (i = 0; i < N_GROUP_KEYS; i++) {
        snprintf(names[i], 32, "key:%zu", i);
        memset(&keys[i], 0, sizeof(keys[i]));
        keys[i].key = names[i];
        keys[i].len = strlen(names[i]);
        keys[i].n_owners = route_owners(r, replicas, keys[i].key, keys[i].len,
                                        keys[i].owners);
    }
}

START_TEST(test_route_owners_is_ring_locate)
{
    struct ring *r = build_ring(three_members);
    uint32_t mine[ROUTE_R_MAX], theirs[8], n;
    char key[32];
    int i;

    for (i = 0; i < 2000; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        n = route_owners(r, 3, key, strlen(key), mine);
        ck_assert_uint_eq(n, 3);
        ck_assert_uint_eq(ring_locate(r, ring_hash(key, strlen(key)), 3, theirs), 3);
        ck_assert(memcmp(mine, theirs, sizeof(uint32_t) * 3) == 0);
        ck_assert_uint_eq(mine[0], ring_primary(r, ring_hash(key, strlen(key))));
    }
    ring_free(r);
}
END_TEST

START_TEST(test_group_by_owner)
{
    struct ring *r = build_ring(three_members);
    static struct route_key keys[N_GROUP_KEYS];
    static char names[N_GROUP_KEYS][32];
    struct usable_mask u = { .mask = 7 };
    struct route_plan p;
    uint32_t g, primary[1];
    size_t j, seen = 0, prev;
    int per_node[3] = { 0, 0, 0 };

    make_keys(keys, names, r, 1);
    keys[7].done = true;                 /* answered keys are skipped */
    ck_assert_int_eq(route_plan_build(&p, 3, keys, N_GROUP_KEYS, mask_usable, &u), 0);
    ck_assert_uint_eq(p.n_groups, 3);
    ck_assert_uint_eq(p.n_orphans, 0);
    for (g = 0; g < p.n_groups; g++) {
        ck_assert_uint_eq(u.asked[p.node[g]], 1);
        prev = 0;
        for (j = p.start[g]; j < p.start[g + 1]; j++) {
            size_t i = p.idx[j];

            ck_assert_uint_ne(i, 7);
            /* Every key sits in the group of its ring_locate primary. */
            ring_locate(r, ring_hash(keys[i].key, keys[i].len), 1, primary);
            ck_assert_uint_eq(primary[0], p.node[g]);
            /* Request order is kept inside a group. */
            ck_assert(j == p.start[g] || i > prev);
            prev = i;
            per_node[p.node[g]]++;
            seen++;
        }
    }
    ck_assert_uint_eq(seen, N_GROUP_KEYS - 1);
    ck_assert_int_gt(per_node[0], 0);
    ck_assert_int_gt(per_node[1], 0);
    ck_assert_int_gt(per_node[2], 0);
    route_plan_free(&p);
    ring_free(r);
}
END_TEST

START_TEST(test_group_failover)
{
    static const char r2[] =
        "epoch 1\nvnodes 160\nreplicas 2\n"
        "node a 127.0.0.1:1\nnode b 127.0.0.1:2\nnode c 127.0.0.1:3\n";
    struct ring *r = build_ring(r2);
    static struct route_key keys[N_GROUP_KEYS];
    static char names[N_GROUP_KEYS][32];
    struct usable_mask u = { .mask = 5 };      /* node 1 (b) is down */
    struct route_plan p;
    uint32_t g;
    size_t j;

    make_keys(keys, names, r, 2);
    ck_assert_int_eq(route_plan_build(&p, 3, keys, N_GROUP_KEYS, mask_usable, &u), 0);
    ck_assert_uint_eq(p.n_orphans, 0);
    ck_assert_uint_eq(u.asked[1], 1);
    for (g = 0; g < p.n_groups; g++) {
        ck_assert_uint_ne(p.node[g], 1);
        for (j = p.start[g]; j < p.start[g + 1]; j++) {
            const struct route_key *k = &keys[p.idx[j]];

            /* A key whose primary is b moves to its second owner. */
            ck_assert_uint_eq(k->owners[k->next], p.node[g]);
            ck_assert_uint_eq(k->next, k->owners[0] == 1 ? 1 : 0);
        }
    }
    route_plan_free(&p);

    /* R = 1 view of the same keys with b down: b's keys are orphans. */
    make_keys(keys, names, r, 1);
    memset(&u, 0, sizeof(u));
    u.mask = 5;
    ck_assert_int_eq(route_plan_build(&p, 3, keys, N_GROUP_KEYS, mask_usable, &u), 0);
    ck_assert_uint_gt(p.n_orphans, 0);
    for (j = 0; j < N_GROUP_KEYS; j++) {
        ck_assert_int_eq(keys[j].next == keys[j].n_owners, keys[j].owners[0] == 1);
    }
    ck_assert_uint_eq(p.start[p.n_groups], N_GROUP_KEYS - p.n_orphans);
    route_plan_free(&p);
    ring_free(r);
}
END_TEST

/*
 * Handles, without talking to any node
 */

START_TEST(test_options_defaults)
{
    struct ringcache_options o;

    ringcache_options_init(&o);
    ck_assert_int_eq(o.connect_timeout_ms, 200);
    ck_assert_int_eq(o.op_timeout_ms, 1000);
    ck_assert_int_eq(o.retry_interval_ms, 1000);
    ck_assert_uint_eq(o.max_value_bytes, 1048576);
    ck_assert_uint_gt(o.pool_size, 0);
}
END_TEST

START_TEST(test_create_errors)
{
    struct ringcache *rc = NULL;
    struct ringcache_options o;
    char err[256] = "";
    const char *bad_seed[] = { "no-port-here" };

    ck_assert_int_eq(ringcache_new_members_text(&rc, "node x\n", 7, "bad.members",
                                                NULL, err, sizeof(err)),
                     RINGCACHE_EMEMBERS);
    ck_assert_ptr_null(rc);
    ck_assert_msg(strstr(err, "bad.members") != NULL, "err: %s", err);
    ck_assert_int_eq(ringcache_new_members_file(&rc, "/nonexistent/x.members", NULL,
                                                err, sizeof(err)),
                     RINGCACHE_EMEMBERS);
    ck_assert_msg(strstr(err, "/nonexistent/x.members") != NULL, "err: %s", err);
    ck_assert_int_eq(ringcache_new_seeds(&rc, bad_seed, 1, NULL, err, sizeof(err)),
                     RINGCACHE_EMEMBERS);
    ringcache_options_init(&o);
    o.op_timeout_ms = 0;
    ck_assert_int_eq(ringcache_new_members_text(&rc, three_members, strlen(three_members),
                                                "t", &o, err, sizeof(err)),
                     RINGCACHE_EINVAL);
    ck_assert_ptr_null(rc);
}
END_TEST

/*
 * Reserve a loopback port that refuses connections: a socket bound to it but
 * not listening makes the kernel answer every connect with a reset, and no
 * other process can listen there meanwhile. Returns the fd (close it after)
 * and the port in *port; -1 when the family is not available (then nothing
 * can listen on that address either, and *port is 1).
 */
static int
refusing_port(int family, uint16_t *port)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd;

    memset(&ss, 0, sizeof(ss));
    ss.ss_family = (sa_family_t)family;
    if (family == AF_INET) {
        ((struct sockaddr_in *)&ss)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else {
        ((struct sockaddr_in6 *)&ss)->sin6_addr = in6addr_loopback;
    }
    *port = 1;
    fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) {
        return -1;
    }
    if (bind(fd, (struct sockaddr *)&ss, family == AF_INET ? sizeof(struct sockaddr_in)
                                                         : sizeof(struct sockaddr_in6)) != 0
        || getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                    : ((struct sockaddr_in6 *)&ss)->sin6_port);
    return fd;
}

START_TEST(test_seeds_are_the_membership)
{
    /* Seeds nobody answers on (not fixed ports, where a local cluster may
     * run and answer `config`): the seeds themselves are the membership. */
    char seed4[64], seed6[64], id4[64], id6[64];
    const char *seeds[] = { seed4, seed6 };
    struct ringcache *rc = NULL;
    struct ring_members *m;
    struct ring *r;
    size_t owner;
    char err[256];
    uint16_t p4, p6;
    int i, fd4, fd6;

    fd4 = refusing_port(AF_INET, &p4);
    ck_assert_int_ge(fd4, 0);
    fd6 = refusing_port(AF_INET6, &p6);
    snprintf(seed4, sizeof(seed4), "127.0.0.1:%u", (unsigned)p4);
    snprintf(seed6, sizeof(seed6), "[::1]:%u", (unsigned)p6);
    snprintf(id4, sizeof(id4), "127.0.0.1:%u", (unsigned)p4);
    snprintf(id6, sizeof(id6), "::1:%u", (unsigned)p6);
    ck_assert_int_eq(ringcache_new_seeds(&rc, seeds, 2, NULL, err, sizeof(err)), 0);
    ck_assert_uint_eq(ringcache_node_count(rc), 2);
    ck_assert_str_eq(ringcache_node_id(rc, 0), id4);
    ck_assert_str_eq(ringcache_node_id(rc, 1), id6);
    ck_assert_str_eq(ringcache_node_addr(rc, 1), seed6);
    ck_assert_ptr_null(ringcache_node_id(rc, 2));
    /* The same placement as a ring built from those ids by ring/. */
    m = ring_members_new();
    ck_assert_int_eq(ring_members_add(m, id4, seed4, 1, ""), 0);
    ck_assert_int_eq(ring_members_add(m, id6, seed6, 1, ""), 0);
    r = ring_build(m);
    for (i = 0; i < 200; i++) {
        char key[16];

        snprintf(key, sizeof(key), "s%d", i);
        ck_assert_int_eq(ringcache_locate(rc, key, strlen(key), &owner, 1), 1);
        ck_assert_uint_eq(owner, ring_primary(r, ring_hash(key, strlen(key))));
    }
    ring_free(r);
    ring_members_free(m);
    ringcache_free(rc);
    close(fd4);
    if (fd6 >= 0) {
        close(fd6);
    }
}
END_TEST

static int mget_calls;

static void
count_mget(void *arg, size_t index, int node, int status,
           const struct ringcache_value *v)
{
    (void)arg; (void)index; (void)node; (void)status; (void)v;
    mget_calls++;
}

START_TEST(test_validation_before_sending)
{
    /* Port 1 on loopback: were anything sent, the call would fail with an
     * I/O or down error instead of the validation errors asserted here. */
    const char *members = "epoch 1\nvnodes 160\nreplicas 1\nnode a 127.0.0.1:1\n";
    const char *keys[] = { "good", "bad key" };
    struct ringcache_options o;
    struct ringcache *rc = NULL;
    struct ringcache_value v;
    char big[64];
    uint64_t n;

    ringcache_options_init(&o);
    o.max_value_bytes = 32;
    /* From a membership (a seeds handle asks the seed for config). */
    ck_assert_int_eq(ringcache_new_members_text(&rc, members, strlen(members), "t", &o,
                                                NULL, 0), 0);
    memset(big, 'v', sizeof(big));
    ck_assert_int_eq(ringcache_set(rc, "k", 1, big, 33, 0, 0), RINGCACHE_ETOOBIG);
    ck_assert_int_eq(ringcache_set(rc, "", 0, "v", 1, 0, 0), RINGCACHE_EKEY);
    ck_assert_int_eq(ringcache_add(rc, "a b", 3, "v", 1, 0, 0), RINGCACHE_EKEY);
    ck_assert_int_eq(ringcache_cas(rc, "a\nb", 3, "v", 1, 0, 0, 1), RINGCACHE_EKEY);
    ck_assert_int_eq(ringcache_get(rc, "a\rb", 3, &v), RINGCACHE_EKEY);
    ck_assert_int_eq(ringcache_delete(rc, "a b", 3), RINGCACHE_EKEY);
    ck_assert_int_eq(ringcache_incr(rc, "a b", 3, 1, &n), RINGCACHE_EKEY);
    ck_assert_int_eq(ringcache_touch(rc, "a b", 3, 1), RINGCACHE_EKEY);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, NULL, 1, 0, 0), RINGCACHE_EINVAL);
    mget_calls = 0;
    ck_assert_int_eq(ringcache_mget_cb(rc, keys, NULL, 2, 0, count_mget, NULL), RINGCACHE_EKEY);
    ck_assert_int_eq(mget_calls, 0);
    /* Nothing was sent, so the node was never marked down. */
    ck_assert_int_eq(ringcache_node_is_down(rc, 0), 0);
    ringcache_free(rc);
}
END_TEST

START_TEST(test_parse_cluster_fields)
{
    struct mcp_reply r;
    size_t need;
    const char *e = "EPOCH 12 13\r\n", *m = "SERVER_ERROR MOVED 18446744073709551615 [::1]:5\r\n";
    const char *t = "SERVER_ERROR TRYAGAIN 9\r\n", *c = "CONFIG 5 3\r\nxyz\r\nEND\r\n";

    ck_assert_int_eq(mcp_parse(e, strlen(e), 10, &r, &need), (long)strlen(e));
    ck_assert(r.kind == MCP_EPOCH && r.epoch == 12 && r.pending == 13);
    ck_assert_int_eq(mcp_parse(m, strlen(m), 10, &r, &need), (long)strlen(m));
    ck_assert(r.kind == MCP_MOVED && r.epoch == UINT64_MAX);
    ck_assert(r.key_len == 7 && memcmp(r.key, "[::1]:5", 7) == 0);
    ck_assert_int_eq(mcp_parse(t, strlen(t), 10, &r, &need), (long)strlen(t));
    ck_assert(r.kind == MCP_TRYAGAIN && r.epoch == 9);
    /* CONFIG data is bounded by max_value like a VALUE; END is its own unit. */
    ck_assert_int_eq(mcp_parse(c, strlen(c), 10, &r, &need), 17);
    ck_assert(r.kind == MCP_CONFIG && r.epoch == 5 && r.data_len == 3);
    ck_assert_int_eq(mcp_parse(c, strlen(c), 2, &r, &need), RINGCACHE_EPROTO);
}
END_TEST

/*
 * A scripted fake node on loopback for the epoch rules: one thread, poll()
 * over the listening socket and its clients, one reply per request line.
 */

enum fake_mode {
    FAKE_SERVE,        /* keyed requests served: get -> END, set -> STORED */
    FAKE_MOVED,        /* keyed requests -> SERVER_ERROR MOVED <moved_epoch> <self> */
    FAKE_MOVED_ONCE,   /* the first keyed request MOVED, then serve */
    FAKE_TRYAGAIN,     /* keyed requests -> SERVER_ERROR TRYAGAIN <moved_epoch> */
    FAKE_CHURN,        /* every 50th keyed request: MOVED with a new epoch, else serve */
};

struct fake {
    int            lfd;
    int            port;
    pthread_t      th;
    int            stop;           /* atomic */
    /* the script (set before the handle is made, or atomically) */
    int            mode;
    uint64_t       epoch;          /* what EPOCH and CONFIG report (0: no membership) */
    uint64_t       moved_epoch;    /* what MOVED / TRYAGAIN carry */
    int            bump;           /* each MOVED raises epoch and moved_epoch by one */
    int            plain;          /* answer ERROR to epoch and config (plain memcached) */
    /* what it saw (atomic) */
    int            n_keyed;
    int            n_config;
    int            n_poll;
    int            n_declare;
    uint64_t       declared;       /* last declared epoch */
};

/* Write all of buf to fd (blocking socket). */
static void
fake_write(int fd, const char *buf, size_t len)
{
    ssize_t n;

    while (len > 0) {
        n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n <= 0) {
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

/* Answer one keyed request as the mode says. */
static void
fake_keyed(struct fake *f, int fd, const char *ok)
{
    char out[128];
    int mode = __atomic_load_n(&f->mode, __ATOMIC_ACQUIRE);
    int n;

    __atomic_add_fetch(&f->n_keyed, 1, __ATOMIC_RELAXED);
    if (mode == FAKE_MOVED_ONCE) {
        __atomic_store_n(&f->mode, FAKE_SERVE, __ATOMIC_RELEASE);
        mode = FAKE_MOVED;
    }
    if (mode == FAKE_CHURN) {
        mode = __atomic_load_n(&f->n_keyed, __ATOMIC_RELAXED) % 50 == 0 ? FAKE_MOVED : FAKE_SERVE;
    }
    if (mode == FAKE_SERVE) {
        fake_write(fd, ok, strlen(ok));
        return;
    }
    if (mode == FAKE_MOVED) {
        n = snprintf(out, sizeof(out), "SERVER_ERROR MOVED %llu 127.0.0.1:%d\r\n",
                     (unsigned long long)__atomic_load_n(&f->moved_epoch, __ATOMIC_ACQUIRE),
                     f->port);
        if (__atomic_load_n(&f->bump, __ATOMIC_ACQUIRE)) {
            __atomic_add_fetch(&f->epoch, 1, __ATOMIC_RELEASE);
            __atomic_add_fetch(&f->moved_epoch, 1, __ATOMIC_RELEASE);
        }
    } else {
        n = snprintf(out, sizeof(out), "SERVER_ERROR TRYAGAIN %llu\r\n",
                     (unsigned long long)__atomic_load_n(&f->moved_epoch, __ATOMIC_ACQUIRE));
    }
    fake_write(fd, out, (size_t)n);
}

/* Handle one request line [line, line+len); *skip gets the data block
 * length of a storage command. */
static void
fake_line(struct fake *f, int fd, const char *line, size_t len, size_t *skip)
{
    char buf[512], text[256];
    unsigned long long e = __atomic_load_n(&f->epoch, __ATOMIC_ACQUIRE);
    unsigned flags;
    long ttl;
    size_t bytes;
    int n, t;

    snprintf(buf, sizeof(buf), "%.*s", (int)len, line);
    if (strcmp(buf, "epoch") == 0 || strncmp(buf, "epoch ", 6) == 0 ||
        strcmp(buf, "config") == 0) {
        if (f->plain) {
            fake_write(fd, "ERROR\r\n", 7);
        } else if (strcmp(buf, "epoch") == 0) {
            __atomic_add_fetch(&f->n_poll, 1, __ATOMIC_RELAXED);
            n = snprintf(buf, sizeof(buf), "EPOCH %llu 0\r\n", e);
            fake_write(fd, buf, (size_t)n);
        } else if (buf[0] == 'e') {
            __atomic_add_fetch(&f->n_declare, 1, __ATOMIC_RELAXED);
            __atomic_store_n(&f->declared, strtoull(buf + 6, NULL, 10), __ATOMIC_RELEASE);
            fake_write(fd, "OK\r\n", 4);
        } else {
            __atomic_add_fetch(&f->n_config, 1, __ATOMIC_RELAXED);
            t = e == 0 ? 0 : snprintf(text, sizeof(text),
                                      "epoch %llu\nvnodes 160\nreplicas 1\n"
                                      "node fake 127.0.0.1:%d\n", e, f->port);
            n = snprintf(buf, sizeof(buf), "CONFIG %llu %d\r\n%s\r\nEND\r\n", e, t,
                         e == 0 ? "" : text);
            fake_write(fd, buf, (size_t)n);
        }
    } else if (strncmp(buf, "get ", 4) == 0 || strncmp(buf, "gets ", 5) == 0) {
        fake_keyed(f, fd, "END\r\n");
    } else if (sscanf(buf, "set %*s %u %ld %zu", &flags, &ttl, &bytes) == 3) {
        *skip = bytes + 2;
        fake_keyed(f, fd, "STORED\r\n");
    } else if (strncmp(buf, "delete ", 7) == 0) {
        fake_keyed(f, fd, "DELETED\r\n");
    } else {
        fake_write(fd, "ERROR\r\n", 7);
    }
}

/* The fake's thread: accept, read lines, answer; until stop. */
static void *
fake_run(void *arg)
{
    struct fake *f = arg;
    struct pollfd p[17];
    char buf[16][4096];
    size_t have[16] = { 0 }, skip[16] = { 0 };
    int n = 1, i;

    p[0].fd = f->lfd;
    p[0].events = POLLIN;
    while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
        if (poll(p, (nfds_t)n, 20) <= 0) {
            continue;
        }
        if ((p[0].revents & POLLIN) && n < 17) {
            int c = accept(f->lfd, NULL, NULL);

            if (c >= 0) {
                p[n].fd = c;
                p[n].events = POLLIN;
                p[n].revents = 0;
                have[n - 1] = skip[n - 1] = 0;
                n++;
            }
        }
        for (i = 1; i < n; i++) {
            size_t k = (size_t)(i - 1);
            ssize_t got;
            char *nl;

            if (!(p[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                continue;
            }
            got = recv(p[i].fd, buf[k] + have[k], sizeof(buf[k]) - have[k], 0);
            if (got <= 0) {
                close(p[i].fd);
                p[i].fd = -1;     /* poll ignores negative fds */
                continue;
            }
            have[k] += (size_t)got;
            for (;;) {
                size_t used;

                if (skip[k] > 0) {
                    used = skip[k] < have[k] ? skip[k] : have[k];
                    skip[k] -= used;
                } else {
                    nl = memchr(buf[k], '\n', have[k]);
                    if (nl == NULL) {
                        break;
                    }
                    used = (size_t)(nl - buf[k]) + 1;
                    fake_line(f, p[i].fd, buf[k], used - 2, &skip[k]);
                }
                memmove(buf[k], buf[k] + used, have[k] - used);
                have[k] -= used;
                if (have[k] == 0 && skip[k] == 0) {
                    break;
                }
            }
        }
    }
    for (i = 1; i < n; i++) {
        if (p[i].fd >= 0) {
            close(p[i].fd);
        }
    }
    return NULL;
}

/* Start a fake node on a free loopback port. */
static void
fake_start(struct fake *f, int mode, uint64_t epoch, uint64_t moved_epoch)
{
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    int one = 1;

    memset(f, 0, sizeof(*f));
    f->mode = mode;
    f->epoch = epoch;
    f->moved_epoch = moved_epoch;
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(f->lfd, 0);
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(f->lfd, 16), 0);
    ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
    f->port = ntohs(a.sin_port);
    ck_assert_int_eq(pthread_create(&f->th, NULL, fake_run, f), 0);
}

static void
fake_stop(struct fake *f)
{
    __atomic_store_n(&f->stop, 1, __ATOMIC_RELEASE);
    pthread_join(f->th, NULL);
    close(f->lfd);
}

/* A handle from a one-node membership of epoch `epoch` naming the fake
 * (id "fake", the id its CONFIG uses too). */
static struct ringcache *
fake_handle(struct fake *f, uint64_t epoch, int op_timeout_ms)
{
    struct ringcache_options o;
    struct ringcache *rc = NULL;
    char text[256], err[256] = "";

    ringcache_options_init(&o);
    o.op_timeout_ms = op_timeout_ms;
    snprintf(text, sizeof(text), "epoch %llu\nvnodes 160\nreplicas 1\nnode fake 127.0.0.1:%d\n",
             (unsigned long long)epoch, f->port);
    ck_assert_msg(ringcache_new_members_text(&rc, text, strlen(text), "fake", &o, err,
                                             sizeof(err)) == 0, "%s", err);
    return rc;
}

static double
mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

START_TEST(test_epoch_higher_adopted)
{
    struct fake f;
    struct ringcache *rc;
    struct ringcache_value v;

    /* The fake moved on to epoch 7 and says MOVED once. */
    fake_start(&f, FAKE_MOVED_ONCE, 7, 7);
    rc = fake_handle(&f, 5, 1000);
    ck_assert_uint_eq(ringcache_epoch(rc), 5);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    ck_assert_uint_eq(ringcache_epoch(rc), 7);
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 2);
    /* MOVED made the handle declare: the retry declared epoch 7. */
    ck_assert_uint_eq(__atomic_load_n(&f.declared, __ATOMIC_ACQUIRE), 7);
    ck_assert_int_eq(ringcache_get(rc, "k", 1, &v), RINGCACHE_ENOTFOUND);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_epoch_lower_or_equal_ignored)
{
    /* _i = 0: the node reports a lower epoch (3 < 5), 1: the same (5). */
    uint64_t theirs = _i == 0 ? 3 : 5;
    struct fake f;
    struct ringcache *rc;
    struct ringcache_value v;

    fake_start(&f, FAKE_MOVED, theirs, theirs);
    rc = fake_handle(&f, 5, 3000);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    ck_assert_int_eq(ringcache_get(rc, "k", 1, &v), RINGCACHE_ENOTFOUND);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), RINGCACHE_EMOVED);
    ck_assert_uint_eq(ringcache_epoch(rc), 5);
    /* Never fetched config from a node that is not ahead; 1 + 3 hops each. */
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 0);
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 8);
    /* An explicit refresh does not go back (or sideways) either. */
    ck_assert_int_eq(ringcache_refresh(rc), 0);
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 1);
    ck_assert_uint_eq(ringcache_epoch(rc), 5);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_epoch_hop_cap)
{
    struct fake f;
    struct ringcache *rc;
    struct ringcache_value v;
    const char *keys[] = { "a", "b", "c" };
    int status[3];
    struct ringcache_value vals[3];

    /* Every MOVED carries a newer epoch and config has it: a client that
     * followed redirects forever would never stop. */
    fake_start(&f, FAKE_MOVED, 2, 2);
    f.bump = 1;
    rc = fake_handle(&f, 1, 1000);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    ck_assert_int_eq(ringcache_get(rc, "k", 1, &v), RINGCACHE_ENOTFOUND);
    /* The first try and 3 redirects, each teaching a newer epoch (3, 4,
     * 5); the 4th MOVED is not followed. */
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 4);
    ck_assert_uint_eq(ringcache_epoch(rc), 5);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), RINGCACHE_EMOVED);
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 8);
    ck_assert_int_eq(ringcache_mget(rc, keys, NULL, 3, vals, status), 0);
    ck_assert(status[0] == RINGCACHE_ENOTFOUND && status[1] == RINGCACHE_ENOTFOUND &&
              status[2] == RINGCACHE_ENOTFOUND);
    ck_assert_int_eq(__atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE), 12);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_tryagain_budget)
{
    struct fake f;
    struct ringcache *rc;
    struct ringcache_value v;
    double t0, dt;
    int tries;

    fake_start(&f, FAKE_TRYAGAIN, 1, 1);
    rc = fake_handle(&f, 1, 400);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    t0 = mono_ms();
    ck_assert_int_eq(ringcache_get(rc, "k", 1, &v), RINGCACHE_ENOTFOUND);
    dt = mono_ms() - t0;
    tries = __atomic_load_n(&f.n_keyed, __ATOMIC_ACQUIRE);
    /* Back-offs of 1, 2, 4, ... 128 ms (255 in all) fit in 400 ms, 256
     * more do not: at most 9 tries; fewer when a loaded machine made the
     * round trips slow, but at least one retry after backing off. */
    ck_assert_msg(tries >= 2 && tries <= 9, "tries %d", tries);
    /* Retries stop at the op timeout: no back-off sleeps past it; the
     * last request may then take up to one more op timeout of its own
     * (ringcache.h), so the bound is 2 x 400 ms plus scheduling slack. */
    ck_assert_msg(dt >= 100 && dt < 2 * 400 + 300, "took %.1f ms", dt);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), RINGCACHE_ETRYAGAIN);
    ck_assert_int_eq(ringcache_delete(rc, "k", 1), RINGCACHE_ETRYAGAIN);
    /* The range unfenced: served again. */
    __atomic_store_n(&f.mode, FAKE_SERVE, __ATOMIC_RELEASE);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_epoch_declared_once_per_connection)
{
    struct fake f;
    struct ringcache *rc;
    int i;

    fake_start(&f, FAKE_SERVE, 5, 5);
    rc = fake_handle(&f, 5, 1000);
    /* The first call polls (EPOCH 5: the node speaks epochs), then every
     * request goes out on the one pooled connection: one declaration. */
    for (i = 0; i < 5; i++) {
        ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    }
    ck_assert_int_eq(__atomic_load_n(&f.n_poll, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(__atomic_load_n(&f.n_declare, __ATOMIC_ACQUIRE), 1);
    ck_assert_uint_eq(__atomic_load_n(&f.declared, __ATOMIC_ACQUIRE), 5);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_epoch_never_declared_to_plain_nodes)
{
    /* _i = 0: a plain memcached (ERROR to epoch), 1: a node at epoch 0. */
    struct fake f;
    struct ringcache *rc;
    int i;

    fake_start(&f, FAKE_SERVE, 0, 0);
    f.plain = _i == 0;
    rc = fake_handle(&f, 1, 1000);
    for (i = 0; i < 3; i++) {
        ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    }
    ck_assert_int_eq(__atomic_load_n(&f.n_declare, __ATOMIC_ACQUIRE), 0);
    ck_assert_uint_eq(ringcache_epoch(rc), 1);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_poll_learns_higher_epoch)
{
    struct fake f;
    struct ringcache *rc;
    double deadline;

    fake_start(&f, FAKE_SERVE, 3, 3);
    rc = fake_handle(&f, 3, 1000);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 20), 0);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    __atomic_store_n(&f.epoch, 4, __ATOMIC_RELEASE);
    /* Calls keep going; within a few intervals one of them polls. */
    deadline = mono_ms() + 2000;
    while (ringcache_epoch(rc) != 4 && mono_ms() < deadline) {
        ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
        usleep(5000);
    }
    ck_assert_uint_eq(ringcache_epoch(rc), 4);
    ck_assert_int_ge(__atomic_load_n(&f.n_poll, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, -1), RINGCACHE_EINVAL);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

struct churn_arg {
    struct ringcache *rc;
    int               errors;
};

/* A thread of test_ring_swap_under_threads: writes, reads and looks at
 * node names while other threads' MOVED replies swap the ring. */
static void *
churn_thread(void *arg)
{
    struct churn_arg *a = arg;
    struct ringcache_value v;
    const char *keys[] = { "m1", "m2" };
    struct ringcache_value vals[2];
    int status[2], i, ret;

    for (i = 0; i < 150; i++) {
        a->errors += ringcache_set(a->rc, "k", 1, "v", 1, 0, 0) != 0;
        ret = ringcache_get(a->rc, "k", 1, &v);
        a->errors += ret != RINGCACHE_ENOTFOUND;
        a->errors += ringcache_mget(a->rc, keys, NULL, 2, vals, status) != 0;
        a->errors += ringcache_node_id(a->rc, 0) == NULL ||
                     strcmp(ringcache_node_id(a->rc, 0), "fake") != 0;
    }
    return NULL;
}

START_TEST(test_ring_swap_under_threads)
{
    struct fake f;
    struct ringcache *rc;
    struct churn_arg a[6];
    pthread_t th[6];
    int i, errors = 0;

    /* Every 50th request is MOVED with a newer epoch: the ring is swapped
     * dozens of times under six threads; no call may fail (4 MOVED in a
     * row for one call, the hop cap, has odds of 1 in 6 million) and the
     * snapshots must be freed exactly once (ASan watches). */
    fake_start(&f, FAKE_CHURN, 2, 2);
    f.bump = 1;
    rc = fake_handle(&f, 1, 5000);
    ck_assert_int_eq(ringcache_set_poll_interval(rc, 0), 0);
    for (i = 0; i < 6; i++) {
        a[i].rc = rc;
        a[i].errors = 0;
        ck_assert_int_eq(pthread_create(&th[i], NULL, churn_thread, &a[i]), 0);
    }
    for (i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        errors += a[i].errors;
    }
    ck_assert_int_eq(errors, 0);
    ck_assert_uint_gt(ringcache_epoch(rc), 20);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_seeds_fetch_config)
{
    struct fake f;
    struct ringcache *rc = NULL;
    char seed[32], err[256] = "";
    const char *seeds[2];

    /* The first seed is dead; the second has epoch 9. */
    fake_start(&f, FAKE_SERVE, 9, 9);
    snprintf(seed, sizeof(seed), "127.0.0.1:%d", f.port);
    seeds[0] = "127.0.0.1:1";
    seeds[1] = seed;
    ck_assert_msg(ringcache_new_seeds(&rc, seeds, 2, NULL, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(ringcache_epoch(rc), 9);
    ck_assert_uint_eq(ringcache_node_count(rc), 1);
    ck_assert_str_eq(ringcache_node_id(rc, 0), "fake");
    ck_assert_str_eq(ringcache_node_addr(rc, 0), seed);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    ck_assert_uint_eq(__atomic_load_n(&f.declared, __ATOMIC_ACQUIRE), 9);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

START_TEST(test_seeds_without_membership)
{
    struct fake f;
    struct ringcache *rc = NULL;
    char seed[32];
    const char *seeds[1];

    fake_start(&f, FAKE_SERVE, 0, 0);
    snprintf(seed, sizeof(seed), "127.0.0.1:%d", f.port);
    seeds[0] = seed;
    ck_assert_int_eq(ringcache_new_seeds(&rc, seeds, 1, NULL, NULL, 0), 0);
    ck_assert_uint_eq(ringcache_epoch(rc), 0);
    ck_assert_str_eq(ringcache_node_id(rc, 0), seed);
    ck_assert_int_eq(__atomic_load_n(&f.n_config, __ATOMIC_ACQUIRE), 1);
    ck_assert_int_eq(ringcache_set(rc, "k", 1, "v", 1, 0, 0), 0);
    ck_assert_int_eq(__atomic_load_n(&f.n_declare, __ATOMIC_ACQUIRE), 0);
    ringcache_free(rc);
    fake_stop(&f);
}
END_TEST

Suite *
client_suite(void)
{
    Suite *s = suite_create("client");
    TCase *tc;

    tc = tcase_create("key_check");
    tcase_add_test(tc, test_key_check);
    suite_add_tcase(s, tc);

    tc = tcase_create("parse");
    tcase_add_loop_test(tc, test_parse_table, 0,
                        (int)(sizeof(parse_cases) / sizeof(parse_cases[0])));
    tcase_add_test(tc, test_parse_long_line);
    tcase_add_test(tc, test_parse_stream);
    tcase_add_test(tc, test_error_codes);
    tcase_add_test(tc, test_format_storage);
    suite_add_tcase(s, tc);

    tc = tcase_create("strerror");
    tcase_add_test(tc, test_strerror_every_code);
    suite_add_tcase(s, tc);

    tc = tcase_create("route");
    tcase_add_test(tc, test_route_owners_is_ring_locate);
    tcase_add_test(tc, test_group_by_owner);
    tcase_add_test(tc, test_group_failover);
    suite_add_tcase(s, tc);

    tc = tcase_create("handle");
    tcase_add_test(tc, test_options_defaults);
    tcase_add_test(tc, test_create_errors);
    tcase_add_test(tc, test_seeds_are_the_membership);
    tcase_add_test(tc, test_validation_before_sending);
    suite_add_tcase(s, tc);

    tc = tcase_create("epoch");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_parse_cluster_fields);
    tcase_add_test(tc, test_epoch_higher_adopted);
    tcase_add_loop_test(tc, test_epoch_lower_or_equal_ignored, 0, 2);
    tcase_add_test(tc, test_epoch_hop_cap);
    tcase_add_test(tc, test_tryagain_budget);
    tcase_add_test(tc, test_epoch_declared_once_per_connection);
    tcase_add_loop_test(tc, test_epoch_never_declared_to_plain_nodes, 0, 2);
    tcase_add_test(tc, test_poll_learns_higher_epoch);
    tcase_add_test(tc, test_ring_swap_under_threads);
    tcase_add_test(tc, test_seeds_fetch_config);
    tcase_add_test(tc, test_seeds_without_membership);
    suite_add_tcase(s, tc);
    return s;
}
