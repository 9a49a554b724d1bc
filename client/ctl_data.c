/*
 * ctl_data: ringctl's data subcommands (get, set, delete, mget, stats, and
 * the meta commands mg, ms, md), thin shells over libringcache. Output is
 * tab-separated for scripts, or aligned for people with --human. A miss is
 * a line on stderr and exit 1.
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ctl.h"
#include "client/ctl_util.h"
#include "client/ringcache.h"
#include "lib/util.h"

/* The meta subcommands (declared here for ringctl.c, which declares them
 * too: client/ctl.h is to take them over). */
int ctl_mg(struct ctl_globals *g, int argc, char **argv);
int ctl_ms(struct ctl_globals *g, int argc, char **argv);
int ctl_md(struct ctl_globals *g, int argc, char **argv);

/* Open a handle from --seeds "host:port,host:port,...": the nodes are
 * asked for the membership (config); see ringcache_new_seeds. */
static int
open_seeds(struct ringcache **rc, const char *list, const struct ringcache_options *opt, char *err,
           size_t errlen)
{
    char        *copy = strdup(list), *save = NULL, *tok;
    const char **seeds = NULL;
    size_t       n = 0;
    int          ret = RINGCACHE_ENOMEM;

    if (copy == NULL) {
        goto out;
    }
    seeds = calloc(strlen(list) / 2 + 1, sizeof(*seeds));
    if (seeds == NULL) {
        goto out;
    }
    for (tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        seeds[n++] = tok;
    }
    if (n == 0) {
        snprintf(err, errlen, "--seeds: expected host:port[,host:port...]");
        ret = RINGCACHE_EMEMBERS;
        goto out;
    }
    ret = ringcache_new_seeds(rc, seeds, n, opt, err, errlen);
out:
    if (ret == RINGCACHE_ENOMEM && err[0] == '\0') {
        snprintf(err, errlen, "out of memory");
    }
    free(seeds);
    free(copy);
    return ret;
}

/* The password of --auth-password-file: its first line, without the line
 * end, in a malloc'd string. NULL after printing why. */
static char *
read_password(const char *path)
{
    size_t len;
    char  *text = ctl_read_file(path, &len);

    if (text == NULL) {
        ctl_error("--auth-password-file %s: %s", path, strerror(errno));
        return NULL;
    }
    text[strcspn(text, "\r\n")] = '\0';
    if (text[0] == '\0') {
        ctl_error("--auth-password-file %s: the first line is empty", path);
        free(text);
        return NULL;
    }
    return text;
}

/* Open the cluster named by --seeds, --members or (neither given) the
 * active membership of --store, with --timeout. NULL after printing why. */
static struct ringcache *
open_cluster(const struct ctl_globals *g, const char *cmd)
{
    struct ringcache_options opt;
    struct ringcache        *rc = NULL;
    char                     err[512] = "", *password = NULL;
    int                      ret;

    if (g->members == NULL && g->seeds == NULL && g->store == NULL) {
        ctl_error("%s: --members FILE, --seeds HOST:PORT,... or --store STORE is required "
                  "(before the command)",
                  cmd);
        return NULL;
    }
    if (g->members != NULL && g->seeds != NULL) {
        ctl_error("%s: give --members or --seeds, not both", cmd);
        return NULL;
    }
    ringcache_options_init(&opt);
    opt.op_timeout_ms = g->timeout_ms;
    if (opt.connect_timeout_ms > g->timeout_ms) {
        opt.connect_timeout_ms = g->timeout_ms;
    }
    opt.tls = g->tls;
    opt.tls_skip_name_check = g->tls_skip_name_check;
    opt.tls_ca_file = g->tls_ca;
    opt.tls_cert_file = g->tls_cert;
    opt.tls_key_file = g->tls_key;
    if (g->auth_password_file != NULL) {
        password = read_password(g->auth_password_file);
        if (password == NULL) {
            return NULL;
        }
        opt.auth_user = g->auth_user;
        opt.auth_password = password;
    }
    if (g->seeds != NULL) {
        ret = open_seeds(&rc, g->seeds, &opt, err, sizeof(err));
    } else if (g->members != NULL) {
        ret = ringcache_new_members_file(&rc, g->members, &opt, err, sizeof(err));
    } else {
        ret = ringcache_new_store(&rc, g->store, &opt, err, sizeof(err));
    }
    if (password != NULL) {
        explicit_bzero(password, strlen(password));
        free(password);
    }
    if (ret != 0) {
        ctl_error("%s", err[0] != '\0' ? err : ringcache_strerror(ret));
        return NULL;
    }
    /* A one-shot command: the seeds or the file give the epoch; MOVED
     * teaches a newer one. No periodic poll. */
    ringcache_set_poll_interval(rc, 0);
    return rc;
}

/* Width of the widest string of a list, for --human columns. */
static int
widest(char **s, int n, int floor)
{
    int i, w = floor;

    for (i = 0; i < n; i++) {
        int l = (int)strlen(s[i]);

        w = l > w ? l : w;
    }
    return w;
}

