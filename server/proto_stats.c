/*
 * proto_stats: the `stats` command: memcached's general statistics and
 * settings with memcached's names (protocol.txt), so exporters and
 * dashboards read a node unchanged, plus the node's cluster counters.
 */
#include "config.h"
#include "server/proto_stats.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "server/cluster.h"
#include "server/conn.h"
#include "server/flush.h"
#include "server/hotkeys.h"
#include "server/latency.h"
#include "server/log.h"
#include "server/proto_admin.h"
#include "server/proto_text.h"
#include "server/stats.h"
#include "server/store.h"
#include "server/thread.h"
#include "server/tls.h"

/* `stats`: memcached's general statistics, names as in protocol.txt. */
static void
stats_general(struct conn *c)
{
    struct server      *srv = c->w->srv;
    struct thread_stats ts;
    struct store_stats  ss;
    struct rusage       ru;
    uint64_t            total_conns, rejected, buckets;
    int64_t             now = store_now(srv->store);
    unsigned            hashpower = 0;

    server_thread_stats(srv, &ts);
    server_store_stats(srv, &ss);
    server_conn_totals(srv, &total_conns, &rejected);
    getrusage(RUSAGE_SELF, &ru);
    for (buckets = ss.hash_buckets; buckets > 1; buckets >>= 1) {
        hashpower++;
    }

    proto_reply_printf(c, "STAT pid %ld\r\n", (long)getpid());
    proto_reply_printf(c, "STAT uptime %" PRId64 "\r\n", now - srv->started);
    proto_reply_printf(c, "STAT time %" PRId64 "\r\n", now);
    proto_reply_printf(c, "STAT version %s\r\n", PROTO_VERSION_STRING);
    proto_reply_printf(c, "STAT libevent %s\r\n", event_get_version());
    proto_reply_printf(c, "STAT pointer_size %d\r\n", (int)(8 * sizeof(void *)));
    proto_reply_printf(c, "STAT rusage_user %ld.%06ld\r\n", (long)ru.ru_utime.tv_sec,
                       (long)ru.ru_utime.tv_usec);
    proto_reply_printf(c, "STAT rusage_system %ld.%06ld\r\n", (long)ru.ru_stime.tv_sec,
                       (long)ru.ru_stime.tv_usec);
    proto_reply_printf(c, "STAT max_connections %d\r\n", srv->settings.maxconns);
    proto_reply_printf(c, "STAT curr_connections %d\r\n",
                       __atomic_load_n(&srv->curr_conns, __ATOMIC_RELAXED));
    proto_reply_printf(c, "STAT total_connections %" PRIu64 "\r\n", total_conns);
    proto_reply_printf(c, "STAT rejected_connections %" PRIu64 "\r\n", rejected);
    proto_reply_printf(c, "STAT connection_structures %d\r\n",
                       __atomic_load_n(&srv->curr_conns, __ATOMIC_RELAXED));
    proto_reply_printf(c, "STAT cmd_get %" PRIu64 "\r\n", ts.cmd_get);
    proto_reply_printf(c, "STAT cmd_set %" PRIu64 "\r\n", ts.cmd_set);
    proto_reply_printf(c, "STAT cmd_flush %" PRIu64 "\r\n", ts.cmd_flush);
    proto_reply_printf(c, "STAT cmd_touch %" PRIu64 "\r\n", ts.cmd_touch);
    proto_reply_printf(c, "STAT get_hits %" PRIu64 "\r\n", ts.get_hits);
    proto_reply_printf(c, "STAT get_misses %" PRIu64 "\r\n", ts.get_misses);
    proto_reply_printf(c, "STAT get_expired %" PRIu64 "\r\n", ss.get_expired);
    proto_reply_printf(c, "STAT get_flushed %" PRIu64 "\r\n", ss.get_flushed);
    proto_reply_printf(c, "STAT delete_misses %" PRIu64 "\r\n", ts.delete_misses);
    proto_reply_printf(c, "STAT delete_hits %" PRIu64 "\r\n", ts.delete_hits);
    proto_reply_printf(c, "STAT incr_misses %" PRIu64 "\r\n", ts.incr_misses);
    proto_reply_printf(c, "STAT incr_hits %" PRIu64 "\r\n", ts.incr_hits);
    proto_reply_printf(c, "STAT decr_misses %" PRIu64 "\r\n", ts.decr_misses);
    proto_reply_printf(c, "STAT decr_hits %" PRIu64 "\r\n", ts.decr_hits);
    proto_reply_printf(c, "STAT cas_misses %" PRIu64 "\r\n", ts.cas_misses);
    proto_reply_printf(c, "STAT cas_hits %" PRIu64 "\r\n", ts.cas_hits);
    proto_reply_printf(c, "STAT cas_badval %" PRIu64 "\r\n", ts.cas_badval);
    proto_reply_printf(c, "STAT touch_hits %" PRIu64 "\r\n", ts.touch_hits);
    proto_reply_printf(c, "STAT touch_misses %" PRIu64 "\r\n", ts.touch_misses);
    proto_reply_printf(c, "STAT store_too_large %" PRIu64 "\r\n", ts.store_too_large);
    proto_reply_printf(c, "STAT store_no_memory %" PRIu64 "\r\n", ts.store_no_memory);
    proto_reply_printf(c, "STAT auth_cmds %" PRIu64 "\r\n", ts.auth_cmds);
    proto_reply_printf(c, "STAT auth_errors %" PRIu64 "\r\n", ts.auth_errors);
    if (srv->auth != NULL) {
        /* Ours: connections closed after PROTO_AUTH_FAILURES_MAX failed logins. */
        proto_reply_printf(c, "STAT auth_kicks %" PRIu64 "\r\n", ts.auth_kicks);
    }
    if (srv->tls != NULL) {
        /* memcached's TLS counters, only with -Z, in its order. */
        struct tls_stats tls;

        tls_server_stats(srv->tls, &tls);
        if (srv->settings.ssl_session_cache) {
            proto_reply_printf(c, "STAT ssl_new_sessions %" PRIu64 "\r\n", tls.new_sessions);
        }
        proto_reply_printf(c, "STAT ssl_handshake_errors %" PRIu64 "\r\n", tls.handshake_errors);
        proto_reply_printf(c, "STAT time_since_server_cert_refresh %" PRId64 "\r\n",
                           (int64_t)time(NULL) - tls.last_refresh);
    }
    if (srv->settings.idle_timeout > 0) {
        /* memcached shows it only with -o idle_timeout too. */
        proto_reply_printf(c, "STAT idle_kicks %" PRIu64 "\r\n", ts.idle_kicks);
    }
    proto_reply_printf(c, "STAT bytes_read %" PRIu64 "\r\n", ts.bytes_read);
    proto_reply_printf(c, "STAT bytes_written %" PRIu64 "\r\n", ts.bytes_written);
    proto_reply_printf(c, "STAT limit_maxbytes %zu\r\n",
                       __atomic_load_n(&srv->settings.maxbytes, __ATOMIC_RELAXED));
    proto_reply_printf(c, "STAT accepting_conns 1\r\n");
    proto_reply_printf(c, "STAT threads %d\r\n", srv->nworkers);
    proto_reply_printf(c, "STAT conn_yields %" PRIu64 "\r\n", ts.conn_yields);
    proto_reply_printf(c, "STAT hash_power_level %u\r\n", hashpower);
    proto_reply_printf(c, "STAT hash_bytes %" PRIu64 "\r\n", ss.hash_buckets * sizeof(void *));
    proto_reply_printf(c, "STAT bytes %" PRIu64 "\r\n", ss.bytes);
    proto_reply_printf(c, "STAT curr_items %" PRIu64 "\r\n", ss.curr_items);
    proto_reply_printf(c, "STAT total_items %" PRIu64 "\r\n", ss.total_items);
    proto_reply_printf(c, "STAT expired_unfetched %" PRIu64 "\r\n", ss.expired_unfetched);
    proto_reply_printf(c, "STAT evictions %" PRIu64 "\r\n", ss.evictions);
    proto_reply_printf(c, "STAT reclaimed %" PRIu64 "\r\n", ss.reclaimed);
    {
        const struct cluster_view *v = srv->cluster != NULL ? cluster_view(srv->cluster) : NULL;
        struct cluster_counters    cc;
        uint64_t                   asked, skewed;

        memset(&cc, 0, sizeof(cc));
        if (srv->cluster != NULL) {
            cluster_counters_get(srv->cluster, &cc);
        }
        proto_reply_printf(c, "STAT cluster_epoch %" PRIu64 "\r\n", v != NULL ? v->epoch : 0);
        proto_reply_printf(c, "STAT cluster_pending_epoch %" PRIu64 "\r\n",
                           v != NULL ? v->pending_epoch : 0);
        proto_reply_printf(c, "STAT moved %" PRIu64 "\r\n", cc.moved);
        proto_reply_printf(c, "STAT tryagain %" PRIu64 "\r\n", cc.tryagain);
        proto_reply_printf(c, "STAT forwarded %" PRIu64 "\r\n", cc.forwarded);
        proto_reply_printf(c, "STAT misrouted %" PRIu64 "\r\n", cc.misrouted);
        proto_reply_printf(c, "STAT replicated %" PRIu64 "\r\n", cc.replicated);
        proto_reply_printf(c, "STAT replica_failures %" PRIu64 "\r\n", cc.replica_failures);
        proto_reply_printf(c, "STAT replica_skipped %" PRIu64 "\r\n", cc.replica_skipped);
        proto_reply_printf(c, "STAT cluster_unavailable %" PRIu64 "\r\n", cc.unavailable);
        flush_counters(&asked, &skewed);
        proto_reply_printf(c, "STAT flush_asked %" PRIu64 "\r\n", asked);
        proto_reply_printf(c, "STAT flush_skewed %" PRIu64 "\r\n", skewed);
        proto_reply_printf(c, "STAT cluster_items_imported %" PRIu64 "\r\n", cc.items_imported);
        proto_reply_printf(c, "STAT cluster_bytes_imported %" PRIu64 "\r\n", cc.bytes_imported);
        proto_reply_printf(c, "STAT route_lookups %" PRIu64 "\r\n", ts.route_lookups);
    }
    {
        struct throttle_pub tp;

        throttle_pub_read(&srv->copy_throttle, &tp);
        proto_reply_printf(c, "STAT copy_rate_bytes %" PRIu64 "\r\n", tp.rate);
        proto_reply_printf(c, "STAT copy_rate_min_bytes %" PRIu64 "\r\n", tp.rate_min);
        proto_reply_printf(c, "STAT copy_throttle_decisions %" PRIu64 "\r\n", tp.decisions);
        proto_reply_printf(c, "STAT copy_throttle_cuts %" PRIu64 "\r\n", tp.cuts);
        proto_reply_printf(c, "STAT copy_throttle_rises %" PRIu64 "\r\n", tp.rises);
        proto_reply_printf(c, "STAT copy_throttle_p99_us %" PRIu64 "\r\n", tp.p99_us);
        proto_reply_printf(c, "STAT copy_throttle_baseline_us %" PRIu64 "\r\n", tp.base_us);
        proto_reply_printf(c, "STAT copy_throttle_cuts_wait %" PRIu64 "\r\n", tp.cuts_wait);
        proto_reply_printf(c, "STAT copy_throttle_wait_us %" PRIu64 "\r\n", tp.wait_us);
        proto_reply_printf(c, "STAT copy_throttle_wait_baseline_us %" PRIu64 "\r\n",
                           tp.wait_base_us);
    }
    conn_out_add(c, "END\r\n", 5);
}

