/*
 * ctl_lease: see ctl_lease.h. The renewing thread has its own store handle
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
#include "client/mstore.h"

#define ADMIN_LEASE_TTL_S 10   /* expires this long after the admin died */
#define ADMIN_RENEW_MS    2000 /* renewed this often */

struct admin_lease {
    struct mstore  *st;
    char            name[160]; /* admin/HOST-PID */
    char            what[256];
    uint64_t        lease;
    pthread_t       tid;
    pthread_mutex_t mu;
    pthread_cond_t  cv;
    bool            stop;
};

/* Take a lease and write the record on it. MSTORE_OK or an error. */
static int
take(struct admin_lease *l, char *err, size_t errlen)
{
    int rc;

    l->lease = 0;
    rc = mstore_lease(l->st, &l->lease, ADMIN_LEASE_TTL_S, err, errlen);
    if (rc == MSTORE_OK) {
        rc = mstore_put_leased(l->st, l->name, l->what, strlen(l->what), l->lease, err, errlen);
    }
    return rc;
}

static void *
renew_main(void *arg)
{
    struct admin_lease *l = arg;
    char                err[512];

    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        struct timespec ts;
        int             rc;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += ADMIN_RENEW_MS / 1000;
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
        if (l->stop) {
            break;
        }
        pthread_mutex_unlock(&l->mu);
        rc = mstore_lease(l->st, &l->lease, ADMIN_LEASE_TTL_S, err, sizeof(err));
        if (rc == MSTORE_ENOENT) {
            ctl_info("admin lease expired (the store was out of reach?): taking a new one");
            rc = take(l, err, sizeof(err));
        }
        if (rc != MSTORE_OK) {
            ctl_info("admin lease: %s", err);
        }
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

struct admin_lease *
admin_lease_start(const char *spec, const char *what)
{
    struct admin_lease *l = calloc(1, sizeof(*l));
    char                host[64] = "host", err[512];

    if (l == NULL) {
        return NULL;
    }
    l->st = mstore_open(spec, err, sizeof(err));
    if (l->st == NULL || !mstore_has_leases(l->st)) {
        mstore_close(l->st);
        free(l);
        return NULL;
    }
    gethostname(host, sizeof(host) - 1);
    host[strcspn(host, "/ ")] = '\0';
    snprintf(l->name, sizeof(l->name), "admin/%s-%ld", host, (long)getpid());
    snprintf(l->what, sizeof(l->what), "%s\n", what);
    if (take(l, err, sizeof(err)) != MSTORE_OK) {
        ctl_info("admin lease: %s (the watch will judge this admin by time)", err);
        mstore_close(l->st);
        free(l);
        return NULL;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (pthread_create(&l->tid, NULL, renew_main, l) != 0) {
        mstore_delete(l->st, l->name, MSTORE_ANY_REV, err, sizeof(err));
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv);
        mstore_close(l->st);
        free(l);
        return NULL;
    }
    return l;
}

void
admin_lease_stop(struct admin_lease *l)
{
    char err[512];

    if (l == NULL) {
        return;
    }
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->tid, NULL);
    mstore_delete(l->st, l->name, MSTORE_ANY_REV, err, sizeof(err));
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    mstore_close(l->st);
    free(l);
}

bool
admin_lease_held(struct mstore *s, bool *known)
{
    char **names = NULL;
    size_t n = 0;
    char   err[512];

    *known = false;
    if (!mstore_has_leases(s) ||
        mstore_list(s, "admin", &names, &n, err, sizeof(err)) != MSTORE_OK) {
        return false;
    }
    mstore_names_free(names, n);
    *known = true;
    return n > 0;
}
