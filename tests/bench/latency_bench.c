/*
 * latency_bench: what timing a request costs (server/latency.h), no
 * network. Prints `figure value` lines: ns per clock read, ns per request
 * of the timing alone (latency_batch, _begin, _end, _batch_end: one
 * request per batch, two clock reads), ns per `get` through the text
 * protocol on an in-memory connection (timing included), the share of
 * the timing in it, and ns per get when 100 come in one batch (two clock
 * reads for the batch). Usage: latency_bench [requests]
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/conn.h"
#include "server/latency.h"
#include "server/proto_text.h"
#include "server/settings.h"
#include "server/thread.h"

#define PIPELINE 100 /* gets per batch in the pipelined run */

int
main(int argc, char **argv)
{
    long            n = argc > 1 ? atol(argv[1]) : 2000000;
    struct settings st;
    struct server  *srv;
    struct conn    *c;
    uint64_t        t0, sink = 0;
    double          clock_ns, timing_ns, get_ns, pipe_ns;
    long            i;

    if (n <= 0) {
        fprintf(stderr, "usage: latency_bench [requests]\n");
        return 2;
    }
    settings_init(&st);
    st.num_threads = 1;
    srv = server_new(&st);
    c = srv != NULL ? conn_new(&srv->workers[0], -1) : NULL;
    if (c == NULL) {
        fprintf(stderr, "latency_bench: no server\n");
        return 1;
    }

    t0 = latency_now();
    for (i = 0; i < n; i++) {
        sink += latency_now();
    }
    clock_ns = (double)(latency_now() - t0) / (double)n;

    t0 = latency_now();
    for (i = 0; i < n; i++) {
        latency_batch(c);
        latency_begin(c, "get", 3);
        latency_end(c);
        latency_batch_end(c);
    }
    timing_ns = (double)(latency_now() - t0) / (double)n;

    /* A hit of a small value, one request per batch as an unpipelined
     * client sends it; the reply is dropped as a write would. */
    if (conn_feed(c, "set k 0 0 5\r\nvalue\r\n", 20) < 0 || proto_text_process(c) != PROTO_MORE) {
        fprintf(stderr, "latency_bench: set failed\n");
        return 1;
    }
    conn_out_clear(c);
    t0 = latency_now();
    for (i = 0; i < n; i++) {
        if (conn_feed(c, "get k\r\n", 7) < 0) {
            fprintf(stderr, "latency_bench: feed failed\n");
            return 1;
        }
        proto_text_process(c);
        conn_out_clear(c);
        c->rpos = c->rend = 0;
    }
    get_ns = (double)(latency_now() - t0) / (double)n;

    /* The same gets PIPELINE to a batch: one clock read for the batch,
     * one per reply. */
    {
        static char batch[PIPELINE * 7];

        for (i = 0; i < PIPELINE; i++) {
            memcpy(batch + i * 7, "get k\r\n", 7);
        }
        t0 = latency_now();
        for (i = 0; i < n / PIPELINE; i++) {
            if (conn_feed(c, batch, sizeof(batch)) < 0) {
                fprintf(stderr, "latency_bench: feed failed\n");
                return 1;
            }
            proto_text_process(c);
            conn_out_clear(c);
            c->rpos = c->rend = 0;
        }
        pipe_ns = (double)(latency_now() - t0) / (double)(n / PIPELINE * PIPELINE);
    }

    printf("latency/clock_read_ns %.1f\n", clock_ns);
    printf("latency/timing_ns_per_request %.1f\n", timing_ns);
    printf("latency/get_ns_per_request %.1f   # in-memory, timing included\n", get_ns);
    printf("latency/timing_share_of_get %.3f\n", timing_ns / get_ns);
    printf("latency/get_ns_per_request_pipelined%d %.1f\n", PIPELINE, pipe_ns);
    conn_close(c);
    server_free(srv);
    return sink == 1 ? 3 : 0;
}
