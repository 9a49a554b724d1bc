/*
 * proto_admin: memcached's operator commands (stats detail, lru_crawler
 * metadump, shutdown) and ElastiCache's `config get cluster`, with the
 * replies of memcached 1.6 (doc/protocol.txt) and of ElastiCache's
 * auto-discovery. A metadump walks the store in slices (store_walk), so a
 * big one pauses on the client's output cap like a multi-get.
 */
#include "config.h"
#include "server/proto_admin.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/util.h"
#include "server/cluster.h"
#include "server/log.h"
#include "server/store.h"
#include "server/watch.h"

/* Queue a string literal (always: these replies ignore noreply). */
#define OUT_LIT(c, lit) conn_out_add((c), lit, sizeof(lit) - 1)

#define DUMP_SLICE     256  /* items per store_walk call of a metadump */
#define DETAIL_BUCKETS 256  /* memcached's PREFIX_HASH_SIZE */
#define DETAIL_MAX     4096 /* prefixes counted; more are not (memory bound) */

/* ---- stats detail --------------------------------------------------------- */

/* One prefix's counters (memcached's PREFIX_STATS). */
struct detail {
    struct detail *next;
    uint64_t       gets, hits, sets, dels;
    size_t         len;
    char           prefix[];
};

static pthread_mutex_t detail_lock = PTHREAD_MUTEX_INITIALIZER;
static struct detail  *detail_table[DETAIL_BUCKETS];
static size_t          detail_count;
static bool            detail_enabled;

/* See proto_admin.h. */
bool
proto_admin_detail_on(void)
{
    return __atomic_load_n(&detail_enabled, __ATOMIC_RELAXED);
}

/* See proto_admin.h. */
void
proto_admin_detail_set(bool on)
{
    __atomic_store_n(&detail_enabled, on, __ATOMIC_RELAXED);
}

/* See proto_admin.h. Takes detail_lock (memcached's stats prefix lock). */
void
proto_admin_detail(const struct settings *st, const char *key, size_t nkey, enum admin_detail_op op,
                   bool hit)
{
    const char    *d = memchr(key, st->prefix_delimiter, nkey);
    struct detail *e;
    size_t         len, b;

    if (d == NULL || !proto_admin_detail_on()) {
        return;
    }
    len = (size_t)(d - key);
    b = ring_hash(key, len) % DETAIL_BUCKETS;
    pthread_mutex_lock(&detail_lock);
    for (e = detail_table[b]; e != NULL; e = e->next) {
        if (e->len == len && memcmp(e->prefix, key, len) == 0) {
            break;
        }
    }
    if (e == NULL && detail_count < DETAIL_MAX && (e = calloc(1, sizeof(*e) + len + 1)) != NULL) {
        memcpy(e->prefix, key, len);
        e->len = len;
        e->next = detail_table[b];
        detail_table[b] = e;
        detail_count++;
    }
    if (e != NULL) {
        switch (op) {
        case ADMIN_DETAIL_GET:
            e->gets++;
            e->hits += hit ? 1 : 0;
            break;
        case ADMIN_DETAIL_SET:
            e->sets++;
            break;
        case ADMIN_DETAIL_DEL:
            e->dels++;
            break;
        }
    }
    pthread_mutex_unlock(&detail_lock);
}

/* See proto_admin.h: on, off (the counters stay, as memcached's), dump. */
void
proto_admin_stats_detail(struct conn *c, const struct token *t, int ntok)
{
    struct detail *e;
    size_t         b;

    if (ntok == 3 && TOK_IS(&t[2], "on")) {
        proto_admin_detail_set(true);
        OUT_LIT(c, "OK\r\n");
    } else if (ntok == 3 && TOK_IS(&t[2], "off")) {
        proto_admin_detail_set(false);
        OUT_LIT(c, "OK\r\n");
    } else if (ntok == 3 && TOK_IS(&t[2], "dump")) {
        pthread_mutex_lock(&detail_lock);
        for (b = 0; b < DETAIL_BUCKETS; b++) {
            for (e = detail_table[b]; e != NULL; e = e->next) {
                proto_reply_printf(c,
                                   "PREFIX %s get %" PRIu64 " hit %" PRIu64 " set %" PRIu64
                                   " del %" PRIu64 "\r\n",
                                   e->prefix, e->gets, e->hits, e->sets, e->dels);
            }
        }
        pthread_mutex_unlock(&detail_lock);
        OUT_LIT(c, "END\r\n");
    } else {
        OUT_LIT(c, "CLIENT_ERROR usage: stats detail on|off|dump\r\n");
    }
}

