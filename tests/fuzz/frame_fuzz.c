/*
 * libFuzzer target: arbitrary bytes on the cluster port. Decodes frames
 * back to back as a connection would, and each payload as its type's
 * message (every frame type: Hello, Membership, AdminRequest, AdminReply,
 * HandoffBatch, HandoffAck, Error, Ping, Pong), walking what a receiver
 * reads of it and packing it again; a valid membership (alone or in a
 * Prepare or Commit, as the node converts it) must round trip unchanged. The node's handlers behind
 * the frames are tests/fuzz/cport_fuzz.c's; this one is the decoders alone. RC_FUZZ_SEEDS=DIR
 * writes one seed per frame type into DIR and exits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/members_pb.h"
#include "proto/ringcache.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static void
check_membership(const uint8_t *buf, size_t len)
{
    struct ring_members *m = NULL, *back = NULL;
    char                 err[256];
    uint8_t             *packed;
    size_t               plen;

    if (members_pb_unpack(buf, len, &m, err, sizeof(err)) != RING_OK) {
        return;
    }
    packed = members_pb_pack(m, &plen);
    if (packed != NULL) {
        if (members_pb_unpack(packed, plen, &back, err, sizeof(err)) != RING_OK ||
            back->n_nodes != m->n_nodes || back->epoch != m->epoch || back->vnodes != m->vnodes ||
            back->replicas != m->replicas) {
            abort();
        }
        ring_members_free(back);
        free(packed);
    }
    ring_members_free(m);
}

/* A Membership inside a request, as the node takes it: packed again and
 * read by members_pb_unpack (server/cport.c unpack_members). */
static void
check_inner_membership(const Ringcache__Membership *pm)
{
    size_t   n;
    uint8_t *buf;

    if (pm == NULL) {
        return;
    }
    n = ringcache__membership__get_packed_size(pm);
    buf = malloc(n > 0 ? n : 1);
    if (buf == NULL) {
        return;
    }
    ringcache__membership__pack(pm, buf);
    check_membership(buf, n);
    free(buf);
}

/* Every string a receiver prints or copies must be a string. */
static void
check_str(const char *s)
{
    if (s == NULL) {
        abort();
    }
    (void)strlen(s);
}

/* What the receivers read of each message (server/cport.c, handoff.c,
 * health.c, peer.c; client/cport_client.c's copy_status). */
static void
walk(uint8_t type, const ProtobufCMessage *m)
{
    size_t i;

    switch (type) {
    case FRAME_HELLO: {
        const Ringcache__Hello *h = (const Ringcache__Hello *)m;

        check_str(h->cluster);
        check_str(h->node_id);
        break;
    }
    case FRAME_ADMIN_REQUEST: {
        const Ringcache__AdminRequest *rq = (const Ringcache__AdminRequest *)m;

        if (rq->req_case == RINGCACHE__ADMIN_REQUEST__REQ_PREPARE) {
            check_inner_membership(rq->prepare->membership);
            for (i = 0; i < rq->prepare->n_failed_ids; i++) {
                check_str(rq->prepare->failed_ids[i]);
            }
            for (i = 0; i < rq->prepare->n_stale_ids; i++) {
                check_str(rq->prepare->stale_ids[i]);
            }
        } else if (rq->req_case == RINGCACHE__ADMIN_REQUEST__REQ_COMMIT) {
            check_inner_membership(rq->commit->membership);
        }
        break;
    }
    case FRAME_ADMIN_REPLY: {
        const Ringcache__AdminReply *r = (const Ringcache__AdminReply *)m;
        char                         buf[256];

        check_str(r->error);
        if (r->status == NULL) {
            break;
        }
        check_str(r->status->node_id);
        for (i = 0; i < r->status->n_transfers; i++) {
            snprintf(buf, sizeof(buf), "%s %s", r->status->transfers[i]->dest,
                     r->status->transfers[i]->error);
        }
        for (i = 0; i < r->status->n_peers; i++) {
            snprintf(buf, sizeof(buf), "%s %s", r->status->peers[i]->node_id,
                     r->status->peers[i]->error);
        }
        break;
    }
    case FRAME_HANDOFF_BATCH: {
        const Ringcache__HandoffBatch *b = (const Ringcache__HandoffBatch *)m;

        for (i = 0; i < b->n_records; i++) {
            const Ringcache__HandoffRecord *r = b->records[i];

            if ((r->key.len > 0 && r->key.data == NULL) ||
                (r->value.len > 0 && r->value.data == NULL)) {
                abort();
            }
        }
        break;
    }
    case FRAME_HANDOFF_ACK:
        check_str(((const Ringcache__HandoffAck *)m)->error);
        break;
    case FRAME_ERROR:
        check_str(((const Ringcache__Error *)m)->message);
        break;
    case FRAME_PING:
        check_str(((const Ringcache__Ping *)m)->node_id);
        break;
    case FRAME_PONG:
        check_str(((const Ringcache__Pong *)m)->node_id);
        break;
    default:
        break;
    }
}

