/*
 * handoff_fuzz: libFuzzer target for the destination side of a range copy
 * (server/handoff_in.c). The input is a handoff stream as a PEER
 * connection delivers it: HandoffBatch frames back to back, each applied by
 * handoff_in_batch to a fresh store of a node with a pending transition.
 * Every answer must be 0, 1 or -1 with a reason, a refused batch ends the
 * stream as the cluster port does, and no key outside the arcs the node
 * imports may ever land in its store.
 *
 * The first input byte picks the node: even, a new node (every import
 * replaces); odd, an owner of epoch N that is refilled (imports merge by
 * CAS). RC_FUZZ_SEEDS=DIR writes the seed corpus into DIR and exits.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/ringcache.pb-c.h"
#include "ring/ring.h"
#include "server/arcset.h"
#include "server/cluster.h"
#include "server/handoff.h"
#include "server/handoff_in.h"
#include "server/log.h"
#include "server/settings.h"
#include "server/statedir.h"
#include "server/store.h"

#define TOKEN       "fuzz-transition"
#define PENDING     4
#define STORE_LIMIT (32u << 10) /* small: a few records evict */
#define ITEM_MAX    (16u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Node 0 is d joining THREE (epoch 3 -> 4); node 1 an owner of FOUR that
 * stays when d leaves (epoch 3 -> 4): a replica of an arc whose trusted
 * old primary was d is refilled from it, merging into what it holds. */
static const char THREE[] = "vnodes 40\nreplicas 2\n"
                            "node a 127.0.0.1:21001\nnode b 127.0.0.1:21002\n"
                            "node c 127.0.0.1:21003\n";
static const char FOUR[] = "vnodes 40\nreplicas 2\n"
                           "node a 127.0.0.1:21001\nnode b 127.0.0.1:21002\n"
                           "node c 127.0.0.1:21003\nnode d 127.0.0.1:21004\n";

/* [0]: the joining node d; [1]: an owner of N that imports into ranges
 * it holds (found at start-up). Each has its store, emptied after every
 * input (a new store per input costs more than the input). */
static struct cluster *nodes[2];
static struct store   *stores[2];

static void
die(const char *what, const char *err)
{
    fprintf(stderr, "handoff_fuzz: %s: %s\n", what, err);
    abort();
}

/* A node of ACTIVE (or none: d) with NEXT pending, in a state directory
 * that is removed again once loaded (the imports never write to it). */
static struct cluster *
open_node(const char *id, const char *active, const char *pending)
{
    char                 dir[] = "/tmp/handoff_fuzz.XXXXXX", err[512], cmd[64];
    char                 text[512];
    struct cluster      *cl = NULL;
    struct ring_members *next = NULL;
    int                  n;
    bool                 again;

    if (mkdtemp(dir) == NULL) {
        die("mkdtemp", dir);
    }
    n = snprintf(text, sizeof(text), "epoch 3\n%s", active);
    if (statedir_write_file(dir, STATEDIR_ACTIVE, text, (size_t)n, err, sizeof(err)) < 0 ||
        cluster_new(NULL, NULL, id, dir, "fuzz", (const uint8_t *)"admin", 5, &cl, err,
                    sizeof(err)) < 0) {
        die(id, err);
    }
    n = snprintf(text, sizeof(text), "epoch %d\n%s", PENDING, pending);
    if (ring_members_parse(text, (size_t)n, "next", &next, err, sizeof(err)) != RING_OK ||
        cluster_prepare(cl, next, (const uint8_t *)TOKEN, strlen(TOKEN), 3, &again, err,
                        sizeof(err)) < 0) {
        die(id, err);
    }
    ring_members_free(next);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) {
        die("rm", dir);
    }
    return cl;
}

/* Does cl import a range it holds in epoch N (so imports there merge)? */
static bool
merges_somewhere(const struct cluster *cl)
{
    uint64_t i;

    for (i = 0; i < 4096; i++) {
        uint64_t h = ring_hash(&i, sizeof(i));

        if (arcset_has(cluster_importing(cl), h) && cluster_holds_active(cl, h)) {
            return true;
        }
    }
    return false;
}