/* memcached's ssl_* lines of `stats settings` (printed with or without
 * -Z), its values: the verify mode as OpenSSL's flags (0, 1, 3, 7), unset
 * files as NULL, the fixed ones (PEM keys, 16 KiB records) as it shows
 * its defaults. */
static void
stats_settings_ssl(struct conn *c, const struct settings *st)
{
    static const int   VERIFY_FLAGS[] = { 0, 1, 3, 7 };
    static const char *VERSIONS[] = { "tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3" };

    proto_reply_printf(c, "STAT ssl_enabled %s\r\n", st->ssl_enabled ? "yes" : "no");
    proto_reply_printf(c, "STAT ssl_chain_cert %s\r\n",
                       st->ssl_chain_cert[0] != '\0' ? st->ssl_chain_cert : "NULL");
    proto_reply_printf(c, "STAT ssl_key %s\r\n", st->ssl_key[0] != '\0' ? st->ssl_key : "NULL");
    proto_reply_printf(c, "STAT ssl_verify_mode %d\r\n", VERIFY_FLAGS[st->ssl_verify_mode]);
    proto_reply_printf(c, "STAT ssl_keyformat 1\r\n");
    proto_reply_printf(c, "STAT ssl_ciphers %s\r\n",
                       st->ssl_ciphers[0] != '\0' ? st->ssl_ciphers : "NULL");
    proto_reply_printf(c, "STAT ssl_ca_cert %s\r\n",
                       st->ssl_ca_cert[0] != '\0' ? st->ssl_ca_cert : "NULL");
    proto_reply_printf(c, "STAT ssl_wbuf_size 16384\r\n");
    proto_reply_printf(c, "STAT ssl_session_cache %s\r\n", st->ssl_session_cache ? "yes" : "no");
    proto_reply_printf(c, "STAT ssl_kernel_tls no\r\n");
    proto_reply_printf(c, "STAT ssl_min_version %s\r\n", VERSIONS[st->ssl_min_version]);
}

