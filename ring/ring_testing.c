/*
 * ring_testing: the test-only builder with a substitute point hash. Lives
 * in its own library (ring/libring_testing.la) that only tests link.
 */
#include "config.h"
#include "ring/ring_testing.h"
#include "ring/ring_internal.h"

/* ring_build_with_hash: see ring_testing.h. */
struct ring *
ring_build_with_hash(const struct ring_members *m, ring_hash_fn point_hash)
{
    return ring_build_hashed(m, point_hash);
}
