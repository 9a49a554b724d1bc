/*
 * ringctl: the admin tool and CLI. Parses the global options, then hands
 * the rest of the command line to one subcommand (client/ctl.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "config.h"
#include "client/ctl.h"
#include "client/ctl_k8s.h"
#include "client/ctl_out.h"
#include "client/ctl_util.h"
#include "client/cport_client.h"
#include "client/ringcache.h"
#include "client/tls_client.h"

/* The meta data commands (client/ctl_data.c; client/ctl.h is to take
 * these over). */
int ctl_mg(struct ctl_globals *g, int argc, char **argv);
int ctl_ms(struct ctl_globals *g, int argc, char **argv);
int ctl_md(struct ctl_globals *g, int argc, char **argv);

struct ctl_command {
    const char *name;
    int (*fn)(struct ctl_globals *g, int argc, char **argv);
    const char *synopsis; /* after "ringctl [GLOBAL OPTIONS] " */
    const char *what;     /* one line; NULL: synopsis only */
    const char *section;  /* non-NULL starts a group in the usage */
};

static const struct ctl_command commands[] = {
    { "locate", ctl_locate, "locate --members FILE [--replicas R] [KEY...]",
      "preference list per key (keys from stdin when none given)",
      "placement, computed from membership files (no node contacted):" },
    { "ring", ctl_ring, "ring --members FILE [--svg OUT.svg]",
      "points and keyspace share per node; --svg draws the ring", NULL },
    { "plan", ctl_admin_plan, "plan --from A.members --to B.members",
      "what changes owner between two memberships", NULL },
    { "get", ctl_get, "get KEY...", "read keys",
      "data (--members FILE or --seeds H:P,... before the command):" },
    { "set", ctl_set, "set KEY VALUE [--ttl S] [--flags F]", "write a key; prints its owner",
      NULL },
    { "delete", ctl_delete, "delete KEY...", "delete keys", NULL },
    { "mget", ctl_mget, "mget < KEYS", "read keys from stdin (one a line), one request per node",
      NULL },
    { "stats", ctl_stats, "stats [GROUP]",
      "every node's stats (or stats GROUP: settings, hotkeys) side by side", NULL },
    { "top", ctl_top, "top [-n COUNT]", "the cluster's hot keys: every node's sketch merged",
      NULL },
    { "mg", ctl_mg, "mg KEY [v c f t s h l k u b T<ttl> N<ttl> R<s> C<cas> E<cas>]",
      "meta get: the reply's fields (default v f c t s)", NULL },
    { "ms", ctl_ms, "ms KEY VALUE [c s k b T<ttl> F<flags> C<cas> E<cas> I M<S|E|A|P|R> N<ttl>]",
      "meta set: modes (M), CAS (C), invalidate (I)", NULL },
    { "md", ctl_md, "md KEY [k b I T<ttl> C<cas> E<cas>]",
      "meta delete; I marks the key stale instead", NULL },
    { "init", ctl_init, "init --members FILE", "store FILE as epoch 1 and send it to the nodes",
      "cluster (--store DIR --token-file FILE before the command):" },
    { "status", ctl_status, "status [--watch [--interval S]]",
      "store epoch, pending transition, every node's state; --watch: live", NULL },
    { "plan ", NULL, "plan join ID ADDR [--weight W] [--zone Z] | plan leave ID",
      "dry run of a join or leave: shares and what would move", NULL },
    { "join", ctl_join, "join ID ADDR [ID ADDR...] [--weight W] [--zone Z] [--rate MIB_PER_S]",
      "add nodes: copy their ranges, fence, commit epoch N+1 (one transition)", NULL },
    { "leave", ctl_leave, "leave ID [ID...] [--rate MIB_PER_S]",
      "remove live nodes: copy their ranges away, fence, commit (one transition)", NULL },
    { "reweight", ctl_reweight, "reweight ID WEIGHT [--rate MIB_PER_S]",
      "change a node's weight (1..1000): copy the ranges that change owner, fence, commit", NULL },
    { "replicas", ctl_replicas, "replicas R [--rate MIB_PER_S]",
      "change R, the copies of each key (1..8, at most the members): the same", NULL },
    { "vnodes", ctl_vnodes, "vnodes V [--rate MIB_PER_S]",
      "change the points per unit of weight (1..65535): the same", NULL },
    { "abort", ctl_abort, "abort", "abort the pending (uncommitted) transition", NULL },
    { "resume", ctl_resume, "resume", "finish the pending transition, or re-send the active epoch",
      NULL },
    { "remove", ctl_remove, "remove --failed ID [--force] [--rate MIB_PER_S]",
      "drop a dead node; its ranges are copied from the other replicas", NULL },
    { "repair", ctl_repair, "repair ID [ADDR] [--force] [--rate MIB_PER_S]",
      "remove --failed a dead or restarted node, then join it again (empty)", NULL },
    { "watch", ctl_watch,
      "watch [--down-after S] [--interval S] [--transition-timeout S] [--force] "
      "[--keep-sole-copies] [--kubernetes STATEFULSET [--k8s-namespace NS] [--k8s-api URL] "
      "[--k8s-port PORT]] [--once]",
      "remove (repair) members down (restarted empty) for S seconds; with --kubernetes, join "
      "and leave pods as the StatefulSet scales",
      NULL },
    { "wait-left", ctl_wait_left, "wait-left ID [--grace S] [--timeout S]",
      "a node pod's preStop: wait while a change removes ID (none within S s: return)", NULL },
    { "rate", ctl_rate, "rate MIB_PER_S", "change the copy rate of the running move (0: unlimited)",
      NULL },
    { "pause", ctl_pause, "pause", "stop the running move's copy (it holds, nothing aborts)",
      NULL },
    { "unpause", ctl_unpause, "unpause", "let a paused move copy again", NULL },
    { "history", ctl_history, "history [--last N]",
      "past moves: when, epochs, outcome, items, bytes, copy rate, fence", NULL },
};

