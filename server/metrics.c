/*
 * metrics: Prometheus text exposition of the node's counters at GET
 * /metrics, and the readiness answer at GET /ready (server/metrics.h).
 * Every figure is read at scrape time from what `stats` reads (the
 * workers' counters summed, the store's stripes, the cluster's atomics and
 * a snapshot of its view), so nothing is counted twice; the data path pays
 * only for the latency histograms (server/latency.h), kept for this page
 * and `stats latency`.
 */
#include "config.h"
#include "server/metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <openssl/ssl.h>

#include "lib/util.h"
#include "proto/tlsctx.h"
#include "server/authfile.h"
#include "server/cluster.h"
#include "server/hotkeys.h"
#include "server/latency.h"
#include "server/log.h"
#include "server/proto_text.h"
#include "server/ready.h"
#include "server/stats.h"
#include "server/store.h"
#include "server/thread.h"

#define METRICS_BACKLOG     64
#define METRICS_TIMEOUT_S   10   /* a scraper that sends nothing is dropped */
#define METRICS_MAX_HEADERS 8192 /* a GET needs little */
#define METRICS_MAX_BODY    4096 /* read, so another method still gets its 405 */

struct metrics {
    struct server     *srv;
    struct event_base *base;
    struct evhttp     *http;
    struct event      *stop_ev;
    int                stop_fd[2]; /* pipe: metrics_free writes, the thread stops */
    int                listen_fd;
    pthread_t          tid;
    bool               started;
    struct authfile   *auth; /* --metrics-auth: who may scrape (NULL: anyone); the caller's */
    /* --metrics-tls-cert: HTTPS only (NULL: HTTP). Replaced by
     * metrics_tls_install (refresh_certs, SIGHUP) under tls_mu; an SSL made
     * from the old one holds its own reference to it. */
    SSL_CTX        *tls;
    pthread_mutex_t tls_mu;
    char           *tls_cert, *tls_key; /* the files, for a reload */
};

/* "# HELP" and "# TYPE" of one metric family. */
static void
family(struct evbuffer *b, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A family with one unlabelled sample. */
static void
one(struct evbuffer *b, const char *name, const char *type, const char *help, uint64_t v)
{
    family(b, name, type, help);
    evbuffer_add_printf(b, "%s %" PRIu64 "\n", name, v);
}

/* One family per row of a table of uint64_t fields of one struct. */
struct metric_row {
    const char *name, *type, *help;
    size_t      off; /* offsetof the field */
};

static void
rows(struct evbuffer *b, const struct metric_row *r, size_t n, const void *base)
{
    size_t i;

    for (i = 0; i < n; i++) {
        uint64_t v;

        memcpy(&v, (const char *)base + r[i].off, sizeof(v));
        one(b, r[i].name, r[i].type, r[i].help, v);
    }
}

/* a - b, 0 when b is larger (a `stats reset` between two reads). */
static uint64_t
sub0(uint64_t a, uint64_t b)
{
    return a > b ? a - b : 0;
}

/* The store's figures, as memcached_exporter names them. */
static const struct metric_row STORE_ROWS[] = {
    { "memcached_current_bytes", "gauge", "Current number of bytes used to store items.",
      offsetof(struct store_stats, bytes) },
    { "memcached_current_items", "gauge", "Current number of items stored by this instance.",
      offsetof(struct store_stats, curr_items) },
    { "memcached_items_total", "counter",
      "Total number of items stored during the life of this instance.",
      offsetof(struct store_stats, total_items) },
    { "memcached_items_evicted_total", "counter",
      "Total number of valid items removed from cache to free memory for new items.",
      offsetof(struct store_stats, evictions) },
    { "memcached_items_reclaimed_total", "counter",
      "Total number of times an entry was stored using memory from an expired entry.",
      offsetof(struct store_stats, reclaimed) },
};

/* Is the node ready (server/ready.h)? The reason goes to why. */
static bool
node_ready(struct server *srv, char *why, size_t len)
{
    struct cluster_snapshot cs;

    memset(&cs, 0, sizeof(cs));
    if (srv->cluster != NULL) {
        cluster_snapshot(srv->cluster, &cs, NULL, NULL);
    }
    return ready_check(srv->cluster != NULL, __atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE) != 0,
                       &cs, why, len);
}

