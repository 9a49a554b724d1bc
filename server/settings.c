/*
 * settings: option parsing with getopt_long. Values are validated here so
 * the rest of the node can trust them; every error names the flag. The
 * memcached options that mean nothing here are accepted with one warning
 * line each; the ones whose meaning cannot be kept stop the start.
 */
#include "config.h"
#include "server/settings.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "server/log.h"

#define ITEM_SIZE_MIN   1024u
#define ITEM_SIZE_LIMIT (1024u * 1024u * 1024u)
/* --max-output-bytes: at least one output chunk. --max-frame-bytes: at
 * least a whole handoff batch or admin Membership of 256 nodes (both
 * under 300 KiB), at most the frame decoder's ceiling (8 MiB). */
#define OUTPUT_MIN   (16u * 1024u)
#define OUTPUT_LIMIT (1024u * 1024u * 1024u)
#define FRAME_MIN    (512u * 1024u)
#define FRAME_LIMIT  FRAME_PAYLOAD_MAX

/* Defaults as memcached's, except the listen address (loopback, safer);
 * every field not named is zero. */
static const struct settings defaults = {
    .port = 11211,
    .listen_addr = "127.0.0.1",
    .num_threads = 4,
    .maxbytes = (size_t)64 * 1024 * 1024,
    .maxconns = 1024,
    .item_size_max = 1024 * 1024,
    .cluster_name = "ringcache",
    .forward_timeout_ms = 1000,
    .socket_mask = 0700,
    .backlog = 1024,
    .reqs_per_event = 20,
    .hotkeys_sample = 100,
    .hotkeys_decay_s = 60,
    .max_output_bytes = SETTINGS_MAX_OUTPUT_DEFAULT,
    .max_keys_per_get = SETTINGS_MAX_KEYS_DEFAULT,
    .max_frame_bytes = SETTINGS_MAX_FRAME_DEFAULT,
    .handoff_window = SETTINGS_HANDOFF_WIN_DEFAULT,
    .throttle_floor_mib = SETTINGS_THROTTLE_FLOOR_DEFAULT,
    .ssl_min_version = 2, /* tlsv1.2, as memcached */
    .prefix_delimiter = ':',
};

