/*
 * cport_guard: admission before the Hello on the cluster port (see
 * cport_guard.h and the comment above CPORT_CONNS_MAX in
 * server/cport_internal.h): the pre-auth table and the throttle on failed
 * Hellos. The transport (cport.c) calls it on accept, on a Hello, on its
 * sweep timer and when a connection goes.
 */
#include "config.h"
#include "server/cport_guard.h"

#include <inttypes.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/ioctl.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "lib/util.h"
#include "server/log.h"

/*
 * Failed Hellos (docs/security.md). A source (as source_key) whose Hello
 * carried a wrong token has its later Hellos checked no sooner than a
 * penalty after its previous check: CPORT_AUTH_BASE_MS doubled per
 * consecutive failure, at most CPORT_AUTH_CAP_MS. A throttled Hello is not
 * refused, it waits in its connection (input paused) until its turn, in
 * accept order, so the admin and the peers that share the address (on
 * loopback, behind NAT) still get in: with at most CPORT_PREAUTH_PER_SRC
 * Hellos waiting per source, a correct one is checked within 16 * 160 ms,
 * inside its Hello deadline. A source's failures are forgotten
 * CPORT_AUTH_FORGET_MS after its last one. The table (CPORT_AUTH_SRCS) is
 * bounded: when full, the source whose last failure is oldest gives up its
 * entry.
 */
#define CPORT_AUTH_BASE_MS   10
#define CPORT_AUTH_CAP_MS    160
#define CPORT_AUTH_FORGET_MS 60000

/*
 * Pre-auth table
 */

/* See cport_guard.h. */
void
preauth_add(struct cp_conn *c)
{
    struct cport *cp = c->cp;

    c->preauth = true;
    c->accepted_ms = (uint64_t)util_now_ms();
    TAILQ_INSERT_TAIL(&cp->preauth, c, pa_link);
    cp->npreauth++;
}

/* See cport_guard.h. */
void
preauth_remove(struct cp_conn *c)
{
    struct cport *cp = c->cp;

    if (!c->preauth) {
        return;
    }
    TAILQ_REMOVE(&cp->preauth, c, pa_link);
    c->preauth = false;
    cp->npreauth--;
}
/* See cport_guard.h. */
void
source_key(const struct sockaddr_storage *ss, uint8_t key[CPORT_SRC_LEN])
{
    memset(key, 0, CPORT_SRC_LEN);
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

        if (IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr)) {
            key[0] = AF_INET;
            memcpy(key + 1, s6->sin6_addr.s6_addr + 12, 4);
        } else {
            key[0] = AF_INET6;
            memcpy(key + 1, s6->sin6_addr.s6_addr, 8);
        }
    } else if (ss->ss_family == AF_INET) {
        key[0] = AF_INET;
        memcpy(key + 1, &((const struct sockaddr_in *)ss)->sin_addr, 4);
    }
}

/* See cport_guard.h. */
void
drop_log(struct cport *cp, uint64_t now)
{
    if (cp->n_timed_out + cp->n_evicted + cp->n_refused == 0 ||
        now - cp->drop_log_ms < CPORT_DROP_LOG_MS) {
        return;
    }
    log_msg(LOG_INFO,
            "cluster port: closed %" PRIu64 " connections without a Hello after "
            "%d ms, evicted %" PRIu64 " waiting ones for newer (pre-auth table: %d of %d, "
            "%d per source), refused %" PRIu64 " (%d connections open)",
            cp->n_timed_out, CPORT_HELLO_MS, cp->n_evicted, cp->npreauth, CPORT_PREAUTH_MAX,
            CPORT_PREAUTH_PER_SRC, cp->n_refused, cp->nconns);
    cp->n_timed_out = cp->n_evicted = cp->n_refused = 0;
    cp->drop_log_ms = now;
}

/* Whether pre-auth c has sent us nothing yet (nothing buffered, nothing
 * in the socket), or is closing anyway: the first to evict. A client that
 * connected and sent its Hello at once has it waiting in the socket even
 * when a burst of newer connections is accepted before we read it. */
static bool
preauth_idle(struct cp_conn *c)
{
    int n = 0;

    if (c->closing) {
        return true;
    }
    if (evbuffer_get_length(bufferevent_get_input(c->bev)) > 0) {
        return false;
    }
    return ioctl(bufferevent_getfd(c->bev), FIONREAD, &n) == 0 && n == 0;
}

/* See cport_guard.h. Of the candidates, the oldest idle one
 * (preauth_idle), or the oldest if none is idle. The walk from the oldest
 * usually stops at the first. */
void
preauth_make_room(struct cport *cp, const uint8_t *src)
{
    struct cp_conn *o, *victim = NULL;
    bool            one_src;
    int             same = 0;

    /* At most CPORT_PREAUTH_MAX entries: a walk is cheaper than a map. */
    for (o = TAILQ_FIRST(&cp->preauth); o != NULL; o = TAILQ_NEXT(o, pa_link)) {
        same += memcmp(o->src, src, CPORT_SRC_LEN) == 0;
    }
    one_src = same >= CPORT_PREAUTH_PER_SRC;
    if (!one_src && cp->npreauth < CPORT_PREAUTH_MAX && cp->nconns < CPORT_CONNS_MAX) {
        return;
    }
    for (o = TAILQ_FIRST(&cp->preauth); o != NULL; o = TAILQ_NEXT(o, pa_link)) {
        if (one_src && memcmp(o->src, src, CPORT_SRC_LEN) != 0) {
            continue;
        }
        if (victim == NULL) {
            victim = o; /* the oldest, should none be idle */
        }
        if (preauth_idle(o)) {
            victim = o;
            break;
        }
    }
    if (victim != NULL) {
        cpc_free(victim);
        cp->n_evicted++;
    }
}

