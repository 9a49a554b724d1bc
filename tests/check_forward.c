/*
 * forward_suite: holds in a connection's output queue (server/conn.c) and
 * the upstream machinery of server/forward.c, driven on a worker's
 * event_base by hand: replies filled out of order keep request order, a
 * large reply inserted before later text, a dropped hold tells its owner,
 * and a forwarded request against a fake owner socket in this process:
 * relayed reply, MOVED retried at the named address, timeout, refusal.
 * fwd_order_suite: a connection's relayed requests keep their order
 * across TRYAGAIN and MOVED retries (server/fwd_order.c).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "server/conn.h"
#include "server/forward.h"
#include "server/settings.h"
#include "server/thread.h"
#include "tests/suites.h"

static double
now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct server *
new_server(int timeout_ms)
{
    struct settings st;
    struct server  *srv;

    settings_init(&st);
    st.num_threads = 1;
    st.forward_timeout_ms = timeout_ms;
    srv = server_new(&st);
    ck_assert_ptr_nonnull(srv);
    return srv;
}

static char *
take(struct conn *c)
{
    size_t n;
    char  *s = conn_out_take(c, &n);

    return s != NULL ? s : strdup("");
}

static void
gone_flag(void *owner)
{
    *(int *)owner += 1;
}

START_TEST(test_hold_order)
{
    struct server    *srv = new_server(1000);
    struct conn      *c = conn_new(&srv->workers[0], -1);
    struct out_chunk *h1, *h2;
    int               o1 = 0, o2 = 0;
    char             *s;

    conn_out_add(c, "A", 1);
    h1 = conn_out_hold(c, &o1, gone_flag);
    conn_out_add(c, "B", 1);
    h2 = conn_out_hold(c, &o2, gone_flag);
    ck_assert_uint_eq(c->nholds, 2);
    /* Filled out of order and in pieces, with text queued in between. */
    conn_hold_add(c, h2, "y1", 2);
    conn_out_add(c, "C", 1);
    conn_hold_add(c, h1, "x1", 2);
    conn_hold_add(c, h2, "y2", 2);
    conn_hold_done(c, h2);
    conn_hold_add(c, h1, "x2", 2);
    conn_hold_done(c, h1);
    ck_assert_uint_eq(c->nholds, 0);
    s = take(c);
    ck_assert_str_eq(s, "Ax1x2By1y2C");
    free(s);
    ck_assert_int_eq(o1 + o2, 0);
    conn_close(c);
    server_free(srv);
}
END_TEST

START_TEST(test_hold_large)
{
    struct server    *srv = new_server(1000);
    struct conn      *c = conn_new(&srv->workers[0], -1);
    size_t            big = 3 * CONN_OUT_CHUNK + 123, n;
    char             *data = malloc(big), *s;
    struct out_chunk *h;
    int               o = 0;

    ck_assert_ptr_nonnull(data);
    memset(data, 'v', big);
    h = conn_out_hold(c, &o, gone_flag);
    conn_out_add(c, "END", 3);
    conn_hold_add(c, h, "VALUE k 0 1\r\n", 13);
    conn_hold_add(c, h, data, big);
    conn_hold_done(c, h);
    s = conn_out_take(c, &n);
    ck_assert_uint_eq(n, 13 + big + 3);
    ck_assert(memcmp(s, "VALUE k 0 1\r\n", 13) == 0);
    ck_assert(memcmp(s + 13, data, big) == 0);
    ck_assert(memcmp(s + 13 + big, "END", 3) == 0);
    free(s);
    free(data);
    conn_close(c);
    server_free(srv);
}
END_TEST

START_TEST(test_hold_gone)
{
    struct server    *srv = new_server(1000);
    struct conn      *c = conn_new(&srv->workers[0], -1);
    int               o1 = 0, o2 = 0;
    struct out_chunk *h2;

    conn_out_hold(c, &o1, gone_flag);
    h2 = conn_out_hold(c, &o2, gone_flag);
    conn_hold_add(c, h2, "x", 1);
    conn_hold_done(c, h2);
    conn_close(c);
    /* Only the unfinished hold's owner hears about it, once. */
    ck_assert_int_eq(o1, 1);
    ck_assert_int_eq(o2, 0);
    server_free(srv);
}
END_TEST