/* ---- stats conns ------------------------------------------------------------ */

/* "tcp:IP:PORT" (memcached's form; a v6 address in brackets) or
 * "unix:PATH" of a socket address, into out[size]. */
static void
sock_text(const struct sockaddr_storage *ss, const char *unix_path, char *out, size_t size)
{
    char ip[INET6_ADDRSTRLEN] = "";

    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;

        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
        snprintf(out, size, "tcp:%s:%u", ip, ntohs(a->sin_port));
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;

        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
        snprintf(out, size, "tcp6:[%s]:%u", ip, ntohs(a->sin6_port));
    } else {
        snprintf(out, size, "unix:%s", unix_path);
    }
}

/* memcached's name for where a connection is. */
static const char *
conn_state_name(const struct conn *c, const struct conn *asking)
{
    if (c == asking) {
        return "conn_parse_cmd";
    }
    switch (__atomic_load_n(&c->pstate, __ATOMIC_RELAXED)) {
    case CONN_PS_NREAD:
        return "conn_nread";
    case CONN_PS_SWALLOW:
        return "conn_swallow";
    case CONN_PS_GET:
    case CONN_PS_DUMP:
        return "conn_mwrite";
    default:
        return "conn_waiting";
    }
}

/* stats conns: the listening socket, then every client connection of every
 * worker (read under each worker's conns_lock), memcached's lines:
 * `STAT <fd>:addr`, `:listen_addr`, `:state`, `:secs_since_last_cmd`. */
void
proto_admin_stats_conns(struct conn *c)
{
    struct server          *srv = c->w->srv;
    const char             *unix_path = srv->settings.socket_path;
    struct sockaddr_storage ss;
    socklen_t               len = sizeof(ss);
    char                    listen[128] = "", addr[128];
    uint32_t                now = (uint32_t)(util_coarse_ms() / 1000);
    int                     i;

    if (srv->listen_fd >= 0 && getsockname(srv->listen_fd, (struct sockaddr *)&ss, &len) == 0) {
        sock_text(&ss, unix_path, listen, sizeof(listen));
        proto_reply_printf(c, "STAT %d:addr %s\r\n", srv->listen_fd, listen);
        proto_reply_printf(c, "STAT %d:state conn_listening\r\n", srv->listen_fd);
        proto_reply_printf(c, "STAT %d:secs_since_last_cmd %" PRId64 "\r\n", srv->listen_fd,
                           store_now(srv->store) - srv->started);
    }
    for (i = 0; i < srv->nworkers; i++) {
        struct worker *w = &srv->workers[i];
        struct conn   *o;

        pthread_mutex_lock(&w->conns_lock);
        for (o = w->conns; o != NULL; o = o->next) {
            uint32_t last = __atomic_load_n(&o->last_cmd_s, __ATOMIC_RELAXED);

            len = sizeof(ss);
            if (o->fd < 0 || getpeername(o->fd, (struct sockaddr *)&ss, &len) < 0) {
                continue;
            }
            sock_text(&ss, unix_path, addr, sizeof(addr));
            proto_reply_printf(c, "STAT %d:addr %s\r\n", o->fd, addr);
            if (listen[0] != '\0') {
                proto_reply_printf(c, "STAT %d:listen_addr %s\r\n", o->fd, listen);
            }
            proto_reply_printf(c, "STAT %d:state %s\r\n", o->fd, conn_state_name(o, c));
            proto_reply_printf(c, "STAT %d:secs_since_last_cmd %u\r\n", o->fd,
                               last != 0 && now >= last ? now - last : 0);
        }
        pthread_mutex_unlock(&w->conns_lock);
    }
    OUT_LIT(c, "END\r\n");
}