/* See cport_guard.h. The table is in accept order, so the walk stops at
 * the first one still in time and costs only what it closes. A pre-auth
 * connection that is closing (its Error frame unread by the other side)
 * goes too. */
void
preauth_sweep(struct cport *cp, uint64_t now)
{
    struct cp_conn *o;

    while ((o = TAILQ_FIRST(&cp->preauth)) != NULL && now - o->accepted_ms >= CPORT_HELLO_MS) {
        cpc_free(o);
        cp->n_timed_out++;
    }
}
/*
 * Failed Hellos
 */

static struct auth_src *
auth_find(struct cport *cp, const uint8_t *src, uint64_t now)
{
    int i;

    for (i = 0; i < CPORT_AUTH_SRCS; i++) {
        struct auth_src *a = &cp->auth[i];

        if (a->used && memcmp(a->src, src, CPORT_SRC_LEN) == 0) {
            if (now - a->last_fail_ms >= CPORT_AUTH_FORGET_MS) {
                a->used = false;
                return NULL;
            }
            return a;
        }
    }
    return NULL;
}

/* The wait after n consecutive failures (n >= 1). */
static uint64_t
auth_penalty_ms(uint32_t n)
{
    uint64_t ms = CPORT_AUTH_BASE_MS;

    while (--n > 0 && ms < CPORT_AUTH_CAP_MS) {
        ms *= 2;
    }
    return ms < CPORT_AUTH_CAP_MS ? ms : CPORT_AUTH_CAP_MS;
}

/* At most one line a second about failed and delayed Hellos. */
static void
auth_log(struct cport *cp, uint64_t now)
{
    if (cp->n_auth_failed == 0 || now - cp->auth_log_ms < CPORT_DROP_LOG_MS) {
        return;
    }
    log_msg(LOG_INFO,
            "cluster port: %" PRIu64 " Hellos with a wrong token, %" PRIu64
            " delayed (a source's Hellos wait up to %d ms after its failures)",
            cp->n_auth_failed, cp->n_auth_deferred, CPORT_AUTH_CAP_MS);
    cp->n_auth_failed = cp->n_auth_deferred = 0;
    cp->auth_log_ms = now;
}

/* See cport_guard.h. */
void
auth_failed(struct cp_conn *c)
{
    struct cport    *cp = c->cp;
    uint64_t         now = (uint64_t)util_now_ms();
    struct auth_src *a = auth_find(cp, c->src, now);
    int              i;

    if (a == NULL) {
        /* A free entry, else the one whose last failure is oldest. */
        for (i = 0; i < CPORT_AUTH_SRCS; i++) {
            struct auth_src *o = &cp->auth[i];

            if (!o->used) {
                a = o;
                break;
            }
            if (a == NULL || o->last_fail_ms < a->last_fail_ms) {
                a = o;
            }
        }
        memset(a, 0, sizeof(*a));
        a->used = true;
        memcpy(a->src, c->src, CPORT_SRC_LEN);
    }
    if (a->fails < UINT32_MAX) {
        a->fails++;
    }
    a->last_fail_ms = now;
    a->next_ms = now + auth_penalty_ms(a->fails);
    cp->n_auth_failed++;
    auth_log(cp, now);
}

/* Arm auth_ev for the earliest turn of a deferred Hello, if any. */
static void
auth_arm(struct cport *cp, uint64_t now)
{
    struct cp_conn *o;
    uint64_t        first = UINT64_MAX;

    for (o = TAILQ_FIRST(&cp->preauth); o != NULL; o = TAILQ_NEXT(o, pa_link)) {
        struct auth_src *a;

        if (!o->deferred) {
            continue;
        }
        a = auth_find(cp, o->src, now);
        first = a == NULL || a->next_ms <= now ? now : (a->next_ms < first ? a->next_ms : first);
        if (first == now) {
            break;
        }
    }
    if (first != UINT64_MAX) {
        uint64_t       ms = first - now;
        struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)((ms % 1000) * 1000) };

        evtimer_add(cp->auth_ev, &tv);
    }
}

/* See cport_guard.h. Taking the turn moves the source's next_ms on. */
bool
auth_turn(struct cp_conn *c)
{
    struct cport    *cp = c->cp;
    uint64_t         now = (uint64_t)util_now_ms();
    struct auth_src *a = auth_find(cp, c->src, now);

    if (a == NULL) {
        return true;
    }
    if (now >= a->next_ms) {
        /* Until this check's outcome, its source's next one waits. */
        a->next_ms = now + auth_penalty_ms(a->fails);
        return true;
    }
    if (!c->deferred) {
        cp->n_auth_deferred++;
    }
    c->deferred = true;
    c->waiting = true;
    /* Nothing more is read meanwhile: the frame limit is checked only
     * when frames are decoded. */
    bufferevent_disable(c->bev, EV_READ);
    auth_arm(cp, now);
    return false;
}

/* See cport_guard.h. The first one of a source takes its turn, the others
 * wait again. */
void
auth_cb(evutil_socket_t fd, short what, void *arg)
{
    struct cport   *cp = arg;
    struct cp_conn *o, *next;

    (void)fd;
    (void)what;
    for (o = TAILQ_FIRST(&cp->preauth); o != NULL; o = next) {
        next = TAILQ_NEXT(o, pa_link);
        if (o->deferred && !o->closing) {
            o->deferred = false;
            o->waiting = false;
            bufferevent_enable(o->bev, EV_READ);
            cpc_read_cb(o->bev, o);
        }
    }
    auth_arm(cp, (uint64_t)util_now_ms());
}