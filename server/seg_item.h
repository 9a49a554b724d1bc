/*
 * seg_item: the byte-packed record the compact engine (server/seg.c) writes
 * into its segments, and its codec (static inline: the engine, its tests
 * and nothing else include this). No padding, no alignment, no "\r\n": the
 * server adds the line end when it sends a value. See docs/store-engine.md.
 */
#ifndef SERVER_SEG_ITEM_H
#define SERVER_SEG_ITEM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The record's first byte. The has_ bits say which optional fields follow;
 * they never change once written. The state bits (stale, won, fetched) are
 * set in place under the key's stripe lock. */
#define SEG_RB_EXPTIME 0x01u /* a u32 exptime follows atime */
#define SEG_RB_FLAGS   0x02u /* a u32 flags follows */
#define SEG_RB_ECAS    0x04u /* a u64 client CAS (meta E) follows */
#define SEG_RB_STALE   0x08u /* meta: marked stale */
#define SEG_RB_WON     0x10u /* meta: a win token was handed out */
#define SEG_RB_BINKEY  0x20u /* meta: the key came base64-encoded */
#define SEG_RB_FETCHED 0x40u /* read at least once */
#define SEG_RB_HAS     (SEG_RB_EXPTIME | SEG_RB_FLAGS | SEG_RB_ECAS)
#define SEG_RB_STATE   (SEG_RB_STALE | SEG_RB_WON | SEG_RB_BINKEY | SEG_RB_FETCHED)

/* Longest LEB128 encoding of a u32. */
#define SEG_VARINT_MAX 5

/*
 * A record, decoded. Layout in the segment:
 *   u8 bits, u8 nkey, varint nbytes, u64 cas, u32 atime,
 *   [u32 exptime] [u32 flags] [u64 ecas], key, value
 * Integers are little-endian host order copied with memcpy (the engine
 * never leaves the host). key and value point into the segment after a
 * decode, or at the caller's bytes before an encode.
 */
struct seg_rec {
    uint8_t     bits; /* SEG_RB_* */
    uint8_t     nkey; /* 1..250 */
    uint32_t    nbytes;
    uint64_t    cas;
    uint32_t    atime;
    uint32_t    exptime; /* 0 unless SEG_RB_EXPTIME */
    uint32_t    flags;   /* 0 unless SEG_RB_FLAGS */
    uint64_t    ecas;    /* 0 unless SEG_RB_ECAS */
    const char *key;
    const char *value;
};

