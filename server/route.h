/*
 * route: the cluster decision for a keyed request, made once (docs/cluster.md
 * "Routing"), and the pipeline a request then follows: serve it here, relay
 * it to its owner for a plain memcached client, or answer MOVED/TRYAGAIN;
 * for a write served here, the key lock, the replication plan and the held
 * reply. The command code (server/proto_text.c) parses, asks this module,
 * touches the store and replies; it knows nothing of rings, owners,
 * replicas or upstreams.
 */
#ifndef SERVER_ROUTE_H
#define SERVER_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

/* A client's request at a cluster node with no active membership (never
 * joined, or its state directory was lost): keyed requests and flush_all. */
#define NO_MEMBERSHIP_REPLY                                              \
    "SERVER_ERROR no membership (this node is not serving: not joined, " \
    "or its state was lost; see ringctl status)"

struct conn;
struct cluster_view;
struct store_item;
struct token;

/* What to do with a keyed request. */
enum route_do {
    ROUTE_SERVE = 0,   /* serve it here */
    ROUTE_FORWARD,     /* a plain client: relay it to `target` (see docs/cluster.md) */
    ROUTE_TRYAGAIN,    /* fenced, stalled or recovering: SERVER_ERROR TRYAGAIN <epoch> */
    ROUTE_MOVED,       /* a declared client: SERVER_ERROR MOVED <epoch> <addr of target> */
    ROUTE_REFUSE,      /* a cluster node with no active membership (not joined yet, or
                        * its state directory was lost): it cannot know what it owns,
                        * so it serves nothing (SERVER_ERROR no membership) */
    ROUTE_UNAVAILABLE, /* a write with an owner (`target`) seen down that the store has
                        * not declared failed: SERVER_ERROR UNAVAILABLE, at once */
};

/*
 * One decision and what it was made from. Each owner look-up for a request
 * counts in the worker's `route_lookups` stat. The owners are looked up once
 * (ring_locate) and carried with the request through the store and the
 * replication; a storage command whose data block arrives in a later
 * callback re-decides from the same owners unless a new view was
 * published in between (route_update_ready).
 */
struct route {
    enum route_do action;
    bool          write;
    bool          replicate; /* SERVE of a write with R >= 2: this node is
                              * the key's acting primary and sends post-images
                              * to the other owners before it replies */
    uint32_t target;         /* FORWARD, MOVED, TRYAGAIN: a node index of view */
    uint32_t n_owners;       /* owners[]: the preference list, primary first;
                              * 0 without a membership */
    uint32_t                   owners[RING_R_MAX];
    uint64_t                   hash;
    uint64_t                   view_gen; /* generation of view */
    const struct cluster_view *view;     /* NULL: not in a cluster; valid until the
                                          * event callback that decided returns */
};

/*
 * The decision on view v (not NULL) for a key hash: no membership, or this
 * node serves the key: SERVE (a node in cluster mode without a membership
 * is refused before this, by the connection's route). In order: a stalled node or one behind its
 * peers serves nothing (TRYAGAIN); fenced ranges answer TRYAGAIN; a
 * recovering node (restarted empty) serves none of its own keys (a read
 * may go to a live replica); a write with an owner seen down fails
 * (UNAVAILABLE) unless the pending transition declares that owner failed,
 * and goes to the first owner not declared failed (the acting primary);
 * reads go to any owner that is not importing the arc, else the first one
 * not seen down. Otherwise MOVED for a declared connection, FORWARD for a
 * plain one. Pure.
 */
void route_decide(const struct cluster_view *v, uint64_t hash, bool write, bool declared,
                  struct route *rt);

/*
 * Route a keyed command given as tokens t[0..nfwd) (delete, incr/decr,
 * touch: the line without noreply): true when this node serves it (rt
 * filled), else it was answered (MOVED, TRYAGAIN) or relayed to the owner
 * with a hold on c.
 */
bool route_line(struct conn *c, uint64_t hash, const struct token *t, int nfwd, struct route *rt);

/* route_line for a meta command (mg, md, ma, me; the line without q):
 * relayed as FWD_META, the replies quiet (FWD_MQ_*) dropped. mg is routed
 * like a write (to the key's acting primary): the win token of a key is
 * decided in one place. */
bool route_meta(struct conn *c, uint64_t hash, const struct token *t, int nfwd, unsigned quiet,
                struct route *rt);

/* route_update for ms (meta: relayed as FWD_META with quiet). */
enum route_do route_update_meta(struct conn *c, uint64_t hash, const struct token *t, int nfwd,
                                size_t vlen, bool meta, unsigned quiet);

/*
 * Route a storage command (tokens t[0..nfwd), data block of vlen bytes
 * plus "\r\n" next in the stream): SERVE (the caller reads the block into
 * an item; c->route holds the decision), TRYAGAIN/MOVED (answered: the
 * caller swallows the block), or FORWARD (the line and the block, read
 * in, go to the owner; the stream is already set to read it).
 */
enum route_do route_update(struct conn *c, uint64_t hash, const struct token *t, int nfwd,
                           size_t vlen);

/*
 * The data block of a storage command served here is in: true to store it
 * (c->route still holds), false when a fence or a commit came in between
 * (TRYAGAIN was answered).
 */
bool route_update_ready(struct conn *c);

/* Keys of a multi-get whose decisions route_get keeps without the heap,
 * and keys of a gat whose routes (its replication plans) it keeps so. */
#define ROUTE_GET_KEYS 64
#define ROUTE_GAT_KEYS 4

