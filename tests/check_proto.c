/*
 * proto suite: the cluster port's frame decoder (every truncation, every
 * rejection) and the membership's wire form (lossless round trip of every
 * vector membership, garbage rejected).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/members_pb.h"
#include "ring/ring.h"
#include "tests/suites.h"

#define CLUSTER 0x0123456789abcdefULL

static size_t
make_frame(uint8_t *buf, enum frame_type type, uint64_t cluster, const char *payload)
{
    size_t n = strlen(payload);

    frame_header_write(buf, type, cluster, (uint32_t)n);
    memcpy(buf + FRAME_HEADER_SIZE, payload, n);
    return FRAME_HEADER_SIZE + n;
}

START_TEST(test_frame_roundtrip)
{
    uint8_t      buf[128];
    struct frame f;
    size_t       n, used = 0;

    n = make_frame(buf, FRAME_MEMBERSHIP, CLUSTER, "hello");
    ck_assert_int_eq(frame_decode(buf, n, CLUSTER, 1024, &f, &used), FRAME_OK);
    ck_assert_uint_eq(used, n);
    ck_assert_uint_eq(f.type, FRAME_MEMBERSHIP);
    ck_assert_uint_eq(f.length, 5);
    ck_assert_mem_eq(f.payload, "hello", 5);
}
END_TEST

START_TEST(test_frame_truncated_everywhere)
{
    uint8_t      buf[128];
    struct frame f;
    size_t       n, cut, used;

    n = make_frame(buf, FRAME_HANDOFF_BATCH, CLUSTER, "0123456789");
    for (cut = 0; cut < n; cut++) {
        ck_assert_int_eq(frame_decode(buf, cut, CLUSTER, 1024, &f, &used), FRAME_EAGAIN);
    }
}
END_TEST

START_TEST(test_frame_back_to_back)
{
    uint8_t      buf[256];
    struct frame f;
    size_t       n, used;

    n = make_frame(buf, FRAME_HELLO, CLUSTER, "a");
    n += make_frame(buf + n, FRAME_ADMIN_REQUEST, CLUSTER, "bcd");
    ck_assert_int_eq(frame_decode(buf, n, CLUSTER, 1024, &f, &used), FRAME_OK);
    ck_assert_uint_eq(f.type, FRAME_HELLO);
    ck_assert_int_eq(frame_decode(buf + used, n - used, CLUSTER, 1024, &f, &used), FRAME_OK);
    ck_assert_uint_eq(f.type, FRAME_ADMIN_REQUEST);
    ck_assert_mem_eq(f.payload, "bcd", 3);
}
END_TEST

START_TEST(test_frame_rejections)
{
    uint8_t      buf[128];
    struct frame f;
    size_t       n, used;

    n = make_frame(buf, FRAME_HELLO, CLUSTER, "x");
    buf[0] = 'G'; /* e.g. an HTTP or memcached client on the wrong port */
    ck_assert_int_eq(frame_decode(buf, 1, CLUSTER, 1024, &f, &used), FRAME_EMAGIC);
    n = make_frame(buf, FRAME_HELLO, CLUSTER, "x");
    buf[2] = 2;
    ck_assert_int_eq(frame_decode(buf, 3, CLUSTER, 1024, &f, &used), FRAME_EVERSION);
    n = make_frame(buf, FRAME_HELLO, CLUSTER, "x");
    buf[3] = 0;
    ck_assert_int_eq(frame_decode(buf, 4, CLUSTER, 1024, &f, &used), FRAME_ETYPE);
    buf[3] = FRAME_TYPE_END;
    ck_assert_int_eq(frame_decode(buf, n, CLUSTER, 1024, &f, &used), FRAME_ETYPE);
    n = make_frame(buf, FRAME_HELLO, CLUSTER + 1, "x");
    ck_assert_int_eq(frame_decode(buf, n, CLUSTER, 1024, &f, &used), FRAME_ECLUSTER);
    /* Too big is known from the header alone: no payload is waited for. */
    frame_header_write(buf, FRAME_HANDOFF_BATCH, CLUSTER, 1025);
    ck_assert_int_eq(frame_decode(buf, FRAME_HEADER_SIZE, CLUSTER, 1024, &f, &used), FRAME_ETOOBIG);
    frame_header_write(buf, FRAME_HANDOFF_BATCH, CLUSTER, 0xffffffffu);
    ck_assert_int_eq(frame_decode(buf, FRAME_HEADER_SIZE, CLUSTER, 0xffffffffu, &f, &used),
                     FRAME_ETOOBIG);
    ck_assert_str_ne(frame_strerror(FRAME_ECLUSTER), frame_strerror(FRAME_ETOOBIG));
}
END_TEST