/* The start of the commands that take KEY... (get, delete): parse, then
 * open the cluster. The index of the first key with *rc open and *width
 * that of the key column, or -1 after printing why (exit status 2). */
static int
open_for_keys(const struct ctl_globals *g, int argc, char **argv, const char *cmd,
              const char *usage, struct ringcache **rc, int *width)
{
    int first = ctl_no_options(argc, argv, usage, CTL_USAGE_ON_ERROR);

    if (first < 0) {
        return -1;
    }
    if (first >= argc) {
        ctl_error("%s: at least one KEY is needed", cmd);
        return -1;
    }
    *rc = open_cluster(g, cmd);
    if (*rc == NULL) {
        return -1;
    }
    *width = widest(argv + first, argc - first, 3);
    return first;
}

/* Why a read missed, for its stderr line: the library reports a key whose
 * every owner is down as a plain miss (ringcache.h), which would hide a
 * dead cluster from a person. Returns "not found", or a sentence naming
 * the first owner when every owner of the key is marked down. buf holds
 * the sentence. */
static const char *
miss_reason(struct ringcache *rc, const char *key, int code, char *buf, size_t len)
{
    size_t owners[8];
    int    i, n;

    if (code != RINGCACHE_ENOTFOUND) {
        return ringcache_strerror(code);
    }
    n = ringcache_locate(rc, key, strlen(key), owners, 8);
    if (n <= 0) {
        return ringcache_strerror(code);
    }
    for (i = 0; i < n; i++) {
        if (!ringcache_node_is_down(rc, owners[i])) {
            return ringcache_strerror(code);
        }
    }
    snprintf(buf, len, "not read: every owner is down or unreachable (%s at %s%s: %s)",
             ringcache_node_id(rc, owners[0]), ringcache_node_addr(rc, owners[0]),
             n > 1 ? ", ..." : "", ringcache_strerror(ringcache_node_error(rc, owners[0])));
    return buf;
}

int
ctl_get(struct ctl_globals *g, int argc, char **argv)
{
    struct ringcache      *rc;
    struct ringcache_value v;
    int                    first, i, ret, status = 0, width;

    first = open_for_keys(g, argc, argv, "get", CTL_USAGE_DATA " get KEY...", &rc, &width);
    if (first < 0) {
        return 2;
    }
    for (i = first; i < argc; i++) {
        ret = ringcache_get(rc, argv[i], strlen(argv[i]), &v);
        if (ret != 0) {
            char why[512];

            ctl_error("%s: %s", argv[i], miss_reason(rc, argv[i], ret, why, sizeof(why)));
            status = ret == RINGCACHE_EKEY ? 2 : 1;
            continue;
        }
        if (g->human) {
            printf("%-*s  ", width, argv[i]);
            fwrite(v.data, 1, v.len, stdout);
            putchar('\n');
        } else {
            ctl_out_cells("values:key,value", "s", 2, (const char *[]){ argv[i], v.data },
                          (size_t[]){ strlen(argv[i]), v.len });
        }
        ringcache_value_clear(&v);
    }
    ringcache_free(rc);
    return status;
}

int
ctl_set(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "ttl", required_argument, NULL, 't' },
                                          { "flags", required_argument, NULL, 'f' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char          usage[] = CTL_USAGE_DATA " set KEY VALUE [--ttl S] [--flags F]";
    struct ringcache          *rc;
    unsigned long long         flags = 0;
    long long                  ttl = 0;
    size_t                     owner;
    char                      *end;
    int                        c, ret;

    /* optind 0 makes glibc start over, so options may follow KEY VALUE
     * (ringctl's own parse left getopt in stop-at-first-operand mode). */
    optind = 0;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 't':
            ttl = strtoll(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || ttl < INT32_MIN || ttl > INT32_MAX) {
                ctl_error("set: --ttl: expected seconds (a 32-bit integer), got '%s'", optarg);
                return 2;
            }
            break;
        case 'f':
            flags = strtoull(optarg, &end, 10);
            if (*optarg == '\0' || *optarg == '-' || *end != '\0' || flags > UINT32_MAX) {
                ctl_error("set: --flags: expected 0..4294967295, got '%s'", optarg);
                return 2;
            }
            break;
        default:
            return ctl_getopt_default(c, usage, CTL_USAGE_ON_ERROR);
        }
    }
    if (argc - optind != 2) {
        fprintf(stderr, "usage: %s\n", usage);
        return 2;
    }
    rc = open_cluster(g, "set");
    if (rc == NULL) {
        return 2;
    }
    ret = ringcache_set(rc, argv[optind], strlen(argv[optind]), argv[optind + 1],
                        strlen(argv[optind + 1]), (uint32_t)flags, (int32_t)ttl);
    if (ret != 0) {
        ctl_error("set %s: %s", argv[optind], ringcache_strerror(ret));
    } else if (ringcache_locate(rc, argv[optind], strlen(argv[optind]), &owner, 1) == 1) {
        /* Say where it went: the point of a smart client. */
        if (g->human) {
            printf("stored %s on %s (%s)\n", argv[optind], ringcache_node_id(rc, owner),
                   ringcache_node_addr(rc, owner));
        } else {
            ctl_out_line(stdout, "stored:key,node", "s", "%s\t%s\n", argv[optind],
                         ringcache_node_id(rc, owner));
        }
    }
    ringcache_free(rc);
    return ret == 0 ? 0 : (ret == RINGCACHE_EKEY || ret == RINGCACHE_ETOOBIG ? 2 : 1);
}

