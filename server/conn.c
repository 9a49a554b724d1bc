/*
 * conn: the I/O side of a client connection. conn_event_cb reads once,
 * lets proto_text parse everything buffered, writes every queued reply in
 * one writev, and only reads again when the last read filled the buffer
 * (otherwise epoll tells us), so a request costs one read and one write.
 */
#include "config.h"
#include "server/conn.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <event2/event.h>

#include "server/latency.h"
#include "server/log.h"
#include "server/proto_text.h"
#include "server/stats.h"
#include "server/thread.h"
#include "server/tls.h"

#define CONN_IOV_MAX    64
#define CHUNK_POOL_MAX  64
#define ICHUNK_POOL_MAX 256
#define HOLD_POOL_MAX   256 /* a pipelined batch of replicated writes holds one each */
#define CONN_MAX_ROUNDS 16  /* read/parse rounds per event, for fairness */

/* Create a connection; see conn.h. */
struct conn *
conn_new(struct worker *w, int fd)
{
    struct conn *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        return NULL;
    }
    c->w = w;
    c->fd = fd;
    c->out_cap = w->srv != NULL ? w->srv->settings.max_output_bytes : SETTINGS_MAX_OUTPUT_DEFAULT;
    c->last_active = w->idle_now;
    c->authenticated = w->srv == NULL || w->srv->auth == NULL;
    pthread_mutex_lock(&w->conns_lock);
    c->next = w->conns;
    if (w->conns != NULL) {
        w->conns->prev = c;
    }
    w->conns = c;
    w->nconns++;
    pthread_mutex_unlock(&w->conns_lock);
    return c;
}

/* Register (or change) the events the connection waits for; 0 waits for
 * nothing (a hold will wake it). */
static int
conn_set_events(struct conn *c, short flags)
{
    if (c->ev == NULL || c->ev_flags == flags) {
        return 0;
    }
    event_del(c->ev);
    if (flags == 0) {
        c->ev_flags = 0;
        return 0;
    }
    if (event_assign(c->ev, c->w->base, c->fd, flags | EV_PERSIST, conn_event_cb, c) < 0) {
        return -1;
    }
    if (event_add(c->ev, NULL) < 0) {
        return -1;
    }
    c->ev_flags = flags;
    return 0;
}

/* Create the event (level-triggered read) on the worker's base. */
int
conn_start(struct conn *c)
{
    if (c->w->srv != NULL && c->w->srv->tls != NULL &&
        (c->tls = tls_conn_new(c->w->srv->tls, c->fd)) == NULL) {
        return -1;
    }
    c->ev = event_new(c->w->base, c->fd, EV_READ | EV_PERSIST, conn_event_cb, c);
    if (c->ev == NULL) {
        return -1;
    }
    if (event_add(c->ev, NULL) < 0) {
        return -1;
    }
    c->ev_flags = EV_READ;
    return 0;
}

/* Return a chunk to its pool, or free it; releases an item reference. */
static void
chunk_free(struct conn *c, struct out_chunk *ch)
{
    struct worker *w = c->w;

    if (c->lat_hold == ch) {
        c->lat_hold = NULL; /* a paused get's hold, filled and written */
    }
    if (ch->owner != NULL) {
        /* An unfilled hold dropped with its connection: its filler must
         * forget it. */
        void *owner = ch->owner;

        ch->owner = NULL;
        c->nholds--;
        if (ch->gone != NULL) {
            ch->gone(owner);
        }
    }
    if (ch->it != NULL) {
        store_release(w->srv->store, ch->it);
        ch->it = NULL;
        if (w->nichunk_pool < ICHUNK_POOL_MAX) {
            ch->next = w->ichunk_pool;
            w->ichunk_pool = ch;
            w->nichunk_pool++;
            return;
        }
    } else if (ch->cap == CONN_OUT_CHUNK && w->nchunk_pool < CHUNK_POOL_MAX) {
        ch->next = w->chunk_pool;
        w->chunk_pool = ch;
        w->nchunk_pool++;
        return;
    } else if (ch->cap == CONN_HOLD_INLINE && w->nhold_pool < HOLD_POOL_MAX) {
        ch->next = w->hold_pool;
        w->hold_pool = ch;
        w->nhold_pool++;
        return;
    }
    free(ch);
}

