/*
 * storewatch: see storewatch.h. The thread owns the store handle; the
 * cluster thread owns everything else. Between them: a mutex-guarded
 * mailbox holding the newest active membership read, and a pipe whose
 * byte wakes the cluster thread's event to take it.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "lib/mstore.h"
#include "lib/util.h"
#include "ring/ring.h"
#include "server/log.h"
#include "server/storewatch.h"

#define RETRY_MIN_MS 250 /* the store failed: try again after this, doubling */
#define RETRY_MAX_MS 4000
/* The node's liveness lease (a store with leases: etcd): alive/ID lives
 * while the node keeps it alive, every KEEP_MS (also the longest single
 * wait for a store write); LEASE_TTL_S after the last keepalive etcd
 * deletes it, and `ringctl watch` may fail the node over. */
#define LEASE_TTL_S 3
#define KEEP_MS     1000

struct storewatch {
    char                *spec;
    char                *node_id;
    char                 alive[128]; /* "boot HEX\n": the value of alive/ID */
    uint64_t             lease;      /* 0: none yet, or it expired */
    int64_t              kept_ms;    /* the last keepalive (or grant) */
    struct mstore       *st;
    struct event_base   *base;
    struct event        *ev;
    storewatch_fn        fn;
    void                *arg;
    pthread_t            tid;
    bool                 started;
    int                  stop; /* atomic */
    int                  pipe[2];
    pthread_mutex_t      mu;
    struct ring_members *mail; /* the newest active read, not yet taken */
};

/* Sleep ms in slices, returning early when stop is raised. */
static void
nap(struct storewatch *w, int ms)
{
    while (ms > 0 && !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        int             slice = ms < 100 ? ms : 100;
        struct timespec ts = { 0, (long)slice * 1000 * 1000 };

        nanosleep(&ts, NULL);
        ms -= slice;
    }
}

/* Read active.members: the parsed membership in *m (NULL when the store
 * has none), its revision in *rev. 0, or -1 with err. */
static int
read_active(struct storewatch *w, struct ring_members **m, uint64_t *rev, char *err, size_t errlen)
{
    struct mstore_record rec;
    int                  rc = mstore_get(w->st, "active.members", &rec, err, errlen);

    *m = NULL;
    *rev = 0;
    if (rc == MSTORE_ENOENT) {
        return 0;
    }
    if (rc != MSTORE_OK) {
        return -1;
    }
    *rev = rec.rev;
    rc = ring_members_parse(rec.text, rec.len, rec.where, m, err, errlen);
    mstore_record_clear(&rec);
    return rc == 0 ? 0 : -1;
}

/* Hand m to the cluster thread (replacing an untaken older one). */
static void
post(struct storewatch *w, struct ring_members *m)
{
    struct ring_members *old;

    pthread_mutex_lock(&w->mu);
    old = w->mail;
    w->mail = m;
    pthread_mutex_unlock(&w->mu);
    ring_members_free(old);
    if (write(w->pipe[1], "m", 1) < 0 && errno != EAGAIN) {
        log_msg(LOG_ERR, "store watch: wake-up: %s", strerror(errno));
    }
}

/* Keep the liveness lease: grant one and write alive/ID on it, or renew
 * it every KEEP_MS (an expired one is granted again). 0, or -1 with err. */
static int
lease_tick(struct storewatch *w, char *err, size_t errlen)
{
    char name[160];
    int  rc;

    if (!mstore_has_leases(w->st) || (w->lease != 0 && util_now_ms() - w->kept_ms < KEEP_MS)) {
        return 0;
    }
    if (w->lease != 0) {
        rc = mstore_lease(w->st, &w->lease, LEASE_TTL_S, err, errlen);
        if (rc == MSTORE_OK) {
            w->kept_ms = util_now_ms();
            return 0;
        }
        if (rc != MSTORE_ENOENT) {
            return -1;
        }
        log_msg(LOG_ERR, "store %s: this node's liveness lease expired: taking a new one", w->spec);
    }
    if (mstore_lease(w->st, &w->lease, LEASE_TTL_S, err, errlen) != MSTORE_OK) {
        return -1;
    }
    snprintf(name, sizeof(name), "alive/%s", w->node_id);
    if (mstore_put_leased(w->st, name, w->alive, strlen(w->alive), w->lease, err, errlen) !=
        MSTORE_OK) {
        w->lease = 0;
        return -1;
    }
    w->kept_ms = util_now_ms();
    log_msg(LOG_INFO, "store %s: %s held by a %d s lease", w->spec, name, LEASE_TTL_S);
    return 0;
}