int
ctl_delete(struct ctl_globals *g, int argc, char **argv)
{
    struct ringcache *rc;
    int               first, i, ret, status = 0, width;

    first = open_for_keys(g, argc, argv, "delete", CTL_USAGE_DATA " delete KEY...", &rc, &width);
    if (first < 0) {
        return 2;
    }
    for (i = first; i < argc; i++) {
        ret = ringcache_delete(rc, argv[i], strlen(argv[i]));
        if (ret != 0) {
            ctl_error("%s: %s", argv[i], ringcache_strerror(ret));
            status = ret == RINGCACHE_EKEY ? 2 : 1;
            continue;
        }
        if (g->human) {
            printf("%-*s  deleted\n", width, argv[i]);
        } else {
            ctl_out_line(stdout, "deleted:key,result", "s", "%s\tdeleted\n", argv[i]);
        }
    }
    ringcache_free(rc);
    return status;
}

/* ctl_mget's results, kept so they print in input order. */
struct mget_out {
    struct ringcache_value *values;
    int                    *node;
    int                    *status;
    bool                    oom;
};

/* ringcache_mget_fn: keep a copy of each result for mget_print. */
static void
mget_keep(void *arg, size_t index, int node, int status, const struct ringcache_value *v)
{
    struct mget_out *o = arg;

    o->node[index] = node;
    o->status[index] = status;
    if (status == 0) {
        o->values[index].data = malloc(v->len + 1);
        if (o->values[index].data == NULL) {
            o->status[index] = RINGCACHE_ENOMEM;
            o->oom = true;
            return;
        }
        memcpy(o->values[index].data, v->data, v->len);
        o->values[index].len = v->len;
    }
}

/* Print the kept results: hits on stdout, misses on stderr. Returns the
 * number of keys not printed. */
static int
mget_print(struct ringcache *rc, char **keys, size_t n, struct mget_out *o, bool human)
{
    size_t i;
    int    width, node_width = 1, misses = 0;

    width = widest(keys, (int)n, 3);
    for (i = 0; i < ringcache_node_count(rc); i++) {
        int l = (int)strlen(ringcache_node_id(rc, i));

        node_width = l > node_width ? l : node_width;
    }
    for (i = 0; i < n; i++) {
        const char *id = o->node[i] >= 0 ? ringcache_node_id(rc, (size_t)o->node[i]) : "-";

        if (o->status[i] != 0) {
            char why[512];

            if (o->node[i] < 0) {
                ctl_error("%s: %s", keys[i],
                          miss_reason(rc, keys[i], o->status[i], why, sizeof(why)));
            } else {
                ctl_error("%s: %s (%s)", keys[i], ringcache_strerror(o->status[i]), id);
            }
            misses++;
            continue;
        }
        if (human) {
            printf("%-*s  %-*s  ", width, keys[i], node_width, id);
            fwrite(o->values[i].data, 1, o->values[i].len, stdout);
            putchar('\n');
        } else {
            ctl_out_cells("values:key,node,value", "s", 3,
                          (const char *[]){ keys[i], id, o->values[i].data },
                          (size_t[]){ strlen(keys[i]), strlen(id), o->values[i].len });
        }
    }
    return misses;
}

