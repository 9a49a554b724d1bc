/*
 * thread: the node's threads, as memcached's thread.c. The main thread runs
 * the accept loop on its own event_base and hands each new socket to a
 * worker (round robin) through that worker's queue plus a one-byte wake-up
 * on a pipe; the worker creates the connection on its own event_base, and a
 * connection never moves between bases. SIGTERM/SIGINT stop accepting, let
 * every worker flush what it owes (bounded), and return from server_run.
 */
#ifndef SERVER_THREAD_H
#define SERVER_THREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "server/latency.h"
#include "server/settings.h"
#include "server/stats.h"
#include "server/store.h"
#include "server/throttle.h"

struct event_base;
struct event;
struct conn;
struct cluster;
struct out_chunk;
struct fwd_worker;
struct repl_op;
struct server;
struct authfile;

/* A new socket on its way from the accept loop to a worker. */
struct conn_queue_item {
    struct conn_queue_item *next;
    int                     fd;
};

#define WORKER_RBUF_POOL 64

/* One worker thread. Everything but the queue is touched only by the
 * worker itself (or by anyone before the threads start). */
struct hotkeys;

struct worker {
    struct server          *srv;
    int                     id;
    pthread_t               tid;
    bool                    started;
    struct event_base      *base;
    struct event           *notify_ev;
    struct event           *idle_ev;      /* -o idle_timeout: the once-a-second sweep */
    uint32_t                idle_now;     /* monotonic seconds at the last sweep */
    int                     notify_fd[2]; /* pipe: [0] read by the worker */
    pthread_mutex_t         q_lock;       /* protects q_head/q_tail/stop */
    struct conn_queue_item *q_head, *q_tail;
    bool                    stop;          /* shutdown requested (under q_lock) */
    bool                    shutting_down; /* worker's own copy of stop */
    struct event           *stop_timer;    /* bounds the final flush */
    struct conn            *conns;         /* every open connection of this worker */
    pthread_mutex_t         conns_lock; /* its links, for readers on other threads (stats conns) */
    int                     nconns;
    struct thread_stats     stats;
    struct latency_stats    lat;   /* its latency histograms (server/latency.h) */
    struct latency_clock    clock; /* the running callback's clock reading (latency.h) */
    int                     ktid;  /* its kernel thread id, set as it starts (atomic) */
    struct hotkeys         *hot;   /* its hot-key sketch (server/hotkeys.h); NULL: off */
    /* Buffer pools, so idle connections hold no buffers (conn.c). */
    char             *rbuf_pool[WORKER_RBUF_POOL];
    int               nrbuf_pool;
    struct out_chunk *chunk_pool; /* free output chunks with a buffer */
    int               nchunk_pool;
    struct out_chunk *ichunk_pool; /* free item-reference chunks */
    int               nichunk_pool;
    struct out_chunk *hold_pool; /* free holds (one per replicated write) */
    int               nhold_pool;
    /* Upstream connections to peers (server/forward.c), created lazily. */
    struct fwd_worker *fwd;
    /* Finished replication ops for reuse (server/replicate.c). */
    struct repl_op *repl_pool;
    int             nrepl_pool;
    /* server_barrier (under srv->barrier_lock). */
    bool     barrier_live; /* the thread runs its loop */
    uint64_t barrier_seen; /* last barrier generation passed */
};

/* The whole node. */
struct tls_server;

struct server {
    struct settings    settings;
    struct store      *store;
    int64_t            started; /* unix time at start, for uptime */
    int                nworkers;
    struct worker     *workers;
    int                next_worker; /* round robin, accept thread only */
    int                listen_fd;
    int                bound_port;       /* actual port after server_listen */
    int                stall_timeout_ms; /* see CONN_STALL_TIMEOUT_MS; tests shorten it */
    struct event_base *main_base;
    struct event      *listen_ev, *sigterm_ev, *sigint_ev, *accept_retry_ev;
    struct event      *sighup_ev; /* -Z, --cluster-tls, -Y: SIGHUP reloads certificates, users */
    /* -Z (server/tls.h): the context new connections take; NULL: plaintext. */
    struct tls_server *tls;
    /* --metrics (server/metrics.h), set while the workers run: its HTTPS
     * context is reloaded with the others. */
    struct metrics *metrics;
    int             stopping;       /* atomic: 1 once SIGTERM/SIGINT began the stop */
    int             curr_conns;     /* atomic */
    uint64_t        total_conns;    /* atomic */
    uint64_t        rejected_conns; /* atomic */
    /* `stats reset` baseline, under stats_lock. */
    pthread_mutex_t     stats_lock;
    struct thread_stats base_thread;
    uint64_t            base_total_conns, base_rejected_conns;
    /* Cluster mode (server/cluster.h); NULL: a plain single-node cache. */
    struct cluster *cluster;
    /* The handoff's adaptive throttle as `stats` and /metrics show it
     * (server/throttle.h; written by the cluster thread). */
    struct throttle_pub copy_throttle;
    /* -Y: the users read at start (server/authfile.h, read only; main
     * owns it); NULL: no login. Never written while the workers run, so
     * it also tells, without a lock, whether a login is needed. */
    const struct authfile *auth;
    /* The users of the last good SIGHUP re-read of the -Y file (the
     * server owns it); NULL: still auth. Under auth_lock, held for the
     * whole check of a login (proto_auth.c), so a swap never frees a
     * table that a worker is reading. auth_lock is a leaf. */
    pthread_mutex_t  auth_lock;
    struct authfile *auth_reloaded;
    pthread_mutex_t  barrier_lock;
    pthread_cond_t   barrier_cond;
    uint64_t         barrier_gen;
};

