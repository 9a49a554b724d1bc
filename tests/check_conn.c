/*
 * conn_suite: a connection's buffering (server/conn.c) over a real socket
 * pair on a worker's event_base, pumped by hand in the test process:
 * partial lines, partial data blocks, large blocks read straight into the
 * item, pipelining, the output cap, a client that never reads, half-close,
 * quit, over-long lines, EOF, buffers going back to the pool when a
 * connection is idle, and the idle timeout's sweep.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "server/conn.h"
#include "server/proto_text.h"
#include "server/settings.h"
#include "server/thread.h"
#include "tests/suites.h"

struct cfix {
    struct server *srv;
    struct worker *w;
    struct conn   *c;
    int            cfd; /* the client's end */
    char          *buf; /* what the client received */
    size_t         len, cap;
    bool           eof;
};

static void
cfix_open(struct cfix *f)
{
    struct settings st;
    int             sv[2];

    memset(f, 0, sizeof(*f));
    settings_init(&st);
    st.num_threads = 1;
    f->srv = server_new(&st);
    ck_assert_ptr_nonnull(f->srv);
    f->w = &f->srv->workers[0];
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(evutil_make_socket_nonblocking(sv[0]), 0);
    f->c = conn_new(f->w, sv[0]);
    ck_assert_ptr_nonnull(f->c);
    ck_assert_int_eq(conn_start(f->c), 0);
    f->cfd = sv[1];
    f->cap = 1 << 16;
    f->buf = malloc(f->cap);
    ck_assert_ptr_nonnull(f->buf);
}

static void
cfix_close(struct cfix *f)
{
    close(f->cfd);
    server_free(f->srv);
    free(f->buf);
}

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Run the worker's loop once and collect what the client can read. */
static void
pump_once(struct cfix *f, bool read_client)
{
    event_base_loop(f->w->base, EVLOOP_NONBLOCK);
    while (read_client && !f->eof) {
        ssize_t n;

        if (f->cap - f->len < 65536) {
            f->cap *= 2;
            f->buf = realloc(f->buf, f->cap);
            ck_assert_ptr_nonnull(f->buf);
        }
        n = recv(f->cfd, f->buf + f->len, f->cap - f->len - 1, MSG_DONTWAIT);
        if (n > 0) {
            f->len += (size_t)n;
        } else if (n == 0) {
            f->eof = true;
        } else {
            ck_assert(errno == EAGAIN || errno == EWOULDBLOCK);
            break;
        }
    }
    f->buf[f->len] = '\0';
}

/* Pump until the client holds `want` bytes (or EOF), at most 5 s. */
static void
pump_until(struct cfix *f, size_t want)
{
    double deadline = now_s() + 5.0;

    while (f->len < want && !f->eof && now_s() < deadline) {
        pump_once(f, true);
    }
}

/* Pump a fixed number of rounds (to show that nothing more arrives). */
static void
pump_rounds(struct cfix *f, int rounds, bool read_client)
{
    while (rounds-- > 0) {
        pump_once(f, read_client);
    }
}

