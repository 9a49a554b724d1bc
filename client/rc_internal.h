/*
 * rc_internal: what the files of libringcache share and nothing outside
 * it sees (never installed; the public API is ringcache.h). The handle,
 * its nodes and ring snapshots (view.c), one request on one node and the
 * redirect loop around keyed requests (node_io.c), the keyed operations
 * (ringcache.c), the multi-key read engine and the multi-get (mget.c) and
 * the meta operations (meta.c). Names here never start with ringcache_:
 * the installed library exports exactly those.
 */
#ifndef CLIENT_RC_INTERNAL_H
#define CLIENT_RC_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "client/mcproto.h"
#include "client/pool.h"
#include "client/ringcache.h"
#include "client/route.h"
#include "ring/ring.h"

#define HOPS_MAX        3    /* MOVED redirects followed per operation */
#define POLL_DEFAULT_MS 1000 /* default epoch poll interval */

/* A node as the handle knows it. Nodes live until ringcache_free (a ring
 * snapshot in use may still point at a node an epoch dropped), so the
 * strings below can be handed out. */
struct rc_node {
    struct pool_node pool;
    char             id[RING_ID_MAX + 1]; /* "" for a node known only by a MOVED address */
    char             addr[RING_ADDR_MAX + 1];
    bool             no_ext;  /* atomic: answered ERROR to `epoch`/`config` */
    int              meta;    /* atomic: 1 answered MN to `mn`, -1 ERROR, 0 not asked */
    int64_t          meta_at; /* atomic: when meta was set to -1 (monotonic ms) */
};

/* One epoch's routing: immutable once published, freed with its last
 * reference. */
struct rc_view {
    unsigned         refs; /* atomic */
    uint64_t         epoch;
    struct ring     *ring;
    uint32_t         replicas; /* preference list length, <= RING_R_MAX */
    size_t           n_nodes;
    struct rc_node **nodes; /* ring index -> node (the handle owns the nodes) */
};

struct ringcache {
    pthread_mutex_t          view_lock; /* guards view (read + take a reference) */
    struct rc_view          *view;
    pthread_mutex_t          refresh_lock; /* one adoption at a time; guards the node table */
    struct rc_node         **all;          /* every node ever used, until free */
    size_t                   n_all;
    size_t                   cap_all;
    struct ringcache_options opt;
    struct pool_config       cfg;
    int                      poll_ms;   /* atomic; 0 = no poll */
    int64_t                  next_poll; /* atomic; monotonic ms */
    unsigned                 poll_rr;   /* atomic; round robin of polled nodes */
    bool                     confirmed; /* atomic: a node reported a non-zero epoch */
};

/* What a reply handler says after each reply unit. */
#define STEP_MORE 0 /* keep reading */
#define STEP_DONE 1 /* the reply is complete */

/* A reply handler: consumes one parsed unit, returns STEP_MORE, STEP_DONE
 * or RINGCACHE_EPROTO (a reply this request cannot get). */
typedef int (*reply_fn)(void *ctx, const struct mcr_reply *r);

/* A request's reply handling: the handler, its context, how to clear the
 * context before another attempt (may be NULL), and where the handler
 * leaves its code (node_request zeroes it before each attempt). */
struct op {
    reply_fn fn;
    void (*reset)(void *ctx);
    void *ctx;
    int  *result;
};

/* A MOVED or TRYAGAIN reply (kind 0: none). */
struct redirect {
    enum mcr_kind kind;
    uint64_t      epoch;
    char          addr[MCR_ADDR_MAX + 1];
};

/* ringcache.c: write a one-line reason into the caller's err buffer, if
 * it gave one. */
void rc_set_err(char *err, size_t errlen, const char *fmt, const char *arg);

/*
 * view.c: ring snapshots, the node table, epoch learning
 */

/* Take a reference on the current view (takes view_lock briefly); drop it
 * with view_put (the last reference frees the view; NULL is allowed). */
struct rc_view *view_get(struct ringcache *rc);
void            view_put(struct rc_view *v);

/* Node i of the current view, or NULL (rc NULL too). The node outlives
 * the view. */
struct rc_node *view_current_node(const struct ringcache *rc, size_t i);

/* The epoch a connection declares for requests routed with v: only once
 * some node has reported an epoch, so plain memcached never sees it. */
uint64_t view_declare_epoch(struct ringcache *rc, const struct rc_view *v);

/* A node reported epoch e: from now on connections declare theirs. */
void view_saw_epoch(struct ringcache *rc, uint64_t e);

/* Make m the handle's membership if it is the first one or its epoch is
 * strictly higher than the current one. 1 adopted, 0 not newer, or an
 * error (err set). Caller holds refresh_lock (or is creating the handle). */
int view_adopt(struct ringcache *rc, const struct ring_members *m, char *err, size_t errlen);

/* Fetch config from node and adopt it when newer: 1 adopted, 0 not newer
 * (or none), or an error. Caller holds refresh_lock (or is creating the
 * handle). */
int view_refresh_from(struct ringcache *rc, struct rc_node *node, char *err, size_t errlen);

/* A node told of epoch `want`, above `had` (the epoch the caller routed
 * with): fetch config from `from`, else from addr (a MOVED target; may be
 * NULL). True when the handle's epoch is now above `had`. Takes
 * refresh_lock. */
