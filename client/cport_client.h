/*
 * cport_client: ringctl's blocking client of a node's cluster port
 * (docs/cluster.md): connect, Hello with the admin token, then one
 * AdminRequest at a time answered by an AdminReply (or an Error frame, after
 * which the node closes). Every step has a poll()-based deadline. The
 * protobuf types stay inside cport_client.c; callers see the structs here.
 */
#ifndef CLIENT_CPORT_CLIENT_H
#define CLIENT_CPORT_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "proto/frame.h"
#include "ring/ring.h"

#define CPORT_OK       0
#define CPORT_EIO      (-1) /* unreachable, timed out, closed, or a socket error */
#define CPORT_EREFUSED (-2) /* the node said no: an Error frame or ok = false */
#define CPORT_EPROTO   (-3) /* a malformed or unexpected frame from the node */
#define CPORT_ENOMEM   (-4)

#define CPORT_TOKEN_MAX   256        /* admin token bytes (docs/cluster.md) */
#define CPORT_PORT_OFFSET 10000      /* default cluster port = client port + this */
#define CPORT_PAYLOAD_MAX (4u << 20) /* largest frame payload we accept */

/* A node's transition phase, as in ringcache.Phase. */
enum cport_phase {
    CPORT_PHASE_NONE = 0,
    CPORT_PHASE_PREPARED,
    CPORT_PHASE_COPYING,
    CPORT_PHASE_FENCED,
    CPORT_PHASE_COMMITTED,
    CPORT_PHASE_ABORTED
};

/* What the node said in its Hello reply. */
struct cport_hello {
    char     node_id[RING_ID_MAX + 1];
    uint64_t boot_id;
    uint64_t active_epoch;
};

/* What a node's heartbeats see of one peer (ringcache.PeerState). */
enum cport_peer_health {
    CPORT_PEER_UNKNOWN = 0,
    CPORT_PEER_UP,
    CPORT_PEER_SUSPECT,
    CPORT_PEER_DOWN
};
struct cport_peer {
    char                   node_id[RING_ID_MAX + 1];
    enum cport_peer_health state;
    uint64_t               last_seen_ms, epoch;
    bool                   holds_nothing; /* up, but recovering, behind or without membership */
    char                   error[128];
};

/* A node's status (ringcache.NodeStatus). transfers and peers are
 * malloc'd; free with cport_status_clear. */
struct cport_status {
    char                    node_id[RING_ID_MAX + 1];
    uint64_t                boot_id, active_epoch, pending_epoch;
    enum cport_phase        phase;
    uint64_t                curr_items, bytes, limit_maxbytes, evictions;
    uint64_t                items_imported, bytes_imported, orphans, misrouted, fence_held_ms;
    uint32_t                n_transfers;
    struct transfer_status *transfers;
    uint32_t                n_peers;
    struct cport_peer      *peers;
    bool                    recovering;   /* restarted empty: its keys answer TRYAGAIN */
    uint64_t                behind_epoch; /* a peer runs this higher epoch */
};

enum cport_req_kind {
    CPORT_PREPARE,
    CPORT_START_COPY,
    CPORT_FENCE,
    CPORT_COMMIT,
    CPORT_ABORT,
    CPORT_STATUS
};

/* One admin request; fields not used by its kind are ignored. */
struct cport_request {
    enum cport_req_kind        kind;
    const struct ring_members *membership; /* prepare (N+1), commit (may be NULL) */
    const uint8_t             *token;      /* transition token (empty for init's commit) */
    size_t                     token_len;
    uint64_t                   from_epoch;       /* prepare: N */
    uint64_t                   rate_bytes_per_s; /* start copy, 0 = unlimited */
    bool                       paused;           /* start copy: send nothing (ringctl pause) */
    uint32_t                   hold_ms;          /* fence */
    uint64_t                   epoch;            /* abort: N+1 */
    const char *const         *failed_ids;       /* prepare: nodes of N declared failed */
    size_t                     n_failed_ids;
    const char *const         *stale_ids; /* prepare: nodes of N recovering or behind */
    size_t                     n_stale_ids;
};

struct cport_conn;

/*
 * Connect to addr ("host:port" or "[v6]:port": the cluster port itself),
 * send Hello{cluster, token, ADMIN} and read the reply into *hello (may be
 * NULL), all within timeout_ms. On CPORT_OK *out is the connection (close
 * with cport_close); otherwise err says why (an Error frame's message is
 * CPORT_EREFUSED).
 */
int cport_connect(const char *addr, const char *cluster, const uint8_t *token, size_t token_len,
                  int timeout_ms, struct cport_conn **out, struct cport_hello *hello, char *err,
                  size_t errlen);

/*
 * TLS to every cluster port this process connects to from now on (nodes
 * started with --cluster-tls): ctx from tls_client_ctx_new, with the
 * client certificate the nodes require; it must outlive every connection.
 * The node's certificate must name the host of the address dialled unless
 * check_name is false. NULL: plain TCP again. Set it before any
 * connection, from one thread (ringctl does, from its options).
 */
void cport_set_tls(SSL_CTX *ctx, bool check_name);

/*
 * Send one request and read its reply within timeout_ms. Every reply
 * carries the node's status, copied into *st (may be NULL; clear it with
 * cport_status_clear either way). CPORT_EREFUSED when the node answered
 * ok = false or with an Error frame (its message in err; the connection is
 * then dead). After CPORT_EIO or CPORT_EPROTO the connection is dead too.
 */
int cport_call(struct cport_conn *c, const struct cport_request *req, int timeout_ms,
               struct cport_status *st, char *err, size_t errlen);

/* True when the connection can still be used. */
bool cport_alive(const struct cport_conn *c);

/* Close the socket and free the connection; NULL is allowed. */
void cport_close(struct cport_conn *c);

/* Free st's transfers and peers (the rest stays); NULL is allowed. */
void cport_status_clear(struct cport_status *st);

/* The cluster-port address of a node whose client address is addr (same
 * host, port + CPORT_PORT_OFFSET), into out. -1 when addr has no valid
 * port or the result does not fit. */
int cport_addr_of(const char *addr, char *out, size_t outlen);

/* "up", "suspect", "down", "unknown". */
const char *cport_peer_health_name(enum cport_peer_health s);

/* "PREPARED", "COPYING", ...; "NONE" for no transition. */
const char *cport_phase_name(enum cport_phase p);

#endif