/* The message type each frame type carries (Membership is checked by
 * check_membership). */
static const ProtobufCMessageDescriptor *
descriptor(uint8_t type)
{
    switch (type) {
    case FRAME_HELLO:
        return &ringcache__hello__descriptor;
    case FRAME_ADMIN_REQUEST:
        return &ringcache__admin_request__descriptor;
    case FRAME_ADMIN_REPLY:
        return &ringcache__admin_reply__descriptor;
    case FRAME_HANDOFF_BATCH:
        return &ringcache__handoff_batch__descriptor;
    case FRAME_HANDOFF_ACK:
        return &ringcache__handoff_ack__descriptor;
    case FRAME_ERROR:
        return &ringcache__error__descriptor;
    case FRAME_PING:
        return &ringcache__ping__descriptor;
    case FRAME_PONG:
        return &ringcache__pong__descriptor;
    default:
        return NULL;
    }
}

/* Decode a payload as its type's message, walk it, and check that it
 * packs to the size it claims. (Packed again, it need not decode:
 * protobuf-c keeps unknown fields, and takes a field number 0 in a tag
 * of two bytes, which it writes back in one byte and then refuses. The
 * node never forwards a message it received; a Membership it re-packs,
 * from a Prepare or Commit, is refused then, as it should be.) */
static void
check_payload(uint8_t type, const uint8_t *payload, size_t len)
{
    const ProtobufCMessageDescriptor *d = descriptor(type);
    ProtobufCMessage                 *m, *again;
    uint8_t                          *buf;
    size_t                            n;

    if (type == FRAME_MEMBERSHIP) {
        check_membership(payload, len);
        return;
    }
    if (d == NULL || (m = protobuf_c_message_unpack(d, NULL, len, payload)) == NULL) {
        return;
    }
    walk(type, m);
    n = protobuf_c_message_get_packed_size(m);
    buf = malloc(n > 0 ? n : 1);
    if (buf != NULL) {
        if (protobuf_c_message_pack(m, buf) != n) {
            abort();
        }
        again = protobuf_c_message_unpack(d, NULL, n, buf);
        if (again != NULL) {
            walk(type, again);
            protobuf_c_message_free_unpacked(again, NULL);
        }
        free(buf);
    }
    protobuf_c_message_free_unpacked(m, NULL);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct frame f;
    size_t       used;

    /* The first 8 bytes pick the cluster id, so ECLUSTER and OK both occur. */
    uint64_t cluster = 0;
    if (size >= 8) {
        memcpy(&cluster, data, 8);
        data += 8;
        size -= 8;
    }
    check_membership(data, size);
    while (size > 0) {
        int rc = frame_decode(data, size, cluster, 1 << 16, &f, &used);

        if (rc != FRAME_OK) {
            break;
        }
        if (used < FRAME_HEADER_SIZE || used > size) {
            abort();
        }
        check_payload(f.type, f.payload, f.length);
        data += used;
        size -= used;
    }
    return 0;
}

/*
 * Seeds (RC_FUZZ_SEEDS=DIR): the cluster id of "ringcache" (8 bytes), then
 * one frame of each type with its usual content.
 */

static void
write_frame(const char *dir, const char *name, enum frame_type type, const ProtobufCMessage *m)
{
    uint64_t cluster = frame_cluster_id("ringcache");
    size_t   n = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = malloc(8 + FRAME_HEADER_SIZE + n);
    char     path[1024];
    FILE    *f;

    if (buf == NULL) {
        abort();
    }
    memcpy(buf, &cluster, 8);
    frame_header_write(buf + 8, type, cluster, (uint32_t)n);
    protobuf_c_message_pack(m, buf + 8 + FRAME_HEADER_SIZE);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(buf, 1, 8 + FRAME_HEADER_SIZE + n, f) != 8 + FRAME_HEADER_SIZE + n ||
        fclose(f) != 0) {
        abort();
    }
    free(buf);
}

