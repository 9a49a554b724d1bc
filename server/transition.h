/*
 * transition: the node's side of a transition (docs/cluster.md): what
 * PREPARE, COPY, FENCE, COMMIT and ABORT do on this node around the cluster
 * state change (purges, the handoff, the background CLEANUP), and the
 * orphan count for Status. The cluster port (server/admin.c) decodes the
 * requests and sends the replies; every call runs on the cluster thread.
 * Each returns 0, or -1 with the reply's error text in err.
 */
#ifndef SERVER_TRANSITION_H
#define SERVER_TRANSITION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

struct cluster;
struct cluster_prep;
struct event_base;
struct handoff;
struct store;
struct transition;

/* Called once when a fence's drain finished (err NULL) or failed. */
typedef void (*transition_done_fn)(void *arg, const char *err);

/* Create the phase logic of a node over its cluster, store and handoff;
 * base is the cluster thread's (the CLEANUP timer). NULL: out of memory. */
struct transition *transition_new(struct cluster *cl, struct store *s, struct handoff *ho,
                                  struct event_base *base);
/* Free it (after the cluster thread stopped). */
void transition_free(struct transition *t);

/* The node starts serving with a pending transition that survived a
 * restart: a source tracks its changes again (logged on failure). */
void transition_resume(struct transition *t);

/* PREPARE: accept the request p (cluster_prepare_failed; the caller keeps
 * p and what it points to), purge leftovers of the arcs to import, start
 * dirty tracking as a source. A repeat of the same PREPARE only checks the
 * tracking. */
int transition_prepare(struct transition *t, const struct cluster_prep *p, char *err,
                       size_t errlen);

/* COPY: enter the copying phase and start (or re-rate) the streams;
 * rate 0 = unlimited. */
int transition_start_copy(struct transition *t, const uint8_t *token, size_t token_len,
                          uint64_t rate_bytes_per_s, bool paused, char *err, size_t errlen);

/*
 * FENCE, in two steps. transition_fence checks the token and that no fence
 * is in progress, then persists and publishes the fence view (after it, no
 * write to a fenced arc is in flight). The caller then stops reading the
 * admin's connection and calls transition_fence_wait, which calls done
 * once the handoff drained (maybe at once, from inside the call).
 */
int  transition_fence(struct transition *t, const uint8_t *token, size_t token_len, char *err,
                      size_t errlen);
void transition_fence_wait(struct transition *t, transition_done_fn done, void *arg);
/* The fence's waiter went away: done is never called. */
void transition_fence_cancel(struct transition *t);

/* COMMIT: activate next (or the pending membership when NULL; the caller
 * keeps next), close the streams, start CLEANUP (the ranges sent to each
 * new owner are kept until it answers: transition_set_peer_holds). A repeated commit only
 * succeeds. */
int transition_commit(struct transition *t, const struct ring_members *next, const uint8_t *token,
                      size_t token_len, char *err, size_t errlen);

/*
 * The store's active membership, as the node's store watch read it
 * (server/storewatch.c). If it is the epoch this node has pending, and
 * the admin's Commit does not come within a grace (1 s), the node commits
 * it itself: the admin died after the store's commit, and the store is the
 * authority (every source was fenced before that commit). The epoch this
 * node has pending under another membership was aborted: it is dropped
 * (transition_drop_aborted). If it is above anything this node has then,
 * behind(arg, epoch) is called: the node serves
 * nothing until a transition includes it again.
 */
void transition_store_active(struct transition *t, const struct ring_members *m,
                             void (*behind)(void *arg, uint64_t epoch), void *arg);

/*
 * How CLEANUP learns whether a new owner holds what this node sent it:
 * fn(arg, id, since_ms) is 1 when node id answered a heartbeat after
 * since_ms (the commit) with something current, -1 when it answered that
 * it holds nothing (it restarted since the copy: recovering, or without a
 * membership), 0 when it has not answered since. Until 1, the ranges sent
 * to it are kept (not purged), and this node is their holder in the next
 * transition (`ringctl repair` refills the owner from here). Without fn
 * every owner counts as holding.
 */
void transition_set_peer_holds(struct transition *t,
                               int (*fn)(void *arg, const char *id, uint64_t since_ms), void *arg);

/* The caller's side of an abort the node decides by itself
 * (transition_drop_aborted): end_streams(arg) as for transition_abort. */
void transition_set_end_streams(struct transition *t, void (*end_streams)(void *arg), void *arg);

/*
 * A peer or the store runs `epoch`, of identity `id` (health_members_id),
 * as committed. If this node has that epoch pending under another
 * identity, its transition was aborted and it missed the Abort: abort it
 * here (as transition_abort) and return true; the caller then treats the
 * node as behind `epoch`. Else false.
 */
bool transition_drop_aborted(struct transition *t, uint64_t epoch, uint64_t id);

/*
 * ABORT of the pending transition (epoch 0: whichever it is); without one
 * it is a no-op. Stops the streams, then calls end_streams(arg), where the
 * caller fails a waiting fence (its done is no longer called) and ends the
 * incoming streams, then drops what was imported and forgets the pending
 * epoch.
 */
int transition_abort(struct transition *t, const uint8_t *token, size_t token_len, uint64_t epoch,
                     void (*end_streams)(void *arg), void *arg, char *err, size_t errlen);

/*
 * Orphans for Status: items this node holds that it neither owns in the
 * active epoch nor imports. Counting reads every item (about 0.2 s per
 * million), and this thread answers the peers' heartbeats, so a count runs
 * in slices of a few ms between the thread's other events, one count
 * answers every request that came while it ran, and a recent figure
 * answers at once.
 */

/* Called with the figure of a count that was running or started when the
 * request came. */
typedef void (*transition_orphans_fn)(void *arg, uint64_t orphans);

/* The figure to answer with now, if one will do: the last count's, if it
 * ended less than 2 s ago (on a node where a count takes longer than 1 s,
 * less than twice its duration ago) and no prepare, commit or abort came
 * since it started; one over 1 s old is counted again in the background
 * for the next request. Else false: wait for a count
 * (transition_orphans_wait). */
bool transition_orphans_now(struct transition *t, uint64_t *orphans);

/* Queue fn(arg, orphans) for the end of the count in progress, or of one
 * started now if none runs. A change of the state the count depends on
 * (prepare, commit, abort) starts the count over. Never calls fn from
 * inside the call. -1: out of memory. */
int transition_orphans_wait(struct transition *t, transition_orphans_fn fn, void *arg);

/* Forget every queued call with this arg (its requester went away). */
void transition_orphans_cancel(struct transition *t, void *arg);

/* The figure of the last complete count, of any age (0 before the first):
 * for replies other than Status, which do not wait for a count. */
uint64_t transition_orphans_last(const struct transition *t);

#endif /* SERVER_TRANSITION_H */
