/*
 * fwd_order: the order of one client connection's relayed requests
 * across retries (docs/guarantees.md "Per connection"). While a request
 * backs off (TRYAGAIN) or is redirected (MOVED, a refused connection),
 * the later ones of its connection are held behind it, then released in
 * order. Part of the forwarding module (forward.c, upstream.c).
 */
#ifndef SERVER_FWD_ORDER_H
#define SERVER_FWD_ORDER_H

#include <stdbool.h>

#include "server/forward_internal.h"

/*
 * A new request r of client connection c, about to be sent to `to`:
 * it joins c's order (made on c's first relayed request; without memory
 * r is relayed unordered) and takes the next place in it. true: an
 * episode is on and r may not go yet, so it is held (consumed: it may
 * even be failed before this returns). false: send r now.
 */
bool ord_admit(struct fwd_worker *fw, struct conn *c, struct fwd_req *r, struct fwd_up *to);

/*
 * r was not executed (answered TRYAGAIN or MOVED, or its owner refused
 * the connection) and is about to be sent again to `to`, later or at
 * once. true: an earlier request of its connection is still ahead or
 * held, so r is held behind it instead (consumed). false: r is its
 * connection's earliest (or has no order); it goes on, and what comes
 * later waits for it.
 */
bool ord_defer(struct fwd_req *r, struct fwd_up *to);

/* r is done (req_free): it leaves its order, and what its connection
 * held behind it may go now. No-op for a request without an order. */
void ord_leave(struct fwd_req *r);

/* Wake c (its event, as a filled hold does) once none of its relayed
 * requests is in flight any more (forward_conn_busy turns false): a
 * flush_all waits so for the requests before it (server/flush.c). */
void ord_wait(struct conn *c);

#endif /* SERVER_FWD_ORDER_H */
