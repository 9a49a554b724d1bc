/*
 * client_suite: libringcache without real nodes. Key and value checks, the
 * replies a client accepts as a table (bytes -> parsed unit or error), the
 * cluster replies (MOVED, TRYAGAIN, CONFIG, EPOCH), error mapping, every
 * request line, multi-get grouping against ring_locate, handle creation
 * errors and ringcache_strerror for every code. The epoch rules against a
 * fake node are client_epoch_suite (check_client_epoch.c).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/mcproto.h"
#include "client/ringcache.h"
#include "client/route.h"
#include "ring/ring.h"
#include "tests/suites.h"

static const char three_members[] = "epoch 1\nvnodes 160\nreplicas 1\n"
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
        { "caf\xc3\xa9", 5, 0 }, /* UTF-8 bytes are fine */
        { "", 0, RINGCACHE_EKEY },
        { "a b", 3, RINGCACHE_EKEY },
        { "a\tb", 3, RINGCACHE_EKEY },
        { "a\rb", 3, RINGCACHE_EKEY },
        { "a\nb", 3, RINGCACHE_EKEY },
        { "a\0b", 3, RINGCACHE_EKEY },
        { "a\x7f", 2, RINGCACHE_EKEY },
        { "\x01", 1, RINGCACHE_EKEY },
    };
    char   longkey[300];
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert_msg(mcp_check_key(cases[i].key, cases[i].len) == cases[i].want, "case %zu", i);
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
    long          want; /* bytes consumed, 0 = need more, < 0 error */
    enum mcr_kind kind;
    const char   *key;  /* VALUE key / STAT name */
    const char   *data; /* VALUE data / STAT value / error message */
    uint32_t      flags;
    int           has_cas;
    uint64_t      cas;
    uint64_t      number;
};

