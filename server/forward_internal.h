/*
 * forward_internal: what the three files of the forwarding module share
 * (forward.c: requests, retries and replies; upstream.c: the connections
 * to peers; fwd_order.c: a client connection's order). Not an API: only
 * those three include it.
 */
#ifndef SERVER_FORWARD_INTERNAL_H
#define SERVER_FORWARD_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "ring/ring.h"
#include "server/forward.h"

struct fwd_up;
struct fwd_order;

/* One request in flight on an upstream (pooled per worker). */
struct fwd_req {
    /* On one list at a time: its upstream's queue, the worker's waiting
     * list or pool, or its order's held list. */
    TAILQ_ENTRY(fwd_req) link;
    struct fwd_worker *fw;
    enum fwd_kind      kind;
    struct conn       *c;    /* the client (NULL: none, or it closed) */
    struct out_chunk  *hold; /* its hold on c, NULL with c */
    fwd_call_fn        fn;   /* FWD_CALL */
    void              *fn_arg;
    struct evbuffer   *again;    /* the request bytes, for retries */
    uint64_t           epoch;    /* declared by a new upstream */
    int64_t            deadline; /* monotonic ms: this send's reply is due */
    int64_t            give_up;  /* monotonic ms: no TRYAGAIN retry after it */
    bool               moved;    /* retried once after MOVED already */
    uint32_t           tries;    /* TRYAGAIN retries so far */
    struct fwd_up     *retry_up; /* waiting to be re-sent there */
    struct event      *retry_ev;
    bool               relayed;                /* some of its reply is in the hold */
    uint8_t            quiet;                  /* FWD_META: FWD_MQ_* dropped */
    char               alt[RING_ADDR_MAX + 1]; /* a get: the next owner to try when
                                                * this one refuses or resets ("") */
    struct fwd_order *ord;                     /* its client connection's order (or NULL) */
    uint64_t          seq;                     /* its place in that order */
    bool              ahead;                   /* on ord's ahead list: later ones wait for it */
    TAILQ_ENTRY(fwd_req) alink;                /* ord's ahead list */
    struct fwd_up *held_up;                    /* held on ord: where it goes when released */
    bool           challenge;                  /* FWD_HELLO `rc_peer`: its reply is the NONCE */
};

TAILQ_HEAD(fwd_req_list, fwd_req);

/* A worker's forwarding state: its upstreams, by address (a linear
 * table: a few peers), and its requests not on an upstream. */
struct fwd_worker {
    struct worker      *w;
    struct fwd_up     **ups;
    uint32_t            n, cap;
    struct fwd_req_list waiting;  /* requests backing off after TRYAGAIN */
    struct event       *flush_ev; /* made active by a send: runs after the
                                   * loop iteration's other callbacks */
    bool                flush_armed;
    struct fwd_req_list req_pool; /* free requests */
    uint32_t            nreq_pool;
    bool                closing; /* forward_worker_free runs: release nothing */
};

/* The worker's upstream timeout (ms): its setting, or the default. */
int fw_timeout_ms(const struct fwd_worker *fw);

/* Arm timer for r's deadline, at once if it passed; r NULL: stop it. */
void fw_arm(struct event *timer, const struct fwd_req *r);

/* A zeroed request from fw's pool (or the heap); NULL on ENOMEM. */
struct fwd_req *req_new(struct fwd_worker *fw);

/* Free a request (its hold, if any, was finished or dropped): it leaves
 * its connection's order, then goes back to its worker's pool. */
void req_free(struct fwd_req *r);

/* A request failed (timeout, lost or refused connection): a get goes to
 * its next owner if it has one; otherwise the client sees SERVER_ERROR
 * <why>, a multi-get part is a miss, a callback gets NULL. Consumes r. */
void req_fail(struct fwd_req *r, const char *why, enum fwd_err err);

/* The read callback of an upstream's bufferevent (arg: the fwd_up):
 * complete every request whose reply is in (forward.c). */
void up_read_cb(struct bufferevent *bev, void *arg);

#endif /* SERVER_FORWARD_INTERNAL_H */