/* `stats settings`: the options that clients and exporters look for. */
static void
stats_settings(struct conn *c)
{
    const struct settings *st = &c->w->srv->settings;

    proto_reply_printf(c, "STAT maxbytes %zu\r\n",
                       __atomic_load_n(&st->maxbytes, __ATOMIC_RELAXED));
    proto_reply_printf(c, "STAT maxconns %d\r\n", st->maxconns);
    proto_reply_printf(c, "STAT tcpport %d\r\n",
                       c->w->srv->bound_port ? c->w->srv->bound_port : st->port);
    proto_reply_printf(c, "STAT udpport 0\r\n");
    proto_reply_printf(c, "STAT inter %s\r\n", st->listen_addr);
    proto_reply_printf(c, "STAT verbosity %d\r\n", log_get_level());
    proto_reply_printf(c, "STAT oldest 0\r\n");
    proto_reply_printf(c, "STAT evictions on\r\n");
    proto_reply_printf(c, "STAT domain_socket NULL\r\n");
    proto_reply_printf(c, "STAT umask 700\r\n");
    proto_reply_printf(c, "STAT num_threads %d\r\n", st->num_threads);
    proto_reply_printf(c, "STAT num_threads_per_udp %d\r\n", st->num_threads);
    proto_reply_printf(c, "STAT stat_key_prefix %c\r\n", st->prefix_delimiter);
    proto_reply_printf(c, "STAT detail_enabled %s\r\n", proto_admin_detail_on() ? "yes" : "no");
    proto_reply_printf(c, "STAT reqs_per_event 20\r\n");
    proto_reply_printf(c, "STAT cas_enabled yes\r\n");
    proto_reply_printf(c, "STAT tcp_backlog 1024\r\n");
    proto_reply_printf(c, "STAT binding_protocol ascii\r\n");
    proto_reply_printf(c, "STAT auth_enabled_sasl no\r\n");
    /* memcached shows the file's name. */
    proto_reply_printf(c, "STAT auth_enabled_ascii %s\r\n",
                       st->auth_file[0] != '\0' ? st->auth_file : "no");
    proto_reply_printf(c, "STAT item_size_max %zu\r\n", st->item_size_max);
    proto_reply_printf(c, "STAT maxconns_fast yes\r\n");
    proto_reply_printf(c, "STAT idle_timeout %d\r\n", st->idle_timeout);
    /* ringcached's own limits (docs/operations.md, "Limits"). */
    proto_reply_printf(c, "STAT max_output_bytes %zu\r\n", st->max_output_bytes);
    proto_reply_printf(c, "STAT max_keys_per_get %d\r\n", st->max_keys_per_get);
    proto_reply_printf(c, "STAT max_frame_bytes %zu\r\n", st->max_frame_bytes);
    proto_reply_printf(c, "STAT handoff_window %d\r\n", st->handoff_window);
    proto_reply_printf(c, "STAT copy_throttle %s\r\n", st->throttle_off ? "off" : "on");
    proto_reply_printf(c, "STAT copy_throttle_floor %u\r\n", st->throttle_floor_mib);
    proto_reply_printf(c, "STAT client_flags_size 4\r\n");
    proto_reply_printf(c, "STAT hotkeys_sample %u\r\n", st->hotkeys_sample);
    proto_reply_printf(c, "STAT hotkeys_decay %u\r\n", st->hotkeys_decay_s);
    stats_settings_ssl(c, st);
    conn_out_add(c, "END\r\n", 5);
}

