/*
 * members: one epoch of the cluster and its text form (*.members). Parse,
 * format and validate exactly as docs/PLACEMENT.md says; every rejection is
 * one "name:line: reason" line. Pure: the caller reads the file.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "ring/ring.h"
#include "ring/ring_internal.h"

#define MEMBERS_INITIAL_CAP 8
#define RING_STR_(x)        #x
#define RING_STR(x)         RING_STR_(x) /* a limit in an error message */

/* printf into err (nothing when err is NULL or errlen 0); ring/ links
 * nothing above it, not even lib/util. */
#define SET_ERR(err, errlen, ...)                   \
    do {                                            \
        if ((err) != NULL && (errlen) > 0) {        \
            snprintf((err), (errlen), __VA_ARGS__); \
        }                                           \
    } while (0)

/* True when c may appear in a node id or a zone name. */
static bool
id_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '-';
}

/* Check an id or zone of len bytes; NULL when fine, else the reason. */
static const char *
check_name(const char *s, size_t len, bool zone)
{
    size_t i;

    if (len == 0) {
        return zone ? "empty zone" : "empty node id";
    }
    if (len > (zone ? RING_ZONE_MAX : RING_ID_MAX)) {
        return zone ? "zone longer than 64 bytes" : "node id longer than 64 bytes";
    }
    for (i = 0; i < len; i++) {
        if (!id_char((unsigned char)s[i])) {
            return zone ? "bad character in zone (allowed: A-Z a-z 0-9 . _ : -)"
                        : "bad character in node id (allowed: A-Z a-z 0-9 . _ : -)";
        }
    }
    return NULL;
}

/* Parse a port (1..65535) of len bytes; -1 when it is not one. */
static int
parse_port(const char *s, size_t len)
{
    size_t i;
    int    port = 0;

    if (len == 0 || len > 5) {
        return -1;
    }
    for (i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') {
            return -1;
        }
        port = port * 10 + (s[i] - '0');
    }
    return (port >= 1 && port <= 65535) ? port : -1;
}

/* Check an address: host:port or [v6]:port. NULL when fine, else why. */
static const char *
check_addr(const char *s, size_t len)
{
    const char     *colon;
    char            v6[INET6_ADDRSTRLEN + 1];
    struct in6_addr a6;
    size_t          i, hlen;

    if (len == 0) {
        return "empty address";
    }
    if (len > RING_ADDR_MAX) {
        return "address longer than 255 bytes";
    }
    if (s[0] == '[') {
        const char *close = memchr(s, ']', len);

        if (close == NULL) {
            return "bad address: '[' without ']'";
        }
        hlen = (size_t)(close - s) - 1;
        if (hlen == 0 || hlen >= sizeof(v6)) {
            return "bad address: bad IPv6 literal";
        }
        memcpy(v6, s + 1, hlen);
        v6[hlen] = '\0';
        if (inet_pton(AF_INET6, v6, &a6) != 1) {
            return "bad address: bad IPv6 literal";
        }
        if ((size_t)(close - s) + 1 >= len || close[1] != ':') {
            return "bad address: expected [v6]:port";
        }
        colon = close + 1;
    } else {
        colon = memchr(s, ':', len);
        if (colon == NULL) {
            return "bad address: expected host:port";
        }
        hlen = (size_t)(colon - s);
        if (memchr(colon + 1, ':', len - hlen - 1) != NULL) {
            return "bad address: an IPv6 address goes in brackets "
                   "([v6]:port)";
        }
        if (hlen == 0) {
            return "bad address: empty host";
        }
        for (i = 0; i < hlen; i++) {
            unsigned char c = (unsigned char)s[i];

            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '-' || c == '_')) {
                return "bad address: bad character in host";
            }
        }
    }
    if (parse_port(colon + 1, len - (size_t)(colon + 1 - s)) < 0) {
        return "bad address: port must be 1..65535";
    }
    return NULL;
}

