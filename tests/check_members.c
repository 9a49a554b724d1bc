/*
 * members suite: the *.members text form. Good inputs parse to the right
 * fields; a table of bad inputs each fails with "t:LINE: reason" at the
 * exact line; format/parse round trips; the editing API validates.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ring/ring.h"
#include "tests/suites.h"

#define HDR  "epoch 1\nvnodes 10\nreplicas 2\n"
#define NODE "node a 127.0.0.1:1\n"

struct bad_case {
    const char *text;
    size_t      len; /* 0: strlen(text) */
    unsigned    line;
    const char *reason; /* a substring of the message */
};

static const struct bad_case bad_cases[] = {
    { HDR NODE "node a 127.0.0.1:2\n", 0, 5, "duplicate node id 'a'" },
    { HDR "node b h:1\n" NODE "node b h:3\n", 0, 6, "duplicate node id 'b'" },
    { HDR "node a/b h:1\n", 0, 4, "bad character in node id" },
    { HDR "node caf\xc3\xa9 h:1\n", 0, 4, "bad character in node id" },
    { HDR "node aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa h:1\n", 0, 4,
      "node id longer than 64 bytes" },
    { HDR "node a h:1 weight=0\n", 0, 4, "weight must be 1..1000" },
    { HDR "node a h:1 weight=1001\n", 0, 4, "weight must be 1..1000" },
    { HDR "node a h:1 weight=-1\n", 0, 4, "weight: not an unsigned" },
    { HDR "node a h:1 weight=\n", 0, 4, "weight: not an unsigned" },
    { HDR "node a h:1 weight=99999999999999999999999\n", 0, 4, "weight: not an unsigned" },
    { HDR "node a h:1 weight=1 weight=2\n", 0, 4, "weight given twice" },
    { HDR "node a h:1 zone=x zone=y\n", 0, 4, "zone given twice" },
    { HDR "node a h:1 zone=\n", 0, 4, "empty zone" },
    { HDR "node a h:1 zone=a/b\n", 0, 4, "bad character in zone" },
    { HDR "node a h:1 color=red\n", 0, 4, "unknown option 'color=red'" },
    { HDR "node a h:1 weight=1 zone=z extra\n", 0, 4, "too many fields" },
    { HDR "node a\n", 0, 4, "expected 'node ID ADDR" },
    { HDR "node\n", 0, 4, "expected 'node ID ADDR" },
    { "epoch 1\nvnodes 0\nreplicas 1\n" NODE, 0, 2, "vnodes must be 1..65535" },
    { "epoch 1\nvnodes 65536\nreplicas 1\n" NODE, 0, 2, "vnodes must be 1..65535" },
    { "epoch 1\nvnodes 10\nreplicas 0\n" NODE, 0, 3, "replicas must be 1..8" },
    { "epoch 1\nvnodes 10\nreplicas 9\n" NODE, 0, 3, "replicas must be 1..8" },
    { "epoch 1\nvnodes 10\nreplicas 65535\n" NODE, 0, 3, "replicas must be 1..8" },
    { "epoch 0\nvnodes 10\nreplicas 1\n" NODE, 0, 1, "epoch 0 is reserved" },
    { "epoch 18446744073709551616\n", 0, 1, "epoch: not an unsigned" },
    { "epoch -3\n", 0, 1, "epoch: not an unsigned" },
    { "epoch 0x10\n", 0, 1, "epoch: not an unsigned" },
    { "epoch 1 2\n", 0, 1, "'epoch' takes exactly one number" },
    { "epoch\n", 0, 1, "'epoch' takes exactly one number" },
    { "vnodes 10\nreplicas 1\n" NODE, 0, 3, "missing 'epoch N' line" },
    { "epoch 1\nreplicas 1\n" NODE "\n# end\n", 0, 5, "missing 'vnodes V' line" },
    { "epoch 1\nvnodes 10\n" NODE, 0, 3, "missing 'replicas R' line" },
    { HDR, 0, 3, "no 'node' line" },
    { "", 0, 1, "missing 'epoch N' line" },
    { "epoch 1\nepoch 2\n", 0, 2, "repeated 'epoch' line (first on line 1)" },
    { HDR "vnodes 20\n", 0, 4, "repeated 'vnodes' line" },
    { HDR "# ok\n\nreplicas 3\n", 0, 6, "repeated 'replicas' line" },
    { HDR "nodes a h:1\n", 0, 4, "unknown keyword 'nodes'" },
    { HDR "Node a h:1\n", 0, 4, "unknown keyword 'Node'" },
    { "epoch 1\nhello\n", 0, 2, "unknown keyword 'hello'" },
    { HDR "node a 127.0.0.1\n", 0, 4, "expected host:port" },
    { HDR "node a 127.0.0.1:0\n", 0, 4, "port must be 1..65535" },
    { HDR "node a 127.0.0.1:65536\n", 0, 4, "port must be 1..65535" },
    { HDR "node a 127.0.0.1:\n", 0, 4, "port must be 1..65535" },
    { HDR "node a 127.0.0.1:12ab\n", 0, 4, "port must be 1..65535" },
    { HDR "node a :11211\n", 0, 4, "empty host" },
    { HDR "node a ::1:11211\n", 0, 4, "IPv6 address goes in brackets" },
    { HDR "node a fe80::1:11211\n", 0, 4, "IPv6 address goes in brackets" },
    { HDR "node a h:1:2\n", 0, 4, "IPv6 address goes in brackets" },
    { HDR "node a [::1:11211\n", 0, 4, "'[' without ']'" },
    { HDR "node a [::1]\n", 0, 4, "expected [v6]:port" },
    { HDR "node a [::1]x11211\n", 0, 4, "expected [v6]:port" },
    { HDR "node a [zz::1]:11211\n", 0, 4, "bad IPv6 literal" },
    { HDR "node a []:11211\n", 0, 4, "bad IPv6 literal" },
    { HDR "node a h\xff:1\n", 0, 4, "bad character in host" },
    { HDR "node a h:1\x01\n", 0, 4, "control character" },
    /* An embedded NUL on line 4 (the length is given, not strlen). */
    { HDR "node a\0 h:1\n", sizeof(HDR "node a\0 h:1\n") - 1, 4, "NUL byte" },
    { "\0", 1, 1, "NUL byte" },
};

