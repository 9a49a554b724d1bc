/*
 * health: failure detection (docs/cluster.md, "Node failure"). Heartbeats
 * on the cluster port to every other member of the active epoch (Ping /
 * Pong frames on a PEER connection), per-peer state (up / suspect / down,
 * last seen), a stall detector for this process (a paused node must not
 * serve before it re-learnt the cluster's epoch), and the answer to a
 * peer's Ping. Runs on the cluster thread's event_base (server/cport.c)
 * plus one tiny ticker thread.
 */
#ifndef SERVER_HEALTH_H
#define SERVER_HEALTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

struct bufferevent;
struct cluster;
struct event_base;
struct frame;
struct health;

#define HEALTH_PING_MS    250  /* a Ping to every peer this often */
#define HEALTH_SUSPECT_MS 1000 /* no Pong for this long: suspect */
#define HEALTH_DOWN_MS    2000 /* no Pong for this long (or refused): down */

/* Values of ringcache.PeerHealth. */
enum peer_health {
    PEER_UNKNOWN = 0,
    PEER_UP = 1,
    PEER_SUSPECT = 2,
    PEER_DOWN = 3,
};

/* One peer as reported in NodeStatus.peers. */
struct health_peer {
    char             id[RING_ID_MAX + 1];
    enum peer_health state;
    uint64_t         last_seen_ms; /* ms since the last Pong, 0 = never */
    uint64_t         epoch;
    bool             holds_nothing; /* its last Pong said so */
    char             error[128];
};

/* Create the failure detector of cl on the cluster thread's base. NULL on
 * ENOMEM. Nothing runs until health_start. */
struct health *health_new(struct cluster *cl, struct event_base *base);

/* Start the heartbeat timer and the ticker thread. 0 or -1 (logged). Call
 * before the cluster thread runs its base. */
int health_start(struct health *h);

/* Stop the ticker thread, close the peer connections, free. NULL is fine.
 * The cluster thread must no longer run the base. */
void health_free(struct health *h);

/* A Ping arrived on an accepted PEER connection: learn what it tells (a
 * higher epoch) and answer Pong on bev. 0, or -1 for a malformed Ping
 * (the caller closes that connection). Cluster thread. */
int health_on_ping(struct health *h, struct bufferevent *bev, const struct frame *f);

/* Peer states into out[max]; returns how many peers there are. */
size_t health_status(struct health *h, struct health_peer *out, size_t max);

/* The membership store's active epoch is `epoch`: above both of this
 * node's epochs, the node is behind (as when a peer says so). Cluster
 * thread. */
void health_learn_epoch(struct health *h, uint64_t epoch);

/*
 * The identity of an epoch: XXH3 of its membership's text form, never 0
 * (0: no membership). An aborted epoch's number is used again by the next
 * transition, so the number alone does not say which membership it is.
 */
uint64_t health_members_id(const struct ring_members *m);

/*
 * Called when a peer runs, as its active epoch, the number this node has
 * pending but under another identity: the store committed another
 * membership under that number, so the pending transition was aborted
 * (this node missed the Abort). The function drops it and returns true;
 * the node is then behind that epoch. Cluster thread; before health_start.
 */
typedef bool (*health_aborted_fn)(void *arg, uint64_t epoch, uint64_t id);
void health_set_aborted(struct health *h, health_aborted_fn fn, void *arg);

/*
 * A peer's claim of an epoch more than this beyond the highest this node
 * knows (its active and pending epochs, and what the membership store
 * said) is logged and ignored: epochs are minted one at a time by the
 * store, so such a claim is a bug or a forgery, and adopting it would
 * make this node serve nothing (behind) until a transition. The store's
 * own epoch is always believed.
 */
#define HEALTH_EPOCH_MARGIN_DEFAULT 1000

/* Set that margin (0: the default). Before health_start. */
void health_set_epoch_margin(struct health *h, uint64_t margin);

/* Does member id hold something current, by its last Pong: 1 if a Pong
 * came after since_ms (util_coarse_ms) and did not say holds_nothing, -1
 * if it said so, 0 if none came since (or id is no peer). Cluster thread. */
int health_peer_holds(struct health *h, const char *id, uint64_t since_ms);

/* Name of a state for logs and ringctl. */
const char *health_state_name(enum peer_health s);

#endif /* SERVER_HEALTH_H */