/* Drop every queued chunk. */
void
conn_out_clear(struct conn *c)
{
    struct out_chunk *ch = c->out_head;

    while (ch != NULL) {
        struct out_chunk *next = ch->next;
        chunk_free(c, ch);
        ch = next;
    }
    c->out_head = c->out_tail = NULL;
    c->out_bytes = 0;
}

/* Append a chunk to the queue. */
static void
chunk_link(struct conn *c, struct out_chunk *ch)
{
    ch->next = NULL;
    if (c->out_tail != NULL) {
        c->out_tail->next = ch;
    } else {
        c->out_head = ch;
    }
    c->out_tail = ch;
}

/* A new empty text chunk, not linked; aborts on ENOMEM like any allocator
 * failure on the reply path would otherwise corrupt the stream. */
static struct out_chunk *
chunk_take_text(struct conn *c)
{
    struct worker    *w = c->w;
    struct out_chunk *ch = w->chunk_pool;

    if (ch != NULL) {
        w->chunk_pool = ch->next;
        w->nchunk_pool--;
    } else {
        ch = malloc(sizeof(*ch) + CONN_OUT_CHUNK);
        if (ch == NULL) {
            log_msg(LOG_ERR, "out of memory for replies");
            abort();
        }
        ch->cap = CONN_OUT_CHUNK;
    }
    ch->it = NULL;
    ch->data = ch->buf;
    ch->len = 0;
    ch->off = 0;
    ch->sealed = false;
    ch->owner = NULL;
    ch->gone = NULL;
    ch->ins = NULL;
    return ch;
}

/* A new empty text chunk at the tail. */
static struct out_chunk *
chunk_new_text(struct conn *c)
{
    struct out_chunk *ch = chunk_take_text(c);

    chunk_link(c, ch);
    return ch;
}

/* Room for n contiguous bytes at the tail. */
char *
conn_out_reserve(struct conn *c, size_t n)
{
    struct out_chunk *ch = c->out_tail;

    if (ch == NULL || ch->it != NULL || ch->sealed || ch->cap - ch->len < n) {
        ch = chunk_new_text(c);
    }
    return ch->buf + ch->len;
}

/* Account for n bytes written into the reserved room. */
void
conn_out_commit(struct conn *c, size_t n)
{
    c->out_tail->len += (uint32_t)n;
    c->out_bytes += n;
}

/* Copy text into the queue, filling the tail chunk first. */
void
conn_out_add(struct conn *c, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0) {
        struct out_chunk *ch = c->out_tail;
        size_t            room, n;

        if (ch == NULL || ch->it != NULL || ch->sealed || ch->len == ch->cap) {
            ch = chunk_new_text(c);
        }
        room = ch->cap - ch->len;
        n = len < room ? len : room;
        memcpy(ch->buf + ch->len, p, n);
        ch->len += (uint32_t)n;
        c->out_bytes += n;
        p += n;
        len -= n;
    }
}

/* Queue a reference to an item's bytes. */
void
conn_out_item(struct conn *c, struct store_item *it, const char *p, size_t len)
{
    struct worker    *w = c->w;
    struct out_chunk *ch = w->ichunk_pool;

    if (ch != NULL) {
        w->ichunk_pool = ch->next;
        w->nichunk_pool--;
    } else {
        ch = malloc(sizeof(*ch));
        if (ch == NULL) {
            log_msg(LOG_ERR, "out of memory for replies");
            abort();
        }
        ch->cap = 0;
    }
    ch->it = it;
    ch->data = p;
    ch->len = (uint32_t)len;
    ch->off = 0;
    ch->sealed = false;
    ch->owner = NULL;
    ch->gone = NULL;
    ch->ins = NULL;
    chunk_link(c, ch);
    c->out_bytes += len;
}

/* Queue a hold (from the worker's pool: a pipelined client's replicated
 * writes take and give back one each); see conn.h. */