int
ctl_mget(struct ctl_globals *g, int argc, char **argv)
{
    struct mget_out   out = { 0 };
    struct ringcache *rc;
    char             *text, *line, *save = NULL;
    char            **keys = NULL, **nkeys;
    size_t            len, n = 0, cap = 0, i;
    int               ret, status;

    if (ctl_no_options(argc, argv, CTL_USAGE_DATA " mget < KEYS (one per line)",
                       CTL_USAGE_ON_ERROR) < 0) {
        return 2;
    }
    if (optind < argc) {
        ctl_error("mget: reads its keys from stdin, one per line");
        return 2;
    }
    text = ctl_read_file("-", &len);
    if (text == NULL) {
        ctl_error("mget: cannot read stdin");
        return 2;
    }
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        size_t l = strlen(line);

        if (l > 0 && line[l - 1] == '\r') {
            line[--l] = '\0';
        }
        if (l == 0) {
            continue;
        }
        if (n == cap) {
            cap = cap == 0 ? 64 : cap * 2;
            nkeys = realloc(keys, cap * sizeof(*keys));
            if (nkeys == NULL) {
                ctl_error("mget: out of memory");
                free(keys);
                free(text);
                return 1;
            }
            keys = nkeys;
        }
        keys[n++] = line;
    }
    if (n == 0) {
        free(keys);
        free(text);
        return 0;
    }
    rc = open_cluster(g, "mget");
    if (rc == NULL) {
        free(keys);
        free(text);
        return 2;
    }
    out.values = calloc(n, sizeof(*out.values));
    out.node = calloc(n, sizeof(*out.node));
    out.status = calloc(n, sizeof(*out.status));
    if (out.values == NULL || out.node == NULL || out.status == NULL) {
        ctl_error("mget: out of memory");
        status = 1;
    } else {
        ret = ringcache_mget_cb(rc, (const char *const *)keys, NULL, n, 0, mget_keep, &out);
        if (ret != 0) {
            ctl_error("mget: %s", ringcache_strerror(ret));
            status = ret == RINGCACHE_EKEY ? 2 : 1;
        } else {
            status = mget_print(rc, keys, n, &out, g->human) > 0 || out.oom ? 1 : 0;
        }
        for (i = 0; i < n; i++) {
            ringcache_value_clear(&out.values[i]);
        }
    }
    free(out.values);
    free(out.node);
    free(out.status);
    ringcache_free(rc);
    free(keys);
    free(text);
    return status;
}

/* The stats table: one row per stat name (first-seen order), one column
 * per node. */
struct stats_table {
    size_t  n_nodes;
    size_t  n_rows;
    size_t  cap_rows;
    char  **names; /* [n_rows] */
    char ***cells; /* [n_rows][n_nodes], NULL = not reported */
    size_t  node;  /* column being filled */
    bool    oom;
};

/* ringcache_stat_fn: one STAT of column t->node into the table (copies). */
static void
stats_add(void *arg, const char *name, const char *value)
{
    struct stats_table *t = arg;
    size_t              r;

    for (r = 0; r < t->n_rows; r++) {
        if (strcmp(t->names[r], name) == 0) {
            break;
        }
    }
    if (r == t->n_rows) {
        if (t->n_rows == t->cap_rows) {
            size_t  ncap = t->cap_rows == 0 ? 64 : t->cap_rows * 2;
            char  **nn = realloc(t->names, ncap * sizeof(*nn));
            char ***nc;

            if (nn == NULL) {
                t->oom = true;
                return;
            }
            t->names = nn;
            nc = realloc(t->cells, ncap * sizeof(*nc));
            if (nc == NULL) {
                t->oom = true;
                return;
            }
            t->cells = nc;
            t->cap_rows = ncap;
        }
        t->names[r] = strdup(name);
        t->cells[r] = calloc(t->n_nodes, sizeof(char *));
        if (t->names[r] == NULL || t->cells[r] == NULL) {
            free(t->names[r]);
            free(t->cells[r]);
            t->oom = true;
            return;
        }
        t->n_rows++;
    }
    free(t->cells[r][t->node]);
    t->cells[r][t->node] = strdup(value);
    if (t->cells[r][t->node] == NULL) {
        t->oom = true;
    }
}

int
ctl_stats(struct ctl_globals *g, int argc, char **argv)
{
    struct stats_table t = { 0 };
    struct ringcache  *rc;
    size_t             i, r;
    int               *width = NULL, name_width = 4, status = 0, ret;
    char              *line = NULL;
    size_t             line_len;
    const char        *group = NULL;

    if (ctl_no_options(argc, argv, CTL_USAGE_DATA " stats [GROUP]", CTL_USAGE_ON_ERROR) < 0) {
        return 2;
    }
    if (argc - optind > 1) {
        ctl_error("stats: takes one group at most (settings, hotkeys, ...)");
        return 2;
    }
    group = optind < argc ? argv[optind] : NULL;
    rc = open_cluster(g, "stats");
    if (rc == NULL) {
        return 2;
    }
    t.n_nodes = ringcache_node_count(rc);
    width = calloc(t.n_nodes, sizeof(*width));
    if (width == NULL) {
        ringcache_free(rc);
        return 1;
    }
    for (i = 0; i < t.n_nodes; i++) {
        t.node = i;
        ret = ringcache_stats_group(rc, i, group, stats_add, &t);
        if (ret != 0) {
            ctl_error("%s (%s): %s", ringcache_node_id(rc, i), ringcache_node_addr(rc, i),
                      ringcache_strerror(ret));
            status = 1;
        }
        width[i] = (int)strlen(ringcache_node_id(rc, i));
    }
    if (t.oom) {
        ctl_error("stats: out of memory");
        status = 1;
    }
    for (r = 0; r < t.n_rows; r++) {
        int l = (int)strlen(t.names[r]);

        name_width = l > name_width ? l : name_width;
        for (i = 0; i < t.n_nodes; i++) {
            l = t.cells[r][i] != NULL ? (int)strlen(t.cells[r][i]) : 1;
            width[i] = l > width[i] ? l : width[i];
        }
    }
    /* Header row: the node ids; a node that did not answer shows "-".
     * A row is put together in line, then printed (JSON: "stats"). */
    for (r = 0; r <= t.n_rows; r++) {
        FILE *row = open_memstream(&line, &line_len);

        if (row == NULL) {
            status = 1;
            break;
        }
        fprintf(row, "%-*s", g->human ? name_width : 0, r == 0 ? "stat" : t.names[r - 1]);
        for (i = 0; i < t.n_nodes; i++) {
            const char *cell = r == 0                      ? ringcache_node_id(rc, i)
                               : t.cells[r - 1][i] != NULL ? t.cells[r - 1][i]
                                                           : "-";

            fprintf(row, g->human ? "  %*s" : "\t%*s", g->human ? width[i] : 0, cell);
        }
        fclose(row);
        ctl_out_line(stdout, "stats", "sa", "%s\n", line);
        free(line);
    }
    for (r = 0; r < t.n_rows; r++) {
        for (i = 0; i < t.n_nodes; i++) {
            free(t.cells[r][i]);
        }
        free(t.names[r]);
        free(t.cells[r]);
    }
    free(t.names);
    free(t.cells);
    free(width);
    ringcache_free(rc);
    return status;
}

