/*
 * ctl_nodes: the admin of client/ctl_transition.h and its node set: the
 * store's state and the admin token it starts from, the nodes of N ∪ N+1
 * with their roles and commit order, and the calls to their cluster port.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "client/cport_client.h"
#include "client/ctl_transition.h"
#include "client/ctl_util.h"
#include "lib/mstore.h"
#include "ring/ring.h"

static char err_buf[MSTORE_WHERE_MAX + 1024];

/*
 * The admin
 */

/* Open --store; prints the error. */
static int
admin_open_store(struct admin *a)
{
    if (a->g->store == NULL) {
        ctl_error("--store DIR is required (before the command)");
        return EX_USAGE;
    }
    a->store = mstore_open(a->g->store, err_buf, sizeof(err_buf));
    if (a->store == NULL) {
        ctl_error("%s", err_buf);
        return EX_USAGE;
    }
    return EX_OK;
}

/* admin_read_token: see ctl_transition.h. At most CPORT_TOKEN_MAX bytes,
 * without the line end. */
int
admin_read_token(struct admin *a)
{
    char  *text, *nl;
    size_t len = 0;

    if (a->g->token_file == NULL) {
        ctl_error("--token-file FILE is required to talk to the nodes' cluster port");
        return EX_USAGE;
    }
    text = ctl_read_file(a->g->token_file, &len);
    if (text == NULL) {
        ctl_error("%s: %s", a->g->token_file, strerror(errno));
        return EX_USAGE;
    }
    nl = memchr(text, '\n', len);
    if (nl != NULL) {
        len = (size_t)(nl - text);
    }
    if (len > 0 && text[len - 1] == '\r') {
        len--;
    }
    if (len == 0 || len > CPORT_TOKEN_MAX) {
        ctl_error("%s:1: the token must be 1..%d bytes on the first line", a->g->token_file,
                  CPORT_TOKEN_MAX);
        free(text);
        return EX_USAGE;
    }
    memcpy(a->atoken, text, len);
    a->atoken_len = len;
    free(text);
    return EX_OK;
}

/* admin_members_of_record: see ctl_transition.h. */
int
admin_members_of_record(const struct mstore_record *rec, struct ring_members **out, uint64_t *rev)
{
    *out = NULL;
    *rev = 0;
    if (rec->rev == 0) {
        return EX_OK;
    }
    if (ring_members_parse(rec->text, rec->len, rec->where, out, err_buf, sizeof(err_buf)) !=
        RING_OK) {
        ctl_error("%s", err_buf);
        *out = NULL;
        return EX_USAGE;
    }
    *rev = rec->rev;
    return EX_OK;
}

/* admin_load_members: see ctl_transition.h. EX_OK, or EX_USAGE after
 * printing a file:line error. */
int
admin_load_members(struct admin *a, const char *name, struct ring_members **out, uint64_t *rev)
{
    struct mstore_record rec;
    int                  rc;

    *out = NULL;
    *rev = 0;
    rc = mstore_get(a->store, name, &rec, err_buf, sizeof(err_buf));
    if (rc == MSTORE_ENOENT) {
        return EX_OK;
    }
    if (rc != MSTORE_OK) {
        ctl_error("%s", err_buf);
        return EX_USAGE;
    }
    rc = admin_members_of_record(&rec, out, rev);
    mstore_record_clear(&rec);
    return rc;
}

/* Is id declared failed in this transition? */
static bool
is_failed(const struct admin *a, const char *id)
{
    uint32_t i;

    for (i = 0; i < a->n_failed; i++) {
        if (strcmp(a->failed[i], id) == 0) {
            return true;
        }
    }
    return false;
}

/* admin_add_failed: see ctl_transition.h. At most FAILED_MAX. */
void
admin_add_failed(struct admin *a, const char *id)
{
    if (a->n_failed < FAILED_MAX && !is_failed(a, id)) {
        snprintf(a->failed[a->n_failed], sizeof(a->failed[0]), "%s", id);
        a->failed_ptr[a->n_failed] = a->failed[a->n_failed];
        a->n_failed++;
    }
}

/* A pending `remove --failed ID` names its failed node in its op line:
 * resume and abort must not contact it either. */
