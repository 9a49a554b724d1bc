/*
 * hotkeys: per-worker space-saving sketches of the most requested keys;
 * see hotkeys.h. The sketch keeps its counters in a binary min-heap (the
 * counter to replace is at the root) and finds a key's counter through a
 * small open-addressing table on the key's ring hash, so a sample costs
 * O(log K) and never a scan.
 */
#include "config.h"
#include "server/hotkeys.h"

#include "lib/util.h"
#include "ring/ring.h"

#include <stdlib.h>
#include <string.h>

#define TABLE_SIZE (2u * HOTKEYS_K) /* a power of two, at most half full */
#define TABLE_MASK (TABLE_SIZE - 1u)
#define NO_SLOT    (-1)

struct slot {
    uint64_t count; /* sampled requests counted (an overestimate by <= err) */
    uint64_t err;
    uint64_t hash;
    uint8_t  nkey;
    char     key[HOTKEYS_KEY_MAX];
};

struct hotkeys {
    struct hotkeys_tick tick; /* first: see hotkeys.h */
    uint32_t            every;
    uint32_t            decay_s;
    int64_t             next_decay;       /* CLOCK_MONOTONIC_COARSE seconds */
    uint64_t            seq;              /* odd while the owner writes */
    uint32_t            n;                /* slots in use */
    uint8_t             heap[HOTKEYS_K];  /* slot numbers, min-heap on count */
    uint8_t             where[HOTKEYS_K]; /* slot number -> heap position */
    int16_t             table[TABLE_SIZE];
    struct slot         slot[HOTKEYS_K];
};

struct hotkeys *
hotkeys_new(uint32_t every, uint32_t decay_s)
{
    struct hotkeys *h = calloc(1, sizeof(*h));
    uint32_t        i;

    if (h == NULL) {
        return NULL;
    }
    h->every = every > 0 ? every : 1;
    h->tick.left = h->every;
    h->decay_s = decay_s;
    for (i = 0; i < TABLE_SIZE; i++) {
        h->table[i] = NO_SLOT;
    }
    return h;
}

void
hotkeys_free(struct hotkeys *h)
{
    free(h);
}

/*
 * The heap
 */

static void
heap_swap(struct hotkeys *h, uint32_t a, uint32_t b)
{
    uint8_t t = h->heap[a];

    h->heap[a] = h->heap[b];
    h->heap[b] = t;
    h->where[h->heap[a]] = (uint8_t)a;
    h->where[h->heap[b]] = (uint8_t)b;
}

static uint64_t
heap_count(const struct hotkeys *h, uint32_t pos)
{
    return h->slot[h->heap[pos]].count;
}

/* The counter at pos grew: move it down below smaller ones. */
static void
heap_down(struct hotkeys *h, uint32_t pos)
{
    for (;;) {
        uint32_t l = 2 * pos + 1, r = l + 1, least = pos;

        if (l < h->n && heap_count(h, l) < heap_count(h, least)) {
            least = l;
        }
        if (r < h->n && heap_count(h, r) < heap_count(h, least)) {
            least = r;
        }
        if (least == pos) {
            return;
        }
        heap_swap(h, pos, least);
        pos = least;
    }
}

/* A new counter at pos (the smallest there can be): move it up. */
static void
heap_up(struct hotkeys *h, uint32_t pos)
{
    while (pos > 0) {
        uint32_t parent = (pos - 1) / 2;

        if (heap_count(h, parent) <= heap_count(h, pos)) {
            return;
        }
        heap_swap(h, pos, parent);
        pos = parent;
    }
}

/*
 * The key table: linear probing on the ring hash, backward-shift delete
 */

static uint32_t
home(uint64_t hash)
{
    return (uint32_t)(hash >> 32) & TABLE_MASK;
}

/* The table position of key's slot, or of the empty entry ending its
 * probe sequence (never full: at most K of 2K entries are used). */
