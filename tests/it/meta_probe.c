/*
 * meta_probe: drives libringcache's meta operations for
 * tests/it/test_client_meta.py. Commands on stdin, one a line; each is
 * answered by lines on stdout and a line "." (as client_probe does).
 *
 *   usage: meta_probe MEMBERS [OP_TIMEOUT_MS RETRY_MS RETRY_MAX_MS]
 *
 *   mg|md|ma KEY [FLAG...]      one call; FLAGs in meta syntax (v c f t s h l k u I
 *   ms KEY VALUE [FLAG...]      T<n> N<n> R<n> C<n> E<n> F<n> D<n> J<n> M<mode> W<ms>);
 *                               prints "code=.. status=.. value=.. ..."
 *   herd KEY THREADS DELAY_MS [FLAG...]  THREADS callers of ringcache_get_or_compute
 *                               at once; compute sleeps DELAY_MS and returns
 *                               "computed-KEY-<n>"; prints "computes N", then per caller
 *                               "caller I code=.. won=.. stale=.. value=.."
 *   mgm PREFIX N [FLAG...]      ringcache_mg_multi of PREFIX0..PREFIX<N-1>; per key
 *                               "KEY NODE CODE VALUE|-", then "result CODE ms X"
 *   owner KEY                   the key's primary node id
 *
 * A KEY written x:HEX is those bytes (binary keys). The environment sets
 * TLS and login options as for client_probe (probe_options).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client/ringcache.h"
#include "tests/it/probe_common.h"

static struct ringcache *rc;

static const char *
status_name(int status)
{
    static const char *names[] = { "none",    "hit",        "miss",   "stored",
                                   "deleted", "not_stored", "exists", "not_found" };

    return status >= 0 && status <= 7 ? names[status] : "?";
}

/* A KEY argument: x:HEX decoded into buf, else the text itself. */
static const char *
key_arg(const char *arg, char *buf, size_t *len)
{
    size_t i, n;

    if (strncmp(arg, "x:", 2) != 0) {
        *len = strlen(arg);
        return arg;
    }
    n = strlen(arg + 2) / 2;
    for (i = 0; i < n && i < 512; i++) {
        unsigned v;

        sscanf(arg + 2 + 2 * i, "%2x", &v);
        buf[i] = (char)v;
    }
    *len = i;
    return buf;
}

/* Meta-syntax flags into o (want only when a want flag is given);
 * W<ms> sets wait_ms. -1 on an unknown flag. */
static int
parse_flags(char **tok, int n, int ms, struct ringcache_meta_opts *o)
{
    unsigned want = 0;
    int      i;

    ringcache_meta_opts_init(o);
    for (i = 0; i < n; i++) {
        const char *a = tok[i] + 1;

        switch (tok[i][0]) {
        case 'v':
            want |= RINGCACHE_WANT_VALUE;
            break;
        case 'c':
            want |= RINGCACHE_WANT_CAS;
            break;
        case 'f':
            want |= RINGCACHE_WANT_FLAGS;
            break;
        case 't':
            want |= RINGCACHE_WANT_TTL;
            break;
        case 's':
            want |= RINGCACHE_WANT_SIZE;
            break;
        case 'h':
            want |= RINGCACHE_WANT_HIT;
            break;
        case 'l':
            want |= RINGCACHE_WANT_LAST_ACCESS;
            break;
        case 'k':
            want |= RINGCACHE_WANT_KEY;
            break;
        case 'u':
            o->no_bump = 1;
            break;
        case 'I':
            o->invalidate = 1;
            break;
        case 'T':
            o->ttl = atoi(a);
            break;
        case 'N':
            o->vivify_ttl = atoi(a);
            break;
        case 'R':
            o->recache_below = atoi(a);
            break;
        case 'C':
            o->cas = strtoull(a, NULL, 10);
            break;
        case 'E':
            o->new_cas = strtoull(a, NULL, 10);
            break;
        case 'F':
            o->flags = (uint32_t)strtoul(a, NULL, 10);
            break;
        case 'D':
            o->delta = strtoull(a, NULL, 10);
            break;
        case 'J':
            o->initial = strtoull(a, NULL, 10);
            break;
        case 'W':
            o->wait_ms = atoi(a);
            break;
        case 'M':
            if (ms) {
                const char *modes = "SERAP";
                const char *p = strchr(modes, a[0]);

                o->mode = p != NULL && a[0] != '\0'
                              ? (unsigned)(p - modes == 0   ? RINGCACHE_MS_SET
                                           : p - modes == 1 ? RINGCACHE_MS_ADD
                                           : p - modes == 2 ? RINGCACHE_MS_REPLACE
                                           : p - modes == 3 ? RINGCACHE_MS_APPEND
                                                            : RINGCACHE_MS_PREPEND)
                              : 99;
            } else {
                o->mode = a[0] == 'D' || a[0] == '-' ? RINGCACHE_MA_DECR : RINGCACHE_MA_INCR;
            }
            break;
        default:
            return -1;
        }
    }
    if (want != 0) {
        o->want = want;
    }
    return 0;
}