void
settings_init(struct settings *s)
{
    *s = defaults;
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
               "      --cluster-tls          mutual TLS on the cluster port and to peers' ones:\n"
               "                             -o ssl_chain_cert, ssl_key (this node's) and\n"
               "                             ssl_ca_cert (what peers and ringctl must show)\n"
               "      --forward-timeout=<ms> how long a forwarded request or a replica\n"
               "                             acknowledgement may take (default: 1000)\n"
               "      --store=<spec>         watch the membership store (ringctl's --store:\n"
               "                             DIR or etcd://HOST:PORT,.../PREFIX): commit an\n"
               "                             epoch the store committed if its admin died\n"
               "      --metrics=<addr:port>  serve Prometheus metrics at GET /metrics and\n"
               "                             readiness at GET /ready (200 or 503) on this\n"
               "                             HTTP address (off by default; give a\n"
               "                             loopback one, e.g. 127.0.0.1:9150)\n"
               "      --metrics-auth=<file>  GET /metrics only with HTTP basic auth of a\n"
               "                             user:password line of file (-Y's format);\n"
               "                             /ready stays open for probes\n"
               "      --metrics-tls-cert=<file>\n"
               "                             serve /metrics and /ready over HTTPS only, with\n"
               "                             this PEM certificate chain\n"
               "      --metrics-tls-key=<file>\n"
               "                             its PEM private key (default: in the cert file)\n"
               "      --hotkeys-sample=<n>   count 1 keyed request in n in the hot-key\n"
               "                             sketch (stats hotkeys; default: 100, 0: off)\n"
               "      --hotkeys-decay=<s>    halve the hot-key counts every s seconds\n"
               "                             (default: 60, 0: never)\n"
               "      --log-format=<fmt>     text (the default), logfmt or json: one line\n"
               "                             per message on stderr, with time, level and --id\n"
               "limits (docs/operations.md, Limits):\n"
               "      --max-output-bytes=<n> replies queued for one client before its\n"
               "                             requests wait for it to read, k/m suffix\n"
               "                             allowed (default: 1m)\n"
               "      --max-keys-per-get=<n> keys in one get/gets/gat/gats; more is a\n"
               "                             CLIENT_ERROR (default: 100000; 0: no limit)\n"
               "      --max-frame-bytes=<n>  largest cluster port frame payload from an\n"
               "                             admin or peer, k/m suffix (default: 4m)\n"
               "      --handoff-window=<n>   handoff batches (<= 256 KiB) a range copy\n"
               "                             sends ahead of the destination's acks\n"
               "                             (default: 8)\n"
               "  -h, --help                 print this help and exit\n"
               "  -V, --version              print the version and exit\n"
               "memcached's options, with memcached's meaning:\n"
               "  -s, --unix-socket=<file>   listen on this unix socket, not on TCP\n"
               "  -a, --unix-mask=<mask>     its permissions, octal (default: 0700)\n"
               "  -b, --listen-backlog=<num> listen backlog (default: 1024)\n"
               "  -d, --daemon               run in the background (once listening)\n"
               "  -P, --pidfile=<file>       write the pid to this file\n"
               "  -u, --user=<user>          when started as root: run as this user\n"
               "                             (required as root with -d)\n"
               "  -k, --lock-memory          lock all paged memory (mlockall)\n"
               "  -F, --disable-flush-all    flush_all answers CLIENT_ERROR and flushes nothing\n"
               "  -r, --enable-coredumps     raise the core file size limit\n"
               "  -B, --protocol=ascii       the only protocol spoken (binary, auto: no)\n"
               "  -U, --udp-port=0           UDP is off (any other port: refused)\n"
               "  -X, --disable-dumping      refuse lru_crawler metadump\n"
               "  -W, --disable-watch        accepted (there is no watch command)\n"
               "  -A, --enable-shutdown      the shutdown command stops the node (as SIGTERM)\n"
               "  -D <char>                  stats detail's prefix delimiter (default :);\n"
               "                             turns stats detail on\n"
               "  -Y, --auth-file=<file>     clients log in first: a set whose data is\n"
               "                             `user password`, users from this file of\n"
               "                             user:password lines (docs/security.md)\n"
               "  -Z, --enable-ssl           TLS on the client port (needs ssl_chain_cert)\n"
               "  -o, --extended=<opts>      store_engine=compact|classic, modern, maxconns_fast,\n"
               "                             idle_timeout=<secs> (close a connection idle\n"
               "                             that long; 0: never, the default),\n"
               "                             copy_throttle=on|off (a handoff copy's rate\n"
               "                             follows client latency; default on),\n"
               "                             copy_throttle_floor=<MiB/s> (its least rate,\n"
               "                             default 8); slab and LRU tuning is accepted\n"
               "                             with a warning\n"
               "     TLS (with -Z): ssl_chain_cert=<file> (PEM chain), ssl_key=<file> (PEM\n"
               "                             key; default: in the chain file),\n"
               "                             ssl_ca_cert=<file> (CAs for client certs),\n"
               "                             ssl_verify_mode=0|1|2|3 (client certs: none,\n"
               "                             request, require, once; default 0),\n"
               "                             ssl_min_version=tlsv1.2|tlsv1.3 (or 0-3;\n"
               "                             default tlsv1.2), ssl_ciphers=<list>,\n"
               "                             ssl_session_cache, ssl_keyformat=1 (PEM)\n"
               "  accepted with a warning, no effect here: -f -n -L (slab tuning),\n"
               "     -C (CAS stays on), -R (requests per event), -N\n"
               "  refused (not supported): -U <non-zero>, -B binary|auto, -e, -M,\n"
               "     -S, -Z with -s, -o ext_*|proxy_*\n");
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

/* An option whose memcached meaning cannot be kept: one line, -1. */
static int
refuse(FILE *err, const char *opt, const char *why)
{
    fprintf(err, "ringcached: %s: %s\n", opt, why);
    return -1;
}

/* Warnings found while parsing, logged by settings_log_warnings once the
 * logger has its format (main runs one parse per process). */
#define WARN_MAX 32
static char warn_lines[WARN_MAX][400];
static int  warn_count;

/* Keep one warning line for settings_log_warnings. */
static void __attribute__((format(printf, 1, 2))) warn_later(const char *fmt, ...)
{
    va_list ap;

    if (warn_count == WARN_MAX) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(warn_lines[warn_count++], sizeof(warn_lines[0]), fmt, ap);
    va_end(ap);
}

/* See settings.h. */
void
settings_log_warnings(void)
{
    int i;

    for (i = 0; i < warn_count; i++) {
        log_msg(LOG_WARN, "%s", warn_lines[i]);
    }
    warn_count = 0;
}

/* An option that means nothing here: one warning line, then go on. */
static void
ignored(FILE *err, const char *opt, const char *val, const char *why)
{
    (void)err;
    warn_later("%s%s%s: %s; ignored", opt, val != NULL ? " " : "", val != NULL ? val : "", why);
}

static const char SLAB_WHY[] = "slab allocator tuning does not apply (ringcached has no slabs: "
                               "each item is its own allocation)";

/* What ringcached does with a memcached -o sub-option. */
enum sub_kind {
    SUB_NOOP,     /* accepted: what ringcached does anyway */
    SUB_SLAB,     /* slab, LRU or hash tuning: one warning */
    SUB_IGNORE,   /* accepted with one warning saying why */
    SUB_IDLE,     /* idle_timeout: applied */
    SUB_ENGINE,   /* store_engine: applied */
    SUB_THROTTLE, /* copy_throttle: applied */
    SUB_SSL,      /* ssl_*: TLS settings (parse_ssl) */
};

