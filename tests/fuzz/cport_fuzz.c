/*
 * cport_fuzz: libFuzzer target for the node's cluster port as its clients
 * drive it: the bytes of two connections (an admin's and a peer's, say)
 * go through server/cport.c's own read path, Hello and token check, admin
 * requests (Prepare, StartCopy, Fence, Commit, Abort, Status: the
 * transition's validation and state changes), a peer's HandoffBatch
 * frames and Pings, on a fresh node (cluster state, state directory,
 * cluster port) per input. Connections are in-memory bufferevent pairs and
 * the handoff's outgoing connects fail at once (this file's
 * bufferevent_socket_connect): no socket is opened (cport_adopt). Whatever the node
 * writes back must be well-formed frames of the types a client expects.
 *
 * Input: a 2-byte little-endian length n, then n bytes for connection 1,
 * then the rest for connection 2 (fed after connection 1's were read).
 * RC_FUZZ_SEEDS=DIR writes the seed corpus into DIR and exits.
 */
#include "config.h"

#include <dirent.h>
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define CLUSTER "fuzz"
#define TOKEN   "fuzz-admin-token"

static char          state_dir[64];
static struct store *store;
static struct server srv;

/* The handoff's and heartbeats' outgoing connections: refused at once. */
int
bufferevent_socket_connect(struct bufferevent *bev, const struct sockaddr *sa, int len)
{
    (void)bev;
    (void)sa;
    (void)len;
    return -1;
}

int
bufferevent_socket_connect_hostname(struct bufferevent *bev, struct evdns_base *dns, int family,
                                    const char *host, int port)
{
    (void)bev;
    (void)dns;
    (void)family;
    (void)host;
    (void)port;
    return -1;
}

/* No workers to wait for. */
static int
no_barrier(void *arg)
{
    (void)arg;
    return 0;
}

static void
die(const char *what, const char *why)
{
    fprintf(stderr, "cport_fuzz: %s: %s\n", what, why);
    abort();
}

static void
setup(void)
{
    struct store_config cfg = { .mem_limit = 1u << 20, .item_size_max = 64u << 10 };
    const char         *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";

    log_set_level(LOG_QUIET);
    snprintf(state_dir, sizeof(state_dir), "%s/cport_fuzz.XXXXXX", base);
    if (mkdtemp(state_dir) == NULL) {
        die("mkdtemp", state_dir);
    }
    store = store_new(&cfg);
    if (store == NULL) {
        die("store", "out of memory");
    }
    srv.store = store;
    settings_init(&srv.settings); /* the limits a node runs with (--max-frame-bytes) */
}

/* Start every input from an empty state directory. */
static void
empty_state_dir(void)
{
    DIR           *d = opendir(state_dir);
    struct dirent *e;

    if (d == NULL) {
        die("opendir", state_dir);
    }
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            unlinkat(dirfd(d), e->d_name, 0);
        }
    }
    closedir(d);
}

static void
remove_state_dir(void)
{
    empty_state_dir();
    rmdir(state_dir);
}

/* RC_FUZZ_VERBOSE=1: print what the node answers (to write seeds). */
static bool verbose;

static void
show(uint8_t type, const ProtobufCMessage *m)
{
    if (type == FRAME_ERROR) {
        fprintf(stderr, "  <- Error: %s\n", ((const Ringcache__Error *)m)->message);
    } else if (type == FRAME_ADMIN_REPLY) {
        const Ringcache__AdminReply *r = (const Ringcache__AdminReply *)m;

        fprintf(stderr, "  <- AdminReply ok=%d %s (phase %d, pending %llu)\n", r->ok, r->error,
                r->status != NULL ? (int)r->status->phase : -1,
                r->status != NULL ? (unsigned long long)r->status->pending_epoch : 0ULL);
    } else {
        fprintf(stderr, "  <- frame type %u\n", type);
    }
}

