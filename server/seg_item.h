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

#include "server/cas_clock.h"

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
#define SEG_RB_ATIME32 0x80u /* atime is a u32, not a u16 distance from the CAS */
#define SEG_RB_HAS     (SEG_RB_EXPTIME | SEG_RB_FLAGS | SEG_RB_ECAS | SEG_RB_ATIME32)
#define SEG_RB_STATE   (SEG_RB_STALE | SEG_RB_WON | SEG_RB_BINKEY | SEG_RB_FETCHED)

/* Longest LEB128 encoding of a u32. */
#define SEG_VARINT_MAX 5

/*
 * A record, decoded. Layout in the segment:
 *   u8 bits, u8 nkey, varint nbytes, u64 cas, u16 atime (u32 with
 *   SEG_RB_ATIME32), [u32 exptime] [u32 flags] [u64 ecas], key, value
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

/*
 * The last access time is kept in 2 bytes as its distance in seconds from
 * the second the record's CAS names (every CAS is minted from the clock, or
 * imported from a peer that minted it so; and a record is read only after
 * it was written): exact up to 2^15 s (9.1 hours), then a float of an
 * 11-bit mantissa and a 4-bit exponent, within 1/2048 of the distance up to
 * about 4.25 years, where it stops. A record is written with a u32 instead
 * (SEG_RB_ATIME32) when its distance is not exactly representable (an
 * atime older than the CAS, a CAS not from the clock); a bump in place of
 * a u16 record rounds down to a representable distance. memcached itself
 * moves an item's access time at most once a minute.
 */
#define SEG_ATIME_EXACT 0x8000u /* codes and distances below are the same */
#define SEG_ATIME_MANT  11u

static inline uint32_t
seg_atime_from_code(uint16_t code)
{
    uint32_t u, e;

    if (code < SEG_ATIME_EXACT) {
        return code;
    }
    u = code - SEG_ATIME_EXACT;
    e = u >> SEG_ATIME_MANT;
    return SEG_ATIME_EXACT + (((1u << SEG_ATIME_MANT) | (u & 0x7ffu)) << e) -
           (1u << SEG_ATIME_MANT);
}

/* The code of the largest representable distance not above d. */
static inline uint16_t
seg_atime_to_code(uint32_t d)
{
    uint64_t x;
    uint32_t e = 0;

    if (d < SEG_ATIME_EXACT) {
        return (uint16_t)d;
    }
    x = (uint64_t)d - SEG_ATIME_EXACT + (1u << SEG_ATIME_MANT);
    while (x >> e >= (2u << SEG_ATIME_MANT)) {
        e++;
    }
    if (e > 15) {
        return UINT16_MAX;
    }
    return (uint16_t)(SEG_ATIME_EXACT | (e << SEG_ATIME_MANT) | ((x >> e) & 0x7ffu));
}

/* Whether atime fits the record's u16 exactly. */
static inline bool
seg_atime_fits(uint64_t cas, uint32_t atime)
{
    uint32_t base = store_cas_unix_s(cas);

    return atime >= base && seg_atime_from_code(seg_atime_to_code(atime - base)) == atime - base;
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
    return seg_rec_cas_off(nbytes) + 8 + (bits & SEG_RB_ATIME32 ? 4 : 2) +
           (bits & SEG_RB_EXPTIME ? 4 : 0) + (bits & SEG_RB_FLAGS ? 4 : 0) +
           (bits & SEG_RB_ECAS ? 8 : 0);
}

/* Bytes the record takes in a segment. */
static inline size_t
seg_rec_size(uint8_t bits, size_t nkey, uint32_t nbytes)
{
    return seg_rec_hdr_len(bits, nbytes) + nkey + nbytes;
}

/* The has_ bits r's fields need: a field that is 0 is not stored, an
 * atime that does not fit the u16 is a u32. */
static inline uint8_t
seg_rec_has(const struct seg_rec *r)
{
    return (uint8_t)((r->exptime != 0 ? SEG_RB_EXPTIME : 0) | (r->flags != 0 ? SEG_RB_FLAGS : 0) |
                     (r->ecas != 0 ? SEG_RB_ECAS : 0) |
                     (seg_atime_fits(r->cas, r->atime) ? 0 : SEG_RB_ATIME32));
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
    if (bits & SEG_RB_ATIME32) {
        memcpy(p, &r->atime, 4);
        p += 4;
    } else {
        uint16_t code = seg_atime_to_code(r->atime - store_cas_unix_s(r->cas));

        memcpy(p, &code, 2);
        p += 2;
    }
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
    if (r->bits & SEG_RB_ATIME32) {
        memcpy(&r->atime, p, 4);
        p += 4;
    } else {
        uint16_t code;
        uint64_t t;

        memcpy(&code, p, 2);
        p += 2;
        t = (uint64_t)store_cas_unix_s(r->cas) + seg_atime_from_code(code);
        r->atime = t < UINT32_MAX ? (uint32_t)t : UINT32_MAX - 1;
    }
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

/* Rewrite atime in place (caller holds the key's stripe lock): a u16
 * record keeps the representable distance at or below it (none below the
 * CAS's second). */
static inline void
seg_rec_set_atime(uint8_t *src, uint32_t nbytes, uint32_t atime)
{
    uint8_t *p = src + seg_rec_cas_off(nbytes);
    uint64_t cas;
    uint32_t base;
    uint16_t code;

    if (seg_rec_bits(src) & SEG_RB_ATIME32) {
        memcpy(p + 8, &atime, 4);
        return;
    }
    memcpy(&cas, p, 8);
    base = store_cas_unix_s(cas);
    code = seg_atime_to_code(atime > base ? atime - base : 0);
    memcpy(p + 8, &code, 2);
}

/* Rewrite exptime in place; the record must have SEG_RB_EXPTIME (caller
 * holds the key's stripe lock). */
static inline void
seg_rec_set_exptime(uint8_t *src, uint32_t nbytes, uint32_t exptime)
{
    size_t off = seg_rec_cas_off(nbytes) + 8 + (seg_rec_bits(src) & SEG_RB_ATIME32 ? 4 : 2);

    memcpy(src + off, &exptime, 4);
}

#endif /* SERVER_SEG_ITEM_H */