bool view_learn(struct ringcache *rc, uint64_t had, uint64_t want, struct rc_node *from,
                const char *addr);

/* The periodic epoch poll, run by the first call that finds it due. */
void view_maybe_poll(struct ringcache *rc);

/*
 * node_io.c: one request on one node, keyed requests with fail-over and
 * redirects
 */

/* Send iov to node rn and feed each reply unit to op->fn until STEP_DONE;
 * declare (non-zero) goes first as `epoch <declare>` on a connection that
 * has not declared it. A MOVED or TRYAGAIN reply ends the request into
 * *rd. *sent: any byte may have reached the node. 0 or an error (the
 * handler's own result travels in its context). */
int node_request(struct ringcache *rc, struct rc_node *rn, uint64_t declare,
                 const struct iovec *iov, int iovcnt, const struct op *op, bool *sent,
                 struct redirect *rd);

/* The reply r to the declaration of epoch e on connection c of node rn:
 * 0, or RINGCACHE_EPROTO for a reply a declaration cannot get. */
int node_declare_ack(struct rc_node *rn, struct pool_conn *c, uint64_t e,
                     const struct mcr_reply *r);

/* The address a MOVED reply names into addr (MCR_ADDR_MAX + 1 bytes; ""
 * when it names none). */
void node_redirect_addr(char *addr, const struct mcr_reply *r);

/* An ERROR or CLIENT_ERROR to an extension command (`epoch`, `config`)
 * marks rn as a plain memcached that is never asked or declared to again. */
void node_saw_plain(struct rc_node *rn, const struct mcr_reply *r);

/* The tail of every reply handler: an error reply ends the request with
 * its RINGCACHE_E code in *result (STEP_DONE); any other unit is one the
 * request cannot get (RINGCACHE_EPROTO). */
int node_reply_error(const struct mcr_reply *r, int *result);

/* A keyed request (key checked) with fail-over down the key's preference
 * list and the epoch rules of ringcache.h for MOVED and TRYAGAIN. */
int node_keyed_request(struct ringcache *rc, const char *key, size_t key_len, bool write,
                       const struct iovec *iov, int iovcnt, const struct op *op);

/* Sleep *backoff ms unless that passes deadline, then double it (up to
 * 512 ms). False when the budget is spent. */
bool node_backoff_wait(int *backoff, int64_t deadline);

/*
 * mget.c: the multi-key read engine under ringcache_mget_cb and
 * ringcache_mg_multi: rounds, keys grouped by first usable owner, every
 * node's request in parallel within the op timeout, fail-over down the
 * preference lists, MOVED and TRYAGAIN. A protocol (struct mget_proto)
 * says what a node's request is and reads its reply.
 */

struct mget; /* one multi-key read (mget.c) */

/* One node's share of a round, as its protocol sees it. */
struct mget_share {
    uint32_t      node; /* index in the round's view (a ringcache_node_id index) */
    const size_t *idx;  /* the keys' indexes, in request order */
    size_t        n;
    size_t        pos; /* the first slot not answered yet: the protocol moves it */
};

/* What a protocol's unit handler says. */
#define MGET_MORE 0 /* keep reading */
#define MGET_DONE 1 /* the share's reply is complete (nothing may follow it) */

struct mget_proto {
    /* 0 when a key may be sent; anything else fails the call with
     * RINGCACHE_EKEY before anything is sent. */
    int (*check)(void *arg, const char *key, size_t len);
    /* The request of share s into buf; with buf NULL, its size. */
    size_t (*format)(void *arg, char *buf, const struct route_key *keys,
                     const struct mget_share *s);
    /* One reply unit of share s (never the declaration's ack): MGET_MORE,
     * MGET_DONE or RINGCACHE_EPROTO (the connection is dropped and the
     * unanswered keys move to their next owner). It reports each key it
     * answers to its caller and calls mget_answered; a key redirected by
     * MOVED or TRYAGAIN is left pending after mget_redirected. r's data
     * block may be NUL-terminated in place (its "\r\n" follows). */
    int (*unit)(void *arg, struct mget *m, struct mget_share *s, const struct route_key *keys,
                struct mcr_reply *r);
    /* Key i got no answer from any node: report status, from no node.
     * status is RINGCACHE_EAUTH when an owner refused the login (the key
     * was not asked of a replica), else RINGCACHE_ENOTFOUND (no owner
     * reachable, or out of redirects): a miss. */
    void (*orphan)(void *arg, size_t i, int status);
};

/* Read n keys with protocol p (keys[i] of key_lens[i] bytes, or C strings
 * when key_lens is NULL): every key is reported exactly once, by p->unit
 * or p->orphan. 0, RINGCACHE_EKEY, RINGCACHE_EINVAL or RINGCACHE_ENOMEM. */
int mget_keys(struct ringcache *rc, const char *const *keys, const size_t *key_lens, size_t n,
              const struct mget_proto *p, void *arg);

/* Key i has been reported: no further round asks for it. */
void mget_answered(struct mget *m, size_t i);

/* Share s got MOVED or TRYAGAIN (r) for keys that stay pending: the round
 * then learns the epoch or backs off, as ringcache.h says. */
void mget_redirected(struct mget *m, const struct mget_share *s, const struct mcr_reply *r);

#endif