/* A listening socket on 127.0.0.1 playing a peer; its "host:port". */
static int
fake_owner(char *addr, size_t len)
{
    struct sockaddr_in sa;
    socklen_t          sl = sizeof(sa);
    int                fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(fd, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    snprintf(addr, len, "127.0.0.1:%d", ntohs(sa.sin_port));
    return fd;
}

/* Pump the worker until the peer can be accepted (5 s at most). */
static int
accept_pumping(struct worker *w, int lfd)
{
    double deadline = now_s() + 5.0;

    ck_assert_int_eq(evutil_make_socket_nonblocking(lfd), 0);
    for (;;) {
        int fd = accept(lfd, NULL, NULL);

        if (fd >= 0) {
            return fd;
        }
        ck_assert_msg(now_s() < deadline, "no upstream connection");
        event_base_loop(w->base, EVLOOP_NONBLOCK);
    }
}

/* Read from the peer side into buf until `want` is a substring
 * (pumping); buf holds what was read. */
static void
peer_recv(struct worker *w, int fd, const char *want, char *buf, size_t cap)
{
    size_t len = 0;
    double deadline = now_s() + 5.0;

    evutil_make_socket_nonblocking(fd);
    buf[0] = '\0';
    while (strstr(buf, want) == NULL) {
        ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);

        if (n > 0) {
            len += (size_t)n;
            buf[len] = '\0';
        }
        ck_assert_msg(now_s() < deadline, "peer did not get %s (got %s)", want, buf);
        event_base_loop(w->base, EVLOOP_NONBLOCK);
    }
}

/* Read from the peer side until `want` is a substring (pumping). */
static void
peer_expect(struct worker *w, int fd, const char *want)
{
    char buf[4096];

    peer_recv(w, fd, want, buf, sizeof(buf));
}

/* Read from the peer side until want came: it must be all that came. */
static void
peer_got(struct worker *w, int fd, const char *want)
{
    char buf[4096];

    peer_recv(w, fd, want, buf, sizeof(buf));
    ck_assert_str_eq(buf, want);
}

/* Pump the worker for about secs: the peer must get nothing meanwhile. */
static void
peer_quiet(struct worker *w, int fd, double secs)
{
    double  until = now_s() + secs;
    char    buf[256];
    ssize_t n;

    while (now_s() < until) {
        event_base_loop(w->base, EVLOOP_NONBLOCK);
    }
    n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    buf[n > 0 ? (size_t)n : 0] = '\0';
    ck_assert_str_eq(buf, "");
}

/* Pump until the connection's queue flattens to text containing want
 * with no hold outstanding; returns that text. */
static char *
reply_pumping(struct worker *w, struct conn *c, double secs)
{
    double deadline = now_s() + secs;

    while (c->nholds > 0 && now_s() < deadline) {
        event_base_loop(w->base, EVLOOP_NONBLOCK);
    }
    return take(c);
}

static void
send_str(int fd, const char *s)
{
    ck_assert_int_eq(send(fd, s, strlen(s), MSG_NOSIGNAL), (ssize_t)strlen(s));
}

START_TEST(test_forward_relay)
{
    struct server *srv = new_server(2000);
    struct worker *w = &srv->workers[0];
    struct conn   *c = conn_new(w, -1);
    char           addr[64], *s;
    struct iovec   iov = { "get k\r\n", 7 };
    int            lfd = fake_owner(addr, sizeof(addr)), pfd;

    conn_out_add(c, "before\r\n", 8);
    ck_assert_int_eq(forward_request(c, addr, 7, FWD_GET_WHOLE, &iov, 1, true), 0);
    conn_out_add(c, "after\r\n", 7);
    pfd = accept_pumping(w, lfd);
    peer_expect(w, pfd, "epoch 7\r\nget k\r\n");
    send_str(pfd, "OK\r\nVALUE k 3 2\r\nhi\r\nEND\r\n");
    s = reply_pumping(w, c, 5.0);
    ck_assert_str_eq(s, "before\r\nVALUE k 3 2\r\nhi\r\nEND\r\nafter\r\n");
    free(s);
    conn_close(c);
    close(pfd);
    close(lfd);
    server_free(srv);
}
END_TEST

/* A client of a one-worker server and up to two fake owners (struct
 * fields -1 until used). */
struct owners {
    struct server *srv;
    struct worker *w;
    struct conn   *c;
    char           a1[64], a2[64];
    int            l1, l2, p1, p2;
};

static void
owners_open(struct owners *t, int timeout_ms)
{
    t->srv = new_server(timeout_ms);
    t->w = &t->srv->workers[0];
    t->c = conn_new(t->w, -1);
    t->l1 = fake_owner(t->a1, sizeof(t->a1));
    t->l2 = fake_owner(t->a2, sizeof(t->a2));
    t->p1 = t->p2 = -1;
}

