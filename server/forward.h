/*
 * forward: a worker's upstream connections to its peers' client ports, used
 * to relay requests of plain memcached clients to the key's owner
 * (docs/cluster.md "Forwarding") and to carry replication post-images
 * (server/replicate.c). Two lazily opened, non-blocking connections per
 * peer address per worker (relayed requests, and calls: a post-image's ack
 * must never queue behind a relayed write's held reply), on the worker's
 * own event_base; requests on each are answered in order, each by a reply
 * that fills a hold in the client connection's output queue
 * (conn_out_hold) or calls a callback. Written in three files: forward.c
 * (requests, retries, replies), upstream.c (the connections) and
 * fwd_order.c (a client connection's order across retries).
 */
#ifndef SERVER_FORWARD_H
#define SERVER_FORWARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct conn;
struct worker;
struct fwd_worker;
struct fwd_req;

/* How a forwarded request's reply is read and relayed. */
enum fwd_kind {
    FWD_LINE = 0,   /* one reply line (storage, delete, incr/decr, touch) */
    FWD_GET_WHOLE,  /* a whole get: VALUEs, END (or one error line), relayed as is */
    FWD_GET_SPLICE, /* part of a multi-get: VALUEs relayed, END dropped;
                     * an error line or a failure relays nothing (misses) */
    FWD_CALL,       /* one reply line handed to a callback (replication) */
    FWD_HELLO,      /* internal: the `epoch`/`rc_peer` lines of a new upstream */
    FWD_META,       /* a meta command: one reply unit (a line, or VA and its block),
                     * the quiet ones (forward_meta) dropped */
};

/* What a relayed meta command's q suppresses (its line went without q, so
 * the owner always answers): FWD_MQ_* of the reply codes dropped. */
#define FWD_MQ_HD 0x1u /* ms, md, ma: success */
#define FWD_MQ_EN 0x2u /* mg: a miss */
#define FWD_MQ_VA 0x4u /* ma with v: success */

/* Why a FWD_CALL request got no reply line. */
enum fwd_err {
    FWD_OK = 0,
    FWD_ETIMEOUT, /* no reply within the timeout (the peer may be hung) */
    FWD_ECONN,    /* connection refused, reset or closed by the peer */
    FWD_EOTHER,   /* no memory, a bad reply, shutting down */
};

/*
 * Callback of a FWD_CALL request: line is the reply line without "\r\n"
 * and len its length, or line is NULL and err says why the request failed.
 * Runs on the worker, from an upstream callback or inside forward_call
 * itself (an immediate failure).
 */
typedef void (*fwd_call_fn)(void *arg, const char *line, size_t len, enum fwd_err err);

/* Upstream timeout when a worker was not given one (ms). */
#define FWD_TIMEOUT_MS_DEFAULT 1000
/* A request answered TRYAGAIN or MOVED is retried for this many timeouts
 * (a fence on a loaded machine can outlast one). */
#define FWD_RETRY_TIMEOUTS 3
/* Holds a client connection may have outstanding before it stops
 * parsing new requests. */
#define FWD_MAX_PER_CONN 64
/* Requests, and their bytes, one client connection may have held behind
 * an earlier one that is retried (forward_read); past either the next is
 * answered SERVER_ERROR. */
#define FWD_HELD_MAX       1024
#define FWD_HELD_BYTES_MAX (16u << 20)

/*
 * Relay a request of client c to the node at addr ("host:port" of its
 * client port): iov is the complete request (command line with "\r\n",
 * then the data block with its "\r\n" for storage commands). With
 * want_reply a hold is queued on c now and filled, in place, with the
 * owner's reply or a SERVER_ERROR; without, the reply is read and dropped
 * (noreply). The upstream declares `epoch <epoch>` so the owner never
 * forwards again; a MOVED reply is retried once at the address it names
 * (then answered SERVER_ERROR TRYAGAIN). The request bytes are copied.
 * c's relayed requests execute in order: while an earlier one is retried
 * (after TRYAGAIN or MOVED, or sent to a get's next owner) this one is
 * held and sent after it, within its own retry deadline.
 * 0, or -1 when nothing could be queued (c got a SERVER_ERROR reply).
 */
int forward_request(struct conn *c, const char *addr, uint64_t epoch, enum fwd_kind kind,
                    const struct iovec *iov, int iovcnt, bool want_reply);

/* forward_request for a meta command (FWD_META) with a hold, dropping the
 * replies in quiet (FWD_MQ_*): errors and the other codes still come. */
int forward_meta(struct conn *c, const char *addr, uint64_t epoch, const struct iovec *iov,
                 int iovcnt, unsigned quiet);

/*
 * forward_request for a get (FWD_GET_WHOLE, FWD_GET_SPLICE) whose keys
 * have a next owner at alt (NULL: none): if addr refuses or resets the
 * connection before any of the reply arrived, the request is sent to alt
 * instead, once, and the client never sees the failure.
 */
int forward_read(struct conn *c, const char *addr, const char *alt, uint64_t epoch,
                 enum fwd_kind kind, const struct iovec *iov, int iovcnt, bool want_reply);

/*
 * Send a request on worker w's call upstream to addr (never shared with
 * relayed requests) and hand its one-line reply to fn(arg, ...). fn is
 * called exactly once, possibly before this returns (immediate failure).
 * The request bytes are copied.
 */
void forward_call(struct worker *w, const char *addr, uint64_t epoch, const struct iovec *iov,
                  int iovcnt, fwd_call_fn fn, void *arg);

/* Close every upstream of worker w, failing what is in flight; frees the
 * worker's forwarding state. On w's thread, or after it stopped. */
void forward_worker_free(struct worker *w);

/* The hold of a request was dropped with its client connection: the reply
 * will be read and discarded. Called by conn.c only. */
void forward_req_gone(void *req);

/* Has client connection c relayed requests still in flight (a noreply
 * write included)? */
bool forward_conn_busy(const struct conn *c);

/* Client connection c closes: what it has held or retrying goes on
 * without it, in order (nothing to do when it relayed nothing). The
 * worker runtime calls it as forward's conn_closed hook (tenants.c). */
void forward_conn_closed(struct conn *c);

#endif /* SERVER_FORWARD_H */