static void
failed_from_op(struct admin *a)
{
    if (a->have_rec && strncmp(a->rec.op, OP_REMOVE_FAILED, strlen(OP_REMOVE_FAILED)) == 0) {
        admin_add_failed(a, a->rec.op + strlen(OP_REMOVE_FAILED));
    }
}

/* admin_read_records: see ctl_transition.h. */
int
admin_read_records(struct admin *a, const char *const *names, size_t n, struct mstore_record *recs)
{
    if (mstore_get_many(a->store, names, n, recs, err_buf, sizeof(err_buf)) != MSTORE_OK) {
        ctl_error("%s", err_buf);
        return EX_USAGE;
    }
    return EX_OK;
}

/* admin_load_state: see ctl_transition.h. The three records are read at
 * one store revision, so a transaction of another admin (a commit writes
 * active and deletes pending together) is seen whole or not at all. Each
 * load returns EX_OK or EX_USAGE. */
int
admin_load_state(struct admin *a)
{
    static const char *const names[] = { REC_ACTIVE, REC_PENDING, REC_PENDING_TREC };
    struct mstore_record     recs[3];
    int                      rc;
    size_t                   i;

    ring_members_free(a->old);
    ring_members_free(a->new);
    a->old = a->new = NULL;
    trec_clear(&a->rec);
    a->have_rec = false;
    if (admin_read_records(a, names, 3, recs) != EX_OK) {
        return EX_USAGE;
    }
    rc = admin_members_of_record(&recs[0], &a->old, &a->active_rev);
    if (rc == EX_OK) {
        rc = admin_members_of_record(&recs[1], &a->new, &a->pm_rev);
    }
    if (rc == EX_OK) {
        rc = trec_of_record(&recs[2], &a->rec, &a->have_rec, &a->rec_rev);
    }
    for (i = 0; i < 3; i++) {
        mstore_record_clear(&recs[i]);
    }
    if (rc != EX_OK) {
        return EX_USAGE;
    }
    failed_from_op(a);
    return EX_OK;
}

/* admin_open: see ctl_transition.h. */
int
admin_open(struct admin *a, bool with_token)
{
    int rc = admin_open_store(a);

    if (rc != EX_OK || !with_token) {
        return rc;
    }
    return admin_read_token(a);
}

/* admin_load: see ctl_transition.h. */
int
admin_load(struct admin *a, bool with_token)
{
    int rc = admin_open(a, with_token);

    if (rc != EX_OK) {
        return rc;
    }
    return admin_load_state(a);
}

/*
 * The node set
 */

/* node_find: see ctl_transition.h. */
struct tnode *
node_find(struct admin *a, const char *id)
{
    uint32_t i;

    for (i = 0; i < a->n_nodes; i++) {
        if (strcmp(a->nodes[i].id, id) == 0) {
            return &a->nodes[i];
        }
    }
    return NULL;
}

/* Set a node's client address and the cluster port derived from it ("" when
 * the address has no valid port: node_call then reports it). */
static void
node_set_addr(struct tnode *t, const char *addr)
{
    snprintf(t->addr, sizeof(t->addr), "%s", addr);
    if (cport_addr_of(t->addr, t->caddr, sizeof(t->caddr)) != 0) {
        t->caddr[0] = '\0';
    }
}

/* Add (or find) a node in a->nodes by id; NULL when out of memory. */
static struct tnode *
node_add(struct admin *a, const struct ring_node *n)
{
    struct tnode *t, *nn;

    t = node_find(a, n->id);
    if (t != NULL) {
        return t;
    }
    nn = realloc(a->nodes, (a->n_nodes + 1) * sizeof(*nn));
    if (nn == NULL) {
        return NULL;
    }
    a->nodes = nn;
    t = &a->nodes[a->n_nodes++];
    memset(t, 0, sizeof(*t));
    snprintf(t->id, sizeof(t->id), "%s", n->id);
    node_set_addr(t, n->addr);
    return t;
}

/* arc_gained: see ctl_transition.h. Compared by id: the two memberships
 * index their nodes differently. */
