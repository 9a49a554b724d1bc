/*
 * ring: the ring of points of a membership (docs/PLACEMENT.md), built in one
 * batch into flat sorted arrays, with an index on the top bits of the
 * position so a lookup touches a few cache lines. Lookups and preference
 * lists are pure: no allocation, no locks, safe from any number of threads.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "config.h"
#include "ring/ring.h"
#include "ring/ring_internal.h"

/* Inline XXH3 so the build loop does not pay a library call per point. */
#define XXH_INLINE_ALL
#include <xxhash.h>

/* Ranges of the lookup index longer than this are binary-searched. */
#define RING_SCAN_MAX 16

/* Lists of up to this many owners are located with a linear scan of the
 * chosen zones and nodes; longer ones use bitmaps (ring_locate_rank). */
#define RANK_SCAN_MAX 16

/* Most owners of a list ring_owned_arcs looks at (the list is on the
 * stack). */
#define OWNED_LIST_MAX 64

/* Keys hashed per batch while building (see hash_points). */
#define HASH_BATCH 16

/* Vnode indexes whose digits hash_points converts once a build. */
#define SUFFIX_TABLE 1024

/* Room for "id#vnode": an id, '#', and the 8-byte word of the vnode's
 * digits (a vnode index is < RING_POINTS_MAX, 8 digits at most). */
#define POINT_KEY_MAX (RING_ID_MAX + 1 + 8)

/* A bucket of the build sort with more points than this is merge-sorted
 * (a hash that piles points up must not make the build quadratic). */
#define SORT_SMALL 32

/* Extra bits of the fine scatter below the lookup index bits: a sub-bucket
 * then holds under one point on average, which leaves the insertion sort
 * little to do (at 160k points the fine pass went from 1.14 to 0.73 ms). */
#define SUB_BITS 2

/* Most coarse buckets of the first build pass: the 2^10 write streams'
 * open cache lines fit the L2 cache (and, with huge pages, the TLB). */
#define COARSE_BITS_MAX 10

/* Huge page size for the arrays of large rings (see block_alloc). */
#define HUGE_PAGE ((size_t)2 << 20)

/* Under AddressSanitizer every array comes from malloc, so overflows of the
 * ring's arrays are caught. */
#if defined(__SANITIZE_ADDRESS__)
#define RING_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RING_ASAN 1
#endif
#endif

#if defined(MADV_HUGEPAGE) && defined(MAP_ANONYMOUS) && !defined(RING_ASAN)
#define RING_HUGE_PAGES 1
#endif

