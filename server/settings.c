/*
 * settings: option parsing with getopt_long. Values are validated here so
 * the rest of the node can trust them; every error names the flag.
 */
#include "config.h"
#include "server/settings.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ITEM_SIZE_MIN   1024u
#define ITEM_SIZE_LIMIT (1024u * 1024u * 1024u)

/* Defaults as memcached's, except the listen address (loopback, safer). */
void
settings_init(struct settings *s)
{
    memset(s, 0, sizeof(*s));
    s->port = 11211;
    strcpy(s->listen_addr, "127.0.0.1");
    s->num_threads = 4;
    s->maxbytes = (size_t)64 * 1024 * 1024;
    s->maxconns = 1024;
    s->item_size_max = 1024 * 1024;
    s->verbose = 0;
    strcpy(s->cluster_name, "ringcache");
    s->forward_timeout_ms = 1000;
}

/* Print the usage text to f. */
void
settings_usage(FILE *f)
{
    fprintf(f, "Usage: ringcached [options]\n"
               "A memcached-compatible cache node.\n"
               "  -p, --port=<num>           TCP port to listen on (default: 11211)\n"
               "  -l, --listen=<addr>        interface to listen on (default: 127.0.0.1)\n"
               "  -t, --threads=<num>        number of worker threads (default: 4)\n"
               "  -m, --memory-limit=<num>   item memory in megabytes (default: 64)\n"
               "  -c, --conn-limit=<num>     max simultaneous connections (default: 1024)\n"
               "  -I, --max-item-size=<num>  largest item, k/m suffix allowed (default: 1m)\n"
               "  -v, --verbose              print the listening address; -vv: per connection\n"
               "      --id=<id>              this node's id in memberships (cluster mode)\n"
               "      --state-dir=<dir>      cluster state directory; enables cluster mode\n"
               "      --token-file=<file>    admin token (first line) for the cluster port\n"
               "      --cluster=<name>       cluster name (default: ringcache)\n"
               "      --cluster-port=<num>   cluster port (default: client port + 10000)\n"
               "      --forward-timeout=<ms> how long a forwarded request or a replica\n"
               "                             acknowledgement may take (default: 1000)\n"
               "      --store=<spec>         watch the membership store (ringctl's --store:\n"
               "                             DIR or etcd://HOST:PORT,.../PREFIX): commit an\n"
               "                             epoch the store committed if its admin died\n"
               "  -h, --help                 print this help and exit\n"
               "  -V, --version              print the version and exit\n");
}

/* A decimal integer in [min, max]; 0 or -1. */
static int
parse_int(const char *str, long min, long max, long *out)
{
    char *end;
    long  v;

    errno = 0;
    v = strtol(str, &end, 10);
    if (errno != 0 || end == str || *end != '\0' || v < min || v > max) {
        return -1;
    }
    *out = v;
    return 0;
}

/* Digits with an optional k/m suffix (memcached's -I syntax). */
int
settings_parse_size(const char *str, size_t *out)
{
    unsigned long long v;
    unsigned long long mult = 1;
    char              *end;

    if (str[0] < '0' || str[0] > '9') {
        return -1;
    }
    errno = 0;
    v = strtoull(str, &end, 10);
    if (errno != 0 || end == str) {
        return -1;
    }
    if (*end == 'k' || *end == 'K') {
        mult = 1024;
        end++;
    } else if (*end == 'm' || *end == 'M') {
        mult = 1024 * 1024;
        end++;
    }
    if (*end != '\0' || v > SIZE_MAX / mult) {
        return -1;
    }
    *out = (size_t)(v * mult);
    return 0;
}

/* Report a bad option value and the usage; always -1. */
static int
bad_value(FILE *err, char opt, const char *val, const char *why)
{
    fprintf(err, "ringcached: -%c %s: %s\n", opt, val, why);
    settings_usage(err);
    return -1;
}

/* Long-only options (cluster mode). */
enum {
    OPT_ID = 256,
    OPT_STATE_DIR,
    OPT_TOKEN_FILE,
    OPT_CLUSTER,
    OPT_CLUSTER_PORT,
    OPT_FORWARD_TIMEOUT,
    OPT_STORE,
};

/* Copy a string option into dst[size]; -1 (reported) when empty or long. */
static int
copy_opt(FILE *err, const char *name, const char *val, char *dst, size_t size)
{
    if (val[0] == '\0' || strlen(val) >= size) {
        fprintf(err, "ringcached: --%s: must be 1-%zu bytes\n", name, size - 1);
        settings_usage(err);
        return -1;
    }
    strcpy(dst, val);
    return 0;
}