/*
 * A multi-get's decisions: route_get decides each key once, in line
 * order, and route_get_key takes them in the same order while the get
 * runs on in the callback that decided. Kept by the caller (on its
 * stack); route_get_done frees what route_get allocated.
 */
struct route_get {
    uint32_t next;      /* the key route_get_key takes next */
    uint32_t next_here; /* the gat's route it takes next */
    uint8_t *where;     /* per key: served here, or the part it was relayed
                         * in; NULL: every key so far is served here */
    struct route *here; /* a gat: the routes of its keys served here, in
                         * line order; NULL for a get */
    uint64_t *hash;     /* per key: its hash, so no key is hashed twice;
                         * NULL without a cluster view or past
                         * ROUTE_GET_KEYS keys */
    uint8_t      fixed[ROUTE_GET_KEYS];
    uint64_t     fixed_hash[ROUTE_GET_KEYS];
    struct route fixed_here[ROUTE_GAT_KEYS];
};

/*
 * The cluster half of get/gets/gat/gats over the nkeys keys of [p, end)
 * (each checked by the caller): one key not served here and not relayable
 * answers the whole get (MOVED, TRYAGAIN); a plain client's remote keys
 * are relayed, one request per owner (cmd, and exp for gat, start each
 * line); a replicated gat holds its reply. Each key's owners are looked
 * up once, and the decisions are kept in g. True when the caller serves
 * the local keys (route_get_key for each), false when the reply is whole.
 * Either way the caller ends with route_get_done(g).
 */
bool route_get(struct conn *c, struct route_get *g, const char *cmd, size_t ncmd,
               const struct token *exp, const char *p, const char *end, size_t nkeys, bool touch);

/* Free what route_get kept in g. */
void route_get_done(struct route_get *g);

/* One key of a get being served. */
enum route_key {
    ROUTE_KEY_SERVE = 0, /* serve it (rt filled for gat) */
    ROUTE_KEY_RELAYED,   /* an owner answers it (route_get relayed it): skip */
    ROUTE_KEY_MISS,      /* not served here any more: a miss, never a stale hit */
};

/*
 * The next key of a get being served, k (rt is filled for a gat; *hash
 * gets the key's hash for the store when it is served here): with g (the
 * get has not paused since route_get decided it), route_get's decision and
 * hash stand, and the key is neither looked up nor hashed again; with g
 * NULL (the get paused on a full output queue and resumed in a later
 * callback), the key is hashed and decided again.
 */
enum route_key route_get_key(struct conn *c, struct route_get *g, const struct token *k, bool touch,
                             struct route *rt, uint64_t *hash);

/* A gat's key was touched under rt, between route_write_begin and this:
 * it is the item (the caller's reference) or NULL for a miss. Replicates
 * its new expiry when the gat's reply is held; releases the key lock. */
void route_gat_key(struct conn *c, const struct route *rt, struct store_item *it);
/* The gat's END is queued: close its held reply, if any. */
void route_gat_end(struct conn *c);

/*
 * Around the local write of a request served under rt: begin takes the
 * key's lock when the write replicates (so the post-image sent is this
 * write's or a later one's). end: reply (len bytes with "\r\n") is the
 * success reply, sent to the client once every other owner acknowledged
 * the key's post-image (or a tombstone carrying tomb_cas, the CAS of what
 * was deleted), or at once without replication; NULL when the write
 * changed nothing and the caller replies itself. end releases the lock.
 */
void route_write_begin(const struct route *rt);
void route_write_end(struct conn *c, const struct route *rt, const char *key, size_t nkey,
                     uint64_t tomb_cas, const char *reply, size_t len);

/* route_write_end for a write that linked the caller's item it (a set,
 * add, replace or cas that returned STORE_STORED, the caller still holding
 * its reference): it is the key's post-image, so nothing is looked up
 * again. Key lock held, as route_write_end; reply is not NULL. */
void route_write_end_item(struct conn *c, const struct route *rt, struct store_item *it,
                          const char *reply, size_t len);

/* Does this node hold a membership a replica write can be checked
 * against: an active epoch, or a pending one it imports? A node with
 * neither (it lost its state directory, or was never a member) must
 * refuse replica writes rather than drop them with OK. */
bool route_has_membership(const struct conn *c);

/* What a replica write (rc_set, rc_del) of a key may do here. */
enum route_image {
    ROUTE_IMAGE_OK = 0,      /* apply it */
    ROUTE_IMAGE_NOT_OWNER,   /* this node neither owns nor imports the key */
    ROUTE_IMAGE_NOT_PRIMARY, /* the sender is not the key's acting primary */
    ROUTE_IMAGE_OLD_EPOCH,   /* sent in an epoch this node has left */
    ROUTE_IMAGE_AHEAD,       /* sent in an epoch above this node's (it is behind) */
};

/*
 * May the image of hash that sender (a node id) sent in its active epoch
 * be applied here (docs/cluster.md "Replication", fencing)? This node must
 * own the key in its active epoch or import it for the pending one. An
 * image of the pending epoch (its sender committed first) is taken on that
 * alone; one of the active epoch, or of the epoch before it (this node
 * committed first), only from the key's acting primary in the active
 * epoch: first_acting's choice, or the first owner the pending transition
 * does not declare failed. Anything older or newer is refused. Needs a
 * membership (route_has_membership).
 */
enum route_image route_image_check(const struct conn *c, uint64_t hash, uint64_t epoch,
                                   const char *sender);

#endif /* SERVER_ROUTE_H */