/* Check one node's fields; NULL when fine, else the reason. */
static const char *
check_node(const struct ring_node *n)
{
    const char *why;

    why = check_name(n->id, strnlen(n->id, sizeof(n->id)), false);
    if (why != NULL) {
        return why;
    }
    why = check_addr(n->addr, strnlen(n->addr, sizeof(n->addr)));
    if (why != NULL) {
        return why;
    }
    if (n->zone[0] != '\0') {
        why = check_name(n->zone, strnlen(n->zone, sizeof(n->zone)), true);
        if (why != NULL) {
            return why;
        }
    }
    if (n->weight == 0 || n->weight > RING_WEIGHT_MAX) {
        return "weight must be 1..1000";
    }
    return NULL;
}

/* ring_members_new: see ring.h. */
struct ring_members *
ring_members_new(void)
{
    struct ring_members *m;

    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return NULL;
    }
    m->vnodes = RING_VNODES_DEFAULT;
    m->replicas = 1;
    return m;
}

/* ring_members_free: see ring.h; NULL is fine. */
void
ring_members_free(struct ring_members *m)
{
    if (m == NULL) {
        return;
    }
    free(m->nodes);
    free(m);
}

/* ring_members_dup: see ring.h. */
struct ring_members *
ring_members_dup(const struct ring_members *m)
{
    struct ring_members *d;

    d = malloc(sizeof(*d));
    if (d == NULL) {
        return NULL;
    }
    *d = *m;
    d->nodes = NULL;
    d->cap_nodes = m->n_nodes;
    if (m->n_nodes > 0) {
        d->nodes = malloc((size_t)m->n_nodes * sizeof(*d->nodes));
        if (d->nodes == NULL) {
            free(d);
            return NULL;
        }
        memcpy(d->nodes, m->nodes, (size_t)m->n_nodes * sizeof(*d->nodes));
    }
    return d;
}

/* Make room for one more node; RING_ENOMEM or RING_EINVAL when full. */
static int
grow(struct ring_members *m)
{
    struct ring_node *nn;
    uint32_t          cap;

    if (m->n_nodes >= RING_NODES_MAX) {
        return RING_EINVAL;
    }
    if (m->n_nodes < m->cap_nodes) {
        return RING_OK;
    }
    cap = m->cap_nodes == 0 ? MEMBERS_INITIAL_CAP : m->cap_nodes * 2;
    if (cap > RING_NODES_MAX) {
        cap = RING_NODES_MAX;
    }
    nn = realloc(m->nodes, (size_t)cap * sizeof(*nn));
    if (nn == NULL) {
        return RING_ENOMEM;
    }
    m->nodes = nn;
    m->cap_nodes = cap;
    return RING_OK;
}