struct out_chunk *
conn_out_hold(struct conn *c, void *owner, conn_hold_gone_fn gone)
{
    struct worker    *w = c->w;
    struct out_chunk *ch = w->hold_pool;

    if (ch != NULL) {
        w->hold_pool = ch->next;
        w->nhold_pool--;
    } else if ((ch = malloc(sizeof(*ch) + CONN_HOLD_INLINE)) == NULL) {
        log_msg(LOG_ERR, "out of memory for replies");
        abort();
    }
    ch->it = NULL;
    ch->data = ch->buf;
    ch->len = ch->off = 0;
    ch->cap = CONN_HOLD_INLINE;
    ch->sealed = true;
    ch->owner = owner;
    ch->gone = gone;
    ch->ins = ch;
    ch->lat_cmd = LATENCY_NONE;
    chunk_link(c, ch);
    c->nholds++;
    c->lat_hold = ch;
    return ch;
}

/* Room after a hold's insertions: the hold's own small buffer or the
 * last inserted chunk when it has room, else a new sealed text chunk
 * linked after it. */
char *
conn_hold_reserve(struct conn *c, struct out_chunk *h, size_t n)
{
    struct out_chunk *at = h->ins, *ch;

    if (at->it == NULL && at->cap - at->len >= n) {
        return at->buf + at->len;
    }
    ch = chunk_take_text(c);
    ch->next = at->next;
    at->next = ch;
    if (c->out_tail == at) {
        c->out_tail = ch;
    }
    ch->sealed = true;
    h->ins = ch;
    return ch->buf;
}

/* Account for n bytes written into conn_hold_reserve's room. */
void
conn_hold_commit(struct conn *c, struct out_chunk *h, size_t n)
{
    h->ins->len += (uint32_t)n;
    c->out_bytes += n;
}

/* Copy bytes in after a hold's insertions. */
void
conn_hold_add(struct conn *c, struct out_chunk *h, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0) {
        size_t            n = len < CONN_OUT_CHUNK ? len : CONN_OUT_CHUNK;
        char             *dst = conn_hold_reserve(c, h, 1);
        struct out_chunk *at = h->ins;

        if (n > at->cap - at->len) {
            n = at->cap - at->len;
        }
        memcpy(dst, p, n);
        conn_hold_commit(c, h, n);
        p += n;
        len -= n;
    }
}

/* Drop the chunks between two holds; see conn.h. */
void
conn_hold_drop_until(struct conn *c, struct out_chunk *h, struct out_chunk *e)
{
    struct out_chunk *ch = h->next;

    while (ch != NULL && ch != e) {
        struct out_chunk *next = ch->next;

        c->out_bytes -= ch->len - ch->off;
        chunk_free(c, ch);
        ch = next;
    }
    h->next = ch;
    h->ins = h;
    if (ch == NULL) {
        c->out_tail = h;
    }
}

/* A hold is complete: let writes pass it and wake the connection. */
void
conn_hold_done(struct conn *c, struct out_chunk *h)
{
    h->owner = NULL;
    h->gone = NULL;
    c->nholds--;
    latency_hold_done(c, h);
    if (c->ev != NULL) {
        event_active(c->ev, EV_WRITE, 0);
    }
}

/* Flatten the queue (tests). */
char *
conn_out_take(struct conn *c, size_t *len)
{
    struct out_chunk *ch;
    char             *buf;
    size_t            n = 0;

    *len = 0;
    if (c->out_bytes == 0) {
        conn_out_clear(c);
        return NULL;
    }
    buf = malloc(c->out_bytes + 1);
    if (buf == NULL) {
        return NULL;
    }
    for (ch = c->out_head; ch != NULL; ch = ch->next) {
        memcpy(buf + n, ch->data + ch->off, ch->len - ch->off);
        n += ch->len - ch->off;
    }
    buf[n] = '\0';
    *len = n;
    conn_out_clear(c);
    return buf;
}

/* Make sure rbuf exists and has room for at least one more byte past rend:
 * take a pooled buffer, slide unparsed bytes to the front, or grow (only a
 * get line can be this long; proto_text closes other long lines). */