/* A key as text when it is printable, else x:HEX. */
static void
print_key(const char *key, size_t len)
{
    size_t i;

    for (i = 0; i < len && key[i] > 0x20 && key[i] < 0x7f; i++) {
    }
    if (i == len) {
        printf("%.*s", (int)len, key);
        return;
    }
    printf("x:");
    for (i = 0; i < len; i++) {
        printf("%02x", (unsigned char)key[i]);
    }
}

/* "code=.. status=.. ..." of one result. */
static void
print_result(int code, const struct ringcache_meta_result *r)
{
    printf("code=%s status=%s value=%s flags=%u cas=%llu ttl=%lld size=%llu hit=%d la=%llu "
           "won=%d stale=%d z=%d number=%llu got=%u key=",
           code_name(code), status_name(r->status), r->value != NULL ? r->value : "-",
           (unsigned)r->flags, (unsigned long long)r->cas, (long long)r->ttl,
           (unsigned long long)r->size, r->hit_before, (unsigned long long)r->last_access, r->won,
           r->stale, r->token_sent, (unsigned long long)r->number, r->got);
    print_key(r->key, r->key_len);
    putchar('\n');
}

/* mg|md|ma KEY FLAG... and ms KEY VALUE FLAG... */
static void
cmd_one(char **tok, int n)
{
    struct ringcache_meta_opts   o;
    struct ringcache_meta_result r;
    char                         kb[512];
    size_t                       kl;
    const char                  *key;
    int                          ms = strcmp(tok[0], "ms") == 0, ret;

    if (n < 2 + ms || parse_flags(tok + 2 + ms, n - 2 - ms, ms, &o) != 0) {
        printf("bad command\n");
        return;
    }
    key = key_arg(tok[1], kb, &kl);
    if (ms) {
        ret = ringcache_ms(rc, key, kl, tok[2], strlen(tok[2]), &o, &r);
    } else if (strcmp(tok[0], "mg") == 0) {
        ret = ringcache_mg(rc, key, kl, &o, &r);
    } else if (strcmp(tok[0], "md") == 0) {
        ret = ringcache_md(rc, key, kl, &o, &r);
    } else {
        ret = ringcache_ma(rc, key, kl, &o, &r);
    }
    print_result(ret, &r);
    ringcache_meta_result_clear(&r);
}

/* The herd: callers released together by a barrier. */
struct herd {
    const char                *key;
    size_t                     key_len;
    int                        delay_ms;
    struct ringcache_meta_opts o;
    atomic_int                 computes;
    pthread_barrier_t          start;
};

struct caller {
    struct herd                 *h;
    int                          code;
    struct ringcache_meta_result r;
};

static int
herd_compute(void *arg, const char *key, size_t key_len, struct ringcache_value *out)
{
    struct herd    *h = arg;
    struct timespec ts = { h->delay_ms / 1000, (long)(h->delay_ms % 1000) * 1000000L };
    int             n = atomic_fetch_add(&h->computes, 1) + 1;
    char            buf[512];

    nanosleep(&ts, NULL);
    snprintf(buf, sizeof(buf), "computed-%.*s-%d", (int)key_len, key, n);
    out->data = strdup(buf);
    out->len = strlen(buf);
    out->flags = 7;
    return out->data != NULL ? 0 : RINGCACHE_ENOMEM;
}

static void *
herd_run(void *arg)
{
    struct caller *c = arg;

    pthread_barrier_wait(&c->h->start);
    c->code =
        ringcache_get_or_compute(rc, c->h->key, c->h->key_len, &c->h->o, herd_compute, c->h, &c->r);
    return NULL;
}

/* herd KEY THREADS DELAY_MS [FLAG...] */
static void
cmd_herd(char **tok, int n)
{
    struct herd   h;
    struct caller c[64];
    pthread_t     tid[64];
    char          kb[512];
    int           t, i;
    double        t0;

    if (n < 4 || parse_flags(tok + 4, n - 4, 0, &h.o) != 0) {
        printf("bad command\n");
        return;
    }
    h.key = key_arg(tok[1], kb, &h.key_len);
    t = atoi(tok[2]);
    t = t < 1 ? 1 : t > 64 ? 64 : t;
    h.delay_ms = atoi(tok[3]);
    atomic_init(&h.computes, 0);
    pthread_barrier_init(&h.start, NULL, (unsigned)t);
    t0 = now_ms();
    for (i = 0; i < t; i++) {
        memset(&c[i], 0, sizeof(c[i]));
        c[i].h = &h;
        pthread_create(&tid[i], NULL, herd_run, &c[i]);
    }
    for (i = 0; i < t; i++) {
        pthread_join(tid[i], NULL);
    }
    printf("computes %d ms %.1f\n", atomic_load(&h.computes), now_ms() - t0);
    for (i = 0; i < t; i++) {
        printf("caller %d ", i);
        print_result(c[i].code, &c[i].r);
        ringcache_meta_result_clear(&c[i].r);
    }
    pthread_barrier_destroy(&h.start);
}

