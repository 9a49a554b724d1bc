/*
 * handoff: the source side of the copy of moving arcs between nodes
 * (docs/cluster.md, COPY and FENCE). A source runs one stream per
 * destination: a walk of the arcs, then the dirty keys, as batches of
 * post-images and tombstones with a window of unacknowledged batches and a
 * byte rate limit. The destination side, which checks and imports what a
 * peer sends, is server/handoff_in.h. Everything runs on the cluster
 * thread's event_base (server/cport.c).
 */
#ifndef SERVER_HANDOFF_H
#define SERVER_HANDOFF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"
#include "ring/ring.h"

struct cluster;
struct event_base;
struct store;
struct handoff;
struct server;
struct throttle_pub;

#define HANDOFF_BATCH_RECORDS 256
#define HANDOFF_BATCH_BYTES   (256u << 10) /* key + value bytes a batch */

/* Called once when a fence finished (err NULL) or failed. */
typedef void (*handoff_done_fn)(void *arg, const char *err);

/* Create / free the handoff of a node. base is the cluster thread's;
 * window (--handoff-window) is how many batches a stream sends ahead of
 * the destination's acks, which bounds what a copy holds in flight (and
 * buffers, on both sides) to window * HANDOFF_BATCH_BYTES per stream. */
struct handoff *handoff_new(struct cluster *cl, struct store *s, struct event_base *base,
                            uint32_t window);
void            handoff_free(struct handoff *h);

/* The adaptive throttle (server/throttle.h, docs/cluster.md "The adaptive
 * throttle"): on, the copy's rate follows the p99 of srv's client requests
 * (a timer on the handoff's event_base reads the workers' histograms every
 * THROTTLE_TICK_MS), capped by StartCopy's rate; off, it is that rate.
 * floor is the rate it never cuts under (bytes/s). pub (owned by the
 * caller, outliving h) gets the controller's figures. Before the cluster
 * thread runs; 0 or -1 (out of memory). */
int handoff_throttle(struct handoff *h, struct server *srv, bool on, uint64_t floor,
                     struct throttle_pub *pub);

/* PREPARE, as a source: start dirty tracking of the arcs it sources (a
 * copy of them, so the cluster may drop its own). Idempotent. 0 or -1. */
int handoff_prepare(struct handoff *h, char *err, size_t errlen);

/* COPY: open one stream per destination and start (or re-rate) them;
 * rate 0 = unlimited. Idempotent. 0 or -1. */
int handoff_start_copy(struct handoff *h, uint64_t rate_bytes_per_s, bool paused, char *err,
                       size_t errlen);

/* FENCE, after the fence view is published: drain the dirty set to zero
 * and wait for the last ack of every stream, then call fn (maybe at once).
 * A failed stream fails the fence. */
void handoff_fence(struct handoff *h, handoff_done_fn fn, void *arg);

/* Forget a fence waiter (its connection closed) without calling it. */
void handoff_fence_cancel(struct handoff *h);

/* COMMIT or ABORT: close the streams, stop dirty tracking. */
void handoff_stop(struct handoff *h);

/* Transfers' status into out[max]; returns how many there are. */
size_t handoff_status(struct handoff *h, struct transfer_status *out, size_t max);

#endif /* SERVER_HANDOFF_H */
