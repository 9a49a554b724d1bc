/*
 * seg: the compact item engine (issue 22, first layer). Records are written
 * in order into fixed segments carved from one mapping, found through a
 * striped index of 8-byte slots, and evicted a whole segment at a time by
 * S3-FIFO over segments. Reads copy out under the key's stripe lock. Not yet
 * behind server/store.h: docs/store-engine.md maps the store's operations
 * onto this layer.
 */
#ifndef SERVER_SEG_H
#define SERVER_SEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/seg_item.h"

#define SEG_SIZE_DEFAULT     (1u << 20) /* and the largest: slots hold 20-bit offsets */
#define SEG_SIZE_MIN         (1u << 12)
#define SEG_STRIPES          1024u
#define SEG_KEY_MAX          250u
#define SEG_ITEM_MAX_DEFAULT (1u << 20) /* largest value, as memcached's -I */

/* Results (>= 0) and errors (< 0). */
enum seg_result {
    SEG_OK = 0,
    SEG_MISS = 1,          /* no live record for the key */
    SEG_REFUSED = 2,       /* the caller's check said no */
    SEG_GONE_EXPIRED = 3,  /* seg_get with SEG_GET_WHY: a miss, the record found expired */
    SEG_GONE_FLUSHED = 4,  /* ... found below the flush floor */
    SEG_TOO_LARGE = -2,    /* value over the item maximum (cfg.item_max) */
    SEG_NO_MEMORY = -3,    /* no segment to write into (all are open) or no index room */
    SEG_BAD_ARGUMENT = -4, /* key length 0 or over SEG_KEY_MAX */
};

/* What the engine asks its owner: the time, the flush floor (a record with
 * a CAS below it is dead) and who to tell about removals. */
typedef int64_t (*seg_now_fn)(void *arg);
typedef uint64_t (*seg_floor_fn)(void *arg);

/*
 * A record the engine removed by itself: evicted (expired false) or found
 * expired at eviction or on a read (expired true). Flushed records are
 * removed silently (a flush travels to every node by itself). Called under
 * the key's stripe lock; r points into the segment for the call only.
 */
typedef void (*seg_drop_fn)(void *arg, uint64_t hash, const struct seg_rec *r, bool expired);

/*
 * A record handed to a caller: r's key and value point into the segment
 * and are valid only during the call, which runs under the key's stripe
 * lock (copy out, do not call back into the engine). freq is the record's
 * read count (0..3). Returns 0, or nonzero to stop a walk.
 */
typedef int (*seg_item_fn)(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq);

/* A conditional write's test, under the key's stripe lock: old is the live
 * record of the key or NULL. True lets the operation go on. */
typedef bool (*seg_check_fn)(void *arg, const struct seg_rec *old);

struct seg_config {
    size_t       mem_limit; /* bytes of segments; floor(mem_limit / seg_size) of them */
    uint32_t     seg_size;  /* SEG_SIZE_MIN..SEG_SIZE_DEFAULT; 0 = the default */
    uint32_t     item_max;  /* largest value in bytes; 0 = SEG_ITEM_MAX_DEFAULT */
    seg_now_fn   now;       /* NULL: time(NULL) */
    seg_floor_fn floor;     /* NULL: no flush floor */
    void        *clock_arg;
    seg_drop_fn  drop; /* may be NULL */
    void        *drop_arg;
};

struct seg_stats {
    uint64_t items;      /* linked records */
    uint64_t live_bytes; /* their bytes in segments */
    uint64_t segs_total, segs_free, segs_open;
    uint64_t segs_small, segs_main; /* queued segments and jumbos */
    uint64_t evictions;             /* live records dropped to make room */
    uint64_t reclaimed;             /* dead records (expired, flushed) found at eviction */
    uint64_t moved;                 /* records copied to the main open segment by eviction */
    uint64_t index_slots, index_bytes;
    uint64_t jumbos;        /* records over a quarter segment, each in a mapping of its own */
    uint64_t segs_held;     /* heap segments the jumbos are charged as (of segs_total) */
    uint64_t segs_withheld; /* segments seg_set_limit keeps out of use (of segs_total) */
};

/* seg_get's how. */
#define SEG_GET_FETCH 0x1u /* a read: count it, mark fetched, stamp atime */
#define SEG_GET_WHY   0x2u /* a miss that unlinked a dead record says why (SEG_GONE_*) */

/* What a seg_update build does with the key. */
enum seg_build {
    SEG_BUILD_WRITE = 0,  /* write nr in place of the old record */
    SEG_BUILD_KEEP = 1,   /* leave the old record (or none): SEG_REFUSED */
    SEG_BUILD_DELETE = 2, /* unlink the old record: SEG_OK, or SEG_MISS when none */
};

/*
 * seg_update's build, under the key's stripe lock: old is the key's live
 * record (its key and value point into the segment) or NULL. To write, it
 * fills nr (zeroed, key and nkey preset and not to be changed) with the new
 * record's fields, state bits and value: nr->value may point at the
 * caller's bytes or into old->value, and needs to stay valid only until the
 * build returns to the engine's write (the engine copies it before it drops
 * the lock). It is called again (with the then-current old record) when
 * the write first needed a new segment or a jumbo (taken without the
 * lock): twice at most, unless the record grew past the jumbo mapped for
 * it meanwhile. So it must not count on running once; only the last call's
 * outcome is applied. Returns enum seg_build (anything else:
 * SEG_BAD_ARGUMENT, nothing written). It must not call into the engine.
 */
typedef int (*seg_build_fn)(void *arg, const struct seg_rec *old, struct seg_rec *nr);