/* `stats hotkeys`: the node's hot keys, most requested first, one line
 * each: `STAT hotkey:<rank> <key> <estimated requests> <overestimate
 * bound>`, a binary key (meta's b flag) in base64 with a trailing ` b`. */
static void
stats_hotkeys(struct conn *c)
{
    struct hotkeys_entry *e = malloc(HOTKEYS_K * sizeof(*e));
    size_t                n = e != NULL ? server_hotkeys(c->w->srv, e, HOTKEYS_K) : 0, i;

    for (i = 0; i < n; i++) {
        char key[HOTKEYS_TEXT_MAX];
        bool binary;

        hotkeys_key_text(&e[i], key, &binary);
        proto_reply_printf(c, "STAT hotkey:%zu %s %" PRIu64 " %" PRIu64 "%s\r\n", i + 1, key,
                           e[i].count, e[i].err, binary ? " b" : "");
    }
    free(e);
    conn_out_add(c, "END\r\n", 5);
}

/* One histogram of `stats latency` (none when it is empty): count, sum in
 * microseconds, then cumulative counts up to each bound. */
static void
stats_histogram(struct conn *c, const char *name, const struct latency_hist *h)
{
    uint64_t n = latency_count(h), le = 0;
    unsigned i;

    if (n == 0) {
        return;
    }
    proto_reply_printf(c, "STAT latency:%s:count %" PRIu64 "\r\n", name, n);
    proto_reply_printf(c, "STAT latency:%s:sum_us %" PRIu64 "\r\n", name, h->sum_ns / 1000);
    for (i = 0; i < LATENCY_BUCKETS; i++) {
        le += h->bucket[i];
        proto_reply_printf(c, "STAT latency:%s:le_%" PRIu64 "us %" PRIu64 "\r\n", name,
                           latency_bound_us(i), le);
    }
    proto_reply_printf(c, "STAT latency:%s:le_inf %" PRIu64 "\r\n", name, n);
}

