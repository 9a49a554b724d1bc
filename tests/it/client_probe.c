/*
 * client_probe: drives one libringcache handle for the integration tests.
 * It reads commands on stdin, one a line, and answers each with lines on
 * stdout ending in a line "." so the test can kill and restart nodes
 * between commands while the handle (its pools and down marks) lives on.
 *
 *   usage: client_probe MEMBERS|seeds:H:P,H:P [OP_TIMEOUT_MS RETRY_MS RETRY_MAX_MS [POLL_MS]]
 *
 * Besides the data commands: "epoch" prints the handle's epoch, "refresh"
 * calls ringcache_refresh, "nodes" prints "id addr" per node, "down"
 * "id 0|1" and "errors" "id CODE" (ringcache_node_error).
 *
 * TLS and the -Y login come from the environment (probe_options in
 * probe_common.h: RC_PROBE_TLS*, RC_PROBE_AUTH_USER and _PASSWORD).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/ringcache.h"
#include "tests/it/probe_common.h"

static struct ringcache *rc;

static const char *
owner_of(const char *key)
{
    size_t owner;

    if (ringcache_locate(rc, key, strlen(key), &owner, 1) != 1) {
        return "-";
    }
    return ringcache_node_id(rc, owner);
}

/* One op on one key for "many" and "list": set writes "value-of-KEY",
 * get checks it. Prints "key owner code ms"; returns the ms taken. */
static double
one_op(const char *op, const char *key, int i)
{
    char   val[320];
    double t0, dt;
    int    ret;

    snprintf(val, sizeof(val), "value-of-%s", key);
    t0 = now_ms();
    if (strcmp(op, "set") == 0) {
        ret = ringcache_set(rc, key, strlen(key), val, strlen(val), (uint32_t)i, 0);
    } else {
        struct ringcache_value v;

        ret = ringcache_get(rc, key, strlen(key), &v);
        if (ret == 0) {
            if (v.len != strlen(val) || memcmp(v.data, val, v.len) != 0) {
                ret = RINGCACHE_EPROTO;
            }
            ringcache_value_clear(&v);
        }
    }
    dt = now_ms() - t0;
    printf("%s %s %s %.1f\n", key, owner_of(key), code_name(ret), dt);
    return dt;
}

/* "list set|get K1 K2 ...": one_op per key, then "max_ms X". */
static void
cmd_list(char *rest)
{
    char  *save = NULL, *op = strtok_r(rest, " \n", &save), *key;
    double dt, max = 0;
    int    i = 0;

    while (op != NULL && (key = strtok_r(NULL, " \n", &save)) != NULL) {
        dt = one_op(op, key, i++);
        max = dt > max ? dt : max;
    }
    printf("max_ms %.1f\n", max);
}

/* "many set|get PREFIX N": one op per key; per key a line
 * "key owner code ms", then a summary "max_ms X". */
static void
cmd_many(const char *op, const char *prefix, int n)
{
    char   key[300], val[320];
    double t0, dt, max = 0;
    int    i, ret;

    for (i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        snprintf(val, sizeof(val), "value-of-%s", key);
        t0 = now_ms();
        if (strcmp(op, "set") == 0) {
            ret = ringcache_set(rc, key, strlen(key), val, strlen(val), (uint32_t)i, 0);
        } else {
            struct ringcache_value v;

            ret = ringcache_get(rc, key, strlen(key), &v);
            if (ret == 0) {
                if (v.len != strlen(val) || memcmp(v.data, val, v.len) != 0) {
                    ret = RINGCACHE_EPROTO;
                }
                ringcache_value_clear(&v);
            }
        }
        dt = now_ms() - t0;
        max = dt > max ? dt : max;
        printf("%s %s %s %.1f\n", key, owner_of(key), code_name(ret), dt);
    }
    printf("max_ms %.1f\n", max);
}

/* "mget PREFIX N": one multi-get; per key "key node code", then
 * "ms X". Values are checked against what "many set" wrote. */
struct mget_seen {
    const char **keys;
    int         *code;
    int         *node;
};