/* A line of RING_LINE_MAX + 1 bytes is rejected; RING_LINE_MAX is fine. */
static char *
long_line_text(size_t body, unsigned *line)
{
    char  *t = malloc(body + 200);
    size_t n;

    ck_assert_ptr_nonnull(t);
    n = (size_t)sprintf(t, HDR NODE "#");
    memset(t + n, 'x', body - 1);
    n += body - 1;
    strcpy(t + n, "\n");
    *line = 5;
    return t;
}

START_TEST(parse_bad_table)
{
    const struct bad_case *c = &bad_cases[_i];
    struct ring_members   *m = (struct ring_members *)1;
    char                   err[256], want[64];
    size_t                 len = c->len != 0 ? c->len : strlen(c->text);
    int                    rc;

    rc = ring_members_parse(c->text, len, "t", &m, err, sizeof(err));
    ck_assert_int_eq(rc, RING_EPARSE);
    ck_assert_ptr_null(m);
    snprintf(want, sizeof(want), "t:%u: ", c->line);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "case %d: '%s' does not start with '%s'",
                  _i, err, want);
    ck_assert_msg(strstr(err, c->reason) != NULL, "case %d: '%s' lacks '%s'", _i, err, c->reason);
    ck_assert_ptr_null(strchr(err, '\n'));
}
END_TEST

START_TEST(parse_long_line)
{
    struct ring_members *m = NULL;
    char                 err[256];
    unsigned             line;
    char                *t;

    t = long_line_text(RING_LINE_MAX, &line);
    ck_assert_int_eq(ring_members_parse(t, strlen(t), "t", &m, err, sizeof(err)), RING_OK);
    ring_members_free(m);
    free(t);
    t = long_line_text(RING_LINE_MAX + 1, &line);
    ck_assert_int_eq(ring_members_parse(t, strlen(t), "t", &m, err, sizeof(err)), RING_EPARSE);
    ck_assert_str_eq(err, "t:5: line longer than 1024 bytes");
    free(t);
}
END_TEST