static const struct parse_case parse_cases[] = {
    { "END\r\n", 5, MCR_END, NULL, NULL, 0, 0, 0, 0 },
    { "STORED\r\n", 8, MCR_STORED, NULL, NULL, 0, 0, 0, 0 },
    { "NOT_STORED\r\n", 12, MCR_NOT_STORED, NULL, NULL, 0, 0, 0, 0 },
    { "EXISTS\r\n", 8, MCR_EXISTS, NULL, NULL, 0, 0, 0, 0 },
    { "NOT_FOUND\r\n", 11, MCR_NOT_FOUND, NULL, NULL, 0, 0, 0, 0 },
    { "DELETED\r\n", 9, MCR_DELETED, NULL, NULL, 0, 0, 0, 0 },
    { "TOUCHED\r\n", 9, MCR_TOUCHED, NULL, NULL, 0, 0, 0, 0 },
    { "OK\r\n", 4, MCR_OK, NULL, NULL, 0, 0, 0, 0 },
    { "42\r\n", 4, MCR_NUMBER, NULL, NULL, 0, 0, 0, 42 },
    { "18446744073709551615\r\n", 22, MCR_NUMBER, NULL, NULL, 0, 0, 0, UINT64_MAX },
    { "VALUE k 5 3\r\nabc\r\n", 18, MCR_VALUE, "k", "abc", 5, 0, 0, 0 },
    { "VALUE k 0 0\r\n\r\n", 15, MCR_VALUE, "k", "", 0, 0, 0, 0 },
    { "VALUE key 4294967295 2 77\r\nhi\r\nEND\r\n", 31, MCR_VALUE, "key", "hi", UINT32_MAX, 1, 77,
      0 },
    { "VALUE k 0 4\r\na\r\nb\r\n", 19, MCR_VALUE, "k", "a\r\nb", 0, 0, 0, 0 },
    { "STAT pid 123\r\n", 14, MCR_STAT, "pid", "123", 0, 0, 0, 0 },
    { "STAT version 1.6.18 x\r\n", 23, MCR_STAT, "version", "1.6.18 x", 0, 0, 0, 0 },
    { "ERROR\r\n", 7, MCR_ERROR, NULL, "", 0, 0, 0, 0 },
    { "CLIENT_ERROR bad data chunk\r\n", 29, MCR_CLIENT_ERROR, NULL, "bad data chunk", 0, 0, 0, 0 },
    { "SERVER_ERROR out of memory\r\n", 28, MCR_SERVER_ERROR, NULL, "out of memory", 0, 0, 0, 0 },
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
    { "VALUE k 0 2000000\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 }, /* over max_value */
    { "VALUE k\x01 0 1\r\nx\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "STAT\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "STAT x\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "ERRORS\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "EN\rD\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    /* the cluster extensions (docs/cluster.md) */
    { "SERVER_ERROR MOVED 7 127.0.0.1:11312\r\n", 38, MCR_MOVED, "127.0.0.1:11312", NULL, 0, 0, 0,
      0 },
    { "SERVER_ERROR TRYAGAIN 7\r\n", 25, MCR_TRYAGAIN, NULL, NULL, 0, 0, 0, 0 },
    { "SERVER_ERROR MOVED 7\r\n", 22, MCR_SERVER_ERROR, NULL, "MOVED 7", 0, 0, 0, 0 },
    { "SERVER_ERROR MOVED x 127.0.0.1:1\r\n", 34, MCR_SERVER_ERROR, NULL, NULL, 0, 0, 0, 0 },
    { "SERVER_ERROR TRYAGAIN 7 8\r\n", 27, MCR_SERVER_ERROR, NULL, NULL, 0, 0, 0, 0 },
    { "CONFIG 3 4\r\nabcd\r\n", 18, MCR_CONFIG, NULL, "abcd", 0, 0, 0, 0 },
    { "CONFIG 0 0\r\n\r\n", 14, MCR_CONFIG, NULL, "", 0, 0, 0, 0 },
    { "CONFIG 3 4\r\nab", 0, 0, NULL, NULL, 0, 0, 0, 0 },
    { "CONFIG 3 4\r\nabcdXY", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "CONFIG 3\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "CONFIG 3 2000000\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "EPOCH 3 4\r\n", 11, MCR_EPOCH, NULL, NULL, 0, 0, 0, 0 },
    { "EPOCH 3\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
    { "EPOCH 3 x\r\n", RINGCACHE_EPROTO, 0, NULL, NULL, 0, 0, 0, 0 },
};

START_TEST(test_parse_table)
{
    const struct parse_case *pc = &parse_cases[_i];
    struct mcr_reply         r;
    size_t                   len = strlen(pc->bytes), need = 0;
    char                    *buf;
    long                     got;

    /* A private copy so a read past the end shows up under ASan. */
    buf = malloc(len + 1);
    memcpy(buf, pc->bytes, len);
    got = mcp_parse(buf, len, 1048576, &r, &need);
    ck_assert_msg(got == pc->want, "case %d \"%s\": got %ld want %ld", _i, pc->bytes, got,
                  pc->want);
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
    char             buf[MCR_LINE_MAX + 10];
    struct mcr_reply r;
    size_t           need;

    /* A reply line that never ends is garbage, not a reason to buffer
     * forever. */
    memset(buf, 'A', sizeof(buf));
    ck_assert_int_eq(mcp_parse(buf, MCR_LINE_MAX - 1, 1048576, &r, &need), 0);
    ck_assert_int_eq(mcp_parse(buf, sizeof(buf), 1048576, &r, &need), RINGCACHE_EPROTO);
}
END_TEST

START_TEST(test_parse_stream)
{
    /* A multi-get reply consumed unit by unit, fed one byte at a time. */
    static const char          stream[] = "VALUE a 1 1\r\nx\r\nVALUE bb 2 3 9\r\nyyy\r\nEND\r\n";
    static const enum mcr_kind kinds[] = { MCR_VALUE, MCR_VALUE, MCR_END };
    size_t                     have, off = 0, k = 0, need;
    struct mcr_reply           r;
    long                       got;

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
        { "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
          RINGCACHE_ENONNUMERIC },
        { "SERVER_ERROR object too large for cache\r\n", RINGCACHE_ETOOBIG },
        { "SERVER_ERROR out of memory storing object\r\n", RINGCACHE_ESERVER },
        { "SERVER_ERROR MOVED 4 127.0.0.1:1\r\n", RINGCACHE_EMOVED },
        { "SERVER_ERROR TRYAGAIN 4\r\n", RINGCACHE_ETRYAGAIN },
        { "SERVER_ERROR UNAVAILABLE owner b is down: writes to its keys fail until it is "
          "declared failed\r\n",
          RINGCACHE_EUNAVAILABLE },
        { "SERVER_ERROR replica unavailable\r\n", RINGCACHE_EUNAVAILABLE },
        { "SERVER_ERROR MOVED 4\r\n", RINGCACHE_ESERVER },
        { "STORED\r\n", 0 },
    };
    struct mcr_reply r;
    size_t           i, need;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ck_assert(mcp_parse(cases[i].line, strlen(cases[i].line), 10, &r, &need) > 0);
        ck_assert_msg(mcp_error_code(&r) == cases[i].code, "case %zu", i);
    }
}
END_TEST

START_TEST(test_format_storage)
{
    char   buf[MCP_LINE_MAX];
    size_t n;

    n = mcp_format_storage(buf, "set", "key", 3, 7, -1, 5, false, 0);
    ck_assert_uint_eq(n, strlen("set key 7 -1 5\r\n"));
    ck_assert(memcmp(buf, "set key 7 -1 5\r\n", n) == 0);
    n = mcp_format_storage(buf, "cas", "key", 3, UINT32_MAX, 60, 0, true, UINT64_MAX);
    ck_assert_str_eq(buf, "cas key 4294967295 60 0 18446744073709551615\r\n");
    ck_assert_uint_eq(n, strlen(buf));
}
END_TEST

/* mcp_key_fn over an array of C strings. */
static const char *
array_key(void *arg, size_t i, size_t *len)
{
    const char *const *keys = arg;

    *len = strlen(keys[i]);
    return keys[i];
}

START_TEST(test_request_lines)
{
    static const char *const keys[] = { "a", "bb", "user:42" };
    char                     buf[MCP_LINE_MAX], big[300];
    size_t                   n;

#define LINE_IS(call, want)                   \
    do {                                      \
        n = (call);                           \
        ck_assert_uint_eq(n, strlen(want));   \
        ck_assert(memcmp(buf, want, n) == 0); \
    } while (0)
    LINE_IS(mcp_format_get(buf, false, "k", 1), "get k\r\n");
    LINE_IS(mcp_format_get(buf, true, "key", 3), "gets key\r\n");
    LINE_IS(mcp_format_delete(buf, "k", 1), "delete k\r\n");
    LINE_IS(mcp_format_arith(buf, true, "n", 1, UINT64_MAX), "incr n 18446744073709551615\r\n");
    LINE_IS(mcp_format_arith(buf, false, "n", 1, 0), "decr n 0\r\n");
    LINE_IS(mcp_format_touch(buf, "k", 1, -1), "touch k -1\r\n");
    LINE_IS(mcp_format_touch(buf, "k", 1, INT32_MAX), "touch k 2147483647\r\n");
    LINE_IS(mcp_format_declare(buf, UINT64_MAX), "epoch 18446744073709551615\r\n");
    ck_assert_uint_lt(n, MCP_DECLARE_MAX);
    LINE_IS(mcp_format_epoch_poll(buf), "epoch\r\n");
    LINE_IS(mcp_format_config(buf), "config\r\n");
    LINE_IS(mcp_format_stats(buf, NULL), "stats\r\n");
    LINE_IS(mcp_format_stats(buf, ""), "stats\r\n");
    LINE_IS(mcp_format_stats(buf, "hotkeys"), "stats hotkeys\r\n");
    ck_assert_uint_eq(mcp_format_stats(buf, "hot keys"), 0);
    ck_assert_uint_eq(mcp_format_stats(buf, "x\r\nflush_all"), 0);
    ck_assert_uint_eq(mcp_format_stats(buf, "abcdefghijklmnopqrstuvwxyzabcdefg"), 0);
    ck_assert_uint_eq(mcp_multiget_size(3, 10), strlen("gets a bb user:42\r\n"));
    LINE_IS(mcp_format_multiget(buf, true, 3, array_key, (void *)keys), "gets a bb user:42\r\n");
    LINE_IS(mcp_format_multiget(buf, false, 1, array_key, (void *)keys), "get a\r\n");
#undef LINE_IS
    /* A key that cannot be one gives nothing to send (the caller's key
     * check rejects it before anything is). */
    memset(big, 'k', sizeof(big));
    ck_assert_uint_eq(mcp_format_get(buf, false, big, 251), 0);
    ck_assert_uint_eq(mcp_format_delete(buf, NULL, 1), 0);
    ck_assert_uint_eq(mcp_format_arith(buf, true, big, sizeof(big), 1), 0);
    ck_assert_uint_eq(mcp_format_touch(buf, big, SIZE_MAX, 1), 0);
    ck_assert_uint_gt(mcp_format_get(buf, false, big, 250), 250);
}
END_TEST

/*
 * strerror
 */

START_TEST(test_strerror_every_code)
{
    const char *unknown = ringcache_strerror(-1000);
    int         a, b;

    ck_assert_ptr_nonnull(unknown);
    ck_assert_str_eq(ringcache_strerror(1), unknown);
    ck_assert_str_eq(ringcache_strerror(RINGCACHE_ERRNO_MIN - 1), unknown);
    for (a = RINGCACHE_ERRNO_MIN; a <= 0; a++) {
        const char *s = ringcache_strerror(a);

        ck_assert_ptr_nonnull(s);
        ck_assert_msg(strcmp(s, unknown) != 0, "code %d has no message", a);
        for (b = a + 1; b <= 0; b++) {
            ck_assert_msg(strcmp(s, ringcache_strerror(b)) != 0, "codes %d and %d share a message",
                          a, b);
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
    struct ring         *r;
    char                 err[256];

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
make_keys(struct route_key *keys, char (*names)[32], const struct ring *r, uint32_t replicas)
{
    size_t i;

    for (i = 0; i < N_GROUP_KEYS; i++) {
        snprintf(names[i], 32, "key:%zu", i);
        memset(&keys[i], 0, sizeof(keys[i]));
        keys[i].key = names[i];
        keys[i].len = strlen(names[i]);
        keys[i].n_owners = route_owners(r, replicas, keys[i].key, keys[i].len, keys[i].owners);
    }
}

START_TEST(test_route_owners_is_ring_locate)
{
    struct ring *r = build_ring(three_members);
    uint32_t     mine[RING_R_MAX], theirs[8], n;
    char         key[32];
    int          i;

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
    struct ring            *r = build_ring(three_members);
    static struct route_key keys[N_GROUP_KEYS];
    static char             names[N_GROUP_KEYS][32];
    struct usable_mask      u = { .mask = 7 };
    struct route_plan       p;
    uint32_t                g, primary[1];
    size_t                  j, seen = 0, prev;
    int                     per_node[3] = { 0, 0, 0 };

    make_keys(keys, names, r, 1);
    keys[7].done = true; /* answered keys are skipped */
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
    static const char       r2[] = "epoch 1\nvnodes 160\nreplicas 2\n"
                                   "node a 127.0.0.1:1\nnode b 127.0.0.1:2\nnode c 127.0.0.1:3\n";
    struct ring            *r = build_ring(r2);
    static struct route_key keys[N_GROUP_KEYS];
    static char             names[N_GROUP_KEYS][32];
    struct usable_mask      u = { .mask = 5 }; /* node 1 (b) is down */
    struct route_plan       p;
    uint32_t                g;
    size_t                  j;

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
    struct ringcache        *rc = NULL;
    struct ringcache_options o;
    char                     err[256] = "";
    const char              *bad_seed[] = { "no-port-here" };

    ck_assert_int_eq(
        ringcache_new_members_text(&rc, "node x\n", 7, "bad.members", NULL, err, sizeof(err)),
        RINGCACHE_EMEMBERS);
    ck_assert_ptr_null(rc);
    ck_assert_msg(strstr(err, "bad.members") != NULL, "err: %s", err);
    ck_assert_int_eq(
        ringcache_new_members_file(&rc, "/nonexistent/x.members", NULL, err, sizeof(err)),
        RINGCACHE_EMEMBERS);
    ck_assert_msg(strstr(err, "/nonexistent/x.members") != NULL, "err: %s", err);
    ck_assert_int_eq(ringcache_new_seeds(&rc, bad_seed, 1, NULL, err, sizeof(err)),
                     RINGCACHE_EMEMBERS);
    ringcache_options_init(&o);
    o.op_timeout_ms = 0;
    ck_assert_int_eq(ringcache_new_members_text(&rc, three_members, strlen(three_members), "t", &o,
                                                err, sizeof(err)),
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
    socklen_t               len = sizeof(ss);
    int                     fd;

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
    if (bind(fd, (struct sockaddr *)&ss,
             family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
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
    char                 seed4[64], seed6[64], id4[64], id6[64];
    const char          *seeds[] = { seed4, seed6 };
    struct ringcache    *rc = NULL;
    struct ring_members *m;
    struct ring         *r;
    size_t               owner;
    char                 err[256];
    uint16_t             p4, p6;
    int                  i, fd4, fd6;

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
count_mget(void *arg, size_t index, int node, int status, const struct ringcache_value *v)
{
    (void)arg;
    (void)index;
    (void)node;
    (void)status;
    (void)v;
    mget_calls++;
}

START_TEST(test_validation_before_sending)
{
    /* Port 1 on loopback: were anything sent, the call would fail with an
     * I/O or down error instead of the validation errors asserted here. */
    const char              *members = "epoch 1\nvnodes 160\nreplicas 1\nnode a 127.0.0.1:1\n";
    const char              *keys[] = { "good", "bad key" };
    struct ringcache_options o;
    struct ringcache        *rc = NULL;
    struct ringcache_value   v;
    char                     big[64];
    uint64_t                 n;

    ringcache_options_init(&o);
    o.max_value_bytes = 32;
    /* From a membership (a seeds handle asks the seed for config). */
    ck_assert_int_eq(ringcache_new_members_text(&rc, members, strlen(members), "t", &o, NULL, 0),
                     0);
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
    struct mcr_reply r;
    size_t           need;
    const char *e = "EPOCH 12 13\r\n", *m = "SERVER_ERROR MOVED 18446744073709551615 [::1]:5\r\n";
    const char *t = "SERVER_ERROR TRYAGAIN 9\r\n", *c = "CONFIG 5 3\r\nxyz\r\nEND\r\n";

    ck_assert_int_eq(mcp_parse(e, strlen(e), 10, &r, &need), (long)strlen(e));
    ck_assert(r.kind == MCR_EPOCH && r.epoch == 12 && r.pending == 13);
    ck_assert_int_eq(mcp_parse(m, strlen(m), 10, &r, &need), (long)strlen(m));
    ck_assert(r.kind == MCR_MOVED && r.epoch == UINT64_MAX);
    ck_assert(r.key_len == 7 && memcmp(r.key, "[::1]:5", 7) == 0);
    ck_assert_int_eq(mcp_parse(t, strlen(t), 10, &r, &need), (long)strlen(t));
    ck_assert(r.kind == MCR_TRYAGAIN && r.epoch == 9);
    /* CONFIG data is bounded by max_value like a VALUE; END is its own unit. */
    ck_assert_int_eq(mcp_parse(c, strlen(c), 10, &r, &need), 17);
    ck_assert(r.kind == MCR_CONFIG && r.epoch == 5 && r.data_len == 3);
    ck_assert_int_eq(mcp_parse(c, strlen(c), 2, &r, &need), RINGCACHE_EPROTO);
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
    tcase_add_test(tc, test_request_lines);
    tcase_add_test(tc, test_parse_cluster_fields);
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
    return s;
}