/* --cluster-tls: one TLS context for every cluster-port connection, from
 * the --tls-* files, for the process's lifetime. */
static int
start_cluster_tls(const struct ctl_globals *g)
{
    struct ringcache_options o;
    SSL_CTX                 *ctx;
    char                     err[512];

    ringcache_options_init(&o);
    o.tls_ca_file = g->tls_ca;
    o.tls_cert_file = g->tls_cert;
    o.tls_key_file = g->tls_key;
    ctx = tls_client_ctx_new(&o, err, sizeof(err));
    if (ctx == NULL) {
        ctl_error("--cluster-tls: %s", err);
        return -1;
    }
    cport_set_tls(ctx, !g->tls_skip_name_check);
    return 0;
}

static void
usage(FILE *out)
{
    size_t i;

    fprintf(out, "usage: ringctl [GLOBAL OPTIONS] COMMAND [ARGS]\n"
                 "       ringctl COMMAND --help     (one command's usage)\n");
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (commands[i].section != NULL) {
            fprintf(out, "\n%s\n", commands[i].section);
        }
        fprintf(out, "  %s\n      %s\n", commands[i].synopsis, commands[i].what);
    }
    fprintf(out,
            "\nglobal options (before COMMAND):\n"
            "  --members FILE     membership file (*.members)\n"
            "  --seeds H:P,...    data commands: ask these nodes for the membership\n"
            "  --store STORE      membership store: DIR, or etcd://HOST:PORT,.../PREFIX\n"
            "                     (etcds:// for TLS); default $RINGCTL_STORE\n"
            "  --token-file FILE  admin token (its first line) for the nodes' cluster port;\n"
            "                     default $RINGCTL_TOKEN_FILE\n"
            "  --cluster NAME     cluster name (default ringcache); must match the nodes'\n"
            "  --human            aligned output for people (default: TSV)\n"
            "  --json             one JSON object on stdout (errors too: \"error\", \"code\");\n"
            "                     (or RINGCTL_JSON=1 in the environment)\n"
            "  --timeout MS       per-operation timeout (default 1000)\n"
            "  --tls              data commands over TLS (nodes started with -Z)\n"
            "  --tls-ca FILE      CA certificates that sign the nodes' (implies --tls;\n"
            "                     default: the system's)\n"
            "  --tls-cert FILE    client certificate, with --tls-key (implies --tls)\n"
            "  --tls-key FILE     its private key\n"
            "  --tls-skip-name-check  accept a trusted node certificate that does not\n"
            "                     name the node's address\n"
            "  --cluster-tls      admin commands over mutual TLS to the cluster port\n"
            "                     (nodes started with --cluster-tls): --tls-ca, and\n"
            "                     --tls-cert/--tls-key as the admin's certificate;\n"
            "                     then data commands use TLS only with --tls\n"
            "  --auth-user USER   data commands log in as USER (nodes started with -Y)\n"
            "  --auth-password-file FILE  its password: the file's first line\n"
            "  -h, --help         this text\n"
            "  -V, --version      print the version\n"
            "\nexit status: 0 ok, 1 an operation failed or a key was missing, 2 bad usage or\n"
            "input, 3 another transition is pending. See ringctl(1).\n");
}

/* RINGCTL_JSON set, not empty and not "0": --json by default. */
static bool
json_env_on(void)
{
    const char *e = getenv("RINGCTL_JSON");

    return e != NULL && e[0] != '\0' && strcmp(e, "0") != 0;
}

/* value, or when it is NULL the environment variable name if set and not
 * empty. */
static const char *
env_default(const char *value, const char *name)
{
    const char *e = getenv(name);

    return value != NULL || e == NULL || e[0] == '\0' ? value : e;
}