static void
setup(void)
{
    static const char *const owners[] = { "a", "b", "c" };
    size_t                   i;

    log_set_level(LOG_QUIET);
    nodes[0] = open_node("d", THREE, FOUR);
    for (i = 0; i < 3 && nodes[1] == NULL; i++) {
        struct cluster *cl = open_node(owners[i], FOUR, THREE);

        if (merges_somewhere(cl)) {
            nodes[1] = cl;
        } else {
            cluster_free(cl);
        }
    }
    if (nodes[1] == NULL) {
        die("setup", "no owner of N imports a range it holds");
    }
    for (i = 0; i < 2; i++) {
        struct store_config cfg = { .mem_limit = STORE_LIMIT,
                                    .item_size_max = ITEM_MAX };

        stores[i] = store_new(&cfg);
        if (stores[i] == NULL) {
            die("setup", "out of memory");
        }
    }
}

/*
 * After the stream: no key outside the arcs cl imports is in the store,
 * and deleting every key the stream named leaves it empty (nothing else
 * was linked), ready for the next input.
 */
static void
check_and_empty(struct cluster *cl, struct store *s, const uint8_t *data, size_t size)
{
    struct store_stats st;

    while (size > 0) {
        Ringcache__HandoffBatch *b;
        struct frame             f;
        size_t                   used, i;

        if (frame_decode(data, size, cluster_frame_id(cl), SETTINGS_MAX_FRAME_DEFAULT, &f, &used) !=
            FRAME_OK) {
            break;
        }
        b = ringcache__handoff_batch__unpack(NULL, f.length, f.payload);
        for (i = 0; b != NULL && i < b->n_records; i++) {
            const char        *key = (const char *)b->records[i]->key.data;
            size_t             nkey = b->records[i]->key.len;
            uint64_t           h = ring_hash(key, nkey);
            struct store_item *it;

            if (nkey == 0 || nkey > STORE_KEY_MAX) {
                continue;
            }
            it = store_peek(s, key, nkey, h);
            if (it != NULL) {
                store_release(s, it);
                if (!arcset_has(cluster_importing(cl), h)) {
                    abort();
                }
            }
            store_import_delete(s, key, nkey, h);
        }
        ringcache__handoff_batch__free_unpacked(b, NULL);
        data += used;
        size -= used;
    }
    store_get_stats(s, &st);
    if (st.curr_items != 0) {
        abort();
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t     *stream;
    size_t             left;
    struct store      *s;
    struct handoff_in *in;
    struct cluster    *cl;

    if (nodes[0] == NULL) {
        setup();
    }
    if (size == 0) {
        return 0;
    }
    cl = nodes[data[0] & 1];
    s = stores[data[0] & 1];
    stream = data + 1;
    left = size - 1;
    in = handoff_in_new(cl, s);
    if (in == NULL) {
        abort();
    }
    while (left > 0) {
        struct frame f;
        size_t       used;
        char         err[512];
        uint64_t     seq = 0;
        int          rc;

        if (frame_decode(stream, left, cluster_frame_id(cl), SETTINGS_MAX_FRAME_DEFAULT, &f,
                         &used) != FRAME_OK ||
            f.type != FRAME_HANDOFF_BATCH) {
            break;
        }
        err[0] = '\0';
        rc = handoff_in_batch(in, f.payload, f.length, &seq, err, sizeof(err));
        if (rc < -1 || rc > 1 || (rc != 0 && err[0] == '\0')) {
            abort();
        }
        if (rc < 0) {
            break; /* the cluster port sends an Error and closes */
        }
        stream += used;
        left -= used;
    }
    handoff_in_free(in);
    check_and_empty(cl, s, data + 1, size - 1);
    return 0;
}

/*
 * The seed corpus (RC_FUZZ_SEEDS=DIR): one stream per way a record is
 * applied or refused, with keys the node really imports.
 */

/* The n-th key (from *next on) that cl imports; into holding when that
 * is not NULL, only one it holds (or does not hold) in epoch N. */
static void
key_for(const struct cluster *cl, int holding, unsigned *next, char out[32])
{
    for (;; (*next)++) {
        uint64_t h;

        snprintf(out, 32, "key%u", *next);
        h = ring_hash(out, strlen(out));
        if (arcset_has(cluster_importing(cl), h) &&
            (holding < 0 || cluster_holds_active(cl, h) == (holding == 1))) {
            (*next)++;
            return;
        }
    }
}

struct seed {
    uint8_t  buf[1 << 16];
    size_t   len;
    unsigned next_key;
};

/* Append one HandoffBatch frame of n records. */
static void
put_batch(struct seed *sd, const struct cluster *cl, uint64_t epoch, const char *token,
          uint64_t seq, Ringcache__HandoffRecord *recs, size_t n)
{
    Ringcache__HandoffBatch   b = RINGCACHE__HANDOFF_BATCH__INIT;
    Ringcache__HandoffRecord *ptrs[16];
    size_t                    i, plen;

    for (i = 0; i < n; i++) {
        ptrs[i] = &recs[i];
    }
    b.token.data = (uint8_t *)token;
    b.token.len = strlen(token);
    b.epoch = epoch;
    b.seq = seq;
    b.records = ptrs;
    b.n_records = n;
    plen = ringcache__handoff_batch__get_packed_size(&b);
    if (sd->len + FRAME_HEADER_SIZE + plen > sizeof(sd->buf)) {
        abort();
    }
    frame_header_write(sd->buf + sd->len, FRAME_HANDOFF_BATCH, cluster_frame_id(cl),
                       (uint32_t)plen);
    ringcache__handoff_batch__pack(&b, sd->buf + sd->len + FRAME_HEADER_SIZE);
    sd->len += FRAME_HEADER_SIZE + plen;
}

static Ringcache__HandoffRecord
rec(const char *key, const char *value)
{
    Ringcache__HandoffRecord r = RINGCACHE__HANDOFF_RECORD__INIT;

    r.key.data = (uint8_t *)key;
    r.key.len = strlen(key);
    r.value.data = (uint8_t *)value;
    r.value.len = strlen(value);
    r.cas = 1000;
    return r;
}

static void
write_seed(const char *dir, const char *name, const struct seed *sd)
{
    char  path[1024];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(sd->buf, 1, sd->len, f) != sd->len || fclose(f) != 0) {
        die("write", path);
    }
}