static int
rbuf_make_room(struct conn *c)
{
    struct worker *w = c->w;

    if (c->rbuf == NULL) {
        if (w->nrbuf_pool > 0) {
            c->rbuf = w->rbuf_pool[--w->nrbuf_pool];
        } else {
            c->rbuf = malloc(CONN_RBUF_SIZE);
            if (c->rbuf == NULL) {
                return -1;
            }
        }
        c->rsize = CONN_RBUF_SIZE;
        c->rpos = c->rend = 0;
    }
    if (c->rpos == c->rend && c->pstate != CONN_PS_GET) {
        c->rpos = c->rend = 0;
    }
    if (c->rend < c->rsize) {
        return 0;
    }
    /* A paused get keeps offsets into rbuf, so nothing may move then. */
    if (c->rpos > 0 && c->pstate != CONN_PS_GET) {
        memmove(c->rbuf, c->rbuf + c->rpos, c->rend - c->rpos);
        c->rend -= c->rpos;
        c->rpos = 0;
        return 0;
    }
    if (c->rsize >= CONN_LINE_MAX) {
        return -1;
    }
    {
        char *nb = realloc(c->rbuf, (size_t)c->rsize * 2);
        if (nb == NULL) {
            return -1;
        }
        c->rbuf = nb;
        c->rsize *= 2;
    }
    return 0;
}

/* Pool the read buffer when it holds nothing unparsed. */
void
conn_rbuf_release(struct conn *c)
{
    struct worker *w = c->w;

    if (c->rbuf == NULL || c->rpos != c->rend || c->pstate == CONN_PS_GET) {
        return;
    }
    if (c->rsize == CONN_RBUF_SIZE && w->nrbuf_pool < WORKER_RBUF_POOL) {
        w->rbuf_pool[w->nrbuf_pool++] = c->rbuf;
    } else {
        free(c->rbuf);
    }
    c->rbuf = NULL;
    c->rsize = c->rpos = c->rend = 0;
}

/* Append bytes as input (tests). */
int
conn_feed(struct conn *c, const void *data, size_t len)
{
    const char *p = data;

    while (len > 0) {
        size_t room, n;

        if (rbuf_make_room(c) < 0) {
            return -1;
        }
        room = c->rsize - c->rend;
        n = len < room ? len : room;
        memcpy(c->rbuf + c->rend, p, n);
        c->rend += (uint32_t)n;
        p += n;
        len -= n;
    }
    return 0;
}

/* Close and free; see conn.h. */
void
conn_close(struct conn *c)
{
    struct worker                     *w = c->w;
    const struct worker_tenant *const *t;

    if (c->ev != NULL) {
        event_del(c->ev);
        event_free(c->ev);
    }
    if (c->stall_ev != NULL) {
        event_free(c->stall_ev);
    }
    tls_conn_free(c->tls);
    if (c->fd >= 0) {
        close(c->fd);
    }
    if (c->nread_it != NULL) {
        store_release(w->srv->store, c->nread_it);
    }
    free(c->fwd_buf);
    c->fwd_buf = NULL;
    free(c->meta_set);
    c->meta_set = NULL;
    conn_out_clear(c);
    for (t = worker_tenants; *t != NULL; t++) {
        if ((*t)->conn_closed != NULL) {
            (*t)->conn_closed(c);
        }
    }
    c->pstate = CONN_PS_CMD;
    c->rpos = c->rend;
    conn_rbuf_release(c);
    pthread_mutex_lock(&w->conns_lock);
    if (c->prev != NULL) {
        c->prev->next = c->next;
    } else {
        w->conns = c->next;
    }
    if (c->next != NULL) {
        c->next->prev = c->prev;
    }
    w->nconns--;
    pthread_mutex_unlock(&w->conns_lock);
    log_msg(LOG_DEBUG, "connection %d closed", c->fd);
    free(c);
    if (w->srv != NULL) {
        worker_conn_closed(w);
    }
}

/*
 * The seam between plaintext and TLS (server/tls.h): write from iov,
 * returning the bytes taken, -2 when the socket is full, -1 on an error.
 */
