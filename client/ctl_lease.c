/*
 * ctl_lease: see ctl_lease.h. Both kinds of record (an admin's, a role's)
 * are kept by one renewing thread per record, with its own store handle
 * (the main thread's is busy with the transition's reads and writes).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "client/ctl_lease.h"
#include "client/ctl_util.h"
#include "lib/mstore.h"

#define ADMIN_LEASE_TTL_S 5    /* expires this long after the admin died */
#define ADMIN_RENEW_MS    1000 /* renewed this often */
#define ROLE_LEASE_TTL_S  5    /* a standby takes a dead holder's role after this */
#define ROLE_RENEW_MS     1000 /* renewed (or tried for) this often */

/* A record kept alive on a lease by a thread. */
struct leased {
    struct mstore  *st;
    char            name[160]; /* admin/HOST-PID, role/NAME */
    char            what[256]; /* its value */
    int             ttl_s;
    int             renew_ms;
    bool            create; /* a role: written only if absent */
    bool            timed;  /* a store without leases: the record carries its time */
    uint64_t        lease;
    pthread_t       tid;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    bool            stop;
    bool            held;        /* under mu */
    char            holder[256]; /* under mu: a role's holder as last read */
};

struct admin_lease {
    struct leased l;
};

struct ctl_role {
    struct leased l;
};

/* This host and process: "HOST-PID". */
static void
host_pid(char *out, size_t len)
{
    char host[64] = "host";

    gethostname(host, sizeof(host) - 1);
    host[strcspn(host, "/ ")] = '\0';
    snprintf(out, len, "%s-%ld", host, (long)getpid());
}

/* The wall clock in ms (the directory store is on one host). */
static int64_t
wall_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A store without leases: write the record with the time at
 * ("written_ms T"; 0: expired). */
static int
put_timed(struct leased *l, int64_t at, char *err, size_t errlen)
{
    char buf[sizeof(l->what) + 32];
    int  len = snprintf(buf, sizeof(buf), "%swritten_ms %" PRId64 "\n", l->what, at);

    return mstore_cas(l->st, l->name, MSTORE_ANY_REV, buf, (size_t)len, NULL, err, errlen);
}

/* Take a fresh lease; an admin's record is written on it at once, a role's
 * by the caller (renew_once). A store without leases: write the record
 * with the time now, which is its renewal. MSTORE_OK or an error. */
static int
take(struct leased *l, char *err, size_t errlen)
{
    int rc;

    if (l->timed) {
        return put_timed(l, wall_ms(), err, errlen);
    }
    l->lease = 0;
    rc = mstore_lease(l->st, &l->lease, l->ttl_s, err, errlen);
    if (rc == MSTORE_OK && !l->create) {
        rc = mstore_put_leased(l->st, l->name, l->what, strlen(l->what), l->lease, err, errlen);
    }
    return rc;
}

/* Is the record still ours (a role: nobody deleted or replaced it)? */
static bool
still_ours(struct leased *l, char *holder, size_t len)
{
    struct mstore_record rec;
    const char          *v;
    bool                 ours;

    holder[0] = '\0';
    if (mstore_get(l->st, l->name, &rec, NULL, 0) != MSTORE_OK) {
        return false;
    }
    v = strchr(rec.text, '\n'); /* after the "# rev N" line */
    v = v != NULL ? v + 1 : rec.text;
    snprintf(holder, len, "%.*s", (int)strcspn(v, "\n"), v);
    ours = strcmp(v, l->what) == 0;
    mstore_record_clear(&rec);
    return ours;
}

/* One round: keep the lease alive (take a new one when it expired), and
 * for a role stand again when not holding it. */
