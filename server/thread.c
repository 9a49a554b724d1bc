/*
 * thread: accept loop and worker threads (memcached's thread.c model).
 * Lock order: a worker's q_lock and conns_lock are leaves; stats_lock and auth_lock are
 * leaves. Counters shared between threads (curr_conns, total_conns) are
 * atomics.
 */
#include "config.h"
#include "server/thread.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "lib/util.h"
#include "server/authfile.h"
#include "server/cluster.h"
#include "server/conn.h"
#include "server/hotkeys.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/notify.h"
#include "server/peer_tls.h"
#include "server/tls.h"

#define SHUTDOWN_FLUSH_SECS 5 /* bound on flushing replies at exit */
static const char TOO_MANY[] = "ERROR Too many open connections\r\n";

/* Block or unblock SIGTERM, SIGINT and SIGHUP (-Z's and -Y's reload) in
 * the calling thread. */
static void
block_stop_signals(int how)
{
    sigset_t set;

    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(how, &set, NULL);
}

/* A test hook: RC_TEST_CLOCK_SHIFT=N runs the store's clock (its CAS
 * clock, expiry, the "time" stat) N seconds off the wall, as on a node
 * whose clock is skewed (tests/it/test_flush_order.py). */
static void
test_clock_shift(struct store *s)
{
    const char *n = getenv("RC_TEST_CLOCK_SHIFT");

    if (n != NULL) {
        store_clock_shift(s, strtoll(n, NULL, 10));
    }
}

/* Create the store and the workers' bases; see thread.h. */
struct server *
server_new(const struct settings *settings)
{
    struct store_config cfg;
    struct server      *srv = calloc(1, sizeof(*srv));
    int                 i;

    if (srv == NULL) {
        return NULL;
    }
    /* Until server_run's loop takes them, SIGTERM and SIGINT wait instead
     * of killing the node without its clean exit (pid file, unix socket).
     * They are blocked here, before the first thread (the store's sweeper)
     * starts, so that every thread inherits the block: a signal goes to
     * any thread that does not block it, and one started unblocked would
     * take the default action (seen: SIGTERM just after listening killed
     * 5 runs in 200). */
    block_stop_signals(SIG_BLOCK);
    srv->settings = *settings;
    srv->listen_fd = -1;
    srv->stall_timeout_ms = CONN_STALL_TIMEOUT_MS;
    pthread_mutex_init(&srv->stats_lock, NULL);
    pthread_mutex_init(&srv->barrier_lock, NULL);
    pthread_mutex_init(&srv->auth_lock, NULL);
    pthread_cond_init(&srv->barrier_cond, NULL);
    memset(&cfg, 0, sizeof(cfg));
    cfg.mem_limit = settings->maxbytes;
    cfg.item_size_max = settings->item_size_max;
    cfg.sweeper = true;
    cfg.compact = !settings->store_classic;
    srv->store = store_new(&cfg);
    if (srv->store == NULL) {
        log_msg(LOG_ERR, "cannot create the store");
        goto fail;
    }
    test_clock_shift(srv->store);
    srv->started = store_now(srv->store);
    if (settings->ssl_enabled) {
        char err[1536];

        srv->tls = tls_server_new(settings, err, sizeof(err));
        if (srv->tls == NULL) {
            log_msg(LOG_ERR, "-Z: %s", err);
            goto fail;
        }
    }
    srv->workers = calloc((size_t)settings->num_threads, sizeof(*srv->workers));
    if (srv->workers == NULL) {
        goto fail;
    }
    for (i = 0; i < settings->num_threads; i++) {
        struct worker *w = &srv->workers[i];

        w->srv = srv;
        w->id = i;
        w->notify_fd[0] = w->notify_fd[1] = -1;
        pthread_mutex_init(&w->q_lock, NULL);
        pthread_mutex_init(&w->conns_lock, NULL);
        srv->nworkers++;
        w->base = event_base_new();
        if (w->base == NULL) {
            log_msg(LOG_ERR, "cannot create an event base");
            goto fail;
        }
        if (pipe2(w->notify_fd, O_NONBLOCK | O_CLOEXEC) < 0) {
            log_msg(LOG_ERR, "pipe: %s", strerror(errno));
            goto fail;
        }
        if (settings->hotkeys_sample > 0) {
            w->hot = hotkeys_new(settings->hotkeys_sample, settings->hotkeys_decay_s);
            if (w->hot == NULL) {
                goto fail;
            }
        }
    }
    return srv;
fail:
    server_free(srv);
    return NULL;
}

