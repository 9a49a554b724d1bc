/*
 * ctl_admin: ringctl's cluster administration (docs/cluster.md): init,
 * status, plan join|leave, join, leave, abort, resume. The membership store
 * (mstore) is the source of truth and its transactions are the only place
 * an epoch is minted; nodes are driven over their cluster port
 * (cport_client) through PREPARE, COPY, FENCE, COMMIT and CLEANUP.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "client/ctl.h"
#include "client/cport_client.h"
#include "client/mstore.h"
#include "ring/ring.h"

/* Exit statuses (docs/cluster.md). */
#define EX_OK       0
#define EX_FAILED   1
#define EX_USAGE    2
#define EX_PENDING  3
#define EX_INJECTED 4

#define REC_ACTIVE        "active.members"
#define REC_PENDING       "pending.members"
#define REC_META          "pending.meta"
#define REC_ABORTED       "aborted.members"
#define REC_ABORTED_META  "aborted.meta"

#define TOKEN_BYTES        16
#define POLL_MS            150     /* status poll period during COPY and CLEANUP */
#define CAUGHT_UP_BACKLOG  1000    /* dirty keys: small enough to fence */
#define FENCE_HOLD_MS      50
#define STALL_MS           60000   /* no copy progress for this long: abort */
#define NODE_LOST_MS       5000    /* a node unreachable this long during COPY: abort */
#define COMMIT_RETRY_MS    10000   /* retry Commit to a silent node this long */
#define CLEANUP_WAIT_MS    30000   /* wait this long for orphans to reach 0 */
#define LONG_TIMEOUT_MS    10000   /* prepare, fence, commit, abort replies */
#define DEFAULT_RATE_MIB   50
#define FAILED_MAX         8       /* failed nodes one transition may drop */
#define PROBE_MS           1000    /* remove --failed: a node answering Hello this fast is alive */
#define OP_REMOVE_FAILED   "remove --failed "

/* Phases the store records in pending.meta. */
enum tphase { TP_PREPARED = 1, TP_COPYING, TP_FENCED, TP_ABORTED };

static const char *const tphase_names[] = {
    [TP_PREPARED] = "PREPARED", [TP_COPYING] = "COPYING", [TP_FENCED] = "FENCED",
    [TP_ABORTED] = "ABORTED",
};

/* A node's boot id as recorded at PREPARE. */
struct boot_rec {
    char     id[RING_ID_MAX + 1];
    uint64_t boot_id;
};

/* pending.meta: the state of a transition, one "key value" per line. */
struct pmeta {
    uint8_t  token[TOKEN_BYTES];
    enum tphase phase;
    uint64_t from_epoch, epoch;
    uint64_t rate;                  /* bytes/s for StartCopy, 0 = unlimited */
    int64_t  started;               /* unix seconds */
    char     op[RING_ID_MAX + RING_ADDR_MAX + 32];   /* "join ID ADDR" / "leave ID" */
    char     admin[256];
    uint32_t n_boot;
    struct boot_rec *boot;
};

/* One node of N ∪ N+1 during a transition (or a status round). */
struct tnode {
    char     id[RING_ID_MAX + 1];
    char     addr[RING_ADDR_MAX + 1];
    char     caddr[RING_ADDR_MAX + 16];
    bool     in_old, in_new, is_source, is_dest;
    int      rank;                  /* commit order: destinations first, sources last */
    struct cport_conn *conn;
    struct cport_status st;
    bool     have_st;
    uint64_t hello_boot;            /* boot id seen at connect */
    int64_t  down_since;            /* ms, 0 = reachable */
    char     err[512];
};

/* Everything one admin command works with. */
struct admin {
    struct ctl_globals *g;
    struct mstore *store;
    uint8_t  atoken[CPORT_TOKEN_MAX];   /* the admin token (--token-file) */
    size_t   atoken_len;
    struct ring_members *old, *new;     /* epoch N (store active), N+1 */
    uint64_t active_rev, pm_rev, meta_rev;
    struct pmeta meta;
    bool     have_meta;
    struct tnode *nodes;
    uint32_t n_nodes;
    int64_t  t_start;
    uint64_t fence_ms;
    uint64_t moved_items, moved_bytes;
    bool     exit_after_ok;             /* join/leave honour RINGCTL_EXIT_AFTER */
    /* remove --failed: nodes of N that are dead, never contacted; each
     * moving arc is copied from its first surviving owner. */
    char     failed[FAILED_MAX][RING_ID_MAX + 1];
    const char *failed_ptr[FAILED_MAX];
    uint32_t n_failed;
};

static char err_buf[MSTORE_WHERE_MAX + 1024];

/* Milliseconds on the monotonic clock. */
static int64_t
now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleep ms milliseconds (a poll period, never a wait for a result). */
static void
sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A progress/info line on stderr ("ringctl: phase: ..."): the same
 * shape as an error line, so ctl_error prints both. */
#define info(...) ctl_error(__VA_ARGS__)

