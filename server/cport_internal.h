/*
 * cport_internal: struct cport and its connections, for the three files
 * that make up the cluster port: cport.c (the transport: listener,
 * connections, frames), admin.c (the admin requests) and cport_guard.c
 * (admission before the Hello). Everything else sees only server/cport.h.
 */
#ifndef SERVER_CPORT_INTERNAL_H
#define SERVER_CPORT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "proto/frame.h"

struct bufferevent;
struct cluster;
struct event;
struct event_base;
struct handoff;
struct handoff_in;
struct health;
struct server;
struct store;
struct storewatch;
struct transition;

/*
 * Admission before authentication (docs/cluster.md, "Cluster port
 * admission"). Anyone who can reach the port can open connections, so
 * until its Hello is accepted a connection is "pre-auth" and costs little:
 * a small frame limit, a deadline, and a slot in a bounded table of its
 * own. When that table (or one source's share of it) is full, a new
 * connection evicts the OLDEST pre-auth one instead of being refused:
 * refusing would let idle connections lock every newcomer out, while a
 * legitimate client (ringctl, a peer's heartbeat or handoff stream) sends
 * its Hello right after connect and is authenticated long before enough
 * newer connections arrive to push it out. On loopback, and behind NAT,
 * the attacker and the peers share an address, so the per-source share
 * only stops one address from taking the whole table when several compete;
 * the eviction order is what lets a same-address peer through.
 * Of the candidates, one that has sent nothing goes first, so a client
 * whose Hello is already in its socket is not evicted by a burst of idle
 * connections accepted before we read it (preauth_idle).
 * Authenticated connections never count toward the pre-auth table; the
 * overall cap only bounds descriptors, and pre-auth ones go first.
 * server/cport_guard.c implements it.
 */
#define CPORT_CONNS_MAX       1024 /* every cluster-port connection */
#define CPORT_PREAUTH_MAX     128  /* connections still waiting for their Hello */
#define CPORT_PREAUTH_PER_SRC 16   /* of them, from one address (IPv6: one /64) */
#define CPORT_HELLO_MS        3000 /* the Hello must be accepted within this */
#define CPORT_SWEEP_MS        250  /* overdue Hellos are looked for this often */
/* Frame payload limit before the Hello (a Hello is < 1 KiB: token <= 256
 * bytes), and at most one line about dropped pre-auth connections this
 * often (ms). */
#define CPORT_PREAUTH_PAYLOAD 4096
#define CPORT_DROP_LOG_MS     1000
#define CPORT_SRC_LEN         9   /* family + 8 address bytes (see source_key) */
#define CPORT_AUTH_SRCS       256 /* sources with failed Hellos (cport_guard.c) */

/* One source's failed Hellos (cport_guard.c, "Failed Hellos"). */
struct auth_src {
    uint8_t  src[CPORT_SRC_LEN];
    bool     used;
    uint32_t fails;        /* consecutive wrong tokens */
    uint64_t last_fail_ms; /* monotonic */
    uint64_t next_ms;      /* no Hello from it is checked before this */
};

enum cpc_state {
    CPC_HELLO = 0, /* waiting for Hello */
    CPC_ADMIN,
    CPC_PEER,
};

struct cp_conn {
    struct cport       *cp;
    struct bufferevent *bev;
    enum cpc_state      state;
    bool                closing;            /* close once the output is written */
    bool                waiting;            /* a reply is pending (Fence): input paused */
    bool                deferred;           /* its Hello waits for its source's turn (auth_src) */
    struct handoff_in  *in;                 /* peer: import state */
    bool                preauth;            /* in the pre-auth table (no Hello accepted yet) */
    uint64_t            accepted_ms;        /* monotonic; the Hello deadline runs from here */
    uint8_t             src[CPORT_SRC_LEN]; /* source address (per-source share) */
    int                 reading;            /* cpc_read_cb depth: the outermost frees c
                                               if it closed meanwhile */
    LIST_ENTRY(cp_conn) link;               /* cport.conns */
    TAILQ_ENTRY(cp_conn) pa_link;           /* cport.preauth, oldest first */
};

struct cport {
    struct server     *srv;
    struct cluster    *cl;
    struct store      *store;
    char               addr[64];
    int                port;
    int                listen_fd;
    int                stop_fd[2];
    pthread_t          tid;
    bool               started;
    struct event_base *base;
    struct event      *listen_ev, *stop_ev;
    int                nconns;        /* in conns */
    int                npreauth;      /* in preauth */
    struct event      *sweep_ev;      /* CPORT_SWEEP_MS: Hello deadlines */
    bool               listen_paused; /* out of descriptors: the sweep resumes */
    uint64_t           drop_log_ms;   /* when the last drop line was logged */
    uint64_t           n_timed_out, n_evicted, n_refused; /* since that line */
    struct handoff    *ho;
    struct transition *tr;
    struct health     *health;
    struct storewatch *sw;                             /* --store: the node's own watch (or NULL) */
    struct cp_conn    *fence_waiter;                   /* its Fence waits for the drain */
    struct auth_src    auth[CPORT_AUTH_SRCS];          /* sources with failed Hellos */
    struct event      *auth_ev;                        /* wakes the deferred Hellos */
    uint64_t           n_auth_failed, n_auth_deferred; /* since the last auth line */
    uint64_t           n_tls_failed, tls_log_ms;       /* since the last TLS line */
    uint64_t           auth_log_ms;
    LIST_HEAD(, cp_conn) conns;    /* every connection */
    TAILQ_HEAD(, cp_conn) preauth; /* pre-auth connections, oldest first */
};

/*
 * The transport (cport.c), for admin.c and cport_guard.c. All on the
 * cluster thread.
 */

/* Queue one frame on c; out of memory closes c after the write. */
void cpc_send(struct cp_conn *c, enum frame_type type, const void *msg);

/* Log and send an Error frame (docs/cluster.md), then close c once it is
 * written (c may be freed at once unless cpc_read_cb is using it). */
void cpc_error(struct cp_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Free c now: out of every list; a Fence it waits for is cancelled. */
void cpc_free(struct cp_conn *c);

/* c's bufferevent read callback (arg: c): decode and dispatch every whole
 * frame buffered, until c closes or waits for a reply. Called directly to
 * go on with what was buffered while c was paused. */
void cpc_read_cb(struct bufferevent *bev, void *arg);

#endif /* SERVER_CPORT_INTERNAL_H */