/* Parse the command line into s. */
int
settings_parse(struct settings *s, int argc, char **argv, FILE *out, FILE *err)
{
    static const struct option longopts[] = {
        { "port", required_argument, NULL, 'p' },
        { "listen", required_argument, NULL, 'l' },
        { "threads", required_argument, NULL, 't' },
        { "memory-limit", required_argument, NULL, 'm' },
        { "conn-limit", required_argument, NULL, 'c' },
        { "max-item-size", required_argument, NULL, 'I' },
        { "verbose", no_argument, NULL, 'v' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { "id", required_argument, NULL, OPT_ID },
        { "state-dir", required_argument, NULL, OPT_STATE_DIR },
        { "token-file", required_argument, NULL, OPT_TOKEN_FILE },
        { "cluster", required_argument, NULL, OPT_CLUSTER },
        { "cluster-port", required_argument, NULL, OPT_CLUSTER_PORT },
        { "forward-timeout", required_argument, NULL, OPT_FORWARD_TIMEOUT },
        { "store", required_argument, NULL, OPT_STORE },
        { NULL, 0, NULL, 0 },
    };
    long v;
    int  c;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":p:l:t:m:c:I:vhV", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (parse_int(optarg, 0, 65535, &v) < 0) {
                return bad_value(err, 'p', optarg, "not a port number (0-65535)");
            }
            s->port = (int)v;
            break;
        case 'l':
            if (strlen(optarg) == 0 || strlen(optarg) >= sizeof(s->listen_addr)) {
                return bad_value(err, 'l', optarg, "not a listen address");
            }
            strcpy(s->listen_addr, optarg);
            break;
        case 't':
            if (parse_int(optarg, 1, 256, &v) < 0) {
                return bad_value(err, 't', optarg, "threads must be 1-256");
            }
            s->num_threads = (int)v;
            break;
        case 'm':
            if (parse_int(optarg, 1, 1024L * 1024, &v) < 0) {
                return bad_value(err, 'm', optarg, "memory limit must be 1-1048576 MiB");
            }
            s->maxbytes = (size_t)v * 1024 * 1024;
            break;
        case 'c':
            if (parse_int(optarg, 1, 1000000, &v) < 0) {
                return bad_value(err, 'c', optarg, "connection limit must be 1-1000000");
            }
            s->maxconns = (int)v;
            break;
        case 'I':
            if (settings_parse_size(optarg, &s->item_size_max) < 0 ||
                s->item_size_max < ITEM_SIZE_MIN || s->item_size_max > ITEM_SIZE_LIMIT) {
                return bad_value(err, 'I', optarg, "item size must be 1k-1024m");
            }
            break;
        case 'v':
            s->verbose++;
            break;
        case OPT_ID:
            if (copy_opt(err, "id", optarg, s->node_id, sizeof(s->node_id)) < 0) {
                return -1;
            }
            break;
        case OPT_STATE_DIR:
            if (copy_opt(err, "state-dir", optarg, s->state_dir, sizeof(s->state_dir)) < 0) {
                return -1;
            }
            break;
        case OPT_TOKEN_FILE:
            if (copy_opt(err, "token-file", optarg, s->token_file, sizeof(s->token_file)) < 0) {
                return -1;
            }
            break;
        case OPT_CLUSTER:
            if (copy_opt(err, "cluster", optarg, s->cluster_name, sizeof(s->cluster_name)) < 0) {
                return -1;
            }
            break;
        case OPT_CLUSTER_PORT:
            if (parse_int(optarg, 1, 65535, &v) < 0) {
                fprintf(err, "ringcached: --cluster-port %s: not a port number (1-65535)\n",
                        optarg);
                settings_usage(err);
                return -1;
            }
            s->cluster_port = (int)v;
            break;
        case OPT_FORWARD_TIMEOUT:
            if (parse_int(optarg, 10, 600000, &v) < 0) {
                fprintf(err, "ringcached: --forward-timeout %s: must be 10-600000 ms\n", optarg);
                settings_usage(err);
                return -1;
            }
            s->forward_timeout_ms = (int)v;
            break;
        case OPT_STORE:
            if (copy_opt(err, "store", optarg, s->store, sizeof(s->store)) < 0) {
                return -1;
            }
            break;
        case 'h':
            settings_usage(out);
            return 1;
        case 'V':
            fprintf(out, "ringcached %s (memcached protocol 1.6)\n", PACKAGE_VERSION);
            return 1;
        case ':':
            /* Name a long option as typed (a long-only one has no letter). */
            if (strncmp(argv[optind - 1], "--", 2) == 0) {
                fprintf(err, "ringcached: option %s requires an argument\n", argv[optind - 1]);
            } else {
                fprintf(err, "ringcached: option -%c requires an argument\n", optopt);
            }
            settings_usage(err);
            return -1;
        default:
            if (optopt != 0) {
                fprintf(err, "ringcached: unknown option: -%c\n", optopt);
            } else {
                fprintf(err, "ringcached: unknown option: %s\n", argv[optind - 1]);
            }
            settings_usage(err);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(err, "ringcached: unexpected argument: %s\n", argv[optind]);
        settings_usage(err);
        return -1;
    }
    if (s->state_dir[0] != '\0' && s->node_id[0] == '\0') {
        fprintf(err, "ringcached: --state-dir needs --id\n");
        settings_usage(err);
        return -1;
    }
    if (s->state_dir[0] == '\0' && (s->node_id[0] != '\0' || s->token_file[0] != '\0' ||
                                    s->cluster_port != 0 || s->store[0] != '\0')) {
        fprintf(err,
                "ringcached: --id, --token-file, --cluster-port and --store need --state-dir\n");
        settings_usage(err);
        return -1;
    }
    if (s->item_size_max > s->maxbytes / 2) {
        fprintf(err, "ringcached: -I %zu: cannot exceed half of -m\n", s->item_size_max);
        settings_usage(err);
        return -1;
    }
    return 0;
}