/* The command line's work; main prints its --json result. */
static int
run(int argc, char **argv)
{
    static const struct option opts[] = { { "members", required_argument, NULL, 'm' },
                                          { "token-file", required_argument, NULL, 'k' },
                                          { "store", required_argument, NULL, 's' },
                                          { "human", no_argument, NULL, 'H' },
                                          { "json", no_argument, NULL, 'J' },
                                          { "timeout", required_argument, NULL, 't' },
                                          { "cluster", required_argument, NULL, 'c' },
                                          { "seeds", required_argument, NULL, 'S' },
                                          { "help", no_argument, NULL, 'h' },
                                          { "version", no_argument, NULL, 'V' },
                                          { "tls", no_argument, NULL, 'T' },
                                          { "tls-ca", required_argument, NULL, 'A' },
                                          { "tls-cert", required_argument, NULL, 'C' },
                                          { "tls-key", required_argument, NULL, 'K' },
                                          { "tls-skip-name-check", no_argument, NULL, 'N' },
                                          { "cluster-tls", no_argument, NULL, 'L' },
                                          { "auth-user", required_argument, NULL, 'u' },
                                          { "auth-password-file", required_argument, NULL, 'P' },
                                          { NULL, 0, NULL, 0 } };
    struct ctl_globals         g = { .timeout_ms = 1000, .cluster = "ringcache" };
    bool                       tls_asked = false;
    size_t                     i;
    long                       timeout;
    char                      *end;
    int                        c;

    /* RINGCTL_JSON=1 first, so that --json also covers the errors of
     * the options parsed before it. */
    ctl_out_set_json(json_env_on());
    /* '+': stop at the subcommand; it parses its own options. */
    while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            g.members = optarg;
            break;
        case 'k':
            g.token_file = optarg;
            break;
        case 's':
            g.store = optarg;
            break;
        case 'H':
            g.human = true;
            break;
        case 'J':
            ctl_out_set_json(true);
            break;
        case 'S':
            g.seeds = optarg;
            break;
        case 'c':
            if (optarg[0] == '\0') {
                ctl_error("--cluster: expected a name");
                return 2;
            }
            g.cluster = optarg;
            break;
        case 't':
            errno = 0;
            timeout = strtol(optarg, &end, 10);
            if (errno != 0 || end == optarg || *end != '\0' || timeout <= 0 || timeout > 3600000) {
                ctl_error("--timeout: expected milliseconds 1..3600000, got '%s'", optarg);
                return 2;
            }
            g.timeout_ms = (int)timeout;
            break;
        case 'T':
            g.tls = tls_asked = true;
            break;
        case 'A':
            g.tls = true;
            g.tls_ca = optarg;
            break;
        case 'C':
            g.tls = true;
            g.tls_cert = optarg;
            break;
        case 'K':
            g.tls = true;
            g.tls_key = optarg;
            break;
        case 'N':
            g.tls = true;
            g.tls_skip_name_check = true;
            break;
        case 'L':
            g.cluster_tls = true;
            break;
        case 'u':
            g.auth_user = optarg;
            break;
        case 'P':
            g.auth_password_file = optarg;
            break;
        case 'h':
            ctl_out_set_json(false); /* the usage is text */
            usage(stdout);
            return 0;
        case 'V':
            ctl_out_add("version", json_object_new_string(PACKAGE_VERSION));
            if (!ctl_out_json()) {
                printf("ringctl %s\n", PACKAGE_VERSION);
            }
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    /* The store and token of a shell's session, as KUBECONFIG or
     * ETCDCTL_ENDPOINTS: options given win. */
    g.store = env_default(g.store, "RINGCTL_STORE");
    g.token_file = env_default(g.token_file, "RINGCTL_TOKEN_FILE");
    /* JSON is for programs: the TSV fields, never the aligned form. */
    g.human = g.human && !ctl_out_json();
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    if ((g.auth_user == NULL) != (g.auth_password_file == NULL)) {
        ctl_error("--auth-user and --auth-password-file go together");
        return 2;
    }
    /* With --cluster-tls the --tls-* files are the cluster port's; the
     * data port speaks TLS only when --tls says so too. */
    if (g.cluster_tls) {
        g.tls = tls_asked;
        if (start_cluster_tls(&g) != 0) {
            return 2;
        }
    }
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (commands[i].fn != NULL && strcmp(argv[optind], commands[i].name) == 0) {
            /* The subcommand sees argv[0] = "ringctl NAME" (getopt's own
             * messages start with it). optind 0 makes glibc's getopt start
             * over, so the subcommand's own optstring decides whether its
             * options may follow its operands (not this parse's "+"). */
            static char self[64];

            snprintf(self, sizeof(self), "ringctl %s", commands[i].name);
            ctl_out_command(commands[i].name);
            optind++;
            argc -= optind - 1;
            argv += optind - 1;
            argv[0] = self;
            optind = 0;
            return commands[i].fn(&g, argc, argv);
        }
    }
    ctl_error("unknown command '%s' (ringctl --help lists them)", argv[optind]);
    return 2;
}

int
main(int argc, char **argv)
{
    return ctl_out_finish(run(argc, argv));
}
