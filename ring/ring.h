/*
 * ring: placement contract v1 (docs/PLACEMENT.md). Memberships, the ring of
 * points built from one, primary lookup, the preference list of R distinct
 * nodes, and the diff of two rings. Pure: no I/O, no locks, and no
 * allocation on the lookup path. The node and the client both call this;
 * neither re-implements placement.
 */
#ifndef RING_RING_H
#define RING_RING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RING_ID_MAX     64  /* bytes in a node id */
#define RING_ADDR_MAX   255 /* bytes in a node address */
#define RING_ZONE_MAX   64  /* bytes in a zone name */
#define RING_WEIGHT_MAX 1000
#define RING_VNODES_MAX 65535
#define RING_NODES_MAX  65535 /* a node index fits in 16 bits */
/* The most replicas a membership may ask for: every owner list (ring_arc,
 * the node's routes, the client's) holds this many. */
#define RING_R_MAX          8
#define RING_LINE_MAX       1024       /* longest line of a *.members file */
#define RING_VNODES_DEFAULT 320        /* chosen by measurement: docs/vnodes.md */
#define RING_POINTS_MAX     (1u << 26) /* sum of weight*vnodes ring_build takes */

/* Error codes (negative returns). */
#define RING_OK     0
#define RING_EPARSE (-1) /* bad membership text; see the error message */
#define RING_ENOMEM (-2)
#define RING_EINVAL (-3) /* bad argument or membership content */
#define RING_ENOENT (-4) /* no such node */

/* One node of a membership. */
struct ring_node {
    char     id[RING_ID_MAX + 1];     /* NUL-terminated, [A-Za-z0-9._:-]{1,64} */
    char     addr[RING_ADDR_MAX + 1]; /* host:port or [v6]:port */
    char     zone[RING_ZONE_MAX + 1]; /* "" when the node has no zone */
    uint32_t weight;                  /* 1..1000 */
};

/* One epoch of the cluster. Owned by whoever created it. */
struct ring_members {
    uint64_t          epoch;     /* 0 = no membership yet */
    uint32_t          vnodes;    /* points per unit of weight, 1..65535 */
    uint32_t          replicas;  /* R, 1..RING_R_MAX */
    uint32_t          n_nodes;   /* entries used in nodes[] */
    uint32_t          cap_nodes; /* entries allocated in nodes[] */
    struct ring_node *nodes;     /* in the order given; ids unique */
};

/* The built ring: flat arrays sorted in ring order. Opaque. */
struct ring;

/* Point-hash function; production rings use XXH3_64bits, seed 0. */
typedef uint64_t (*ring_hash_fn)(const void *data, size_t len);

/* XXH3_64bits(data, len), seed 0: the key hash of the contract. */
uint64_t ring_hash(const void *data, size_t len);

/* XXH3_64bits with a seed. Not placement: a keyed digest for the code
 * that must not link xxHash itself (the node's peer authentication). */
uint64_t ring_hash_seeded(const void *data, size_t len, uint64_t seed);

/*
 * Membership
 */

/* Allocate an empty membership (epoch 0, vnodes RING_VNODES_DEFAULT,
 * replicas 1). Free with ring_members_free. NULL on ENOMEM. */
struct ring_members *ring_members_new(void);
void                 ring_members_free(struct ring_members *m);

/* Deep copy; NULL on ENOMEM. */
struct ring_members *ring_members_dup(const struct ring_members *m);

/*
 * Parse the text form. `name` is used in messages ("name:line: reason").
 * On success *out owns a new membership and RING_OK is returned. On failure
 * returns RING_EPARSE (or RING_ENOMEM) and writes one line into err. Never
 * crashes on any input, including embedded NULs.
 */
int ring_members_parse(const char *text, size_t len, const char *name, struct ring_members **out,
                       char *err, size_t errlen);

/* Print the text form into buf (NUL-terminated). Returns the length it
 * needs (excluding the NUL), like snprintf; parse(format(m)) == m. */
size_t ring_members_format(const struct ring_members *m, char *buf, size_t size);

/* Validate content (ids, weights, vnodes, replicas, unique ids); RING_OK or
 * RING_EINVAL with a reason in err. parse() already calls this. */
