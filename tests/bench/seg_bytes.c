/*
 * seg_bytes: resident bytes per item of the compact engine (server/seg.c)
 * against today's store (server/store.c), in one run. Each measurement runs
 * in a child process of its own (so one engine's freed memory cannot hide
 * the other's growth): RSS (/proc/self/statm) before the engine is created
 * and after N sets, divided by N. Keys of 10-12 bytes; values of 100 bytes,
 * 1000 bytes, a mix of 64-1024 bytes (a function of the key), and N/1000
 * values of 100 KB (in segments) and 300 KB (a jumbo each).
 * Usage: seg_bytes [items]   (default 1000000)
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "server/seg.h"
#include "server/store.h"
#include "tests/bench/bench_rss.h"

enum engine {
    ENG_SEG,
    ENG_STORE
};

/* Key number i: "key:" and 6-8 digits (10-12 bytes). */
static size_t
key_of(char *buf, size_t n, long i)
{
    return (size_t)snprintf(buf, n, "key:%0*ld", 6 + (int)(i % 3), i);
}

/* The value size of key i: fixed, or (fixed 0) 64-1024 from the key. */
static uint32_t
size_of(long i, uint32_t fixed)
{
    return fixed != 0 ? fixed : 64 + (uint32_t)((i * 2654435761u) % 961u);
}

static char val[300000];

static int
put_seg(struct seg *s, const char *key, size_t nkey, uint32_t nbytes, long i)
{
    /* CAS and atime as the node writes them: minted from the clock now. */
    static uint64_t cas0;
    static uint32_t now;
    struct seg_rec  r = { .nkey = (uint8_t)nkey, .nbytes = nbytes, .key = key, .value = val };

    if (cas0 == 0) {
        now = (uint32_t)time(NULL);
        cas0 = store_cas_clock((int64_t)now * 1000);
    }
    r.cas = cas0 + (uint64_t)i + 1;
    r.atime = now;

    return seg_put(s, XXH3_64bits(key, nkey), &r, NULL, NULL) == SEG_OK ? 0 : -1;
}

static int
put_store(struct store *s, const char *key, size_t nkey, uint32_t nbytes)
{
    int                err = 0;
    struct store_item *it = store_alloc(s, key, nkey, XXH3_64bits(key, nkey), 0, 0, nbytes, &err);

    if (it == NULL) {
        return -1;
    }
    memcpy(store_item_value_mut(it), val, nbytes);
    err = store_put(s, it, STORE_OP_SET, 0, NULL);
    store_release(s, it);
    return err == STORE_STORED ? 0 : -1;
}

/* Fill a new engine with items; the seg fill also reports its record and
 * index bytes per item in extra. The child exits after: nothing is freed. */
static int
fill(enum engine e, long items, uint32_t fixed, double extra[2])
{
    /* Room for all: a jumbo (over a quarter segment) is charged as a
     * whole segment. */
    size_t each = fixed > SEG_SIZE_DEFAULT / 4 ? SEG_SIZE_DEFAULT : (fixed ? fixed : 1024) + 64;
    struct seg_config   scfg = { .mem_limit = (size_t)items * each + ((size_t)64 << 20) };
    struct store_config tcfg = { .mem_limit = (size_t)8 << 30, .item_size_max = 1 << 20 };
    struct seg         *sg = e == ENG_SEG ? seg_new(&scfg) : NULL;
    struct store       *st = e == ENG_STORE ? store_new(&tcfg) : NULL;
    struct seg_stats    ss;
    char                key[32];
    long                i;

    if (sg == NULL && st == NULL) {
        return -1;
    }
    memset(val, 'v', fixed ? fixed : 1024); /* only what is read: RSS */
    for (i = 0; i < items; i++) {
        size_t   n = key_of(key, sizeof(key), i);
        uint32_t nb = size_of(i, fixed);

        if ((sg != NULL ? put_seg(sg, key, n, nb, i) : put_store(st, key, n, nb)) < 0) {
            fprintf(stderr, "set %ld failed\n", i);
            return -1;
        }
    }
    if (sg == NULL) {
        return 0;
    }
    seg_stats(sg, &ss);
    if (ss.items != (uint64_t)items || ss.evictions != 0) {
        fprintf(stderr, "seg: %llu items, %llu evictions\n", (unsigned long long)ss.items,
                (unsigned long long)ss.evictions);
        return -1;
    }
    extra[0] = (double)ss.live_bytes / (double)items;
    extra[1] = (double)ss.index_bytes / (double)items;
    return 0;
}

/* Run one fill in a child; bytes per item, or a negative on failure. The
 * seg child also reports its record and index bytes per item. */
static double
measure(enum engine e, long items, uint32_t fixed, double extra[2])
{
    int    fd[2];
    pid_t  pid;
    double out[3] = { -1, 0, 0 };
    int    status;

    if (pipe(fd) != 0 || (pid = fork()) < 0) {
        return -1;
    }
    if (pid == 0) {
        long rss0 = rss_bytes();
        int  rc;

        close(fd[0]);
        rc = fill(e, items, fixed, &out[1]);
        if (rc == 0) {
            out[0] = (double)(rss_bytes() - rss0) / (double)items;
        }
        if (write(fd[1], out, sizeof(out)) != (ssize_t)sizeof(out)) {
            _exit(1);
        }
        _exit(rc == 0 ? 0 : 1);
    }
    close(fd[1]);
    if (read(fd[0], out, sizeof(out)) != (ssize_t)sizeof(out)) {
        out[0] = -1;
    }
    close(fd[0]);
    waitpid(pid, &status, 0);
    extra[0] = out[1];
    extra[1] = out[2];
    return out[0];
}

int
main(int argc, char **argv)
{
    static const struct {
        const char *name;
        uint32_t    fixed;
        long        per; /* items / per of them */
    } loads[] = { { "100B", 100, 1 },
                  { "1000B", 1000, 1 },
                  { "mix64-1024B", 0, 1 },
                  { "100KB", 100000, 1000 },
                  { "300KB", 300000, 1000 } };
    long   items = argc > 1 ? atol(argv[1]) : 1000000;
    size_t k;

    if (items <= 0) {
        fprintf(stderr, "usage: seg_bytes [items]\n");
        return 2;
    }
    for (k = 0; k < sizeof(loads) / sizeof(loads[0]); k++) {
        double ex[2], ex2[2];
        long   n = items / loads[k].per > 0 ? items / loads[k].per : 1;
        double sb = measure(ENG_SEG, n, loads[k].fixed, ex);
        double tb = measure(ENG_STORE, n, loads[k].fixed, ex2);

        if (sb < 0 || tb < 0) {
            fprintf(stderr, "seg_bytes: the %s fill failed\n", loads[k].name);
            return 1;
        }
        printf("seg_bytes_per_item/%s %.1f\n", loads[k].name, sb);
        printf("seg_record_bytes_per_item/%s %.1f\n", loads[k].name, ex[0]);
        printf("seg_index_bytes_per_item/%s %.1f\n", loads[k].name, ex[1]);
        printf("store_bytes_per_item/%s %.1f\n", loads[k].name, tb);
        printf("seg_over_store/%s %.3f\n", loads[k].name, sb / tb);
        fflush(stdout);
    }
    return 0;
}