static ssize_t
conn_send(struct conn *c, const struct iovec *iov, int niov)
{
    struct msghdr msg;
    ssize_t       n;

    if (c->tls != NULL) {
        return tls_send(c->tls, iov, niov);
    }
    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = (struct iovec *)iov;
    msg.msg_iovlen = (size_t)niov;
    do {
        n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? -2 : -1;
    }
    return n;
}

/* The other half of the seam: read up to len bytes; bytes read, 0 at the
 * end of the stream, -1 on an error, -2 when it would block. */
static ssize_t
conn_recv(struct conn *c, void *buf, size_t len)
{
    ssize_t n;

    if (c->tls != NULL) {
        return tls_recv(c->tls, buf, len);
    }
    n = read(c->fd, buf, len);
    if (n < 0) {
        return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? -2 : -1;
    }
    return n;
}

/* Input may be waiting where epoll cannot see it: decrypted or undecoded
 * inside the SSL object, or behind a TLS read that had to write first. */
static bool
conn_tls_readable(const struct conn *c)
{
    return c->tls != NULL && (tls_pending(c->tls) || tls_want_write(c->tls));
}

/*
 * Wait for more input: EV_READ (and EV_WRITE when a TLS read must write
 * first), or straight away when TLS already holds some, since the socket
 * will not become readable for bytes that were read from it.
 */
static int
conn_wait_input(struct conn *c)
{
    short flags = c->tls != NULL && tls_want_write(c->tls) ? EV_READ | EV_WRITE : EV_READ;

    if (conn_set_events(c, flags) < 0) {
        return -1;
    }
    if (c->tls != NULL && tls_pending(c->tls)) {
        event_active(c->ev, EV_READ, 0);
    }
    return 0;
}

/*
 * Write queued output with writev until it is all out (0), the socket
 * would block (1), an unfilled hold is next (2) or it fails (-1).
 */
static int
conn_flush(struct conn *c)
{
    struct iovec iov[CONN_IOV_MAX];

    while (c->out_head != NULL) {
        struct out_chunk *ch;
        ssize_t           n;
        int               niov = 0;

        /* Finished holds and empty chunks at the head go first. */
        while ((ch = c->out_head) != NULL && ch->owner == NULL && ch->len == ch->off) {
            c->out_head = ch->next;
            if (c->out_head == NULL) {
                c->out_tail = NULL;
            }
            chunk_free(c, ch);
        }
        if (ch == NULL) {
            break;
        }
        if (ch->owner != NULL) {
            return 2;
        }
        for (; ch != NULL && ch->owner == NULL && niov < CONN_IOV_MAX; ch = ch->next) {
            if (ch->len == ch->off) {
                continue;
            }
            iov[niov].iov_base = (void *)(ch->data + ch->off);
            iov[niov].iov_len = ch->len - ch->off;
            niov++;
        }
        n = conn_send(c, iov, niov);
        if (n == -2) {
            return 1;
        }
        if (n < 0) {
            return -1;
        }
        STATS_ADD(&c->w->stats, bytes_written, n);
        if (n > 0 && c->stall_ev != NULL) {
            evtimer_del(c->stall_ev);
        }
        c->out_bytes -= (size_t)n;
        while ((ch = c->out_head) != NULL && ch->owner == NULL) {
            size_t left = ch->len - ch->off;
            if ((size_t)n < left) {
                ch->off += (uint32_t)n;
                break;
            }
            n -= (ssize_t)left;
            c->out_head = ch->next;
            if (c->out_head == NULL) {
                c->out_tail = NULL;
            }
            chunk_free(c, ch);
        }
    }
    return 0;
}

/*
 * One read (conn_recv): straight into the item when a large data block is
 * pending and nothing is buffered, else into rbuf. Returns bytes read, 0
 * on EOF, -1 on error, -2 when it would block. *filled says the read used
 * all the room it had, or TLS holds more (more may be waiting).
 */
