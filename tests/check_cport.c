/*
 * cport suite: the cluster port (server/cport.c) over in-memory
 * connections (cport_adopt, bufferevent pairs), no thread and no socket:
 * what an admin or a peer gets for the requests the fuzz target
 * (tests/fuzz/cport_fuzz.c) found the port mishandling.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proto/frame.h"
#include "proto/ringcache.pb-c.h"
#include "server/cluster.h"
#include "server/cport.h"
#include "server/log.h"
#include "server/store.h"
#include "server/thread.h"
#include "tests/suites.h"

#define CLUSTER "ringcache"
#define TOKEN   "admin-token"

/* One node's cluster port, and up to two clients connected to it. */
struct port {
    char                dir[64];
    struct store       *store;
    struct server       srv;
    struct cluster     *cl;
    struct cport       *cp;
    struct bufferevent *client[2]; /* our ends of the pairs */
};

static int
no_barrier(void *arg)
{
    (void)arg;
    return 0;
}

static void
port_open(struct port *p)
{
    struct store_config cfg = { .mem_limit = 1u << 20, .item_size_max = 64u << 10 };
    char                err[512];

    memset(p, 0, sizeof(*p));
    log_set_level(LOG_ERR);
    strcpy(p->dir, "/tmp/check_cport.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(p->dir));
    p->store = store_new(&cfg);
    ck_assert_ptr_nonnull(p->store);
    p->srv.store = p->store;
    ck_assert_msg(cluster_new(no_barrier, NULL, "a", p->dir, CLUSTER, (const uint8_t *)TOKEN,
                              strlen(TOKEN), &p->cl, err, sizeof(err)) == 0,
                  "cluster_new: %s", err);
    p->cp = cport_new(&p->srv, p->cl, "127.0.0.1", 0);
    ck_assert_ptr_nonnull(p->cp);
}

static void
port_close(struct port *p)
{
    char cmd[128];
    int  i;

    for (i = 0; i < 2; i++) {
        if (p->client[i] != NULL) {
            bufferevent_free(p->client[i]);
        }
    }
    cport_free(p->cp);
    cluster_free(p->cl);
    store_free(p->store);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p->dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Connect client i. */
static void
port_connect(struct port *p, int i)
{
    struct bufferevent *pair[2];

    ck_assert_int_eq(bufferevent_pair_new(cport_base(p->cp), 0, pair), 0);
    ck_assert_int_eq(cport_adopt(p->cp, pair[0]), 0);
    bufferevent_enable(pair[1], EV_READ | EV_WRITE);
    p->client[i] = pair[1];
}

/* Client i sends one message as a frame of type t, and the port runs. */
static void
send_msg(struct port *p, int i, enum frame_type t, const ProtobufCMessage *m)
{
    size_t   n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(FRAME_HEADER_SIZE + n);
    int      k;

    ck_assert_ptr_nonnull(buf);
    frame_header_write(buf, t, frame_cluster_id(CLUSTER), (uint32_t)n);
    protobuf_c_message_pack(m, buf + FRAME_HEADER_SIZE);
    bufferevent_write(p->client[i], buf, FRAME_HEADER_SIZE + n);
    free(buf);
    for (k = 0; k < 4; k++) {
        event_base_loop(cport_base(p->cp), EVLOOP_NONBLOCK);
    }
}

/* The next frame the port sent client i (its type, or 0 for none); its
 * payload unpacked as desc into *out (free it), which must succeed. */
static int
next_reply(struct port *p, int i, const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out)
{
    struct evbuffer *in = bufferevent_get_input(p->client[i]);
    size_t           len = evbuffer_get_length(in), used;
    struct frame     f;
    int              rc;

    *out = NULL;
    if (len == 0) {
        return 0;
    }
    rc = frame_decode(evbuffer_pullup(in, (ssize_t)len), len, frame_cluster_id(CLUSTER),
                      FRAME_PAYLOAD_MAX, &f, &used);
    ck_assert_int_eq(rc, FRAME_OK);
    if (desc != NULL) {
        *out = protobuf_c_message_unpack(desc, NULL, f.length, f.payload);
        ck_assert_ptr_nonnull(*out);
    }
    rc = f.type;
    evbuffer_drain(in, used);
    return rc;
}

static void
hello(struct port *p, int i, const char *cluster, Ringcache__Hello__Role role)
{
    Ringcache__Hello h = RINGCACHE__HELLO__INIT;

    h.cluster = (char *)cluster;
    h.token.data = (uint8_t *)TOKEN;
    h.token.len = strlen(TOKEN);
    h.role = role;
    h.node_id = (char *)"check";
    send_msg(p, i, FRAME_HELLO, &h.base);
}

/* An admin request, and the AdminReply it gets (free it). */
static Ringcache__AdminReply *
admin(struct port *p, Ringcache__AdminRequest *rq)
{
    ProtobufCMessage *m;

    send_msg(p, 0, FRAME_ADMIN_REQUEST, &rq->base);
    ck_assert_int_eq(next_reply(p, 0, &ringcache__admin_reply__descriptor, &m), FRAME_ADMIN_REPLY);
    return (Ringcache__AdminReply *)m;
}

static Ringcache__Membership *
membership(uint64_t epoch, const char *const *ids, size_t n)
{
    static Ringcache__Node       nodes[4];
    static Ringcache__Node      *ptrs[4];
    static char                  addr[4][32];
    static Ringcache__Membership m;
    size_t                       i;

    m = (Ringcache__Membership)RINGCACHE__MEMBERSHIP__INIT;
    m.epoch = epoch;
    m.vnodes = 40;
    m.replicas = 1;
    for (i = 0; i < n; i++) {
        nodes[i] = (Ringcache__Node)RINGCACHE__NODE__INIT;
        nodes[i].id = (char *)ids[i];
        snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%zu", 21001 + i);
        nodes[i].addr = addr[i];
        nodes[i].weight = 1;
        ptrs[i] = &nodes[i];
    }
    m.nodes = ptrs;
    m.n_nodes = n;
    return &m;
}

/* A Fence to a node that sources nothing (it joins; no StartCopy came
 * first): its drain is over at once. It answered from inside the Fence
 * and read that Fence again, and again, until the stack overflowed. Now:
 * one reply, and the next request is answered in turn. */
START_TEST(test_fence_not_source)
{
    static const char *const bc[] = { "b", "c" }, *const abc[] = { "a", "b", "c" };
    struct port              p;
    Ringcache__AdminRequest  rq = RINGCACHE__ADMIN_REQUEST__INIT;
    Ringcache__Commit        commit = RINGCACHE__COMMIT__INIT;
    Ringcache__Prepare       prep = RINGCACHE__PREPARE__INIT;
    Ringcache__Fence         fence = RINGCACHE__FENCE__INIT;
    Ringcache__StatusRequest st = RINGCACHE__STATUS_REQUEST__INIT;
    Ringcache__AdminReply   *r;
    ProtobufCMessage        *m;
    ProtobufCBinaryData      tok = { 2, (uint8_t *)"t1" };

    port_open(&p);
    port_connect(&p, 0);
    hello(&p, 0, CLUSTER, RINGCACHE__HELLO__ROLE__ADMIN);
    ck_assert_int_eq(next_reply(&p, 0, &ringcache__hello__descriptor, &m), FRAME_HELLO);
    protobuf_c_message_free_unpacked(m, NULL);

    rq.req_case = RINGCACHE__ADMIN_REQUEST__REQ_COMMIT;
    commit.membership = membership(1, bc, 2);
    rq.commit = &commit;
    r = admin(&p, &rq);
    ck_assert_msg(r->ok, "init: %s", r->error);
    ringcache__admin_reply__free_unpacked(r, NULL);

    rq.req_case = RINGCACHE__ADMIN_REQUEST__REQ_PREPARE;
    prep.membership = membership(2, abc, 3);
    prep.token = tok;
    prep.from_epoch = 1;
    rq.prepare = &prep;
    r = admin(&p, &rq);
    ck_assert_msg(r->ok, "prepare: %s", r->error);
    ringcache__admin_reply__free_unpacked(r, NULL);

    rq.req_case = RINGCACHE__ADMIN_REQUEST__REQ_FENCE;
    fence.token = tok;
    rq.fence = &fence;
    r = admin(&p, &rq);
    ck_assert_msg(r->ok, "fence: %s", r->error);
    ck_assert_int_eq(r->status->phase, RINGCACHE__PHASE__PHASE_FENCED);
    ringcache__admin_reply__free_unpacked(r, NULL);
    ck_assert_int_eq(next_reply(&p, 0, NULL, &m), 0); /* one reply only */

    rq.req_case = RINGCACHE__ADMIN_REQUEST__REQ_STATUS;
    rq.status = &st;
    r = admin(&p, &rq);
    ck_assert(r->ok);
    ck_assert_uint_eq(r->status->pending_epoch, 2);
    ringcache__admin_reply__free_unpacked(r, NULL);
    ck_assert_int_eq(next_reply(&p, 0, NULL, &m), 0);
    port_close(&p);
}
END_TEST

/* An Error frame that the transport takes at once (a pair does; a socket
 * does when the frame cannot even be queued): the connection was freed
 * inside send_error and its read loop went on with it. Now: one Error,
 * the connection closed, the port still serving the next one. */
START_TEST(test_error_taken_at_once)
{
    static const uint8_t garbage[] = "GET / HTTP/1.1\r\n\r\n";
    struct port          p;
    ProtobufCMessage    *m;
    int                  i;

    port_open(&p);
    port_connect(&p, 0);
    hello(&p, 0, "another-cluster", RINGCACHE__HELLO__ROLE__ADMIN);
    ck_assert_int_eq(next_reply(&p, 0, &ringcache__error__descriptor, &m), FRAME_ERROR);
    ck_assert_str_eq(((Ringcache__Error *)m)->message, "wrong cluster");
    protobuf_c_message_free_unpacked(m, NULL);
    ck_assert_int_eq(next_reply(&p, 0, NULL, &m), 0);

    port_connect(&p, 1);
    bufferevent_write(p.client[1], garbage, sizeof(garbage) - 1);
    for (i = 0; i < 4; i++) {
        event_base_loop(cport_base(p.cp), EVLOOP_NONBLOCK);
    }
    ck_assert_int_eq(next_reply(&p, 1, &ringcache__error__descriptor, &m), FRAME_ERROR);
    ck_assert_ptr_nonnull(strstr(((Ringcache__Error *)m)->message, "bad frame"));
    protobuf_c_message_free_unpacked(m, NULL);

    bufferevent_free(p.client[1]);
    port_connect(&p, 1);
    hello(&p, 1, CLUSTER, RINGCACHE__HELLO__ROLE__PEER);
    ck_assert_int_eq(next_reply(&p, 1, &ringcache__hello__descriptor, &m), FRAME_HELLO);
    protobuf_c_message_free_unpacked(m, NULL);
    port_close(&p);
}
END_TEST

Suite *
cport_suite(void)
{
    Suite *s = suite_create("cport");
    TCase *tc = tcase_create("cport");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_fence_not_source);
    tcase_add_test(tc, test_error_taken_at_once);
    suite_add_tcase(s, tc);
    return s;
}