static void
mget_cb(void *arg, size_t index, int node, int status, const struct ringcache_value *v)
{
    struct mget_seen *s = arg;
    char              want[300];

    snprintf(want, sizeof(want), "value-of-%s", s->keys[index]);
    if (status == 0 &&
        (v->len != strlen(want) || memcmp(v->data, want, v->len) != 0 || v->data[v->len] != '\0')) {
        status = RINGCACHE_EPROTO;
    }
    s->code[index] = status;
    s->node[index] = node;
}

static void
cmd_mget(const char *prefix, int n)
{
    struct mget_seen s;
    char(*names)[256] = calloc((size_t)n, 256);
    double t0;
    int    i, ret;

    s.keys = calloc((size_t)n, sizeof(char *));
    s.code = calloc((size_t)n, sizeof(int));
    s.node = calloc((size_t)n, sizeof(int));
    for (i = 0; i < n; i++) {
        snprintf(names[i], 256, "%s%d", prefix, i);
        s.keys[i] = names[i];
        s.code[i] = 1; /* not reported */
    }
    t0 = now_ms();
    ret = ringcache_mget_cb(rc, s.keys, NULL, (size_t)n, 0, mget_cb, &s);
    for (i = 0; i < n; i++) {
        printf("%s %s %s\n", s.keys[i],
               s.node[i] >= 0 ? ringcache_node_id(rc, (size_t)s.node[i]) : "-",
               s.code[i] == 1 ? "UNREPORTED" : code_name(s.code[i]));
    }
    printf("result %s ms %.1f\n", code_name(ret), now_ms() - t0);
    free(names);
    free(s.keys);
    free(s.code);
    free(s.node);
}

/* "threads T N": T threads share the handle; each does N rounds of
 * set/get/append/incr/delete on its own keys plus a shared multi-get, and
 * checks every answer. Prints "errors E ops O". */
struct worker {
    int id, rounds, errors, ops;
};

static void *
worker_run(void *arg)
{
    struct worker         *w = arg;
    struct ringcache_value v;
    char                   key[64], val[64], ctr[64];
    const char            *mk[8];
    char                   mnames[8][64];
    struct ringcache_value mv[8];
    int                    ms[8];
    uint64_t               n;
    int                    r, j;

    for (j = 0; j < 8; j++) {
        snprintf(mnames[j], sizeof(mnames[j]), "thr-shared-%d", j);
        mk[j] = mnames[j];
    }
    snprintf(ctr, sizeof(ctr), "thr-%d-counter", w->id);
    if (ringcache_set(rc, ctr, strlen(ctr), "0", 1, 0, 0) != 0) {
        w->errors++;
    }
    for (r = 0; r < w->rounds; r++) {
        snprintf(key, sizeof(key), "thr-%d-%d", w->id, r % 50);
        snprintf(val, sizeof(val), "v-%d-%d", w->id, r);
        w->errors += ringcache_set(rc, key, strlen(key), val, strlen(val), (uint32_t)r, 0) != 0;
        w->errors += ringcache_append(rc, key, strlen(key), "+", 1) != 0;
        if (ringcache_get(rc, key, strlen(key), &v) != 0) {
            w->errors++;
        } else {
            w->errors += v.len != strlen(val) + 1 || memcmp(v.data, val, strlen(val)) != 0 ||
                         v.data[v.len - 1] != '+' || v.flags != (uint32_t)r;
            ringcache_value_clear(&v);
        }
        w->errors += ringcache_incr(rc, ctr, strlen(ctr), 1, &n) != 0 || n != (uint64_t)r + 1;
        if (ringcache_mget(rc, mk, NULL, 8, mv, ms) != 0) {
            w->errors++;
        } else {
            for (j = 0; j < 8; j++) {
                w->errors += ms[j] != 0 || strcmp(mv[j].data, mnames[j]) != 0;
                ringcache_value_clear(&mv[j]);
            }
        }
        if (r % 10 == 9) {
            w->errors += ringcache_delete(rc, key, strlen(key)) != 0;
            w->errors += ringcache_get(rc, key, strlen(key), &v) != RINGCACHE_ENOTFOUND;
            w->ops += 2;
        }
        w->ops += 5;
    }
    return NULL;
}