/*
 * top: the cluster's hot keys. Each node's `stats hotkeys` counts the
 * requests its clients sent it; the same key seen at several nodes (plain
 * clients spread over the nodes) is summed.
 */

#define TOP_DEFAULT 20

struct top_key {
    char              *key;    /* as stats hotkeys prints it (base64 if binary) */
    bool               binary; /* key is base64 */
    unsigned long long count, err;
    char              *seen; /* node ids that reported it, comma-separated */
};

struct top_table {
    struct top_key *keys;
    size_t          n, cap;
    const char     *node; /* the node being read */
    bool            oom, garbled;
};

/* ringcache_stat_fn: "hotkey:<rank>" "<key> <count> <err>[ b]". */
static void
top_add(void *arg, const char *name, const char *value)
{
    struct top_table  *t = arg;
    char               key[512], b[2] = "";
    unsigned long long count, err;
    size_t             i, len;
    struct top_key    *k;

    if (strncmp(name, "hotkey:", 7) != 0) {
        return;
    }
    if (sscanf(value, "%511s %llu %llu %1s", key, &count, &err, b) < 3 ||
        (b[0] != '\0' && b[0] != 'b')) {
        t->garbled = true;
        return;
    }
    for (i = 0; i < t->n; i++) {
        if (strcmp(t->keys[i].key, key) == 0 && t->keys[i].binary == (b[0] == 'b')) {
            break;
        }
    }
    if (i == t->n) {
        if (t->n == t->cap) {
            size_t          ncap = t->cap == 0 ? 64 : 2 * t->cap;
            struct top_key *nk = realloc(t->keys, ncap * sizeof(*nk));

            if (nk == NULL) {
                t->oom = true;
                return;
            }
            t->keys = nk;
            t->cap = ncap;
        }
        t->keys[i] =
            (struct top_key){ .key = strdup(key), .binary = b[0] == 'b', .seen = strdup("") };
        if (t->keys[i].key == NULL || t->keys[i].seen == NULL) {
            free(t->keys[i].key);
            free(t->keys[i].seen);
            t->oom = true;
            return;
        }
        t->n++;
    }
    k = &t->keys[i];
    k->count += count;
    k->err += err;
    len = strlen(k->seen);
    {
        char *ns = realloc(k->seen, len + strlen(t->node) + 2);

        if (ns == NULL) {
            t->oom = true;
            return;
        }
        sprintf(ns + len, "%s%s", len > 0 ? "," : "", t->node);
        k->seen = ns;
    }
}

static int
top_by_count(const void *a, const void *b)
{
    const struct top_key *x = a, *y = b;

    if (x->count != y->count) {
        return x->count > y->count ? -1 : 1;
    }
    return strcmp(x->key, y->key);
}

/* The owners of k, "a,b", into out; "-" for a binary key (meta's b flag:
 * ringcache_locate takes text-protocol keys only). */
static void
top_owners(struct ringcache *rc, const struct top_key *k, char *out, size_t size)
{
    size_t owners[16], n, i, used = 0;
    int    got;

    got = k->binary ? 0 : ringcache_locate(rc, k->key, strlen(k->key), owners, 16);
    n = got > 0 ? (size_t)got : 0;
    out[0] = '\0';
    for (i = 0; i < n && used + 1 < size; i++) {
        used += (size_t)snprintf(out + used, size - used, "%s%s", i > 0 ? "," : "",
                                 ringcache_node_id(rc, owners[i]));
    }
    if (n == 0) {
        snprintf(out, size, "-");
    }
}