static uint32_t
table_find(const struct hotkeys *h, const char *key, size_t nkey, uint64_t hash)
{
    uint32_t i = home(hash);

    for (;; i = (i + 1) & TABLE_MASK) {
        const struct slot *s;

        if (h->table[i] == NO_SLOT) {
            return i;
        }
        s = &h->slot[h->table[i]];
        if (s->hash == hash && s->nkey == nkey && memcmp(s->key, key, nkey) == 0) {
            return i;
        }
    }
}

/* Remove slot number sn from the table, keeping every other probe
 * sequence unbroken (Knuth's algorithm R). */
static void
table_remove(struct hotkeys *h, int16_t sn)
{
    uint32_t i = table_find(h, h->slot[sn].key, h->slot[sn].nkey, h->slot[sn].hash);
    uint32_t j = i;

    for (;;) {
        uint32_t k;

        j = (j + 1) & TABLE_MASK;
        if (h->table[j] == NO_SLOT) {
            break;
        }
        k = home(h->slot[h->table[j]].hash);
        /* Entry j may move to i unless its home lies cyclically in (i, j]. */
        if ((i <= j) ? (i < k && k <= j) : (i < k || k <= j)) {
            continue;
        }
        h->table[i] = h->table[j];
        i = j;
    }
    h->table[i] = NO_SLOT;
}

/*
 * Writing (the owner) and reading (anyone)
 */