/* A sub-option's value: none (one given is ignored, as memcached does),
 * required, or optional. */
enum sub_arg {
    ARG_NONE,
    ARG_REQUIRED,
    ARG_OPTIONAL
};

struct subopt {
    const char *name;
    uint8_t     kind;
    uint8_t     arg;
    const char *why; /* SUB_IGNORE */
};

/* memcached 1.6's -o sub-options (memcached.c, subopts_tokens). */
static const struct subopt SUBOPTS[] = {
    { "modern", SUB_NOOP, ARG_NONE, NULL },
    { "maxconns_fast", SUB_NOOP, ARG_NONE, NULL },
    { "no_maxconns_fast", SUB_IGNORE, ARG_NONE,
      "connections over -c are always answered with an error and closed" },
    { "idle_timeout", SUB_IDLE, ARG_REQUIRED, NULL },
    { "store_engine", SUB_ENGINE, ARG_REQUIRED, NULL },
    { "copy_throttle", SUB_THROTTLE, ARG_REQUIRED, NULL },
    { "copy_throttle_floor", SUB_THROTTLE, ARG_REQUIRED, NULL },
    { "drop_privileges", SUB_IGNORE, ARG_NONE, "there is no system call filter" },
    { "no_drop_privileges", SUB_IGNORE, ARG_NONE, "there is no system call filter" },
    { "watcher_logbuf_size", SUB_IGNORE, ARG_REQUIRED, "there is no watch command" },
    { "worker_logbuf_size", SUB_IGNORE, ARG_REQUIRED, "there is no watch command" },
    { "read_buf_mem_limit", SUB_IGNORE, ARG_REQUIRED,
      "read buffers come from per-thread pools (ringcached(1), MEMORY)" },
    { "resp_obj_mem_limit", SUB_IGNORE, ARG_REQUIRED, "deprecated in memcached too" },
    { "ssl_chain_cert", SUB_SSL, ARG_REQUIRED, NULL },
    { "ssl_key", SUB_SSL, ARG_REQUIRED, NULL },
    { "ssl_ca_cert", SUB_SSL, ARG_REQUIRED, NULL },
    { "ssl_ciphers", SUB_SSL, ARG_REQUIRED, NULL },
    { "ssl_verify_mode", SUB_SSL, ARG_REQUIRED, NULL },
    { "ssl_min_version", SUB_SSL, ARG_REQUIRED, NULL },
    { "ssl_keyformat", SUB_SSL, ARG_REQUIRED, NULL },
    { "ssl_session_cache", SUB_SSL, ARG_NONE, NULL },
    { "ssl_wbuf_size", SUB_IGNORE, ARG_REQUIRED,
      "replies are encrypted from the connection's own output queue" },
    { "ssl_kernel_tls", SUB_IGNORE, ARG_NONE, "kernel TLS offload is not supported" },
    { "no_modern", SUB_SLAB, ARG_NONE, NULL },
    { "hashpower", SUB_SLAB, ARG_REQUIRED, NULL },
    { "no_hashexpand", SUB_SLAB, ARG_NONE, NULL },
    { "hash_algorithm", SUB_SLAB, ARG_REQUIRED, NULL },
    { "slab_reassign", SUB_SLAB, ARG_NONE, NULL },
    { "no_slab_reassign", SUB_SLAB, ARG_NONE, NULL },
    { "slab_automove", SUB_SLAB, ARG_OPTIONAL, NULL },
    { "no_slab_automove", SUB_SLAB, ARG_NONE, NULL },
    { "slab_automove_ratio", SUB_SLAB, ARG_REQUIRED, NULL },
    { "slab_automove_window", SUB_SLAB, ARG_REQUIRED, NULL },
    { "slab_sizes", SUB_SLAB, ARG_REQUIRED, NULL },
    { "slab_chunk_max", SUB_SLAB, ARG_REQUIRED, NULL },
    { "no_chunked_items", SUB_SLAB, ARG_NONE, NULL },
    { "tail_repair_time", SUB_SLAB, ARG_REQUIRED, NULL },
    { "lru_crawler", SUB_SLAB, ARG_NONE, NULL },
    { "no_lru_crawler", SUB_SLAB, ARG_NONE, NULL },
    { "lru_crawler_sleep", SUB_SLAB, ARG_REQUIRED, NULL },
    { "lru_crawler_tocrawl", SUB_SLAB, ARG_REQUIRED, NULL },
    { "lru_maintainer", SUB_SLAB, ARG_NONE, NULL },
    { "no_lru_maintainer", SUB_SLAB, ARG_NONE, NULL },
    { "hot_lru_pct", SUB_SLAB, ARG_REQUIRED, NULL },
    { "warm_lru_pct", SUB_SLAB, ARG_REQUIRED, NULL },
    { "hot_max_factor", SUB_SLAB, ARG_REQUIRED, NULL },
    { "warm_max_factor", SUB_SLAB, ARG_REQUIRED, NULL },
    { "temporary_ttl", SUB_SLAB, ARG_REQUIRED, NULL },
    { "track_sizes", SUB_SLAB, ARG_NONE, NULL },
    { "inline_ascii_resp", SUB_SLAB, ARG_NONE, NULL },
    { "no_inline_ascii_resp", SUB_SLAB, ARG_NONE, NULL },
};