/* What the node wrote to a client so far: whole frames of the types a
 * client reads, each decoding as its message, nothing after an Error
 * (the node closes). Abort (a finding) otherwise. Drains what it read. */
static void
check_replies(struct bufferevent *client, uint64_t cluster_id, bool *got_error)
{
    struct evbuffer *in = bufferevent_get_input(client);

    for (;;) {
        size_t                            len = evbuffer_get_length(in), used;
        uint8_t                          *p = evbuffer_pullup(in, (ssize_t)len);
        struct frame                      f;
        const ProtobufCMessageDescriptor *desc;
        ProtobufCMessage                 *m;
        int                               rc;

        if (len == 0) {
            return;
        }
        rc = frame_decode(p, len, cluster_id, FRAME_PAYLOAD_MAX, &f, &used);
        if (rc == FRAME_EAGAIN) {
            return;
        }
        if (rc != FRAME_OK || *got_error) {
            abort();
        }
        switch (f.type) {
        case FRAME_HELLO:
            desc = &ringcache__hello__descriptor;
            break;
        case FRAME_ADMIN_REPLY:
            desc = &ringcache__admin_reply__descriptor;
            break;
        case FRAME_HANDOFF_ACK:
            desc = &ringcache__handoff_ack__descriptor;
            break;
        case FRAME_PONG:
            desc = &ringcache__pong__descriptor;
            break;
        case FRAME_ERROR:
            desc = &ringcache__error__descriptor;
            *got_error = true;
            break;
        default:
            abort();
        }
        m = protobuf_c_message_unpack(desc, NULL, f.length, f.payload);
        if (verbose && m != NULL) {
            show(f.type, m);
        }
        if (m == NULL) {
            abort();
        }
        protobuf_c_message_free_unpacked(m, NULL);
        evbuffer_drain(in, used);
    }
}