static void
cmd_threads(int t, int rounds)
{
    pthread_t     tid[64];
    struct worker w[64];
    int           i, errors = 0, ops = 0;

    if (t > 64) {
        t = 64;
    }
    for (i = 0; i < 8; i++) {
        char k[64];

        snprintf(k, sizeof(k), "thr-shared-%d", i);
        errors += ringcache_set(rc, k, strlen(k), k, strlen(k), 0, 0) != 0;
    }
    for (i = 0; i < t; i++) {
        w[i] = (struct worker){ .id = i, .rounds = rounds };
        pthread_create(&tid[i], NULL, worker_run, &w[i]);
    }
    for (i = 0; i < t; i++) {
        pthread_join(tid[i], NULL);
        errors += w[i].errors;
        ops += w[i].ops;
    }
    printf("errors %d ops %d\n", errors, ops);
}

/* "ops KEY": every operation once on one key, printing each code. */
static void
cmd_ops(const char *key)
{
    size_t                 kl = strlen(key);
    struct ringcache_value v;
    uint64_t               n = 0, cas;
    int                    ret;

    ringcache_delete(rc, key, kl);
    printf("get_miss %s\n", code_name(ringcache_get(rc, key, kl, &v)));
    printf("replace_missing %s\n", code_name(ringcache_replace(rc, key, kl, "x", 1, 0, 0)));
    printf("append_missing %s\n", code_name(ringcache_append(rc, key, kl, "x", 1)));
    printf("add %s\n", code_name(ringcache_add(rc, key, kl, "10", 2, 5, 0)));
    printf("add_again %s\n", code_name(ringcache_add(rc, key, kl, "10", 2, 5, 0)));
    ret = ringcache_incr(rc, key, kl, 5, &n);
    printf("incr %s %llu\n", code_name(ret), (unsigned long long)n);
    ret = ringcache_decr(rc, key, kl, 20, &n);
    printf("decr %s %llu\n", code_name(ret), (unsigned long long)n);
    printf("replace %s\n", code_name(ringcache_replace(rc, key, kl, "mid", 3, 6, 0)));
    printf("append %s\n", code_name(ringcache_append(rc, key, kl, "-end", 4)));
    printf("prepend %s\n", code_name(ringcache_prepend(rc, key, kl, "start-", 6)));
    if (ringcache_gets(rc, key, kl, &v) == 0) {
        printf("gets %s %u\n", v.data, v.flags);
        cas = v.cas;
        ringcache_value_clear(&v);
        printf("cas %s\n", code_name(ringcache_cas(rc, key, kl, "new", 3, 7, 0, cas)));
        printf("cas_stale %s\n", code_name(ringcache_cas(rc, key, kl, "newer", 5, 7, 0, cas)));
    }
    printf("incr_text %s\n", code_name(ringcache_incr(rc, key, kl, 1, &n)));
    printf("touch %s\n", code_name(ringcache_touch(rc, key, kl, 100)));
    if (ringcache_get(rc, key, kl, &v) == 0) {
        printf("get %s %u\n", v.data, v.flags);
        ringcache_value_clear(&v);
    }
    printf("delete %s\n", code_name(ringcache_delete(rc, key, kl)));
    printf("delete_again %s\n", code_name(ringcache_delete(rc, key, kl)));
    printf("touch_missing %s\n", code_name(ringcache_touch(rc, key, kl, 100)));
    printf("cas_missing %s\n", code_name(ringcache_cas(rc, key, kl, "z", 1, 0, 0, 1)));
    {
        /* A large value crosses many reads and leaves the pool buffer. */
        size_t big = 1000000, i;
        char  *b = malloc(big + 1);

        for (i = 0; i < big; i++) {
            b[i] = (char)('a' + i % 26);
        }
        printf("set_big %s\n", code_name(ringcache_set(rc, key, kl, b, big, 0, 0)));
        ret = ringcache_get(rc, key, kl, &v);
        printf("get_big %s %d\n", code_name(ret),
               ret == 0 && v.len == big && memcmp(v.data, b, big) == 0);
        if (ret == 0) {
            ringcache_value_clear(&v);
        }
        printf("set_too_big %s\n", code_name(ringcache_set(rc, key, kl, b, 1048577, 0, 0)));
        free(b);
    }
    printf("set_ttl %s\n", code_name(ringcache_set(rc, key, kl, "gone", 4, 0, -1)));
    printf("get_expired %s\n", code_name(ringcache_get(rc, key, kl, &v)));
}