static struct ring_members *
load_members(const char *name)
{
    char                 path[512], err[256];
    struct ring_members *m = NULL;
    char                *text;
    long                 len;
    FILE                *f;

    snprintf(path, sizeof(path), "%s/tests/vectors/ring-v1/%s.members", RC_SRCDIR, name);
    f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    fseek(f, 0, SEEK_SET);
    text = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(text);
    ck_assert_uint_eq(fread(text, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    ck_assert_msg(ring_members_parse(text, (size_t)len, path, &m, err, sizeof(err)) == RING_OK,
                  "%s", err);
    free(text);
    return m;
}

static const char *const vector_members[] = {
    "one", "three", "weighted", "zones", "twozones", "hundred",
};

START_TEST(test_members_wire_roundtrip)
{
    struct ring_members *m, *back = NULL;
    char                 err[256], *t1, *t2;
    size_t               len, n1, n2;
    uint8_t             *buf;

    m = load_members(vector_members[_i]);
    buf = members_pb_pack(m, &len);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(members_pb_unpack(buf, len, &back, err, sizeof(err)), RING_OK);
    /* Lossless: the text forms are byte-identical. */
    n1 = ring_members_format(m, NULL, 0);
    n2 = ring_members_format(back, NULL, 0);
    ck_assert_uint_eq(n1, n2);
    t1 = malloc(n1 + 1);
    t2 = malloc(n2 + 1);
    ring_members_format(m, t1, n1 + 1);
    ring_members_format(back, t2, n2 + 1);
    ck_assert_str_eq(t1, t2);
    free(t1);
    free(t2);
    free(buf);
    ring_members_free(m);
    ring_members_free(back);
}
END_TEST

START_TEST(test_members_wire_rejects)
{
    static const uint8_t garbage[] = { 0xff, 0xff, 0xff, 0xff, 0x0f };
    struct ring_members *m, *back = NULL;
    char                 err[256];
    size_t               len;
    uint8_t             *buf;

    ck_assert_int_eq(members_pb_unpack(garbage, sizeof(garbage), &back, err, sizeof(err)),
                     RING_EPARSE);
    ck_assert_ptr_null(back);
    /* Valid protobuf, invalid content: a duplicate id. */
    m = load_members("three");
    ck_assert_int_gt(m->n_nodes, 1);
    memcpy(m->nodes[1].id, m->nodes[0].id, sizeof(m->nodes[0].id));
    buf = members_pb_pack(m, &len);
    ck_assert_int_eq(members_pb_unpack(buf, len, &back, err, sizeof(err)), RING_EPARSE);
    ck_assert_ptr_null(back);
    ck_assert_ptr_nonnull(strstr(err, "membership"));
    free(buf);
    /* vnodes 0 is refused on the wire as in the text form. */
    m->nodes[1].id[0] ^= 1;
    m->vnodes = 0;
    buf = members_pb_pack(m, &len);
    ck_assert_int_eq(members_pb_unpack(buf, len, &back, err, sizeof(err)), RING_EPARSE);
    free(buf);
    ring_members_free(m);
}
END_TEST

Suite *
proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *tc;

    tc = tcase_create("frame");
    tcase_add_test(tc, test_frame_roundtrip);
    tcase_add_test(tc, test_frame_truncated_everywhere);
    tcase_add_test(tc, test_frame_back_to_back);
    tcase_add_test(tc, test_frame_rejections);
    suite_add_tcase(s, tc);
    tc = tcase_create("members_wire");
    tcase_add_loop_test(tc, test_members_wire_roundtrip, 0,
                        (int)(sizeof(vector_members) / sizeof(vector_members[0])));
    tcase_add_test(tc, test_members_wire_rejects);
    suite_add_tcase(s, tc);
    return s;
}
