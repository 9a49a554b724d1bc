/*
 * ghost: S3-FIFO's ghost queue as a direct-mapped table of 32-bit
 * fingerprints of keys evicted unread (Yang et al., SOSP'23). The compact
 * engine (server/seg.c) uses it; server/store_evict.c has the same scheme
 * inline and moves onto this header when the engine is wired in.
 */
#ifndef SERVER_GHOST_H
#define SERVER_GHOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* One 4-byte slot per GHOST_BYTES_PER_SLOT bytes of the memory limit
 * (rounded up to a power of two): about as many ghosts as the limit holds
 * 512-byte items (0.8% of it). With the compact engine's small SMALL
 * queue, one per 256 bytes admitted too many returning keys to MAIN; one
 * per 512 or 1024 did better at every skew but the largest limit
 * (docs/store-engine.md, "Eviction"). */
#define GHOST_BYTES_PER_SLOT 512u
#define GHOST_MIN_SLOTS      4096u
#define GHOST_MAX_SLOTS      (1u << 28)

/*
 * A slot keeps the last key evicted there, so an entry lives for about as
 * many evictions as there are slots; a false match (same slot, same
 * fingerprint) only admits a key to the main queue early. Slots are
 * relaxed atomics: two evictions may race on one, either write wins.
 */
struct ghost {
    uint32_t *slots;
    uint32_t  mask;
    bool      used; /* atomic: something was put (until then no page is read) */
};

/* Allocate a table for a memory limit (its pages untouched). 0 or -1. */
static inline int
ghost_init(struct ghost *g, size_t mem_limit)
{
    size_t   want = mem_limit / GHOST_BYTES_PER_SLOT;
    uint32_t n = GHOST_MIN_SLOTS;

    while (n < want && n < GHOST_MAX_SLOTS) {
        n <<= 1;
    }
    g->slots = calloc(n, sizeof(*g->slots));
    g->mask = n - 1;
    g->used = false;
    return g->slots != NULL ? 0 : -1;
}

static inline void
ghost_free(struct ghost *g)
{
    free(g->slots);
    g->slots = NULL;
}

/* The slot of a hash: bits above the 10 lock-stripe bits. */
static inline uint32_t *
ghost_at(struct ghost *g, uint64_t hash)
{
    return &g->slots[(uint32_t)(hash >> 10) & g->mask];
}

/* A hash's fingerprint: never 0, the empty slot. */
static inline uint32_t
ghost_fingerprint(uint64_t hash)
{
    return (uint32_t)(hash >> 32) | 1u;
}

/* Remember a key evicted unread. */
static inline void
ghost_put(struct ghost *g, uint64_t hash)
{
    __atomic_store_n(ghost_at(g, hash), ghost_fingerprint(hash), __ATOMIC_RELAXED);
    if (!__atomic_load_n(&g->used, __ATOMIC_RELAXED)) {
        __atomic_store_n(&g->used, true, __ATOMIC_RELAXED);
    }
}

/* True when the key was a ghost; forgets it. Until the first put no page
 * of the table is read (reading them on every write cost 4 bytes an item
 * at 1M items: an untouched page read is still resident here). */
static inline bool
ghost_take(struct ghost *g, uint64_t hash)
{
    uint32_t *slot;

    if (!__atomic_load_n(&g->used, __ATOMIC_RELAXED)) {
        return false;
    }
    slot = ghost_at(g, hash);
    if (__atomic_load_n(slot, __ATOMIC_RELAXED) != ghost_fingerprint(hash)) {
        return false;
    }
    __atomic_store_n(slot, 0, __ATOMIC_RELAXED);
    return true;
}

#endif /* SERVER_GHOST_H */