int
ctl_top(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "count", required_argument, NULL, 'n' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char          usage[] = CTL_USAGE_DATA " top [-n COUNT]";
    struct top_table           t = { 0 };
    struct ringcache          *rc;
    long                       want = TOP_DEFAULT;
    char                      *end;
    size_t                     i;
    int                        c, status = 0, ret;

    optind = 0;
    while ((c = getopt_long(argc, argv, "hn:", opts, NULL)) != -1) {
        switch (c) {
        case 'n':
            want = strtol(optarg, &end, 10);
            if (*optarg == '\0' || *end != '\0' || want < 1 || want > 100000) {
                ctl_error("top: -n: expected a count of 1-100000, got '%s'", optarg);
                return 2;
            }
            break;
        default:
            return ctl_getopt_default(c, usage, CTL_USAGE_ON_ERROR);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "usage: %s\n", usage);
        return 2;
    }
    rc = open_cluster(g, "top");
    if (rc == NULL) {
        return 2;
    }
    for (i = 0; i < ringcache_node_count(rc); i++) {
        t.node = ringcache_node_id(rc, i);
        ret = ringcache_stats_group(rc, i, "hotkeys", top_add, &t);
        if (ret != 0) {
            ctl_error("%s (%s): %s", ringcache_node_id(rc, i), ringcache_node_addr(rc, i),
                      ringcache_strerror(ret));
            status = 1;
        }
    }
    if (t.oom || t.garbled) {
        ctl_error("top: %s", t.oom ? "out of memory" : "a node sent a malformed hotkey line");
        status = 1;
    }
    qsort(t.keys, t.n, sizeof(*t.keys), top_by_count);
    ctl_out_line(stdout, "keys", "isiill",
                 g->human ? "%-4s  %-32s  %12s  %10s  %-16s  %s\n" : "%s\t%s\t%s\t%s\t%s\t%s\n",
                 "rank", "key", "requests", "overest", "seen_at", "owners");
    for (i = 0; i < t.n; i++) {
        if ((long)i < want) {
            char owners[256];
            char shown[520];

            top_owners(rc, &t.keys[i], owners, sizeof(owners));
            snprintf(shown, sizeof(shown), "%s%s", t.keys[i].key, t.keys[i].binary ? " (b64)" : "");
            ctl_out_line(stdout, "keys", "isiill",
                         g->human ? "%-4zu  %-32s  %12llu  %10llu  %-16s  %s\n"
                                  : "%zu\t%s\t%llu\t%llu\t%s\t%s\n",
                         i + 1, shown, t.keys[i].count, t.keys[i].err, t.keys[i].seen, owners);
        }
        free(t.keys[i].key);
        free(t.keys[i].seen);
    }
    free(t.keys);
    ringcache_free(rc);
    return status;
}

/*
 * Meta commands: mg KEY [FLAG...], ms KEY VALUE [FLAG...], md KEY [FLAG...]
 * with memcached's meta flags (those libringcache's options carry), the
 * reply printed field by field.
 */

enum meta_cmd {
    META_MG,
    META_MS,
    META_MD
};

/* The flags each command takes, for usage lines and errors. */
static const char *const meta_flag_help[] = {
    "v c f t s h l k (what to show) u b T<ttl> N<ttl> R<secs> C<cas> E<cas>",
    "c s k (what to show) b T<ttl> F<flags> C<cas> E<cas> I M<S|E|A|P|R> N<ttl>",
    "k b I T<ttl> C<cas> E<cas>",
};

/* A meta flag's decimal argument a into *out, within [lo, hi]. */
static bool
meta_num(const char *a, long long lo, long long hi, long long *out)
{
    char *end;

    if (*a == '\0') {
        return false;
    }
    *out = strtoll(a, &end, 10);
    return *end == '\0' && *out >= lo && *out <= hi;
}

static bool
meta_u64(const char *a, uint64_t *out)
{
    char *end;

    if (*a == '\0' || *a == '-') {
        return false;
    }
    *out = strtoull(a, &end, 10);
    return *end == '\0';
}

/* Parse the meta flags argv[first..argc) of cmd into *o; *b64 tells
 * whether the key is given in base64 (b). 0, or -1 after printing why. */
static int
meta_parse_flags(enum meta_cmd cmd, const char *name, int argc, char **argv, int first,
                 struct ringcache_meta_opts *o, bool *b64)
{
    static const char *const allowed[] = { "vcftshlkubTNRCE", "cskbTFCEIMN", "kbITCE" };
    unsigned                 want = 0;
    long long                n = 0;
    int                      i;