/* Run the node's event loop until nothing is left to do now. */
static void
settle(struct cport *cp)
{
    int i;

    for (i = 0; i < 4; i++) {
        event_base_loop(cport_base(cp), EVLOOP_NONBLOCK);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct bufferevent *pair[2][2];
    struct cluster     *cl = NULL;
    struct cport       *cp;
    struct store_cursor cur;
    char                err[512];
    bool                got_error[2] = { false, false };
    size_t              n1, i;

    if (store == NULL) {
        setup();
    }
    if (size < 2) {
        return 0;
    }
    n1 = (size_t)data[0] | (size_t)data[1] << 8;
    data += 2;
    size -= 2;
    if (n1 > size) {
        n1 = size;
    }
    empty_state_dir();
    if (cluster_new(no_barrier, NULL, "a", state_dir, CLUSTER, (const uint8_t *)TOKEN,
                    strlen(TOKEN), &cl, err, sizeof(err)) < 0) {
        die("cluster_new", err);
    }
    cp = cport_new(&srv, cl, "127.0.0.1", 0);
    if (cp == NULL) {
        die("cport_new", "out of memory");
    }
    for (i = 0; i < 2; i++) {
        const uint8_t *p = i == 0 ? data : data + n1;
        size_t         n = i == 0 ? n1 : size - n1;

        if (bufferevent_pair_new(cport_base(cp), 0, pair[i]) < 0) {
            die("bufferevent_pair_new", "out of memory");
        }
        if (cport_adopt(cp, pair[i][0]) < 0) {
            die("cport_adopt", "out of memory");
        }
        bufferevent_enable(pair[i][1], EV_READ | EV_WRITE);
        bufferevent_write(pair[i][1], p, n);
        settle(cp);
        check_replies(pair[i][1], cluster_frame_id(cl), &got_error[i]);
    }
    settle(cp);
    for (i = 0; i < 2; i++) {
        check_replies(pair[i][1], cluster_frame_id(cl), &got_error[i]);
        bufferevent_free(pair[i][1]);
    }
    cport_free(cp);
    cluster_free(cl);
    memset(&cur, 0, sizeof(cur));
    while (store_purge(store, NULL, NULL, 1024, &cur) != 0) {
    }
    return 0;
}

/*
 * The seed corpus (RC_FUZZ_SEEDS=DIR): an admin walking a transition
 * (init, prepare, copy, fence, commit, abort, status) and a peer streaming
 * a batch and pinging, plus the refusals on the way.
 */

struct seed {
    uint8_t buf[1 << 14];
    size_t  len;
};

static void
put_msg(struct seed *sd, enum frame_type type, const ProtobufCMessage *m)
{
    size_t plen = protobuf_c_message_get_packed_size(m);

    if (sd->len + FRAME_HEADER_SIZE + plen > sizeof(sd->buf)) {
        abort();
    }
    frame_header_write(sd->buf + sd->len, type, frame_cluster_id(CLUSTER), (uint32_t)plen);
    protobuf_c_message_pack(m, sd->buf + sd->len + FRAME_HEADER_SIZE);
    sd->len += FRAME_HEADER_SIZE + plen;
}

static void
put_hello(struct seed *sd, const char *token, Ringcache__Hello__Role role)
{
    Ringcache__Hello h = RINGCACHE__HELLO__INIT;

    h.cluster = (char *)CLUSTER;
    h.token.data = (uint8_t *)token;
    h.token.len = strlen(token);
    h.role = role;
    h.node_id = (char *)"b";
    put_msg(sd, FRAME_HELLO, &h.base);
}

/* An AdminRequest with the request r of kind k. */
static void
put_admin(struct seed *sd, Ringcache__AdminRequest__ReqCase k, void *r)
{
    Ringcache__AdminRequest rq = RINGCACHE__ADMIN_REQUEST__INIT;

    rq.req_case = k;
    switch (k) {
    case RINGCACHE__ADMIN_REQUEST__REQ_PREPARE:
        rq.prepare = r;
        break;
    case RINGCACHE__ADMIN_REQUEST__REQ_START_COPY:
        rq.start_copy = r;
        break;
    case RINGCACHE__ADMIN_REQUEST__REQ_FENCE:
        rq.fence = r;
        break;
    case RINGCACHE__ADMIN_REQUEST__REQ_COMMIT:
        rq.commit = r;
        break;
    case RINGCACHE__ADMIN_REQUEST__REQ_ABORT:
        rq.abort = r;
        break;
    default:
        rq.status = r;
        break;
    }
    put_msg(sd, FRAME_ADMIN_REQUEST, &rq.base);
}

/* A membership of epoch e with nodes ids[0..n). */
static Ringcache__Membership *
members(uint64_t e, const char *const *ids, size_t n)
{
    static Ringcache__Node       nodes[2][4];
    static Ringcache__Node      *ptrs[2][4];
    static Ringcache__Membership m[2];
    static char                  addr[4][32];
    static int                   which;
    size_t                       i;
    int                          w = which++ % 2;

    m[w] = (Ringcache__Membership)RINGCACHE__MEMBERSHIP__INIT;
    m[w].epoch = e;
    m[w].vnodes = 40;
    m[w].replicas = 2;
    for (i = 0; i < n; i++) {
        nodes[w][i] = (Ringcache__Node)RINGCACHE__NODE__INIT;
        nodes[w][i].id = (char *)ids[i];
        snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", 21001 + (ids[i][0] - 'a'));
        nodes[w][i].addr = addr[i];
        nodes[w][i].weight = 1;
        ptrs[w][i] = &nodes[w][i];
    }
    m[w].nodes = ptrs[w];
    m[w].n_nodes = n;
    return &m[w];
}

static void
write_seed(const char *dir, const char *name, const struct seed *one, const struct seed *two)
{
    char    path[1024];
    FILE   *f;
    uint8_t n[2] = { (uint8_t)one->len, (uint8_t)(one->len >> 8) };

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(n, 1, 2, f) != 2 || fwrite(one->buf, 1, one->len, f) != one->len ||
        (two != NULL && fwrite(two->buf, 1, two->len, f) != two->len) || fclose(f) != 0) {
        die("write", path);
    }
}