START_TEST(parse_good)
{
    static const char text[] =
        "# a comment\r\n"
        "\n"
        "  epoch 18446744073709551615   # max\n"
        "vnodes\t65535\n"
        "replicas 8\n"
        "node cache-a 127.0.0.1:11311\n"
        "node cache-b 127.0.0.1:11312 weight=2 zone=east\n"
        "node cache-c [::1]:11313 zone=west weight=1000\r\n"
        "node Z.9_x:y-1 host-name.example:65535\n"
        "node aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa h:1"; /* no final
                                                                                        newline */
    struct ring_members *m = NULL;
    char                 err[256];

    ck_assert_int_eq(ring_members_parse(text, sizeof(text) - 1, "g", &m, err, sizeof(err)),
                     RING_OK);
    ck_assert_uint_eq(m->epoch, UINT64_MAX);
    ck_assert_uint_eq(m->vnodes, 65535);
    ck_assert_uint_eq(m->replicas, 8);
    ck_assert_uint_eq(m->n_nodes, 5);
    ck_assert_str_eq(m->nodes[0].id, "cache-a");
    ck_assert_str_eq(m->nodes[0].addr, "127.0.0.1:11311");
    ck_assert_uint_eq(m->nodes[0].weight, 1);
    ck_assert_str_eq(m->nodes[0].zone, "");
    ck_assert_uint_eq(m->nodes[1].weight, 2);
    ck_assert_str_eq(m->nodes[1].zone, "east");
    ck_assert_str_eq(m->nodes[2].addr, "[::1]:11313");
    ck_assert_uint_eq(m->nodes[2].weight, 1000);
    ck_assert_str_eq(m->nodes[2].zone, "west");
    ck_assert_str_eq(m->nodes[3].id, "Z.9_x:y-1");
    ck_assert_uint_eq(strlen(m->nodes[4].id), 64);
    ck_assert_int_eq(ring_members_find(m, "cache-c"), 2);
    ck_assert_int_eq(ring_members_find(m, "cache"), -1);
    ring_members_free(m);
}
END_TEST

/* parse(format(m)) == m, and format is stable. */
static void
assert_round_trip(const struct ring_members *m)
{
    struct ring_members *back = NULL;
    char                 err[256], *a, *b;
    size_t               need = ring_members_format(m, NULL, 0), need2;
    uint32_t             i;

    a = malloc(need + 1);
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(ring_members_format(m, a, need + 1), need);
    ck_assert_uint_eq(strlen(a), need);
    ck_assert_int_eq(ring_members_parse(a, need, "rt", &back, err, sizeof(err)), RING_OK);
    ck_assert_uint_eq(back->epoch, m->epoch);
    ck_assert_uint_eq(back->vnodes, m->vnodes);
    ck_assert_uint_eq(back->replicas, m->replicas);
    ck_assert_uint_eq(back->n_nodes, m->n_nodes);
    for (i = 0; i < m->n_nodes; i++) {
        ck_assert_str_eq(back->nodes[i].id, m->nodes[i].id);
        ck_assert_str_eq(back->nodes[i].addr, m->nodes[i].addr);
        ck_assert_str_eq(back->nodes[i].zone, m->nodes[i].zone);
        ck_assert_uint_eq(back->nodes[i].weight, m->nodes[i].weight);
    }
    need2 = ring_members_format(back, NULL, 0);
    b = malloc(need2 + 1);
    ck_assert_ptr_nonnull(b);
    ring_members_format(back, b, need2 + 1);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    ring_members_free(back);
}

START_TEST(format_round_trip)
{
    static const char *vectors[] = { "one", "three", "weighted", "zones", "twozones", "hundred" };
    uint64_t           s = 12345;
    size_t             i;
    int                t;

    for (i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
        char                 path[512], err[256], *text;
        struct ring_members *m = NULL;
        FILE                *f;
        long                 n;

        snprintf(path, sizeof(path), "%s/tests/vectors/ring-v1/%s.members", RC_SRCDIR, vectors[i]);
        f = fopen(path, "rb");
        ck_assert_ptr_nonnull(f);
        fseek(f, 0, SEEK_END);
        n = ftell(f);
        rewind(f);
        text = malloc((size_t)n + 1);
        ck_assert_uint_eq(fread(text, 1, (size_t)n, f), (size_t)n);
        fclose(f);
        ck_assert_int_eq(ring_members_parse(text, (size_t)n, path, &m, err, sizeof(err)), RING_OK);
        assert_round_trip(m);
        ring_members_free(m);
        free(text);
    }
    /* Random memberships (seeded): every field combination. */
    for (t = 0; t < 200; t++) {
        struct ring_members *m = ring_members_new();
        uint32_t             n, j;

        s = s * 6364136223846793005ull + 1442695040888963407ull;
        m->epoch = 1 + (s >> 11);
        m->vnodes = 1 + (uint32_t)((s >> 20) % 65535);
        m->replicas = 1 + (uint32_t)((s >> 40) % RING_R_MAX);
        n = 1 + (uint32_t)((s >> 33) % 30);
        for (j = 0; j < n; j++) {
            char id[32], addr[64], zone[16];

            s = s * 6364136223846793005ull + 1442695040888963407ull;
            snprintf(id, sizeof(id), "n-%u.%u", t, j);
            if ((s >> 60) & 1) {
                snprintf(addr, sizeof(addr), "[fd00::%x]:%u", (unsigned)(s >> 16) & 0xffff,
                         1 + (unsigned)((s >> 8) % 65535));
            } else {
                snprintf(addr, sizeof(addr), "host%u.example:%u", (unsigned)(s >> 30) % 100,
                         1 + (unsigned)((s >> 8) % 65535));
            }
            snprintf(zone, sizeof(zone), (s >> 59) & 1 ? "z%u" : "", (unsigned)(s >> 50) % 4);
            ck_assert_int_eq(ring_members_add(m, id, addr, 1 + (uint32_t)((s >> 40) % 1000), zone),
                             RING_OK);
        }
        assert_round_trip(m);
        ring_members_free(m);
    }
}
END_TEST