static ssize_t
conn_read(struct conn *c, bool *filled)
{
    ssize_t n;
    size_t  room;

    if (c->pstate == CONN_PS_NREAD && c->rpos == c->rend && c->nread_left >= 4096) {
        room = c->nread_left;
        n = conn_recv(c, c->nread_dst, room);
        if (n > 0) {
            c->nread_dst += n;
            c->nread_left -= (size_t)n;
        }
    } else {
        if (rbuf_make_room(c) < 0) {
            return -1;
        }
        room = c->rsize - c->rend;
        n = conn_recv(c, c->rbuf + c->rend, room);
        if (n > 0) {
            c->rend += (uint32_t)n;
        }
    }
    if (n <= 0) {
        return n;
    }
    STATS_ADD(&c->w->stats, bytes_read, n);
    c->last_active = c->w->idle_now;
    *filled = (size_t)n == room || conn_tls_readable(c);
    return n;
}

/*
 * While the output is blocked: read what the client sends (without
 * parsing it) until the socket is empty, which absorbs pipelined requests
 * beyond what the kernel buffers hold. Returns 0, 1 when CONN_STALL_IN_CAP
 * unparsed bytes are waiting (stop reading), or -1 on a read error.
 */
static int
conn_stall_read(struct conn *c)
{
    bool filled;

    while (!c->eof) {
        ssize_t n;

        if (c->rend - c->rpos >= CONN_STALL_IN_CAP) {
            return 1;
        }
        n = conn_read(c, &filled);
        if (n == -2) {
            return 0;
        }
        if (n == 0) {
            c->eof = true; /* half-closed: still owed its replies */
        } else if (n < 0) {
            return -1;
        }
    }
    return 0;
}

/* The stall deadline passed without a byte written: the client sends but
 * does not read (or both sides wait on each other); hang up. */
static void
conn_stall_cb(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;

    (void)fd;
    (void)what;
    log_msg(LOG_INFO, "connection %d: sends but does not read its replies, closing", c->fd);
    conn_close(c);
}

/* Arm the stall deadline (once per stall; write progress disarms it). */
static int
conn_stall_arm(struct conn *c)
{
    int            ms = c->w->srv->stall_timeout_ms;
    struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

    if (c->stall_ev == NULL) {
        c->stall_ev = evtimer_new(c->w->base, conn_stall_cb, c);
        if (c->stall_ev == NULL) {
            return -1;
        }
    }
    if (evtimer_pending(c->stall_ev, NULL)) {
        return 0;
    }
    return evtimer_add(c->stall_ev, &tv);
}

/* Stop reading; close once the output is written. */
void
conn_shutdown(struct conn *c)
{
    c->close_after_write = true;
    if (c->out_bytes == 0 && c->nholds == 0 && c->pstate != CONN_PS_GET) {
        conn_close(c);
        return;
    }
    if (conn_set_events(c, EV_WRITE) < 0) {
        conn_close(c);
    }
}

static void conn_event_run(int fd, short what, struct conn *c);

/* The connection's event (EV_READ, EV_WRITE, or 0 when a hold was filled):
 * run the state machine with the worker's clock read at most once. */
void
conn_event_cb(int fd, short what, void *arg)
{
    struct conn   *c = arg;
    struct worker *w = c->w; /* c may be closed and freed by the run */

    latency_loop_enter(&w->clock);
    conn_event_run(fd, what, c);
    latency_loop_leave(&w->clock);
}