static void
renew_once(struct leased *l)
{
    char err[512] = "", holder[256] = "";
    bool held;
    int  rc = MSTORE_ENOENT;

    pthread_mutex_lock(&l->mu);
    held = l->held;
    pthread_mutex_unlock(&l->mu);
    if (l->timed) {
        if (take(l, err, sizeof(err)) != MSTORE_OK) {
            ctl_info("%s: %s", l->name, err);
        }
        return;
    }
    if (l->lease != 0) {
        rc = mstore_lease(l->st, &l->lease, l->ttl_s, err, sizeof(err));
    }
    if (rc == MSTORE_ENOENT) {
        if (l->lease != 0 || held) {
            ctl_info("%s: the lease expired (the store was out of reach?)%s", l->name,
                     held ? ": the role is lost" : ": taking a new one");
        }
        if (held) {
            /* Lost: said now, so taking it again below is said too. */
            pthread_mutex_lock(&l->mu);
            l->held = false;
            pthread_mutex_unlock(&l->mu);
        }
        held = false;
        rc = take(l, err, sizeof(err));
    }
    if (l->create) {
        if (rc == MSTORE_OK && !held) {
            rc = mstore_create_leased(l->st, l->name, l->what, strlen(l->what), l->lease, err,
                                      sizeof(err));
        }
        /* The store out of reach: the lease may run out any moment. */
        held = (rc == MSTORE_OK || rc == MSTORE_ECONFLICT) && still_ours(l, holder, sizeof(holder));
    }
    if (rc != MSTORE_OK && rc != MSTORE_ECONFLICT) {
        ctl_info("%s: %s", l->name, err);
    }
    pthread_mutex_lock(&l->mu);
    if (l->create && held != l->held) {
        ctl_info("%s: %s", l->name, held ? "this process holds the role" : "lost the role");
    }
    l->held = held;
    snprintf(l->holder, sizeof(l->holder), "%s", holder);
    pthread_mutex_unlock(&l->mu);
}