/* Families of sub-options for features ringcached does not have. */
static const struct {
    const char *prefix;
    const char *why;
} SUBOPT_REFUSED[] = {
    { "ext_", "extstore (items on flash) is not supported" },
    { "proxy_", "proxy mode is not supported" },
};

/* -o ssl_min_version's values: memcached 1.6's numbers and their names. */
static const char *const TLS_VERSIONS[] = { "tlsv1.0", "tlsv1.1", "tlsv1.2", "tlsv1.3" };

/* A TLS sub-option (its value is there when the table requires one);
 * 0 or -1 (reported). The files are only named here: server/tls.c reads
 * them at start and on refresh_certs. */
static int
parse_ssl(FILE *err, const char *name, const char *val, struct settings *s)
{
    char  *dst = NULL;
    size_t i;
    long   v;

    if (strcmp(name, "ssl_chain_cert") == 0) {
        dst = s->ssl_chain_cert;
    } else if (strcmp(name, "ssl_key") == 0) {
        dst = s->ssl_key;
    } else if (strcmp(name, "ssl_ca_cert") == 0) {
        dst = s->ssl_ca_cert;
    } else if (strcmp(name, "ssl_ciphers") == 0) {
        dst = s->ssl_ciphers;
    } else if (strcmp(name, "ssl_session_cache") == 0) {
        s->ssl_session_cache = true;
        return 0;
    } else if (strcmp(name, "ssl_verify_mode") == 0) {
        if (parse_int(val, 0, 3, &v) < 0) {
            fprintf(err,
                    "ringcached: -o ssl_verify_mode=%s: must be 0 (none), 1 (request), "
                    "2 (require) or 3 (once)\n",
                    val);
            return -1;
        }
        s->ssl_verify_mode = (int)v;
        return 0;
    } else if (strcmp(name, "ssl_min_version") == 0) {
        for (i = 0; i < sizeof(TLS_VERSIONS) / sizeof(TLS_VERSIONS[0]); i++) {
            if (strcmp(val, TLS_VERSIONS[i]) == 0) {
                s->ssl_min_version = (int)i;
                return 0;
            }
        }
        if (parse_int(val, 0, 3, &v) < 0) {
            fprintf(err,
                    "ringcached: -o ssl_min_version=%s: must be tlsv1.0, tlsv1.1, tlsv1.2, "
                    "tlsv1.3 or 0-3\n",
                    val);
            return -1;
        }
        s->ssl_min_version = (int)v;
        return 0;
    } else if (strcmp(name, "ssl_keyformat") == 0) {
        /* memcached passes it to OpenSSL: 1 is SSL_FILETYPE_PEM. */
        if (strcmp(val, "1") != 0) {
            fprintf(err, "ringcached: -o ssl_keyformat=%s: only 1 (PEM) is supported\n", val);
            return -1;
        }
        return 0;
    }
    if (strlen(val) >= sizeof(s->ssl_chain_cert)) {
        fprintf(err, "ringcached: -o %s: must be 1-%zu bytes\n", name,
                sizeof(s->ssl_chain_cert) - 1);
        return -1;
    }
    strcpy(dst, val);
    return 0;
}

/* -Z against the rest of the command line; 0 or -1 (reported). */
static int
check_ssl(FILE *err, struct settings *s)
{
    if (s->cluster_tls) {
        if (s->state_dir[0] == '\0') {
            fprintf(err, "ringcached: --cluster-tls needs --state-dir (cluster mode)\n");
            return -1;
        }
        if (s->ssl_chain_cert[0] == '\0' || s->ssl_ca_cert[0] == '\0') {
            fprintf(err, "ringcached: --cluster-tls needs -o ssl_chain_cert=<file> (this node's "
                         "certificate) and ssl_ca_cert=<file> (the CA that signs the cluster's "
                         "certificates)\n");
            return -1;
        }
        if (s->ssl_key[0] == '\0') {
            strcpy(s->ssl_key, s->ssl_chain_cert);
        }
    }
    if (!s->ssl_enabled) {
        if (!s->cluster_tls &&
            (s->ssl_chain_cert[0] != '\0' || s->ssl_key[0] != '\0' || s->ssl_ca_cert[0] != '\0')) {
            warn_later("-o ssl_*: TLS is off without -Z or --cluster-tls; ignored");
        }
        return 0;
    }
    if (s->socket_path[0] != '\0') {
        fprintf(err, "ringcached: -Z cannot be used with -s: TLS is served on the TCP client "
                     "port\n");
        return -1;
    }
    if (s->ssl_chain_cert[0] == '\0') {
        fprintf(err, "ringcached: -Z needs -o ssl_chain_cert=<file> (and ssl_key=<file> unless "
                     "the key is in that file)\n");
        return -1;
    }
    if (s->ssl_key[0] == '\0') {
        strcpy(s->ssl_key, s->ssl_chain_cert);
    }
    return 0;
}

