/*
 * ringctl: the admin tool and CLI. Parses the global options, then hands
 * the rest of the command line to one subcommand (client/ctl.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "client/ctl.h"

struct ctl_command {
    const char *name;
    int (*fn)(struct ctl_globals *g, int argc, char **argv);
    const char *usage;
};

static const struct ctl_command commands[] = {
    { "locate", ctl_locate, "locate --members FILE [--replicas R] [KEY...]   preference list per key" },
    { "ring",   ctl_ring,   "ring --members FILE                             points and share per node" },
    { "plan",   ctl_admin_plan, "plan --from A.members --to B.members           what a change moves" },
    { "get",    ctl_get,    "get KEY...                                      read keys" },
    { "set",    ctl_set,    "set KEY VALUE [--ttl S] [--flags F]             write a key" },
    { "delete", ctl_delete, "delete KEY...                                   delete keys" },
    { "mget",   ctl_mget,   "mget                                            read keys from stdin" },
    { "stats",  ctl_stats,  "stats                                           every node's stats side by side" },
    { "init",   ctl_init,   "init --members FILE                             store epoch 1, commit it to the nodes" },
    { "status", ctl_status, "status                                          store epoch, pending, every node's state" },
    { "plan ",  NULL,       "plan join ID ADDR [--weight W] [--zone Z] | plan leave ID   dry run (needs --store)" },
    { "join",   ctl_join,   "join ID ADDR [--weight W] [--zone Z] [--rate MIB_PER_S]   add a node" },
    { "leave",  ctl_leave,  "leave ID [--rate MIB_PER_S]                     remove a node" },
    { "abort",  ctl_abort,  "abort                                           abort the pending transition" },
    { "resume", ctl_resume, "resume                                          finish the pending transition" },
    { "remove", ctl_remove, "remove --failed ID [--force] [--rate MIB_PER_S]  drop a dead node; copies come from its replicas" },
    { "repair", ctl_repair, "repair ID [ADDR] [--force] [--rate MIB_PER_S]   remove --failed a dead/restarted node, then join it again" },
    { "watch",  ctl_watch,  "watch [--down-after S] [--interval S] [--once]  remove (repair) members down (restarted) for S s" },
};

static void
usage(FILE *out)
{
    size_t i;

    fprintf(out, "usage: ringctl [--members FILE | --seeds H:P,...] [--store DIR --token-file FILE [--cluster NAME]]\n"
                 "               [--human] [--timeout MS] COMMAND [ARGS]\n\n");
    fprintf(out, "commands:\n");
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        fprintf(out, "  %s\n", commands[i].usage);
    }
    fprintf(out, "\nglobal options:\n"
            "  --members FILE     membership file (*.members)\n"
            "  --seeds H:P,...    data commands: ask these nodes for the membership\n"
            "  --token-file FILE  admin token for the cluster port\n"
            "  --store DIR        membership store (a directory on the admin host)\n"
            "  --cluster NAME     cluster name (default ringcache)\n"
            "  --human            aligned output for people (default: TSV)\n"
            "  --timeout MS       per-operation timeout (default 1000)\n"
            "  -h, --help         this text\n"
            "  -V, --version      print the version\n");
}

void
ctl_error(const char *fmt, ...)
{
    va_list ap;

    fputs("ringctl: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

char *
ctl_read_file(const char *path, size_t *len)
{
    FILE *f;
    char *buf = NULL, *nbuf;
    size_t cap = 0, n = 0, got;

    f = (strcmp(path, "-") == 0) ? stdin : fopen(path, "rb");
    if (f == NULL) {
        return NULL;
    }
    for (;;) {
        if (cap - n < 4096) {
            cap = cap == 0 ? 65536 : cap * 2;
            nbuf = realloc(buf, cap + 1);
            if (nbuf == NULL) {
                free(buf);
                buf = NULL;
                errno = ENOMEM;
                goto out;
            }
            buf = nbuf;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            break;
        }
    }
    if (ferror(f)) {
        free(buf);
        buf = NULL;
        errno = EIO;
        goto out;
    }
    buf[n] = '\0';
    *len = n;
out:
    if (f != stdin) {
        fclose(f);
    }
    return buf;
}

int
main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "members",    required_argument, NULL, 'm' },
        { "token-file", required_argument, NULL, 'k' },
        { "store",      required_argument, NULL, 's' },
        { "human",      no_argument,       NULL, 'H' },
        { "timeout",    required_argument, NULL, 't' },
        { "cluster",    required_argument, NULL, 'c' },
        { "seeds",      required_argument, NULL, 'S' },
        { "help",       no_argument,       NULL, 'h' },
        { "version",    no_argument,       NULL, 'V' },
        { NULL, 0, NULL, 0 }
    };
    struct ctl_globals g = { .timeout_ms = 1000, .cluster = "ringcache" };
    size_t i;
    int c;

    /* '+': stop at the subcommand; it parses its own options. */
    while ((c = getopt_long(argc, argv, "+hV", opts, NULL)) != -1) {
        switch (c) {
        case 'm': g.members = optarg; break;
        case 'k': g.token_file = optarg; break;
        case 's': g.store = optarg; break;
        case 'H': g.human = true; break;
        case 'S': g.seeds = optarg; break;
        case 'c':
            if (optarg[0] == '\0') {
                ctl_error("--cluster: expected a name");
                return 2;
            }
            g.cluster = optarg;
            break;
        case 't':
            g.timeout_ms = atoi(optarg);
            if (g.timeout_ms <= 0) {
                ctl_error("--timeout: expected a positive number of milliseconds");
                return 2;
            }
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("ringctl %s\n", PACKAGE_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    for (i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (commands[i].fn != NULL && strcmp(argv[optind], commands[i].name) == 0) {
            /* The subcommand sees argv[0] = its name, and getopt restarts. */
            optind++;
            argc -= optind - 1;
            argv += optind - 1;
            optind = 1;
            return commands[i].fn(&g, argc, argv);
        }
    }
    ctl_error("unknown command '%s' (ringctl --help lists them)", argv[optind]);
    return 2;
}