/* Make room for -c connections plus our own descriptors (listeners,
 * wake-up pipes, epoll, files), as memcached does; up to the hard limit. */
static void
raise_fd_limit(const struct server *srv)
{
    rlim_t        want = (rlim_t)srv->settings.maxconns + 64 + 4 * (rlim_t)srv->nworkers;
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want) {
        return;
    }
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want) {
        log_msg(LOG_INFO,
                "open files limited to %lu: fewer than -c %d connections "
                "may be accepted",
                (unsigned long)rl.rlim_cur, srv->settings.maxconns);
    }
}

/* See thread.h. */
int
listen_tcp(const char *addr, int port, int backlog, const char *what)
{
    struct addrinfo hints, *res = NULL, *ai;
    char            portstr[16];
    int             fd = -1, one = 1, rc;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    snprintf(portstr, sizeof(portstr), "%d", port);
    rc = getaddrinfo(addr, portstr, &hints, &res);
    if (rc != 0) {
        log_msg(LOG_ERR, "%s %s: %s", what, addr, gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, backlog) == 0) {
            break;
        }
        rc = errno;
        close(fd);
        fd = -1;
        errno = rc;
    }
    freeaddrinfo(res);
    if (fd < 0) {
        log_msg(LOG_ERR, "cannot listen on %s %s:%d: %s", what, addr, port, strerror(errno));
    }
    return fd;
}

/* True when something accepts connections on the unix socket at sa. */
static bool
unix_socket_live(const struct sockaddr_un *sa)
{
    int  fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    bool live;

    if (fd < 0) {
        return false;
    }
    live = connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) == 0 || errno == EAGAIN;
    close(fd);
    return live;
}

/*
 * -s: a non-blocking unix stream socket at path with the permissions mask
 * (memcached's -a). A socket file nobody listens on is a leftover and is
 * replaced, as memcached does; one that answers is another server's. The
 * umask around bind gives the file its mode from the start. The fd, or -1
 * (logged).
 */
