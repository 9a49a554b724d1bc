/*
 * conn: one client connection on a worker. Input arrives in a read buffer
 * that proto_text parses in place; replies are queued as chunks (copied
 * text, or a reference to an item's value) and written with writev, all the
 * replies of a pipelined batch in one call. Output past --max-output-bytes
 * stops input processing until the client reads (its input is still taken,
 * unparsed, up to CONN_STALL_IN_CAP); a client that keeps sending but does
 * not read is closed when that cap is reached and no reply byte could be
 * written for CONN_STALL_TIMEOUT_MS. Buffers return to the worker's pools
 * when the connection is idle; with -o idle_timeout, one idle that long is
 * closed (conn_idle_sweep). With -Z the socket is read and written
 * through server/tls.h (conn_recv/conn_send), after a handshake driven by
 * the same event. A reply that another node gives
 * (forwarding, replication) is a hold: a placeholder chunk that is filled
 * later, in place; writes stop at an unfilled hold, so replies keep their
 * request order.
 */
#ifndef SERVER_CONN_H
#define SERVER_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/latency.h"
#include "server/route.h"
#include "server/store.h"

struct worker;
struct event;
struct repl_op;
struct fwd_order;
struct tls_conn;

#define CONN_RBUF_SIZE        16384u      /* default read buffer */
#define CONN_LINE_MAX         (4u << 20)  /* longest get line we buffer */
#define CONN_OUT_CHUNK        16384u      /* output buffer chunk */
#define CONN_OUT_HARD_CAP     (64u << 20) /* close above this plus out_cap plus -I */
#define CONN_COPY_MAX         2048u       /* values up to this are copied, not referenced */
#define CONN_HOLD_INLINE      48u         /* a hold's own room for a short reply */
#define CONN_STALL_IN_CAP     (1u << 20)  /* unparsed input while its replies are stuck */
#define CONN_STALL_TIMEOUT_MS 5000        /* capped and nothing written: close */

/* Told that a hold's connection closed before the hold was done. */
typedef void (*conn_hold_gone_fn)(void *owner);

/* One piece of queued output. */
struct out_chunk {
    struct out_chunk  *next;
    struct store_item *it;      /* reference held for a value chunk, else NULL */
    const char        *data;    /* buf for a text chunk, the item's bytes otherwise */
    uint32_t           len;     /* valid bytes at data */
    uint32_t           off;     /* bytes already written */
    uint32_t           cap;     /* capacity of buf (text chunks) */
    bool               sealed;  /* never append to it (a hold, or filled by one) */
    void              *owner;   /* an unfilled hold: who fills it; else NULL */
    conn_hold_gone_fn  gone;    /* called with owner if the chunk is dropped */
    struct out_chunk  *ins;     /* a hold: last chunk inserted after it */
    uint64_t           lat_t0;  /* a hold ending a timed command: its start (latency.h) */
    uint8_t            lat_cmd; /* that command (enum latency_cmd), else LATENCY_NONE */
    char               buf[];
};

/* Where the text protocol is within the byte stream. */
enum conn_pstate {
    CONN_PS_CMD = 0, /* expecting a command line */
    CONN_PS_NREAD,   /* reading a data block into nread_it */
    CONN_PS_SWALLOW, /* discarding a rejected data block */
    CONN_PS_GET,     /* a multi-get paused on a full output queue */
    CONN_PS_DUMP,    /* a metadump or cachedump (server/proto_admin.c) */
    CONN_PS_WATCH,   /* memcached's watch: a log stream, input ignored (server/watch.c) */
};

struct mset_ctx;
struct flush_op;

struct conn {
    struct worker *w;
    int            fd; /* -1 for an in-memory test connection */
    struct event  *ev;
    struct event  *stall_ev;    /* deadline while blocked and capped */
    short          ev_flags;    /* events currently registered */
    struct conn   *prev, *next; /* worker's list */
    bool           started;     /* some input has been seen */
    bool           close_after_write;
    bool           eof; /* the client shut down its side */
    bool           closed;
    /* -Z: every byte goes through this (server/tls.h); NULL: plaintext. */
    struct tls_conn *tls;
    bool             tls_ready; /* its handshake is done */