/* ---- lru_crawler metadump ------------------------------------------------ */

/* memcached's uriencode: every byte but [A-Za-z0-9._~-] as %XX. */
static size_t
uri_encode(const char *s, size_t n, char *out)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t            i, o = 0;

    for (i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];

        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            ch == '.' || ch == '_' || ch == '-' || ch == '~') {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = '\0';
    return o;
}

/* One item of a metadump, memcached's line: key (URI-encoded), exp
 * (absolute, -1: never), la (last access), cas, fetch, cls (one class
 * here), size. The walk's callback: on c's worker, no lock held. */
static void
dump_item(struct store_item *it, void *arg)
{
    struct conn        *c = arg;
    struct store       *s = c->w->srv->store;
    struct store_mdebug md;
    char                key[3 * STORE_KEY_MAX + 1], line[3 * STORE_KEY_MAX + 160];
    int64_t             now = store_now(s);
    int                 n;

    if (!store_mdebug(s, store_item_key(it), it->nkey, it->hash, &md)) {
        return; /* gone since the walk read it */
    }
    uri_encode(store_item_key(it), it->nkey, key);
    n = snprintf(line, sizeof(line),
                 "key=%s exp=%" PRId64 " la=%" PRId64 " cas=%" PRIu64
                 " fetch=%s cls=1 size=%" PRIu32 "\n",
                 key, md.exp < 0 ? (int64_t)-1 : now + md.exp, now - (int64_t)md.la, md.cas,
                 md.fetched ? "yes" : "no", md.size);
    conn_out_add(c, line, (size_t)n);
}

/* One item of a stats cachedump, memcached's line: "ITEM <key> [<value
 * bytes> b; <absolute expiry, 0: never> s]", up to the dump's limit. */
static void
cachedump_item(struct store_item *it, void *arg)
{
    struct conn *c = arg;
    char         line[STORE_KEY_MAX + 64];
    int          n;

    if (c->dump_left == 0) {
        return;
    }
    c->dump_left--;
    n = snprintf(line, sizeof(line), "ITEM %.*s [%" PRIu32 " b; %" PRIu32 " s]\r\n", (int)it->nkey,
                 store_item_key(it), it->nbytes, it->exptime);
    conn_out_add(c, line, (size_t)n);
}

/* See proto_admin.h. */
enum proto_status
proto_admin_dump_continue(struct conn *c)
{
    struct store_cursor cur = { c->dump_stripe, c->dump_bucket, NULL };
    int                 more = store_walk(c->w->srv->store, &cur, NULL, NULL,
                          c->dump_items ? cachedump_item : dump_item, c, DUMP_SLICE);

    c->dump_stripe = cur.stripe;
    c->dump_bucket = cur.bucket;
    if (more == 0 || (c->dump_items && c->dump_left == 0)) {
        OUT_LIT(c, "END\r\n");
        c->pstate = CONN_PS_CMD;
    }
    return PROTO_MORE;
}

/* Start a dump of the whole store (every item is in class 1 here). */
static void
dump_start(struct conn *c, bool items, uint32_t limit)
{
    struct store_cursor cur;

    store_cursor_init(&cur);
    c->dump_stripe = cur.stripe;
    c->dump_bucket = cur.bucket;
    c->dump_items = items;
    c->dump_left = limit;
    c->pstate = CONN_PS_DUMP;
}

/* See proto_admin.h: stats cachedump <class> <limit> (0: all), memcached's
 * replies; class 1 holds every item, 0 and 2-63 none (what memcdump, which
 * asks each class in turn, reads). */