static void
send_all(struct cfix *f, const void *data, size_t len)
{
    const char *p = data;
    double      deadline = now_s() + 5.0;

    while (len > 0) {
        ssize_t n = send(f->cfd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else {
            ck_assert(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
            ck_assert_msg(now_s() < deadline, "send stuck");
            pump_once(f, true); /* let the server drain the socket */
        }
    }
}

static void
send_str(struct cfix *f, const char *s)
{
    send_all(f, s, strlen(s));
}

/* Expect exactly `want` as the next bytes, then clear. */
static void
expect(struct cfix *f, const char *want)
{
    pump_until(f, strlen(want));
    pump_rounds(f, 3, true);
    ck_assert_msg(f->len == strlen(want) && memcmp(f->buf, want, f->len) == 0, "got '%s' want '%s'",
                  f->buf, want);
    f->len = 0;
}

/* Send part of a request: the connection must answer nothing yet. */
static void
send_partial(struct cfix *f, const char *s)
{
    send_str(f, s);
    pump_rounds(f, 5, true);
    ck_assert_uint_eq(f->len, 0);
}

START_TEST(test_partial_line)
{
    struct cfix f;

    cfix_open(&f);
    send_partial(&f, "ge");
    send_partial(&f, "t a");
    send_str(&f, "\r\n");
    expect(&f, "END\r\n");
    cfix_close(&f);
}
END_TEST

START_TEST(test_partial_block)
{
    struct cfix f;

    cfix_open(&f);
    send_partial(&f, "set a 0 0 10\r\n01234");
    send_partial(&f, "56789\r");
    send_str(&f, "\nget a\r\n");
    expect(&f, "STORED\r\nVALUE a 0 10\r\n0123456789\r\nEND\r\n");
    cfix_close(&f);
}
END_TEST

/* A 700 KB block sent in pieces: most of it read directly into the item. */
START_TEST(test_big_block)
{
    struct cfix f;
    size_t      vlen = 700000, hl;
    char       *v = malloc(vlen), hdr[64];

    ck_assert_ptr_nonnull(v);
    for (size_t i = 0; i < vlen; i++) {
        v[i] = (char)('a' + i % 26);
    }
    cfix_open(&f);
    snprintf(hdr, sizeof(hdr), "set big 3 0 %zu\r\n", vlen);
    send_str(&f, hdr);
    for (size_t off = 0; off < vlen; off += 10000) {
        send_all(&f, v + off, vlen - off < 10000 ? vlen - off : 10000);
    }
    send_str(&f, "\r\n");
    expect(&f, "STORED\r\n");
    send_str(&f, "get big\r\n");
    hl = (size_t)snprintf(hdr, sizeof(hdr), "VALUE big 3 %zu\r\n", vlen);
    pump_until(&f, hl + vlen + 7);
    ck_assert_uint_eq(f.len, hl + vlen + 7);
    ck_assert_int_eq(memcmp(f.buf, hdr, hl), 0);
    ck_assert_int_eq(memcmp(f.buf + hl, v, vlen), 0);
    ck_assert_int_eq(memcmp(f.buf + hl + vlen, "\r\nEND\r\n", 7), 0);
    free(v);
    cfix_close(&f);
}
END_TEST

/* 300 pipelined commands in one send: replies complete and in order. */
START_TEST(test_pipeline)
{
    struct cfix f;
    char       *in = malloc(300 * 64), *want = malloc(300 * 64);
    size_t      il = 0, wl = 0;
    int         i;

    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(want);
    for (i = 0; i < 150; i++) {
        il += (size_t)sprintf(in + il, "set k%d %d 0 %d\r\n%d\r\n", i, i,
                              i < 10 ? 1 : (i < 100 ? 2 : 3), i);
        wl += (size_t)sprintf(want + wl, "STORED\r\n");
    }
    for (i = 0; i < 150; i++) {
        il += (size_t)sprintf(in + il, "get k%d\r\n", i);
        wl += (size_t)sprintf(want + wl, "VALUE k%d %d %d\r\n%d\r\nEND\r\n", i, i,
                              i < 10 ? 1 : (i < 100 ? 2 : 3), i);
    }
    in[il] = want[wl] = '\0';
    cfix_open(&f);
    send_all(&f, in, il);
    expect(&f, want);
    free(in);
    free(want);
    cfix_close(&f);
}
END_TEST

/*
 * A client that sends gets for a 512 KiB value and never reads: the queued
 * output stays bounded (the connection stops taking input), and once it
 * reads, every reply arrives whole.
 */
START_TEST(test_output_cap)
{
    struct cfix f;
    size_t      vlen = 512 * 1024, hl, total;
    char       *in = malloc(vlen + 64), hdr[64];
    int         i, ngets = 40;

    ck_assert_ptr_nonnull(in);
    cfix_open(&f);
    f.srv->stall_timeout_ms = 300;
    hl = (size_t)sprintf(in, "set big 0 0 %zu\r\n", vlen);
    memset(in + hl, 'b', vlen);
    memcpy(in + hl + vlen, "\r\n", 2);
    send_all(&f, in, hl + vlen + 2);
    expect(&f, "STORED\r\n");
    for (i = 0; i < ngets; i++) {
        send_str(&f, "get big\r\n");
    }
    pump_rounds(&f, 200, false);
    ck_assert_int_eq(f.w->nconns, 1);
    ck_assert_uint_le(f.c->out_bytes, f.c->out_cap + vlen + 64);
    ck_assert_uint_gt(f.c->out_bytes, 0);
    hl = (size_t)snprintf(hdr, sizeof(hdr), "VALUE big 0 %zu\r\n", vlen);
    total = (size_t)ngets * (hl + vlen + 2 + 5);
    pump_until(&f, total);
    ck_assert_uint_eq(f.len, total);
    for (i = 0; i < ngets; i++) {
        const char *r = f.buf + (size_t)i * (hl + vlen + 7);
        ck_assert_int_eq(memcmp(r, hdr, hl), 0);
        ck_assert_int_eq(memcmp(r + hl + vlen, "\r\nEND\r\n", 7), 0);
    }
    free(in);
    cfix_close(&f);
}
END_TEST

/* A client that keeps sending gets and never reads is closed once its
 * unparsed input reaches CONN_STALL_IN_CAP and nothing could be written for
 * the stall timeout (shortened here); memory stays bounded meanwhile. */
START_TEST(test_never_reads_closed)
{
    struct cfix f;
    size_t      vlen = 256 * 1024, hl, sent = 0;
    char       *in = malloc(vlen + 64), req[4096];
    double      deadline;

    ck_assert_ptr_nonnull(in);
    cfix_open(&f);
    f.srv->stall_timeout_ms = 300;
    hl = (size_t)sprintf(in, "set big 0 0 %zu\r\n", vlen);
    memset(in + hl, 'b', vlen);
    memcpy(in + hl + vlen, "\r\n", 2);
    send_all(&f, in, hl + vlen + 2);
    expect(&f, "STORED\r\n");
    for (size_t i = 0; i + 9 <= sizeof(req); i += 9) {
        memcpy(req + i, "get big\r\n", 9);
    }
    deadline = now_s() + 10.0;
    while (f.w->nconns > 0 && now_s() < deadline) {
        ssize_t n = send(f.cfd, req, sizeof(req) / 9 * 9, MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n > 0) {
            sent += (size_t)n;
        }
        if (f.w->nconns > 0) {
            ck_assert_uint_le(f.c->out_bytes, f.c->out_cap + vlen + 64);
            ck_assert_uint_le(f.c->rend - f.c->rpos, 2 * CONN_STALL_IN_CAP);
        }
        pump_once(&f, false);
    }
    ck_assert_int_eq(f.w->nconns, 0);
    ck_assert_uint_gt(sent, CONN_STALL_IN_CAP);
    free(in);
    cfix_close(&f);
}
END_TEST

/* A pipelining client that sends far ahead (past the input cap) and only
 * then reads loses nothing and is not closed. */
START_TEST(test_slow_reader_kept)
{
    struct cfix f;
    const char *get = "get v\r\n";
    const char *rep = "VALUE v 0 100\r\n"
                      "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
                      "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\r\nEND\r\n";
    char        req[7 * 512];
    size_t      sent = 0, want, i;
    int         idle = 0;

    cfix_open(&f);
    f.srv->stall_timeout_ms = 2000;
    send_str(&f, "set v 0 0 100\r\n"
                 "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
                 "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv\r\n");
    expect(&f, "STORED\r\n");
    for (i = 0; i < sizeof(req); i += 7) {
        memcpy(req + i, get, 7);
    }
    /* Send without reading until the node stops taking input. */
    while (idle < 50) {
        ssize_t n = send(f.cfd, req, sizeof(req), MSG_DONTWAIT | MSG_NOSIGNAL);

        if (n > 0) {
            sent += (size_t)n;
            idle = 0;
        } else {
            idle++;
        }
        pump_once(&f, false);
    }
    ck_assert_uint_gt(sent, CONN_STALL_IN_CAP);
    ck_assert_int_eq(f.w->nconns, 1);
    /* A partial last request may be outstanding: complete it. */
    want = sent / 7 + (sent % 7 != 0);
    if (sent % 7 != 0) {
        send_all(&f, get + sent % 7, 7 - sent % 7);
    }
    pump_until(&f, want * strlen(rep));
    ck_assert_uint_eq(f.len, want * strlen(rep));
    ck_assert_int_eq(memcmp(f.buf + f.len - strlen(rep), rep, strlen(rep)), 0);
    ck_assert_int_eq(f.w->nconns, 1);
    cfix_close(&f);
}
END_TEST

/* A client that sends its requests, shuts down its side, then reads: it
 * still gets every reply, then EOF. */
START_TEST(test_half_close_gets_replies)
{
    struct cfix f;
    size_t      vlen = 256 * 1024, hl, total;
    char       *in = malloc(vlen + 64), hdr[64];
    int         i, ngets = 20;

    ck_assert_ptr_nonnull(in);
    cfix_open(&f);
    hl = (size_t)sprintf(in, "set big 0 0 %zu\r\n", vlen);
    memset(in + hl, 'h', vlen);
    memcpy(in + hl + vlen, "\r\n", 2);
    send_all(&f, in, hl + vlen + 2);
    expect(&f, "STORED\r\n");
    for (i = 0; i < ngets; i++) {
        send_str(&f, "get big\r\n");
    }
    pump_rounds(&f, 20, false);
    shutdown(f.cfd, SHUT_WR);
    pump_rounds(&f, 20, false);
    hl = (size_t)snprintf(hdr, sizeof(hdr), "VALUE big 0 %zu\r\n", vlen);
    total = (size_t)ngets * (hl + vlen + 7);
    pump_until(&f, (size_t)-1);
    ck_assert(f.eof);
    ck_assert_uint_eq(f.len, total);
    ck_assert_int_eq(f.w->nconns, 0);
    free(in);
    cfix_close(&f);
}
END_TEST

START_TEST(test_quit_flushes)
{
    struct cfix f;

    cfix_open(&f);
    send_str(&f, "version\r\nquit\r\nversion\r\n");
    pump_until(&f, (size_t)-1);
    ck_assert(f.eof);
    ck_assert_str_eq(f.buf, "VERSION " PROTO_VERSION_STRING "\r\n");
    ck_assert_int_eq(f.w->nconns, 0);
    cfix_close(&f);
}
END_TEST

START_TEST(test_long_line_closes)
{
    struct cfix f;
    char        line[3000];

    memset(line, 'x', sizeof(line));
    cfix_open(&f);
    send_all(&f, line, sizeof(line));
    pump_until(&f, (size_t)-1);
    ck_assert(f.eof);
    ck_assert_uint_eq(f.len, 0);
    ck_assert_int_eq(f.w->nconns, 0);
    cfix_close(&f);
}
END_TEST

START_TEST(test_binary_magic_closes)
{
    struct cfix f;

    cfix_open(&f);
    send_all(&f, "\x80\x00\x00\x05", 4);
    pump_until(&f, (size_t)-1);
    ck_assert(f.eof);
    ck_assert_uint_eq(f.len, 0);
    cfix_close(&f);
}
END_TEST

/* EOF mid-block frees the pending item and the connection. */
START_TEST(test_eof_mid_block)
{
    struct cfix f;
    double      deadline;

    cfix_open(&f);
    send_str(&f, "set a 0 0 100\r\nabc");
    pump_rounds(&f, 5, true);
    ck_assert_int_eq(f.w->nconns, 1);
    shutdown(f.cfd, SHUT_WR);
    deadline = now_s() + 5.0;
    while (f.w->nconns > 0 && now_s() < deadline) {
        pump_once(&f, true);
    }
    ck_assert_int_eq(f.w->nconns, 0);
    cfix_close(&f);
}
END_TEST

/* After a request, an idle connection holds no read buffer or output. */
START_TEST(test_idle_releases_buffers)
{
    struct cfix f;

    cfix_open(&f);
    send_str(&f, "set a 0 0 1\r\n1\r\n");
    expect(&f, "STORED\r\n");
    ck_assert_ptr_null(f.c->rbuf);
    ck_assert_ptr_null(f.c->out_head);
    ck_assert_uint_eq(f.c->out_bytes, 0);
    ck_assert_int_ge(f.w->nrbuf_pool, 1);
    /* A partial line keeps its buffer until the rest comes. */
    send_str(&f, "get");
    pump_rounds(&f, 5, true);
    ck_assert_ptr_nonnull(f.c->rbuf);
    send_str(&f, " a\r\n");
    expect(&f, "VALUE a 0 1\r\n1\r\nEND\r\n");
    ck_assert_ptr_null(f.c->rbuf);
    cfix_close(&f);
}
END_TEST

/* -o idle_timeout: the sweep closes a connection idle past the timeout,
 * never one it owes a reply (whose idle time restarts once the reply is
 * out) nor a cluster peer; each close counts in idle_kicks. */
START_TEST(test_idle_sweep)
{
    struct cfix  f;
    struct conn *owed, *idle;
    int          sv[2], sv2[2];
    char         b;

    cfix_open(&f);
    f.c->peer = true;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv2), 0);
    owed = conn_new(f.w, sv[0]);
    idle = conn_new(f.w, sv2[0]);
    ck_assert_ptr_nonnull(owed);
    ck_assert_ptr_nonnull(idle);
    conn_out_add(owed, "VERSION x\r\n", 11); /* queued, not yet written */

    f.w->idle_now += 2;
    ck_assert_int_eq(conn_idle_sweep(f.w, 2), 0); /* 2 s is not more than 2 */
    f.w->idle_now += 1;
    ck_assert_int_eq(conn_idle_sweep(f.w, 2), 1); /* idle: closed */
    ck_assert_int_eq(read(sv2[1], &b, 1), 0);     /* the client sees EOF */
    ck_assert_uint_eq(f.w->stats.idle_kicks, 1);

    /* The reply goes out: idle from the last sweep that saw it owed. */
    conn_out_clear(owed);
    f.w->idle_now += 2;
    ck_assert_int_eq(conn_idle_sweep(f.w, 2), 0);
    f.w->idle_now += 1;
    ck_assert_int_eq(conn_idle_sweep(f.w, 2), 1);
    ck_assert_int_eq(read(sv[1], &b, 1), 0);
    ck_assert_uint_eq(f.w->stats.idle_kicks, 2);
    ck_assert_int_eq(f.w->nconns, 1); /* the peer stays */
    close(sv[1]);
    close(sv2[1]);
    cfix_close(&f);
}
END_TEST

Suite *
conn_suite(void)
{
    Suite *s = suite_create("conn");
    TCase *tc = tcase_create("conn");

    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_partial_line);
    tcase_add_test(tc, test_partial_block);
    tcase_add_test(tc, test_big_block);
    tcase_add_test(tc, test_pipeline);
    tcase_add_test(tc, test_output_cap);
    tcase_add_test(tc, test_never_reads_closed);
    tcase_add_test(tc, test_half_close_gets_replies);
    tcase_add_test(tc, test_slow_reader_kept);
    tcase_add_test(tc, test_quit_flushes);
    tcase_add_test(tc, test_long_line_closes);
    tcase_add_test(tc, test_binary_magic_closes);
    tcase_add_test(tc, test_eof_mid_block);
    tcase_add_test(tc, test_idle_releases_buffers);
    tcase_add_test(tc, test_idle_sweep);
    suite_add_tcase(s, tc);
    return s;
}