/* memcached_exporter's families, from the figures `stats` prints. */
static void
render_memcached(struct server *srv, struct evbuffer *b)
{
    struct thread_stats ts;
    struct store_stats  ss;
    struct rusage       ru;
    uint64_t            total_conns, rejected;
    int64_t             now = store_now(srv->store);
    static const char   CMD[] = "memcached_commands_total";

    server_thread_stats(srv, &ts);
    server_store_stats(srv, &ss);
    server_conn_totals(srv, &total_conns, &rejected);
    getrusage(RUSAGE_SELF, &ru);

    one(b, "memcached_up", "gauge", "Could the memcached server be reached.", 1);
    one(b, "memcached_uptime_seconds", "gauge", "Number of seconds since the server started.",
        (uint64_t)(now > srv->started ? now - srv->started : 0));
    one(b, "memcached_time_seconds", "gauge", "current UNIX time according to the server.",
        (uint64_t)now);
    family(b, "memcached_version", "gauge", "The version of this memcached server.");
    evbuffer_add_printf(b, "memcached_version{version=\"%s\"} 1\n", PROTO_VERSION_STRING);

    family(b, CMD, "counter",
           "Total number of all requests broken down by command (get, set, etc.) and status.");
#define CMD_SAMPLE(cmd, status, v) \
    evbuffer_add_printf(b, "%s{command=\"%s\",status=\"%s\"} %" PRIu64 "\n", CMD, cmd, status, v)
    CMD_SAMPLE("get", "hit", ts.get_hits);
    CMD_SAMPLE("get", "miss", ts.get_misses);
    CMD_SAMPLE("delete", "hit", ts.delete_hits);
    CMD_SAMPLE("delete", "miss", ts.delete_misses);
    CMD_SAMPLE("incr", "hit", ts.incr_hits);
    CMD_SAMPLE("incr", "miss", ts.incr_misses);
    CMD_SAMPLE("decr", "hit", ts.decr_hits);
    CMD_SAMPLE("decr", "miss", ts.decr_misses);
    CMD_SAMPLE("cas", "hit", ts.cas_hits);
    CMD_SAMPLE("cas", "miss", ts.cas_misses);
    CMD_SAMPLE("cas", "badval", ts.cas_badval);
    CMD_SAMPLE("touch", "hit", ts.touch_hits);
    CMD_SAMPLE("touch", "miss", ts.touch_misses);
    CMD_SAMPLE("flush", "hit", ts.cmd_flush);
    /* cmd_set counts cas too, as memcached's; the exporter subtracts it. */
    CMD_SAMPLE("set", "hit", sub0(ts.cmd_set, ts.cas_hits + ts.cas_misses + ts.cas_badval));
#undef CMD_SAMPLE

    family(b, "memcached_process_user_cpu_seconds_total", "counter",
           "Accumulated user time for this process.");
    evbuffer_add_printf(b, "memcached_process_user_cpu_seconds_total %ld.%06ld\n",
                        (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    family(b, "memcached_process_system_cpu_seconds_total", "counter",
           "Accumulated system time for this process.");
    evbuffer_add_printf(b, "memcached_process_system_cpu_seconds_total %ld.%06ld\n",
                        (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);

    rows(b, STORE_ROWS, sizeof(STORE_ROWS) / sizeof(STORE_ROWS[0]), &ss);
    one(b, "memcached_limit_bytes", "gauge",
        "Number of bytes this server is allowed to use for storage.",
        (uint64_t)__atomic_load_n(&srv->settings.maxbytes, __ATOMIC_RELAXED));
    one(b, "memcached_read_bytes_total", "counter",
        "Total number of bytes read by this server from network.", ts.bytes_read);
    one(b, "memcached_written_bytes_total", "counter",
        "Total number of bytes sent by this server to network.", ts.bytes_written);
    one(b, "memcached_current_connections", "gauge", "Current number of open connections.",
        (uint64_t)__atomic_load_n(&srv->curr_conns, __ATOMIC_RELAXED));
    one(b, "memcached_max_connections", "gauge", "Maximum number of clients allowed.",
        (uint64_t)srv->settings.maxconns);
    one(b, "memcached_connections_total", "counter",
        "Total number of connections opened since the server started running.", total_conns);
    one(b, "memcached_connections_rejected_total", "counter",
        "Total number of connections rejected due to hitting the memcached's -c limit in "
        "maxconns_fast mode.",
        rejected);
    one(b, "memcached_connections_yielded_total", "counter",
        "Total number of connections yielded running due to hitting the memcached's -R limit.",
        ts.conn_yields);
    one(b, "memcached_accepting_connections", "gauge",
        "The Memcached server is currently accepting new connections.",
        __atomic_load_n(&srv->stopping, __ATOMIC_ACQUIRE) ? 0 : 1);
    one(b, "memcached_item_too_large_total", "counter",
        "The number of times an item exceeded the max-item-size when being stored.",
        ts.store_too_large);
    one(b, "memcached_item_no_memory_total", "counter",
        "The number of times an item could not be stored due to no more memory.",
        ts.store_no_memory);
    one(b, "memcached_malloced_bytes", "gauge",
        "Number of bytes of memory allocated to items (stored, or referenced and not yet freed).",
        ss.mem_used);
}

/* One ringcache_peer_up sample per other member (cluster_snapshot_node_fn). */
static void
peer_sample(void *arg, const char *id, const char *addr, bool self, bool down, bool empty)
{
    (void)empty;
    if (!self) {
        evbuffer_add_printf(arg, "ringcache_peer_up{peer=\"%s\",addr=\"%s\"} %d\n", id, addr,
                            down ? 0 : 1);
    }
}

/* The cluster's counters (cluster_counters_get). */
static const struct metric_row CLUSTER_ROWS[] = {
    { "ringcache_forwarded_total", "counter", "Requests forwarded to the key's owner.",
      offsetof(struct cluster_counters, forwarded) },
    { "ringcache_moved_total", "counter", "MOVED replies (the client's epoch is stale).",
      offsetof(struct cluster_counters, moved) },
    { "ringcache_tryagain_total", "counter", "TRYAGAIN replies.",
      offsetof(struct cluster_counters, tryagain) },
    { "ringcache_misrouted_total", "counter",
      "Writes acknowledged by a node that no longer owned the key.",
      offsetof(struct cluster_counters, misrouted) },
    { "ringcache_replication_acks_total", "counter", "Post-images a replica acknowledged.",
      offsetof(struct cluster_counters, replicated) },
    { "ringcache_replication_failures_total", "counter",
      "Post-images a replica did not acknowledge.",
      offsetof(struct cluster_counters, replica_failures) },
    { "ringcache_replication_skipped_total", "counter",
      "Post-images not sent: the owner is declared failed.",
      offsetof(struct cluster_counters, replica_skipped) },
    { "ringcache_unavailable_total", "counter",
      "Writes refused: an owner seen down but not declared failed.",
      offsetof(struct cluster_counters, unavailable) },
    { "ringcache_handoff_imported_items", "gauge",
      "Items imported by the handoff since the last PREPARE.",
      offsetof(struct cluster_counters, items_imported) },
    { "ringcache_handoff_imported_bytes", "gauge",
      "Bytes imported by the handoff since the last PREPARE.",
      offsetof(struct cluster_counters, bytes_imported) },
    { "ringcache_handoff_planned_items", "gauge",
      "Items this node's handoff streams found to copy when they opened, since the last PREPARE.",
      offsetof(struct cluster_counters, items_planned) },
    { "ringcache_handoff_planned_bytes", "gauge",
      "Memory the items of ringcache_handoff_planned_items take (as ringctl status counts).",
      offsetof(struct cluster_counters, bytes_planned) },
    { "ringcache_handoff_sent_items", "gauge",
      "Items and tombstones this node's handoff streams sent since the last PREPARE (re-sent dirty "
      "keys included).",
      offsetof(struct cluster_counters, items_sent) },
    { "ringcache_handoff_sent_bytes", "gauge",
      "Key and value bytes of ringcache_handoff_sent_items.",
      offsetof(struct cluster_counters, bytes_sent) },
};

/* The handoff's adaptive throttle (server/throttle.h). */
static const struct metric_row THROTTLE_ROWS[] = {
    { "ringcache_copy_rate_bytes", "gauge",
      "The copy rate in force as a handoff source, bytes/s (0: unlimited).",
      offsetof(struct throttle_pub, rate) },
    { "ringcache_copy_throttle_cuts_total", "counter",
      "Times the adaptive throttle cut the copy rate for client latency.",
      offsetof(struct throttle_pub, cuts) },
};

/* The cluster's figures: `stats` cluster counters, epochs, phase, health. */
static void
render_cluster(struct server *srv, struct evbuffer *b)
{
    static const char *const PHASES[] = { "none", "prepared", "copying", "fenced" };
    struct cluster_counters  cc;
    struct cluster_snapshot  cs;
    struct thread_stats      ts;
    struct throttle_pub      tp;
    unsigned                 i;
    char                     why[READY_REASON_MAX];

    memset(&cc, 0, sizeof(cc));
    memset(&cs, 0, sizeof(cs));
    if (srv->cluster != NULL) {
        cluster_counters_get(srv->cluster, &cc);
        family(b, "ringcache_peer_up", "gauge",
               "Whether this node's heartbeats see the peer up (1) or down (0).");
        cluster_snapshot(srv->cluster, &cs, peer_sample, b);
    }
    server_thread_stats(srv, &ts);

    one(b, "ringcache_cluster_epoch", "gauge", "Active membership epoch (0: none).", cs.epoch);
    one(b, "ringcache_cluster_pending_epoch", "gauge", "Epoch of the pending transition (0: none).",
        cs.pending_epoch);
    family(b, "ringcache_cluster_phase", "gauge",
           "1 for the phase of the pending transition as this node sees it.");
    for (i = 0; i < sizeof(PHASES) / sizeof(PHASES[0]); i++) {
        evbuffer_add_printf(b, "ringcache_cluster_phase{phase=\"%s\"} %d\n", PHASES[i],
                            (unsigned)cs.phase == i ? 1 : 0);
    }
    one(b, "ringcache_cluster_members", "gauge", "Nodes in the active membership.", cs.n_nodes);
    one(b, "ringcache_cluster_member", "gauge",
        "1 while this node is in its active membership (0: none yet, left or removed).",
        cs.epoch != 0 && cs.self >= 0 ? 1 : 0);
    one(b, "ringcache_cluster_recovering", "gauge",
        "1 while this node restarted empty and waits for its ranges (owned keys TRYAGAIN).",
        cs.recovering);
    one(b, "ringcache_cluster_suspect", "gauge",
        "1 after this process stalled, until a heartbeat round (TRYAGAIN).", cs.suspect);
    one(b, "ringcache_cluster_isolated", "gauge", "1 while no peer answers heartbeats (TRYAGAIN).",
        cs.isolated);
    one(b, "ringcache_cluster_behind_epoch", "gauge",
        "A higher epoch a peer runs (0: none); everything TRYAGAIN meanwhile.", cs.behind_epoch);
    rows(b, CLUSTER_ROWS, sizeof(CLUSTER_ROWS) / sizeof(CLUSTER_ROWS[0]), &cc);
    throttle_pub_read(&srv->copy_throttle, &tp);
    rows(b, THROTTLE_ROWS, sizeof(THROTTLE_ROWS) / sizeof(THROTTLE_ROWS[0]), &tp);
    one(b, "ringcache_ready", "gauge",
        "1 when GET /ready answers 200: a member serving its active epoch (or a plain node).",
        node_ready(srv, why, sizeof(why)) ? 1 : 0);
    one(b, "ringcache_route_lookups_total", "counter", "Ring lookups made for keyed requests.",
        ts.route_lookups);
}

/* The node's hot keys (server/hotkeys.h): estimated requests and the
 * bound on their overestimate, per key. */
static void
render_hotkeys(struct server *srv, struct evbuffer *b)
{
    struct hotkeys_entry *e = malloc(HOTKEYS_K * sizeof(*e));
    size_t                n = e != NULL ? server_hotkeys(srv, e, HOTKEYS_K) : 0, i, pass;
    static const char *NAMES[] = { "ringcache_hotkey_requests", "ringcache_hotkey_overestimate" };
    static const char *HELP[] = {
        "Estimated requests for one of the node's most requested keys (sampled; stats hotkeys).",
        "Bound on the overestimate of ringcache_hotkey_requests for the key.",
    };

    for (pass = 0; pass < 2; pass++) {
        family(b, NAMES[pass], "gauge", HELP[pass]);
        for (i = 0; i < n; i++) {
            char key[HOTKEYS_TEXT_MAX];
            bool binary;

            /* A text key has no space, control byte, quote or backslash
             * but the last two: escape those (the text format's rule). */
            hotkeys_key_text(&e[i], key, &binary);
            evbuffer_add_printf(b, "%s{key=\"", NAMES[pass]);
            for (const char *p = key; *p != '\0'; p++) {
                if (*p == '"' || *p == '\\') {
                    evbuffer_add(b, "\\", 1);
                }
                evbuffer_add(b, p, 1);
            }
            evbuffer_add_printf(b, "\"%s} %" PRIu64 "\n", binary ? ",encoding=\"base64\"" : "",
                                pass == 0 ? e[i].count : e[i].err);
        }
    }
    free(e);
}

/* The samples of one histogram (h summed over the workers): cumulative
 * buckets with le in seconds, _sum, _count. label is "" or `name="v"`. */
static void
histogram(struct evbuffer *b, const char *name, const char *label, const struct latency_hist *h)
{
    const char *sep = *label != '\0' ? "," : "";
    uint64_t    n = 0;
    unsigned    i;

    for (i = 0; i < LATENCY_BUCKETS; i++) {
        uint64_t us = latency_bound_us(i);

        n += h->bucket[i];
        evbuffer_add_printf(b, "%s_bucket{%s%sle=\"%" PRIu64 ".%06" PRIu64 "\"} %" PRIu64 "\n",
                            name, label, sep, us / 1000000, us % 1000000, n);
    }
    n += h->bucket[LATENCY_BUCKETS];
    evbuffer_add_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, label, sep, n);
    /* No empty braces on an unlabelled one's _sum and _count. */
    if (*label != '\0') {
        evbuffer_add_printf(b, "%s_sum{%s} %" PRIu64 ".%09" PRIu64 "\n%s_count{%s} %" PRIu64 "\n",
                            name, label, h->sum_ns / 1000000000u, h->sum_ns % 1000000000u, name,
                            label, n);
    } else {
        evbuffer_add_printf(b, "%s_sum %" PRIu64 ".%09" PRIu64 "\n%s_count %" PRIu64 "\n", name,
                            h->sum_ns / 1000000000u, h->sum_ns % 1000000000u, name, n);
    }
}

/* The latency histograms (server/latency.h): every timed command, then
 * replication. */
static void
render_latency(struct server *srv, struct evbuffer *b)
{
    struct latency_stats *ls = malloc(sizeof(*ls));
    unsigned              k;

    if (ls == NULL) {
        return;
    }
    latency_sum(srv, ls);
    family(b, "ringcache_command_duration_seconds", "histogram",
           "Time from parsing a command to queueing its reply (relayed ones included).");
    for (k = LATENCY_NONE + 1; k < LATENCY_CMDS; k++) {
        char label[48];

        snprintf(label, sizeof(label), "command=\"%s\"", latency_cmd_name(k));
        histogram(b, "ringcache_command_duration_seconds", label, &ls->cmd[k]);
    }
    family(b, "ringcache_replication_duration_seconds", "histogram",
           "Time from sending a post-image to a replica to its acknowledgement.");
    histogram(b, "ringcache_replication_duration_seconds", "", &ls->repl);
    free(ls);
}

/* --metrics-auth: does req carry HTTP basic credentials of a user of the
 * file ("Authorization: Basic base64(user:password)")? */
static bool
authorized(const struct metrics *m, struct evhttp_request *req)
{
    const char   *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    unsigned char dec[AUTHFILE_LINE_MAX + 4];
    const char   *colon;
    size_t        n;
    bool          ok;

    if (h == NULL || strncasecmp(h, "Basic ", 6) != 0) {
        return false;
    }
    h += 6;
    while (*h == ' ') {
        h++;
    }
    if (strlen(h) > (sizeof(dec) - 4) / 3 * 4 || !util_b64_decode_strict(h, strlen(h), dec, &n)) {
        return false;
    }
    colon = memchr(dec, ':', n);
    ok = colon != NULL && authfile_check(m->auth, (const char *)dec, (size_t)(colon - (char *)dec),
                                         colon + 1, n - (size_t)(colon + 1 - (char *)dec));
    explicit_bzero(dec, sizeof(dec));
    return ok;
}

/* Every request: GET /metrics and GET /ready, else 404 (405 for those
 * two by another method). /ready answers 200 or 503 with one line saying
 * why (server/ready.h), to anyone (a probe); /metrics, with
 * --metrics-auth, only to a user of its file (else 401). */
static void
request_cb(struct evhttp_request *req, void *arg)
{
    struct metrics   *m = arg;
    const char       *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    struct evbuffer  *b;
    struct evkeyvalq *out = evhttp_request_get_output_headers(req);
    bool              ready_path = path != NULL && strcmp(path, "/ready") == 0;

    if (m->tls != NULL && bufferevent_openssl_get_ssl(evhttp_connection_get_bufferevent(
                              evhttp_request_get_connection(req))) == NULL) {
        /* tls_bevcb had no memory for TLS, and evhttp went on in plain. */
        evhttp_send_error(req, HTTP_BADREQUEST, "HTTPS only");
        return;
    }
    if (path == NULL || (strcmp(path, "/metrics") != 0 && !ready_path)) {
        evhttp_send_error(req, HTTP_NOTFOUND, "Not Found");
        return;
    }
    if (evhttp_request_get_command(req) != EVHTTP_REQ_GET) {
        evhttp_add_header(out, "Allow", "GET");
        evhttp_send_error(req, HTTP_BADMETHOD, "Method Not Allowed");
        return;
    }
    b = evbuffer_new();
    if (b == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, "Out of memory");
        return;
    }
    if (!ready_path && m->auth != NULL && !authorized(m, req)) {
        /* evhttp_send_error would drop the header: a reply of our own. */
        evbuffer_add_printf(b, "401 Unauthorized\n");
        evhttp_add_header(out, "WWW-Authenticate", "Basic realm=\"ringcache metrics\"");
        evhttp_add_header(out, "Content-Type", "text/plain; charset=utf-8");
        evhttp_send_reply(req, 401, "Unauthorized", b);
        evbuffer_free(b);
        return;
    }
    if (ready_path) {
        char why[READY_REASON_MAX];
        bool ok = node_ready(m->srv, why, sizeof(why));

        evbuffer_add_printf(b, "%s\n", why);
        evhttp_add_header(out, "Content-Type", "text/plain; charset=utf-8");
        evhttp_add_header(out, "Cache-Control", "no-store");
        evhttp_send_reply(req, ok ? HTTP_OK : HTTP_SERVUNAVAIL, ok ? "OK" : "Service Unavailable",
                          b);
        evbuffer_free(b);
        return;
    }
    render_memcached(m->srv, b);
    render_cluster(m->srv, b);
    render_hotkeys(m->srv, b);
    render_latency(m->srv, b);
    evhttp_add_header(out, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    evhttp_send_reply(req, HTTP_OK, "OK", b);
    evbuffer_free(b);
}

/* metrics_free wrote to the pipe: leave the loop. */
static void
stop_cb(evutil_socket_t fd, short what, void *arg)
{
    struct metrics *m = arg;

    (void)fd;
    (void)what;
    event_base_loopbreak(m->base);
}

static void *
metrics_main(void *arg)
{
    struct metrics *m = arg;

    event_base_dispatch(m->base);
    return NULL;
}

/* evhttp's bufferevent for a connection it accepted: TLS, server side.
 * On NULL (no memory) evhttp makes a plain one, which request_cb refuses. */
static struct bufferevent *
tls_bevcb(struct event_base *base, void *arg)
{
    struct metrics *m = arg;
    SSL            *ssl;

    pthread_mutex_lock(&m->tls_mu);
    ssl = SSL_new(m->tls);
    pthread_mutex_unlock(&m->tls_mu);
    if (ssl == NULL) {
        return NULL;
    }
    return bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                          BEV_OPT_CLOSE_ON_FREE);
}

/* The HTTPS context of --metrics-tls-cert/-key (the node's TLS builder,
 * proto/tlsctx.h): no client certificates, TLS 1.2 at least. NULL with the
 * reason (naming the file) in err. */
static SSL_CTX *
tls_ctx(const char *cert, const char *key, char *err, size_t errlen)
{
    struct tlsctx_spec spec = { .role = TLSCTX_SERVER,
                                .chain = cert,
                                .key = key,
                                .verify = SSL_VERIFY_NONE,
                                .min_version = TLS1_2_VERSION };
    SSL_CTX           *ctx = tlsctx_new(&spec, err, errlen);

    if (ctx == NULL) {
        return NULL;
    }
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    return ctx;
}

/* Start the thread; see metrics.h. */
struct metrics *
metrics_start(struct server *srv, const char *addr, int port, struct authfile *auth,
              const char *tls_cert, const char *tls_key)
{
    struct metrics *m = calloc(1, sizeof(*m));
    sigset_t        block, old;

    if (m == NULL) {
        log_msg(LOG_ERR, "metrics: out of memory");
        return NULL;
    }
    m->srv = srv;
    m->auth = auth;
    m->stop_fd[0] = m->stop_fd[1] = -1;
    m->listen_fd = -1;
    pthread_mutex_init(&m->tls_mu, NULL);
    if (tls_cert != NULL && tls_cert[0] != '\0') {
        char err[512];

        m->tls_cert = strdup(tls_cert);
        m->tls_key = tls_key != NULL && tls_key[0] != '\0' ? strdup(tls_key) : NULL;
        if (m->tls_cert == NULL || (tls_key != NULL && tls_key[0] != '\0' && m->tls_key == NULL)) {
            log_msg(LOG_ERR, "metrics: out of memory");
            goto fail;
        }
        if ((m->tls = tls_ctx(m->tls_cert, m->tls_key, err, sizeof(err))) == NULL) {
            log_msg(LOG_ERR, "metrics: HTTPS: %s", err);
            goto fail;
        }
    }
    m->listen_fd = listen_tcp(addr, port, METRICS_BACKLOG, "metrics port");
    if (m->listen_fd < 0) {
        goto fail;
    }
    if (pipe(m->stop_fd) < 0) {
        log_msg(LOG_ERR, "metrics: pipe: %s", strerror(errno));
        goto fail;
    }
    m->base = event_base_new();
    m->http = m->base != NULL ? evhttp_new(m->base) : NULL;
    m->stop_ev = m->base != NULL ? event_new(m->base, m->stop_fd[0], EV_READ, stop_cb, m) : NULL;
    if (m->http == NULL || m->stop_ev == NULL || event_add(m->stop_ev, NULL) < 0 ||
        evhttp_accept_socket(m->http, m->listen_fd) < 0) {
        log_msg(LOG_ERR, "metrics: cannot set up the HTTP server");
        goto fail;
    }
    m->listen_fd = -1; /* evhttp's now: evhttp_free closes it */
    evhttp_set_timeout(m->http, METRICS_TIMEOUT_S);
    evhttp_set_max_headers_size(m->http, METRICS_MAX_HEADERS);
    evhttp_set_max_body_size(m->http, METRICS_MAX_BODY);
    evhttp_set_gencb(m->http, request_cb, m);
    if (m->tls != NULL) {
        /* Every connection speaks TLS: a plain request fails its handshake. */
        evhttp_set_bevcb(m->http, tls_bevcb, m);
    }

    /* The main thread's event base takes SIGTERM and SIGINT, not this one. */
    sigemptyset(&block);
    sigaddset(&block, SIGTERM);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    m->started = pthread_create(&m->tid, NULL, metrics_main, m) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!m->started) {
        log_msg(LOG_ERR, "metrics: cannot start its thread");
        goto fail;
    }
    log_msg(LOG_INFO, "metrics on %s://%s:%d/metrics (readiness: /ready)",
            m->tls != NULL ? "https" : "http", addr, port);
    return m;
fail:
    metrics_free(m);
    return NULL;
}

