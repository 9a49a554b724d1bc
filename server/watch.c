/*
 * watch: memcached's `watch` log streams (see watch.h). Any worker formats
 * a line and appends it, under one lock, to the buffer of each watcher of
 * that stream; a watcher's own worker moves its buffer into the
 * connection's output every WATCH_TICK_MS (a timer on its event base) and
 * writes it. A watcher that does not read fast enough loses lines (up to
 * WATCH_BUF_MAX are kept), counted and reported in a "skipped" line, as
 * memcached's logger does.
 */
#include "config.h"

#include <event2/event.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "server/conn.h"
#include "server/store.h"
#include "server/thread.h"
#include "server/watch.h"

#define WATCH_BUF_MAX (256u * 1024) /* lines kept per watcher between ticks */
#define WATCH_TICK_MS 50
#define WATCH_LINE    (3 * 250 + 256) /* a key of 250 bytes, the rest of a line */

struct watcher {
    struct conn    *c;
    unsigned        mask;
    char           *buf;
    size_t          len;
    uint64_t        skipped;
    struct event   *tick;
    struct watcher *next;
};

unsigned watch_mask; /* atomic; written under watch_lock */

static pthread_mutex_t watch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watcher *watchers;  /* under watch_lock */
static uint64_t        watch_gid; /* atomic */

/* Recompute watch_mask. Caller holds watch_lock. */
static void
remask(void)
{
    unsigned        m = 0;
    struct watcher *w;

    for (w = watchers; w != NULL; w = w->next) {
        m |= w->mask;
    }
    __atomic_store_n(&watch_mask, m, __ATOMIC_RELAXED);
}

/* Append one line (what: its stream) to every watcher of it. */
static void
emit(unsigned what, const char *line, size_t n)
{
    struct watcher *w;

    pthread_mutex_lock(&watch_lock);
    for (w = watchers; w != NULL; w = w->next) {
        if ((w->mask & what) == 0) {
            continue;
        }
        if (w->len + n > WATCH_BUF_MAX) {
            w->skipped++;
            continue;
        }
        memcpy(w->buf + w->len, line, n);
        w->len += n;
    }
    pthread_mutex_unlock(&watch_lock);
}

/* "ts=SEC.USEC gid=N " as memcached starts each line; returns its length. */
static int
line_head(char *line, size_t cap)
{
    struct timeval tv;

    gettimeofday(&tv, NULL);
    return snprintf(line, cap, "ts=%ld.%ld gid=%" PRIu64 " ", (long)tv.tv_sec, (long)tv.tv_usec,
                    __atomic_add_fetch(&watch_gid, 1, __ATOMIC_RELAXED));
}

void
watch_fetch(const struct conn *c, const char *key, size_t nkey, bool found, uint32_t size)
{
    char line[WATCH_LINE];
    int  n;

    if (!watch_on(WATCH_FETCHERS)) {
        return;
    }
    n = line_head(line, sizeof(line));
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  "type=item_get key=%.*s status=%s clsid=%u cfd=%d size=%" PRIu32 "\n", (int)nkey,
                  key, found ? "found" : "not_found", found ? 1u : 0u, c->fd, found ? size : 0);
    emit(WATCH_FETCHERS, line, (size_t)n);
}

void
watch_stored(const struct conn *c, const struct store_item *it, int op, int r, int64_t now)
{
    static const char *const cmds[] = {
        [STORE_OP_SET] = "set",         [STORE_OP_ADD] = "add",
        [STORE_OP_REPLACE] = "replace", [STORE_OP_APPEND] = "append",
        [STORE_OP_PREPEND] = "prepend", [STORE_OP_CAS] = "cas"
    };
    char line[WATCH_LINE];
    int  n;

    if (!watch_on(WATCH_MUTATIONS) || op < 0 || (size_t)op >= sizeof(cmds) / sizeof(cmds[0])) {
        return;
    }
    n = line_head(line, sizeof(line));
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  "type=item_store key=%.*s status=%s cmd=%s ttl=%" PRId64
                  " clsid=1 cfd=%d size=%" PRIu32 "\n",
                  (int)it->nkey, store_item_key(it),
                  r == STORE_STORED      ? "stored"
                  : r == STORE_EXISTS    ? "exists"
                  : r == STORE_NOT_FOUND ? "not_found"
                                         : "not_stored",
                  cmds[op], it->exptime != 0 && it->exptime > now ? it->exptime - now : 0, c->fd,
                  it->nbytes);
    emit(WATCH_MUTATIONS, line, (size_t)n);
}

