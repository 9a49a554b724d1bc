/*
 * ring_testing: hooks for tests only. Defined in ring/ring_testing.c, which
 * is built into ring/libring_testing.la and linked only by the test runner,
 * so production code cannot call it by accident (it would not link).
 */
#ifndef RING_RING_TESTING_H
#define RING_RING_TESTING_H

#include "ring/ring.h"

/* ring_build with a substitute point hash (e.g. XXH3 truncated to 8 bits,
 * to force collisions). Keys are still looked up by their hash as given.
 * NULL on ENOMEM or an invalid membership; free with ring_free. */
struct ring *ring_build_with_hash(const struct ring_members *m, ring_hash_fn point_hash);

#endif /* RING_RING_TESTING_H */