/* The store failed (err): say so once until it answers again. */
static void
store_down(struct storewatch *w, bool *down, const char *err)
{
    if (!*down) {
        log_msg(LOG_ERR,
                "store %s: %s: serving on at the epoch this node has; watching again when the "
                "store answers",
                w->spec, err);
        *down = true;
    }
}

static void *
watch_main(void *arg)
{
    struct storewatch *w = arg;
    uint64_t           seen = 0, waited = 0; /* active's revision, the store's */
    int                backoff = RETRY_MIN_MS;
    bool               down = false;
    char               err[1024];

    while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
        struct ring_members *m = NULL;
        uint64_t             rev = 0, now = 0;
        int                  rc;

        if (read_active(w, &m, &rev, err, sizeof(err)) < 0 || lease_tick(w, err, sizeof(err)) < 0) {
            ring_members_free(m);
            m = NULL;
            store_down(w, &down, err);
            nap(w, backoff);
            backoff = backoff * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : backoff * 2;
            continue;
        }
        if (down) {
            log_msg(LOG_NOTICE, "store %s answers again: watching it", w->spec);
            down = false;
        }
        backoff = RETRY_MIN_MS;
        if (m != NULL && rev != seen) {
            post(w, m);
        } else {
            ring_members_free(m);
        }
        seen = rev;
        /* Wait for the next write (any record: a commit writes active),
         * past the last store revision seen: writes of other records
         * (pending, an admin's liveness) do not wake it again. */
        while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
            if (lease_tick(w, err, sizeof(err)) < 0) {
                store_down(w, &down, err);
                nap(w, backoff);
                break;
            }
            rc = mstore_wait(w->st, rev > waited ? rev : waited, KEEP_MS, &now, err, sizeof(err));
            if (rc == MSTORE_OK) {
                waited = now > waited ? now : waited;
                break;
            }
            if (rc != MSTORE_ENOENT) {
                store_down(w, &down, err);
                nap(w, backoff);
                break;
            }
        }
    }
    return NULL;
}

/* The cluster thread: take the mailbox, call fn. */
static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
    struct storewatch   *w = arg;
    struct ring_members *m;
    char                 buf[64];

    (void)what;
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
    pthread_mutex_lock(&w->mu);
    m = w->mail;
    w->mail = NULL;
    pthread_mutex_unlock(&w->mu);
    if (m != NULL) {
        w->fn(w->arg, m);
        ring_members_free(m);
    }
}

struct storewatch *
storewatch_new(struct event_base *base, const char *spec, const char *node_id, uint64_t boot_id,
               storewatch_fn fn, void *arg, char *err, size_t errlen)
{
    struct storewatch *w = calloc(1, sizeof(*w));

    if (w == NULL) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    w->node_id = strdup(node_id);
    snprintf(w->alive, sizeof(w->alive), "boot %016" PRIx64 "\n", boot_id);
    w->pipe[0] = w->pipe[1] = -1;
    pthread_mutex_init(&w->mu, NULL);
    w->base = base;
    w->fn = fn;
    w->arg = arg;
    w->spec = strdup(spec);
    w->st = w->spec != NULL && w->node_id != NULL ? mstore_open(spec, err, errlen) : NULL;
    if (w->st == NULL || pipe2(w->pipe, O_NONBLOCK | O_CLOEXEC) < 0 ||
        (w->ev = event_new(base, w->pipe[0], EV_READ | EV_PERSIST, wake_cb, w)) == NULL ||
        event_add(w->ev, NULL) < 0) {
        if (w->st != NULL) {
            snprintf(err, errlen, "store watch: %s", strerror(errno));
        }
        storewatch_free(w);
        return NULL;
    }
    return w;
}

int
storewatch_start(struct storewatch *w)
{
    if (pthread_create(&w->tid, NULL, watch_main, w) != 0) {
        log_msg(LOG_ERR, "cannot start the store watch thread");
        return -1;
    }
    w->started = true;
    log_msg(LOG_INFO, "watching the membership store %s", w->spec);
    return 0;
}

void
storewatch_free(struct storewatch *w)
{
    if (w == NULL) {
        return;
    }
    if (w->started) {
        __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
        pthread_join(w->tid, NULL);
    }
    if (w->ev != NULL) {
        event_free(w->ev);
    }
    if (w->pipe[0] >= 0) {
        close(w->pipe[0]);
    }
    if (w->pipe[1] >= 0) {
        close(w->pipe[1]);
    }
    ring_members_free(w->mail);
    mstore_close(w->st);
    pthread_mutex_destroy(&w->mu);
    free(w->node_id);
    free(w->spec);
    free(w);
}