bool
arc_gained(const struct ring_members *old, const struct ring_members *new,
           const struct ring_arc *arc, uint32_t j)
{
    const char *id = new->nodes[arc->new_nodes[j]].id;
    uint32_t    o;

    for (o = 0; o < arc->n_old; o++) {
        if (strcmp(old->nodes[arc->old_nodes[o]].id, id) == 0) {
            return false;
        }
    }
    return true;
}

/* nodes_build: see ctl_transition.h. */
int
nodes_build(struct admin *a)
{
    struct ring      *ro = NULL, *rn = NULL;
    struct ring_diff *d = NULL;
    uint32_t          i, k, j;
    int               rc = EX_FAILED;

    for (i = 0; a->old != NULL && i < a->old->n_nodes; i++) {
        struct tnode *t;

        if (is_failed(a, a->old->nodes[i].id)) {
            continue; /* dead: never contacted */
        }
        t = node_add(a, &a->old->nodes[i]);
        if (t == NULL) {
            goto out;
        }
        t->in_old = true;
    }
    for (i = 0; a->new != NULL &&i < a->new->n_nodes; i++) {
        struct tnode *t = node_add(a, &a->new->nodes[i]);

        if (t == NULL) {
            goto out;
        }
        t->in_new = true;
        /* A node's new address wins (it is where it will serve). */
        node_set_addr(t, a->new->nodes[i].addr);
    }
    if (a->old != NULL && a->new != NULL) {
        ro = ring_build(a->old);
        rn = ring_build(a->new);
        d = ro != NULL && rn != NULL ? ring_diff(ro, rn) : NULL;
        if (d == NULL) {
            ctl_error("cannot build the rings of epochs %" PRIu64 " and %" PRIu64, a->old->epoch,
                      a->new->epoch);
            goto out;
        }
        for (k = 0; k < d->n_arcs; k++) {
            const struct ring_arc *arc = &d->arcs[k];
            /* A failed old primary sources nothing (the node picks the
             * first surviving holder, which may have no transfer at all
             * while writes are not replicated): no source to wait for. */
            struct tnode *src = arc->n_old > 0 && !is_failed(a, a->old->nodes[arc->old_nodes[0]].id)
                                    ? node_find(a, a->old->nodes[arc->old_nodes[0]].id)
                                    : NULL;

            for (j = 0; j < arc->n_new; j++) {
                if (arc_gained(a->old, a->new, arc, j)) {
                    struct tnode *dst = node_find(a, a->new->nodes[arc->new_nodes[j]].id);

                    if (dst != NULL) {
                        dst->is_dest = true;
                    }
                    if (src != NULL) {
                        src->is_source = true;
                    }
                }
            }
        }
    }
    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];

        t->rank = t->is_dest && !t->is_source    ? 0
                  : !t->is_dest && !t->is_source ? 1
                  : t->is_dest                   ? 2
                                                 : 3;
    }
    /* Stable insertion sort by rank (a handful of nodes). */
    for (i = 1; i < a->n_nodes; i++) {
        struct tnode t = a->nodes[i];

        for (j = i; j > 0 && a->nodes[j - 1].rank > t.rank; j--) {
            a->nodes[j] = a->nodes[j - 1];
        }
        a->nodes[j] = t;
    }
    rc = EX_OK;
out:
    ring_diff_free(d);
    ring_free(ro);
    ring_free(rn);
    return rc;
}

/* Close every node connection and free the node list. */
static void
nodes_free(struct admin *a)
{
    uint32_t i;

    for (i = 0; i < a->n_nodes; i++) {
        cport_close(a->nodes[i].conn);
        cport_status_clear(&a->nodes[i].st);
    }
    free(a->nodes);
    a->nodes = NULL;
    a->n_nodes = 0;
    /* The stale list points into the nodes' ids. */
    free(a->stale_ptr);
    a->stale_ptr = NULL;
    a->n_stale = 0;
}

/* admin_free: see ctl_transition.h. */
void
admin_free(struct admin *a)
{
    nodes_free(a);
    ring_members_free(a->old);
    ring_members_free(a->new);
    trec_clear(&a->rec);
    mstore_close(a->store);
}