int
main(int argc, char **argv)
{
    struct ringcache_options opt;
    char                     line[4096], a[256], b[256];
    char                     err[512];
    int                      n, m;

    if (argc != 2 && argc != 5 && argc != 6) {
        fprintf(stderr, "usage: client_probe MEMBERS|seeds:H:P,H:P [OP_TIMEOUT_MS RETRY_MS "
                        "RETRY_MAX_MS [POLL_MS]]\n");
        return 2;
    }
    probe_options(&opt);
    if (argc >= 5) {
        opt.op_timeout_ms = atoi(argv[2]);
        opt.retry_interval_ms = atoi(argv[3]);
        opt.retry_max_ms = atoi(argv[4]);
    }
    if (strncmp(argv[1], "seeds:", 6) == 0) {
        char       *list = strdup(argv[1] + 6), *save = NULL, *tok;
        const char *seeds[16];
        size_t      ns = 0;

        for (tok = strtok_r(list, ",", &save); tok != NULL && ns < 16;
             tok = strtok_r(NULL, ",", &save)) {
            seeds[ns++] = tok;
        }
        n = ringcache_new_seeds(&rc, seeds, ns, &opt, err, sizeof(err));
        free(list);
    } else {
        n = ringcache_new_members_file(&rc, argv[1], &opt, err, sizeof(err));
    }
    if (n != 0) {
        fprintf(stderr, "client_probe: %s\n", err);
        return 1;
    }
    if (argc == 6) {
        ringcache_set_poll_interval(rc, atoi(argv[5]));
    }
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    while (fgets(line, sizeof(line), stdin) != NULL) {
        if (strncmp(line, "list ", 5) == 0) {
            cmd_list(line + 5);
        } else if (sscanf(line, "many %255s %255s %d", a, b, &n) == 3) {
            cmd_many(a, b, n);
        } else if (sscanf(line, "mget %255s %d", a, &n) == 2) {
            cmd_mget(a, n);
        } else if (sscanf(line, "threads %d %d", &n, &m) == 2) {
            cmd_threads(n, m);
        } else if (sscanf(line, "ops %255s", a) == 1) {
            cmd_ops(a);
        } else if (strncmp(line, "epoch", 5) == 0) {
            printf("epoch %llu\n", (unsigned long long)ringcache_epoch(rc));
        } else if (strncmp(line, "refresh", 7) == 0) {
            printf("refresh %s epoch %llu\n", code_name(ringcache_refresh(rc)),
                   (unsigned long long)ringcache_epoch(rc));
        } else if (strncmp(line, "nodes", 5) == 0) {
            size_t i;

            for (i = 0; i < ringcache_node_count(rc); i++) {
                printf("%s %s\n", ringcache_node_id(rc, i), ringcache_node_addr(rc, i));
            }
        } else if (strncmp(line, "down", 4) == 0) {
            size_t i;

            for (i = 0; i < ringcache_node_count(rc); i++) {
                printf("%s %d\n", ringcache_node_id(rc, i), ringcache_node_is_down(rc, i));
            }
        } else if (strncmp(line, "errors", 6) == 0) {
            size_t i;

            for (i = 0; i < ringcache_node_count(rc); i++) {
                printf("%s %s\n", ringcache_node_id(rc, i),
                       code_name(ringcache_node_error(rc, i)));
            }
        } else {
            printf("unknown command\n");
        }
        printf(".\n");
        fflush(stdout);
    }
    ringcache_free(rc);
    return 0;
}
