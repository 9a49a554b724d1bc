/*
 * ctl_data: ringctl's data subcommands (get, set, delete, mget, stats),
 * thin shells over libringcache. Output is tab-separated for scripts, or
 * aligned for people with --human. A miss is a line on stderr and exit 1.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ctl.h"
#include "client/ctl_util.h"
#include "client/ringcache.h"

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

/* Open the cluster named by --members or --seeds with --timeout. NULL
 * after printing why. */
static struct ringcache *
open_cluster(const struct ctl_globals *g, const char *cmd)
{
    struct ringcache_options opt;
    struct ringcache        *rc = NULL;
    char                     err[512] = "";
    int                      ret;

    if (g->members == NULL && g->seeds == NULL) {
        ctl_error("%s: --members FILE or --seeds HOST:PORT,... is required (before the command)",
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
    if (g->seeds != NULL) {
        ret = open_seeds(&rc, g->seeds, &opt, err, sizeof(err));
    } else {
        ret = ringcache_new_members_file(&rc, g->members, &opt, err, sizeof(err));
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

/* The key column of a get or delete row: padded to width with --human,
 * else followed by a tab. */
static void
print_key(const struct ctl_globals *g, const char *key, int width)
{
    if (g->human) {
        printf("%-*s  ", width, key);
    } else {
        printf("%s\t", key);
    }
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
    snprintf(buf, len, "not read: every owner is down or unreachable (%s at %s%s)",
             ringcache_node_id(rc, owners[0]), ringcache_node_addr(rc, owners[0]),
             n > 1 ? ", ..." : "");
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
        print_key(g, argv[i], width);
        fwrite(v.data, 1, v.len, stdout);
        putchar('\n');
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
        case 'h':
            printf("usage: %s\n", usage);
            return 0;
        default:
            fprintf(stderr, "usage: %s\n", usage);
            return 2;
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
            printf("%s\t%s\n", argv[optind], ringcache_node_id(rc, owner));
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
        print_key(g, argv[i], width);
        printf("deleted\n");
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
        } else {
            printf("%s\t%s\t", keys[i], id);
        }
        fwrite(o->values[i].data, 1, o->values[i].len, stdout);
        putchar('\n');
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

    if (ctl_no_options(argc, argv, CTL_USAGE_DATA " stats", CTL_USAGE_ON_ERROR) < 0) {
        return 2;
    }
    if (optind < argc) {
        ctl_error("stats: takes no arguments");
        return 2;
    }
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
        ret = ringcache_stats(rc, i, stats_add, &t);
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
    /* Header row: the node ids; a node that did not answer shows "-". */
    if (g->human) {
        printf("%-*s", name_width, "stat");
    } else {
        printf("stat");
    }
    for (i = 0; i < t.n_nodes; i++) {
        if (g->human) {
            printf("  %*s", width[i], ringcache_node_id(rc, i));
        } else {
            printf("\t%s", ringcache_node_id(rc, i));
        }
    }
    putchar('\n');
    for (r = 0; r < t.n_rows; r++) {
        if (g->human) {
            printf("%-*s", name_width, t.names[r]);
        } else {
            printf("%s", t.names[r]);
        }
        for (i = 0; i < t.n_nodes; i++) {
            const char *cell = t.cells[r][i] != NULL ? t.cells[r][i] : "-";

            if (g->human) {
                printf("  %*s", width[i], cell);
            } else {
                printf("\t%s", cell);
            }
            free(t.cells[r][i]);
        }
        putchar('\n');
        free(t.names[r]);
        free(t.cells[r]);
    }
    free(t.names);
    free(t.cells);
    free(width);
    ringcache_free(rc);
    return status;
}