/* `stats latency`: the histograms of /metrics (server/latency.h) for each
 * command seen and for replication, as `STAT latency:<command>:<field>`.
 * `stats reset` does not clear them (Prometheus counters only go up). */
static void
stats_latency(struct conn *c)
{
    struct latency_stats *ls = malloc(sizeof(*ls));
    unsigned              k;

    if (ls != NULL) {
        latency_sum(c->w->srv, ls);
        for (k = LATENCY_NONE + 1; k < LATENCY_CMDS; k++) {
            stats_histogram(c, latency_cmd_name(k), &ls->cmd[k]);
        }
        stats_histogram(c, "replication", &ls->repl);
        free(ls);
    }
    conn_out_add(c, "END\r\n", 5);
}

/* stats [settings|reset|items|slabs|sizes|hotkeys|latency]; see proto_stats.h. */
void
proto_stats(struct conn *c, const struct token *t, int ntok)
{
    if (ntok == 1) {
        stats_general(c);
    } else if (TOK_IS(&t[1], "settings")) {
        stats_settings(c);
    } else if (TOK_IS(&t[1], "reset")) {
        server_stats_reset(c->w->srv);
        conn_out_add(c, "RESET\r\n", 7);
    } else if (TOK_IS(&t[1], "items") || TOK_IS(&t[1], "slabs")) {
        /* No slab classes here; an empty group keeps exporters happy. */
        conn_out_add(c, "END\r\n", 5);
    } else if (TOK_IS(&t[1], "hotkeys")) {
        stats_hotkeys(c);
    } else if (TOK_IS(&t[1], "latency")) {
        stats_latency(c);
    } else if (TOK_IS(&t[1], "conns")) {
        proto_admin_stats_conns(c);
    } else if (TOK_IS(&t[1], "cachedump")) {
        proto_admin_stats_cachedump(c, t, ntok);
    } else if (TOK_IS(&t[1], "detail")) {
        proto_admin_stats_detail(c, t, ntok);
    } else if (TOK_IS(&t[1], "sizes")) {
        /* memcached's answer when the size histogram is off. */
        conn_out_add(c, "STAT sizes_status disabled\r\nEND\r\n", 33);
    } else {
        conn_out_add(c, "ERROR\r\n", 7);
    }
}
