/*
 * seg_internal: the layout shared by server/seg.c (segments, writes,
 * eviction) and server/seg_index.c (the striped slot index). Nothing else
 * includes it; the API is server/seg.h. do_ functions: the caller holds the
 * key's stripe lock.
 */
#ifndef SERVER_SEG_INTERNAL_H
#define SERVER_SEG_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "server/ghost.h"
#include "server/seg.h"

#define SEG_INTERNAL __attribute__((visibility("hidden")))

#define SEG_STRIPE_BITS 10
#define SEG_STRIPE_MASK (SEG_STRIPES - 1)
#define SEG_NONE        UINT32_MAX /* no segment */

/*
 * A slot (u64): used (bit 63) | spare (62) | freq (61-60) | tag (59-44) |
 * segment id (43-20) | offset in the segment (19-0). The tag is the hash's
 * top 16 bits (48-63), which neither the stripe (bits 0-9) nor the
 * position (bits 10-41, multiply-shift) uses. They are also the top of the
 * key's ring position: a walk of some ranges of the ring skips a slot
 * whose tag is outside them without reading its record (SEG_PREFIX_BITS).
 */
#define SLOT_USED       (1ull << 63)
#define SLOT_FREQ_SHIFT 60
#define SLOT_FREQ_MASK  (3ull << SLOT_FREQ_SHIFT)
#define SLOT_TAG_SHIFT  44
#define SLOT_SEG_SHIFT  20
#define SLOT_OFF_MASK   ((1ull << 20) - 1)
#define SLOT_SEG_MASK   ((1ull << 24) - 1)
#define SEG_MAX_SEGS    (1u << 24) /* ids: the heap's segments, then as many jumbos */
/* Fewest segments: two writers, the main open one and the reserve. */
#define MIN_SEGS 4u

static inline uint64_t
slot_make(uint64_t hash, uint32_t segid, uint32_t off, unsigned freq)
{
    return SLOT_USED | ((uint64_t)freq << SLOT_FREQ_SHIFT) | ((hash >> 48) << SLOT_TAG_SHIFT) |
           ((uint64_t)segid << SLOT_SEG_SHIFT) | off;
}

static inline uint32_t
slot_seg(uint64_t v)
{
    return (uint32_t)((v >> SLOT_SEG_SHIFT) & SLOT_SEG_MASK);
}

static inline uint32_t
slot_off(uint64_t v)
{
    return (uint32_t)(v & SLOT_OFF_MASK);
}

static inline unsigned
slot_freq(uint64_t v)
{
    return (unsigned)((v & SLOT_FREQ_MASK) >> SLOT_FREQ_SHIFT);
}

static inline uint64_t
slot_with_freq(uint64_t v, unsigned f)
{
    return (v & ~SLOT_FREQ_MASK) | ((uint64_t)f << SLOT_FREQ_SHIFT);
}

/* The tag: the top SEG_PREFIX_BITS bits of the record's hash. */
static inline uint32_t
slot_tag(uint64_t v)
{
    return (uint32_t)((v >> SLOT_TAG_SHIFT) & 0xffffull);
}

static inline bool
slot_tag_matches(uint64_t v, uint64_t hash)
{
    return slot_tag(v) == (uint32_t)(hash >> 48);
}

/* A stripe of the index: open addressing, linear probing. */
struct seg_stripe {
    pthread_mutex_t lock;
    uint64_t       *slots;
    uint32_t        nslots;
    uint32_t        count; /* atomic stores: used slots */
} __attribute__((aligned(64)));

/* Where a segment is. */
enum seg_queue {
    SQ_FREE = 0,
    SQ_OPEN,     /* a thread's open segment */
    SQ_MAINOPEN, /* the main open segment */
    SQ_SMALL,    /* sealed, new keys */
    SQ_MAIN,     /* sealed, keys that earned a second lap */
    SQ_EVICTING,
    SQ_RESERVE, /* the evictor's spare */
    SQ_HELD,    /* a heap segment a jumbo is charged as (its pages released) */
    SQ_JUMBO,   /* a jumbo being written, not queued yet */
};

/* A segment's metadata, apart from its bytes (so an untouched segment
 * costs no RSS). */
struct seg_meta {
    uint32_t write_off;  /* bytes written (for an open segment: at seal) */
    uint32_t create;     /* when it was opened (seconds) */
    uint32_t live_bytes; /* atomic: bytes of linked records */
    uint32_t live_items; /* atomic */
    uint32_t pending;    /* atomic: records appended to the main open segment, not linked yet */
    uint32_t next, prev; /* queue links (heap_mu) */
    uint8_t  queue;      /* enum seg_queue (heap_mu) */
};

