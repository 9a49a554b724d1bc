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
#include "ring/ring.h"
#include "server/arcset.h"
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
    log_set_level(LOG_QUIET);
    strcpy(p->dir, "/tmp/check_cport.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(p->dir));
    p->store = store_new(&cfg);
    ck_assert_ptr_nonnull(p->store);
    p->srv.store = p->store;
    settings_init(&p->srv.settings); /* the limits a node runs with (--max-frame-bytes) */
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
hello_token(struct port *p, int i, const char *cluster, const char *token,
            Ringcache__Hello__Role role)
{
    Ringcache__Hello h = RINGCACHE__HELLO__INIT;

    h.cluster = (char *)cluster;
    h.token.data = (uint8_t *)token;
    h.token.len = strlen(token);
    h.role = role;
    h.node_id = (char *)"check";
    send_msg(p, i, FRAME_HELLO, &h.base);
}

static void
hello(struct port *p, int i, const char *cluster, Ringcache__Hello__Role role)
{
    hello_token(p, i, cluster, TOKEN, role);
}

/* Client i sends raw bytes, and the port runs. */
static void
send_raw(struct port *p, int i, const void *buf, size_t n)
{
    int k;

    bufferevent_write(p->client[i], buf, n);
    for (k = 0; k < 4; k++) {
        event_base_loop(cport_base(p->cp), EVLOOP_NONBLOCK);
    }
}

/* Client i sends a frame of type t around payload[0..n). */
static void
send_payload(struct port *p, int i, uint8_t t, const void *payload, size_t n)
{
    uint8_t buf[FRAME_HEADER_SIZE + 64];

    ck_assert_uint_le(n, 64);
    frame_header_write(buf, (enum frame_type)t, frame_cluster_id(CLUSTER), (uint32_t)n);
    memcpy(buf + FRAME_HEADER_SIZE, payload, n);
    send_raw(p, i, buf, FRAME_HEADER_SIZE + n);
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

/*
 * What the port answers to a bad frame at each stage: the Error frame's
 * message (the connection then closes), or an AdminReply's error (it
 * stays open). Each case starts on a fresh connection; the port serves
 * the next one.
 */
enum stage {
    ST_NEW,   /* nothing sent yet */
    ST_ADMIN, /* after an admin Hello */
    ST_PEER,  /* after a peer Hello */
};
static const struct refusal {
    const char *what;
    enum stage  stage;
    uint8_t     type;    /* 0: send the header below alone */
    const char *payload; /* raw payload bytes */
    size_t      len;
    const char *error;       /* expected in the Error frame */
    const char *reply_error; /* or in the AdminReply (no Error) */
} refusals[] = {
    { "an AdminRequest before the Hello", ST_NEW, FRAME_ADMIN_REQUEST, "", 0,
      "the first frame must be Hello", NULL },
    { "a Hello that is not protobuf", ST_NEW, FRAME_HELLO, "\xff\xff\xff", 3, "bad Hello", NULL },
    { "a Hello without a cluster name", ST_NEW, FRAME_HELLO, "", 0, "wrong cluster", NULL },
    { "a frame of an unknown type", ST_NEW, 0, "RC\x01\x0a", 4, "bad frame: unknown frame type",
      NULL },
    { "a frame of another version", ST_NEW, 0, "RC\x02\x01", 4,
      "bad frame: unsupported frame version", NULL },
    { "an HTTP request on the cluster port", ST_NEW, 0, "GET / HTTP/1.1\r\n", 16,
      "bad frame: bad frame magic", NULL },
    { "a Ping on an admin connection", ST_ADMIN, FRAME_PING, "", 0,
      "unexpected frame type 8 on an admin connection", NULL },
    { "an AdminRequest that is not protobuf", ST_ADMIN, FRAME_ADMIN_REQUEST, "\xff\xff", 2,
      "bad AdminRequest", NULL },
    { "an empty AdminRequest", ST_ADMIN, FRAME_ADMIN_REQUEST, "", 0, NULL, "empty admin request" },
    { "a Prepare without a membership", ST_ADMIN, FRAME_ADMIN_REQUEST, "\x0a\x00", 2, NULL,
      "prepare: no membership" },
    { "a Prepare whose membership has vnodes 0", ST_ADMIN, FRAME_ADMIN_REQUEST,
      "\x0a\x15\x0a\x13\x08\x02\x18\x01\x22\x0d\x0a\x01\x61\x12\x06\x68\x3a\x31\x31\x31\x31\x18"
      "\x01",
      23, NULL, "vnodes must be 1..65535" },
    { "a Commit of nothing (no membership, none pending)", ST_ADMIN, FRAME_ADMIN_REQUEST,
      "\x22\x00", 2, NULL, "commit: no pending transition" },
    { "a StartCopy without a pending transition", ST_ADMIN, FRAME_ADMIN_REQUEST, "\x12\x00", 2,
      NULL, "no pending transition" },
    { "an AdminRequest on a peer connection", ST_PEER, FRAME_ADMIN_REQUEST, "", 0,
      "unexpected frame type 3 on a peer connection", NULL },
    { "a Ping that is not protobuf", ST_PEER, FRAME_PING, "\xff", 1, "bad Ping", NULL },
    { "a HandoffBatch without a pending transition", ST_PEER, FRAME_HANDOFF_BATCH, "", 0,
      "does not match the pending transition", NULL },
    { "a HandoffBatch that is not protobuf", ST_PEER, FRAME_HANDOFF_BATCH, "\xff", 1,
      "bad HandoffBatch", NULL },
};

START_TEST(test_refusals)
{
    const struct refusal *c = &refusals[_i];
    struct port           p;
    ProtobufCMessage     *m;

    port_open(&p);
    port_connect(&p, 0);
    if (c->stage != ST_NEW) {
        hello(&p, 0, CLUSTER,
              c->stage == ST_ADMIN ? RINGCACHE__HELLO__ROLE__ADMIN : RINGCACHE__HELLO__ROLE__PEER);
        ck_assert_int_eq(next_reply(&p, 0, &ringcache__hello__descriptor, &m), FRAME_HELLO);
        protobuf_c_message_free_unpacked(m, NULL);
    }
    if (c->type == 0) {
        send_raw(&p, 0, c->payload, c->len);
    } else {
        send_payload(&p, 0, c->type, c->payload, c->len);
    }
    if (c->error != NULL) {
        ck_assert_int_eq(next_reply(&p, 0, &ringcache__error__descriptor, &m), FRAME_ERROR);
        ck_assert_msg(strstr(((Ringcache__Error *)m)->message, c->error) != NULL, "%s: got \"%s\"",
                      c->what, ((Ringcache__Error *)m)->message);
    } else {
        Ringcache__AdminReply *r;

        ck_assert_int_eq(next_reply(&p, 0, &ringcache__admin_reply__descriptor, &m),
                         FRAME_ADMIN_REPLY);
        r = (Ringcache__AdminReply *)m;
        ck_assert_msg(!r->ok && strstr(r->error, c->reply_error) != NULL, "%s: got ok=%d \"%s\"",
                      c->what, r->ok, r->error);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    ck_assert_int_eq(next_reply(&p, 0, NULL, &m), 0);

    /* The next connection is served. */
    port_connect(&p, 1);
    hello(&p, 1, CLUSTER, RINGCACHE__HELLO__ROLE__ADMIN);
    ck_assert_int_eq(next_reply(&p, 1, &ringcache__hello__descriptor, &m), FRAME_HELLO);
    protobuf_c_message_free_unpacked(m, NULL);
    port_close(&p);
}
END_TEST

/* Hellos refused after they decode: an unknown role, a wrong token. */
START_TEST(test_hello_refusals)
{
    struct port       p;
    ProtobufCMessage *m;

    port_open(&p);
    port_connect(&p, 0);
    hello(&p, 0, CLUSTER, (Ringcache__Hello__Role)7);
    ck_assert_int_eq(next_reply(&p, 0, &ringcache__error__descriptor, &m), FRAME_ERROR);
    ck_assert_str_eq(((Ringcache__Error *)m)->message, "unknown role");
    protobuf_c_message_free_unpacked(m, NULL);
    port_connect(&p, 1);
    hello_token(&p, 1, CLUSTER, "not-the-token", RINGCACHE__HELLO__ROLE__ADMIN);
    ck_assert_int_eq(next_reply(&p, 1, &ringcache__error__descriptor, &m), FRAME_ERROR);
    ck_assert_str_eq(((Ringcache__Error *)m)->message, "wrong token");
    protobuf_c_message_free_unpacked(m, NULL);
    port_close(&p);
}
END_TEST

/* A key (key<n>, from *n on) that p's node imports, or does not. */
static void
key_for(struct port *p, bool imported, unsigned *n, char out[32])
{
    for (;; (*n)++) {
        snprintf(out, 32, "key%u", *n);
        if (arcset_has(cluster_importing(p->cl), ring_hash(out, strlen(out))) == imported) {
            (*n)++;
            return;
        }
    }
}

/* A peer connection sends one batch of records[0..n) for epoch 2 with
 * token tok; the Error it gets (NULL: an ack without error). */
static char *
batch_answer(struct port *p, int i, const char *tok, Ringcache__HandoffRecord *recs, size_t n)
{
    Ringcache__HandoffBatch   b = RINGCACHE__HANDOFF_BATCH__INIT;
    Ringcache__HandoffRecord *ptrs[4];
    ProtobufCMessage         *m;
    char                     *msg = NULL;
    size_t                    k;
    uint8_t                   hdr[4];

    for (k = 0; k < n; k++) {
        ptrs[k] = &recs[k];
    }
    b.token.data = (uint8_t *)tok;
    b.token.len = strlen(tok);
    b.epoch = 2;
    b.seq = 1;
    b.records = ptrs;
    b.n_records = n;
    if (p->client[i] != NULL) {
        bufferevent_free(p->client[i]);
    }
    port_connect(p, i);
    hello(p, i, CLUSTER, RINGCACHE__HELLO__ROLE__PEER);
    ck_assert_int_eq(next_reply(p, i, &ringcache__hello__descriptor, &m), FRAME_HELLO);
    protobuf_c_message_free_unpacked(m, NULL);
    send_msg(p, i, FRAME_HANDOFF_BATCH, &b.base);
    /* An Error or an ack: the header's type byte says which. */
    ck_assert_uint_ge(evbuffer_get_length(bufferevent_get_input(p->client[i])), 4);
    evbuffer_copyout(bufferevent_get_input(p->client[i]), hdr, 4);
    if (hdr[3] == FRAME_ERROR) {
        ck_assert_int_eq(next_reply(p, i, &ringcache__error__descriptor, &m), FRAME_ERROR);
        msg = strdup(((Ringcache__Error *)m)->message);
    } else {
        ck_assert_int_eq(next_reply(p, i, &ringcache__handoff_ack__descriptor, &m),
                         FRAME_HANDOFF_ACK);
        ck_assert_str_eq(((Ringcache__HandoffAck *)m)->error, "");
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return msg;
}

static Ringcache__HandoffRecord
record(const char *key, const char *value)
{
    Ringcache__HandoffRecord r = RINGCACHE__HANDOFF_RECORD__INIT;

    r.key.data = (uint8_t *)key;
    r.key.len = strlen(key);
    r.value.data = (uint8_t *)value;
    r.value.len = strlen(value);
    r.cas = 5;
    return r;
}

/* A peer that lies in its HandoffBatch (docs/cluster.md, COPY) gets an
 * Error naming the lie and is closed; an honest batch is acked. */
START_TEST(test_handoff_lies)
{
    static const char *const bc[] = { "b", "c" }, *const abc[] = { "a", "b", "c" };
    struct port              p;
    Ringcache__AdminRequest  rq = RINGCACHE__ADMIN_REQUEST__INIT;
    Ringcache__Commit        commit = RINGCACHE__COMMIT__INIT;
    Ringcache__Prepare       prep = RINGCACHE__PREPARE__INIT;
    Ringcache__AdminReply   *r;
    Ringcache__HandoffRecord recs[2];
    ProtobufCMessage        *m;
    ProtobufCBinaryData      tok = { 2, (uint8_t *)"t1" };
    char                     in1[32], in2[32], out[32], *e;
    unsigned                 n = 0;

    port_open(&p);
    port_connect(&p, 0);
    hello(&p, 0, CLUSTER, RINGCACHE__HELLO__ROLE__ADMIN);
    ck_assert_int_eq(next_reply(&p, 0, &ringcache__hello__descriptor, &m), FRAME_HELLO);
    protobuf_c_message_free_unpacked(m, NULL);
    rq.req_case = RINGCACHE__ADMIN_REQUEST__REQ_COMMIT;
    commit.membership = membership(1, bc, 2);
    rq.commit = &commit;
    r = admin(&p, &rq);
    ck_assert(r->ok);
    ringcache__admin_reply__free_unpacked(r, NULL);
    rq.req_case = RINGCACHE__ADMIN_REQUEST__REQ_PREPARE;
    prep.membership = membership(2, abc, 3);
    prep.token = tok;
    prep.from_epoch = 1;
    rq.prepare = &prep;
    r = admin(&p, &rq);
    ck_assert_msg(r->ok, "prepare: %s", r->error);
    ringcache__admin_reply__free_unpacked(r, NULL);
    key_for(&p, true, &n, in1);
    key_for(&p, true, &n, in2);
    n = 0;
    key_for(&p, false, &n, out);

    recs[0] = record(in1, "v");
    ck_assert_ptr_null(batch_answer(&p, 1, "t1", recs, 1));

    e = batch_answer(&p, 1, "t2", recs, 1);
    ck_assert_ptr_nonnull(strstr(e, "does not match the pending transition"));
    free(e);
    recs[0] = record(out, "v");
    e = batch_answer(&p, 1, "t1", recs, 1);
    ck_assert_ptr_nonnull(strstr(e, "is outside the arcs this node imports"));
    free(e);
    recs[0] = record("", "v");
    e = batch_answer(&p, 1, "t1", recs, 1);
    ck_assert_str_eq(e, "record with a key of 0 bytes");
    free(e);
    recs[0] = record(in1, "abcdef");
    recs[0].total_bytes = 3;
    e = batch_answer(&p, 1, "t1", recs, 1);
    ck_assert_str_eq(e, "first chunk longer than its value");
    free(e);
    /* A chunk for another key while one is being assembled. */
    recs[0] = record(in1, "abc");
    recs[0].total_bytes = 6;
    recs[1] = record(in2, "def");
    recs[1].offset = 3;
    e = batch_answer(&p, 1, "t1", recs, 2);
    ck_assert_ptr_nonnull(strstr(e, "broken chunk sequence"));
    free(e);
    /* A continuation with nothing begun. */
    recs[0] = record(in1, "def");
    recs[0].offset = 3;
    e = batch_answer(&p, 1, "t1", recs, 1);
    ck_assert_ptr_nonnull(strstr(e, "broken chunk sequence"));
    free(e);
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
    tcase_add_loop_test(tc, test_refusals, 0, sizeof(refusals) / sizeof(refusals[0]));
    tcase_add_test(tc, test_hello_refusals);
    tcase_add_test(tc, test_handoff_lies);
    suite_add_tcase(s, tc);
    return s;
}
