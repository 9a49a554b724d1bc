/*
 * handoff_in: the destination side of the handoff. One peer connection's
 * batches (server/cport.c decodes the frames) are checked against the
 * pending transition and imported into the store, values over one batch
 * arriving in chunks: replacing what a purged range holds, merged by CAS
 * into a range this node still owns in epoch N (in_link). The source side
 * is server/handoff.c.
 */
#include "config.h"
#include "server/handoff_in.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/ringcache.pb-c.h"
#include "server/cluster.h"
#include "server/handoff.h"
#include "server/replicate.h"
#include "server/store.h"

/*
 * Where a batch is unpacked: protobuf-c allocates each record, its key
 * and its value (up to 256 records of a batch, 3 allocations each, all
 * freed when the batch is done), so they come from one buffer kept for
 * the connection and reused from its start for each batch. Measured on a
 * join of 152k items: malloc and free were a fifth of the destination's
 * cluster thread. Sized for the frame before each batch, so what does not
 * fit (never, for a frame protobuf-c parses) falls back to malloc.
 */
struct unpack_arena {
    uint8_t *buf;
    size_t   cap, used;
};

/* The state of a value arriving in chunks on one peer connection. */
struct handoff_in {
    struct cluster     *cl;
    struct store       *s;
    struct store_item  *it; /* allocated, being filled */
    uint64_t            cas;
    size_t              got;
    bool                merge; /* it goes to a range held in epoch N */
    struct unpack_arena arena;
};

#define ARENA_ALIGN 16

static void *
arena_alloc(void *data, size_t size)
{
    struct unpack_arena *a = data;
    size_t               n = (size + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);

    if (n >= size && a->cap - a->used >= n) {
        void *p = a->buf + a->used;

        a->used += n;
        return p;
    }
    return malloc(size);
}

static void
arena_free(void *data, void *p)
{
    struct unpack_arena *a = data;

    if (p != NULL && ((uint8_t *)p < a->buf || (uint8_t *)p >= a->buf + a->cap)) {
        free(p);
    }
}

/* Room for what unpacking a payload of len bytes allocates: its bytes
 * fields (at most len), and for a batch of up to HANDOFF_BATCH_RECORDS
 * records (what a source sends) each one's struct and pointer; a batch of
 * more takes the rest from malloc. Keeps the buffer when it is big
 * enough. */
static void
arena_reset(struct unpack_arena *a, size_t len)
{
    size_t want = len + 4096 +
                  HANDOFF_BATCH_RECORDS *
                      (sizeof(Ringcache__HandoffRecord) + sizeof(void *) + 3 * ARENA_ALIGN);

    a->used = 0;
    if (want > a->cap) {
        free(a->buf);
        a->buf = malloc(want);
        a->cap = a->buf != NULL ? want : 0;
    }
}

/* See handoff_in.h. */
struct handoff_in *
handoff_in_new(struct cluster *cl, struct store *s)
{
    struct handoff_in *in = calloc(1, sizeof(*in));

    if (in != NULL) {
        in->cl = cl;
        in->s = s;
    }
    return in;
}

/* Forget a value being assembled from chunks (our reference goes). */
static void
in_drop_chunk(struct handoff_in *in)
{
    if (in->it != NULL) {
        store_release(in->s, in->it);
        in->it = NULL;
    }
    in->got = 0;
}

/* See handoff_in.h. */
void
handoff_in_free(struct handoff_in *in)
{
    if (in == NULL) {
        return;
    }
    in_drop_chunk(in);
    free(in->arena.buf);
    free(in);
}

/* Count imports in the cluster counters (`stats` reads them from workers). */
static void
imported_add(struct handoff_in *in, uint64_t items, uint64_t bytes)
{
    cluster_count_imported(in->cl, items, bytes);
}

/*
 * Link a post-image that arrived whole or in chunks (the caller keeps its
 * reference). Into a range this node does not hold in epoch N (it was
 * purged at the Prepare) the copy is the only writer before the commit and
 * replaces what is there. Into a range it holds in N (it owns it there,
 * the copy refills it because only the old primary is trusted) it merges
 * as a replica's post-image does: applied only if not older by CAS than
 * what the key holds or than a delete this node recently applied. So a
 * write that reached this owner during the copy (as an owner of N) is
 * never overwritten by an older image of the copy, and epoch N's copy is
 * never moved backwards, which an abort relies on. Tombstones and expired
 * images carry no CAS to order them by, so they are not merged: the
 * delete they stand for reached this owner of N as a replica (in_record).
 */
static int
in_link(struct handoff_in *in, struct store_item *it, uint64_t cas, bool merge)
{
    if (merge) {
        if (store_item_ttl_remaining(in->s, it) < 0) {
            return 0;
        }
        /* Dropped under a tombstone: this owner of N applied a delete
         * newer than the copy's image (as before fencing: not an error). */
        int rc = replicate_apply_put(in->s, it, cas, 0, NULL);

        return rc == REPLICATE_REMOVED ? 0 : rc;
    }
    return store_put_import(in->s, it, cas);
}

/* Copy a record's value (or chunk) to dst: an empty one (a vivified meta
 * item) has no data pointer at all. */
static inline void
copy_value(char *dst, const Ringcache__HandoffRecord *r)
{
    if (r->value.len > 0) {
        memcpy(dst, r->value.data, r->value.len);
    }
}

/* The item a post-image record becomes (its meta state included), to fill
 * with nbytes of value. */
static struct store_item *
import_alloc(struct store *s, const Ringcache__HandoffRecord *r, const char *key, uint64_t hash,
             size_t nbytes, int *err)
{
    return store_import_alloc_meta(s, key, r->key.len, hash, r->flags, r->ttl, nbytes,
                                   (uint8_t)(r->mflags & STORE_MF_REPLICATED), r->client_cas, err);
}

