/*
 * hotkeys: the most requested keys of a node, estimated from a sample. Each
 * worker owns one space-saving sketch (Metwally, Agrawal, El Abbadi 2005) of
 * HOTKEYS_K counters and feeds it one keyed request in `every`; only that
 * worker writes it, so the request path takes no lock and shares no line.
 * Readers (`stats hotkeys`, /metrics) copy a sketch under its seqlock (the
 * writer bumps a sequence number around each change; a reader retries when
 * it changed while it copied), then merge the workers' copies.
 *
 * Space-saving's guarantee: a key whose sampled count exceeds 1/K of the
 * samples is in the sketch, and every counter overestimates by at most its
 * `err` (the count of the key it replaced). Counts are halved every
 * `decay_s` seconds, so the view follows what is hot now.
 */
#ifndef SERVER_HOTKEYS_H
#define SERVER_HOTKEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define HOTKEYS_K       64u  /* counters per sketch */
#define HOTKEYS_KEY_MAX 250u /* memcached's longest key */

/* The part of a sketch the request path touches: the first member of
 * struct hotkeys (C lets a pointer to a struct stand for its first member),
 * so hotkeys_note can be inline while the rest stays private. */
struct hotkeys_tick {
    uint32_t left; /* requests until the next sample */
};

struct hotkeys;

/* One counter as a reader sees it: counts already scaled by the sample
 * rate (estimated requests). */
struct hotkeys_entry {
    uint64_t count; /* estimated requests (an overestimate by <= err) */
    uint64_t err;   /* the overestimate's bound */
    uint8_t  nkey;
    char     key[HOTKEYS_KEY_MAX];
};

/* A sketch that samples 1 in every keyed request (every >= 1) and halves
 * its counts every decay_s seconds (0: never). NULL when out of memory. */
struct hotkeys *hotkeys_new(uint32_t every, uint32_t decay_s);
void            hotkeys_free(struct hotkeys *h);

/* Count one sampled request for key (longer than HOTKEYS_KEY_MAX:
 * ignored). The owning worker only. */
void hotkeys_record(struct hotkeys *h, const char *key, size_t nkey);

/* The request path's one call: counts down to the next sample. Only a
 * decrement and a branch for the requests not sampled. */
static inline void
hotkeys_note(struct hotkeys *h, const char *key, size_t nkey)
{
    if (h != NULL && --((struct hotkeys_tick *)h)->left == 0) {
        hotkeys_record(h, key, nkey);
    }
}

/* Copy h's counters into out[HOTKEYS_K] (any thread; lock-free, retries
 * while the owner writes). Returns how many; *min_out is the smallest
 * count when the sketch is full (a key absent from it had at most that
 * many), else 0. */
size_t hotkeys_snapshot(const struct hotkeys *h, struct hotkeys_entry *out, uint64_t *min_out);

/* Room for an entry's key as text: the key, or its base64. */
#define HOTKEYS_TEXT_MAX (((HOTKEYS_KEY_MAX + 2) / 3) * 4 + 1)

/* e's key as printable text in out[HOTKEYS_TEXT_MAX], NUL-terminated: the
 * key itself when it is a text-protocol key (no space or control bytes),
 * else its base64 (*binary set; a meta request's b-flag key). Returns the
 * length. */
size_t hotkeys_key_text(const struct hotkeys_entry *e, char *out, bool *binary);

/* Merge n snapshots (snaps[i] with counts[i] entries and mins[i]) into
 * out[max], the keys by estimated count, highest first. A key absent from a
 * full sketch gets that sketch's min added to its err. Returns the number
 * written. Scratch memory is allocated; 0 when it cannot be. */
size_t hotkeys_merge(struct hotkeys_entry *const *snaps, const size_t *counts, const uint64_t *mins,
                     size_t n, struct hotkeys_entry *out, size_t max);

#endif /* SERVER_HOTKEYS_H */