    /* Input: bytes [rpos, rend) of rbuf are unparsed. */
    char    *rbuf;
    uint32_t rsize, rpos, rend;

    /* Protocol state (proto_text.c). */
    enum conn_pstate pstate;
    bool             noreply;
    int              nread_op;          /* enum store_op */
    void (*nread_done)(struct conn *c); /* the data block is in */
    uint64_t           nread_cas;
    struct store_item *nread_it;
    char              *nread_dst;  /* next byte of the item to fill */
    size_t             nread_left; /* value bytes + 2 still to come */
    size_t             swallow_left;
    uint32_t           get_pos;  /* next key, offset in rbuf */
    uint32_t           get_end;  /* end of the key list, offset in rbuf */
    uint32_t           get_next; /* offset just past the line's '\n' */
    bool               get_cas, get_touch;
    bool               get_ordered; /* route.c: its keys are read at their acting primary */
    int64_t            get_exptime;
    uint64_t           declared_epoch; /* `epoch <n>`: MOVED instead of forwarding */
    bool               moved_on;       /* route.c follow_redirect: reads of moved_hash */
    int32_t            moved_to;       /* are MOVED to moved_to while the view is */
    uint64_t           moved_hash;     /* moved_gen (the last write was MOVED) */
    uint64_t           moved_gen;
    bool               peer;           /* `rc_peer` proven: a cluster peer (replicate.c) */
    char               peer_nonce[33]; /* `rc_peer`'s challenge, hex ("": none; proto_peer.c) */
    bool               authenticated;  /* -Y: logged in, or no -Y (server/proto_auth.h) */
    uint8_t            auth_failures;  /* failed logins on this connection */

    struct route route; /* the decision for the data block coming in */

    /* CONN_PS_DUMP (proto_admin.c): its store_cursor, what is left to show
     * of a stats cachedump, and which dump it is (else metadump). When its
     * last command came (util_coarse_ms / 1000; stats conns reads it from
     * another thread, atomically). */
    uint32_t dump_stripe, dump_bucket, dump_left;
    bool     dump_items;
    uint32_t last_cmd_s;

    /* A storage command being forwarded (route.c): its line, then
     * its data block read in place (nread_dst points into it). */
    char  *fwd_buf;
    size_t fwd_len;
    bool   fwd_noreply;
    bool   fwd_meta; /* an ms: relayed as FWD_META with fwd_quiet */
    /* An ms served here, between its line and its data block
     * (proto_meta.c): the request, and the reply flags it asked for. */
    struct mset_ctx *meta_set;
    char             meta_set_flags[768];
    size_t           meta_set_flags_len;
    uint8_t          fwd_quiet; /* FWD_MQ_* */
    uint64_t         fwd_epoch;
    char             fwd_addr[256];
    uint32_t         nholds;   /* holds not yet done */
    struct repl_op  *repl_gat; /* a replicated gat being served (replicate.c) */
    struct flush_op *flush;    /* its flush_all in progress (flush.c) */

    /* The order of its relayed requests across retries (forward.c). */
    struct fwd_order *fwd_order;
    /* It sent `watch`: its log stream (server/watch.c). */
    struct watcher *watcher;

    /* Output. */
    struct out_chunk *out_head, *out_tail;
    size_t            out_bytes; /* queued, not yet written */
    size_t            out_cap;   /* --max-output-bytes: stop processing input above */

    uint32_t last_active; /* w->idle_now when bytes last came in (idle_timeout) */

