/*
 * bench_rss: the resident set size of the calling process, for the
 * benchmarks that report bytes per item (store_bench, seg_bytes).
 */
#ifndef TESTS_BENCH_BENCH_RSS_H
#define TESTS_BENCH_BENCH_RSS_H

#include <stdio.h>
#include <unistd.h>

/* Resident set size in bytes, from /proc/self/statm; -1 if unreadable. */
static inline long
rss_bytes(void)
{
    long  size = 0, res = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f == NULL) {
        return -1;
    }
    if (fscanf(f, "%ld %ld", &size, &res) != 2) {
        res = -1;
    }
    fclose(f);
    return res * sysconf(_SC_PAGESIZE);
}

#endif /* TESTS_BENCH_BENCH_RSS_H */