/* Lowercase hex of n bytes into out (2n+1 bytes). */
static void
hex_of(const uint8_t *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    size_t i;

    for (i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

/* Parse exactly 2n hex digits into b; -1 if s is not that. */
static int
unhex(const char *s, size_t slen, uint8_t *b, size_t n)
{
    size_t i;

    if (slen != 2 * n) {
        return -1;
    }
    for (i = 0; i < 2 * n; i++) {
        char c = s[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;

        if (v < 0) {
            return -1;
        }
        if (i % 2 == 0) {
            b[i / 2] = (uint8_t)(v << 4);
        } else {
            b[i / 2] |= (uint8_t)v;
        }
    }
    return 0;
}

/* Human-readable byte count into buf. */
static const char *
fmt_bytes(double b, char *buf, size_t len)
{
    static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;

    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
    return buf;
}

/*
 * Output tables: rows of cells, printed as TSV or (--human) aligned with
 * three spaces between columns.
 */
struct table {
    uint32_t ncols, nrows, cap;
    char   **cells;     /* nrows * ncols, malloc'd strings */
};

/* Append a row of ncols printf'd cells separated by '\t' in fmt. */
static void
table_row(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
table_row(struct table *t, const char *fmt, ...)
{
    char line[4096], *p, *tab;
    uint32_t c;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (t->nrows == t->cap) {
        char **n;

        t->cap = t->cap ? t->cap * 2 : 16;
        n = realloc(t->cells, (size_t)t->cap * t->ncols * sizeof(*n));
        if (n == NULL) {
            return;     /* out of memory: the row is dropped */
        }
        t->cells = n;
    }
    p = line;
    for (c = 0; c < t->ncols; c++) {
        tab = p != NULL ? strchr(p, '\t') : NULL;
        if (tab != NULL) {
            *tab = '\0';
        }
        t->cells[(size_t)t->nrows * t->ncols + c] = strdup(p != NULL ? p : "");
        p = tab != NULL ? tab + 1 : NULL;
    }
    t->nrows++;
}

/* Print and free a table. */
static void
table_print(struct table *t, bool human, FILE *out)
{
    uint32_t r, c;
    size_t *w = calloc(t->ncols ? t->ncols : 1, sizeof(*w));

    for (r = 0; r < t->nrows && w != NULL; r++) {
        for (c = 0; c < t->ncols; c++) {
            const char *s = t->cells[(size_t)r * t->ncols + c];
            size_t l = s ? strlen(s) : 0;

            if (l > w[c]) {
                w[c] = l;
            }
        }
    }
    for (r = 0; r < t->nrows; r++) {
        for (c = 0; c < t->ncols; c++) {
            const char *s = t->cells[(size_t)r * t->ncols + c];

            s = s ? s : "";
            if (c + 1 == t->ncols) {
                fprintf(out, "%s\n", s);
            } else if (human && w != NULL) {
                fprintf(out, "%-*s   ", (int)w[c], s);
            } else {
                fprintf(out, "%s\t", s);
            }
        }
    }
    for (r = 0; r < (size_t)t->nrows * t->ncols; r++) {
        free(t->cells[r]);
    }
    free(t->cells);
    free(w);
    t->cells = NULL;
    t->nrows = t->cap = 0;
}

/*
 * pending.meta
 */

/* Free a pmeta's boot list and zero it. */
static void
pmeta_clear(struct pmeta *m)
{
    free(m->boot);
    memset(m, 0, sizeof(*m));
}

/* Format pending.meta into a malloc'd string. */
static char *
pmeta_format(const struct pmeta *m, size_t *len)
{
    char hex[2 * TOKEN_BYTES + 1];
    size_t cap = 1024 + (size_t)m->n_boot * (RING_ID_MAX + 32), n;
    char *buf = malloc(cap);
    uint32_t i;

    if (buf == NULL) {
        return NULL;
    }
    hex_of(m->token, TOKEN_BYTES, hex);
    n = (size_t)snprintf(buf, cap,
                         "token %s\nphase %s\nfrom_epoch %" PRIu64 "\nepoch %" PRIu64
                         "\nrate %" PRIu64 "\nstarted %" PRId64 "\nop %s\nadmin %s\n",
                         hex, tphase_names[m->phase], m->from_epoch, m->epoch, m->rate,
                         m->started, m->op, m->admin);
    for (i = 0; i < m->n_boot && n < cap; i++) {
        n += (size_t)snprintf(buf + n, cap - n, "boot %s %016" PRIx64 "\n", m->boot[i].id,
                              m->boot[i].boot_id);
    }
    *len = n < cap ? n : cap - 1;
    return buf;
}

/* Parse an unsigned decimal field; -1 when it is not one. */
static int
parse_u64(const char *s, uint64_t *out)
{
    char *end;

    if (*s < '0' || *s > '9') {
        return -1;
    }
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno != 0 || *end != '\0' ? -1 : 0;
}

/* Parse pending.meta (the text of a store record) into m. On failure
 * writes "where:line: reason" into err and returns -1. */
static int
pmeta_parse(const char *text, const char *where, struct pmeta *m, char *err, size_t errlen)
{
    const char *p = text, *nl;
    unsigned seen = 0;
    int line = 0;
    char buf[1024], *val;

    memset(m, 0, sizeof(*m));
    for (; *p != '\0'; p = nl + 1) {
        size_t l;
        uint64_t v;

        line++;
        nl = strchr(p, '\n');
        if (nl == NULL) {
            nl = p + strlen(p) - 1;
            l = strlen(p);
        } else {
            l = (size_t)(nl - p);
        }
        if (l == 0 || p[0] == '#') {
            continue;
        }
        if (l >= sizeof(buf)) {
            snprintf(err, errlen, "%s:%d: line too long", where, line);
            goto fail;
        }
        memcpy(buf, p, l);
        buf[l] = '\0';
        val = strchr(buf, ' ');
        if (val == NULL) {
            snprintf(err, errlen, "%s:%d: expected 'key value'", where, line);
            goto fail;
        }
        *val++ = '\0';
        if (strcmp(buf, "token") == 0) {
            if (unhex(val, strlen(val), m->token, TOKEN_BYTES) != 0) {
                snprintf(err, errlen, "%s:%d: token must be %d hex digits", where, line,
                         2 * TOKEN_BYTES);
                goto fail;
            }
            seen |= 1;
        } else if (strcmp(buf, "phase") == 0) {
            int k;

            for (k = TP_PREPARED; k <= TP_ABORTED; k++) {
                if (strcmp(val, tphase_names[k]) == 0) {
                    m->phase = (enum tphase)k;
                }
            }
            if (m->phase == 0) {
                snprintf(err, errlen, "%s:%d: unknown phase '%s'", where, line, val);
                goto fail;
            }
            seen |= 2;
        } else if (strcmp(buf, "from_epoch") == 0 || strcmp(buf, "epoch") == 0
                   || strcmp(buf, "rate") == 0 || strcmp(buf, "started") == 0) {
            if (parse_u64(val, &v) != 0) {
                snprintf(err, errlen, "%s:%d: %.32s: expected a number", where, line, buf);
                goto fail;
            }
            if (buf[0] == 'f') {
                m->from_epoch = v;
                seen |= 4;
            } else if (buf[0] == 'e') {
                m->epoch = v;
                seen |= 8;
            } else if (buf[0] == 'r') {
                m->rate = v;
            } else {
                m->started = (int64_t)v;
            }
        } else if (strcmp(buf, "op") == 0) {
            snprintf(m->op, sizeof(m->op), "%s", val);
        } else if (strcmp(buf, "admin") == 0) {
            snprintf(m->admin, sizeof(m->admin), "%s", val);
        } else if (strcmp(buf, "boot") == 0) {
            char *sp = strchr(val, ' ');
            struct boot_rec *nb;
            char *end;

            if (sp == NULL || sp == val || (size_t)(sp - val) > RING_ID_MAX) {
                snprintf(err, errlen, "%s:%d: expected 'boot ID HEX'", where, line);
                goto fail;
            }
            *sp++ = '\0';
            errno = 0;
            v = strtoull(sp, &end, 16);
            if (errno != 0 || *end != '\0' || end == sp) {
                snprintf(err, errlen, "%s:%d: bad boot id '%s'", where, line, sp);
                goto fail;
            }
            nb = realloc(m->boot, (m->n_boot + 1) * sizeof(*nb));
            if (nb == NULL) {
                snprintf(err, errlen, "out of memory");
                goto fail;
            }
            m->boot = nb;
            snprintf(nb[m->n_boot].id, sizeof(nb[m->n_boot].id), "%s", val);
            nb[m->n_boot].boot_id = v;
            m->n_boot++;
        } else {
            snprintf(err, errlen, "%s:%d: unknown key '%.64s'", where, line, buf);
            goto fail;
        }
        if (nl[0] == '\0') {
            break;
        }
    }
    if (seen != 15) {
        snprintf(err, errlen, "%s:%d: missing %s line", where, line,
                 !(seen & 1) ? "token" : !(seen & 2) ? "phase" : !(seen & 4) ? "from_epoch"
                 : "epoch");
        goto fail;
    }
    if (m->epoch != m->from_epoch + 1) {
        snprintf(err, errlen, "%s:%d: epoch must be from_epoch + 1", where, line);
        goto fail;
    }
    return 0;
fail:
    pmeta_clear(m);
    return -1;
}

/* The recorded boot id of a node, or 0 when none was recorded. */
static uint64_t
pmeta_boot(const struct pmeta *m, const char *id)
{
    uint32_t i;

    for (i = 0; i < m->n_boot; i++) {
        if (strcmp(m->boot[i].id, id) == 0) {
            return m->boot[i].boot_id;
        }
    }
    return 0;
}

/*
 * Store access
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

/* Read the admin token: the first line of --token-file, at most 256 bytes. */
static int
admin_read_token(struct admin *a)
{
    char *text, *nl;
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

/* Read and parse a membership record. EX_OK with *out (NULL when absent)
 * and *rev; EX_USAGE after printing a file:line error. */
static int
load_members_rec(struct admin *a, const char *name, struct ring_members **out, uint64_t *rev)
{
    struct mstore_record rec;
    int rc;

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
    if (ring_members_parse(rec.text, rec.len, rec.where, out, err_buf, sizeof(err_buf))
        != RING_OK) {
        ctl_error("%s", err_buf);
        mstore_record_clear(&rec);
        *out = NULL;
        return EX_USAGE;
    }
    *rev = rec.rev;
    mstore_record_clear(&rec);
    return EX_OK;
}

/* Read pending.meta into a->meta (a->have_meta false when absent). */
static int
load_meta(struct admin *a, const char *name)
{
    struct mstore_record rec;
    int rc;

    pmeta_clear(&a->meta);
    a->have_meta = false;
    a->meta_rev = 0;
    rc = mstore_get(a->store, name, &rec, err_buf, sizeof(err_buf));
    if (rc == MSTORE_ENOENT) {
        return EX_OK;
    }
    if (rc != MSTORE_OK) {
        ctl_error("%s", err_buf);
        return EX_USAGE;
    }
    if (pmeta_parse(rec.text, rec.where, &a->meta, err_buf, sizeof(err_buf)) != 0) {
        ctl_error("%s", err_buf);
        mstore_record_clear(&rec);
        return EX_USAGE;
    }
    a->meta_rev = rec.rev;
    a->have_meta = true;
    mstore_record_clear(&rec);
    return EX_OK;
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

static void
add_failed(struct admin *a, const char *id)
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
    if (a->have_meta && strncmp(a->meta.op, OP_REMOVE_FAILED, strlen(OP_REMOVE_FAILED)) == 0) {
        add_failed(a, a->meta.op + strlen(OP_REMOVE_FAILED));
    }
}

/* Load the store's active, pending membership and meta. */
static int
load_state(struct admin *a)
{
    int rc;

    ring_members_free(a->old);
    ring_members_free(a->new);
    a->old = a->new = NULL;
    rc = load_members_rec(a, REC_ACTIVE, &a->old, &a->active_rev);
    if (rc == EX_OK) {
        rc = load_members_rec(a, REC_PENDING, &a->new, &a->pm_rev);
    }
    if (rc == EX_OK) {
        rc = load_meta(a, REC_META);
    }
    if (rc == EX_OK) {
        failed_from_op(a);
    }
    return rc;
}

/* Open --store, read --token-file when with_token, and load the store's
 * state: the start of every admin command. EX_OK, or an exit status after
 * printing why. */
static int
admin_load(struct admin *a, bool with_token)
{
    int rc = admin_open_store(a);

    if (rc == EX_OK && with_token) {
        rc = admin_read_token(a);
    }
    if (rc == EX_OK) {
        rc = load_state(a);
    }
    return rc;
}

/* Write a->meta back with CAS on its revision. */
static int
store_meta(struct admin *a)
{
    uint64_t rev = 0;
    size_t len = 0;
    char *text = pmeta_format(&a->meta, &len);
    int rc;

    if (text == NULL) {
        ctl_error("out of memory");
        return EX_FAILED;
    }
    rc = mstore_cas(a->store, REC_META, a->meta_rev, text, len, &rev, err_buf, sizeof(err_buf));
    free(text);
    if (rc != MSTORE_OK) {
        ctl_error("store: cannot record phase %s: %s%s", tphase_names[a->meta.phase], err_buf,
                  rc == MSTORE_ECONFLICT ? " (another admin aborted or took over?)" : "");
        return EX_FAILED;
    }
    a->meta_rev = rev;
    return EX_OK;
}

/* Format a membership into a malloc'd text. */
static char *
members_text(const struct ring_members *m, size_t *len)
{
    size_t need = ring_members_format(m, NULL, 0);
    char *buf = malloc(need + 1);

    if (buf != NULL) {
        ring_members_format(m, buf, need + 1);
        *len = need;
    }
    return buf;
}

/*
 * Nodes
 */

/* The node with this id in a->nodes, or NULL. */
static struct tnode *
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

/* True when new holder j of arc is not among its old holders (compared by
 * id: the two memberships index their nodes differently): it gains the
 * arc, and someone must send it. */
static bool
arc_gained(const struct ring_members *old, const struct ring_members *new,
           const struct ring_arc *arc, uint32_t j)
{
    const char *id = new->nodes[arc->new_nodes[j]].id;
    uint32_t o;

    for (o = 0; o < arc->n_old; o++) {
        if (strcmp(old->nodes[arc->old_nodes[o]].id, id) == 0) {
            return false;
        }
    }
    return true;
}

/* Build a->nodes = old ∪ new with roles from the diff, ordered for commit:
 * destinations first, then the others, sources last. */
static int
nodes_build(struct admin *a)
{
    struct ring *ro = NULL, *rn = NULL;
    struct ring_diff *d = NULL;
    uint32_t i, k, j;
    int rc = EX_FAILED;

    for (i = 0; a->old != NULL && i < a->old->n_nodes; i++) {
        struct tnode *t;

        if (is_failed(a, a->old->nodes[i].id)) {
            continue;   /* dead: never contacted */
        }
        t = node_add(a, &a->old->nodes[i]);
        if (t == NULL) {
            goto out;
        }
        t->in_old = true;
    }
    for (i = 0; a->new != NULL && i < a->new->n_nodes; i++) {
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
            ctl_error("cannot build the rings of epochs %" PRIu64 " and %" PRIu64,
                      a->old->epoch, a->new->epoch);
            goto out;
        }
        for (k = 0; k < d->n_arcs; k++) {
            const struct ring_arc *arc = &d->arcs[k];
            /* A failed old primary sources nothing (the node picks the
             * first surviving holder, which may have no transfer at all
             * while writes are not replicated): no source to wait for. */
            struct tnode *src = arc->n_old > 0 && !is_failed(a, a->old->nodes[arc->old_nodes[0]].id)
                                ? node_find(a, a->old->nodes[arc->old_nodes[0]].id) : NULL;

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

        t->rank = t->is_dest && !t->is_source ? 0 : !t->is_dest && !t->is_source ? 1
                : t->is_dest ? 2 : 3;
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
}

/* Remember when a node stopped answering (the first failure counts). */
static void
node_mark_down(struct tnode *t)
{
    if (t->down_since == 0) {
        t->down_since = now_ms();
    }
}

/*
 * Send one request to a node, (re)connecting first if needed. The reply's
 * status is kept in t->st; t->err says what went wrong. Returns a CPORT_
 * code.
 */
static int
node_call(struct admin *a, struct tnode *t, const struct cport_request *req, int timeout_ms)
{
    struct cport_hello hello;
    struct cport_status st;
    int rc;

    if (t->caddr[0] == '\0') {
        snprintf(t->err, sizeof(t->err), "%s: no valid cluster port for address %s", t->id,
                 t->addr);
        return CPORT_EIO;
    }
    if (!cport_alive(t->conn)) {
        cport_close(t->conn);
        t->conn = NULL;
        rc = cport_connect(t->caddr, a->g->cluster, a->atoken, a->atoken_len,
                           a->g->timeout_ms, &t->conn, &hello, t->err, sizeof(t->err));
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

/* The request template of the current transition. */
static struct cport_request
treq(struct admin *a, enum cport_req_kind kind)
{
    struct cport_request r = {
        .kind = kind, .membership = a->new, .token = a->meta.token,
        .token_len = TOKEN_BYTES, .from_epoch = a->meta.from_epoch,
        .rate_bytes_per_s = a->meta.rate, .hold_ms = FENCE_HOLD_MS,
        .epoch = a->meta.epoch, .failed_ids = a->failed_ptr, .n_failed_ids = a->n_failed,
    };

    return r;
}

/*
 * Send req to every node (in commit order); returns how many failed,
 * printing each failure as "phase: ID (ADDR): reason".
 */
static uint32_t
broadcast(struct admin *a, const struct cport_request *req, int timeout_ms, const char *what)
{
    uint32_t i, failed = 0;

    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];

        if (node_call(a, t, req, timeout_ms) != CPORT_OK) {
            info("%s: %s (%s): %s", what, t->id, t->addr, t->err);
            failed++;
        }
    }
    return failed;
}

/*
 * The parts of a transition
 */

/* Print a pending transition (the winner's, for a loser). */
static void
print_pending(struct admin *a, FILE *out)
{
    char hex[2 * TOKEN_BYTES + 1];

    if (!a->have_meta) {
        fprintf(out, "pending\t%s exists without %s (a crashed create?): "
                "run ringctl abort\n", a->new != NULL ? REC_PENDING : REC_META,
                a->new != NULL ? REC_META : REC_PENDING);
        return;
    }
    hex_of(a->meta.token, TOKEN_BYTES, hex);
    fprintf(out, "pending\t%s\tepoch %" PRIu64 " -> %" PRIu64 "\tphase %s\tadmin %s\t"
            "started %" PRId64 "\ttoken %s\n", a->meta.op, a->meta.from_epoch, a->meta.epoch,
            tphase_names[a->meta.phase], a->meta.admin, a->meta.started, hex);
}

/*
 * ABORT: delete pending from the store (CAS on the revisions we hold;
 * recorded as aborted.* so a repeated abort can re-notify nodes), then
 * Abort to every node of N ∪ N+1. Returns how many nodes did not
 * acknowledge, or -1 when the store refused (another admin changed it).
 */
static int
do_abort(struct admin *a)
{
    struct cport_request req = treq(a, CPORT_ABORT);
    struct mstore_op ops[4];
    size_t mlen = 0, plen = 0, n = 0;
    char *mtext = NULL, *ptext = NULL;
    enum tphase was = a->meta.phase;
    int rc;
    uint32_t failed;

    a->meta.phase = TP_ABORTED;
    mtext = pmeta_format(&a->meta, &mlen);
    ptext = a->new != NULL ? members_text(a->new, &plen) : NULL;
    a->meta.phase = was;
    if (mtext == NULL || (a->new != NULL && ptext == NULL)) {
        free(mtext);
        free(ptext);
        ctl_error("out of memory");
        return -1;
    }
    ops[n++] = (struct mstore_op){ MSTORE_PUT, REC_ABORTED_META, MSTORE_ANY_REV, mtext, mlen };
    if (ptext != NULL) {
        ops[n++] = (struct mstore_op){ MSTORE_PUT, REC_ABORTED, MSTORE_ANY_REV, ptext, plen };
    }
    ops[n++] = (struct mstore_op){ MSTORE_DELETE, REC_PENDING, a->pm_rev ? a->pm_rev
                                                                          : MSTORE_ANY_REV,
                                   NULL, 0 };
    ops[n++] = (struct mstore_op){ MSTORE_DELETE, REC_META, a->meta_rev, NULL, 0 };
    rc = mstore_txn(a->store, ops, n, NULL, NULL, err_buf, sizeof(err_buf));
    free(mtext);
    free(ptext);
    if (rc != MSTORE_OK) {
        ctl_error("abort: store: %s", err_buf);
        return -1;
    }
    info("abort: store: pending epoch %" PRIu64 " deleted", a->meta.epoch);
    failed = broadcast(a, &req, LONG_TIMEOUT_MS, "abort");
    info("abort: %u of %u nodes acknowledged%s", a->n_nodes - failed, a->n_nodes,
         failed ? "; the others keep their pending until `ringctl abort` reaches them" : "");
    return (int)failed;
}

/* Abort after a failure during a transition; returns EX_FAILED. */
static int
fail_abort(struct admin *a, const char *why)
{
    info("%s: aborting the transition to epoch %" PRIu64, why, a->meta.epoch);
    do_abort(a);
    return EX_FAILED;
}

/* Honour RINGCTL_EXIT_AFTER (tests only). */
static void
maybe_exit_after(struct admin *a, const char *phase)
{
    const char *e = getenv("RINGCTL_EXIT_AFTER");

    if (a->exit_after_ok && e != NULL && strcmp(e, phase) == 0) {
        info("RINGCTL_EXIT_AFTER=%s: exiting with the transition pending", phase);
        fflush(NULL);
        _exit(EX_INJECTED);
    }
}

/* Check that no node restarted since PREPARE (boot ids in pending.meta).
 * Returns the first node whose boot id changed, or NULL. */
static struct tnode *
boot_changed(struct admin *a)
{
    uint32_t i;

    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];
        uint64_t want = pmeta_boot(&a->meta, t->id);

        if (want != 0 && t->have_st && t->st.boot_id != 0 && t->st.boot_id != want) {
            return t;
        }
    }
    return NULL;
}

/* PREPARE on the nodes (the store's pending exists): Prepare to every node,
 * then record their boot ids. */
static int
phase_prepare(struct admin *a)
{
    struct cport_request req = treq(a, CPORT_PREPARE);
    struct tnode *t;
    uint32_t i, failed;

    failed = broadcast(a, &req, LONG_TIMEOUT_MS, "prepare");
    if (failed > 0) {
        return fail_abort(a, "prepare: a node refused or is unreachable");
    }
    t = boot_changed(a);
    if (t != NULL) {
        info("prepare: %s restarted since the transition began (boot id %016" PRIx64
             " -> %016" PRIx64 ")", t->id, pmeta_boot(&a->meta, t->id), t->st.boot_id);
        return fail_abort(a, "prepare");
    }
    if (a->meta.n_boot == 0) {
        a->meta.boot = calloc(a->n_nodes ? a->n_nodes : 1, sizeof(*a->meta.boot));
        if (a->meta.boot == NULL) {
            return fail_abort(a, "out of memory");
        }
        for (i = 0; i < a->n_nodes; i++) {
            snprintf(a->meta.boot[i].id, sizeof(a->meta.boot[i].id), "%s", a->nodes[i].id);
            a->meta.boot[i].boot_id = a->nodes[i].st.boot_id;
        }
        a->meta.n_boot = a->n_nodes;
        if (store_meta(a) != EX_OK) {
            return EX_FAILED;
        }
    }
    info("prepare: %u nodes prepared for epoch %" PRIu64, a->n_nodes, a->meta.epoch);
    maybe_exit_after(a, "prepare");
    return EX_OK;
}

/* Sum of the copy progress over every source's transfers. */
struct progress {
    uint64_t items, bytes, items_total, bytes_total, backlog;
    uint32_t n_transfers;
    bool     caught_up;
};

/* Did the node accept the Prepare fresh (recovering or behind)? */
static bool
node_fresh(const struct tnode *t)
{
    return t->have_st && (t->st.recovering || t->st.behind_epoch != 0);
}

/* Collect progress; false (with a reason in why) on a fatal condition. */
static bool
collect_progress(struct admin *a, struct progress *p, char *why, size_t whylen)
{
    uint32_t i, k;

    memset(p, 0, sizeof(*p));
    p->caught_up = true;
    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];

        if (t->down_since != 0) {
            p->caught_up = false;
            if (now_ms() - t->down_since > NODE_LOST_MS) {
                snprintf(why, whylen, "copy: %s unreachable for %d s: %s", t->id,
                         NODE_LOST_MS / 1000, t->err);
                return false;
            }
            continue;
        }
        if (!t->have_st) {
            p->caught_up = false;
            continue;
        }
        if (pmeta_boot(&a->meta, t->id) != 0 && t->st.boot_id != pmeta_boot(&a->meta, t->id)) {
            snprintf(why, whylen, "copy: %s restarted (boot id changed)", t->id);
            return false;
        }
        if (t->st.pending_epoch != a->meta.epoch || t->st.phase == CPORT_PHASE_ABORTED) {
            snprintf(why, whylen, "copy: %s no longer has epoch %" PRIu64 " pending (it reports"
                     " pending %" PRIu64 ", phase %s)", t->id, a->meta.epoch,
                     t->st.pending_epoch, cport_phase_name(t->st.phase));
            return false;
        }
        for (k = 0; k < t->st.n_transfers; k++) {
            const struct cport_transfer *x = &t->st.transfers[k];

            if (x->error[0] != '\0') {
                snprintf(why, whylen, "copy: transfer %s -> %s failed: %s", t->id, x->dest,
                         x->error);
                return false;
            }
            p->items += x->items_sent;
            p->bytes += x->bytes_sent;
            p->items_total += x->items_total > x->items_sent ? x->items_total : x->items_sent;
            p->bytes_total += x->bytes_total > x->bytes_sent ? x->bytes_total : x->bytes_sent;
            p->backlog += x->dirty_backlog;
            p->n_transfers++;
            if (!x->walk_done || x->dirty_backlog > CAUGHT_UP_BACKLOG) {
                p->caught_up = false;
            }
        }
        /* A source that has not set up its transfers yet is not done.
         * A recovering or behind node accepted the Prepare fresh: it
         * purged and imports what it owns and sources nothing (it holds
         * nothing current, server/cluster.c compute_arcs), so waiting
         * for its transfers would wait forever. */
        if (t->is_source && t->st.n_transfers == 0 && !node_fresh(t)) {
            p->caught_up = false;
        }
    }
    return true;
}

/* Show copy progress: a bar on a terminal, a line per second otherwise. */
static void
show_progress(const struct progress *p, double rate, bool tty, bool final)
{
    char b1[32], b2[32], b3[32], eta[32] = "-";
    double frac = p->bytes_total > 0 ? (double)p->bytes / (double)p->bytes_total
                : p->items_total > 0 ? (double)p->items / (double)p->items_total : 1.0;
    int w = 30, fill, i;

    if (frac > 1 || final) {
        frac = 1;   /* totals are estimates taken at walk start */
    }
    if (rate > 0 && p->bytes_total > p->bytes) {
        snprintf(eta, sizeof(eta), "%.0fs", (double)(p->bytes_total - p->bytes) / rate);
    }
    fmt_bytes((double)p->bytes, b1, sizeof(b1));
    fmt_bytes((double)p->bytes_total, b2, sizeof(b2));
    fmt_bytes(rate, b3, sizeof(b3));
    if (tty) {
        fill = (int)(frac * w);
        fputs("\r[", stderr);
        for (i = 0; i < w; i++) {
            fputc(i < fill ? '#' : '.', stderr);
        }
        fprintf(stderr, "] %3.0f%% %" PRIu64 "/%" PRIu64 " items %s/%s %s/s ETA %s backlog %"
                PRIu64 "\033[K", frac * 100, p->items, p->items_total, b1, b2, b3, eta,
                p->backlog);
        if (final) {
            fputc('\n', stderr);
        }
    } else {
        fprintf(stderr, "ringctl: copy: %3.0f%% items %" PRIu64 "/%" PRIu64 " bytes %s/%s rate "
                "%s/s eta %s backlog %" PRIu64 "\n", frac * 100, p->items, p->items_total, b1,
                b2, b3, eta, p->backlog);
    }
    fflush(stderr);
}

/* COPY: StartCopy to every node, then poll Status until every source has
 * caught up (walk done, dirty backlog small). */
static int
phase_copy(struct admin *a)
{
    struct cport_request req = treq(a, CPORT_START_COPY);
    struct cport_request sreq = { .kind = CPORT_STATUS };
    struct progress p, last = { 0 };
    char why[1024];
    bool tty = isatty(STDERR_FILENO);
    int64_t t0 = now_ms(), last_print = 0, last_change = now_ms(), rate_t = now_ms();
    uint64_t rate_bytes = 0;
    double rate = 0;
    uint32_t i;

    if (a->meta.phase != TP_COPYING) {
        a->meta.phase = TP_COPYING;
        if (store_meta(a) != EX_OK) {
            return EX_FAILED;
        }
    }
    if (broadcast(a, &req, LONG_TIMEOUT_MS, "copy") > 0) {
        return fail_abort(a, "copy: StartCopy failed");
    }
    for (i = 0; i < a->n_nodes; i++) {
        if (a->nodes[i].is_source && node_fresh(&a->nodes[i])) {
            info("warning: copy: %s is %s: it holds nothing current and sources nothing; "
                 "the ranges only it held start empty on their new owners", a->nodes[i].id,
                 a->nodes[i].st.recovering ? "recovering" : "behind a higher epoch");
        }
    }
    for (;;) {
        for (i = 0; i < a->n_nodes; i++) {
            int rc = node_call(a, &a->nodes[i], &sreq, a->g->timeout_ms);

            if (rc == CPORT_EREFUSED) {
                snprintf(why, sizeof(why), "copy: %s refused Status: %s", a->nodes[i].id,
                         a->nodes[i].err);
                return fail_abort(a, why);
            }
        }
        if (!collect_progress(a, &p, why, sizeof(why))) {
            if (tty) {
                fputc('\n', stderr);
            }
            return fail_abort(a, why);
        }
        if (p.items != last.items || p.bytes != last.bytes || p.backlog != last.backlog) {
            last_change = now_ms();
        }
        if (now_ms() - rate_t >= 1000) {
            rate = (double)(p.bytes - rate_bytes) * 1000.0 / (double)(now_ms() - rate_t);
            rate_bytes = p.bytes;
            rate_t = now_ms();
        }
        last = p;
        if (p.caught_up) {
            if (rate == 0 && now_ms() > t0) {
                rate = (double)p.bytes * 1000.0 / (double)(now_ms() - t0);
            }
            show_progress(&p, rate, tty, true);
            break;
        }
        if (now_ms() - last_change > STALL_MS) {
            if (tty) {
                fputc('\n', stderr);
            }
            return fail_abort(a, "copy: no progress for 60 s");
        }
        if (tty || now_ms() - last_print >= 1000) {
            show_progress(&p, rate, tty, false);
            last_print = now_ms();
        }
        sleep_ms(POLL_MS);
    }
    info("copy: caught up: %" PRIu64 " items, %" PRIu64 " bytes sent in %.1f s", p.items,
         p.bytes, (double)(now_ms() - t0) / 1000.0);
    maybe_exit_after(a, "copy");
    return EX_OK;
}

/* One node's call on its own thread (call_parallel). */
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

/*
 * Send req at once to the nodes [lo, hi) whose skip[] entry is false (skip
 * may be NULL), one thread each, and write each call's result into rc[i].
 * Each thread touches only its own tnode. Falls back to one call after the
 * other when threads cannot be had.
 */
static void
call_parallel(struct admin *a, const struct cport_request *req, int timeout_ms,
              uint32_t lo, uint32_t hi, const bool *skip, int *rc)
{
    uint32_t n = hi - lo, i;
    struct node_call_arg *nc = calloc(n ? n : 1, sizeof(*nc));
    pthread_t *th = calloc(n ? n : 1, sizeof(*th));
    bool *started = calloc(n ? n : 1, sizeof(*started));

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

/*
 * Fence every node at once: each fences its moving ranges and drains, so
 * the ranges are held for the slowest node's drain, not for the sum of
 * all of them as with one call after the other. Returns how many nodes
 * failed, as broadcast().
 */
static uint32_t
fence_all(struct admin *a, const struct cport_request *req)
{
    int *rc = calloc(a->n_nodes ? a->n_nodes : 1, sizeof(*rc));
    uint32_t i, failed = 0;

    if (rc == NULL) {
        return broadcast(a, req, LONG_TIMEOUT_MS, "fence");
    }
    call_parallel(a, req, LONG_TIMEOUT_MS, 0, a->n_nodes, NULL, rc);
    for (i = 0; i < a->n_nodes; i++) {
        if (rc[i] != CPORT_OK) {
            info("fence: %s (%s): %s", a->nodes[i].id, a->nodes[i].addr, a->nodes[i].err);
            failed++;
        }
    }
    free(rc);
    return failed;
}

/* FENCE: Fence to every node at once (sources drain and reply when the
 * last batch is acked); then record FENCED in the store. */
static int
phase_fence(struct admin *a)
{
    struct cport_request req = treq(a, CPORT_FENCE);
    struct progress p;
    char why[1024];
    int64_t t0 = now_ms();
    uint32_t i;

    if (fence_all(a, &req) > 0) {
        return fail_abort(a, "fence: a node refused or is unreachable");
    }
    a->fence_ms = (uint64_t)(now_ms() - t0);
    for (i = 0; i < a->n_nodes; i++) {
        if (a->nodes[i].st.fence_held_ms > a->fence_ms) {
            a->fence_ms = a->nodes[i].st.fence_held_ms;
        }
    }
    if (!collect_progress(a, &p, why, sizeof(why))) {
        return fail_abort(a, why);
    }
    a->moved_items = p.items;
    a->moved_bytes = p.bytes;
    a->meta.phase = TP_FENCED;
    if (store_meta(a) != EX_OK) {
        return fail_abort(a, "fence: cannot record FENCED");
    }
    info("fence: %u nodes fenced in %" PRIu64 " ms", a->n_nodes, a->fence_ms);
    maybe_exit_after(a, "fence");
    return EX_OK;
}

/* The store's commit: active N -> N+1, history, delete pending (in this
 * order, so a crash leaves a state that resume completes). */
static int
store_commit(struct admin *a)
{
    struct mstore_op ops[4];
    char name[64];
    size_t len = 0;
    char *text = members_text(a->new, &len);
    int rc;

    if (text == NULL) {
        ctl_error("out of memory");
        return EX_FAILED;
    }
    snprintf(name, sizeof(name), "history/epoch-%" PRIu64 ".members", a->new->epoch);
    ops[0] = (struct mstore_op){ MSTORE_PUT, REC_ACTIVE, a->active_rev, text, len };
    ops[1] = (struct mstore_op){ MSTORE_PUT, name, MSTORE_ANY_REV, text, len };
    ops[2] = (struct mstore_op){ MSTORE_DELETE, REC_PENDING, a->pm_rev, NULL, 0 };
    ops[3] = (struct mstore_op){ MSTORE_DELETE, REC_META, a->meta_rev, NULL, 0 };
    rc = mstore_txn(a->store, ops, 4, NULL, NULL, err_buf, sizeof(err_buf));
    free(text);
    if (rc != MSTORE_OK) {
        ctl_error("commit: store: %s%s", err_buf, rc == MSTORE_ECONFLICT
                  ? " (another admin aborted or changed the store; nothing was committed)" : "");
        return rc == MSTORE_ECONFLICT ? EX_FAILED : EX_USAGE;
    }
    info("commit: store: epoch %" PRIu64 " is active", a->new->epoch);
    return EX_OK;
}

/* Deliver Commit in commit order — destinations, then the others, sources
 * last — with the nodes of one rank at once (the fenced ranges wait for the
 * slowest of each rank, not for the sum of all nodes), retrying silent
 * nodes for a bounded time. Returns how many never acknowledged. */
static uint32_t
deliver_commit(struct admin *a)
{
    struct cport_request req = treq(a, CPORT_COMMIT);
    int64_t deadline = now_ms() + COMMIT_RETRY_MS;
    uint32_t n = a->n_nodes ? a->n_nodes : 1;
    bool *done = calloc(n, sizeof(*done));
    int *rc = calloc(n, sizeof(*rc));
    uint32_t i, lo, hi, left = a->n_nodes;

    if (done == NULL || rc == NULL) {
        free(done);
        free(rc);
        return a->n_nodes;
    }
    for (;;) {
        /* a->nodes is sorted by rank, so each rank is one run [lo, hi). */
        for (lo = 0; lo < a->n_nodes; lo = hi) {
            for (hi = lo + 1; hi < a->n_nodes && a->nodes[hi].rank == a->nodes[lo].rank; hi++)
                ;
            call_parallel(a, &req, LONG_TIMEOUT_MS, lo, hi, done, rc);
            for (i = lo; i < hi; i++) {
                /* A node already at N+1 (a repeated commit) is done too. */
                if (!done[i] && (rc[i] == CPORT_OK
                                 || (a->nodes[i].have_st
                                     && a->nodes[i].st.active_epoch >= a->new->epoch))) {
                    done[i] = true;
                    left--;
                }
            }
        }
        if (left == 0 || now_ms() >= deadline) {
            break;
        }
        sleep_ms(200);
    }
    for (i = 0; i < a->n_nodes; i++) {
        if (!done[i]) {
            info("warning: commit: %s (%s) did not acknowledge epoch %" PRIu64 ": %s; the "
                 "commit stands (the store decided it); `ringctl resume` re-sends it",
                 a->nodes[i].id, a->nodes[i].addr, a->new->epoch, a->nodes[i].err);
        }
    }
    free(done);
    free(rc);
    return left;
}

/* CLEANUP: wait (bounded) for every reachable node to report no orphans. */
static bool
wait_cleanup(struct admin *a)
{
    struct cport_request sreq = { .kind = CPORT_STATUS };
    int64_t deadline = now_ms() + CLEANUP_WAIT_MS;
    uint64_t orphans;
    uint32_t i;

    for (;;) {
        orphans = 0;
        for (i = 0; i < a->n_nodes; i++) {
            if (node_call(a, &a->nodes[i], &sreq, a->g->timeout_ms) == CPORT_OK) {
                orphans += a->nodes[i].st.orphans;
            }
        }
        if (orphans == 0) {
            return true;
        }
        if (now_ms() >= deadline) {
            info("warning: cleanup: %" PRIu64 " orphan items still held after %d s",
                 orphans, CLEANUP_WAIT_MS / 1000);
            return false;
        }
        sleep_ms(200);
    }
}

/* COMMIT + CLEANUP + summary. */
static int
phase_commit(struct admin *a)
{
    uint32_t missed;
    bool clean;
    int rc;

    rc = store_commit(a);
    if (rc != EX_OK) {
        return rc;
    }
    missed = deliver_commit(a);
    clean = wait_cleanup(a);
    printf("epoch\t%" PRIu64 "\n", a->new->epoch);
    printf("op\t%s\n", a->meta.op);
    printf("moved_items\t%" PRIu64 "\n", a->moved_items);
    printf("moved_bytes\t%" PRIu64 "\n", a->moved_bytes);
    printf("fence_ms\t%" PRIu64 "\n", a->fence_ms);
    printf("seconds\t%.2f\n", (double)(now_ms() - a->t_start) / 1000.0);
    printf("nodes_not_committed\t%u\n", missed);
    printf("cleanup\t%s\n", clean ? "done" : "incomplete");
    return EX_OK;
}

/* Run the transition from the recorded phase to the end. */
static int
run_from(struct admin *a, enum tphase from)
{
    int rc = EX_OK;

    if (from <= TP_PREPARED) {
        rc = phase_prepare(a);
    }
    if (rc == EX_OK && from <= TP_COPYING) {
        rc = phase_copy(a);
    }
    if (rc == EX_OK && from <= TP_FENCED) {
        rc = phase_fence(a);
    }
    if (rc == EX_OK) {
        rc = phase_commit(a);
    }
    return rc;
}

/*
 * Commands
 */

/* Free everything an admin command holds: node connections, both
 * memberships, the meta and the store handle. */
static void
admin_free(struct admin *a)
{
    nodes_free(a);
    ring_members_free(a->old);
    ring_members_free(a->new);
    pmeta_clear(&a->meta);
    mstore_close(a->store);
}

/* Parse --rate MIB_PER_S. */
static int
parse_rate(const char *what, const char *arg, double *out)
{
    char *end;

    errno = 0;
    *out = strtod(arg, &end);
    if (errno != 0 || *end != '\0' || !(*out >= 0) || *out > 1e6) {
        ctl_error("%s: --rate MIB_PER_S: expected a number >= 0 (0 = unlimited)", what);
        return EX_USAGE;
    }
    return EX_OK;
}

/* Parse join/leave arguments (after the subcommand name) into the new
 * membership. kind is "join" or "leave". */
static int
parse_change(int argc, char **argv, const char *kind, bool with_rate, char *id,
             char *addr, uint32_t *weight, char *zone, double *rate_mib)
{
    static const struct option opts[] = {
        { "weight", required_argument, NULL, 'w' },
        { "zone",   required_argument, NULL, 'z' },
        { "rate",   required_argument, NULL, 'r' },
        { "help",   no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    bool join = strcmp(kind, "join") == 0;
    char *end;
    int c;

    /* No "+": options may follow the operands (join ID ADDR --rate R). */
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'w':
            *weight = (uint32_t)strtoul(optarg, &end, 10);
            if (!join || *end != '\0' || *weight < 1 || *weight > RING_WEIGHT_MAX) {
                ctl_error("%s: --weight: expected 1..%d (join only)", kind, RING_WEIGHT_MAX);
                return EX_USAGE;
            }
            break;
        case 'z':
            if (!join || strlen(optarg) > RING_ZONE_MAX) {
                ctl_error("%s: --zone: at most %d bytes (join only)", kind, RING_ZONE_MAX);
                return EX_USAGE;
            }
            snprintf(zone, RING_ZONE_MAX + 1, "%s", optarg);
            break;
        case 'r':
            if (!with_rate) {
                ctl_error("%s: --rate MIB_PER_S: expected a number >= 0 (0 = unlimited)", kind);
                return EX_USAGE;
            }
            if (parse_rate(kind, optarg, rate_mib) != EX_OK) {
                return EX_USAGE;
            }
            break;
        case 'h':
            printf("usage: ringctl --store DIR --token-file F %s\n", join
                   ? "join ID ADDR [--weight W] [--zone Z] [--rate MIB_PER_S]"
                   : "leave ID [--rate MIB_PER_S]");
            exit(0);
        default:
            return EX_USAGE;
        }
    }
    if (argc - optind != (join ? 2 : 1)) {
        ctl_error("usage: %s", join ? "join ID ADDR [--weight W] [--zone Z]" : "leave ID");
        return EX_USAGE;
    }
    if (strlen(argv[optind]) > RING_ID_MAX
        || (join && strlen(argv[optind + 1]) > RING_ADDR_MAX)) {
        ctl_error("%s: id or address too long", kind);
        return EX_USAGE;
    }
    strcpy(id, argv[optind]);
    if (join) {
        strcpy(addr, argv[optind + 1]);
    }
    return EX_OK;
}

/* The membership after the change, epoch N+1; EX_USAGE after printing why. */
static int
make_new(struct admin *a, bool join, const char *id, const char *addr, uint32_t weight,
         const char *zone)
{
    uint32_t i;

    a->new = ring_members_dup(a->old);
    if (a->new == NULL) {
        ctl_error("out of memory");
        return EX_FAILED;
    }
    a->new->epoch = a->old->epoch + 1;
    if (join) {
        if (ring_members_find(a->old, id) >= 0) {
            ctl_error("join: %s is already a member of epoch %" PRIu64, id, a->old->epoch);
            return EX_USAGE;
        }
        /* Two members at one address: the node there answers as itself,
         * so the joiner's ranges would be copied to the wrong node and
         * the copy refused mid-transition. Refuse it before the store. */
        for (i = 0; i < a->old->n_nodes; i++) {
            if (strcmp(a->old->nodes[i].addr, addr) == 0) {
                ctl_error("join: %s is already the address of %s in epoch %" PRIu64, addr,
                          a->old->nodes[i].id, a->old->epoch);
                return EX_USAGE;
            }
        }
        if (ring_members_add(a->new, id, addr, weight, zone) != RING_OK) {
            ctl_error("join: invalid node '%s' '%s' (id [A-Za-z0-9._:-]{1,64}, "
                      "addr host:port)", id, addr);
            return EX_USAGE;
        }
    } else {
        if (ring_members_remove(a->new, id) != RING_OK) {
            ctl_error("leave: %s is not a member of epoch %" PRIu64, id, a->old->epoch);
            return EX_USAGE;
        }
        if (a->new->n_nodes == 0) {
            ctl_error("leave: %s is the last node; a cluster cannot be empty", id);
            return EX_USAGE;
        }
    }
    return EX_OK;
}

/* The options of one change (join, leave, remove --failed). */
struct change_opts {
    bool     join;
    bool     remove_failed;         /* leave of a dead node: not contacted */
    bool     force;                 /* remove --failed: R = 1, or the node answers */
    char     id[RING_ID_MAX + 1], addr[RING_ADDR_MAX + 1], zone[RING_ZONE_MAX + 1];
    uint32_t weight;
    double   rate_mib;
};

static int change_run(struct ctl_globals *g, const struct change_opts *o);

/* join / leave: the whole transition. */
static int
change(struct ctl_globals *g, int argc, char **argv, bool join)
{
    struct change_opts o = { .join = join, .weight = 1, .rate_mib = DEFAULT_RATE_MIB };
    int rc;

    rc = parse_change(argc, argv, join ? "join" : "leave", true, o.id, o.addr, &o.weight, o.zone,
                      &o.rate_mib);
    return rc == EX_OK ? change_run(g, &o) : rc;
}

/*
 * remove --failed: may the node be dropped without contacting it? It must
 * not answer Hello within PROBE_MS, or answer as recovering (restarted
 * empty) or behind (removed already): such a node holds nothing current.
 * Otherwise refuse unless --force. EX_OK or EX_USAGE (printed).
 */
static int
probe_failed(struct admin *a, const struct change_opts *o)
{
    struct cport_request sreq = { .kind = CPORT_STATUS };
    int idx = ring_members_find(a->old, o->id);
    struct cport_conn *c = NULL;
    struct cport_status st;
    char caddr[RING_ADDR_MAX + 16], err[512];
    int rc;

    if (idx < 0) {
        ctl_error("remove: %s is not a member of epoch %" PRIu64, o->id, a->old->epoch);
        return EX_USAGE;
    }
    if (a->old->replicas < 2) {
        info("warning: R = %u: %s holds the only copy of its keys; they are gone (%s)",
             a->old->replicas, o->id, o->force ? "--force given" : "give --force to proceed");
        if (!o->force) {
            return EX_USAGE;
        }
    }
    if (cport_addr_of(a->old->nodes[idx].addr, caddr, sizeof(caddr)) != 0) {
        return EX_OK;
    }
    rc = cport_connect(caddr, a->g->cluster, a->atoken, a->atoken_len, PROBE_MS, &c, NULL,
                       err, sizeof(err));
    if (rc != CPORT_OK) {
        info("remove: %s (%s) does not answer (%s): removing it as failed", o->id,
             a->old->nodes[idx].addr, err);
        return EX_OK;
    }
    rc = cport_call(c, &sreq, PROBE_MS, &st, err, sizeof(err));
    cport_close(c);
    if (rc == CPORT_OK && (st.recovering || st.behind_epoch != 0)) {
        info("remove: %s answers but is %s: it holds nothing current; removing it", o->id,
             st.recovering ? "recovering (restarted empty)" : "behind a higher epoch");
        cport_status_clear(&st);
        return EX_OK;
    }
    cport_status_clear(&st);
    if (o->force) {
        info("warning: remove: %s answers its cluster port; removing it anyway (--force): "
             "it is not contacted", o->id);
        return EX_OK;
    }
    ctl_error("remove: %s (%s) is alive (it answers its cluster port): use `ringctl leave %s`, "
              "or --force", o->id, a->old->nodes[idx].addr, o->id);
    return EX_USAGE;
}

/* Run one change (see struct change_opts) from the store to the end. */
static int
change_run(struct ctl_globals *g, const struct change_opts *o)
{
    struct admin a = { .g = g, .exit_after_ok = true };
    const char *id = o->id, *addr = o->addr, *zone = o->zone;
    char host[128] = "?", *ptext = NULL, *mtext = NULL;
    const char *user = getenv("USER");
    const char *kind = o->join ? "join" : o->remove_failed ? "remove" : "leave";
    bool join = o->join;
    uint32_t weight = o->weight;
    double rate_mib = o->rate_mib;
    struct mstore_op ops[3];
    size_t plen = 0, mlen = 0, failed = 0;
    int rc;

    a.t_start = now_ms();
    rc = admin_load(&a, true);
    if (rc != EX_OK) {
        goto out;
    }
    if (a.old == NULL) {
        ctl_error("%s: the store has no active membership (ringctl init first)", kind);
        rc = EX_USAGE;
        goto out;
    }
    if (a.new != NULL || a.have_meta) {
        ctl_error("another transition is pending (exit 3):");
        print_pending(&a, stderr);
        rc = EX_PENDING;
        goto out;
    }
    if (o->remove_failed) {
        a.n_failed = 0;
        rc = probe_failed(&a, o);
        if (rc != EX_OK) {
            goto out;
        }
        add_failed(&a, id);
    }
    rc = make_new(&a, join, id, addr, weight, zone);
    if (rc != EX_OK) {
        goto out;
    }
    /* PREPARE in the store: create pending, conditional on active N. */
    if (getrandom(a.meta.token, TOKEN_BYTES, 0) != TOKEN_BYTES) {
        ctl_error("getrandom: %s", strerror(errno));
        rc = EX_FAILED;
        goto out;
    }
    gethostname(host, sizeof(host) - 1);
    a.meta.phase = TP_PREPARED;
    a.meta.from_epoch = a.old->epoch;
    a.meta.epoch = a.new->epoch;
    a.meta.rate = (uint64_t)(rate_mib * 1048576.0);
    a.meta.started = (int64_t)time(NULL);
    if (join) {
        snprintf(a.meta.op, sizeof(a.meta.op), "join %s %s", id, addr);
    } else if (o->remove_failed) {
        snprintf(a.meta.op, sizeof(a.meta.op), "%s%s", OP_REMOVE_FAILED, id);
    } else {
        snprintf(a.meta.op, sizeof(a.meta.op), "leave %s", id);
    }
    snprintf(a.meta.admin, sizeof(a.meta.admin), "%s@%s pid %ld", user ? user : "?", host,
             (long)getpid());
    ptext = members_text(a.new, &plen);
    mtext = pmeta_format(&a.meta, &mlen);
    if (ptext == NULL || mtext == NULL) {
        ctl_error("out of memory");
        rc = EX_FAILED;
        goto out;
    }
    ops[0] = (struct mstore_op){ MSTORE_CHECK, REC_ACTIVE, a.active_rev, NULL, 0 };
    ops[1] = (struct mstore_op){ MSTORE_CREATE, REC_PENDING, 0, ptext, plen };
    ops[2] = (struct mstore_op){ MSTORE_CREATE, REC_META, 0, mtext, mlen };
    rc = mstore_txn(a.store, ops, 3, &failed, &a.pm_rev, err_buf, sizeof(err_buf));
    if (rc == MSTORE_ECONFLICT) {
        ctl_error("%s: another admin won (%s)", kind,
                  failed == 0 ? "the active epoch changed" : "a transition is pending");
        if (load_state(&a) == EX_OK) {
            print_pending(&a, stderr);
        }
        rc = EX_PENDING;
        goto out;
    }
    if (rc != MSTORE_OK) {
        ctl_error("store: %s", err_buf);
        rc = rc == MSTORE_ECORRUPT ? EX_USAGE : EX_FAILED;
        goto out;
    }
    a.meta_rev = a.pm_rev;
    a.have_meta = true;
    info("plan: %s: epoch %" PRIu64 " -> %" PRIu64 "; pending recorded in the store",
         a.meta.op, a.meta.from_epoch, a.meta.epoch);
    rc = nodes_build(&a);
    if (rc == EX_OK) {
        rc = run_from(&a, TP_PREPARED);
    } else {
        rc = fail_abort(&a, "plan");
    }
out:
    free(ptext);
    free(mtext);
    admin_free(&a);
    return rc;
}

int
ctl_join(struct ctl_globals *g, int argc, char **argv)
{
    return change(g, argc, argv, true);
}

int
ctl_leave(struct ctl_globals *g, int argc, char **argv)
{
    return change(g, argc, argv, false);
}

/*
 * Node failure (docs/cluster.md, "Node failure")
 */


/* remove --failed ID: the whole transition, the node never contacted
 * (see probe_failed for when that is allowed). */
static int
remove_failed(struct ctl_globals *g, const char *id, bool force, double rate_mib)
{
    struct change_opts o = { .remove_failed = true, .force = force, .weight = 1,
                             .rate_mib = rate_mib };

    snprintf(o.id, sizeof(o.id), "%s", id);
    return change_run(g, &o);
}

int
ctl_remove(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = {
        { "failed", no_argument,       NULL, 'f' },
        { "force",  no_argument,       NULL, 'F' },
        { "rate",   required_argument, NULL, 'r' },
        { "help",   no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    double rate = DEFAULT_RATE_MIB;
    bool failed = false, force = false;
    int c;

    /* No "+": options may follow the operands (remove --failed ID --force). */
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'f': failed = true; break;
        case 'F': force = true; break;
        case 'r':
            if (parse_rate("remove", optarg, &rate) != EX_OK) {
                return EX_USAGE;
            }
            break;
        case 'h':
            printf("usage: ringctl --store DIR --token-file F remove --failed ID [--force] "
                   "[--rate MIB_PER_S]\n");
            return EX_OK;
        default: return EX_USAGE;
        }
    }
    if (!failed || argc - optind != 1 || strlen(argv[optind]) > RING_ID_MAX) {
        ctl_error("usage: remove --failed ID [--force] [--rate MIB_PER_S] (a live node "
                  "leaves with `ringctl leave ID`)");
        return EX_USAGE;
    }
    return remove_failed(g, argv[optind], force, rate);
}

/* The node `id` of the store's active epoch, copied into *out. 0 found,
 * 1 absent, -1 on a store error (printed). */
static int
active_node(struct ctl_globals *g, const char *id, struct ring_node *out, uint64_t *epoch)
{
    struct admin a = { .g = g };
    int rc, idx;

    rc = admin_load(&a, false);
    if (rc != EX_OK || a.old == NULL) {
        if (rc == EX_OK) {
            ctl_error("the store has no active membership");
        }
        admin_free(&a);
        return -1;
    }
    *epoch = a.old->epoch;
    idx = ring_members_find(a.old, id);
    if (idx >= 0) {
        *out = a.old->nodes[idx];
    }
    admin_free(&a);
    return idx >= 0 ? 0 : 1;
}

/* Drop a dead or recovering member and join it again (it comes back
 * empty): the way to bring a restarted node's ranges back. */
static int
repair_node(struct ctl_globals *g, const char *id, const char *addr_arg, bool force,
            double rate_mib)
{
    struct change_opts o = { .join = true, .rate_mib = rate_mib };
    struct ring_node n;
    uint64_t epoch = 0;
    int rc;

    memset(&n, 0, sizeof(n));
    rc = active_node(g, id, &n, &epoch);
    if (rc < 0) {
        return EX_USAGE;
    }
    if (rc == 0) {
        info("repair: %s: removing it from epoch %" PRIu64 " (copies of its ranges come from "
             "the surviving owners)", id, epoch);
        rc = remove_failed(g, id, force, rate_mib);
        if (rc != EX_OK) {
            return rc;
        }
    } else if (addr_arg == NULL) {
        ctl_error("repair: %s is not a member of epoch %" PRIu64 ": give its ADDR to join it",
                  id, epoch);
        return EX_USAGE;
    }
    snprintf(o.id, sizeof(o.id), "%s", id);
    snprintf(o.addr, sizeof(o.addr), "%s", addr_arg != NULL ? addr_arg : n.addr);
    snprintf(o.zone, sizeof(o.zone), "%s", addr_arg != NULL ? "" : n.zone);
    o.weight = addr_arg != NULL || n.weight == 0 ? 1 : n.weight;
    info("repair: %s: joining it again at %s", id, o.addr);
    return change_run(g, &o);
}

int
ctl_repair(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = {
        { "force",  no_argument,       NULL, 'F' },
        { "rate",   required_argument, NULL, 'r' },
        { "help",   no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    double rate = DEFAULT_RATE_MIB;
    bool force = false;
    int c;

    /* No "+": options may follow the operands (repair ID --force). */
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'F': force = true; break;
        case 'r':
            if (parse_rate("repair", optarg, &rate) != EX_OK) {
                return EX_USAGE;
            }
            break;
        case 'h':
            printf("usage: ringctl --store DIR --token-file F repair ID [ADDR] [--force] "
                   "[--rate MIB_PER_S]\n");
            return EX_OK;
        default: return EX_USAGE;
        }
    }
    if (argc - optind < 1 || argc - optind > 2 || strlen(argv[optind]) > RING_ID_MAX
        || (argc - optind == 2 && strlen(argv[optind + 1]) > RING_ADDR_MAX)) {
        ctl_error("usage: repair ID [ADDR] [--force] [--rate MIB_PER_S]");
        return EX_USAGE;
    }
    return repair_node(g, argv[optind], argc - optind == 2 ? argv[optind + 1] : NULL, force,
                       rate);
}

static volatile sig_atomic_t watch_stop;

static void
watch_signal(int sig)
{
    (void)sig;
    watch_stop = 1;
}

/* One member as the watch loop sees it. */
struct watched {
    char    id[RING_ID_MAX + 1];
    int64_t bad_since;              /* ms; 0 = healthy */
    bool    recovering;             /* answers, but restarted empty or behind */
};

/*
 * watch: poll every member; one that stays unreachable for --down-after
 * seconds is removed (remove --failed), one that stays recovering (it
 * restarted empty) is repaired (removed, then joined again). One action at
 * a time; a pending transition (another admin's) is left alone. Runs until
 * SIGINT/SIGTERM, or one round with --once.
 */
int
ctl_watch(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = {
        { "down-after", required_argument, NULL, 'd' },
        { "interval",   required_argument, NULL, 'i' },
        { "force",      no_argument,       NULL, 'F' },
        { "once",       no_argument,       NULL, 'o' },
        { "help",       no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    struct sigaction sa;
    struct watched *w = NULL;
    uint32_t nw = 0;
    double down_after = 10, interval = 1;
    bool force = false, once = false;
    int c, rc = EX_OK;
    char *end;

    optind = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
        case 'i':
            errno = 0;
            *(c == 'd' ? &down_after : &interval) = strtod(optarg, &end);
            if (errno != 0 || *end != '\0' || !(down_after >= 0) || !(interval >= 0.05)
                || down_after > 86400 || interval > 3600) {
                ctl_error("watch: --down-after S (>= 0), --interval S (>= 0.05)");
                return EX_USAGE;
            }
            break;
        case 'F': force = true; break;
        case 'o': once = true; break;
        case 'h':
            printf("usage: ringctl --store DIR --token-file F watch [--down-after S] "
                   "[--interval S] [--force] [--once]\n");
            return EX_OK;
        default: return EX_USAGE;
        }
    }
    if (optind != argc) {
        ctl_error("usage: watch [--down-after S] [--interval S] [--force] [--once]");
        return EX_USAGE;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = watch_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    info("watch: a member unreachable (or recovering) for %.1f s is removed (repaired); "
         "polling every %.2f s", down_after, interval);
    while (!watch_stop) {
        struct admin a = { .g = g };
        struct cport_request sreq = { .kind = CPORT_STATUS };
        char act_id[RING_ID_MAX + 1] = "";
        bool act_repair = false;
        uint32_t i, k;

        rc = admin_load(&a, true);
        if (rc != EX_OK) {
            admin_free(&a);
            break;
        }
        if (a.old != NULL && (a.new != NULL || a.have_meta)) {
            info("watch: a transition is pending (%s); waiting", a.have_meta ? a.meta.op : "?");
        } else if (a.old != NULL && nodes_build(&a) == EX_OK) {
            for (i = 0; i < a.n_nodes; i++) {
                struct tnode *t = &a.nodes[i];
                struct watched *me = NULL;
                int crc = node_call(&a, t, &sreq, (int)(interval * 1000) < 1000
                                    ? 1000 : (int)(interval * 1000));
                bool bad = crc != CPORT_OK || t->st.recovering || t->st.behind_epoch != 0;

                for (k = 0; k < nw; k++) {
                    if (strcmp(w[k].id, t->id) == 0) {
                        me = &w[k];
                    }
                }
                if (me == NULL) {
                    struct watched *nwp = realloc(w, (nw + 1) * sizeof(*w));

                    if (nwp == NULL) {
                        continue;
                    }
                    w = nwp;
                    me = &w[nw++];
                    memset(me, 0, sizeof(*me));
                    snprintf(me->id, sizeof(me->id), "%s", t->id);
                }
                if (!bad) {
                    if (me->bad_since != 0) {
                        info("watch: %s is healthy again", t->id);
                    }
                    me->bad_since = 0;
                    continue;
                }
                me->recovering = crc == CPORT_OK;
                if (me->bad_since == 0) {
                    me->bad_since = now_ms();
                    info("watch: %s %s", t->id, crc != CPORT_OK ? t->err
                         : t->st.recovering ? "is recovering (restarted empty)"
                         : "is behind a higher epoch");
                }
                if (act_id[0] == '\0' && now_ms() - me->bad_since >= (int64_t)(down_after * 1000)) {
                    snprintf(act_id, sizeof(act_id), "%s", t->id);
                    act_repair = me->recovering;
                }
            }
        }
        admin_free(&a);
        if (act_id[0] != '\0') {
            info("watch: %s: %s", act_id, act_repair ? "repair (remove --failed, then join)"
                                                     : "remove --failed");
            rc = act_repair ? repair_node(g, act_id, NULL, force, DEFAULT_RATE_MIB)
                            : remove_failed(g, act_id, force, DEFAULT_RATE_MIB);
            printf("watch\t%s\t%s\t%s\n", act_id, act_repair ? "repair" : "remove --failed",
                   rc == EX_OK ? "done" : "failed");
            fflush(stdout);
            for (k = 0; k < nw; k++) {
                if (strcmp(w[k].id, act_id) == 0) {
                    w[k].bad_since = 0;
                }
            }
        }
        if (once) {
            break;
        }
        sleep_ms((int)(interval * 1000));
    }
    free(w);
    return rc;
}

/* Parse a subcommand with no arguments. */
static int
no_args(int argc, char **argv, const char *usage)
{
    static const struct option opts[] = {
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int c;

    optind = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        if (c == 'h') {
            printf("usage: ringctl --store DIR --token-file F %s\n", usage);
            exit(0);
        }
        return EX_USAGE;
    }
    if (optind != argc) {
        ctl_error("usage: ringctl --store DIR --token-file F %s", usage);
        return EX_USAGE;
    }
    return EX_OK;
}

/* Push the active membership to nodes whose epoch is behind (init's
 * Commit, and resume with nothing pending). Returns how many failed. */
static uint32_t
push_active(struct admin *a, const char *what, bool only_behind)
{
    struct cport_request req = { .kind = CPORT_COMMIT, .membership = a->old };
    struct cport_request sreq = { .kind = CPORT_STATUS };
    uint32_t i, failed = 0;

    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];
        int rc;

        if (only_behind) {
            rc = node_call(a, t, &sreq, a->g->timeout_ms);
            if (rc == CPORT_OK && t->st.active_epoch >= a->old->epoch) {
                printf("%s\t%s\tok\tepoch %" PRIu64 "\n", t->id, t->addr, t->st.active_epoch);
                continue;
            }
        }
        rc = node_call(a, t, &req, LONG_TIMEOUT_MS);
        if (rc == CPORT_OK) {
            printf("%s\t%s\tok\n", t->id, t->addr);
        } else {
            printf("%s\t%s\tfailed\t%s\n", t->id, t->addr, t->err);
            failed++;
        }
    }
    if (failed > 0) {
        info("%s: %u of %u nodes did not take epoch %" PRIu64 "; the store has it, "
             "`ringctl resume` re-sends it", what, failed, a->n_nodes, a->old->epoch);
    }
    return failed;
}

int
ctl_init(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = {
        { "members", required_argument, NULL, 'm' },
        { "help",    no_argument,       NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    struct admin a = { .g = g };
    struct mstore_op ops[2];
    const char *file = g->members;
    char *text = NULL, *out = NULL;
    size_t len = 0, olen = 0, failed = 0;
    int c, rc;

    optind = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': file = optarg; break;
        case 'h':
            printf("usage: ringctl --store DIR --token-file F init --members FILE\n");
            return EX_OK;
        default: return EX_USAGE;
        }
    }
    if (file == NULL || optind != argc) {
        ctl_error("usage: ringctl --store DIR --token-file F init --members FILE");
        return EX_USAGE;
    }
    rc = admin_open_store(&a);
    if (rc == EX_OK) {
        rc = admin_read_token(&a);
    }
    if (rc != EX_OK) {
        goto out;
    }
    text = ctl_read_file(file, &len);
    if (text == NULL) {
        ctl_error("%s: %s", file, strerror(errno));
        rc = EX_USAGE;
        goto out;
    }
    if (ring_members_parse(text, len, file, &a.old, err_buf, sizeof(err_buf)) != RING_OK) {
        ctl_error("%s", err_buf);
        rc = EX_USAGE;
        goto out;
    }
    if (a.old->n_nodes == 0) {
        ctl_error("%s: no nodes", file);
        rc = EX_USAGE;
        goto out;
    }
    a.old->epoch = 1;
    out = members_text(a.old, &olen);
    if (out == NULL) {
        ctl_error("out of memory");
        rc = EX_FAILED;
        goto out;
    }
    ops[0] = (struct mstore_op){ MSTORE_CREATE, REC_ACTIVE, 0, out, olen };
    ops[1] = (struct mstore_op){ MSTORE_PUT, "history/epoch-1.members", MSTORE_ANY_REV, out,
                                 olen };
    rc = mstore_txn(a.store, ops, 2, &failed, NULL, err_buf, sizeof(err_buf));
    if (rc == MSTORE_ECONFLICT) {
        struct ring_members *cur = NULL;
        uint64_t rev;

        load_members_rec(&a, REC_ACTIVE, &cur, &rev);
        ctl_error("init: the store already has an active membership (epoch %" PRIu64 ")",
                  cur != NULL ? cur->epoch : 0);
        ring_members_free(cur);
        rc = EX_PENDING;
        goto out;
    }
    if (rc != MSTORE_OK) {
        ctl_error("store: %s", err_buf);
        rc = rc == MSTORE_ECORRUPT ? EX_USAGE : EX_FAILED;
        goto out;
    }
    info("init: store: epoch 1 with %u nodes", a.old->n_nodes);
    rc = nodes_build(&a);
    if (rc == EX_OK) {
        rc = push_active(&a, "init", false) > 0 ? EX_FAILED : EX_OK;
    }
out:
    free(text);
    free(out);
    admin_free(&a);
    return rc;
}

/* Append ",x" (or "x") to a column cell. */
static void
cell_add(char *buf, size_t len, const char *x)
{
    size_t n = strlen(buf);

    if (n + strlen(x) + 2 < len) {
        snprintf(buf + n, len - n, "%s%s", n > 0 ? "," : "", x);
    }
}

/* The heartbeat views around node n: which peers n sees suspect or down
 * ("id:state"), and which nodes see n down or suspect. "-" when none. */
static void
peer_views(struct admin *a, const struct tnode *n, char *sees, size_t slen, char *by,
           size_t blen)
{
    uint32_t i, k;

    sees[0] = by[0] = '\0';
    for (k = 0; n->have_st && k < n->st.n_peers; k++) {
        const struct cport_peer *p = &n->st.peers[k];
        char cell[RING_ID_MAX + 16];

        if (p->state == CPORT_PEER_DOWN || p->state == CPORT_PEER_SUSPECT) {
            snprintf(cell, sizeof(cell), "%s:%s", p->node_id, cport_peer_health_name(p->state));
            cell_add(sees, slen, cell);
        }
    }
    for (i = 0; i < a->n_nodes; i++) {
        const struct tnode *o = &a->nodes[i];

        for (k = 0; o != n && o->have_st && k < o->st.n_peers; k++) {
            const struct cport_peer *p = &o->st.peers[k];

            if (strcmp(p->node_id, n->id) == 0
                && (p->state == CPORT_PEER_DOWN || p->state == CPORT_PEER_SUSPECT)) {
                cell_add(by, blen, o->id);
            }
        }
    }
    if (sees[0] == '\0') {
        snprintf(sees, slen, "-");
    }
    if (by[0] == '\0') {
        snprintf(by, blen, "-");
    }
}

int
ctl_status(struct ctl_globals *g, int argc, char **argv)
{
    struct admin a = { .g = g };
    struct cport_request sreq = { .kind = CPORT_STATUS };
    struct table t = { .ncols = 15 };
    const char *sep;
    struct ring *r = NULL;
    double *share = NULL;
    uint32_t i, bad = 0;
    uint64_t epoch;
    int rc;

    rc = no_args(argc, argv, "status");
    if (rc == EX_OK) {
        rc = admin_load(&a, true);
    }
    if (rc != EX_OK) {
        goto out;
    }
    epoch = a.old != NULL ? a.old->epoch : 0;
    /* Two header lines: TSV, or "name:  value" words for people. */
    sep = g->human ? " " : "\t";
    printf("epoch%s%" PRIu64 "\n", g->human ? ":   " : "\t", epoch);
    printf("pending%s", g->human ? ": " : "\t");
    if (a.have_meta) {
        printf("%" PRIu64 "%s%s%s%s\n", a.meta.epoch, sep, tphase_names[a.meta.phase], sep,
               a.meta.op);
    } else if (a.new != NULL) {
        printf("%" PRIu64 "%sINCOMPLETE%s%s without %s\n", a.new->epoch, sep, sep, REC_PENDING,
               REC_META);
    } else {
        printf("none\n");
    }
    printf("phase%s%s\n", g->human ? ":   " : "\t",
           a.have_meta ? tphase_names[a.meta.phase] : a.new != NULL ? "INCOMPLETE" : "NONE");
    if (a.old == NULL) {
        goto out;
    }
    r = ring_build(a.old);
    share = calloc(a.old->n_nodes, sizeof(*share));
    if (r == NULL || share == NULL) {
        ctl_error("cannot build the ring of epoch %" PRIu64, epoch);
        rc = EX_FAILED;
        goto out;
    }
    ring_shares(r, share);
    rc = nodes_build(&a);
    if (rc != EX_OK) {
        goto out;
    }
    table_row(&t, "id\taddr\tstate\tactive\tpending\tphase\titems\tbytes\tshare\tboot_changed"
              "\torphans\tmisrouted\tflags\tsees_down\tseen_down_by");
    /* Every node first: the seen_down_by column needs the others' views. */
    for (i = 0; i < a.n_nodes; i++) {
        if (node_call(&a, &a.nodes[i], &sreq, g->timeout_ms) != CPORT_OK) {
            a.nodes[i].have_st = false;
        }
    }
    for (i = 0; i < a.n_nodes; i++) {
        struct tnode *n = &a.nodes[i];
        int idx = ring_members_find(a.old, n->id);
        char sh[32];
        uint64_t want_boot = a.have_meta ? pmeta_boot(&a.meta, n->id) : 0;

        snprintf(sh, sizeof(sh), g->human ? "%.1f%%" : "%.4f",
                 idx >= 0 ? share[idx] * (g->human ? 100 : 1) : 0.0);
        char flags[64], sees[512], by[512];

        peer_views(&a, n, sees, sizeof(sees), by, sizeof(by));
        if (!n->have_st) {
            table_row(&t, "%s\t%s\tdown\t-\t-\t-\t-\t-\t%s\t-\t-\t-\t-\t-\t%s", n->id, n->addr,
                      sh, by);
            info("status: %s (%s): %s", n->id, n->addr, n->err);
            bad++;
            continue;
        }
        if (n->st.recovering) {
            snprintf(flags, sizeof(flags), "recovering");
        } else if (n->st.behind_epoch != 0) {
            snprintf(flags, sizeof(flags), "behind:%" PRIu64, n->st.behind_epoch);
        } else {
            snprintf(flags, sizeof(flags), "-");
        }
        table_row(&t, "%s\t%s\tup\t%" PRIu64 "\t%" PRIu64 "\t%s\t%" PRIu64 "\t%" PRIu64 "\t%s\t%s"
                  "\t%" PRIu64 "\t%" PRIu64 "\t%s\t%s\t%s", n->id, n->addr, n->st.active_epoch,
                  n->st.pending_epoch, cport_phase_name(n->st.phase), n->st.curr_items,
                  n->st.bytes, sh, want_boot == 0 ? "-"
                  : want_boot != n->st.boot_id ? "yes" : "no", n->st.orphans, n->st.misrouted,
                  flags, sees, by);
        if (n->st.recovering || n->st.behind_epoch != 0) {
            info("status: %s is %s: `ringctl repair %s` brings its ranges back", n->id, flags,
                 n->id);
            bad++;
        }
        /* Nodes of the active epoch must be at it; a joining node is not yet. */
        if (idx >= 0 && n->st.active_epoch != epoch) {
            info("status: %s is at epoch %" PRIu64 ", the store at %" PRIu64, n->id,
                 n->st.active_epoch, epoch);
            bad++;
        }
    }
    table_print(&t, g->human, stdout);
    rc = bad > 0 ? EX_FAILED : EX_OK;
out:
    free(share);
    ring_free(r);
    admin_free(&a);
    return rc;
}

/* Length of an arc (lo, hi] as a fraction of the circle. */
static double
arc_frac(uint64_t lo, uint64_t hi)
{
    return lo == hi ? 1.0 : (double)(hi - lo) / 18446744073709551616.0;
}

/* Fraction of the keyspace each node holds (in its preference lists at R):
 * walk every point of the ring. owned has n_nodes entries. */
static void
owned_fractions(const struct ring *r, double *owned)
{
    const struct ring_members *m = ring_members(r);
    uint32_t n = ring_n_points(r), k, j, cnt, node, vn, list[64];
    uint32_t want = m->replicas < 64 ? m->replicas : 64;
    uint64_t pos, prev;

    memset(owned, 0, m->n_nodes * sizeof(*owned));
    if (n == 0) {
        return;
    }
    ring_point(r, n - 1, &prev, &node, &vn);
    for (k = 0; k < n; k++) {
        ring_point(r, k, &pos, &node, &vn);
        if (pos != prev || n == 1) {
            cnt = ring_locate(r, pos, want, list);
            for (j = 0; j < cnt; j++) {
                owned[list[j]] += arc_frac(prev, pos);
            }
        }
        prev = pos;
    }
}

/* plan join|leave: a dry run from the store's active membership. */
static int
plan_change(struct ctl_globals *g, int argc, char **argv)
{
    struct admin a = { .g = g };
    struct cport_request sreq = { .kind = CPORT_STATUS };
    char id[RING_ID_MAX + 1] = "", addr[RING_ADDR_MAX + 1] = "", zone[RING_ZONE_MAX + 1] = "";
    bool join = strcmp(argv[1], "join") == 0, have_token;
    struct ring *ro = NULL, *rn = NULL;
    struct ring_diff *d = NULL;
    double *sold = NULL, *snew = NULL, *own = NULL, *moving = NULL, rate = 0;
    struct table t = { .ncols = 7 };
    uint32_t i, j, k, weight = 1, unknown = 0;
    double tot_items = 0, tot_bytes = 0;
    int rc;

    rc = parse_change(argc - 1, argv + 1, join ? "join" : "leave", false, id, addr, &weight,
                      zone, &rate);
    if (rc == EX_OK) {
        rc = admin_load(&a, false);
    }
    if (rc != EX_OK) {
        goto out;
    }
    if (a.old == NULL) {
        ctl_error("plan: the store has no active membership (ringctl init first)");
        rc = EX_USAGE;
        goto out;
    }
    ring_members_free(a.new);
    a.new = NULL;
    rc = make_new(&a, join, id, addr, weight, zone);
    if (rc != EX_OK) {
        goto out;
    }
    have_token = g->token_file != NULL && admin_read_token(&a) == EX_OK;
    ro = ring_build(a.old);
    rn = ring_build(a.new);
    d = ro != NULL && rn != NULL ? ring_diff(ro, rn) : NULL;
    sold = calloc(a.old->n_nodes, sizeof(double));
    own = calloc(a.old->n_nodes, sizeof(double));
    moving = calloc(a.old->n_nodes, sizeof(double));
    snew = calloc(a.new->n_nodes, sizeof(double));
    if (d == NULL || sold == NULL || snew == NULL || own == NULL || moving == NULL) {
        ctl_error("plan: cannot build the rings (out of memory?)");
        rc = EX_FAILED;
        goto out;
    }
    ring_shares(ro, sold);
    ring_shares(rn, snew);
    owned_fractions(ro, own);
    /* Keyspace each old node sends: its arcs as primary, once per gaining node. */
    for (k = 0; k < d->n_arcs; k++) {
        const struct ring_arc *arc = &d->arcs[k];
        uint32_t gain = 0;

        for (j = 0; j < arc->n_new; j++) {
            gain += arc_gained(a.old, a.new, arc, j);
        }
        if (arc->n_old > 0) {
            moving[arc->old_nodes[0]] += arc_frac(arc->lo, arc->hi) * gain;
        }
    }
    printf("plan%s%s %s%s%s\n", g->human ? ":  " : "\t", join ? "join" : "leave", id,
           join ? " " : "", addr);
    printf("epoch%s%" PRIu64 " -> %" PRIu64 "\n", g->human ? ": " : "\t", a.old->epoch,
           a.new->epoch);
    table_row(&t, "id\tshare_before\tshare_after\titems\tbytes\tmove_items\tmove_bytes");
    rc = nodes_build(&a);
    if (rc != EX_OK) {
        goto out;
    }
    for (i = 0; i < a.n_nodes; i++) {
        struct tnode *n = &a.nodes[i];
        int io = ring_members_find(a.old, n->id), in = ring_members_find(a.new, n->id);
        char b[5][48];

        snprintf(b[0], sizeof(b[0]), "%.4f", io >= 0 ? sold[io] : 0.0);
        snprintf(b[1], sizeof(b[1]), "%.4f", in >= 0 ? snew[in] : 0.0);
        strcpy(b[2], "?");
        strcpy(b[3], "?");
        strcpy(b[4], "0");
        if (io >= 0 && have_token && node_call(&a, n, &sreq, g->timeout_ms) == CPORT_OK) {
            double f = own[io] > 0 ? moving[io] / own[io] : 0;
            double mi = (double)n->st.curr_items * f, mb = (double)n->st.bytes * f;

            snprintf(b[2], sizeof(b[2]), "%" PRIu64, n->st.curr_items);
            snprintf(b[3], sizeof(b[3]), "%" PRIu64, n->st.bytes);
            snprintf(b[4], sizeof(b[4]), "%.0f", mi);
            tot_items += mi;
            tot_bytes += mb;
            snprintf(b[4] + strlen(b[4]), sizeof(b[4]) - strlen(b[4]), "\t%.0f", mb);
        } else if (io >= 0 && moving[io] > 0) {
            strcpy(b[4], "?\t?");
            unknown++;
        } else {
            strcpy(b[4], "0\t0");
        }
        table_row(&t, "%s\t%s\t%s\t%s\t%s\t%s", n->id, b[0], b[1], b[2], b[3], b[4]);
    }
    table_print(&t, g->human, stdout);
    printf("primary_moved\t%.4f\n", d->primary_moved);
    printf("list_moved\t%.4f\n", d->list_moved);
    if (unknown > 0) {
        printf("move_items_estimate\t?\nmove_bytes_estimate\t?\n");
    } else {
        printf("move_items_estimate\t%.0f\nmove_bytes_estimate\t%.0f\n", tot_items, tot_bytes);
    }
    if (!have_token) {
        info("plan: no --token-file: node item and byte counts unknown");
    }
    info("plan: items and bytes to move are estimates: each node's items and bytes times "
         "the fraction of its keyspace that moves");
    rc = EX_OK;
out:
    free(sold);
    free(snew);
    free(own);
    free(moving);
    ring_diff_free(d);
    ring_free(ro);
    ring_free(rn);
    admin_free(&a);
    return rc;
}

int
ctl_admin_plan(struct ctl_globals *g, int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "join") == 0 || strcmp(argv[1], "leave") == 0)) {
        return plan_change(g, argc, argv);
    }
    return ctl_plan(g, argc, argv);
}

