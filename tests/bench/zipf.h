/*
 * zipf: the benchmarks' key popularity: a Zipf distribution over ranks
 * 0..n-1 sampled by binary search in its CDF, and the 64-bit mixer they
 * derive value sizes and random numbers from (hitratio_load, seg_hitratio).
 */
#ifndef TESTS_BENCH_ZIPF_H
#define TESTS_BENCH_ZIPF_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

struct zipf {
    double  *cdf;
    uint32_t n;
};

/* splitmix64's finalizer. */
static inline uint64_t
mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The cumulative distribution of rank i with weight 1/(i+1)^skew. 0, or -1
 * without memory. */
static inline int
zipf_init(struct zipf *z, uint32_t n, double skew)
{
    double   sum = 0;
    uint32_t i;

    z->n = n;
    z->cdf = malloc(sizeof(*z->cdf) * n);
    if (z->cdf == NULL) {
        return -1;
    }
    for (i = 0; i < n; i++) {
        sum += 1.0 / pow((double)i + 1, skew);
        z->cdf[i] = sum;
    }
    for (i = 0; i < n; i++) {
        z->cdf[i] /= sum;
    }
    return 0;
}

/* The rank of a uniform u in [0, 1). */
static inline uint32_t
zipf_rank(const struct zipf *z, double u)
{
    uint32_t lo = 0, hi = z->n - 1;

    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;

        if (z->cdf[mid] < u) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static inline void
zipf_free(struct zipf *z)
{
    free(z->cdf);
    z->cdf = NULL;
}

#endif /* TESTS_BENCH_ZIPF_H */