/* ring_members_find: see ring.h. Linear: memberships are edited rarely. */
int
ring_members_find(const struct ring_members *m, const char *id)
{
    uint32_t i;

    for (i = 0; i < m->n_nodes; i++) {
        if (strcmp(m->nodes[i].id, id) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* ring_members_add: see ring.h. zone may be NULL or "" for none. */
int
ring_members_add(struct ring_members *m, const char *id, const char *addr, uint32_t weight,
                 const char *zone)
{
    struct ring_node n;
    int              rc;

    if (id == NULL || addr == NULL) {
        return RING_EINVAL;
    }
    if (zone == NULL) {
        zone = "";
    }
    if (strlen(id) > RING_ID_MAX || strlen(addr) > RING_ADDR_MAX || strlen(zone) > RING_ZONE_MAX) {
        return RING_EINVAL;
    }
    memset(&n, 0, sizeof(n));
    strcpy(n.id, id);
    strcpy(n.addr, addr);
    strcpy(n.zone, zone);
    n.weight = weight;
    if (check_node(&n) != NULL || ring_members_find(m, id) >= 0) {
        return RING_EINVAL;
    }
    rc = grow(m);
    if (rc != RING_OK) {
        return rc;
    }
    m->nodes[m->n_nodes++] = n;
    return RING_OK;
}

/* ring_members_remove: see ring.h. Keeps the order of the others. */
int
ring_members_remove(struct ring_members *m, const char *id)
{
    int i = ring_members_find(m, id);

    if (i < 0) {
        return RING_ENOENT;
    }
    memmove(&m->nodes[i], &m->nodes[i + 1],
            (size_t)(m->n_nodes - (uint32_t)i - 1) * sizeof(m->nodes[0]));
    m->n_nodes--;
    return RING_OK;
}

/* qsort_r comparator: node indexes by id, then index (deterministic). */
static int
cmp_idx_by_id(const void *a, const void *b, void *arg)
{
    const struct ring_node *nodes = arg;
    uint32_t                x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    int                     c = strcmp(nodes[x].id, nodes[y].id);

    if (c != 0) {
        return c;
    }
    return x < y ? -1 : x > y;
}

/*
 * Find a duplicate id: returns the index of the later of two nodes sharing
 * an id, -1 when ids are unique, -2 on ENOMEM. O(n log n) so large
 * memberships (and the fuzzer) stay fast.
 */
static int
find_duplicate(const struct ring_members *m)
{
    uint32_t *idx, i;
    int       dup = -1;

    if (m->n_nodes < 2) {
        return -1;
    }
    idx = malloc((size_t)m->n_nodes * sizeof(*idx));
    if (idx == NULL) {
        return -2;
    }
    for (i = 0; i < m->n_nodes; i++) {
        idx[i] = i;
    }
    qsort_r(idx, m->n_nodes, sizeof(*idx), cmp_idx_by_id, m->nodes);
    for (i = 1; i < m->n_nodes; i++) {
        if (strcmp(m->nodes[idx[i]].id, m->nodes[idx[i - 1]].id) == 0) {
            uint32_t later = idx[i];

            if (dup < 0 || later < (uint32_t)dup) {
                dup = (int)later;
            }
        }
    }
    free(idx);
    return dup;
}

/* ring_members_check_fields: see ring_internal.h. */
int
ring_members_check_fields(const struct ring_members *m, char *err, size_t errlen)
{
    const char *why;
    uint32_t    i;

    if (m->vnodes == 0 || m->vnodes > RING_VNODES_MAX) {
        SET_ERR(err, errlen, "vnodes must be 1..65535");
        return RING_EINVAL;
    }
    if (m->replicas == 0 || m->replicas > RING_R_MAX) {
        SET_ERR(err, errlen, "replicas must be 1.." RING_STR(RING_R_MAX));
        return RING_EINVAL;
    }
    if (m->n_nodes == 0) {
        SET_ERR(err, errlen, "no nodes");
        return RING_EINVAL;
    }
    if (m->n_nodes > RING_NODES_MAX) {
        SET_ERR(err, errlen, "more than 65535 nodes");
        return RING_EINVAL;
    }
    for (i = 0; i < m->n_nodes; i++) {
        why = check_node(&m->nodes[i]);
        if (why != NULL) {
            SET_ERR(err, errlen, "node %u: %s", i, why);
            return RING_EINVAL;
        }
    }
    return RING_OK;
}

/* ring_members_validate: see ring.h. Also requires at least one node. */
int
ring_members_validate(const struct ring_members *m, char *err, size_t errlen)
{
    int rc, dup;

    rc = ring_members_check_fields(m, err, errlen);
    if (rc != RING_OK) {
        return rc;
    }
    dup = find_duplicate(m);
    if (dup == -2) {
        SET_ERR(err, errlen, "out of memory");
        return RING_ENOMEM;
    }
    if (dup >= 0) {
        SET_ERR(err, errlen, "duplicate node id '%s'", m->nodes[dup].id);
        return RING_EINVAL;
    }
    return RING_OK;
}

/*
 * Parsing. A line is split into at most MAX_TOKENS space/tab separated
 * tokens after its comment is cut; tokens point into the caller's text.
 */
#define MAX_TOKENS 6

struct token {
    const char *p;
    size_t      len;
};

/* Parse an unsigned decimal of len bytes into *v; false on junk/overflow. */
static bool
parse_u64(const struct token *t, uint64_t *v)
{
    uint64_t x = 0;
    size_t   i;

    if (t->len == 0 || t->len > 20) {
        return false;
    }
    for (i = 0; i < t->len; i++) {
        unsigned d;

        if (t->p[i] < '0' || t->p[i] > '9') {
            return false;
        }
        d = (unsigned)(t->p[i] - '0');
        if (x > (UINT64_MAX - d) / 10) {
            return false;
        }
        x = x * 10 + d;
    }
    *v = x;
    return true;
}

static bool
tok_is(const struct token *t, const char *word)
{
    size_t n = strlen(word);

    return t->len == n && memcmp(t->p, word, n) == 0;
}

/* Per-parse state: line numbers of the nodes for later messages. */
struct parse_state {
    const char          *name;
    uint32_t             line;
    char                *err;
    size_t               errlen;
    struct ring_members *m;
    uint32_t            *node_line; /* line of each node, n_nodes used */
    uint32_t             cap_lines;
    uint32_t             epoch_line, vnodes_line, replicas_line;
};

#define PERR(st, ...)                                                                \
    do {                                                                             \
        char why_[160];                                                              \
        snprintf(why_, sizeof(why_), __VA_ARGS__);                                   \
        SET_ERR((st)->err, (st)->errlen, "%s:%u: %s", (st)->name, (st)->line, why_); \
    } while (0)

/* Handle "epoch N", "vnodes V" or "replicas R". */
static int
parse_header(struct parse_state *st, const struct token *tok, int ntok)
{
    uint64_t    v;
    uint32_t   *seen;
    const char *what;

    if (tok_is(&tok[0], "epoch")) {
        what = "epoch";
        seen = &st->epoch_line;
    } else if (tok_is(&tok[0], "vnodes")) {
        what = "vnodes";
        seen = &st->vnodes_line;
    } else {
        what = "replicas";
        seen = &st->replicas_line;
    }
    if (*seen != 0) {
        PERR(st, "repeated '%s' line (first on line %u)", what, *seen);
        return RING_EPARSE;
    }
    if (ntok != 2) {
        PERR(st, "'%s' takes exactly one number", what);
        return RING_EPARSE;
    }
    if (!parse_u64(&tok[1], &v)) {
        PERR(st, "%s: not an unsigned decimal number (or too large)", what);
        return RING_EPARSE;
    }
    *seen = st->line;
    if (what[0] == 'e') {
        if (v == 0) {
            PERR(st, "epoch 0 is reserved for 'no membership yet'");
            return RING_EPARSE;
        }
        st->m->epoch = v;
    } else if (what[0] == 'v') {
        if (v == 0 || v > RING_VNODES_MAX) {
            PERR(st, "vnodes must be 1..65535");
            return RING_EPARSE;
        }
        st->m->vnodes = (uint32_t)v;
    } else {
        if (v == 0 || v > RING_R_MAX) {
            PERR(st, "replicas must be 1.." RING_STR(RING_R_MAX));
            return RING_EPARSE;
        }
        st->m->replicas = (uint32_t)v;
    }
    return RING_OK;
}

/* Handle "node ID ADDR [weight=W] [zone=Z]". */
static int
parse_node(struct parse_state *st, const struct token *tok, int ntok)
{
    struct ring_node n;
    const char      *why;
    bool             have_weight = false, have_zone = false;
    int              i, rc;

    if (ntok < 3) {
        PERR(st, "node: expected 'node ID ADDR [weight=W] [zone=Z]'");
        return RING_EPARSE;
    }
    if (ntok > 5) {
        PERR(st, "node: too many fields");
        return RING_EPARSE;
    }
    memset(&n, 0, sizeof(n));
    why = check_name(tok[1].p, tok[1].len, false);
    if (why != NULL) {
        PERR(st, "%s", why);
        return RING_EPARSE;
    }
    memcpy(n.id, tok[1].p, tok[1].len);
    why = check_addr(tok[2].p, tok[2].len);
    if (why != NULL) {
        PERR(st, "%s", why);
        return RING_EPARSE;
    }
    memcpy(n.addr, tok[2].p, tok[2].len);
    n.weight = 1;
    for (i = 3; i < ntok; i++) {
        const struct token *t = &tok[i];

        if (t->len >= 7 && memcmp(t->p, "weight=", 7) == 0) {
            struct token num = { t->p + 7, t->len - 7 };
            uint64_t     w;

            if (have_weight) {
                PERR(st, "node: weight given twice");
                return RING_EPARSE;
            }
            have_weight = true;
            if (!parse_u64(&num, &w)) {
                PERR(st, "weight: not an unsigned decimal number");
                return RING_EPARSE;
            }
            if (w == 0 || w > RING_WEIGHT_MAX) {
                PERR(st, "weight must be 1..1000");
                return RING_EPARSE;
            }
            n.weight = (uint32_t)w;
        } else if (t->len >= 5 && memcmp(t->p, "zone=", 5) == 0) {
            if (have_zone) {
                PERR(st, "node: zone given twice");
                return RING_EPARSE;
            }
            have_zone = true;
            why = check_name(t->p + 5, t->len - 5, true);
            if (why != NULL) {
                PERR(st, "%s", why);
                return RING_EPARSE;
            }
            memcpy(n.zone, t->p + 5, t->len - 5);
        } else {
            PERR(st, "node: unknown option '%.*s' (weight=W or zone=Z)",
                 (int)(t->len > 40 ? 40 : t->len), t->p);
            return RING_EPARSE;
        }
    }
    rc = grow(st->m);
    if (rc == RING_EINVAL) {
        PERR(st, "more than 65535 nodes");
        return RING_EPARSE;
    }
    if (rc != RING_OK) {
        PERR(st, "out of memory");
        return rc;
    }
    if (st->m->n_nodes >= st->cap_lines) {
        uint32_t  cap = st->cap_lines == 0 ? 64 : st->cap_lines * 2;
        uint32_t *nl = realloc(st->node_line, (size_t)cap * sizeof(*nl));

        if (nl == NULL) {
            PERR(st, "out of memory");
            return RING_ENOMEM;
        }
        st->node_line = nl;
        st->cap_lines = cap;
    }
    st->node_line[st->m->n_nodes] = st->line;
    st->m->nodes[st->m->n_nodes++] = n;
    return RING_OK;
}

/* Parse one line (without its newline); RING_OK for blank/comment lines. */
static int
parse_line(struct parse_state *st, const char *p, size_t len)
{
    struct token tok[MAX_TOKENS + 1];
    const char  *hash;
    size_t       i = 0;
    int          ntok = 0;

    if (memchr(p, '\0', len) != NULL) {
        PERR(st, "NUL byte in line");
        return RING_EPARSE;
    }
    hash = memchr(p, '#', len);
    if (hash != NULL) {
        len = (size_t)(hash - p);
    }
    while (i < len) {
        size_t start;

        while (i < len && (p[i] == ' ' || p[i] == '\t')) {
            i++;
        }
        if (i >= len) {
            break;
        }
        start = i;
        while (i < len && p[i] != ' ' && p[i] != '\t') {
            i++;
        }
        if (ntok == MAX_TOKENS) {
            PERR(st, "too many fields");
            return RING_EPARSE;
        }
        tok[ntok].p = p + start;
        tok[ntok].len = i - start;
        ntok++;
    }
    if (ntok == 0) {
        return RING_OK;
    }
    for (i = 0; i < (size_t)ntok; i++) {
        size_t j;

        for (j = 0; j < tok[i].len; j++) {
            unsigned char c = (unsigned char)tok[i].p[j];

            if (c < 0x20 || c == 0x7f) {
                PERR(st, "control character in line");
                return RING_EPARSE;
            }
        }
    }
    if (tok_is(&tok[0], "node")) {
        return parse_node(st, tok, ntok);
    }
    if (tok_is(&tok[0], "epoch") || tok_is(&tok[0], "vnodes") || tok_is(&tok[0], "replicas")) {
        return parse_header(st, tok, ntok);
    }
    PERR(st, "unknown keyword '%.*s' (epoch, vnodes, replicas, node)",
         (int)(tok[0].len > 40 ? 40 : tok[0].len), tok[0].p);
    return RING_EPARSE;
}

/* ring_members_parse: see ring.h. Required: epoch, vnodes, replicas and at
 * least one node; a missing one is reported on the last line. */
int
ring_members_parse(const char *text, size_t len, const char *name, struct ring_members **out,
                   char *err, size_t errlen)
{
    struct parse_state st;
    size_t             off = 0;
    int                rc = RING_EPARSE, dup;

    memset(&st, 0, sizeof(st));
    st.name = name != NULL ? name : "members";
    st.err = err;
    st.errlen = errlen;
    if (err != NULL && errlen > 0) {
        err[0] = '\0';
    }
    *out = NULL;
    st.m = ring_members_new();
    if (st.m == NULL) {
        SET_ERR(err, errlen, "%s: out of memory", st.name);
        return RING_ENOMEM;
    }
    if (text == NULL) {
        len = 0;
    }
    while (off < len) {
        const char *nl = memchr(text + off, '\n', len - off);
        size_t      llen = nl != NULL ? (size_t)(nl - (text + off)) : len - off;
        size_t      body = llen;

        st.line++;
        if (body > 0 && text[off + body - 1] == '\r') {
            body--;
        }
        if (body > RING_LINE_MAX) {
            PERR(&st, "line longer than %d bytes", RING_LINE_MAX);
            rc = RING_EPARSE;
            goto fail;
        }
        rc = parse_line(&st, text + off, body);
        if (rc != RING_OK) {
            goto fail;
        }
        off += llen + (nl != NULL ? 1 : 0);
    }
    rc = RING_EPARSE;
    if (st.line == 0) {
        st.line = 1;
    }
    if (st.epoch_line == 0) {
        PERR(&st, "missing 'epoch N' line");
        goto fail;
    }
    if (st.vnodes_line == 0) {
        PERR(&st, "missing 'vnodes V' line");
        goto fail;
    }
    if (st.replicas_line == 0) {
        PERR(&st, "missing 'replicas R' line");
        goto fail;
    }
    if (st.m->n_nodes == 0) {
        PERR(&st, "no 'node' line");
        goto fail;
    }
    dup = find_duplicate(st.m);
    if (dup == -2) {
        rc = RING_ENOMEM;
        SET_ERR(err, errlen, "%s: out of memory", st.name);
        goto fail;
    }
    if (dup >= 0) {
        st.line = st.node_line[dup];
        PERR(&st, "duplicate node id '%s'", st.m->nodes[dup].id);
        goto fail;
    }
    free(st.node_line);
    *out = st.m;
    return RING_OK;
fail:
    free(st.node_line);
    ring_members_free(st.m);
    return rc;
}

/* Append to buf like snprintf, tracking the total length needed. */
static void __attribute__((format(printf, 4, 5)))
append(char *buf, size_t size, size_t *used, const char *fmt, ...)
{
    va_list ap;
    int     n;

    va_start(ap, fmt);
    n = vsnprintf(*used < size ? buf + *used : NULL, *used < size ? size - *used : 0, fmt, ap);
    va_end(ap);
    if (n > 0) {
        *used += (size_t)n;
    }
}

/* ring_members_format: see ring.h. weight=1 is left out (the default). */
size_t
ring_members_format(const struct ring_members *m, char *buf, size_t size)
{
    size_t   used = 0;
    uint32_t i;

    if (size > 0) {
        buf[0] = '\0';
    }
    append(buf, size, &used, "epoch %llu\nvnodes %u\nreplicas %u\n", (unsigned long long)m->epoch,
           m->vnodes, m->replicas);
    for (i = 0; i < m->n_nodes; i++) {
        const struct ring_node *n = &m->nodes[i];

        append(buf, size, &used, "node %s %s", n->id, n->addr);
        if (n->weight != 1) {
            append(buf, size, &used, " weight=%u", n->weight);
        }
        if (n->zone[0] != '\0') {
            append(buf, size, &used, " zone=%s", n->zone);
        }
        append(buf, size, &used, "\n");
    }
    return used;
}