/* A jumbo segment: one record over a quarter segment, in a mapping of its
 * own; its id is nsegs + its index in s->jumbo. */
struct seg_jumbo {
    size_t   len;  /* bytes mapped (whole pages) */
    uint32_t held; /* the heap segments it is charged as, linked by meta.next */
    uint32_t next; /* the free jumbo list (heap_mu) */
};

/* A thread's open segment (pthread key per engine). */
struct seg_writer {
    struct seg        *s;
    uint32_t           segid; /* SEG_NONE before the first write */
    uint32_t           off;
    struct seg_writer *next; /* s->writers (heap_mu) */
};

struct seg {
    struct seg_config cfg;
    uint8_t          *base; /* nsegs * seg_size bytes, MAP_NORESERVE */
    size_t            map_len;
    uint32_t          seg_size;
    uint32_t          nsegs;
    uint32_t          item_max;      /* largest value (cfg.item_max or SEG_ITEM_MAX_DEFAULT) */
    struct seg_meta  *meta;          /* 2 * nsegs: the heap's segments, then the jumbos */
    uint8_t         **jaddr;         /* nsegs: each jumbo's mapping, or NULL */
    struct seg_jumbo *jumbo;         /* nsegs (heap_mu) */
    uint32_t          jfree;         /* free jumbo indices (heap_mu) */
    uint32_t          njumbo, nheld; /* jumbos in use, heap segments they hold (heap_mu) */
    uint32_t          withheld, nwithheld; /* seg_set_limit's segments (heap_mu; a list
                                            * through meta[].next, valid when n > 0) */

    pthread_mutex_t    heap_mu; /* free list, queues, writers */
    uint32_t           free_head;
    uint32_t           nfree;
    uint32_t           q_head[2], q_tail[2], q_count[2]; /* [0] small, [1] main; head = oldest */
    uint32_t           reserve;                          /* SEG_NONE or the evictor's spare */
    struct seg_writer *writers;
    pthread_key_t      tls;

    pthread_mutex_t main_mu; /* the main open segment */
    uint32_t        main_seg, main_off;

    pthread_mutex_t evict_mu; /* one eviction at a time */

    struct ghost ghost; /* keys evicted unread from SMALL */

    uint64_t evictions, reclaimed, moved; /* atomic */

    struct seg_stripe stripes[SEG_STRIPES];
};

static inline uint8_t *
seg_rec_at(const struct seg *s, uint32_t segid, uint32_t off)
{
    if (segid >= s->nsegs) { /* a jumbo */
        return s->jaddr[segid - s->nsegs] + off;
    }
    return s->base + (size_t)segid * s->seg_size + off;
}

static inline struct seg_stripe *
seg_stripe(struct seg *s, uint64_t hash)
{
    return &s->stripes[hash & SEG_STRIPE_MASK];
}

static inline bool
seg_rec_dead(const struct seg_rec *r, int64_t now, uint64_t floor)
{
    return r->cas < floor || (r->exptime != 0 && (int64_t)r->exptime <= now);
}

/* Which sealed queue (q_head/q_tail/q_count index). */
enum {
    QI_SMALL = 0,
    QI_MAIN = 1
};

/* The owner's clock and flush floor (seg_config's hooks). */
static inline int64_t
eng_now(const struct seg *s)
{
    return s->cfg.now != NULL ? s->cfg.now(s->cfg.clock_arg) : (int64_t)time(NULL);
}

static inline uint64_t
eng_floor(const struct seg *s)
{
    return s->cfg.floor != NULL ? s->cfg.floor(s->cfg.clock_arg) : 0;
}

/* ---- seg.c --------------------------------------------------------------- */

/* Add (sign 1) or remove (-1) a record of sz bytes to its segment's live
 * counters. Caller holds the key's stripe lock. */
SEG_INTERNAL void live_add(struct seg *s, uint32_t id, size_t sz, int sign);

/* Unlink a slot and its record's bytes (sz). Caller holds the stripe lock. */
SEG_INTERNAL void do_seg_unlink(struct seg *s, struct seg_stripe *st, uint64_t *slot, size_t sz);

/* Encode r (sz bytes) into the calling thread's open segment, or with
 * to_main into the main open one (a full one replaced by *spare when that
 * is not SEG_NONE; *spare becomes SEG_NONE once used; the segment's pending
 * count is raised: drop it once linked). Never takes a segment, so it runs
 * under the key's stripe lock: 0, 1 when seg_make_room must run first
 * (without the stripe lock), or SEG_NO_MEMORY. */