/* Re-notify nodes of an abort recorded in aborted.* (abort with nothing
 * pending is idempotent: nodes that missed the Abort still get it). */
static int
reabort(struct admin *a)
{
    struct cport_request sreq = { .kind = CPORT_STATUS };
    struct cport_request req;
    uint64_t rev;
    uint32_t i, failed = 0, sent = 0;
    int rc;

    rc = load_meta(a, REC_ABORTED_META);
    if (rc == EX_OK) {
        rc = load_members_rec(a, REC_ABORTED, &a->new, &rev);
    }
    if (rc != EX_OK) {
        return rc;
    }
    if (!a->have_meta) {
        printf("nothing pending\n");
        return EX_OK;
    }
    if (nodes_build(a) != EX_OK) {
        return EX_FAILED;
    }
    req = treq(a, CPORT_ABORT);
    for (i = 0; i < a->n_nodes; i++) {
        struct tnode *t = &a->nodes[i];

        if (node_call(a, t, &sreq, a->g->timeout_ms) != CPORT_OK) {
            info("abort: %s (%s): %s", t->id, t->addr, t->err);
            failed++;
            continue;
        }
        if (t->st.pending_epoch == a->meta.epoch) {
            sent++;
            if (node_call(a, t, &req, LONG_TIMEOUT_MS) != CPORT_OK) {
                info("abort: %s (%s): %s", t->id, t->addr, t->err);
                failed++;
            }
        }
    }
    printf("nothing pending\tlast aborted epoch %" PRIu64 " (%s): re-sent Abort to %u nodes, "
           "%u unreachable or failed\n", a->meta.epoch, a->meta.op, sent, failed);
    return failed > 0 ? EX_FAILED : EX_OK;
}