/* The state machine; see the file comment. */
static void
conn_event_run(int fd, short what, struct conn *c)
{
    /* Woken for writing only (the socket, or a hold that was filled):
     * nothing says input is waiting, so do not try a read first; epoll
     * reports it once EV_READ is registered again. */
    bool filled = (what & EV_READ) != 0 || what == 0 || conn_tls_readable(c);
    int  rounds = 0;

    (void)fd;
    if (c->tls != NULL && !c->tls_ready) {
        switch (tls_handshake(c->tls)) {
        case TLS_HS_DONE:
            /* The client's first request may have come with its last
             * handshake message. */
            c->tls_ready = true;
            filled = true;
            break;
        case TLS_HS_WANT_READ:
            if (conn_set_events(c, EV_READ) < 0) {
                goto close;
            }
            return;
        case TLS_HS_WANT_WRITE:
            if (conn_set_events(c, EV_WRITE) < 0) {
                goto close;
            }
            return;
        case TLS_HS_FAILED:
            goto close;
        }
    }
    for (;;) {
        enum proto_status st = PROTO_MORE;
        ssize_t           n;
        int               r = 0;

        if (!c->close_after_write) {
            st = proto_text_process(c);
            if (st == PROTO_CLOSE) {
                goto close;
            }
            if (st == PROTO_QUIT) {
                c->close_after_write = true;
            }
        } else {
            /* Shutting down: finish a multi-get in flight, nothing new. */
            st = proto_text_drain(c);
        }
        if (c->out_head != NULL) {
            /* Input stops at the soft cap, so only a bug or a huge -I gets
             * here; never hold more than this for one client. */
            if (c->out_bytes > c->out_cap + CONN_OUT_HARD_CAP + c->w->srv->settings.item_size_max) {
                log_msg(LOG_INFO, "connection %d: %zu bytes of replies queued, closing", c->fd,
                        c->out_bytes);
                goto close;
            }
            r = conn_flush(c);
            if (r < 0) {
                goto close;
            }
            if (r == 1) {
                /* Blocked on the client: parse nothing more until it takes
                 * its replies, but keep taking its input (unparsed, up to
                 * CONN_STALL_IN_CAP) so one that never reads is noticed. */
                int full = 0;

                if (!c->close_after_write) {
                    full = conn_stall_read(c);
                    if (full < 0) {
                        goto close;
                    }
                    if (full > 0 && conn_stall_arm(c) < 0) {
                        goto close;
                    }
                }
                if (conn_set_events(c, c->close_after_write || c->eof || full > 0
                                           ? EV_WRITE
                                           : EV_WRITE | EV_READ) < 0) {
                    goto close;
                }
                return;
            }
        }
        if (r == 2 && (st == PROTO_PAUSE || c->close_after_write)) {
            /* Everything writable is out and the rest waits for another
             * node's reply (or too many are outstanding): sleep until a
             * hold is done (conn_hold_done wakes us). */
            if (conn_set_events(c, 0) < 0) {
                goto close;
            }
            return;
        }
        if (st == PROTO_PAUSE) {
            continue;
        }
        if (c->close_after_write) {
            goto close;
        }
        if (!filled || ++rounds > CONN_MAX_ROUNDS) {
            /* Drained (or had our share): wait for epoll to say more came. */
            if (rounds > CONN_MAX_ROUNDS) {
                STATS_ADD(&c->w->stats, conn_yields, 1);
            }
            conn_rbuf_release(c);
            if (conn_wait_input(c) < 0) {
                goto close;
            }
            return;
        }
        if (c->eof) {
            /* Everything it sent is parsed; close once it is answered,
             * forwarded replies included. */
            if (c->nholds == 0) {
                goto close;
            }
            if (conn_set_events(c, 0) < 0) {
                goto close;
            }
            return;
        }
        n = conn_read(c, &filled);
        if (n == -2) {
            conn_rbuf_release(c);
            if (conn_wait_input(c) < 0) {
                goto close;
            }
            return;
        }
        if (n <= 0) {
            goto close;
        }
    }
close:
    conn_close(c);
}

/* Close the connections idle past the timeout; see conn.h. One we owe a
 * reply is busy, not idle: its idle time starts once the reply is out
 * (so a slow reader of a large reply is not closed as soon as it has it).
 * A connection mid data block counts as idle too when nothing more came
 * (memcached only times out a connection between commands). */
int
conn_idle_sweep(struct worker *w, int timeout)
{
    struct conn *c, *next;
    int          n = 0;

    for (c = w->conns; c != NULL; c = next) {
        next = c->next;
        if (c->out_head != NULL || c->nholds > 0 || c->pstate == CONN_PS_GET) {
            c->last_active = w->idle_now;
            continue;
        }
        if (c->fd < 0 || c->peer || c->close_after_write ||
            (uint32_t)(w->idle_now - c->last_active) <= (uint32_t)timeout) {
            continue;
        }
        log_msg(LOG_DEBUG, "connection %d: idle for more than %d s, closing", c->fd, timeout);
        STATS_ADD(&w->stats, idle_kicks, 1);
        conn_close(c);
        n++;
    }
    return n;
}