/*
 * Create the store and the workers' event bases (threads are not started,
 * so a test may drive worker 0 by hand). NULL on failure, logged.
 */
struct server *server_new(const struct settings *settings);

/* Bind and listen on settings.listen_addr:port; 0 or -1 (logged). */
int server_listen(struct server *srv);

/* Bind a non-blocking TCP socket to addr:port (a name or a v4/v6 literal;
 * the first address that binds wins) and listen with the given backlog.
 * Returns the fd, or -1 after logging "cannot listen on <what> ..." (what
 * names the port for the operator, e.g. "client port"). */
int listen_tcp(const char *addr, int port, int backlog, const char *what);

/* Start the workers and run the accept loop until SIGTERM or SIGINT, then
 * flush and join the workers. Returns 0, or -1 if threads failed to start. */
int server_run(struct server *srv);

/* refresh_certs and SIGHUP: reload, from the files named at start, the
 * client port's TLS context (-Z), the cluster's (--cluster-tls, and the
 * relays' under -Z) and the metrics port's (--metrics-tls-cert). Every new context is built before
 * any is installed, so a bad file changes nothing: -1 with the reason (naming the file) in err. -2
 * with "TLS not enabled" when the node has no TLS at all. */
int server_refresh_certs(struct server *srv, char *err, size_t errlen);

/* Free everything; the threads must have stopped (or never started). */
void server_free(struct server *srv);

/* Sum of every worker's counters minus the `stats reset` baseline. */
void server_thread_stats(struct server *srv, struct thread_stats *out);

/* The node's hot keys: every worker's sketch merged, at most max entries
 * into out, highest estimated count first. Returns how many (0 when the
 * sketches are off). Any thread. */
struct hotkeys_entry;
size_t server_hotkeys(struct server *srv, struct hotkeys_entry *out, size_t max);

/* The store's figures. */
void server_store_stats(struct server *srv, struct store_stats *out);

/* Connection totals minus the reset baseline. */
void server_conn_totals(struct server *srv, uint64_t *total, uint64_t *rejected);

/* `stats reset`: record the current totals as the new baseline. */
void server_stats_reset(struct server *srv);

/*
 * Wait until every running worker has returned to its event loop once
 * (an RCU-style grace period): after it, no worker is still inside a
 * request that started before the call. Any thread but a worker's.
 * 0, or -1 after 10 s without it (logged).
 */
int server_barrier(struct server *srv);

/* Called by conn.c when a worker's connection closes (conn count, and
 * ends the worker's loop once it is shutting down and has none left). */
void worker_conn_closed(struct worker *w);

/*
 * A tenant of the worker runtime: a module that keeps state per worker or
 * per connection (forwarding, replication) or per server (logins), and is
 * told when it must let it go. The runtime calls the hooks by pointer, so
 * it does not name its tenants. Any hook may be NULL.
 */
struct worker_tenant {
    const char *name;
    /* Worker w stopped (or never ran) and its connections are closed: free
     * what the tenant keeps for it. On w's thread, or after it stopped. */
    void (*worker_free)(struct worker *w);
    /* SIGHUP: re-read what the tenant loaded at start, before the
     * certificates are reloaded. Main thread. */
    void (*reload)(struct server *srv);
    /* Connection c closes (conn_close, its output dropped, its read buffer
     * not yet released). On c's worker. */
    void (*conn_closed)(struct conn *c);
};

/* The node's tenants, NULL-terminated (server/tenants.c, fixed at build
 * time like nginx's ngx_modules[]). Each hook is called for every tenant
 * that has it, in this order. */
extern const struct worker_tenant *const worker_tenants[];

#endif /* SERVER_THREAD_H */