SEG_INTERNAL int do_seg_append(struct seg *s, const struct seg_rec *r, size_t sz, bool to_main,
                               uint32_t *spare, uint32_t *segid, uint32_t *off);

/* Make the room do_seg_append asked for: seal the thread's open segment
 * and take a new one, or (to_main) take a spare into *spare. May evict;
 * the caller holds no lock. 0 or SEG_NO_MEMORY. */
SEG_INTERNAL int seg_make_room(struct seg *s, bool to_main, uint32_t *spare);

/* Give an unused spare back to the free list (SEG_NONE: nothing). */
SEG_INTERNAL void seg_spare_free(struct seg *s, uint32_t spare);

/* The heap (heap_mu held): put a segment on the free list, take one (or
 * SEG_NONE), queue a sealed segment or jumbo (QI_SMALL, QI_MAIN). */
SEG_INTERNAL void     free_push(struct seg *s, uint32_t id);
SEG_INTERNAL uint32_t free_pop(struct seg *s, enum seg_queue as);
SEG_INTERNAL void     q_push(struct seg *s, int q, uint32_t id);
SEG_INTERNAL void     q_remove(struct seg *s, int q, uint32_t id);

/* A free segment, evicting until one is free; SEG_NONE when nothing is
 * left to evict. The caller holds no lock. */
SEG_INTERNAL uint32_t take_segment(struct seg *s, enum seg_queue as);

/* ---- seg_jumbo.c -------------------------------------------------------- */

/* Set up the jumbo table (seg_new) and unmap what is left (seg_free). */
SEG_INTERNAL int  seg_jumbo_init(struct seg *s);
SEG_INTERNAL void seg_jumbo_fini(struct seg *s);

/* A jumbo with room for sz bytes, charged as ceil(len / seg_size) heap
 * segments taken from the free pool (evicting for them); its id, or
 * SEG_NONE when the limit cannot hold it. The caller holds no lock. */
SEG_INTERNAL uint32_t seg_jumbo_new(struct seg *s, size_t sz);

/* Unmap a jumbo and give its segments back (SEG_NONE: nothing). Takes
 * heap_mu; the jumbo's record must be unlinked (or never linked). */
SEG_INTERNAL void seg_jumbo_free(struct seg *s, uint32_t id);

/* A jumbo's record was unlinked (overwritten, deleted, expired): free it
 * now unless the evictor holds it (it frees it itself). Caller holds the
 * key's stripe lock. */
SEG_INTERNAL void seg_jumbo_unlinked(struct seg *s, uint32_t id);

/* Queue a written jumbo (its record linked) on q; takes heap_mu. */
SEG_INTERNAL void seg_jumbo_queue(struct seg *s, uint32_t id, uint32_t sz, int q);

/* Room a jumbo has. */
static inline size_t
seg_jumbo_len(const struct seg *s, uint32_t id)
{
    return s->jumbo[id - s->nsegs].len;
}

/* ---- seg_index.c -------------------------------------------------------- */

SEG_INTERNAL int  seg_index_init(struct seg *s);
SEG_INTERNAL void seg_index_free(struct seg *s);

/* The slot of a key's record (live or dead), or NULL; the record decoded
 * into *r and its size in *sz (a lookup decodes it once). */
SEG_INTERNAL uint64_t *do_index_find(struct seg *s, struct seg_stripe *st, const char *key,
                                     size_t nkey, uint64_t hash, struct seg_rec *r, size_t *sz);

/* The slot that points at the record at (segid, off) of this hash, or NULL
 * (the record is dead bytes). */
SEG_INTERNAL uint64_t *do_index_find_at(struct seg_stripe *st, uint64_t hash, uint32_t segid,
                                        uint32_t off);

/* Add a slot for a key that has none, growing the stripe by 1.5x when its
 * load would pass 0.85. 0, or -1 when the grown array cannot be
 * allocated. */
SEG_INTERNAL int do_index_add(struct seg *s, struct seg_stripe *st, uint64_t hash, uint64_t slot);

/* Remove a slot (backward-shift deletion). */
SEG_INTERNAL void do_index_remove(struct seg *s, struct seg_stripe *st, uint64_t *slot);

/* XXH3_64bits of the key of the record a slot points at. */
SEG_INTERNAL uint64_t seg_slot_hash(const struct seg *s, uint64_t slot);

#endif /* SERVER_SEG_INTERNAL_H */
