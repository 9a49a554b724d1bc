/*
 * replicate: primary-forwarded replication (docs/cluster.md "Replication").
 * The key's primary applies a write, then sends its post-image (key, flags,
 * remaining TTL, CAS, value) or a tombstone to the other owners of the
 * active epoch over the worker's upstreams (server/forward.c), as `rc_set`
 * / `rc_del` on connections authenticated with `rc_peer`; the client's
 * reply waits in a hold until every replica acknowledged. Each image names
 * the sender's epoch and node id; replicas take it only from the key's
 * acting primary in an epoch they accept (server/proto_peer.c, route.h
 * route_image_check), and only if it is not older (by CAS) than what they
 * hold or than what they recently removed (a replica tombstone, below).
 */
#ifndef SERVER_REPLICATE_H
#define SERVER_REPLICATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct conn;
struct route;
struct store;
struct store_item;
struct worker;

/* The reply a client gets when a write is applied on the primary but a
 * replica did not acknowledge it in time. */
#define REPLICA_UNAVAILABLE "SERVER_ERROR replica unavailable"

/* Serialize writes of one key between workers on this node, so the state
 * captured after a write is the one that write produced or a later one,
 * and a tombstone carries the CAS of what it deleted. Leaf locks, taken
 * around the store operation and replicate_write / replicate_apply_*. */
void replicate_lock(uint64_t hash);
void replicate_unlock(uint64_t hash);

/*
 * After a local write that changed key, served under route rt (server/
 * route.h: the key's hash, its owners and the view they were found in):
 * send its current state to every other owner of rt: it, when the caller
 * knows it (the item its write linked, a reference the caller keeps), else
 * the state read from the store (a post-image, or a tombstone carrying
 * tomb_cas when it is gone). The client's reply (reply, len bytes
 * with "\r\n") is queued as a hold on c, filled with it once every replica acknowledged, or with
 * REPLICA_UNAVAILABLE if one did not within --forward-timeout (the write stays applied on the
 * primary). noreply: nothing is queued, but failures are still counted. Call with
 * replicate_lock(hash) held.
 */
void replicate_write(struct conn *c, const struct route *rt, const char *key, size_t nkey,
                     struct store_item *it, uint64_t tomb_cas, const char *reply, size_t len,
                     bool noreply);

/*
 * gat/gats on the key's acting primary change the expiry, so each touched
 * key's post-image (the new TTL, the same CAS) goes to the other owners
 * and the whole reply is held until every one acknowledged:
 * replicate_gat_begin queues a hold before the reply (0, or -1 on ENOMEM:
 * nothing was queued), replicate_gat_key sends one touched key (it, the
 * caller's reference, served under rt, with replicate_lock(it->hash) held), and
 * replicate_gat_end, after the END line, closes the reply with a second
 * hold. If a replica fails, everything between the two holds (the
 * VALUEs, END) is replaced by REPLICA_UNAVAILABLE; the new expiry stays on
 * the primary, as with touch. A replicated gat does not pause at the
 * output soft cap (its reply cannot be written before the acks anyway).
 */
int  replicate_gat_begin(struct conn *c);
void replicate_gat_key(struct conn *c, const struct route *rt, struct store_item *it);
void replicate_gat_end(struct conn *c);

/* Free worker w's pool of finished ops (after forward_worker_free). */
void replicate_worker_free(struct worker *w);

/*
 * Replica tombstones. Post-images of one key may arrive out of order, so a
 * replica remembers, for REPLICATE_TOMB_TTL_S seconds (or the ttl given to
 * replicate_tomb_init), the (key hash, CAS) of each key it deleted for an
 * `rc_del` and of each item its store evicted or reclaimed expired; a later
 * post-image of that key with a CAS not above the remembered one is
 * dropped, one with a higher CAS clears it. The acting primary remembers
 * its own deletes too (replicate_write), so a late image from a deposed
 * primary cannot re-create a key there either. The table is fixed:
 * REPLICATE_TOMB_BUCKETS buckets of REPLICATE_TOMB_WAYS tombstones, picked
 * by bits 16..30 of the hash (keys whose hashes differ only in other bits
 * share one), 2 MiB for the process; a record that finds its bucket full
 * replaces the bucket's oldest. So a tombstone lasts its whole ttl unless
 * REPLICATE_TOMB_WAYS later ones land in its bucket first: with uniform
 * hashes and a 10 s ttl, at 1,000 deletes, evictions and expiries a second
 * about 1 tombstone in 200 goes early, at 3,000 a second 1 in 15. Past the
 * bound a replaced tombstone no longer guards its key: the replica behaves
 * as it did without tombstones (a late image re-creates the key).
 */
#define REPLICATE_TOMB_TTL_S   10 /* > FWD_RETRY_TIMEOUTS x the default 1 s forward timeout */
#define REPLICATE_TOMB_BUCKETS 32768
#define REPLICATE_TOMB_WAYS    3

/* Set the tombstone lifetime (seconds, >= 1) and make s report its
 * evictions and expiries to the table (store_set_drop_hook). Idempotent;
 * any thread. The node calls it when a peer connects, with a ttl that
 * covers its forward timeout's retries. */
void replicate_tomb_init(struct store *s, uint32_t ttl_s);

/* Who sent an image, as a tombstone remembers it: a tag (1..255) of the
 * sender's epoch and node id (0 is this store's own eviction or expiry).
 * Two senders or epochs share a tag with odds of about 1 in 255. */
uint8_t replicate_origin(uint64_t epoch, const char *sender);

/* replicate_apply_put's answer for an image dropped under a tombstone of
 * another origin (not known to be older than what removed the key). */
#define REPLICATE_REMOVED 1

/* Replica side of `rc_set` from origin (replicate_origin of the image's
 * epoch and sender): store it (from store_alloc, filled) with the
 * primary's cas unless the key holds a newer CAS (0: the replica's state
 * is newer) or, when absent, has a tombstone with a CAS >= cas. Under a
 * tombstone of the same origin (that sender's later delete overtook the
 * image) 0; under one of another origin REPLICATE_REMOVED, with the
 * tombstone's CAS in *removed_cas (may be NULL): nothing is stored, and the
 * write must not count as replicated. Takes the key lock. The caller keeps
 * its reference. Else 0, or a negative store error. */
int replicate_apply_put(struct store *s, struct store_item *it, uint64_t cas, uint8_t origin,
                        uint64_t *removed_cas);

/* Replica side of `rc_del` from origin: delete the key unless it holds a
 * CAS newer than cas, and remember the tombstone (hash, cas, origin).
 * Takes the key lock. */
void replicate_apply_del(struct store *s, const char *key, size_t nkey, uint64_t hash, uint64_t cas,
                         uint8_t origin);

#endif /* SERVER_REPLICATE_H */
