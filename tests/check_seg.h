/*
 * check_seg.h: what tests/check_seg.c (the compact engine's suite) shares
 * with tests/check_seg_update.c: a clock the tests move, the drop hook's
 * counts, an engine maker, put/get helpers and the RSS bound.
 */
#ifndef TESTS_CHECK_SEG_H
#define TESTS_CHECK_SEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/seg.h"

#define KIB     1024u
#define MIB_SEG (1024u * 1024u)

/* The clock and flush floor the engines of these tests read; the CAS
 * put_full gives. */
extern int64_t  fake_now;
extern uint64_t fake_floor;
extern uint64_t next_cas;

int64_t  clock_now(void *arg);
uint64_t clock_floor(void *arg);

/* An engine of limit bytes in segments of seg_size (0: the default) on
 * that clock; resets the drop counts and the floor. */
struct seg *mkseg(size_t limit, uint32_t seg_size);

/* XXH3 of a C string key. */
uint64_t hk(const char *key);

/* seg_put of key with nval bytes of val, a fresh CAS, exptime, flags. */
int put_full(struct seg *s, const char *key, const char *val, size_t nval, uint32_t exptime,
             uint32_t flags);
int put(struct seg *s, const char *key, const char *val);

/* What a get copies out. */
struct got {
    char     val[8192];
    uint32_t nbytes, flags, exptime, atime;
    uint64_t cas;
    uint8_t  bits;
    unsigned freq;
};

/* seg_get's copy-out callback into a struct got. */
int copy_out(void *arg, const struct seg_rec *r, uint64_t hash, unsigned freq);

/* A read (fetch: counts and stamps) and a peek (neither). */
int get(struct seg *s, const char *key, struct got *g);
int peek(struct seg *s, const char *key, struct got *g);

/* key reads back as val. */
void expect(struct seg *s, const char *key, const char *val);

/* Resident set size in bytes; and the bound a flood's growth must keep
 * (not asserted under the sanitizers). */
long rss_now(void);
void assert_rss_within(long grew, size_t limit, const struct seg_stats *st);

#endif /* TESTS_CHECK_SEG_H */