/* Apply one record; 0, 1 (store refused, err set) or -1 (a lie). */
static int
in_record(struct handoff_in *in, const Ringcache__HandoffRecord *r, char *err, size_t errlen)
{
    struct store *s = in->s;
    const char   *key = (const char *)r->key.data;
    uint64_t      hash;
    bool          merge;
    int           rc = 0;

    if (r->key.len == 0 || r->key.len > STORE_KEY_MAX) {
        snprintf(err, errlen, "record with a key of %zu bytes", r->key.len);
        return -1;
    }
    hash = ring_hash(key, r->key.len);
    if (!arcset_has(cluster_importing(in->cl), hash)) {
        snprintf(err, errlen, "key %.*s is outside the arcs this node imports",
                 (int)(r->key.len > 64 ? 64 : r->key.len), key);
        return -1;
    }
    merge = cluster_holds_active(in->cl, hash);
    if (in->it != NULL || r->offset != 0) {
        /* A continuation chunk: same key, next offset. */
        if (in->it == NULL || r->tombstone || r->total_bytes != 0 || r->offset != in->got ||
            r->key.len != in->it->nkey || memcmp(key, store_item_key(in->it), r->key.len) != 0 ||
            r->value.len > in->it->nbytes - in->got) {
            snprintf(err, errlen, "broken chunk sequence for key %.*s",
                     (int)(r->key.len > 64 ? 64 : r->key.len), key);
            return -1;
        }
        copy_value(store_item_value_mut(in->it) + in->got, r);
        in->got += r->value.len;
        imported_add(in, 0, r->value.len);
        if (in->got == in->it->nbytes) {
            rc = in_link(in, in->it, in->cas, in->merge);
            imported_add(in, 1, 0);
            in_drop_chunk(in);
        }
    } else if (r->tombstone) {
        if (!merge) {
            store_import_delete(s, key, r->key.len, hash);
        }
        imported_add(in, 1, 0);
    } else if (r->total_bytes != 0) {
        int e = 0;

        if (r->value.len > r->total_bytes) {
            snprintf(err, errlen, "first chunk longer than its value");
            return -1;
        }
        in->it = import_alloc(s, r, key, hash, r->total_bytes, &e);
        if (in->it == NULL) {
            rc = e;
        } else {
            in->cas = r->cas;
            in->merge = merge;
            copy_value(store_item_value_mut(in->it), r);
            in->got = r->value.len;
            imported_add(in, 0, r->key.len + r->value.len);
            if (in->got == r->total_bytes) {
                rc = in_link(in, in->it, in->cas, in->merge);
                imported_add(in, 1, 0);
                in_drop_chunk(in);
            }
        }
    } else if (!merge && r->mflags == 0) {
        rc = store_import(s, key, r->key.len, hash, r->flags, r->ttl, r->cas,
                          (const char *)r->value.data, r->value.len);
        imported_add(in, 1, r->key.len + r->value.len);
    } else {
        struct store_item *it;
        int                e = 0;

        it = import_alloc(s, r, key, hash, r->value.len, &e);
        if (it == NULL) {
            rc = e;
        } else {
            copy_value(store_item_value_mut(it), r);
            rc = in_link(in, it, r->cas, merge);
            store_release(s, it);
        }
        imported_add(in, 1, r->key.len + r->value.len);
    }
    if (rc == STORE_TOO_LARGE || rc == STORE_NO_MEMORY) {
        snprintf(err, errlen, "import of %.*s: %s", (int)(r->key.len > 64 ? 64 : r->key.len), key,
                 rc == STORE_TOO_LARGE ? "too large" : "out of memory");
        return 1;
    }
    return 0;
}

/* See handoff.h. Evictions caused by the imports fail the batch: the
 * destination would otherwise lose live keys to make room silently. */
int
handoff_in_batch(struct handoff_in *in, const uint8_t *payload, size_t len, uint64_t *seq,
                 char *err, size_t errlen)
{
    struct cluster          *cl = in->cl;
    ProtobufCAllocator       alloc = { arena_alloc, arena_free, &in->arena };
    Ringcache__HandoffBatch *b;
    uint64_t                 evictions;
    size_t                   i;
    int                      rc = 0;

    arena_reset(&in->arena, len);
    b = ringcache__handoff_batch__unpack(&alloc, len, payload);
    if (b == NULL) {
        snprintf(err, errlen, "bad HandoffBatch");
        return -1;
    }
    *seq = b->seq;
    if (cluster_pending_epoch(cl) == 0 || b->epoch != cluster_pending_epoch(cl) ||
        !cluster_token_ok(cl, b->token.data, b->token.len)) {
        snprintf(err, errlen,
                 "batch for epoch %" PRIu64 " does not match the pending "
                 "transition (epoch %" PRIu64 ")",
                 b->epoch, cluster_pending_epoch(cl));
        rc = -1;
        goto out;
    }
    /* The source's flushes first: what they removed is not imported. */
    store_flush_floor(in->s, b->flush_floor);
    if (b->flush_at != 0) {
        store_flush_at(in->s, b->flush_at_floor, b->flush_at);
    }
    evictions = store_import_evictions(in->s);
    for (i = 0; i < b->n_records && rc == 0; i++) {
        rc = in_record(in, b->records[i], err, errlen);
    }
    if (rc == 0 && store_import_evictions(in->s) > evictions) {
        snprintf(err, errlen, "imports evicted %" PRIu64 " live items: not enough memory",
                 store_import_evictions(in->s) - evictions);
        rc = 1;
    }
out:
    ringcache__handoff_batch__free_unpacked(b, &alloc);
    return rc;
}