/* admin_txn_status: see ctl_transition.h. */
int
admin_txn_status(int rc, const char *err)
{
    if (rc == MSTORE_OK) {
        return EX_OK;
    }
    if (rc == MSTORE_ECONFLICT) {
        return EX_PENDING;
    }
    ctl_error("store: %s", err);
    return rc == MSTORE_ECORRUPT ? EX_USAGE : EX_FAILED;
}

/* Remember when a node stopped answering (the first failure counts). */
static void
node_mark_down(struct tnode *t)
{
    if (t->down_since == 0) {
        t->down_since = util_now_ms();
    }
}

/* node_call: see ctl_transition.h. */
int
node_call(struct admin *a, struct tnode *t, const struct cport_request *req, int timeout_ms)
{
    struct cport_hello  hello;
    struct cport_status st;
    int                 rc;

    if (t->caddr[0] == '\0') {
        snprintf(t->err, sizeof(t->err), "%s: no valid cluster port for address %s", t->id,
                 t->addr);
        return CPORT_EIO;
    }
    if (!cport_alive(t->conn)) {
        cport_close(t->conn);
        t->conn = NULL;
        rc = cport_connect(t->caddr, a->g->cluster, a->atoken, a->atoken_len, a->g->timeout_ms,
                           &t->conn, &hello, t->err, sizeof(t->err));
        if (rc != CPORT_OK) {
            node_mark_down(t);
            return rc;
        }
        t->hello_boot = hello.boot_id;
    }
    rc = cport_call(t->conn, req, timeout_ms, &st, t->err, sizeof(t->err));
    if (st.boot_id != 0 || rc == CPORT_OK) {
        cport_status_clear(&t->st);
        t->st = st;
        t->have_st = true;
    } else {
        cport_status_clear(&st);
    }
    if (rc == CPORT_EIO || rc == CPORT_EPROTO) {
        node_mark_down(t);
    } else {
        t->down_since = 0;
    }
    return rc;
}

/* nodes_broadcast: see ctl_transition.h. */
uint32_t
nodes_broadcast(struct admin *a, const struct cport_request *req, int timeout_ms, const char *what)
{
    uint32_t i, failed = 0;

    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];

        if (node_call(a, t, req, timeout_ms) != CPORT_OK) {
            ctl_info("%s: %s (%s): %s", what, t->id, t->addr, t->err);
            failed++;
        }
    }
    return failed;
}

/* One node's call on its own thread (nodes_call_parallel). */
struct node_call_arg {
    struct admin               *a;
    struct tnode               *t;
    const struct cport_request *req;
    int                         timeout_ms;
    int                         rc;
};

static void *
node_call_thread(void *arg)
{
    struct node_call_arg *nc = arg;

    nc->rc = node_call(nc->a, nc->t, nc->req, nc->timeout_ms);
    return NULL;
}

/* nodes_call_parallel: see ctl_transition.h. Each thread touches only its
 * own tnode. Falls back to one call after the other when threads cannot be
 * had. */
void
nodes_call_parallel(struct admin *a, const struct cport_request *req, int timeout_ms, uint32_t lo,
                    uint32_t hi, const bool *skip, int *rc)
{
    uint32_t              n = hi - lo, i;
    struct node_call_arg *nc = calloc(n ? n : 1, sizeof(*nc));
    pthread_t            *th = calloc(n ? n : 1, sizeof(*th));
    bool                 *started = calloc(n ? n : 1, sizeof(*started));

    for (i = 0; i < n; i++) {
        struct node_call_arg one = { a, &a->nodes[lo + i], req, timeout_ms, CPORT_OK };

        if (skip != NULL && skip[lo + i]) {
            continue;
        }
        if (nc == NULL || th == NULL || started == NULL) {
            node_call_thread(&one);
            rc[lo + i] = one.rc;
            continue;
        }
        nc[i] = one;
        started[i] = pthread_create(&th[i], NULL, node_call_thread, &nc[i]) == 0;
        if (!started[i]) {
            node_call_thread(&nc[i]);
        }
    }
    for (i = 0; nc != NULL && th != NULL && started != NULL && i < n; i++) {
        if (skip != NULL && skip[lo + i]) {
            continue;
        }
        if (started[i]) {
            pthread_join(th[i], NULL);
        }
        rc[lo + i] = nc[i].rc;
    }
    free(nc);
    free(th);
    free(started);
}