    /* The command being timed (server/latency.h). */
    uint64_t          lat_batch;              /* clock of the batch being parsed; 0: not read yet */
    uint64_t          lat_t0;                 /* the command's start */
    uint8_t           lat_cmd;                /* enum latency_cmd; LATENCY_NONE: none */
    struct out_chunk *lat_hold;               /* the last hold it created */
    uint32_t          lat_mask;               /* bit k: lat_done[k] > 0 */
    uint32_t          lat_done[LATENCY_CMDS]; /* answered here this batch, to count at its end */
};

/* Create a connection for fd on worker w (fd < 0: in-memory, for tests:
 * no event is registered). NULL on ENOMEM. Does not take fd on failure. */
struct conn *conn_new(struct worker *w, int fd);

/* Register the connection's read event on its worker's base, and with
 * -Z start its TLS side (the handshake comes first); 0 or -1. */
int conn_start(struct conn *c);

/* Close the socket, release every buffer and item reference, unlink from
 * the worker and free c. */
void conn_close(struct conn *c);

/* Ask a connection to finish: stop reading, close when its output is out.
 * Used at shutdown. */
void conn_shutdown(struct conn *c);

/* Append input bytes as if read from the socket (tests, fuzzing); 0 or -1
 * when the input would exceed the buffer limit. */
int conn_feed(struct conn *c, const void *data, size_t len);

/* Queue a copy of len bytes of text. */
void conn_out_add(struct conn *c, const void *data, size_t len);

/* Contiguous room for n <= CONN_OUT_CHUNK bytes at the tail of the queue;
 * write into it, then conn_out_commit the bytes used. */
char *conn_out_reserve(struct conn *c, size_t n);
void  conn_out_commit(struct conn *c, size_t n);

/* Queue len bytes at p inside item it; takes over the caller's reference
 * (released once written, or when the connection closes). */
void conn_out_item(struct conn *c, struct store_item *it, const char *p, size_t len);

/*
 * Queue a hold: an empty placeholder that owner fills later with
 * conn_hold_add/reserve+commit and finishes with conn_hold_done. Writes
 * stop at it until then. If the connection closes first, gone(owner) is
 * called and the hold must not be touched again.
 */
struct out_chunk *conn_out_hold(struct conn *c, void *owner, conn_hold_gone_fn gone);

/* Insert a copy of len bytes after what was inserted at hold h so far. */
void conn_hold_add(struct conn *c, struct out_chunk *h, const void *data, size_t len);

/* Contiguous room for n <= CONN_OUT_CHUNK bytes after hold h's
 * insertions; conn_hold_commit the bytes used. */
char *conn_hold_reserve(struct conn *c, struct out_chunk *h, size_t n);
void  conn_hold_commit(struct conn *c, struct out_chunk *h, size_t n);

/* Drop every chunk queued after hold h (and its insertions) up to, not
 * including, chunk e: a reply held whole and replaced (a replicated gat
 * whose replica failed). Dropped unfilled holds tell their owners. */
void conn_hold_drop_until(struct conn *c, struct out_chunk *h, struct out_chunk *e);

/* Hold h is complete: writes may pass it; the connection is woken to
 * write and to resume parsing. */
void conn_hold_done(struct conn *c, struct out_chunk *h);

/* Unlink and return every queued byte as one malloc'd buffer (*len set),
 * releasing chunks; for tests. NULL (len 0) when nothing is queued. */
char *conn_out_take(struct conn *c, size_t *len);

/* Drop every queued output chunk. */
void conn_out_clear(struct conn *c);

/* Give the read buffer back to the worker's pool if nothing is buffered. */
void conn_rbuf_release(struct conn *c);

/* The libevent callback: read, parse, reply, write. Exposed for tests. */
void conn_event_cb(int fd, short what, void *arg);

/*
 * -o idle_timeout: close every connection of worker w that waits for a
 * command (or for the rest of one) and has received nothing for more than
 * timeout seconds, now being w->idle_now; not those we owe a reply (output
 * queued, a hold, a paused get) nor cluster peers. Counts idle_kicks.
 * Returns how many were closed. Worker thread.
 */
int conn_idle_sweep(struct worker *w, int timeout);

#endif /* SERVER_CONN_H */