static void
write_seeds(const char *dir)
{
    static const char *const ab[] = { "a", "b" }, *const abc[] = { "a", "b", "c" };
    static const char *const bc[] = { "b", "c" };
    Ringcache__Prepare       prep = RINGCACHE__PREPARE__INIT;
    Ringcache__StartCopy     copy = RINGCACHE__START_COPY__INIT;
    Ringcache__Fence         fence = RINGCACHE__FENCE__INIT;
    Ringcache__Commit        commit = RINGCACHE__COMMIT__INIT;
    Ringcache__Abort         ab_rq = RINGCACHE__ABORT__INIT;
    Ringcache__StatusRequest st = RINGCACHE__STATUS_REQUEST__INIT;
    Ringcache__Ping          ping = RINGCACHE__PING__INIT;
    Ringcache__HandoffBatch  batch = RINGCACHE__HANDOFF_BATCH__INIT;
    Ringcache__HandoffRecord rec = RINGCACHE__HANDOFF_RECORD__INIT, *recs[1] = { &rec };
    Ringcache__Error         e = RINGCACHE__ERROR__INIT;
    ProtobufCBinaryData      tok = { 2, (uint8_t *)"t1" };
    struct seed              s1, s2;
    static char              longtoken[300];

    /* An admin's whole join of c: init {a b}, prepare {a b c}, copy, fence,
     * commit, then status. */
    memset(&s1, 0, sizeof(s1));
    put_hello(&s1, TOKEN, RINGCACHE__HELLO__ROLE__ADMIN);
    commit.membership = members(1, ab, 2);
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_COMMIT, &commit);
    prep.membership = members(2, abc, 3);
    prep.token = tok;
    prep.from_epoch = 1;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_PREPARE, &prep);
    copy.token = tok;
    copy.rate_bytes_per_s = 1 << 20;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_START_COPY, &copy);
    fence.token = tok;
    fence.hold_ms = 100;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_FENCE, &fence);
    commit.membership = NULL;
    commit.token = tok;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_COMMIT, &commit);
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_STATUS, &st);
    write_seed(dir, "admin_join", &s1, NULL);

    /* Init, prepare, abort; a repeated prepare, a wrong token, an empty
     * request. */
    memset(&s1, 0, sizeof(s1));
    put_hello(&s1, TOKEN, RINGCACHE__HELLO__ROLE__ADMIN);
    commit.membership = members(1, ab, 2);
    commit.token.len = 0;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_COMMIT, &commit);
    prep.membership = members(2, abc, 3);
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_PREPARE, &prep);
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_PREPARE, &prep);
    copy.token.len = 1;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_START_COPY, &copy);
    ab_rq.token = tok;
    ab_rq.epoch = 2;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_ABORT, &ab_rq);
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ__NOT_SET, NULL);
    write_seed(dir, "admin_abort", &s1, NULL);

    /* A leave declared failed, and a stale node; prepare without a
     * membership. */
    memset(&s1, 0, sizeof(s1));
    put_hello(&s1, TOKEN, RINGCACHE__HELLO__ROLE__ADMIN);
    commit.membership = members(1, abc, 3);
    commit.token.len = 0;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_COMMIT, &commit);
    prep.membership = NULL;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_PREPARE, &prep);
    prep.membership = members(2, ab, 2);
    prep.failed_ids = (char **)&abc[2];
    prep.n_failed_ids = 1;
    prep.stale_ids = (char **)&abc[1];
    prep.n_stale_ids = 1;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_PREPARE, &prep);
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_START_COPY, &copy);
    write_seed(dir, "admin_failed", &s1, NULL);
    prep.failed_ids = prep.stale_ids = NULL;
    prep.n_failed_ids = prep.n_stale_ids = 0;

    /* The admin prepares a's join of {b c}; the peer b streams a batch
     * and pings. */
    memset(&s1, 0, sizeof(s1));
    memset(&s2, 0, sizeof(s2));
    put_hello(&s1, TOKEN, RINGCACHE__HELLO__ROLE__ADMIN);
    commit.membership = members(1, bc, 2);
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_COMMIT, &commit);
    prep.membership = members(2, abc, 3);
    prep.token = tok;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_PREPARE, &prep);
    put_hello(&s2, TOKEN, RINGCACHE__HELLO__ROLE__PEER);
    rec.key.data = (uint8_t *)"key1";
    rec.key.len = 4;
    rec.value.data = (uint8_t *)"value";
    rec.value.len = 5;
    rec.cas = 77;
    batch.token = tok;
    batch.epoch = 2;
    batch.seq = 1;
    batch.records = recs;
    batch.n_records = 1;
    put_msg(&s2, FRAME_HANDOFF_BATCH, &batch.base);
    ping.node_id = (char *)"b";
    ping.active_epoch = 1;
    ping.seq = 9;
    put_msg(&s2, FRAME_PING, &ping.base);
    batch.epoch = 3;
    put_msg(&s2, FRAME_HANDOFF_BATCH, &batch.base);
    write_seed(dir, "peer_batch", &s1, &s2);

    /* A Fence on the joining node, a source of nothing: its drain is
     * over at once. Then Status, a second Fence, the commit. */
    fence.token = tok;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_FENCE, &fence);
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_STATUS, &st);
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_FENCE, &fence);
    commit.membership = NULL;
    commit.token = tok;
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_COMMIT, &commit);
    write_seed(dir, "admin_fence_not_source", &s1, NULL);

    /* Refusals: a wrong token, the wrong cluster, another frame first,
     * an unknown role, a peer frame on an admin connection, a token too
     * long, garbage after a good Hello. */
    memset(&s1, 0, sizeof(s1));
    put_hello(&s1, "wrong", RINGCACHE__HELLO__ROLE__ADMIN);
    write_seed(dir, "hello_wrong_token", &s1, NULL);
    memset(&s1, 0, sizeof(s1));
    put_admin(&s1, RINGCACHE__ADMIN_REQUEST__REQ_STATUS, &st);
    memset(&s2, 0, sizeof(s2));
    put_hello(&s2, TOKEN, (Ringcache__Hello__Role)7);
    write_seed(dir, "hello_not_first", &s1, &s2);
    memset(&s1, 0, sizeof(s1));
    put_hello(&s1, TOKEN, RINGCACHE__HELLO__ROLE__ADMIN);
    put_msg(&s1, FRAME_PING, &ping.base);
    memset(&s2, 0, sizeof(s2));
    put_hello(&s2, TOKEN, RINGCACHE__HELLO__ROLE__PEER);
    e.message = (char *)"hi";
    put_msg(&s2, FRAME_ERROR, &e.base);
    write_seed(dir, "wrong_frame_types", &s1, &s2);
    memset(&s1, 0, sizeof(s1));
    memset(longtoken, 'x', sizeof(longtoken) - 1);
    put_hello(&s1, longtoken, RINGCACHE__HELLO__ROLE__ADMIN);
    memset(&s2, 0, sizeof(s2));
    put_hello(&s2, TOKEN, RINGCACHE__HELLO__ROLE__ADMIN);
    memcpy(s2.buf + s2.len, "RC\x01\x03garbage-after-hello", 24);
    s2.len += 24;
    write_seed(dir, "hello_long_token_and_garbage", &s1, &s2);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("RC_FUZZ_SEEDS");

    (void)argc;
    (void)argv;
    verbose = getenv("RC_FUZZ_VERBOSE") != NULL;
    setup();
    atexit(remove_state_dir);
    if (dir != NULL) {
        write_seeds(dir);
        exit(0);
    }
    return 0;
}