void
proto_admin_stats_cachedump(struct conn *c, const struct token *t, int ntok)
{
    uint32_t id, limit;

    if (ntok < 4) {
        OUT_LIT(c, "CLIENT_ERROR bad command line\r\n");
    } else if (!proto_tok_u32(&t[2], &id) || !proto_tok_u32(&t[3], &limit)) {
        OUT_LIT(c, "CLIENT_ERROR bad command line format\r\n");
    } else if (id > 63) {
        OUT_LIT(c, "CLIENT_ERROR Illegal slab id\r\n");
    } else if (c->w->srv->settings.dump_disabled) {
        OUT_LIT(c, "CLIENT_ERROR stats cachedump not allowed\r\n");
    } else if (id != 1) {
        OUT_LIT(c, "END\r\n");
    } else {
        dump_start(c, true, limit == 0 ? UINT32_MAX : limit);
    }
}

/* lru_crawler metadump all|hash|<class ids>: every live item (all in class
 * 1 here, so a list without 1 dumps none). Other lru_crawler commands are
 * memcached's LRU and slab tuning, with nothing to tune here: ERROR. */
static void
lru_crawler(struct conn *c, const struct token *t, int ntok)
{
    bool        all = false, one = false;
    const char *p, *end;

    if (ntok != 3 || !TOK_IS(&t[1], "metadump")) {
        OUT_LIT(c, "ERROR\r\n");
        return;
    }
    if (c->w->srv->settings.dump_disabled) {
        OUT_LIT(c, "ERROR metadump not allowed\r\n");
        return;
    }
    all = TOK_IS(&t[2], "all") || TOK_IS(&t[2], "hash");
    for (p = t[2].p, end = t[2].p + t[2].len; !all && p < end;) {
        char *next;
        long  id = strtol(p, &next, 10);

        if (next == p || id < 1 || id > 63 || (next < end && *next != ',')) {
            OUT_LIT(c, "CLIENT_ERROR bad class id\r\n");
            return;
        }
        one = one || id == 1;
        p = next < end ? next + 1 : end;
    }
    if (!all && !one) {
        OUT_LIT(c, "END\r\n");
        return;
    }
    dump_start(c, false, 0);
}

/* ---- shutdown --------------------------------------------------------------- */

/* shutdown [graceful]: with -A, as SIGTERM (finish replies, exit 0); the
 * connection is closed without a reply, as memcached's. Without -A,
 * memcached's refusal. */
static enum proto_status
shutdown_cmd(struct conn *c, const struct token *t, int ntok)
{
    if (!c->w->srv->settings.shutdown_enabled) {
        OUT_LIT(c, "ERROR: shutdown not enabled\r\n");
        return PROTO_MORE;
    }
    if (ntok > 2 || (ntok == 2 && !TOK_IS(&t[1], "graceful"))) {
        OUT_LIT(c, "CLIENT_ERROR invalid shutdown mode\r\n");
        return PROTO_MORE;
    }
    log_msg(LOG_NOTICE, "shutdown command: shutting down");
    kill(getpid(), SIGTERM);
    return PROTO_QUIT;
}

/* ---- cache_memlimit ------------------------------------------------------- */

/* cache_memlimit <megabytes> [noreply]: the store's limit (and -m as stats
 * show it) changed while serving, with memcached's replies. */
static void
cache_memlimit(struct conn *c, const struct token *t, int ntok)
{
    struct server *srv = c->w->srv;
    uint64_t       mb;
    bool           noreply = ntok == 3 && TOK_IS(&t[2], "noreply");

    if ((ntok != 2 && !noreply) || !proto_tok_u64(&t[1], &mb)) {
        OUT_LIT(c, "ERROR\r\n");
        return;
    }
    if (mb < 8) {
        if (!noreply) {
            OUT_LIT(c, "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n");
        }
        return;
    }
    if (mb > 1000000000) {
        if (!noreply) {
            OUT_LIT(c, "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n");
        }
        return;
    }
    store_set_mem_limit(srv->store, (size_t)mb * 1024 * 1024);
    __atomic_store_n(&srv->settings.maxbytes, (size_t)mb * 1024 * 1024, __ATOMIC_RELAXED);
    log_msg(LOG_NOTICE, "cache_memlimit: the memory limit is now %" PRIu64 " MiB", mb);
    if (!noreply) {
        OUT_LIT(c, "OK\r\n");
    }
}