static void *
renew_main(void *arg)
{
    struct leased *l = arg;

    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += l->renew_ms / 1000;
        ts.tv_nsec += (long)(l->renew_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
        if (l->stop) {
            break;
        }
        pthread_mutex_unlock(&l->mu);
        renew_once(l);
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* In a store without leases: how many admin/ records have a time (*timed)
 * and how many of them were renewed within the TTL (returned). gc: delete
 * the expired ones (a new admin clears those of admins that died). */
static size_t
admin_fresh(struct mstore *s, bool gc, size_t *timed)
{
    char **names = NULL;
    size_t n = 0, i, fresh = 0;
    char   err[512], name[300];

    *timed = 0;
    if (mstore_list(s, "admin", &names, &n, err, sizeof(err)) != MSTORE_OK) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        struct mstore_record rec;
        const char          *w;
        long long            t;

        snprintf(name, sizeof(name), "admin/%s", names[i]);
        if (mstore_get(s, name, &rec, err, sizeof(err)) != MSTORE_OK) {
            continue;
        }
        w = strstr(rec.text, "\nwritten_ms ");
        if (w != NULL && sscanf(w, "\nwritten_ms %lld", &t) == 1) {
            (*timed)++;
            if (wall_ms() - t < ADMIN_LEASE_TTL_S * 1000) {
                fresh++;
            } else if (gc) {
                mstore_delete(s, name, rec.rev, err, sizeof(err));
            }
        }
        mstore_record_clear(&rec);
    }
    mstore_names_free(names, n);
    return fresh;
}

/* Open the store, make the record (first try in the caller's thread) and
 * start the renewing thread. false when a role's store has no leases, or
 * an admin's record could not be written. */
static bool
leased_start(struct leased *l, const char *spec)
{
    char   err[512];
    size_t n;
    int    rc;

    l->st = mstore_open(spec, err, sizeof(err));
    l->timed = l->st != NULL && !mstore_has_leases(l->st);
    if (l->st == NULL || (l->timed && l->create)) {
        mstore_close(l->st);
        return false;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (l->create) {
        renew_once(l); /* held or not, the thread goes on standing */
    } else {
        if (l->timed) {
            admin_fresh(l->st, true, &n); /* clear the records of admins that died */
        }
        if ((rc = take(l, err, sizeof(err))) != MSTORE_OK) {
            ctl_info("admin lease: %s (the watch will judge this admin by time)", err);
            goto fail;
        }
    }
    if (pthread_create(&l->tid, NULL, renew_main, l) == 0) {
        return true;
    }
    if (!l->create) {
        mstore_delete(l->st, l->name, MSTORE_ANY_REV, err, sizeof(err));
    }
fail:
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    mstore_close(l->st);
    return false;
}

/* Stop the thread; delete the record if it is ours. */
static void
leased_stop(struct leased *l)
{
    char err[512], holder[256];

    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->tid, NULL);
    if (l->timed) {
        /* Expired rather than deleted: a transition this admin leaves
         * pending is taken over at once, as in etcd (the next admin
         * clears the record). */
        put_timed(l, 0, err, sizeof(err));
    } else if (!l->create || still_ours(l, holder, sizeof(holder))) {
        mstore_delete(l->st, l->name, MSTORE_ANY_REV, err, sizeof(err));
    }
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    mstore_close(l->st);
}

struct admin_lease *
admin_lease_start(const char *spec, const char *what)
{
    struct admin_lease *a = calloc(1, sizeof(*a));
    char                hp[96];

    if (a == NULL) {
        return NULL;
    }
    host_pid(hp, sizeof(hp));
    snprintf(a->l.name, sizeof(a->l.name), "admin/%s", hp);
    snprintf(a->l.what, sizeof(a->l.what), "%s\n", what);
    a->l.ttl_s = ADMIN_LEASE_TTL_S;
    a->l.renew_ms = ADMIN_RENEW_MS;
    if (!leased_start(&a->l, spec)) {
        free(a);
        return NULL;
    }
    return a;
}

void
admin_lease_stop(struct admin_lease *a)
{
    if (a != NULL) {
        leased_stop(&a->l);
        free(a);
    }
}

bool
admin_lease_held(struct mstore *s, bool *known)
{
    char **names = NULL;
    size_t n = 0, timed = 0, fresh;
    char   err[512];

    *known = false;
    if (!mstore_has_leases(s)) {
        /* Judged by the records' times; none with one (an admin of an
         * older version): unknown, the caller goes by the transition
         * record's own `written` time. */
        fresh = admin_fresh(s, false, &timed);
        *known = timed > 0;
        return fresh > 0;
    }
    if (mstore_list(s, "admin", &names, &n, err, sizeof(err)) != MSTORE_OK) {
        return false;
    }
    mstore_names_free(names, n);
    *known = true;
    return n > 0;
}

struct ctl_role *
ctl_role_start(const char *spec, const char *role)
{
    struct ctl_role *r = calloc(1, sizeof(*r));
    char             hp[96];

    if (r == NULL) {
        return NULL;
    }
    host_pid(hp, sizeof(hp));
    snprintf(r->l.name, sizeof(r->l.name), "role/%s", role);
    snprintf(r->l.what, sizeof(r->l.what), "%s\n", hp);
    r->l.ttl_s = ROLE_LEASE_TTL_S;
    r->l.renew_ms = ROLE_RENEW_MS;
    r->l.create = true;
    if (!leased_start(&r->l, spec)) {
        free(r);
        return NULL;
    }
    return r;
}

bool
ctl_role_held(struct ctl_role *r, char *holder, size_t len)
{
    bool held;

    if (r == NULL) {
        snprintf(holder, len, "%s", "");
        return true;
    }
    pthread_mutex_lock(&r->l.mu);
    held = r->l.held;
    snprintf(holder, len, "%s", r->l.holder);
    pthread_mutex_unlock(&r->l.mu);
    return held;
}

void
ctl_role_stop(struct ctl_role *r)
{
    if (r != NULL) {
        leased_stop(&r->l);
        free(r);
    }
}