static void
write_seeds(const char *dir)
{
    Ringcache__Node           node = RINGCACHE__NODE__INIT, *nodes[1] = { &node };
    Ringcache__Membership     mb = RINGCACHE__MEMBERSHIP__INIT;
    Ringcache__Hello          hello = RINGCACHE__HELLO__INIT;
    Ringcache__AdminRequest   rq = RINGCACHE__ADMIN_REQUEST__INIT;
    Ringcache__Prepare        prep = RINGCACHE__PREPARE__INIT;
    Ringcache__Commit         commit = RINGCACHE__COMMIT__INIT;
    Ringcache__Fence          fence = RINGCACHE__FENCE__INIT;
    Ringcache__AdminReply     reply = RINGCACHE__ADMIN_REPLY__INIT;
    Ringcache__NodeStatus     st = RINGCACHE__NODE_STATUS__INIT;
    Ringcache__TransferStatus ts = RINGCACHE__TRANSFER_STATUS__INIT, *tsp[1] = { &ts };
    Ringcache__PeerState      ps = RINGCACHE__PEER_STATE__INIT, *psp[1] = { &ps };
    Ringcache__HandoffBatch   batch = RINGCACHE__HANDOFF_BATCH__INIT;
    Ringcache__HandoffRecord  rec = RINGCACHE__HANDOFF_RECORD__INIT, *recs[1] = { &rec };
    Ringcache__HandoffAck     ack = RINGCACHE__HANDOFF_ACK__INIT;
    Ringcache__Error          e = RINGCACHE__ERROR__INIT;
    Ringcache__Ping           ping = RINGCACHE__PING__INIT;
    Ringcache__Pong           pong = RINGCACHE__PONG__INIT;
    ProtobufCBinaryData       tok = { 5, (uint8_t *)"token" };
    char                     *failed[1] = { (char *)"c" };

    node.id = (char *)"a";
    node.addr = (char *)"127.0.0.1:11211";
    node.weight = 1;
    node.zone = (char *)"z1";
    mb.epoch = 2;
    mb.vnodes = 160;
    mb.replicas = 1;
    mb.nodes = nodes;
    mb.n_nodes = 1;
    write_frame(dir, "type_membership", FRAME_MEMBERSHIP, &mb.base);
    hello.cluster = (char *)"ringcache";
    hello.token = tok;
    hello.role = RINGCACHE__HELLO__ROLE__PEER;
    hello.node_id = (char *)"b";
    hello.boot_id = 99;
    hello.active_epoch = 2;
    write_frame(dir, "type_hello", FRAME_HELLO, &hello.base);
    prep.membership = &mb;
    prep.token = tok;
    prep.from_epoch = 1;
    prep.failed_ids = failed;
    prep.n_failed_ids = 1;
    rq.req_case = RINGCACHE__ADMIN_REQUEST__REQ_PREPARE;
    rq.prepare = &prep;
    write_frame(dir, "type_admin_prepare", FRAME_ADMIN_REQUEST, &rq.base);
    commit.membership = &mb;
    commit.token = tok;
    rq.req_case = RINGCACHE__ADMIN_REQUEST__REQ_COMMIT;
    rq.commit = &commit;
    write_frame(dir, "type_admin_commit", FRAME_ADMIN_REQUEST, &rq.base);
    fence.token = tok;
    fence.hold_ms = 100;
    rq.req_case = RINGCACHE__ADMIN_REQUEST__REQ_FENCE;
    rq.fence = &fence;
    write_frame(dir, "type_admin_fence", FRAME_ADMIN_REQUEST, &rq.base);
    ts.dest = (char *)"c";
    ts.items_sent = 10;
    ts.error = (char *)"";
    ps.node_id = (char *)"c";
    ps.state = RINGCACHE__PEER_HEALTH__PEER_SUSPECT;
    ps.error = (char *)"timed out";
    st.node_id = (char *)"a";
    st.phase = RINGCACHE__PHASE__PHASE_COPYING;
    st.transfers = tsp;
    st.n_transfers = 1;
    st.peers = psp;
    st.n_peers = 1;
    reply.ok = true;
    reply.error = (char *)"";
    reply.status = &st;
    write_frame(dir, "type_admin_reply", FRAME_ADMIN_REPLY, &reply.base);
    rec.key.data = (uint8_t *)"key";
    rec.key.len = 3;
    rec.value.data = (uint8_t *)"value";
    rec.value.len = 5;
    rec.total_bytes = 10;
    rec.mflags = 4;
    rec.client_cas = 7;
    batch.token = tok;
    batch.epoch = 2;
    batch.seq = 1;
    batch.records = recs;
    batch.n_records = 1;
    write_frame(dir, "type_handoff_batch", FRAME_HANDOFF_BATCH, &batch.base);
    ack.seq = 1;
    ack.error = (char *)"out of memory";
    write_frame(dir, "type_handoff_ack", FRAME_HANDOFF_ACK, &ack.base);
    e.message = (char *)"wrong token";
    e.active_epoch = 2;
    write_frame(dir, "type_error", FRAME_ERROR, &e.base);
    ping.node_id = (char *)"b";
    ping.active_epoch = 2;
    ping.seq = 5;
    write_frame(dir, "type_ping", FRAME_PING, &ping.base);
    pong.node_id = (char *)"a";
    pong.seq = 5;
    pong.holds_nothing = true;
    write_frame(dir, "type_pong", FRAME_PONG, &pong.base);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("RC_FUZZ_SEEDS");

    (void)argc;
    (void)argv;
    if (dir != NULL) {
        write_seeds(dir);
        exit(0);
    }
    return 0;
}
