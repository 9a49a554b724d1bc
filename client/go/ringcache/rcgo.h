/*
 * C side of the Go package (client/go/ringcache): a multi-get that costs
 * the Go caller one cgo call (keys in one buffer, results in its arrays
 * and one value buffer), and trampolines for the callbacks libringcache
 * takes (get-or-compute, stats), which reach Go through a cgo.Handle.
 */
#ifndef CLIENT_GO_RCGO_H
#define CLIENT_GO_RCGO_H

#include <ringcache.h>
#include <stddef.h>
#include <stdint.h>

/**
 * ringcache_mget_cb of n keys laid end to end in keys (key i is lens[i]
 * bytes). For each key i, status[i] is the callback's status (0: hit);
 * on a hit its value is vlen[i] bytes at off[i] of *buf, with flags[i]
 * and cas[i] (with_cas). *buf is malloc'd (the caller frees it; NULL when
 * no key hit) and *buf_len its used length. The arrays are the caller's.
 * @return ringcache_mget_cb's code, or RINGCACHE_ENOMEM
 */
int rcgo_mget(struct ringcache *rc, const char *keys, const size_t *lens, size_t n, int with_cas,
              int *status, size_t *off, size_t *vlen, uint32_t *flags, uint64_t *cas, char **buf,
              size_t *buf_len);

/**
 * ringcache_get_or_compute with the Go function behind handle h
 * (rcgoCompute) as compute.
 */
int rcgo_get_or_compute(struct ringcache *rc, const char *key, size_t key_len,
                        const struct ringcache_meta_opts *opts, uintptr_t h,
                        struct ringcache_meta_result *out);

/**
 * ringcache_stats_group of node i, every line handed to the Go map behind
 * handle h (rcgoStat); h 0 drops the lines (a liveness check).
 */
int rcgo_stats(struct ringcache *rc, size_t i, const char *group, uintptr_t h);

#endif /* CLIENT_GO_RCGO_H */