/* ring_hash: see ring.h. */
uint64_t
ring_hash(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

/* See ring.h. */
uint64_t
ring_hash_seeded(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

/*
 * Allocate `size` bytes for a ring's arrays (`scratch` false) or for build
 * scratch (true). Sets *mapped to the length of the mapping it made, or 0
 * when the block came from malloc; free with block_free. A page fault
 * costs about 1 us on the VMs this runs on (a 10000x160 ring faults ~35 MB
 * in 4 KiB pages: ~9 ms), so a block of a MiB or more gets its own mapping,
 * 2 MiB aligned and advised for transparent huge pages: one fault per
 * 2 MiB. The mapping is rounded up to 2 MiB; the ring's own arrays take it
 * only when that wastes at most 1/8 of the block (the waste counts in
 * ring_bytes), scratch always (it is freed at the end of the build). When
 * the kernel has no huge page to give, the mapping behaves like malloc.
 */
static void *
block_alloc(size_t size, bool scratch, size_t *mapped)
{
#ifdef RING_HUGE_PAGES
    size_t len = (size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);

    if (size >= HUGE_PAGE / 2 && (scratch || len - size <= size / 8)) {
        size_t map = len + HUGE_PAGE, head;
        char  *p = mmap(NULL, map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

        if (p != MAP_FAILED) {
            /* Keep the 2 MiB aligned part: huge pages need the alignment. */
            head = (HUGE_PAGE - (uintptr_t)p % HUGE_PAGE) % HUGE_PAGE;
            if (head > 0) {
                munmap(p, head);
            }
            if (map - head > len) {
                munmap(p + head + len, map - head - len);
            }
            /* Advice only: without huge pages the block still works. */
            (void)madvise(p + head, len, MADV_HUGEPAGE);
            *mapped = len;
            return p + head;
        }
    }
#else
    (void)scratch;
#endif
    *mapped = 0;
    return malloc(size);
}

/* Free a block_alloc block; `mapped` is what block_alloc set. */
static void
block_free(void *p, size_t mapped)
{
#ifdef RING_HUGE_PAGES
    if (mapped > 0) {
        munmap(p, mapped);
        return;
    }
#else
    (void)mapped;
#endif
    free(p);
}

/*
 * Node ids in byte order. The sort key is the first 16 bytes of the id,
 * big-endian and zero-padded, so almost every comparison is two integer
 * compares; equal keys fall back to the rest of the id.
 */
struct id_key {
    uint64_t hi, lo;
    uint32_t node;
};

/* Compare two id keys: <0, 0 (same id), >0, like strcmp of the ids. */
static int
id_key_cmp(const struct id_key *a, const struct id_key *b, const struct ring_node *nodes)
{
    if (a->hi != b->hi) {
        return a->hi < b->hi ? -1 : 1;
    }
    if (a->lo != b->lo) {
        return a->lo < b->lo ? -1 : 1;
    }
    /* Equal first 16 bytes: a NUL among them ends both ids there. */
    if ((a->lo & 0xff) == 0) {
        return 0;
    }
    return strcmp(nodes[a->node].id + 16, nodes[b->node].id + 16);
}

/* Stable merge sort of n id keys; tmp has room for n / 2 + 1. Runs that are
 * already in order cost one comparison (memberships are often sorted). */
static void
sort_id_keys(struct id_key *a, struct id_key *tmp, uint32_t n, const struct ring_node *nodes)
{
    uint32_t h, i, j, k;

    if (n <= 8) {
        for (i = 1; i < n; i++) {
            struct id_key x = a[i];

            for (j = i; j > 0 && id_key_cmp(&a[j - 1], &x, nodes) > 0; j--) {
                a[j] = a[j - 1];
            }
            a[j] = x;
        }
        return;
    }
    h = n / 2;
    sort_id_keys(a, tmp, h, nodes);
    sort_id_keys(a + h, tmp, n - h, nodes);
    if (id_key_cmp(&a[h - 1], &a[h], nodes) <= 0) {
        return;
    }
    memcpy(tmp, a, h * sizeof(*a));
    for (i = 0, j = h, k = 0; i < h;) {
        if (j < n && id_key_cmp(&a[j], &tmp[i], nodes) < 0) {
            a[k++] = a[j++];
        } else {
            a[k++] = tmp[i++];
        }
    }
}

/* First 8 bytes at s (zero-padded past len) as a big-endian integer. */
static uint64_t
be_prefix(const char *s, size_t len)
{
    unsigned char b[8] = { 0 };
    uint64_t      v = 0;
    size_t        i;

    memcpy(b, s, len < 8 ? len : 8);
    for (i = 0; i < 8; i++) {
        v = v << 8 | b[i];
    }
    return v;
}

/*
 * Fill by_id[] with the node indexes of m in id byte order. RING_OK,
 * RING_EINVAL when two nodes share an id, RING_ENOMEM.
 */
static int
sort_by_id(const struct ring_members *m, uint16_t *by_id)
{
    uint32_t       i, n = m->n_nodes;
    struct id_key *key = malloc(((size_t)n + n / 2 + 1) * sizeof(*key));
    int            rc = RING_OK;

    if (key == NULL) {
        return RING_ENOMEM;
    }
    for (i = 0; i < n; i++) {
        const char *id = m->nodes[i].id;
        size_t      len = strnlen(id, RING_ID_MAX);

        key[i].hi = be_prefix(id, len);
        key[i].lo = len > 8 ? be_prefix(id + 8, len - 8) : 0;
        key[i].node = i;
    }
    sort_id_keys(key, key + n, n, m->nodes);
    for (i = 0; i < n; i++) {
        if (i > 0 && id_key_cmp(&key[i - 1], &key[i], m->nodes) == 0) {
            rc = RING_EINVAL;
            break;
        }
        by_id[i] = (uint16_t)key[i].node;
    }
    free(key);
    return rc;
}

/* qsort_r comparator: node indexes by zone, then index (deterministic). */
static int
cmp_by_zone(const void *a, const void *b, void *arg)
{
    const struct ring_node *nodes = arg;
    uint16_t                x = *(const uint16_t *)a, y = *(const uint16_t *)b;
    int                     c = strcmp(nodes[x].zone, nodes[y].zone);

    if (c != 0) {
        return c;
    }
    return x < y ? -1 : x > y;
}

/*
 * Give each node a zone index: one per named zone, and one of its own for
 * every node without a zone (the contract counts it as a zone alone).
 * Returns the number of zones, or 0 on ENOMEM.
 */
static uint32_t
assign_zones(const struct ring_members *m, uint16_t *zone)
{
    uint32_t    i, n = m->n_nodes, nz = 0;
    const char *prev = NULL;
    uint16_t   *tmp;

    for (i = 0; i < n && m->nodes[i].zone[0] == '\0'; i++) {
        zone[i] = (uint16_t)i;
    }
    if (i == n) {
        return n; /* no zones: every node is a zone of its own */
    }
    tmp = malloc((size_t)n * sizeof(*tmp));
    if (tmp == NULL) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        tmp[i] = (uint16_t)i;
    }
    qsort_r(tmp, n, sizeof(*tmp), cmp_by_zone, m->nodes);
    for (i = 0; i < n; i++) {
        const char *z = m->nodes[tmp[i]].zone;

        if (z[0] == '\0' || prev == NULL || strcmp(z, prev) != 0) {
            nz++;
        }
        zone[tmp[i]] = (uint16_t)(nz - 1);
        prev = z[0] == '\0' ? NULL : z;
    }
    free(tmp);
    return nz;
}

/* "00".."99": two decimal digits per table lookup. */
static const char digit_pairs[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233"
    "34353637383940414243444546474849505152535455565758596061626364656667"
    "6869707172737475767778798081828384858687888990919293949596979899";

/*
 * v (< 10^8) in decimal as the bytes of a little-endian word, first digit
 * in the lowest byte, unused bytes zero; returns the number of digits.
 * Built in a register: storing it is one 8-byte store.
 */
static uint32_t
decimal_word(uint32_t v, uint64_t *word)
{
    uint64_t w = 0;
    uint32_t n = 0;

    /* The last two digits go in first and end up in the highest bytes. */
    while (v >= 100) {
        uint32_t pr = (v % 100) * 2;

        w = w << 16 | (uint64_t)(unsigned char)digit_pairs[pr + 1] << 8 |
            (unsigned char)digit_pairs[pr];
        v /= 100;
        n += 2;
    }
    if (v >= 10) {
        w = w << 16 | (uint64_t)(unsigned char)digit_pairs[v * 2 + 1] << 8 |
            (unsigned char)digit_pairs[v * 2];
        n += 2;
    } else {
        w = w << 8 | (uint64_t)('0' + v);
        n += 1;
    }
    *word = w;
    return n;
}

/* Store a decimal_word at p: 8 bytes, the digits then zeros. */
static void
store_word(char *p, uint64_t w)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    w = __builtin_bswap64(w);
#endif
    memcpy(p, &w, sizeof(w));
}

/* Write v in decimal at p (8 bytes of room; no NUL); returns the number of
 * digits. */
static size_t
put_decimal(char *p, uint32_t v)
{
    uint64_t w;
    uint32_t n = decimal_word(v, &w);

    store_word(p, w);
    return n;
}

/* Number of index bits for n points: about 2-4 points per bucket, so the
 * index costs 1-2 bytes per point. */
static uint32_t
index_bits(uint64_t n)
{
    uint32_t lg = 0;

    while ((n >> (lg + 1)) != 0) {
        lg++;
    }
    if (lg < 2) {
        return 1;
    }
    return lg - 1 > 25 ? 25 : lg - 1;
}

/*
 * Hash every point in tie order (nodes by id, then vnode index) into
 * r->pos[], and count the points of each coarse bucket (top cbits bits)
 * into ccount[]. The keys "id#v" of a batch are all written before the
 * first is hashed: XXH3 loads its input in 8-byte words, and a word that
 * straddles bytes stored a moment ago cannot be forwarded from the store
 * buffer, so the load would wait for the stores to reach the cache
 * (that stall was about 2/3 of the hash time). The digits of the first
 * SUFFIX_TABLE vnode indexes are converted once, not once per node.
 */
static void
hash_points(const struct ring *r, ring_hash_fn hash, uint32_t cbits, uint32_t *ccount)
{
    char           buf[HASH_BATCH][POINT_KEY_MAX];
    size_t         len[HASH_BATCH];
    uint64_t       sfx[SUFFIX_TABLE];
    uint8_t        sfx_len[SUFFIX_TABLE];
    const bool     xxh3 = hash == ring_hash;
    const uint32_t cshift = 64 - cbits;
    uint32_t       i, k, g = 0, nt = 0;

    for (i = 0; i < r->m->n_nodes; i++) {
        uint32_t nv = r->m->nodes[i].weight * r->m->vnodes;

        nt = nv > nt ? nv : nt;
    }
    nt = nt < SUFFIX_TABLE ? nt : SUFFIX_TABLE;
    for (i = 0; i < nt; i++) {
        sfx_len[i] = (uint8_t)decimal_word(i, &sfx[i]);
    }
    for (i = 0; i < r->m->n_nodes; i++) {
        const struct ring_node *n = &r->m->nodes[r->by_id[i]];
        size_t                  idlen = strlen(n->id);
        uint32_t                v, nv = n->weight * r->m->vnodes;

        for (k = 0; k < HASH_BATCH && k < nv; k++) {
            memcpy(buf[k], n->id, idlen);
            buf[k][idlen] = '#';
        }
        for (v = 0; v < nv; v += HASH_BATCH) {
            uint32_t kn = nv - v < HASH_BATCH ? nv - v : HASH_BATCH;

            for (k = 0; k < kn; k++) {
                uint64_t w;

                if (v + k < nt) {
                    w = sfx[v + k];
                    len[k] = idlen + 1 + sfx_len[v + k];
                } else {
                    len[k] = idlen + 1 + decimal_word(v + k, &w);
                }
                store_word(buf[k] + idlen + 1, w);
            }
            for (k = 0; k < kn; k++) {
                /* The production hash inlined: no indirect call a point. */
                uint64_t h = xxh3 ? XXH3_64bits(buf[k], len[k]) : hash(buf[k], len[k]);

                r->pos[g++] = h;
                ccount[cbits > 0 ? h >> cshift : 0]++;
            }
        }
    }
}

/*
 * Stable merge sort of n points (pos[], node[] in step) by position;
 * spos/snode are scratch of n / 2 + 1 entries. For buckets that hold
 * many points, which only a degenerate hash produces.
 */
static void
sort_points(uint64_t *pos, uint16_t *node, uint64_t *spos, uint16_t *snode, uint32_t n)
{
    uint32_t h, i, j, k;

    if (n <= SORT_SMALL) {
        for (i = 1; i < n; i++) {
            uint64_t p = pos[i];
            uint16_t nd = node[i];

            for (j = i; j > 0 && pos[j - 1] > p; j--) {
                pos[j] = pos[j - 1];
                node[j] = node[j - 1];
            }
            pos[j] = p;
            node[j] = nd;
        }
        return;
    }
    h = n / 2;
    sort_points(pos, node, spos, snode, h);
    sort_points(pos + h, node + h, spos, snode, n - h);
    if (pos[h - 1] <= pos[h]) {
        return;
    }
    memcpy(spos, pos, h * sizeof(*pos));
    memcpy(snode, node, h * sizeof(*node));
    /* Equal positions: the left run first, so ties keep their order. */
    for (i = 0, j = h, k = 0; i < h;) {
        if (j < n && pos[j] < spos[i]) {
            pos[k] = pos[j];
            node[k++] = node[j++];
        } else {
            pos[k] = spos[i];
            node[k++] = snode[i++];
        }
    }
}

/*
 * Sort the points of one coarse bucket, tpos/tnode[a, e) in tie order,
 * into r->pos/r->node[a, e) (the same range: both are laid out by coarse
 * bucket), and write its part of the lookup index. A stable counting
 * scatter on the fine bits plus SUB_BITS more, so that a sub-bucket holds
 * less than one point on average, then an insertion sort that has little
 * left to do (mostly one well-predicted comparison a point, on cache lines
 * just written). Moving only past strictly greater positions keeps ties
 * in tie order. cur[] has 2^(fbits + SUB_BITS) entries.
 */
static void
sort_coarse(struct ring *r, uint32_t c, uint32_t fbits, uint32_t a, uint32_t e, uint64_t *tpos,
            uint16_t *tnode, uint32_t *cur)
{
    const uint32_t shift = 64 - r->idx_bits - SUB_BITS;
    const uint32_t nf = 1u << fbits, ns = nf << SUB_BITS;
    const uint64_t smask = ns - 1;
    uint32_t      *idx = r->idx + ((size_t)c << fbits);
    uint64_t      *pos = r->pos;
    uint16_t      *node = r->node;
    uint32_t       i, f, s;
    bool           big = false;

    memset(cur, 0, ns * sizeof(*cur));
    for (i = a; i < e; i++) {
        cur[(tpos[i] >> shift) & smask]++;
    }
    for (f = 0, s = a; f < nf; f++) {
        uint32_t start = s;

        idx[f] = s;
        for (i = f << SUB_BITS; i < (f + 1) << SUB_BITS; i++) {
            uint32_t cnt = cur[i];

            cur[i] = s;
            s += cnt;
        }
        big |= s - start > SORT_SMALL;
    }
    for (i = a; i < e; i++) {
        uint64_t p = tpos[i];
        uint32_t j = cur[(p >> shift) & smask]++;

        pos[j] = p;
        node[j] = tnode[i];
    }
    /* tpos/tnode[a, e) are free now: the merge sort's scratch. */
    for (f = 0; big && f < nf; f++) {
        uint32_t end = f + 1 < nf ? idx[f + 1] : e;

        if (end - idx[f] > SORT_SMALL) {
            sort_points(pos + idx[f], node + idx[f], tpos + a, tnode + a, end - idx[f]);
        }
    }
    for (i = a + 1; i < e; i++) {
        uint64_t p = pos[i];
        uint16_t nd;
        uint32_t j;

        if (pos[i - 1] <= p) {
            continue;
        }
        nd = node[i];
        for (j = i; j > a && pos[j - 1] > p; j--) {
            pos[j] = pos[j - 1];
            node[j] = node[j - 1];
        }
        pos[j] = p;
        node[j] = nd;
    }
}

/*
 * ring_build_hashed: see ring_internal.h. Points are hashed in tie order
 * (nodes by id, then vnode index) straight into pos[], then sorted by a
 * stable two-pass bucket sort: a scatter into 2^cbits coarse buckets on
 * the top bits (a few hundred sequential write streams) into scratch, then
 * each coarse bucket, small enough for the cache, sorted back into pos[]
 * by sort_coarse, which also writes the lookup index. Stability keeps
 * equal positions in (id, vnode) order, so the result does not depend on
 * the order of m->nodes. The caller owns the result.
 */
struct ring *
ring_build_hashed(const struct ring_members *m, ring_hash_fn hash)
{
    struct ring *r = NULL;
    uint64_t     total = 0, *tpos = NULL;
    uint16_t    *tnode;
    uint32_t    *cur, i, g, nb, cbits, fbits;
    uint32_t     ccount[(1u << COARSE_BITS_MAX) + 1];
    size_t       n, scratch_len = 0;
    char        *b;

    if (m == NULL || hash == NULL || ring_members_check_fields(m, NULL, 0) != RING_OK) {
        return NULL;
    }
    for (i = 0; i < m->n_nodes; i++) {
        total += (uint64_t)m->nodes[i].weight * m->vnodes;
    }
    if (total > RING_POINTS_MAX) {
        return NULL;
    }
    n = (size_t)total;
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return NULL;
    }
    r->hash = hash;
    r->n_points = (uint32_t)total;
    r->idx_bits = index_bits(total);
    nb = 1u << r->idx_bits;
    cbits = r->idx_bits > 8 ? r->idx_bits - 8 : 0;
    if (cbits > COARSE_BITS_MAX) {
        cbits = COARSE_BITS_MAX;
    }
    fbits = r->idx_bits - cbits;
    r->m = ring_members_dup(m);
    r->zone = malloc((size_t)m->n_nodes * sizeof(*r->zone));
    r->by_id = malloc((size_t)m->n_nodes * sizeof(*r->by_id));
    if (r->m == NULL || r->zone == NULL || r->by_id == NULL ||
        sort_by_id(r->m, r->by_id) != RING_OK) {
        goto fail;
    }
    r->n_zones = assign_zones(r->m, r->zone);
    /* One block: pos (8-aligned first), idx, node. */
    r->block_size = n * sizeof(*r->pos) + ((size_t)nb + 1) * sizeof(*r->idx) + n * sizeof(*r->node);
    r->block = block_alloc(r->block_size, false, &r->block_len);
    /* Scratch: a position and an owner a point, and the fine cursors. */
    tpos = block_alloc(n * sizeof(*tpos) + ((size_t)1 << (fbits + SUB_BITS)) * sizeof(*cur) +
                           n * sizeof(*tnode),
                       true, &scratch_len);
    if (r->n_zones == 0 || r->block == NULL || tpos == NULL) {
        goto fail;
    }
    b = r->block;
    r->pos = (uint64_t *)(void *)b;
    r->idx = (uint32_t *)(void *)(b + n * sizeof(*r->pos));
    r->node = (uint16_t *)(void *)(b + n * sizeof(*r->pos) + ((size_t)nb + 1) * sizeof(*r->idx));
    cur = (uint32_t *)(void *)(tpos + n);
    tnode = (uint16_t *)(void *)(cur + ((size_t)1 << (fbits + SUB_BITS)));

    memset(ccount, 0, sizeof(ccount));
    hash_points(r, hash, cbits, ccount);
    /* ccount[c] becomes the start of coarse bucket c, then its cursor. */
    for (i = 0, g = 0; i < (1u << cbits); i++) {
        uint32_t cnt = ccount[i];

        ccount[i] = g;
        g += cnt;
    }
    /* Coarse scatter, in tie order; the owner is known node by node. */
    g = 0;
    for (i = 0; i < m->n_nodes; i++) {
        uint16_t nd = r->by_id[i];
        uint32_t end = g + m->nodes[nd].weight * m->vnodes;

        for (; g < end; g++) {
            uint64_t p = r->pos[g];
            uint32_t j = ccount[cbits > 0 ? p >> (64 - cbits) : 0]++;

            tpos[j] = p;
            tnode[j] = nd;
        }
    }
    /* Now ccount[c] is the end of coarse bucket c. */
    for (i = 0, g = 0; i < (1u << cbits); i++) {
        sort_coarse(r, i, fbits, g, ccount[i], tpos, tnode, cur);
        g = ccount[i];
    }
    r->idx[nb] = r->n_points;
    block_free(tpos, scratch_len);
    return r;
fail:
    if (tpos != NULL) {
        block_free(tpos, scratch_len);
    }
    ring_free(r);
    return NULL;
}

/* ring_build: see ring.h. Points hashed with XXH3_64bits, seed 0. */
struct ring *
ring_build(const struct ring_members *m)
{
    return ring_build_hashed(m, ring_hash);
}

/* ring_free: see ring.h; NULL is fine. */
void
ring_free(struct ring *r)
{
    if (r == NULL) {
        return;
    }
    ring_members_free(r->m);
    if (r->block != NULL) {
        block_free(r->block, r->block_len);
    }
    free(r->zone);
    free(r->by_id);
    free(r);
}

/* ring_members: see ring.h. */
const struct ring_members *
ring_members(const struct ring *r)
{
    return r->m;
}

/* ring_n_points: see ring.h. */
uint32_t
ring_n_points(const struct ring *r)
{
    return r->n_points;
}

/* ring_point_rank: see ring.h. The index narrows the search to one bucket
 * (a few points); the first point >= hash there, else the next bucket's
 * first point, is the owner; past the last point it wraps to rank 0. */
uint32_t
ring_point_rank(const struct ring *r, uint64_t hash)
{
    uint64_t b = hash >> (64 - r->idx_bits);
    uint32_t lo = r->idx[b], hi = r->idx[b + 1];

    if (hi - lo > RING_SCAN_MAX) {
        while (lo < hi) {
            uint32_t mid = lo + (hi - lo) / 2;

            if (r->pos[mid] < hash) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
    } else {
        while (lo < hi && r->pos[lo] < hash) {
            lo++;
        }
    }
    return lo == r->n_points ? 0 : lo;
}

/* ring_primary: see ring.h. */
uint32_t
ring_primary(const struct ring *r, uint64_t hash)
{
    return r->node[ring_point_rank(r, hash)];
}

/* Whether v is taken: set in bits when there is a bitmap, else among
 * list[0..n). */
static inline bool
taken(const uint64_t *bits, const uint32_t *list, uint32_t n, uint32_t v)
{
    uint32_t j;

    if (bits != NULL) {
        return (bits[v / 64] >> (v % 64)) & 1;
    }
    for (j = 0; j < n; j++) {
        if (list[j] == v) {
            return true;
        }
    }
    return false;
}

/*
 * The two passes of ring_locate_rank from rank start (want >= 1). Pass 1
 * takes nodes whose zone is not used yet (a chosen node's zone is used,
 * so this also skips chosen nodes) and ends once every zone is used; pass
 * 2 fills with any node not chosen. Every node has at least one point, so
 * want <= n_nodes is always reached within one turn. Chosen nodes and
 * used zones are looked up in the bitmaps nodes and zones when given
 * (zeroed, n_nodes bits each), else by scanning out[] and zl[] (the zone
 * of each out[]; want entries).
 */
static inline uint32_t
locate_passes(const struct ring *r, uint32_t start, uint32_t want, uint32_t *out, uint32_t *zl,
              uint64_t *nodes, uint64_t *zones)
{
    uint32_t np = r->n_points, cnt = 0, s, p, pass;

    for (pass = 1; pass <= 2; pass++) {
        for (s = 0, p = start; s < np; s++, p = (p + 1 == np) ? 0 : p + 1) {
            uint32_t nd = r->node[p], z = r->zone[nd];

            if (pass == 1 ? taken(zones, zl, cnt, z) : taken(nodes, out, cnt, nd)) {
                continue;
            }
            if (nodes != NULL) {
                nodes[nd / 64] |= 1ull << (nd % 64);
                zones[z / 64] |= 1ull << (z % 64);
            } else {
                zl[cnt] = z;
            }
            out[cnt++] = nd;
            if (cnt == want) {
                return cnt;
            }
            if (pass == 1 && cnt == r->n_zones) {
                break;
            }
        }
    }
    return cnt;
}

/* ring_locate_rank: see ring_internal.h. Lists of want > RANK_SCAN_MAX
 * (rare: R is usually 1-3) keep their chosen nodes and used zones in
 * bitmaps on the stack (16 KiB at most) instead of scanning out[]. */
uint32_t
ring_locate_rank(const struct ring *r, uint32_t start, uint32_t want, uint32_t *out)
{
    uint64_t nodes[(RING_NODES_MAX + 64) / 64], zones[(RING_NODES_MAX + 64) / 64];
    uint32_t zl[RANK_SCAN_MAX], words = (r->m->n_nodes + 63) / 64;

    if (want > r->m->n_nodes) {
        want = r->m->n_nodes;
    }
    if (want == 0) {
        return 0;
    }
    if (want <= RANK_SCAN_MAX) {
        return locate_passes(r, start, want, out, zl, NULL, NULL);
    }
    memset(nodes, 0, words * sizeof(nodes[0]));
    memset(zones, 0, words * sizeof(zones[0]));
    return locate_passes(r, start, want, out, NULL, nodes, zones);
}

/* ring_locate: see ring.h. */
uint32_t
ring_locate(const struct ring *r, uint64_t hash, uint32_t want, uint32_t *out)
{
    return ring_locate_rank(r, ring_point_rank(r, hash), want, out);
}

/*
 * ring_point: see ring.h. The vnode index is not stored (it would cost 4
 * bytes a point): it is recovered by re-hashing the owner's points, which
 * costs weight*vnodes hashes. For tests and tools, not the data path.
 */
void
ring_point(const struct ring *r, uint32_t rank, uint64_t *pos, uint32_t *node, uint32_t *vnode)
{
    const struct ring_node *n;
    uint32_t                k = 0, j, v, nv;
    uint64_t                p;
    char                    buf[POINT_KEY_MAX];
    size_t                  idlen;

    if (rank >= r->n_points) {
        rank = r->n_points - 1;
    }
    p = r->pos[rank];
    if (pos != NULL) {
        *pos = p;
    }
    if (node != NULL) {
        *node = r->node[rank];
    }
    if (vnode == NULL) {
        return;
    }
    /* Earlier points of the same node at the same position have the
     * smaller vnode indexes: ours is the k-th match. */
    for (j = rank; j > 0 && r->pos[j - 1] == p; j--) {
        if (r->node[j - 1] == r->node[rank]) {
            k++;
        }
    }
    n = &r->m->nodes[r->node[rank]];
    idlen = strlen(n->id);
    memcpy(buf, n->id, idlen);
    buf[idlen] = '#';
    nv = n->weight * r->m->vnodes;
    *vnode = 0;
    for (v = 0; v < nv; v++) {
        size_t len = idlen + 1 + put_decimal(buf + idlen + 1, v);

        if (r->hash(buf, len) == p && k-- == 0) {
            *vnode = v;
            return;
        }
    }
}

/*
 * ring_shares: see ring.h. The point at rank i owns the arc
 * (pos[i-1], pos[i]], rank 0 the wrap arc (pos[n-1], 2^64) + [0, pos[0]];
 * differences are exact in uint64 (mod 2^64). When every point sits at
 * one position, rank 0 owns the whole circle.
 */
void
ring_shares(const struct ring *r, double *share)
{
    const double scale = 1.0 / 18446744073709551616.0;
    uint32_t     i, np = r->n_points;
    uint64_t     prev;

    memset(share, 0, (size_t)r->m->n_nodes * sizeof(*share));
    if (r->pos[0] == r->pos[np - 1]) {
        share[r->node[0]] = 1.0;
        return;
    }
    prev = r->pos[np - 1];
    for (i = 0; i < np; i++) {
        share[r->node[i]] += (double)(r->pos[i] - prev);
        prev = r->pos[i];
    }
    for (i = 0; i < r->m->n_nodes; i++) {
        share[i] *= scale;
    }
}

/* Is node among the first `want` owners of the list from rank `rank`? */
static bool
list_holds(const struct ring *r, uint32_t rank, uint32_t want, uint32_t node)
{
    uint32_t list[OWNED_LIST_MAX], got, j;

    got = ring_locate_rank(r, rank, want, list);
    for (j = 0; j < got; j++) {
        if (list[j] == node) {
            return true;
        }
    }
    return false;
}

/*
 * ring_owned_arcs: see ring.h. Walks the points as ring_shares does: the
 * point at rank i owns the arc (pos[i-1], pos[i]], rank 0 the wrap arc
 * (pos[n-1], pos[0]]. Of the points sharing a position the first owns the
 * arc: it is the rank ring_locate starts from for every key hash of the
 * arc; the others own nothing. Each list is located from its rank, with
 * no search.
 */
uint32_t
ring_owned_arcs(const struct ring *r, uint32_t node, uint32_t replicas,
                void (*fn)(uint64_t lo, uint64_t hi, void *arg), void *arg)
{
    uint32_t np = r->n_points, i, n = 0;
    uint32_t want = replicas < OWNED_LIST_MAX ? replicas : OWNED_LIST_MAX;
    uint64_t prev = r->pos[np - 1];

    if (node >= r->m->n_nodes || want == 0) {
        return 0;
    }
    if (r->pos[0] == prev) {
        /* Every point at one position: rank 0 owns the whole circle. */
        if (!list_holds(r, 0, want, node)) {
            return 0;
        }
        fn(prev, prev, arg);
        return 1;
    }
    for (i = 0; i < np; prev = r->pos[i++]) {
        if (r->pos[i] != prev && list_holds(r, i, want, node)) {
            fn(prev, r->pos[i], arg);
            n++;
        }
    }
    return n;
}

/* ring_bytes: see ring.h. Everything the ring keeps, membership copy
 * included; a mapped block counts whole (rounded up to its huge pages). */
size_t
ring_bytes(const struct ring *r)
{
    return sizeof(*r) + sizeof(*r->m) + (size_t)r->m->cap_nodes * sizeof(struct ring_node) +
           (r->block_len > 0 ? r->block_len : r->block_size) +
           (size_t)r->m->n_nodes * (sizeof(*r->zone) + sizeof(*r->by_id));
}