START_TEST(format_truncates_like_snprintf)
{
    struct ring_members *m = ring_members_new();
    char                 small[10];
    size_t               need;

    m->epoch = 7;
    ck_assert_int_eq(ring_members_add(m, "a", "h:1", 3, "z"), RING_OK);
    need = ring_members_format(m, small, sizeof(small));
    ck_assert_str_eq(small, "epoch 7\nv");
    ck_assert_uint_eq(need,
                      strlen("epoch 7\nvnodes 160\nreplicas 1\nnode a h:1 weight=3 zone=z\n"));
    ring_members_free(m);
}
END_TEST

START_TEST(edit_api_validates)
{
    struct ring_members *m = ring_members_new(), *d;
    char                 err[256];

    ck_assert_uint_eq(m->vnodes, RING_VNODES_DEFAULT);
    ck_assert_uint_eq(m->replicas, 1);
    /* An empty membership is not valid (nothing to place keys on). */
    ck_assert_int_eq(ring_members_validate(m, err, sizeof(err)), RING_EINVAL);
    ck_assert_str_eq(err, "no nodes");
    ck_assert_int_eq(ring_members_add(m, "a", "h:1", 1, NULL), RING_OK);
    ck_assert_int_eq(ring_members_add(m, "a", "h:2", 1, NULL), RING_EINVAL);
    ck_assert_int_eq(ring_members_add(m, "b c", "h:2", 1, NULL), RING_EINVAL);
    ck_assert_int_eq(ring_members_add(m, "b", "h", 1, NULL), RING_EINVAL);
    ck_assert_int_eq(ring_members_add(m, "b", "h:1", 0, NULL), RING_EINVAL);
    ck_assert_int_eq(ring_members_add(m, "b", "h:1", 1001, NULL), RING_EINVAL);
    ck_assert_int_eq(ring_members_add(m, "b", "h:1", 1, "bad zone"), RING_EINVAL);
    ck_assert_int_eq(ring_members_add(m, "b", "[::2]:7", 1000, "z"), RING_OK);
    ck_assert_int_eq(ring_members_validate(m, err, sizeof(err)), RING_OK);
    d = ring_members_dup(m);
    ck_assert_int_eq(ring_members_remove(m, "a"), RING_OK);
    ck_assert_int_eq(ring_members_remove(m, "a"), RING_ENOENT);
    ck_assert_uint_eq(m->n_nodes, 1);
    ck_assert_str_eq(m->nodes[0].id, "b");
    ck_assert_uint_eq(d->n_nodes, 2);
    /* Fields broken behind the API's back are caught by validate. */
    strcpy(d->nodes[1].id, "a");
    ck_assert_int_eq(ring_members_validate(d, err, sizeof(err)), RING_EINVAL);
    ck_assert_str_eq(err, "duplicate node id 'a'");
    strcpy(d->nodes[1].id, "b");
    d->replicas = 0;
    ck_assert_int_eq(ring_members_validate(d, err, sizeof(err)), RING_EINVAL);
    ck_assert_str_eq(err, "replicas must be 1..8");
    d->replicas = 9;
    ck_assert_int_eq(ring_members_validate(d, err, sizeof(err)), RING_EINVAL);
    ck_assert_str_eq(err, "replicas must be 1..8");
    d->replicas = 1;
    d->nodes[0].weight = 0;
    ck_assert_int_eq(ring_members_validate(d, err, sizeof(err)), RING_EINVAL);
    ck_assert_str_eq(err, "node 0: weight must be 1..1000");
    ring_members_free(d);
    ring_members_free(m);
}
END_TEST

Suite *
members_suite(void)
{
    Suite *s = suite_create("members");
    TCase *tc = tcase_create("parse");

    tcase_add_loop_test(tc, parse_bad_table, 0, (int)(sizeof(bad_cases) / sizeof(bad_cases[0])));
    tcase_add_test(tc, parse_long_line);
    tcase_add_test(tc, parse_good);
    suite_add_tcase(s, tc);
    tc = tcase_create("format");
    tcase_add_test(tc, format_round_trip);
    tcase_add_test(tc, format_truncates_like_snprintf);
    tcase_add_test(tc, edit_api_validates);
    suite_add_tcase(s, tc);
    return s;
}
