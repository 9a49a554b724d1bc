/*
 * upstream: a worker's connections to its peers' client ports, for the
 * forwarding module (forward.c): connecting and the hello (`rc_peer`
 * challenge, `epoch`), writing requests in one batch per loop iteration,
 * the queue of requests awaiting replies in order, and its timeout.
 */
#ifndef SERVER_UPSTREAM_H
#define SERVER_UPSTREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

#include "server/forward_internal.h"

/*
 * A connection to one peer's client port. A worker keeps two per peer:
 * one for relayed client requests and one for calls (replication). They
 * must not share one: the peer answers a connection's requests in order,
 * and a relayed write it is the primary of holds its reply until our
 * replica ack, so a post-image it sends us queued behind it there, and
 * ours queued behind a write we relayed the other way, would wait for
 * each other until the forward timeout (two primaries relaying to each
 * other, as the survivors of a failover do).
 */
struct fwd_up {
    struct fwd_worker  *fw;
    char                addr[RING_ADDR_MAX + 1];
    bool                calls; /* carries forward_call requests only */
    struct bufferevent *bev;   /* NULL: not connected */
    bool                tls;   /* bev is OpenSSL's: it writes its own output */
    bool                connected;
    bool                dirty; /* has output the flush has not seen */
    struct event       *timer;
    struct fwd_req_list queue; /* written, awaiting replies, in order */
    /* Between `rc_peer` and its NONCE reply the requests' bytes wait in
     * held: they may go only after the proof (up_challenge). */
    bool             authing;
    struct evbuffer *held;
};

/* Set up fw's upstream machinery (its flush event). 0, or -1 on ENOMEM. */
int up_init(struct fwd_worker *fw);

/* Close and free every upstream of fw, failing what is in flight on
 * each, and the flush event (forward_worker_free). */
void up_free_all(struct fwd_worker *fw);

/* The upstream to addr for relayed requests or for calls, created
 * (unconnected) if new; NULL on ENOMEM or an address too long. */
struct fwd_up *up_find(struct fwd_worker *fw, const char *addr, bool calls);

/* Write a request on the upstream (connecting first if needed, with
 * r->epoch) and queue it; the bytes go out at the end of the loop
 * iteration. On failure r is failed at once. 0 or -1. */
int up_send(struct fwd_up *up, struct fwd_req *r, const struct iovec *iov, int iovcnt);

/* up_send from the request's kept bytes (r->again). */
void up_resend(struct fwd_up *up, struct fwd_req *r);

/* Unlink the head request (the one the next reply belongs to). */
struct fwd_req *up_pop(struct fwd_up *up);

/* Arm the upstream's timer for its head's deadline (or stop it). */
void up_arm(struct fwd_up *up);

/* Close the upstream and fail everything in flight on it (reset, not
 * closed, after a timeout). The upstream stays, to reconnect. */
void up_fail(struct fwd_up *up, const char *why, enum fwd_err err);

/*
 * The head request r is the `rc_peer` hello and line (llen bytes, at the
 * front of the input) its NONCE reply: answer the proof and release the
 * requests held meanwhile. 1, or -1 (the upstream must fail) when the
 * peer refused the challenge.
 */
int up_challenge(struct fwd_up *up, struct fwd_req *r, const char *line, size_t llen);

#endif /* SERVER_UPSTREAM_H */