void
watch_delete(const struct conn *c, const char *key, size_t nkey, const char *cmd)
{
    char line[WATCH_LINE];
    int  n;

    if (!watch_on(WATCH_DELETIONS)) {
        return;
    }
    n = line_head(line, sizeof(line));
    n += snprintf(line + n, sizeof(line) - (size_t)n,
                  "type=deleted key=%.*s cmd=%s clsid=1 cfd=%d\n", (int)nkey, key, cmd, c->fd);
    emit(WATCH_DELETIONS, line, (size_t)n);
}

/* The watcher's tick, on its connection's worker: move what was logged
 * into the connection's output (while it has room) and write it. */
static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
    struct watcher *w = arg;
    struct conn    *c = w->c;
    char            skipped[96];
    size_t          room;

    (void)fd;
    (void)what;
    if (c->out_bytes >= c->out_cap) {
        return; /* the watcher is not reading: lines pile up, then skip */
    }
    room = c->out_cap - c->out_bytes;
    pthread_mutex_lock(&watch_lock);
    if (w->skipped > 0) {
        int n = snprintf(skipped, sizeof(skipped), "skipped=%" PRIu64 "\n", w->skipped);

        conn_out_add(c, skipped, (size_t)n);
        w->skipped = 0;
    }
    if (w->len > 0 && w->len <= room) {
        conn_out_add(c, w->buf, w->len);
        w->len = 0;
    }
    pthread_mutex_unlock(&watch_lock);
    if (c->out_bytes > 0) {
        /* Write it (this may close c, and with it w: nothing after). */
        conn_event_cb(c->fd, EV_WRITE, c);
    }
}

void
watch_start(struct conn *c, const struct token *t, int ntok)
{
    static const struct {
        const char *name;
        unsigned    bit;
    } streams[] = { { "fetchers", WATCH_FETCHERS },
                    { "mutations", WATCH_MUTATIONS },
                    { "deletions", WATCH_DELETIONS } };
    struct watcher *w;
    unsigned        mask = 0;
    int             i;
    size_t          k;

    for (i = 1; i < ntok; i++) {
        for (k = 0; k < sizeof(streams) / sizeof(streams[0]); k++) {
            if (t[i].len == strlen(streams[k].name) &&
                memcmp(t[i].p, streams[k].name, t[i].len) == 0) {
                mask |= streams[k].bit;
                break;
            }
        }
        if (k == sizeof(streams) / sizeof(streams[0])) {
            REPLY(c, "ERROR");
            return;
        }
    }
    if (c->watcher != NULL || c->fd < 0) {
        REPLY(c, "ERROR");
        return;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL || (w->buf = malloc(WATCH_BUF_MAX)) == NULL ||
        (w->tick = event_new(c->w->base, -1, EV_PERSIST, tick_cb, w)) == NULL) {
        if (w != NULL) {
            free(w->buf);
        }
        free(w);
        REPLY(c, "SERVER_ERROR out of memory");
        return;
    }
    w->c = c;
    w->mask = mask != 0 ? mask : WATCH_FETCHERS;
    c->watcher = w;
    c->pstate = CONN_PS_WATCH;
    event_add(w->tick, &(struct timeval){ 0, WATCH_TICK_MS * 1000 });
    pthread_mutex_lock(&watch_lock);
    w->next = watchers;
    watchers = w;
    remask();
    pthread_mutex_unlock(&watch_lock);
    REPLY(c, "OK");
}

void
watch_detach(struct conn *c)
{
    struct watcher  *w = c->watcher;
    struct watcher **pp;

    if (w == NULL) {
        return;
    }
    pthread_mutex_lock(&watch_lock);
    for (pp = &watchers; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == w) {
            *pp = w->next;
            break;
        }
    }
    remask();
    pthread_mutex_unlock(&watch_lock);
    event_free(w->tick);
    free(w->buf);
    free(w);
    c->watcher = NULL;
}