static int
listen_unix(const char *path, int mask, int backlog)
{
    struct sockaddr_un sa;
    struct stat        st;
    mode_t             old;
    int                fd, rc;

    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        log_msg(LOG_ERR, "-s %s: the path is too long for a unix socket", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        if (unix_socket_live(&sa)) {
            log_msg(LOG_ERR, "cannot listen on unix socket %s: another server is listening on it",
                    path);
            return -1;
        }
        unlink(path);
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        log_msg(LOG_ERR, "cannot listen on unix socket %s: %s", path, strerror(errno));
        return -1;
    }
    old = umask((mode_t)(~mask & 0777));
    rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (rc < 0 || listen(fd, backlog) < 0) {
        log_msg(LOG_ERR, "cannot listen on unix socket %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* Bind and listen; see thread.h. */
int
server_listen(struct server *srv)
{
    struct sockaddr_storage ss;
    socklen_t               sl = sizeof(ss);
    int                     fd;

    raise_fd_limit(srv);
    if (srv->settings.socket_path[0] != '\0') {
        /* As memcached: -s replaces the TCP port. */
        fd = listen_unix(srv->settings.socket_path, srv->settings.socket_mask,
                         srv->settings.backlog);
        if (fd < 0) {
            return -1;
        }
        srv->listen_fd = fd;
        srv->bound_port = 0;
        return 0;
    }
    fd = listen_tcp(srv->settings.listen_addr, srv->settings.port, srv->settings.backlog,
                    "client port");
    if (fd < 0) {
        return -1;
    }
    srv->listen_fd = fd;
    srv->bound_port = srv->settings.port;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
        if (ss.ss_family == AF_INET) {
            srv->bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            srv->bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    return 0;
}

/* A worker's connection closed: count it, and end a draining worker. */
void
worker_conn_closed(struct worker *w)
{
    __atomic_sub_fetch(&w->srv->curr_conns, 1, __ATOMIC_RELAXED);
    if (w->shutting_down && w->nconns == 0) {
        event_base_loopexit(w->base, NULL);
    }
}

/* The worker is done (its loop returned, or it never ran): close every
 * connection, then let each tenant free what it keeps for the worker. */
static void
worker_release(struct worker *w)
{
    const struct worker_tenant *const *t;

    w->shutting_down = true;
    while (w->conns != NULL) {
        conn_close(w->conns);
    }
    for (t = worker_tenants; *t != NULL; t++) {
        if ((*t)->worker_free != NULL) {
            (*t)->worker_free(w);
        }
    }
}

/* Shutdown deadline for a worker: stop flushing, leave the loop. */
static void
worker_stop_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    event_base_loopexit(w->base, NULL);
}

/* Start draining: every connection stops reading and closes once its
 * replies are out, bounded by SHUTDOWN_FLUSH_SECS. */
static void
worker_begin_shutdown(struct worker *w)
{
    struct timeval tv = { SHUTDOWN_FLUSH_SECS, 0 };
    struct conn   *c, *next;

    if (w->shutting_down) {
        return;
    }
    w->shutting_down = true;
    for (c = w->conns; c != NULL; c = next) {
        next = c->next;
        conn_shutdown(c);
    }
    if (w->nconns == 0) {
        event_base_loopexit(w->base, NULL);
        return;
    }
    w->stop_timer = evtimer_new(w->base, worker_stop_timer_cb, w);
    if (w->stop_timer == NULL || evtimer_add(w->stop_timer, &tv) < 0) {
        event_base_loopexit(w->base, NULL);
    }
}

/* Wake-up from the accept thread: adopt queued sockets, or shut down. */
static void
worker_notify_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker          *w = arg;
    struct conn_queue_item *q, *next;
    char                    buf[64];
    bool                    stop;

    (void)what;
    while (read(fd, buf, sizeof(buf)) > 0) {
        continue;
    }
    pthread_mutex_lock(&w->q_lock);
    q = w->q_head;
    w->q_head = w->q_tail = NULL;
    stop = w->stop;
    pthread_mutex_unlock(&w->q_lock);
    for (; q != NULL; q = next) {
        struct conn *c;

        next = q->next;
        if (stop) {
            close(q->fd);
            __atomic_sub_fetch(&w->srv->curr_conns, 1, __ATOMIC_RELAXED);
        } else if ((c = conn_new(w, q->fd)) == NULL) {
            close(q->fd);
            __atomic_sub_fetch(&w->srv->curr_conns, 1, __ATOMIC_RELAXED);
        } else if (conn_start(c) < 0) {
            conn_close(c);
        } else {
            log_msg(LOG_DEBUG, "worker %d: new connection %d", w->id, q->fd);
        }
        free(q);
    }
    if (stop) {
        worker_begin_shutdown(w);
    }
    /* Between callbacks: this worker holds no cluster view. */
    pthread_mutex_lock(&w->srv->barrier_lock);
    w->barrier_seen = w->srv->barrier_gen;
    pthread_cond_broadcast(&w->srv->barrier_cond);
    pthread_mutex_unlock(&w->srv->barrier_lock);
}

/* Once a second with -o idle_timeout: advance the worker's idle clock and
 * close the connections idle past the timeout (conn_idle_sweep). */
static void
worker_idle_cb(evutil_socket_t fd, short what, void *arg)
{
    struct worker *w = arg;

    (void)fd;
    (void)what;
    w->idle_now = (uint32_t)(util_now_ms() / 1000);
    if (!w->shutting_down) {
        conn_idle_sweep(w, w->srv->settings.idle_timeout);
    }
}

/* Worker thread body: run the base until shutdown, then close leftovers. */
static void *
worker_main(void *arg)
{
    struct worker *w = arg;

    __atomic_store_n(&w->ktid, (int)syscall(SYS_gettid), __ATOMIC_RELAXED);
    pthread_mutex_lock(&w->srv->barrier_lock);
    w->barrier_live = true;
    w->barrier_seen = w->srv->barrier_gen;
    pthread_mutex_unlock(&w->srv->barrier_lock);
    event_base_dispatch(w->base);
    pthread_mutex_lock(&w->srv->barrier_lock);
    w->barrier_live = false;
    pthread_cond_broadcast(&w->srv->barrier_cond);
    pthread_mutex_unlock(&w->srv->barrier_lock);
    worker_release(w);
    return NULL;
}

/* Grace period over every running worker; see thread.h. */
int
server_barrier(struct server *srv)
{
    struct timespec deadline;
    uint64_t        gen;
    int             i, rc = 0;

    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    pthread_mutex_lock(&srv->barrier_lock);
    gen = ++srv->barrier_gen;
    pthread_mutex_unlock(&srv->barrier_lock);
    for (i = 0; i < srv->nworkers; i++) {
        if (srv->workers[i].notify_fd[1] >= 0 && write(srv->workers[i].notify_fd[1], "b", 1) < 0 &&
            errno != EAGAIN) {
            log_msg(LOG_ERR, "worker wake-up: %s", strerror(errno));
        }
    }
    pthread_mutex_lock(&srv->barrier_lock);
    for (;;) {
        bool waiting = false;

        for (i = 0; i < srv->nworkers; i++) {
            struct worker *w = &srv->workers[i];

            if (w->barrier_live && w->barrier_seen < gen) {
                waiting = true;
            }
        }
        if (!waiting) {
            break;
        }
        if (pthread_cond_timedwait(&srv->barrier_cond, &srv->barrier_lock, &deadline) ==
            ETIMEDOUT) {
            log_msg(LOG_ERR, "worker barrier: no answer in 10 s");
            rc = -1;
            break;
        }
    }
    pthread_mutex_unlock(&srv->barrier_lock);
    return rc;
}

/* Hand a socket to the next worker (round robin). */
static void
dispatch_conn(struct server *srv, int fd)
{
    struct worker          *w = &srv->workers[srv->next_worker];
    struct conn_queue_item *q = malloc(sizeof(*q));

    srv->next_worker = (srv->next_worker + 1) % srv->nworkers;
    if (q == NULL) {
        close(fd);
        __atomic_sub_fetch(&srv->curr_conns, 1, __ATOMIC_RELAXED);
        return;
    }
    q->fd = fd;
    q->next = NULL;
    pthread_mutex_lock(&w->q_lock);
    if (w->q_tail != NULL) {
        w->q_tail->next = q;
    } else {
        w->q_head = q;
    }
    w->q_tail = q;
    pthread_mutex_unlock(&w->q_lock);
    /* A full pipe already holds a pending wake-up, so EAGAIN is fine. */
    if (write(w->notify_fd[1], "c", 1) < 0 && errno != EAGAIN) {
        log_msg(LOG_ERR, "worker wake-up: %s", strerror(errno));
    }
}

/* Re-enable accepting after running out of file descriptors. */
static void
accept_retry_cb(evutil_socket_t fd, short what, void *arg)
{
    struct server *srv = arg;

    (void)fd;
    (void)what;
    event_add(srv->listen_ev, NULL);
}

/* Accept every pending connection. Over -c: say so and close. */
static void
accept_cb(evutil_socket_t lfd, short what, void *arg)
{
    struct server *srv = arg;
    int            one = 1;

    (void)what;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) {
                continue;
            }
            if (errno == EMFILE || errno == ENFILE) {
                struct timeval tv = { 0, 100000 };

                log_msg(LOG_ERR, "accept: %s; pausing accepts", strerror(errno));
                event_del(srv->listen_ev);
                evtimer_add(srv->accept_retry_ev, &tv);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
                log_msg(LOG_ERR, "accept: %s", strerror(errno));
            }
            return;
        }
        if (__atomic_load_n(&srv->curr_conns, __ATOMIC_RELAXED) >= srv->settings.maxconns) {
            if (send(fd, TOO_MANY, sizeof(TOO_MANY) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                log_msg(LOG_DEBUG, "reject: %s", strerror(errno));
            }
            close(fd);
            __atomic_add_fetch(&srv->rejected_conns, 1, __ATOMIC_RELAXED);
            continue;
        }
        if (srv->settings.socket_path[0] == '\0') {
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        __atomic_add_fetch(&srv->curr_conns, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&srv->total_conns, 1, __ATOMIC_RELAXED);
        dispatch_conn(srv, fd);
    }
}

/* SIGTERM/SIGINT: leave the accept loop. */
static void
signal_cb(evutil_socket_t sig, short what, void *arg)
{
    struct server *srv = arg;

    (void)what;
    __atomic_store_n(&srv->stopping, 1, __ATOMIC_RELEASE);
    notify_stopping();
    log_msg(LOG_INFO, "signal %d: shutting down", (int)sig);
    event_base_loopbreak(srv->main_base);
}

/* Refresh every TLS context; see thread.h. */
int
server_refresh_certs(struct server *srv, char *err, size_t errlen)
{
    struct peer_tls *peer = cluster_peer_tls(srv->cluster);
    SSL_CTX         *data = NULL, *accept = NULL, *connect = NULL, *metrics = NULL;

    /* The client port's first: with -Z a bad file gets memcached's wording. */
    if (srv->tls != NULL && (data = tls_server_build(srv->tls, err, errlen)) == NULL) {
        return -1;
    }
    if (peer != NULL && peer_tls_build(peer, &accept, &connect, err, errlen) < 0) {
        SSL_CTX_free(data);
        return -1;
    }
    if (metrics_tls_build(srv->metrics, &metrics, err, errlen) < 0) {
        SSL_CTX_free(data);
        SSL_CTX_free(accept);
        SSL_CTX_free(connect);
        return -1;
    }
    if (srv->tls == NULL && peer == NULL && metrics == NULL) {
        snprintf(err, errlen, "TLS not enabled");
        return -2;
    }
    if (peer != NULL) {
        peer_tls_install(peer, accept, connect);
    }
    if (srv->tls != NULL) {
        tls_server_install(srv->tls, data);
    }
    metrics_tls_install(srv->metrics, metrics);
    return 0;
}

/* SIGHUP: every tenant's reload hook (with -Y, proto_auth_reload re-reads
 * the users); with -Z or --cluster-tls: refresh_certs from the same files.
 * A failure keeps what is in use. A node with nothing to reload logs so
 * and goes on (memcached too survives it). systemd hears RELOADING, then
 * READY. */
static void
sighup_cb(evutil_socket_t sig, short what, void *arg)
{
    struct server                     *srv = arg;
    const struct worker_tenant *const *t;
    char                               err[1536];

    (void)sig;
    (void)what;
    notify_reloading();
    for (t = worker_tenants; *t != NULL; t++) {
        if ((*t)->reload != NULL) {
            (*t)->reload(srv);
        }
    }
    switch (server_refresh_certs(srv, err, sizeof(err))) {
    case -2: /* no TLS */
        if (srv->auth == NULL) {
            log_msg(LOG_NOTICE, "SIGHUP: nothing to reload (no -Y, -Z, --cluster-tls or "
                                "--metrics-tls-cert); ignored");
        }
        break;
    case -1:
        log_msg(LOG_ERR, "SIGHUP: certificates not reloaded, keeping the old ones: %s", err);
        break;
    default:
        log_msg(LOG_NOTICE, "SIGHUP: certificates reloaded");
    }
    notify_ready("serving");
}

/* Run until a signal; see thread.h. */
int
server_run(struct server *srv)
{
    int i, rc = 0;

    srv->main_base = event_base_new();
    if (srv->main_base == NULL) {
        return -1;
    }
    srv->listen_ev =
        event_new(srv->main_base, srv->listen_fd, EV_READ | EV_PERSIST, accept_cb, srv);
    srv->accept_retry_ev = evtimer_new(srv->main_base, accept_retry_cb, srv);
    srv->sigterm_ev = evsignal_new(srv->main_base, SIGTERM, signal_cb, srv);
    srv->sigint_ev = evsignal_new(srv->main_base, SIGINT, signal_cb, srv);
    if (srv->listen_ev == NULL || srv->accept_retry_ev == NULL || srv->sigterm_ev == NULL ||
        srv->sigint_ev == NULL || event_add(srv->sigterm_ev, NULL) < 0 ||
        event_add(srv->sigint_ev, NULL) < 0) {
        return -1;
    }
    /* Always taken: its default action would kill the node. */
    srv->sighup_ev = evsignal_new(srv->main_base, SIGHUP, sighup_cb, srv);
    if (srv->sighup_ev == NULL || event_add(srv->sighup_ev, NULL) < 0) {
        return -1;
    }

    /* Workers never take the signals; the main thread's base does. */
    block_stop_signals(SIG_BLOCK);
    for (i = 0; i < srv->nworkers; i++) {
        struct worker *w = &srv->workers[i];

        w->notify_ev =
            event_new(w->base, w->notify_fd[0], EV_READ | EV_PERSIST, worker_notify_cb, w);
        w->idle_now = (uint32_t)(util_now_ms() / 1000);
        if (srv->settings.idle_timeout > 0) {
            struct timeval sec = { 1, 0 };

            w->idle_ev = event_new(w->base, -1, EV_PERSIST, worker_idle_cb, w);
            if (w->idle_ev == NULL || event_add(w->idle_ev, &sec) < 0) {
                log_msg(LOG_ERR, "cannot start worker %d's idle timer", i);
                rc = -1;
                break;
            }
        }
        if (w->notify_ev == NULL || event_add(w->notify_ev, NULL) < 0 ||
            pthread_create(&w->tid, NULL, worker_main, w) != 0) {
            log_msg(LOG_ERR, "cannot start worker %d", i);
            rc = -1;
            break;
        }
        w->started = true;
    }
    /* The handlers are in: a signal that came since server_listen is
     * delivered now, to the loop. */
    block_stop_signals(SIG_UNBLOCK);

    if (rc == 0 && event_add(srv->listen_ev, NULL) == 0) {
        if (srv->settings.socket_path[0] != '\0') {
            log_msg(LOG_INFO, "listening on unix socket %s", srv->settings.socket_path);
        } else {
            log_msg(LOG_INFO, "listening on %s:%d", srv->settings.listen_addr, srv->bound_port);
        }
        notify_ready("serving");
        event_base_dispatch(srv->main_base);
    }

    /* Stop accepting, then let every worker flush and exit. */
    event_del(srv->listen_ev);
    event_del(srv->accept_retry_ev);
    close(srv->listen_fd);
    srv->listen_fd = -1;
    for (i = 0; i < srv->nworkers; i++) {
        struct worker *w = &srv->workers[i];

        if (!w->started) {
            continue;
        }
        pthread_mutex_lock(&w->q_lock);
        w->stop = true;
        pthread_mutex_unlock(&w->q_lock);
        if (write(w->notify_fd[1], "s", 1) < 0 && errno != EAGAIN) {
            log_msg(LOG_ERR, "worker wake-up: %s", strerror(errno));
        }
    }
    for (i = 0; i < srv->nworkers; i++) {
        if (srv->workers[i].started) {
            pthread_join(srv->workers[i].tid, NULL);
            srv->workers[i].started = false;
        }
    }
    return rc;
}

/* Free a worker's pooled buffers. */
static void
worker_free_pools(struct worker *w)
{
    struct out_chunk *ch;

    while (w->nrbuf_pool > 0) {
        free(w->rbuf_pool[--w->nrbuf_pool]);
    }
    while ((ch = w->chunk_pool) != NULL) {
        w->chunk_pool = ch->next;
        free(ch);
    }
    while ((ch = w->ichunk_pool) != NULL) {
        w->ichunk_pool = ch->next;
        free(ch);
    }
    while ((ch = w->hold_pool) != NULL) {
        w->hold_pool = ch->next;
        free(ch);
    }
    w->nchunk_pool = w->nichunk_pool = w->nhold_pool = 0;
}

/* Free everything; see thread.h. */
void
server_free(struct server *srv)
{
    int i;

    if (srv == NULL) {
        return;
    }
    for (i = 0; i < srv->nworkers; i++) {
        struct worker          *w = &srv->workers[i];
        struct conn_queue_item *q;

        worker_release(w);
        hotkeys_free(w->hot);
        while ((q = w->q_head) != NULL) {
            w->q_head = q->next;
            close(q->fd);
            free(q);
        }
        if (w->notify_ev != NULL) {
            event_free(w->notify_ev);
        }
        if (w->idle_ev != NULL) {
            event_free(w->idle_ev);
        }
        if (w->stop_timer != NULL) {
            event_free(w->stop_timer);
        }
        if (w->base != NULL) {
            event_base_free(w->base);
        }
        if (w->notify_fd[0] >= 0) {
            close(w->notify_fd[0]);
        }
        if (w->notify_fd[1] >= 0) {
            close(w->notify_fd[1]);
        }
        worker_free_pools(w);
        pthread_mutex_destroy(&w->q_lock);
        pthread_mutex_destroy(&w->conns_lock);
    }
    free(srv->workers);
    if (srv->listen_ev != NULL) {
        event_free(srv->listen_ev);
    }
    if (srv->accept_retry_ev != NULL) {
        event_free(srv->accept_retry_ev);
    }
    if (srv->sigterm_ev != NULL) {
        event_free(srv->sigterm_ev);
    }
    if (srv->sigint_ev != NULL) {
        event_free(srv->sigint_ev);
    }
    if (srv->sighup_ev != NULL) {
        event_free(srv->sighup_ev);
    }
    if (srv->main_base != NULL) {
        event_base_free(srv->main_base);
    }
    if (srv->listen_fd >= 0) {
        close(srv->listen_fd);
    }
    if (srv->store != NULL) {
        store_free(srv->store);
    }
    tls_server_free(srv->tls);
    authfile_free(srv->auth_reloaded);
    pthread_mutex_destroy(&srv->auth_lock);
    pthread_mutex_destroy(&srv->stats_lock);
    pthread_mutex_destroy(&srv->barrier_lock);
    pthread_cond_destroy(&srv->barrier_cond);
    free(srv);
}

/* Raw sum of every worker's counters. */
static void
sum_workers(struct server *srv, struct thread_stats *out)
{
    int i;

    memset(out, 0, sizeof(*out));
    for (i = 0; i < srv->nworkers; i++) {
        stats_accumulate(out, &srv->workers[i].stats);
    }
}

/* Counters since the last reset. */
void
server_thread_stats(struct server *srv, struct thread_stats *out)
{
    struct thread_stats raw;

    sum_workers(srv, &raw);
    pthread_mutex_lock(&srv->stats_lock);
    stats_subtract(out, &raw, &srv->base_thread);
    pthread_mutex_unlock(&srv->stats_lock);
}

/* Merge every worker's hot-key sketch; see thread.h. */
size_t
server_hotkeys(struct server *srv, struct hotkeys_entry *out, size_t max)
{
    size_t                 nw = (size_t)srv->nworkers, n = 0, got = 0, i;
    struct hotkeys_entry **snaps = calloc(nw, sizeof(*snaps));
    size_t                *counts = calloc(nw, sizeof(*counts));
    uint64_t              *mins = calloc(nw, sizeof(*mins));

    if (snaps == NULL || counts == NULL || mins == NULL) {
        goto done;
    }
    for (i = 0; i < nw; i++) {
        if (srv->workers[i].hot == NULL) {
            continue;
        }
        snaps[n] = malloc(HOTKEYS_K * sizeof(**snaps));
        if (snaps[n] == NULL) {
            goto done;
        }
        counts[n] = hotkeys_snapshot(srv->workers[i].hot, snaps[n], &mins[n]);
        n++;
    }
    got = hotkeys_merge(snaps, counts, mins, n, out, max);
done:
    for (i = 0; snaps != NULL && i < n; i++) {
        free(snaps[i]);
    }
    free(snaps);
    free(counts);
    free(mins);
    return got;
}

/* a - b, never below zero. */
static uint64_t
since(uint64_t a, uint64_t b)
{
    return a >= b ? a - b : 0;
}

/* Store figures (the store zeroes its own cumulative ones on reset). */
void
server_store_stats(struct server *srv, struct store_stats *out)
{
    store_get_stats(srv->store, out);
}

/* Connection totals since the last reset. */
void
server_conn_totals(struct server *srv, uint64_t *total, uint64_t *rejected)
{
    uint64_t t = __atomic_load_n(&srv->total_conns, __ATOMIC_RELAXED);
    uint64_t r = __atomic_load_n(&srv->rejected_conns, __ATOMIC_RELAXED);

    pthread_mutex_lock(&srv->stats_lock);
    *total = since(t, srv->base_total_conns);
    *rejected = since(r, srv->base_rejected_conns);
    pthread_mutex_unlock(&srv->stats_lock);
}

/* `stats reset`: the current totals become the zero point. */
void
server_stats_reset(struct server *srv)
{
    struct thread_stats raw;

    sum_workers(srv, &raw);
    store_reset_stats(srv->store);
    pthread_mutex_lock(&srv->stats_lock);
    srv->base_thread = raw;
    srv->base_total_conns = __atomic_load_n(&srv->total_conns, __ATOMIC_RELAXED);
    srv->base_rejected_conns = __atomic_load_n(&srv->rejected_conns, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&srv->stats_lock);
}
