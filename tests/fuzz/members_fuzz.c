/*
 * members_fuzz: libFuzzer target for the membership parser. Any input must
 * parse or fail with one "name:line: reason" line; what parses must round
 * trip through format, build a ring, locate keys and diff without fault.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ring/ring.h"

/* Bigger rings only slow the fuzzer down; the unit tests cover them. */
#define FUZZ_POINTS_MAX 20000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Abort (a finding) when two memberships differ in any field. */
static void
assert_same(const struct ring_members *a, const struct ring_members *b)
{
    uint32_t i;

    if (a->epoch != b->epoch || a->vnodes != b->vnodes || a->replicas != b->replicas ||
        a->n_nodes != b->n_nodes) {
        abort();
    }
    for (i = 0; i < a->n_nodes; i++) {
        if (strcmp(a->nodes[i].id, b->nodes[i].id) != 0 ||
            strcmp(a->nodes[i].addr, b->nodes[i].addr) != 0 ||
            strcmp(a->nodes[i].zone, b->nodes[i].zone) != 0 ||
            a->nodes[i].weight != b->nodes[i].weight) {
            abort();
        }
    }
}

/* Build, locate a few keys, take shares, diff against the ring without
 * the first node. */
static void
exercise_ring(const struct ring_members *m)
{
    uint64_t             points = 0;
    uint32_t             i, out[32], want;
    struct ring         *r, *r2 = NULL;
    struct ring_members *less;
    struct ring_diff    *d;
    double              *share;

    for (i = 0; i < m->n_nodes; i++) {
        points += (uint64_t)m->nodes[i].weight * m->vnodes;
    }
    if (points > FUZZ_POINTS_MAX) {
        return;
    }
    r = ring_build(m);
    if (r == NULL) {
        abort(); /* a valid membership within limits must build */
    }
    want = m->replicas < 32 ? m->replicas : 32;
    for (i = 0; i < 8; i++) {
        uint64_t h = ring_hash(&i, sizeof(i)) ^ (i == 7 ? UINT64_MAX : 0);
        uint32_t n = ring_locate(r, h, want, out);

        if (n != (want < m->n_nodes ? want : m->n_nodes) || out[0] != ring_primary(r, h)) {
            abort();
        }
    }
    share = malloc(m->n_nodes * sizeof(*share));
    if (share != NULL) {
        double sum = 0;

        ring_shares(r, share);
        for (i = 0; i < m->n_nodes; i++) {
            sum += share[i];
        }
        if (sum < 0.999999 || sum > 1.000001) {
            abort();
        }
        free(share);
    }
    less = ring_members_dup(m);
    if (less != NULL && less->n_nodes > 1 && ring_members_remove(less, m->nodes[0].id) == RING_OK) {
        r2 = ring_build(less);
        if (r2 != NULL) {
            d = ring_diff(r, r2);
            if (d != NULL && (d->primary_moved < 0 || d->primary_moved > 1)) {
                abort();
            }
            ring_diff_free(d);
        }
    }
    ring_free(r2);
    ring_members_free(less);
    ring_free(r);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ring_members *m = NULL, *back = NULL;
    char                 err[256], *text;
    size_t               need;

    err[0] = '\0';
    if (ring_members_parse((const char *)data, size, "fuzz", &m, err, sizeof(err)) != RING_OK) {
        /* One line, "fuzz:N: reason". */
        if (m != NULL || strncmp(err, "fuzz:", 5) != 0 || strchr(err, '\n') != NULL) {
            abort();
        }
        return 0;
    }
    need = ring_members_format(m, NULL, 0);
    text = malloc(need + 1);
    if (text != NULL) {
        if (ring_members_format(m, text, need + 1) != need ||
            ring_members_parse(text, need, "again", &back, err, sizeof(err)) != RING_OK) {
            abort();
        }
        assert_same(m, back);
        ring_members_free(back);
        free(text);
    }
    exercise_ring(m);
    ring_members_free(m);
    return 0;
}