/* Stop and free; see metrics.h. */
void
metrics_free(struct metrics *m)
{
    if (m == NULL) {
        return;
    }
    if (m->started) {
        if (write(m->stop_fd[1], "s", 1) != 1) {
            log_msg(LOG_ERR, "metrics: cannot stop its thread: %s", strerror(errno));
        }
        pthread_join(m->tid, NULL);
    }
    if (m->http != NULL) {
        evhttp_free(m->http);
    }
    if (m->stop_ev != NULL) {
        event_free(m->stop_ev);
    }
    if (m->base != NULL) {
        event_base_free(m->base);
    }
    if (m->listen_fd >= 0) {
        close(m->listen_fd);
    }
    if (m->stop_fd[0] >= 0) {
        close(m->stop_fd[0]);
        close(m->stop_fd[1]);
    }
    SSL_CTX_free(m->tls);
    pthread_mutex_destroy(&m->tls_mu);
    free(m->tls_cert);
    free(m->tls_key);
    free(m);
}

/* A new HTTPS context from the files named at start; see metrics.h. */
int
metrics_tls_build(const struct metrics *m, SSL_CTX **out, char *err, size_t errlen)
{
    *out = NULL;
    if (m == NULL || m->tls_cert == NULL) {
        return 0;
    }
    *out = tls_ctx(m->tls_cert, m->tls_key, err, errlen);
    return *out != NULL ? 0 : -1;
}

/* Put a context from metrics_tls_build in use; see metrics.h. */
void
metrics_tls_install(struct metrics *m, SSL_CTX *ctx)
{
    SSL_CTX *old;

    if (ctx == NULL) {
        return;
    }
    pthread_mutex_lock(&m->tls_mu);
    old = m->tls;
    m->tls = ctx;
    pthread_mutex_unlock(&m->tls_mu);
    SSL_CTX_free(old);
}