/* One sub-option of -o, "name" or "name=value": 0 (accepted, maybe with
 * a warning) or -1 (reported). */
static int
parse_subopt(FILE *err, char *one, struct settings *s)
{
    char  *eq = strchr(one, '=');
    char  *val = NULL;
    size_t i;

    if (eq != NULL) {
        *eq = '\0';
        val = eq + 1;
    }
    for (i = 0; i < sizeof(SUBOPT_REFUSED) / sizeof(SUBOPT_REFUSED[0]); i++) {
        if (strncmp(one, SUBOPT_REFUSED[i].prefix, strlen(SUBOPT_REFUSED[i].prefix)) == 0) {
            fprintf(err, "ringcached: -o %s: %s\n", one, SUBOPT_REFUSED[i].why);
            return -1;
        }
    }
    for (i = 0; i < sizeof(SUBOPTS) / sizeof(SUBOPTS[0]); i++) {
        const struct subopt *so = &SUBOPTS[i];
        char                 opt[80];

        if (strcmp(one, so->name) != 0) {
            continue;
        }
        if (so->arg == ARG_REQUIRED && (val == NULL || *val == '\0')) {
            fprintf(err, "ringcached: -o %s: missing %s argument\n", one, one);
            return -1;
        }
        snprintf(opt, sizeof(opt), "-o %s%s%s", one, so->arg != ARG_NONE && val != NULL ? "=" : "",
                 so->arg != ARG_NONE && val != NULL ? val : "");
        if (so->kind == SUB_IDLE) {
            long v;

            /* memcached takes 0 (off) up to any positive int. */
            if (parse_int(val, 0, INT_MAX, &v) < 0) {
                fprintf(err, "ringcached: -o idle_timeout=%s: must be 0 or more seconds\n", val);
                return -1;
            }
            s->idle_timeout = (int)v;
        } else if (so->kind == SUB_ENGINE) {
            if (strcmp(val, "compact") != 0 && strcmp(val, "classic") != 0) {
                fprintf(err, "ringcached: -o store_engine=%s: must be compact or classic\n", val);
                return -1;
            }
            s->store_classic = strcmp(val, "classic") == 0;
        } else if (so->kind == SUB_THROTTLE && strcmp(one, "copy_throttle_floor") == 0) {
            long v;

            if (parse_int(val, 1, 100000, &v) < 0) {
                fprintf(err, "ringcached: -o copy_throttle_floor=%s: must be 1-100000 (MiB/s)\n",
                        val);
                return -1;
            }
            s->throttle_floor_mib = (uint32_t)v;
        } else if (so->kind == SUB_THROTTLE) {
            if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0) {
                fprintf(err, "ringcached: -o copy_throttle=%s: must be on or off\n", val);
                return -1;
            }
            s->throttle_off = strcmp(val, "off") == 0;
        } else if (so->kind == SUB_SSL) {
            return parse_ssl(err, one, val, s);
        } else if (so->kind == SUB_SLAB) {
            ignored(err, opt, NULL, SLAB_WHY);
        } else if (so->kind == SUB_IGNORE) {
            ignored(err, opt, NULL, so->why);
        }
        return 0;
    }
    fprintf(err, "ringcached: -o %s: illegal suboption \"%s\"\n", one, one);
    return -1;
}

/* -o's comma-separated list, each checked in turn. */
static int
parse_extended(FILE *err, const char *arg, struct settings *s)
{
    char *copy = strdup(arg);
    char *one, *save = NULL;
    int   rc = 0;

    if (copy == NULL) {
        fprintf(err, "ringcached: out of memory\n");
        return -1;
    }
    for (one = strtok_r(copy, ",", &save); one != NULL && rc == 0;
         one = strtok_r(NULL, ",", &save)) {
        rc = parse_subopt(err, one, s);
    }
    free(copy);
    return rc;
}