    ringcache_meta_opts_init(o);
    *b64 = false;
    for (i = first; i < argc; i++) {
        const char *f = argv[i], *a = f + 1;
        bool        ok = true;

        if (f[0] == '\0' || strchr(allowed[cmd], f[0]) == NULL) {
            ctl_error("%s: unknown flag '%s' (flags: %s)", name, f, meta_flag_help[cmd]);
            return -1;
        }
        switch (f[0]) {
        case 'v':
        case 'c':
        case 'f':
        case 't':
        case 's':
        case 'h':
        case 'l':
        case 'k':
        case 'u':
        case 'b':
        case 'I':
            ok = *a == '\0';
            want |= f[0] == 'v'   ? RINGCACHE_WANT_VALUE
                    : f[0] == 'c' ? RINGCACHE_WANT_CAS
                    : f[0] == 'f' ? RINGCACHE_WANT_FLAGS
                    : f[0] == 't' ? RINGCACHE_WANT_TTL
                    : f[0] == 's' ? RINGCACHE_WANT_SIZE
                    : f[0] == 'h' ? RINGCACHE_WANT_HIT
                    : f[0] == 'l' ? RINGCACHE_WANT_LAST_ACCESS
                    : f[0] == 'k' ? RINGCACHE_WANT_KEY
                                  : 0;
            o->no_bump |= f[0] == 'u';
            o->invalidate |= f[0] == 'I';
            *b64 = *b64 || f[0] == 'b';
            break;
        case 'T':
        case 'N':
        case 'R':
            ok = meta_num(a, INT32_MIN + 1, INT32_MAX, &n);
            *(f[0] == 'T'   ? &o->ttl
              : f[0] == 'N' ? &o->vivify_ttl
                            : &o->recache_below) = (int32_t)n;
            break;
        case 'F':
            ok = meta_num(a, 0, UINT32_MAX, &n);
            o->flags = (uint32_t)n;
            break;
        case 'C':
            ok = meta_u64(a, &o->cas);
            break;
        case 'E':
            ok = meta_u64(a, &o->new_cas);
            break;
        case 'M':
            ok = a[0] != '\0' && a[1] == '\0' && strchr("SEAPR", a[0]) != NULL;
            o->mode = !ok           ? 0
                      : a[0] == 'E' ? RINGCACHE_MS_ADD
                      : a[0] == 'A' ? RINGCACHE_MS_APPEND
                      : a[0] == 'P' ? RINGCACHE_MS_PREPEND
                      : a[0] == 'R' ? RINGCACHE_MS_REPLACE
                                    : RINGCACHE_MS_SET;
            break;
        default:
            break;
        }
        if (!ok) {
            ctl_error("%s: bad flag '%s' (flags: %s)", name, f, meta_flag_help[cmd]);
            return -1;
        }
    }
    if (want != 0) {
        o->want = want;
    } else if (cmd == META_MG) {
        /* What an operator wants to see, without side effects on h/l. */
        o->want = RINGCACHE_WANT_VALUE | RINGCACHE_WANT_FLAGS | RINGCACHE_WANT_CAS |
                  RINGCACHE_WANT_TTL | RINGCACHE_WANT_SIZE;
    } else {
        o->want = cmd == META_MS ? RINGCACHE_WANT_CAS : 0;
    }
    return 0;
}

/* The words of a result status. */
static const char *
meta_status_word(int status)
{
    static const char *const words[] = { "none",    "hit",        "miss",   "stored",
                                         "deleted", "not_stored", "exists", "not_found" };

    return status >= 0 && status <= RINGCACHE_META_NOT_FOUND ? words[status] : "?";
}