/* A new engine: reserves (does not touch) the segments' address space and
 * allocates the index. NULL on a bad config or no memory. */
struct seg *seg_new(const struct seg_config *cfg);

/* Free the engine. No other thread may be using it. */
void seg_free(struct seg *s);

/*
 * Store r (key, value and fields; its has_ bits are derived from the
 * fields, its state bits kept) under hash = XXH3_64bits(key). The record
 * is appended to the calling thread's open segment (or the main open one
 * when the key is a recent ghost), then linked under the stripe lock in
 * place of the key's old record, if check (may be NULL) agrees; the new
 * record keeps the old one's read count. Nothing is written on
 * SEG_REFUSED. seg_update with a build that checks and copies r. May
 * evict (the caller holds no stripe lock).
 */
int seg_put(struct seg *s, uint64_t hash, const struct seg_rec *r, seg_check_fn check, void *arg);

/*
 * Read-modify-write under the key's stripe lock: hand the live record (or
 * NULL) to build, then write what it built in place of it and relink,
 * without dropping the lock in between, so no other write to the key can
 * come between the read and the write (append, incr, merging by CAS need
 * no retry loop). The new record keeps the old one's read count. Returns
 * SEG_OK, SEG_REFUSED (build kept the old record), SEG_MISS (build deleted
 * and there was none), SEG_TOO_LARGE (the built record is over the item
 * maximum: the old record stays), SEG_NO_MEMORY or SEG_BAD_ARGUMENT. May
 * evict (the caller holds no stripe lock).
 */
int seg_update(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now,
               uint64_t floor, seg_build_fn build, void *arg);

/*
 * Find the live record of a key and hand it to cb (under the stripe lock).
 * With SEG_GET_FETCH, count a read (freq, saturating at 3), mark it fetched
 * and stamp atime on the first fetch and then at most once per 60 s. A
 * dead record (expired at now, or CAS below floor) is unlinked: SEG_MISS.
 */
int seg_get(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now, uint64_t floor,
            unsigned how, seg_item_fn cb, void *arg);

/* Unlink a key's live record if check (may be NULL) agrees: SEG_OK,
 * SEG_MISS or SEG_REFUSED. Its bytes become dead. */
int seg_delete(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now,
               uint64_t floor, seg_check_fn check, void *arg);

/* Set a live record's exptime (0 = never): in place when the record has
 * the field, else by writing a copy with it. SEG_OK or SEG_MISS. */
int seg_touch(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now,
              uint64_t floor, uint32_t exptime);

/* Set and clear a live record's state bits (SEG_RB_STALE, SEG_RB_WON,
 * SEG_RB_FETCHED) in place. SEG_OK or SEG_MISS. */
int seg_set_state(struct seg *s, const char *key, size_t nkey, uint64_t hash, int64_t now,
                  uint64_t floor, uint8_t set, uint8_t clear);

/* Hand every live record of one stripe (0..SEG_STRIPES-1) to cb in slot
 * order, with its hash (the handoff filters by ring position), holding the
 * stripe lock for the whole stripe (see docs/store-engine.md). Returns the
 * records handed, or stops early when cb returns nonzero. */
long seg_walk(struct seg *s, uint32_t stripe, seg_item_fn cb, void *arg);

/* Hand every record of one stripe whose CAS is below `below` to cb, dead
 * or alive: a flush during a handoff records each flushed key (the floor
 * has made them dead already); a purge removes every record (UINT64_MAX).
 * Only those whose prefix is in prefixes (NULL: all; see seg_walk_prefixes).
 * Returns the records handed. */
long seg_walk_below(struct seg *s, uint32_t stripe, uint64_t below, const uint64_t *prefixes,
                    seg_item_fn cb, void *arg);

/* A prefix map: 2^SEG_PREFIX_BITS bits, bit p (word p / 64, bit p % 64)
 * for the hashes whose top SEG_PREFIX_BITS bits are p. The index keeps
 * those bits in every slot, so a walk given a map skips a record outside
 * it without reading it: a walk of a quarter of the ring reads a quarter
 * of the records. NULL: every record. */
#define SEG_PREFIX_BITS  16
#define SEG_PREFIX_WORDS ((1u << SEG_PREFIX_BITS) / 64)

/* seg_walk of the records whose prefix is in the map (NULL: all). */
long seg_walk_prefixes(struct seg *s, uint32_t stripe, const uint64_t *prefixes, seg_item_fn cb,
                       void *arg);

/* Lock and unlock one stripe: a write to that stripe that started before
 * has finished, one that starts after sees what the caller wrote before
 * (the store turns dirty tracking on this way). */
void seg_stripe_barrier(struct seg *s, uint32_t stripe);

/* Lower or raise the bytes of segments in use (memcached's
 * cache_memlimit), within the mapping seg_new made: a lower limit evicts
 * segments now and gives their pages back; a raise past the mapping stops
 * at it. At least MIN_SEGS plus one per writer thread stay usable. Returns
 * the limit now in force. */
size_t seg_set_limit(struct seg *s, size_t bytes);

/* Seal the calling thread's open segment (a worker that stops writing
 * calls it; thread exit does it too). */
void seg_thread_done(struct seg *s);

/* A snapshot of the counters (takes each stripe lock briefly). */
void seg_stats(struct seg *s, struct seg_stats *out);

/* The stripe of a hash (as server/store_internal.h's stripe_of). */
static inline uint32_t
seg_stripe_of(uint64_t hash)
{
    return (uint32_t)(hash & (SEG_STRIPES - 1));
}

#endif /* SERVER_SEG_H */