static void
write_begin(struct hotkeys *h)
{
    __atomic_store_n(&h->seq, h->seq + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
}

static void
write_end(struct hotkeys *h)
{
    __atomic_store_n(&h->seq, h->seq + 1, __ATOMIC_RELEASE);
}

/* Halve every counter: the order is kept, so the heap stays a heap. */
static void
decay(struct hotkeys *h)
{
    uint32_t i;

    for (i = 0; i < h->n; i++) {
        h->slot[i].count /= 2;
        h->slot[i].err /= 2;
    }
}

void
hotkeys_record(struct hotkeys *h, const char *key, size_t nkey)
{
    uint64_t     hash;
    uint32_t     pos;
    int16_t      sn;
    bool         fresh = h->n < HOTKEYS_K;
    struct slot *s;

    h->tick.left = h->every;
    if (nkey > HOTKEYS_KEY_MAX) {
        return;
    }
    hash = ring_hash(key, nkey);
    write_begin(h);
    if (h->decay_s > 0) {
        int64_t now = util_coarse_ms() / 1000;

        if (now >= h->next_decay) {
            if (h->next_decay != 0) {
                decay(h);
            }
            h->next_decay = now + h->decay_s;
        }
    }
    pos = table_find(h, key, nkey, hash);
    if (h->table[pos] != NO_SLOT) {
        s = &h->slot[h->table[pos]];
        s->count++;
        heap_down(h, h->where[h->table[pos]]);
        write_end(h);
        return;
    }
    if (fresh) {
        sn = (int16_t)h->n;
        h->heap[h->n] = (uint8_t)sn;
        h->where[sn] = (uint8_t)h->n;
        h->n++;
        s = &h->slot[sn];
        s->count = 1;
        s->err = 0;
    } else {
        /* Space-saving: the new key takes the smallest counter over, and
         * that counter's value becomes its bound on the overestimate. */
        sn = (int16_t)h->heap[0];
        table_remove(h, sn);
        pos = table_find(h, key, nkey, hash);
        s = &h->slot[sn];
        s->err = s->count;
        s->count++;
    }
    s->hash = hash;
    s->nkey = (uint8_t)nkey;
    memcpy(s->key, key, nkey);
    h->table[pos] = sn;
    if (fresh) {
        heap_up(h, h->where[sn]);
    } else {
        heap_down(h, h->where[sn]);
    }
    write_end(h);
}

size_t
hotkeys_snapshot(const struct hotkeys *h, struct hotkeys_entry *out, uint64_t *min_out)
{
    uint32_t n, i;
    uint64_t s1, s2, min;

    /* The copy may race the owner's writes; the sequence number tells, and
     * a torn copy is thrown away and taken again. */
    for (;;) {
        s1 = __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1) {
            continue;
        }
        n = __atomic_load_n(&h->n, __ATOMIC_RELAXED);
        if (n > HOTKEYS_K) {
            n = HOTKEYS_K;
        }
        for (i = 0; i < n; i++) {
            const struct slot *s = &h->slot[i];

            out[i].count = s->count;
            out[i].err = s->err;
            out[i].nkey = s->nkey <= HOTKEYS_KEY_MAX ? s->nkey : HOTKEYS_KEY_MAX;
            memcpy(out[i].key, s->key, out[i].nkey);
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        s2 = __atomic_load_n(&h->seq, __ATOMIC_RELAXED);
        if (s1 == s2) {
            break;
        }
    }
    min = 0;
    for (i = 0; i < n; i++) {
        if (i == 0 || out[i].count < min) {
            min = out[i].count;
        }
        out[i].count *= h->every;
        out[i].err *= h->every;
    }
    *min_out = n == HOTKEYS_K ? min * h->every : 0;
    return n;
}

size_t
hotkeys_key_text(const struct hotkeys_entry *e, char *out, bool *binary)
{
    size_t i, len = e->nkey;

    *binary = len == 0;
    for (i = 0; i < len && !*binary; i++) {
        *binary = (unsigned char)e->key[i] <= ' ' || (unsigned char)e->key[i] >= 0x7f;
    }
    if (*binary) {
        len = util_b64_encode((const unsigned char *)e->key, len, out);
    } else {
        memcpy(out, e->key, len);
    }
    out[len] = '\0';
    return len;
}

/* A snapshot entry and the sketch it came from, for merging. */
struct tagged {
    const struct hotkeys_entry *e;
    size_t                      from;
};

/* Keys in byte order, shorter first on a common prefix. */
static int
key_cmp(const struct hotkeys_entry *x, const struct hotkeys_entry *y)
{
    size_t n = x->nkey < y->nkey ? x->nkey : y->nkey;
    int    c = memcmp(x->key, y->key, n);

    return c != 0 ? c : (int)x->nkey - (int)y->nkey;
}

static int
by_key(const void *a, const void *b)
{
    return key_cmp(((const struct tagged *)a)->e, ((const struct tagged *)b)->e);
}

static int
by_count_desc(const void *a, const void *b)
{
    const struct hotkeys_entry *x = a, *y = b;

    if (x->count != y->count) {
        return x->count > y->count ? -1 : 1;
    }
    return key_cmp(x, y);
}

size_t
hotkeys_merge(struct hotkeys_entry *const *snaps, const size_t *counts, const uint64_t *mins,
              size_t n, struct hotkeys_entry *out, size_t max)
{
    struct tagged        *all;
    struct hotkeys_entry *sum;
    size_t                total = 0, i, j, nsum = 0;
    uint64_t              all_mins = 0;

    for (i = 0; i < n; i++) {
        total += counts[i];
        all_mins += mins[i];
    }
    if (total == 0) {
        return 0;
    }
    all = malloc(total * sizeof(*all));
    sum = malloc(total * sizeof(*sum));
    if (all == NULL || sum == NULL) {
        free(all);
        free(sum);
        return 0;
    }
    for (i = 0, j = 0; i < n; i++) {
        size_t k;

        for (k = 0; k < counts[i]; k++) {
            all[j++] = (struct tagged){ &snaps[i][k], i };
        }
    }
    qsort(all, total, sizeof(*all), by_key);
    for (i = 0; i < total; i = j) {
        struct hotkeys_entry *m = &sum[nsum++];
        uint64_t              present_mins = 0;

        *m = *all[i].e;
        m->count = m->err = 0;
        for (j = i; j < total && by_key(&all[i], &all[j]) == 0; j++) {
            m->count += all[j].e->count;
            m->err += all[j].e->err;
            present_mins += mins[all[j].from];
        }
        /* Each full sketch without the key may have counted up to its
         * smallest counter of it before the key was replaced. */
        m->count += all_mins - present_mins;
        m->err += all_mins - present_mins;
    }
    qsort(sum, nsum, sizeof(*sum), by_count_desc);
    if (nsum > max) {
        nsum = max;
    }
    memcpy(out, sum, nsum * sizeof(*out));
    free(all);
    free(sum);
    return nsum;
}