/* ---- config get cluster (ElastiCache auto-discovery) ------------------- */

/* "host|ip|port" of one member address "host:port" or "[v6]:port": the
 * ip is the host when that is a literal address, else empty (the client
 * resolves the name). Appended to out at *o (out has room for it). */
static void
discovery_entry(const char *addr, char *out, size_t *o)
{
    const char *colon = strrchr(addr, ':');
    char        host[RING_ADDR_MAX + 1];
    size_t      hlen;
    uint8_t     bin[16];
    bool        literal;

    if (colon == NULL) {
        return;
    }
    hlen = (size_t)(colon - addr);
    if (addr[0] == '[' && hlen >= 2) {
        memcpy(host, addr + 1, hlen - 2);
        host[hlen - 2] = '\0';
    } else {
        memcpy(host, addr, hlen);
        host[hlen] = '\0';
    }
    literal = inet_pton(AF_INET, host, bin) == 1 || inet_pton(AF_INET6, host, bin) == 1;
    *o += (size_t)sprintf(out + *o, "%s%s|%s|%s", *o > 0 ? " " : "", host, literal ? host : "",
                          colon + 1);
}

/* config get cluster: "CONFIG cluster 0 <bytes>", then "<epoch>\n<members
 * as host|ip|port, space separated>\n", "\r\nEND". A node without a
 * membership names itself at version 0. */
static void
config_get_cluster(struct conn *c)
{
    struct server             *srv = c->w->srv;
    const struct cluster_view *v = srv->cluster != NULL ? cluster_view(srv->cluster) : NULL;
    const struct ring_members *m = v != NULL && v->ring != NULL ? ring_members(v->ring) : NULL;
    size_t                     n = m != NULL ? m->n_nodes : 1, i, o = 0;
    char                      *nodes = malloc(n * (2 * RING_ADDR_MAX + 8) + 1);
    char                       self[RING_ADDR_MAX + 16], head[64];

    if (nodes == NULL) {
        OUT_LIT(c, "SERVER_ERROR out of memory\r\n");
        return;
    }
    nodes[0] = '\0';
    if (m != NULL) {
        for (i = 0; i < m->n_nodes; i++) {
            discovery_entry(m->nodes[i].addr, nodes, &o);
        }
    } else {
        snprintf(self, sizeof(self), strchr(srv->settings.listen_addr, ':') ? "[%s]:%d" : "%s:%d",
                 srv->settings.listen_addr, srv->bound_port);
        discovery_entry(self, nodes, &o);
    }
    snprintf(head, sizeof(head), "%" PRIu64 "\n", v != NULL ? v->epoch : 0);
    proto_reply_printf(c, "CONFIG cluster 0 %zu\r\n%s", strlen(head) + o + 1, head);
    conn_out_add(c, nodes, o);
    OUT_LIT(c, "\n\r\nEND\r\n");
    free(nodes);
}

/* See proto_admin.h. */
bool
proto_admin(struct conn *c, const struct token *t, int ntok, enum proto_status *st)
{
    *st = PROTO_MORE;
    if (TOK_IS(&t[0], "lru_crawler")) {
        lru_crawler(c, t, ntok);
    } else if (TOK_IS(&t[0], "shutdown")) {
        *st = shutdown_cmd(c, t, ntok);
    } else if (TOK_IS(&t[0], "cache_memlimit")) {
        cache_memlimit(c, t, ntok);
    } else if (TOK_IS(&t[0], "watch")) {
        watch_start(c, t, ntok);
    } else if (TOK_IS(&t[0], "config") && ntok >= 2) {
        if (ntok == 3 && TOK_IS(&t[1], "get") && TOK_IS(&t[2], "cluster")) {
            config_get_cluster(c);
        } else {
            OUT_LIT(c, "ERROR\r\n");
        }
    } else {
        return false;
    }
    return true;
}