int ring_members_validate(const struct ring_members *m, char *err, size_t errlen);

/* Add a node (validated); RING_EINVAL on a duplicate or bad field. */
int ring_members_add(struct ring_members *m, const char *id, const char *addr, uint32_t weight,
                     const char *zone);

/* Remove a node by id; RING_ENOENT when it is not there. */
int ring_members_remove(struct ring_members *m, const char *id);

/* Index of the node with this id, or -1. */
int ring_members_find(const struct ring_members *m, const char *id);

/*
 * The ring
 */

/* Build the ring of a membership in one batch. The ring keeps its own copy
 * of what it needs (it does not point into m). NULL on ENOMEM or an invalid
 * membership. */
struct ring *ring_build(const struct ring_members *m);
void         ring_free(struct ring *r);

/* The membership the ring was built from (owned by the ring). */
const struct ring_members *ring_members(const struct ring *r);

uint32_t ring_n_points(const struct ring *r);

/* Index (into ring_members(r)->nodes) of the primary for a key hash. */
uint32_t ring_primary(const struct ring *r, uint64_t hash);

/* Preference list for a key hash: up to `want` node indexes, primary
 * first, written into out[]; returns how many were written
 * (min(want, n_nodes)). No allocation. */
uint32_t ring_locate(const struct ring *r, uint64_t hash, uint32_t want, uint32_t *out);

/* Rank (0-based, in ring order) of the point that owns a key hash. */
uint32_t ring_point_rank(const struct ring *r, uint64_t hash);

/* Point at rank `rank`: its position, owner node index and vnode index. */
void ring_point(const struct ring *r, uint32_t rank, uint64_t *pos, uint32_t *node,
                uint32_t *vnode);

/* Exact share of the keyspace whose primary is each node, from arc
 * lengths; share[] has ring_members(r)->n_nodes entries and sums to 1. */
void ring_shares(const struct ring *r, double *share);

/* The arcs of the keyspace whose preference list holds node `node` (an
 * index into ring_members(r)->nodes) among its first `replicas` owners
 * (what ring_locate returns with want = replicas; replicas above 64 count
 * as 64): fn(lo, hi, arg) is called for each, in ring order from the arc
 * ending at the lowest position. An arc covers key hashes in (lo, hi]
 * clockwise, as in ring_diff: from the previous distinct point position to
 * a point's position; when every point sits at one position, there is one
 * arc, the whole circle, with lo == hi. Adjacent arcs are not merged.
 * Returns the number of fn calls (0 for a node out of range or replicas
 * 0). No allocation. */
uint32_t ring_owned_arcs(const struct ring *r, uint32_t node, uint32_t replicas,
                         void (*fn)(uint64_t lo, uint64_t hi, void *arg), void *arg);

/* Bytes the ring retains (arrays and struct), for the benchmark. */
size_t ring_bytes(const struct ring *r);

/*
 * Diff of two rings: the arcs of the keyspace whose preference list (at the
 * given R of each ring) changes. An arc covers key hashes in (lo, hi]
 * clockwise; lo == hi means the whole circle. Lists hold node ids.
 */
struct ring_arc {
    uint64_t lo; /* exclusive */
    uint64_t hi; /* inclusive */
    uint32_t n_old, n_new;
    bool     changed;               /* the lists differ (always, from ring_diff) */
    uint32_t old_nodes[RING_R_MAX]; /* indexes into the old membership */
    uint32_t new_nodes[RING_R_MAX]; /* indexes into the new membership */
};

struct ring_diff {
    uint32_t         n_arcs;
    struct ring_arc *arcs;          /* in clockwise order */
    double           primary_moved; /* fraction of keyspace whose primary changes */
    double           list_moved;    /* fraction whose preference list changes */
};

/* Compute the diff; the caller frees it with ring_diff_free. NULL on
 * ENOMEM. */
struct ring_diff *ring_diff(const struct ring *from, const struct ring *to);
/* The same, with the arcs whose lists do not change as well (changed
 * false): the whole circle, for a transition that must refill an owner
 * that kept its place but lost its data (a recovering node). */
struct ring_diff *ring_diff_all(const struct ring *from, const struct ring *to);
void              ring_diff_free(struct ring_diff *d);

#endif /* RING_RING_H */
