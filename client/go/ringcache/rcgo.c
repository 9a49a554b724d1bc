/*
 * C side of the Go package (client/go/ringcache, rcgo.h): the one-call
 * multi-get and the callback trampolines. Compiled by cgo with the
 * package; libringcache does the work.
 */
#include <stdlib.h>
#include <string.h>

#include "rcgo.h"
#include "_cgo_export.h"

/* The caller's result arrays while one rcgo_mget runs. */
struct mget_out {
    int      *status;
    size_t   *off;
    size_t   *vlen;
    uint32_t *flags;
    uint64_t *cas;
    char     *buf;
    size_t    len;
    size_t    cap;
    int       oom;
};

/* ringcache_mget_fn: append a hit's value to the shared buffer. */
static void
mget_one(void *arg, size_t index, int node, int status, const struct ringcache_value *v)
{
    struct mget_out *o = arg;

    o->status[index] = status;
    if (status != 0 || v == NULL) {
        return;
    }
    if (o->len + v->len > o->cap) {
        size_t cap = o->cap * 2;
        while (cap < o->len + v->len) {
            cap *= 2;
        }
        char *nb = realloc(o->buf, cap);
        if (nb == NULL) {
            o->oom = 1;
            o->status[index] = RINGCACHE_ENOMEM;
            return;
        }
        o->buf = nb;
        o->cap = cap;
    }
    memcpy(o->buf + o->len, v->data, v->len);
    o->off[index] = o->len;
    o->vlen[index] = v->len;
    o->flags[index] = v->flags;
    o->cas[index] = v->cas;
    o->len += v->len;
}

int
rcgo_mget(struct ringcache *rc, const char *keys, const size_t *lens, size_t n, int with_cas,
          int *status, size_t *off, size_t *vlen, uint32_t *flags, uint64_t *cas, char **buf,
          size_t *buf_len)
{
    struct mget_out o = { status, off, vlen, flags, cas, NULL, 0, 1024, 0 };
    const char    **ptrs = malloc(n * sizeof(*ptrs));
    int             rc_code = RINGCACHE_ENOMEM;

    *buf = NULL;
    *buf_len = 0;
    o.buf = malloc(o.cap);
    if (ptrs == NULL || o.buf == NULL) {
        goto out;
    }
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        ptrs[i] = keys + at;
        at += lens[i];
        status[i] = RINGCACHE_ENOTFOUND;
    }
    rc_code = ringcache_mget_cb(rc, ptrs, lens, n, with_cas, mget_one, &o);
    if (rc_code == 0 && o.oom) {
        rc_code = RINGCACHE_ENOMEM;
    }
out:
    free(ptrs);
    if (rc_code != 0 || o.len == 0) {
        free(o.buf);
        return rc_code;
    }
    *buf = o.buf;
    *buf_len = o.len;
    return 0;
}

/* ringcache_compute_fn: the Go function behind the handle in arg. */
static int
compute_tramp(void *arg, const char *key, size_t key_len, struct ringcache_value *out)
{
    return rcgoCompute((uintptr_t)arg, (char *)key, key_len, out);
}

int
rcgo_get_or_compute(struct ringcache *rc, const char *key, size_t key_len,
                    const struct ringcache_meta_opts *opts, uintptr_t h,
                    struct ringcache_meta_result *out)
{
    return ringcache_get_or_compute(rc, key, key_len, opts, compute_tramp, (void *)h, out);
}

/* ringcache_stat_fn: one line into the Go map behind arg (none for 0). */
static void
stat_tramp(void *arg, const char *name, const char *value)
{
    if ((uintptr_t)arg != 0) {
        rcgoStat((uintptr_t)arg, (char *)name, (char *)value);
    }
}

int
rcgo_stats(struct ringcache *rc, size_t i, const char *group, uintptr_t h)
{
    return ringcache_stats_group(rc, i, group, stat_tramp, (void *)h);
}