static inline size_t
seg_varint_len(uint32_t v)
{
    size_t n = 1;

    while (v >= 0x80u) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Offset of cas from the record's start. */
static inline size_t
seg_rec_cas_off(uint32_t nbytes)
{
    return 2 + seg_varint_len(nbytes);
}

/* Bytes of the header (everything before the key) of a record with these
 * has_ bits and value length. */
static inline size_t
seg_rec_hdr_len(uint8_t bits, uint32_t nbytes)
{
    return seg_rec_cas_off(nbytes) + 8 + 4 + (bits & SEG_RB_EXPTIME ? 4 : 0) +
           (bits & SEG_RB_FLAGS ? 4 : 0) + (bits & SEG_RB_ECAS ? 8 : 0);
}

/* Bytes the record takes in a segment. */
static inline size_t
seg_rec_size(uint8_t bits, size_t nkey, uint32_t nbytes)
{
    return seg_rec_hdr_len(bits, nbytes) + nkey + nbytes;
}

/* The has_ bits r's fields need: a field that is 0 is not stored. */
static inline uint8_t
seg_rec_has(const struct seg_rec *r)
{
    return (uint8_t)((r->exptime != 0 ? SEG_RB_EXPTIME : 0) | (r->flags != 0 ? SEG_RB_FLAGS : 0) |
                     (r->ecas != 0 ? SEG_RB_ECAS : 0));
}

/* Write r (its state bits, and has_ bits from its fields) at dst, which
 * has room for seg_rec_size; returns the bytes written. */
static inline size_t
seg_rec_encode(uint8_t *dst, const struct seg_rec *r)
{
    uint8_t  bits = (uint8_t)((r->bits & SEG_RB_STATE) | seg_rec_has(r));
    uint8_t *p = dst;
    uint32_t v = r->nbytes;

    *p++ = bits;
    *p++ = r->nkey;
    while (v >= 0x80u) {
        *p++ = (uint8_t)(v | 0x80u);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    memcpy(p, &r->cas, 8);
    p += 8;
    memcpy(p, &r->atime, 4);
    p += 4;
    if (bits & SEG_RB_EXPTIME) {
        memcpy(p, &r->exptime, 4);
        p += 4;
    }
    if (bits & SEG_RB_FLAGS) {
        memcpy(p, &r->flags, 4);
        p += 4;
    }
    if (bits & SEG_RB_ECAS) {
        memcpy(p, &r->ecas, 8);
        p += 8;
    }
    memcpy(p, r->key, r->nkey);
    p += r->nkey;
    if (r->nbytes > 0) {
        memcpy(p, r->value, r->nbytes);
    }
    return (size_t)(p - dst) + r->nbytes;
}

/* The first byte, read atomically (the state bits may be set in place by
 * a holder of the key's stripe lock while the evictor reads the has_
 * bits, which never change). */
static inline uint8_t
seg_rec_bits(const uint8_t *src)
{
    return __atomic_load_n(src, __ATOMIC_RELAXED);
}

/* Decode the record at src into r (key and value point into src); returns
 * its size in the segment. */
static inline size_t
seg_rec_decode(const uint8_t *src, struct seg_rec *r)
{
    const uint8_t *p = src + 2;
    uint32_t       v = 0;
    unsigned       shift = 0;

    r->bits = seg_rec_bits(src);
    r->nkey = src[1];
    do {
        v |= (uint32_t)(*p & 0x7fu) << shift;
        shift += 7;
    } while (*p++ & 0x80u);
    r->nbytes = v;
    memcpy(&r->cas, p, 8);
    p += 8;
    memcpy(&r->atime, p, 4);
    p += 4;
    r->exptime = r->flags = 0;
    r->ecas = 0;
    if (r->bits & SEG_RB_EXPTIME) {
        memcpy(&r->exptime, p, 4);
        p += 4;
    }
    if (r->bits & SEG_RB_FLAGS) {
        memcpy(&r->flags, p, 4);
        p += 4;
    }
    if (r->bits & SEG_RB_ECAS) {
        memcpy(&r->ecas, p, 8);
        p += 8;
    }
    r->key = (const char *)p;
    r->value = r->key + r->nkey;
    return (size_t)(p - src) + r->nkey + r->nbytes;
}

/* Where the key starts and how long it is, without a full decode. */
static inline const char *
seg_rec_key(const uint8_t *src, size_t *nkey)
{
    uint8_t        bits = seg_rec_bits(src);
    const uint8_t *p = src + 2;
    uint32_t       v = 0;
    unsigned       shift = 0;

    do {
        v |= (uint32_t)(*p & 0x7fu) << shift;
        shift += 7;
    } while (*p++ & 0x80u);
    *nkey = src[1];
    return (const char *)src + seg_rec_hdr_len(bits, v);
}

/* Set or clear state bits in place (caller holds the key's stripe lock). */
static inline void
seg_rec_set_bits(uint8_t *src, uint8_t set, uint8_t clear)
{
    uint8_t b = seg_rec_bits(src);

    __atomic_store_n(src, (uint8_t)((b | set) & ~clear), __ATOMIC_RELAXED);
}

/* Rewrite atime in place (caller holds the key's stripe lock). */
static inline void
seg_rec_set_atime(uint8_t *src, uint32_t nbytes, uint32_t atime)
{
    memcpy(src + seg_rec_cas_off(nbytes) + 8, &atime, 4);
}

/* Rewrite exptime in place; the record must have SEG_RB_EXPTIME (caller
 * holds the key's stripe lock). */
static inline void
seg_rec_set_exptime(uint8_t *src, uint32_t nbytes, uint32_t exptime)
{
    memcpy(src + seg_rec_cas_off(nbytes) + 12, &exptime, 4);
}

#endif /* SERVER_SEG_ITEM_H */