static void
owners_close(struct owners *t)
{
    int *fds[] = { &t->p1, &t->p2, &t->l1, &t->l2 };
    int  i;

    if (t->c != NULL) {
        conn_close(t->c);
    }
    for (i = 0; i < 4; i++) {
        if (*fds[i] >= 0) {
            close(*fds[i]);
        }
    }
    server_free(t->srv);
}

/* Relay iov (its line: want) to the first owner, which answers MOVED to
 * the second; pump until the second has it. */
static void
moved_to_second(struct owners *t, const struct iovec *iov, const char *want)
{
    char moved[128];

    ck_assert_int_eq(forward_request(t->c, t->a1, 3, FWD_LINE, iov, 1, true), 0);
    t->p1 = accept_pumping(t->w, t->l1);
    peer_expect(t->w, t->p1, want);
    snprintf(moved, sizeof(moved), "OK\r\nSERVER_ERROR MOVED 4 %s\r\n", t->a2);
    send_str(t->p1, moved);
    t->p2 = accept_pumping(t->w, t->l2);
    peer_expect(t->w, t->p2, want);
}

/* Pump until c's replies are in; they must be want. */
static void
reply_is(struct worker *w, struct conn *c, const char *want)
{
    char *s = reply_pumping(w, c, 5.0);

    ck_assert_str_eq(s, want);
    free(s);
}

START_TEST(test_forward_moved)
{
    struct owners t;
    struct iovec  iov = { "incr n 1\r\n", 10 };

    owners_open(&t, 2000);
    moved_to_second(&t, &iov, "incr n 1\r\n");
    send_str(t.p2, "OK\r\n42\r\n");
    reply_is(t.w, t.c, "42\r\n");
    owners_close(&t);
}
END_TEST

START_TEST(test_forward_timeout)
{
    struct server *srv = new_server(200);
    struct worker *w = &srv->workers[0];
    struct conn   *c = conn_new(w, -1);
    char           addr[64], *s;
    struct iovec   iov = { "delete k\r\n", 10 };
    int            lfd = fake_owner(addr, sizeof(addr)), pfd;
    double         t0 = now_s();

    ck_assert_int_eq(forward_request(c, addr, 1, FWD_LINE, &iov, 1, true), 0);
    ck_assert_int_eq(forward_request(c, addr, 1, FWD_LINE, &iov, 1, true), 0);
    pfd = accept_pumping(w, lfd);
    s = reply_pumping(w, c, 5.0);
    /* Both in flight fail together, within about the timeout. */
    ck_assert_str_eq(s, "SERVER_ERROR forward timeout\r\nSERVER_ERROR forward timeout\r\n");
    ck_assert(now_s() - t0 < 2.0);
    free(s);
    conn_close(c);
    close(pfd);
    close(lfd);
    server_free(srv);
}
END_TEST

START_TEST(test_forward_refused)
{
    struct server *srv = new_server(1000);
    struct worker *w = &srv->workers[0];
    struct conn   *c = conn_new(w, -1);
    char           addr[64], *s;
    struct iovec   iov = { "touch k 10\r\n", 12 };
    int            lfd = fake_owner(addr, sizeof(addr));

    close(lfd); /* nobody listens there now */
    ck_assert_int_eq(forward_request(c, addr, 1, FWD_LINE, &iov, 1, true), 0);
    s = reply_pumping(w, c, 5.0);
    ck_assert_str_eq(s, "SERVER_ERROR forward failed\r\n");
    free(s);
    conn_close(c);
    server_free(srv);
}
END_TEST

START_TEST(test_forward_client_gone)
{
    struct server *srv = new_server(2000);
    struct worker *w = &srv->workers[0];
    struct conn   *c = conn_new(w, -1), *c2;
    char           addr[64], *s;
    struct iovec   iov = { "get k\r\n", 7 };
    int            lfd = fake_owner(addr, sizeof(addr)), pfd;

    ck_assert_int_eq(forward_request(c, addr, 1, FWD_GET_SPLICE, &iov, 1, true), 0);
    pfd = accept_pumping(w, lfd);
    peer_expect(w, pfd, "get k\r\n");
    conn_close(c); /* the reply must be read and dropped */
    c2 = conn_new(w, -1);
    ck_assert_int_eq(forward_request(c2, addr, 1, FWD_LINE, &iov, 1, true), 0);
    send_str(pfd, "OK\r\nVALUE k 0 1\r\nx\r\nEND\r\nSTORED\r\n");
    s = reply_pumping(w, c2, 5.0);
    ck_assert_str_eq(s, "STORED\r\n");
    free(s);
    conn_close(c2);
    close(pfd);
    close(lfd);
    server_free(srv);
}
END_TEST