struct mgm_seen {
    int   *code;
    int   *node;
    char **value;
    int   *won;
    int   *stale;
};

static void
mgm_cb(void *arg, size_t index, int node, int status, const struct ringcache_meta_result *r)
{
    struct mgm_seen *s = arg;

    s->code[index] = status;
    s->node[index] = node;
    s->value[index] = r->value != NULL ? strndup(r->value, r->value_len) : NULL;
    s->won[index] = r->won;
    s->stale[index] = r->stale;
}

/* mgm PREFIX N [FLAG...] */
static void
cmd_mgm(char **tok, int n)
{
    struct ringcache_meta_opts o;
    struct mgm_seen            s;
    const char               **keys;
    char(*names)[256];
    double t0;
    int    k, i, ret;

    if (n < 3 || parse_flags(tok + 3, n - 3, 0, &o) != 0) {
        printf("bad command\n");
        return;
    }
    k = atoi(tok[2]);
    names = calloc((size_t)k + 1, 256);
    keys = calloc((size_t)k + 1, sizeof(*keys));
    s.code = calloc((size_t)k + 1, sizeof(int));
    s.node = calloc((size_t)k + 1, sizeof(int));
    s.value = calloc((size_t)k + 1, sizeof(char *));
    s.won = calloc((size_t)k + 1, sizeof(int));
    s.stale = calloc((size_t)k + 1, sizeof(int));
    for (i = 0; i < k; i++) {
        snprintf(names[i], 256, "%s%d", tok[1], i);
        keys[i] = names[i];
        s.code[i] = 1; /* not reported */
    }
    t0 = now_ms();
    ret = ringcache_mg_multi(rc, keys, NULL, (size_t)k, &o, mgm_cb, &s);
    for (i = 0; i < k; i++) {
        printf("%s %s %s %s won=%d stale=%d\n", keys[i],
               s.node[i] >= 0 ? ringcache_node_id(rc, (size_t)s.node[i]) : "-",
               s.code[i] == 1 ? "UNREPORTED" : code_name(s.code[i]),
               s.value[i] != NULL ? s.value[i] : "-", s.won[i], s.stale[i]);
        free(s.value[i]);
    }
    printf("result %s ms %.1f\n", code_name(ret), now_ms() - t0);
    free(names);
    free(keys);
    free(s.code);
    free(s.node);
    free(s.value);
    free(s.won);
    free(s.stale);
}

int
main(int argc, char **argv)
{
    struct ringcache_options opt;
    char                     line[8192], err[512], *tok[64], *save = NULL;
    int                      n;

    if (argc != 2 && argc != 5) {
        fprintf(stderr, "usage: meta_probe MEMBERS [OP_TIMEOUT_MS RETRY_MS RETRY_MAX_MS]\n");
        return 2;
    }
    probe_options(&opt);
    if (argc == 5) {
        opt.op_timeout_ms = atoi(argv[2]);
        opt.retry_interval_ms = atoi(argv[3]);
        opt.retry_max_ms = atoi(argv[4]);
    }
    if (ringcache_new_members_file(&rc, argv[1], &opt, err, sizeof(err)) != 0) {
        fprintf(stderr, "meta_probe: %s\n", err);
        return 1;
    }
    setvbuf(stdout, NULL, _IOFBF, 1 << 16);
    while (fgets(line, sizeof(line), stdin) != NULL) {
        n = 0;
        for (tok[n] = strtok_r(line, " \n", &save); tok[n] != NULL && n < 63;
             tok[n] = strtok_r(NULL, " \n", &save)) {
            n++;
        }
        if (n == 0) {
            printf("unknown command\n");
        } else if (strcmp(tok[0], "mg") == 0 || strcmp(tok[0], "ms") == 0 ||
                   strcmp(tok[0], "md") == 0 || strcmp(tok[0], "ma") == 0) {
            cmd_one(tok, n);
        } else if (strcmp(tok[0], "herd") == 0) {
            cmd_herd(tok, n);
        } else if (strcmp(tok[0], "mgm") == 0) {
            cmd_mgm(tok, n);
        } else if (strcmp(tok[0], "owner") == 0 && n == 2) {
            size_t      owner;
            char        kb[512];
            size_t      kl;
            const char *key = key_arg(tok[1], kb, &kl);

            printf("%s\n", ringcache_locate(rc, key, kl, &owner, 1) == 1
                               ? ringcache_node_id(rc, owner)
                               : "-");
        } else {
            printf("unknown command\n");
        }
        printf(".\n");
        fflush(stdout);
    }
    ringcache_free(rc);
    return 0;
}
