/*
 * seg_update: the compact engine's writes. seg_update is a read-modify-write
 * under the key's stripe lock (the build sees the old record and says what
 * replaces it); seg_put is seg_update with a build that writes the caller's
 * record if its check agrees. seg.c has the segments they append to.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "server/seg.h"
#include "server/seg_internal.h"

/* do_update's "release the lock, make room, build again": a segment, or
 * a jumbo of room->need bytes. */
#define NEED_ROOM  100
#define NEED_JUMBO 101

/* What seg_update took for its write, kept over its attempts. */
struct room {
    uint32_t spare; /* a segment to replace a full main open one */
    uint32_t jumbo; /* a jumbo of room->need bytes or more */
    size_t   need;
};

/*
 * One attempt of seg_update, the stripe lock held: find the old record,
 * build, and write and link the result. NEED_ROOM or NEED_JUMBO when the
 * write needs a segment or a jumbo first (taken without the lock: eviction
 * takes stripe locks).
 */
static int
do_update(struct seg *s, struct seg_stripe *st, const char *key, size_t nkey, uint64_t hash,
          int64_t now, uint64_t floor, seg_build_fn build, void *arg, bool to_main,
          struct room *room)
{
    struct seg_rec old, nr;
    size_t         sz, oldsz = 0;
    uint64_t      *slot = do_index_find(s, st, key, nkey, hash, &old, &oldsz);
    bool           live = false;
    uint32_t       segid, off;
    int            rc, jumbo_q = QI_SMALL;

    if (slot != NULL) {
        live = !seg_rec_dead(&old, now, floor);
    }
    memset(&nr, 0, sizeof(nr));
    nr.key = key;
    nr.nkey = (uint8_t)nkey;
    rc = build(arg, live ? &old : NULL, &nr);
    nr.key = key;
    nr.nkey = (uint8_t)nkey;
    if (rc == SEG_BUILD_KEEP) {
        return SEG_REFUSED;
    }
    if (rc == SEG_BUILD_DELETE) {
        if (slot != NULL) {
            do_seg_unlink(s, st, slot, oldsz);
        }
        return live ? SEG_OK : SEG_MISS;
    }
    if (rc != SEG_BUILD_WRITE || (nr.nbytes > 0 && nr.value == NULL)) {
        return SEG_BAD_ARGUMENT;
    }
    rc = SEG_OK;
    if (nr.nbytes > s->item_max) {
        return SEG_TOO_LARGE;
    }
    sz = seg_rec_size(seg_rec_has(&nr), nkey, nr.nbytes);
    if (sz > s->seg_size / 4) { /* a jumbo of its own */
        if (room->jumbo == SEG_NONE || seg_jumbo_len(s, room->jumbo) < sz) {
            room->need = sz;
            return NEED_JUMBO;
        }
        jumbo_q = to_main ? QI_MAIN : QI_SMALL;
        segid = room->jumbo;
        off = 0;
        seg_rec_encode(seg_rec_at(s, segid, 0), &nr);
        room->jumbo = SEG_NONE;
    } else {
        rc = do_seg_append(s, &nr, sz, to_main, &room->spare, &segid, &off);
        if (rc != 0) {
            return rc == 1 ? NEED_ROOM : rc;
        }
    }
    if (slot != NULL) {
        /* A live key keeps its read count; a dead one's is not its. */
        live_add(s, slot_seg(*slot), oldsz, -1);
        *slot = slot_make(hash, segid, off, live ? slot_freq(*slot) : 0);
        live_add(s, segid, sz, 1);
    } else if (do_index_add(s, st, hash, slot_make(hash, segid, off, 0)) < 0) {
        rc = SEG_NO_MEMORY; /* the appended bytes are dead */
    } else {
        live_add(s, segid, sz, 1);
    }
    if (segid >= s->nsegs) {
        if (rc == SEG_OK) { /* linked: now eviction may meet it */
            seg_jumbo_queue(s, segid, (uint32_t)sz, jumbo_q);
        } else {
            room->jumbo = segid; /* freed by seg_update */
        }
    } else if (to_main) { /* linked (or dead): eviction may empty its segment */
        __atomic_fetch_sub(&s->meta[segid].pending, 1, __ATOMIC_RELEASE);
    }
    return rc;
}

/* See seg.h. */
int
seg_update(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now, uint64_t floor,
           seg_build_fn build, void *arg)
{
    struct seg_stripe *st = seg_stripe(s, hash);
    struct room        room = { SEG_NONE, SEG_NONE, 0 };
    bool               to_main;
    int                rc;

    if (nkey == 0 || nkey > SEG_KEY_MAX) {
        return SEG_BAD_ARGUMENT;
    }
    /* A key evicted unread from SMALL and written again earned MAIN. */
    to_main = ghost_take(&s->ghost, hash);
    for (;;) {
        pthread_mutex_lock(&st->lock);
        rc = do_update(s, st, key, nkey, hash, now, floor, build, arg, to_main, &room);
        pthread_mutex_unlock(&st->lock);
        if (rc == NEED_JUMBO) {
            /* Mapped and charged (which may evict) without the lock. */
            seg_jumbo_free(s, room.jumbo);
            room.jumbo = seg_jumbo_new(s, room.need);
            rc = room.jumbo != SEG_NONE ? SEG_OK : SEG_NO_MEMORY;
        } else if (rc == NEED_ROOM) {
            /* A fresh segment holds any record up to a quarter segment,
             * so the next attempt appends. */
            rc = seg_make_room(s, to_main, &room.spare);
        } else {
            break;
        }
        if (rc != SEG_OK) {
            break;
        }
    }
    seg_spare_free(s, room.spare);
    seg_jumbo_free(s, room.jumbo); /* unused: the build changed its mind */
    return rc;
}

/* seg_put's record and check. */
struct put_arg {
    const struct seg_rec *r;
    seg_check_fn          check;
    void                 *arg;
};

static int
put_build(void *arg, const struct seg_rec *old, struct seg_rec *nr)
{
    const struct put_arg *p = arg;

    if (p->check != NULL && !p->check(p->arg, old)) {
        return SEG_BUILD_KEEP;
    }
    *nr = *p->r;
    return SEG_BUILD_WRITE;
}

/* See seg.h. */
int
seg_put(struct seg *s, uint64_t hash, const struct seg_rec *r, seg_check_fn check, void *arg)
{
    struct put_arg p = { r, check, arg };

    return seg_update(s, r->key, r->nkey, hash, eng_now(s), eng_floor(s), put_build, &p);
}