/* Long-only options (cluster mode). */
enum {
    OPT_ID = 256,
    OPT_STATE_DIR,
    OPT_TOKEN_FILE,
    OPT_CLUSTER,
    OPT_CLUSTER_PORT,
    OPT_CLUSTER_TLS,
    OPT_FORWARD_TIMEOUT,
    OPT_STORE,
    OPT_METRICS,
    OPT_METRICS_AUTH,
    OPT_METRICS_TLS_CERT,
    OPT_METRICS_TLS_KEY,
    OPT_HOTKEYS_SAMPLE,
    OPT_HOTKEYS_DECAY,
    OPT_MAX_OUTPUT,
    OPT_MAX_KEYS,
    OPT_MAX_FRAME,
    OPT_HANDOFF_WINDOW,
    OPT_LOG_FORMAT,
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

/* A size option of the limits (k/m suffix) in [min, max]; 0 or -1
 * (reported, naming the range). */
static int
parse_limit_size(FILE *err, const char *name, const char *val, size_t min, size_t max,
                 const char *range, size_t *out)
{
    size_t v;

    if (settings_parse_size(val, &v) < 0 || v < min || v > max) {
        fprintf(err, "ringcached: --%s %s: must be %s bytes\n", name, val, range);
        settings_usage(err);
        return -1;
    }
    *out = v;
    return 0;
}

/* --metrics: HOST:PORT or [V6]:PORT, port 1-65535. 0 or -1 (reported). */
static int
parse_metrics(FILE *err, const char *val, struct settings *s)
{
    const char *host = val, *colon = strrchr(val, ':');
    size_t      hlen;
    long        v;

    if (colon == NULL) {
        goto bad;
    }
    hlen = (size_t)(colon - val);
    if (val[0] == '[') {
        if (hlen < 3 || val[hlen - 1] != ']') {
            goto bad;
        }
        host = val + 1;
        hlen -= 2;
    } else if (memchr(val, ':', hlen) != NULL) {
        goto bad; /* a v6 literal needs its brackets */
    }
    if (hlen == 0 || hlen >= sizeof(s->metrics_addr) || parse_int(colon + 1, 1, 65535, &v) < 0) {
        goto bad;
    }
    memcpy(s->metrics_addr, host, hlen);
    s->metrics_addr[hlen] = '\0';
    s->metrics_port = (int)v;
    return 0;
bad:
    fprintf(err, "ringcached: --metrics %s: not ADDR:PORT (e.g. 127.0.0.1:9150)\n", val);
    settings_usage(err);
    return -1;
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
        { "cluster-tls", no_argument, NULL, OPT_CLUSTER_TLS },
        { "forward-timeout", required_argument, NULL, OPT_FORWARD_TIMEOUT },
        { "store", required_argument, NULL, OPT_STORE },
        { "metrics", required_argument, NULL, OPT_METRICS },
        { "metrics-auth", required_argument, NULL, OPT_METRICS_AUTH },
        { "metrics-tls-cert", required_argument, NULL, OPT_METRICS_TLS_CERT },
        { "metrics-tls-key", required_argument, NULL, OPT_METRICS_TLS_KEY },
        { "hotkeys-sample", required_argument, NULL, OPT_HOTKEYS_SAMPLE },
        { "hotkeys-decay", required_argument, NULL, OPT_HOTKEYS_DECAY },
        { "max-output-bytes", required_argument, NULL, OPT_MAX_OUTPUT },
        { "max-keys-per-get", required_argument, NULL, OPT_MAX_KEYS },
        { "max-frame-bytes", required_argument, NULL, OPT_MAX_FRAME },
        { "handoff-window", required_argument, NULL, OPT_HANDOFF_WINDOW },
        { "log-format", required_argument, NULL, OPT_LOG_FORMAT },
        /* memcached's long names. */
        { "unix-socket", required_argument, NULL, 's' },
        { "unix-mask", required_argument, NULL, 'a' },
        { "listen-backlog", required_argument, NULL, 'b' },
        { "daemon", no_argument, NULL, 'd' },
        { "pidfile", required_argument, NULL, 'P' },
        { "user", required_argument, NULL, 'u' },
        { "lock-memory", no_argument, NULL, 'k' },
        { "enable-coredumps", no_argument, NULL, 'r' },
        { "protocol", required_argument, NULL, 'B' },
        { "udp-port", required_argument, NULL, 'U' },
        { "max-reqs-per-event", required_argument, NULL, 'R' },
        { "disable-cas", no_argument, NULL, 'C' },
        { "disable-flush-all", no_argument, NULL, 'F' },
        { "disable-dumping", no_argument, NULL, 'X' },
        { "disable-watch", no_argument, NULL, 'W' },
        { "disable-evictions", no_argument, NULL, 'M' },
        { "slab-growth-factor", required_argument, NULL, 'f' },
        { "slab-min-size", required_argument, NULL, 'n' },
        { "enable-largepages", no_argument, NULL, 'L' },
        { "enable-shutdown", no_argument, NULL, 'A' },
        { "enable-sasl", no_argument, NULL, 'S' },
        { "enable-ssl", no_argument, NULL, 'Z' },
        { "auth-file", required_argument, NULL, 'Y' },
        { "memory-file", required_argument, NULL, 'e' },
        { "extended", required_argument, NULL, 'o' },
        { "napi-ids", required_argument, NULL, 'N' },
        { NULL, 0, NULL, 0 },
    };
    double d;
    char  *end;
    long   v;
    int    c;

    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv,
                            ":p:l:t:m:c:I:vhVs:a:b:dP:u:krB:U:R:CFXWMf:n:LAD:SZY:e:o:N:", longopts,
                            NULL)) != -1) {
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
        case OPT_CLUSTER_TLS:
            s->cluster_tls = true;
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
        case OPT_METRICS:
            if (parse_metrics(err, optarg, s) < 0) {
                return -1;
            }
            break;
        case OPT_METRICS_AUTH:
            if (copy_opt(err, "metrics-auth", optarg, s->metrics_auth, sizeof(s->metrics_auth)) <
                0) {
                return -1;
            }
            break;
        case OPT_METRICS_TLS_CERT:
            if (copy_opt(err, "metrics-tls-cert", optarg, s->metrics_tls_cert,
                         sizeof(s->metrics_tls_cert)) < 0) {
                return -1;
            }
            break;
        case OPT_METRICS_TLS_KEY:
            if (copy_opt(err, "metrics-tls-key", optarg, s->metrics_tls_key,
                         sizeof(s->metrics_tls_key)) < 0) {
                return -1;
            }
            break;
        case OPT_HOTKEYS_SAMPLE:
            if (parse_int(optarg, 0, 1000000, &v) < 0) {
                fprintf(err, "ringcached: --hotkeys-sample %s: must be 0 (off) to 1000000\n",
                        optarg);
                settings_usage(err);
                return -1;
            }
            s->hotkeys_sample = (uint32_t)v;
            break;
        case OPT_HOTKEYS_DECAY:
            if (parse_int(optarg, 0, 86400, &v) < 0) {
                fprintf(err, "ringcached: --hotkeys-decay %s: must be 0 (never) to 86400 s\n",
                        optarg);
                settings_usage(err);
                return -1;
            }
            s->hotkeys_decay_s = (uint32_t)v;
            break;
        case OPT_MAX_OUTPUT:
            if (parse_limit_size(err, "max-output-bytes", optarg, OUTPUT_MIN, OUTPUT_LIMIT,
                                 "16k-1024m", &s->max_output_bytes) < 0) {
                return -1;
            }
            break;
        case OPT_MAX_KEYS:
            /* A get line holds at most 4 MiB, so 2 bytes per key at least. */
            if (parse_int(optarg, 0, 2 * 1024 * 1024, &v) < 0) {
                fprintf(err, "ringcached: --max-keys-per-get %s: must be 0-2097152 (0: no limit)\n",
                        optarg);
                settings_usage(err);
                return -1;
            }
            s->max_keys_per_get = (int)v;
            break;
        case OPT_MAX_FRAME:
            if (parse_limit_size(err, "max-frame-bytes", optarg, FRAME_MIN, FRAME_LIMIT, "512k-8m",
                                 &s->max_frame_bytes) < 0) {
                return -1;
            }
            break;
        case OPT_HANDOFF_WINDOW:
            if (parse_int(optarg, 1, 1024, &v) < 0) {
                fprintf(err, "ringcached: --handoff-window %s: must be 1-1024 batches\n", optarg);
                settings_usage(err);
                return -1;
            }
            s->handoff_window = (int)v;
            break;
        case OPT_LOG_FORMAT: {
            enum log_format f;

            if (log_parse_format(optarg, &f) < 0) {
                fprintf(err, "ringcached: --log-format %s: must be text, logfmt or json\n", optarg);
                settings_usage(err);
                return -1;
            }
            s->log_format = (int)f;
            break;
        }
        case 's':
            if (optarg[0] == '\0' || strlen(optarg) >= sizeof(s->socket_path)) {
                return bad_value(err, 's', optarg, "a unix socket path is 1-107 bytes");
            }
            strcpy(s->socket_path, optarg);
            break;
        case 'a':
            errno = 0;
            v = strtol(optarg, &end, 8);
            if (errno != 0 || end == optarg || *end != '\0' || v < 0 || v > 0777) {
                return bad_value(err, 'a', optarg, "not an octal mode (0-777)");
            }
            s->socket_mask = (int)v;
            break;
        case 'b':
            if (parse_int(optarg, 1, INT_MAX, &v) < 0) {
                return bad_value(err, 'b', optarg, "the backlog must be 1 or more");
            }
            s->backlog = (int)v;
            break;
        case 'd':
            s->daemonize = true;
            break;
        case 'P':
            if (optarg[0] == '\0' || strlen(optarg) >= sizeof(s->pid_file)) {
                return bad_value(err, 'P', optarg, "a pid file path is 1-1023 bytes");
            }
            strcpy(s->pid_file, optarg);
            break;
        case 'u':
            if (optarg[0] == '\0' || strlen(optarg) >= sizeof(s->user)) {
                return bad_value(err, 'u', optarg, "not a user name");
            }
            strcpy(s->user, optarg);
            break;
        case 'k':
            s->lock_memory = true;
            break;
        case 'r':
            s->core_dumps = true;
            break;
        case 'B':
            if (strcmp(optarg, "ascii") == 0) {
                break;
            }
            if (strcmp(optarg, "binary") == 0 || strcmp(optarg, "auto") == 0) {
                fprintf(err,
                        "ringcached: -B %s: the binary protocol is not supported; "
                        "only -B ascii\n",
                        optarg);
                return -1;
            }
            return bad_value(err, 'B', optarg, "should be one of auto, binary, or ascii");
        case 'U':
            if (parse_int(optarg, 0, 65535, &v) < 0) {
                return bad_value(err, 'U', optarg, "not a port number (0-65535)");
            }
            if (v != 0) {
                fprintf(err, "ringcached: -U %s: UDP is not supported; only -U 0 (off)\n", optarg);
                return -1;
            }
            break;
        case 'R':
            if (parse_int(optarg, 1, INT_MAX, &v) < 0) {
                return bad_value(err, 'R', optarg, "requests per event must be 1 or more");
            }
            s->reqs_per_event = (int)v;
            ignored(err, "-R", optarg,
                    "requests are not counted per event: a connection yields after 16 "
                    "full reads");
            break;
        case 'C':
            ignored(err, "-C", NULL,
                    "CAS cannot be disabled: every item keeps its CAS unique (gets shows "
                    "it, cas checks it)");
            break;
        case 'X':
            s->dump_disabled = true;
            break;
        case 'W':
            /* Nothing to disable: there is no watch command. */
            break;
        case 'f':
            errno = 0;
            d = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(d > 1.0)) {
                return bad_value(err, 'f', optarg, "the factor must be greater than 1");
            }
            ignored(err, "-f", optarg, SLAB_WHY);
            break;
        case 'n':
            if (parse_int(optarg, 1, INT_MAX, &v) < 0) {
                return bad_value(err, 'n', optarg, "the chunk size must be greater than 0");
            }
            ignored(err, "-n", optarg, SLAB_WHY);
            break;
        case 'L':
            ignored(err, "-L", NULL, SLAB_WHY);
            break;
        case 'A':
            s->shutdown_enabled = true;
            break;
        case 'D':
            /* memcached takes the first character and turns detail on. */
            if (optarg[0] == '\0') {
                return bad_value(err, 'D', optarg, "a delimiter is one character");
            }
            s->prefix_delimiter = optarg[0];
            s->detail_at_start = true;
            break;
        case 'N':
            ignored(err, "-N", optarg, "NAPI ID thread selection does not apply");
            break;
        case 'F':
            s->flush_disabled = true;
            break;
        case 'M':
            return refuse(err, "-M",
                          "not supported: a full cache always evicts its least recently "
                          "used items");
        case 'S':
            return refuse(err, "-S", "SASL is not supported (it needs the binary protocol)");
        case 'Y':
            if (copy_opt(err, "auth-file", optarg, s->auth_file, sizeof(s->auth_file)) < 0) {
                return -1;
            }
            break;
        case 'Z':
            s->ssl_enabled = true;
            break;
        case 'e':
            return refuse(err, "-e", "a restartable cache (memory file) is not supported yet");
        case 'o':
            if (parse_extended(err, optarg, s) < 0) {
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
    if (s->metrics_auth[0] != '\0' && s->metrics_addr[0] == '\0') {
        fprintf(err, "ringcached: --metrics-auth needs --metrics ADDR:PORT\n");
        return -1;
    }
    if ((s->metrics_tls_cert[0] != '\0' || s->metrics_tls_key[0] != '\0') &&
        (s->metrics_addr[0] == '\0' || s->metrics_tls_cert[0] == '\0')) {
        fprintf(err, "ringcached: --metrics-tls-cert (and --metrics-tls-key) need --metrics "
                     "ADDR:PORT, and --metrics-tls-key needs --metrics-tls-cert\n");
        return -1;
    }
    if (s->auth_file[0] != '\0' && s->state_dir[0] != '\0' && s->token_file[0] == '\0') {
        fprintf(err, "ringcached: -Y with --state-dir needs --token-file: peers log in to "
                     "each other's client port with the token's rc_peer proof\n");
        return -1;
    }
    if (s->socket_path[0] != '\0' && s->state_dir[0] != '\0') {
        fprintf(err, "ringcached: -s cannot be used with --state-dir: peers and clients reach a "
                     "cluster node at its TCP address\n");
        return -1;
    }
    if (check_ssl(err, s) < 0) {
        return -1;
    }
    if (s->item_size_max > s->maxbytes / 2) {
        fprintf(err, "ringcached: -I %zu: cannot exceed half of -m\n", s->item_size_max);
        settings_usage(err);
        return -1;
    }
    return 0;
}