/* One "name value" row of a meta reply. */
static void meta_row(const struct ctl_globals *g, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
meta_row(const struct ctl_globals *g, const char *name, const char *fmt, ...)
{
    va_list ap;
    char   *value = NULL;
    bool    text =
        strcmp(name, "key") == 0 || strcmp(name, "status") == 0 || strcmp(name, "owner") == 0;

    va_start(ap, fmt);
    if (vasprintf(&value, fmt, ap) >= 0) {
        ctl_out_line(stdout, NULL, text ? "s" : "a", g->human ? "%-12s%s\n" : "%s\t%s\n", name,
                     value);
    }
    va_end(ap);
    free(value);
}

/* Print the reply r to key (shown as given) on stdout: the status (of an
 * md that invalidated), the key's owner, then every field the reply
 * carried. */
static void
meta_print(const struct ctl_globals *g, struct ringcache *rc, const char *shown, const char *key,
           size_t key_len, bool invalidated, const struct ringcache_meta_result *r)
{
    size_t owner;

    meta_row(g, "key", "%s", shown);
    meta_row(g, "status", "%s",
             r->status == RINGCACHE_META_DELETED && invalidated ? "invalidated (marked stale)"
                                                                : meta_status_word(r->status));
    if (ringcache_locate(rc, key, key_len, &owner, 1) == 1) {
        meta_row(g, "owner", "%s (%s)", ringcache_node_id(rc, owner),
                 ringcache_node_addr(rc, owner));
    }
    if (r->got & RINGCACHE_WANT_VALUE) {
        if (g->human) {
            printf("%-12s", "value");
            fwrite(r->value, 1, r->value_len, stdout);
            putchar('\n');
        } else {
            ctl_out_cells(NULL, "s", 2, (const char *[]){ "value", r->value },
                          (size_t[]){ 5, r->value_len });
        }
    }
    if (r->number != 0 || (r->got & RINGCACHE_WANT_VALUE && r->status == RINGCACHE_META_STORED)) {
        meta_row(g, "number", "%llu", (unsigned long long)r->number);
    }
    if (r->got & RINGCACHE_WANT_FLAGS) {
        meta_row(g, "flags", "%u", (unsigned)r->flags);
    }
    if (r->got & RINGCACHE_WANT_CAS) {
        meta_row(g, "cas", "%llu", (unsigned long long)r->cas);
    }
    if (r->got & RINGCACHE_WANT_TTL) {
        if (r->ttl < 0) {
            meta_row(g, "ttl", "-1 (never expires)");
        } else {
            meta_row(g, "ttl", "%lld", (long long)r->ttl);
        }
    }
    if (r->got & RINGCACHE_WANT_SIZE) {
        meta_row(g, "size", "%llu", (unsigned long long)r->size);
    }
    if (r->got & RINGCACHE_WANT_HIT) {
        meta_row(g, "hit_before", "%s", r->hit_before ? "yes" : "no");
    }
    if (r->got & RINGCACHE_WANT_LAST_ACCESS) {
        meta_row(g, "last_access", "%llu s ago", (unsigned long long)r->last_access);
    }
    if (r->won) {
        meta_row(g, "won", "yes (W: this call won the recache)");
    }
    if (r->stale) {
        meta_row(g, "stale", "yes (X: invalidated)");
    }
    if (r->token_sent) {
        meta_row(g, "win_taken", "yes (Z: another client won the recache)");
    }
}

/* The shared body of mg, ms, md. */
static int
ctl_meta(enum meta_cmd cmd, struct ctl_globals *g, int argc, char **argv)
{
    static const char *const names[] = { "mg", "ms", "md" };
    static const char *const usages[] = {
        CTL_USAGE_DATA " mg KEY [FLAG...]",
        CTL_USAGE_DATA " ms KEY VALUE [FLAG...]",
        CTL_USAGE_DATA " md KEY [FLAG...]",
    };
    struct ringcache_meta_opts   o;
    struct ringcache_meta_result r;
    struct ringcache            *rc;
    unsigned char                bin[RINGCACHE_KEY_MAX];
    const char                  *name = names[cmd], *key, *value = NULL;
    size_t                       key_len;
    bool                         b64;
    int                          first, ret;

    first = ctl_no_options(argc, argv, usages[cmd], CTL_USAGE_ON_ERROR);
    if (first < 0) {
        return 2;
    }
    if (argc - first < (cmd == META_MS ? 2 : 1)) {
        fprintf(stderr, "usage: %s\n  flags: %s\n", usages[cmd], meta_flag_help[cmd]);
        return 2;
    }
    if (meta_parse_flags(cmd, name, argc, argv, first + (cmd == META_MS ? 2 : 1), &o, &b64) != 0) {
        return 2;
    }
    key = argv[first];
    key_len = strlen(key);
    if (b64) {
        size_t n = key_len <= RINGCACHE_KEY_MAX ? util_b64_decode(key, key_len, bin) : 0;

        if (n == 0 || n > RINGCACHE_META_BINARY_KEY_MAX) {
            ctl_error("%s: b: '%s' is not base64 of 1..%d bytes", name, key,
                      RINGCACHE_META_BINARY_KEY_MAX);
            return 2;
        }
        key = (const char *)bin;
        key_len = n;
    }
    if (cmd == META_MS) {
        value = argv[first + 1];
    }
    rc = open_cluster(g, name);
    if (rc == NULL) {
        return 2;
    }
    if (cmd == META_MG) {
        ret = ringcache_mg(rc, key, key_len, &o, &r);
    } else if (cmd == META_MS) {
        ret = ringcache_ms(rc, key, key_len, value, strlen(value), &o, &r);
    } else {
        ret = ringcache_md(rc, key, key_len, &o, &r);
    }
    if (ret == 0) {
        meta_print(g, rc, argv[first], key, key_len, cmd == META_MD && o.invalidate, &r);
    } else if (r.status != 0) {
        /* The node answered: a miss, NS, EX or NF. */
        ctl_error("%s: %s (%s)", argv[first], meta_status_word(r.status), ringcache_strerror(ret));
    } else {
        char why[512];

        ctl_error("%s %s: %s", name, argv[first],
                  miss_reason(rc, b64 ? "" : argv[first], ret, why, sizeof(why)));
    }
    ringcache_meta_result_clear(&r);
    ringcache_free(rc);
    if (ret == 0) {
        return 0;
    }
    return ret == RINGCACHE_EKEY || ret == RINGCACHE_ETOOBIG || ret == RINGCACHE_EINVAL ? 2 : 1;
}

int
ctl_mg(struct ctl_globals *g, int argc, char **argv)
{
    return ctl_meta(META_MG, g, argc, argv);
}

int
ctl_ms(struct ctl_globals *g, int argc, char **argv)
{
    return ctl_meta(META_MS, g, argc, argv);
}

int
ctl_md(struct ctl_globals *g, int argc, char **argv)
{
    return ctl_meta(META_MD, g, argc, argv);
}