int
ctl_abort(struct ctl_globals *g, int argc, char **argv)
{
    struct admin a = { .g = g };
    int rc;

    rc = no_args(argc, argv, "abort");
    if (rc == EX_OK) {
        rc = admin_load(&a, true);
    }
    if (rc != EX_OK) {
        goto out;
    }
    if (!a.have_meta && a.new == NULL) {
        rc = reabort(&a);
        goto out;
    }
    if (a.have_meta && a.old != NULL && a.old->epoch >= a.meta.epoch) {
        ctl_error("abort: epoch %" PRIu64 " is already committed in the store; "
                  "`ringctl resume` finishes it", a.meta.epoch);
        rc = EX_FAILED;
        goto out;
    }
    if (!a.have_meta) {
        /* pending.members without its meta: a create that crashed half-way.
         * No node was ever prepared (meta is written with it): just delete. */
        rc = mstore_delete(a.store, REC_PENDING, a.pm_rev, err_buf, sizeof(err_buf));
        if (rc != MSTORE_OK) {
            ctl_error("abort: store: %s", err_buf);
            rc = EX_FAILED;
            goto out;
        }
        printf("aborted\tincomplete pending record removed\n");
        rc = EX_OK;
        goto out;
    }
    rc = nodes_build(&a);
    if (rc != EX_OK) {
        goto out;
    }
    rc = do_abort(&a);
    if (rc < 0) {
        rc = EX_FAILED;
        goto out;
    }
    printf("aborted\tepoch %" PRIu64 "\t%s\t%d nodes not reached\n", a.meta.epoch, a.meta.op,
           rc);
    rc = rc > 0 ? EX_FAILED : EX_OK;
out:
    admin_free(&a);
    return rc;
}