/*
 * A connection's order across retries (server/fwd_order.c), against fake
 * owners: a request answered TRYAGAIN or MOVED is retried alone, what its
 * connection sent after it waits until it is done, then goes in order.
 */

static const struct iovec inc_a = { "incr a 1\r\n", 10 }, inc_b = { "incr b 1\r\n", 10 };

/* a, then b (with or without a reply), to the first owner: both are
 * answered TRYAGAIN; a alone is sent again. */
static void
both_fenced(struct owners *t, bool b_reply)
{
    ck_assert_int_eq(forward_request(t->c, t->a1, 1, FWD_LINE, &inc_a, 1, true), 0);
    ck_assert_int_eq(forward_request(t->c, t->a1, 1, FWD_LINE, &inc_b, 1, b_reply), 0);
    t->p1 = accept_pumping(t->w, t->l1);
    peer_expect(t->w, t->p1, "incr a 1\r\nincr b 1\r\n");
    send_str(t->p1, "OK\r\nSERVER_ERROR TRYAGAIN 1\r\nSERVER_ERROR TRYAGAIN 1\r\n");
    peer_got(t->w, t->p1, "incr a 1\r\n");
}

START_TEST(test_order_tryagain)
{
    struct owners t;
    struct iovec  inc_c = { "incr c 1\r\n", 10 };

    owners_open(&t, 2000);
    both_fenced(&t, true);
    /* A new request in the episode waits too, behind b. */
    ck_assert_int_eq(forward_request(t.c, t.a1, 1, FWD_LINE, &inc_c, 1, true), 0);
    ck_assert(forward_conn_busy(t.c));
    peer_quiet(t.w, t.p1, 0.1);
    /* a done: b and c are released together, in order. */
    send_str(t.p1, "1\r\n");
    peer_got(t.w, t.p1, "incr b 1\r\nincr c 1\r\n");
    send_str(t.p1, "2\r\n3\r\n");
    reply_is(t.w, t.c, "1\r\n2\r\n3\r\n");
    ck_assert(!forward_conn_busy(t.c));
    owners_close(&t);
}
END_TEST

START_TEST(test_order_moved)
{
    struct owners t;

    owners_open(&t, 2000);
    moved_to_second(&t, &inc_a, "incr a 1\r\n");
    /* b, to the first owner, must not overtake a at the second. */
    ck_assert_int_eq(forward_request(t.c, t.a1, 3, FWD_LINE, &inc_b, 1, true), 0);
    peer_quiet(t.w, t.p1, 0.1);
    send_str(t.p2, "OK\r\n1\r\n");
    peer_got(t.w, t.p1, "incr b 1\r\n");
    send_str(t.p1, "2\r\n");
    reply_is(t.w, t.c, "1\r\n2\r\n");
    owners_close(&t);
}
END_TEST

START_TEST(test_order_conn_closed)
{
    struct owners t;

    owners_open(&t, 2000);
    both_fenced(&t, false);
    /* The client goes: what it held still goes, in order (a noreply
     * write is applied), the replies dropped. */
    conn_close(t.c);
    send_str(t.p1, "1\r\n");
    peer_got(t.w, t.p1, "incr b 1\r\n");
    send_str(t.p1, "2\r\n");
    /* The upstream still answers in order for another client. */
    t.c = conn_new(t.w, -1);
    ck_assert_int_eq(forward_request(t.c, t.a1, 1, FWD_LINE, &inc_a, 1, true), 0);
    peer_expect(t.w, t.p1, "incr a 1\r\n");
    send_str(t.p1, "3\r\n");
    reply_is(t.w, t.c, "3\r\n");
    owners_close(&t);
}
END_TEST

/* The fwd_order suite: a connection's order across retries. */
Suite *
fwd_order_suite(void)
{
    Suite *s = suite_create("fwd_order");
    TCase *tc = tcase_create("order");

    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_order_tryagain);
    tcase_add_test(tc, test_order_moved);
    tcase_add_test(tc, test_order_conn_closed);
    suite_add_tcase(s, tc);
    return s;
}

Suite *
forward_suite(void)
{
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("holds");

    tcase_add_test(tc, test_hold_order);
    tcase_add_test(tc, test_hold_large);
    tcase_add_test(tc, test_hold_gone);
    suite_add_tcase(s, tc);
    tc = tcase_create("upstream");
    tcase_set_timeout(tc, 20);
    tcase_add_test(tc, test_forward_relay);
    tcase_add_test(tc, test_forward_moved);
    tcase_add_test(tc, test_forward_timeout);
    tcase_add_test(tc, test_forward_refused);
    tcase_add_test(tc, test_forward_client_gone);
    suite_add_tcase(s, tc);
    return s;
}