static void
write_seeds(const char *dir)
{
    static char              big[3000];
    struct seed              sd;
    Ringcache__HandoffRecord r[8];
    char                     k[8][32];
    int                      node, i;

    memset(big, 'v', sizeof(big) - 1);
    for (node = 0; node < 2; node++) {
        const struct cluster *cl = nodes[node];
        char                  name[64];
        unsigned              nk = 0;

        /* Whole values, a tombstone, meta state, TTLs. */
        memset(&sd, 0, sizeof(sd));
        sd.buf[sd.len++] = (uint8_t)node;
        for (i = 0; i < 6; i++) {
            key_for(cl, node == 1 ? i % 2 : -1, &nk, k[i]);
            r[i] = rec(k[i], i == 3 ? "" : "value");
        }
        r[1].ttl = 100;
        r[1].flags = 7;
        r[2].tombstone = true;
        r[2].value.len = 0;
        r[3].mflags = 0x01 | 0x04; /* stale, client CAS */
        r[3].client_cas = 4242;
        r[4].ttl = -1; /* already expired */
        r[5].cas = 0;
        put_batch(&sd, cl, PENDING, TOKEN, 1, r, 6);
        r[0].cas = 999; /* older: a merge keeps what is there */
        r[0].value.data = (uint8_t *)"older";
        put_batch(&sd, cl, PENDING, TOKEN, 2, r, 1);
        snprintf(name, sizeof(name), "node%d_records", node);
        write_seed(dir, name, &sd);

        /* A value in three chunks over two batches, then another whole. */
        memset(&sd, 0, sizeof(sd));
        sd.buf[sd.len++] = (uint8_t)node;
        key_for(cl, -1, &nk, k[0]);
        key_for(cl, -1, &nk, k[1]);
        r[0] = rec(k[0], "chunk-one/");
        r[0].total_bytes = 30;
        r[1] = rec(k[0], "chunk-two/");
        r[1].offset = 10;
        put_batch(&sd, cl, PENDING, TOKEN, 1, r, 2);
        r[0] = rec(k[0], "chunk-end/");
        r[0].offset = 20;
        r[1] = rec(k[1], "after");
        put_batch(&sd, cl, PENDING, TOKEN, 2, r, 2);
        snprintf(name, sizeof(name), "node%d_chunks", node);
        write_seed(dir, name, &sd);

        /* Broken chunk sequences: a gap, a different key, a first chunk
         * longer than its value. */
        memset(&sd, 0, sizeof(sd));
        sd.buf[sd.len++] = (uint8_t)node;
        r[0] = rec(k[0], "abc");
        r[0].total_bytes = 10;
        r[1] = rec(k[0], "def");
        r[1].offset = 5;
        put_batch(&sd, cl, PENDING, TOKEN, 1, r, 2);
        snprintf(name, sizeof(name), "node%d_chunk_gap", node);
        write_seed(dir, name, &sd);
        memset(&sd, 0, sizeof(sd));
        sd.buf[sd.len++] = (uint8_t)node;
        r[0] = rec(k[0], "abc");
        r[0].total_bytes = 6;
        r[1] = rec(k[1], "def");
        r[1].offset = 3;
        r[2] = rec(k[0], "toolong");
        r[2].total_bytes = 3;
        put_batch(&sd, cl, PENDING, TOKEN, 1, r, 2);
        put_batch(&sd, cl, PENDING, TOKEN, 2, r + 2, 1);
        snprintf(name, sizeof(name), "node%d_chunk_other_key", node);
        write_seed(dir, name, &sd);

        /* Too large for the store, and enough to evict. */
        memset(&sd, 0, sizeof(sd));
        sd.buf[sd.len++] = (uint8_t)node;
        r[0] = rec(k[0], "x");
        r[0].total_bytes = ITEM_MAX * 2;
        r[1] = rec(k[1], big);
        put_batch(&sd, cl, PENDING, TOKEN, 1, r, 1);
        put_batch(&sd, cl, PENDING, TOKEN, 2, r + 1, 1);
        snprintf(name, sizeof(name), "node%d_too_large", node);
        write_seed(dir, name, &sd);

        /* More than the store holds: imports evict imports. */
        memset(&sd, 0, sizeof(sd));
        sd.buf[sd.len++] = (uint8_t)node;
        for (i = 0; i < 14; i++) {
            key_for(cl, -1, &nk, k[i % 7]);
            r[i % 7] = rec(k[i % 7], big);
            if (i % 7 == 6) {
                put_batch(&sd, cl, PENDING, TOKEN, (uint64_t)i, r, 7);
            }
        }
        snprintf(name, sizeof(name), "node%d_evict", node);
        write_seed(dir, name, &sd);
    }

    /* Lies: wrong token, wrong epoch, a key outside the arcs, no key. */
    memset(&sd, 0, sizeof(sd));
    sd.buf[sd.len++] = 0;
    r[0] = rec("x", "y");
    put_batch(&sd, nodes[0], PENDING, "wrong", 1, r, 1);
    write_seed(dir, "lie_token", &sd);
    memset(&sd, 0, sizeof(sd));
    sd.buf[sd.len++] = 0;
    put_batch(&sd, nodes[0], PENDING + 1, TOKEN, 1, r, 1);
    write_seed(dir, "lie_epoch", &sd);
    memset(&sd, 0, sizeof(sd));
    sd.buf[sd.len++] = 0;
    for (i = 0;; i++) {
        snprintf(k[0], sizeof(k[0]), "out%d", i);
        if (!arcset_has(cluster_importing(nodes[0]), ring_hash(k[0], strlen(k[0])))) {
            break;
        }
    }
    r[0] = rec(k[0], "y");
    put_batch(&sd, nodes[0], PENDING, TOKEN, 1, r, 1);
    write_seed(dir, "lie_outside", &sd);
    memset(&sd, 0, sizeof(sd));
    sd.buf[sd.len++] = 0;
    r[0] = rec("", "y");
    put_batch(&sd, nodes[0], PENDING, TOKEN, 1, r, 1);
    write_seed(dir, "lie_empty_key", &sd);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *dir = getenv("RC_FUZZ_SEEDS");

    (void)argc;
    (void)argv;
    setup();
    if (dir != NULL) {
        write_seeds(dir);
        exit(0);
    }
    return 0;
}