int
ctl_resume(struct ctl_globals *g, int argc, char **argv)
{
    struct admin a = { .g = g };
    struct tnode *t;
    struct mstore_op ops[2];
    uint32_t i;
    int rc;

    a.t_start = now_ms();
    rc = no_args(argc, argv, "resume");
    if (rc == EX_OK) {
        rc = admin_load(&a, true);
    }
    if (rc != EX_OK) {
        goto out;
    }
    if (a.old == NULL) {
        ctl_error("resume: the store has no active membership");
        rc = EX_USAGE;
        goto out;
    }
    if (!a.have_meta) {
        if (a.new != NULL) {
            ctl_error("resume: %s without %s: a create that crashed half-way; "
                      "run ringctl abort", REC_PENDING, REC_META);
            rc = EX_FAILED;
            goto out;
        }
        /* Nothing pending: bring nodes that missed a commit (or init) up to
         * the store's epoch. */
        rc = nodes_build(&a);
        if (rc == EX_OK) {
            info("resume: nothing pending; making sure every node has epoch %" PRIu64,
                 a.old->epoch);
            rc = push_active(&a, "resume", true) > 0 ? EX_FAILED : EX_OK;
        }
        goto out;
    }
    if (a.old->epoch >= a.meta.epoch) {
        /* The commit happened (the store's CAS is the decision); finish
         * it: drop the leftover pending records, re-send Commit. */
        info("resume: epoch %" PRIu64 " was committed; finishing", a.meta.epoch);
        ring_members_free(a.new);
        a.new = ring_members_dup(a.old);
        i = 0;
        if (a.pm_rev != 0) {
            ops[i++] = (struct mstore_op){ MSTORE_DELETE, REC_PENDING, a.pm_rev, NULL, 0 };
        }
        ops[i++] = (struct mstore_op){ MSTORE_DELETE, REC_META, a.meta_rev, NULL, 0 };
        if (a.new == NULL
            || mstore_txn(a.store, ops, i, NULL, NULL, err_buf, sizeof(err_buf)) != MSTORE_OK) {
            ctl_error("resume: store: %s", err_buf);
            rc = EX_FAILED;
            goto out;
        }
        rc = nodes_build(&a);
        if (rc == EX_OK) {
            uint32_t missed = deliver_commit(&a);
            bool clean = wait_cleanup(&a);

            printf("epoch\t%" PRIu64 "\n", a.new->epoch);
            printf("op\t%s\n", a.meta.op);
            printf("nodes_not_committed\t%u\n", missed);
            printf("cleanup\t%s\n", clean ? "done" : "incomplete");
        }
        goto out;
    }
    if (a.new == NULL || a.new->epoch != a.meta.epoch || a.old->epoch != a.meta.from_epoch) {
        ctl_error("resume: the store's pending (epoch %" PRIu64 ") does not follow its active "
                  "epoch %" PRIu64 "; run ringctl abort", a.meta.epoch, a.old->epoch);
        rc = EX_FAILED;
        goto out;
    }
    rc = nodes_build(&a);
    if (rc != EX_OK) {
        goto out;
    }
    /* A node that restarted since PREPARE lost what it held or imported:
     * the transition cannot be resumed. */
    if (a.meta.n_boot > 0) {
        struct cport_request sreq = { .kind = CPORT_STATUS };

        for (i = 0; i < a.n_nodes; i++) {
            node_call(&a, &a.nodes[i], &sreq, g->timeout_ms);
        }
        t = boot_changed(&a);
        if (t != NULL) {
            info("resume: %s restarted since PREPARE (boot id changed): the transition "
                 "cannot be resumed", t->id);
            rc = fail_abort(&a, "resume");
            goto out;
        }
    }
    info("resume: %s: epoch %" PRIu64 " -> %" PRIu64 " from phase %s", a.meta.op,
         a.meta.from_epoch, a.meta.epoch, tphase_names[a.meta.phase]);
    rc = run_from(&a, a.meta.phase);
out:
    admin_free(&a);
    return rc;
}
