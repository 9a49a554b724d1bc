/*
 * settings: ringcached's command-line options, named and defaulted as
 * memcached 1.6's (-p -l -t -m -c -I -v, -s -a -u -P -d ...; the slab
 * tuning ones are accepted and ignored). Parsed once in main, read-only
 * after.
 */
#ifndef SERVER_SETTINGS_H
#define SERVER_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SETTINGS_SOCKET_PATH_MAX 108 /* sizeof(sockaddr_un.sun_path) */

/* Defaults of the limits (docs/operations.md, "Limits"). */
#define SETTINGS_MAX_OUTPUT_DEFAULT  (1u << 20) /* --max-output-bytes */
#define SETTINGS_MAX_KEYS_DEFAULT    100000     /* --max-keys-per-get */
#define SETTINGS_MAX_FRAME_DEFAULT   (4u << 20) /* --max-frame-bytes */
#define SETTINGS_HANDOFF_WIN_DEFAULT 8          /* --handoff-window */
#define SETTINGS_THROTTLE_FLOOR_DEFAULT 8       /* -o copy_throttle_floor, MiB/s */

struct settings {
    int    port;            /* -p, TCP port (0 = any free port) */
    char   listen_addr[64]; /* -l, IPv4 or IPv6 literal or host name */
    int    num_threads;     /* -t, worker threads */
    size_t maxbytes;        /* -m, in bytes (the flag is MiB) */
    int    maxconns;        /* -c */
    size_t item_size_max;   /* -I, bytes; the flag accepts k/m suffixes */
    int    verbose;         /* -v count */
    int    log_format;      /* --log-format: enum log_format (server/log.h) */
    /* Cluster mode (docs/cluster.md); state_dir "" = plain single-node cache. */
    char node_id[65];        /* --id */
    char state_dir[1024];    /* --state-dir */
    char token_file[1024];   /* --token-file */
    char cluster_name[128];  /* --cluster (default "ringcache") */
    int  cluster_port;       /* --cluster-port; 0 = client port + 10000 */
    int  forward_timeout_ms; /* --forward-timeout: forwards and replica acks */
    char store[2048];        /* --store: the membership store the node watches ("" none) */
    /* --metrics ADDR:PORT: Prometheus /metrics over HTTP (server/metrics.h). */
    char metrics_addr[64]; /* "" = off; brackets of a v6 literal removed */
    int  metrics_port;
    char metrics_auth[1024]; /* --metrics-auth: user:password lines (-Y's format); "" none */
    /* --metrics-tls-cert, --metrics-tls-key: HTTPS on the metrics port (PEM
     * chain, and its key; "" key: in the chain file); "" cert: plain HTTP. */
    char metrics_tls_cert[1024], metrics_tls_key[1024];
    /* memcached's process options (main.c applies them). */
    char socket_path[SETTINGS_SOCKET_PATH_MAX]; /* -s: a unix socket instead of TCP ("" none) */
    int  socket_mask;                           /* -a: its permissions (default 0700) */
    int  backlog;                               /* -b: listen backlog (default 1024) */
    int  reqs_per_event;                        /* -R: accepted, not applied (default 20) */
    bool daemonize;                             /* -d */
    char pid_file[1024];                        /* -P ("" none) */
    char user[256];                             /* -u: drop to this user when root ("" none) */
    bool lock_memory;                           /* -k: mlockall */
    bool core_dumps;                            /* -r: raise the core file limit */
    bool flush_disabled;                        /* -F: flush_all is refused */
    bool shutdown_enabled;                      /* -A: the shutdown command stops the node */
    bool dump_disabled;                         /* -X: lru_crawler metadump is refused */
    char prefix_delimiter;                      /* -D: stats detail's (default ':'); turns it on */
    bool detail_at_start;                       /* -D given */
    char auth_file[1024]; /* -Y: users who must log in (server/authfile.h; "" none) */
    /* Hot keys (server/hotkeys.h): sample 1 keyed request in hotkeys_sample
     * (0: off), counts halved every hotkeys_decay_s seconds (0: never). */
    uint32_t hotkeys_sample;
    uint32_t hotkeys_decay_s;
    /* Limits (docs/operations.md, "Limits"). */
    int    idle_timeout;     /* -o idle_timeout: seconds, 0 = off */
    bool   store_classic;    /* -o store_engine=classic: the chained table, not the compact engine */
    size_t max_output_bytes; /* --max-output-bytes: replies queued per client */
    int    max_keys_per_get; /* --max-keys-per-get: 0 = no limit */
    size_t max_frame_bytes;  /* --max-frame-bytes: cluster port payload */
    int    handoff_window;   /* --handoff-window: batches in flight per stream */
    /* -o copy_throttle=off: a copy's rate is StartCopy's alone, not the
     * adaptive throttle's (server/throttle.h); -o copy_throttle_floor: the
     * rate it never cuts under, MiB/s. */
    bool     throttle_off;
    uint32_t throttle_floor_mib;
    /* TLS on the client port (server/tls.h): memcached's -Z and -o ssl_*. */
    bool ssl_enabled;          /* -Z */
    char ssl_chain_cert[1024]; /* certificate chain, PEM */
    char ssl_key[1024];        /* private key, PEM (the chain file when not given) */
    char ssl_ca_cert[1024];    /* CAs that client certificates must chain to ("" none) */
    char ssl_ciphers[1024];    /* TLS 1.2 cipher list ("" OpenSSL's default) */
    int  ssl_verify_mode;      /* 0 none, 1 request, 2 require, 3 once (memcached's) */
    int  ssl_min_version;      /* 0 tlsv1.0, 1 tlsv1.1, 2 tlsv1.2 (default), 3 tlsv1.3 */
    bool ssl_session_cache;    /* server-side session cache (resumption) */
    /* --cluster-tls: mutual TLS on the cluster port and every link to one,
     * with the files above (server/peer_tls.h). */
    bool cluster_tls;
};

/* Fill in the defaults (port 11211, 127.0.0.1, 4 threads, 64 MiB, 1024
 * connections, 1 MiB items, quiet; the limits' SETTINGS_*_DEFAULT). */
void settings_init(struct settings *s);

/*
 * Parse argv into s (which settings_init filled). Returns 0 to run, 1 when
 * --help or --version was printed to out (exit 0), -1 after printing an
 * error and the usage to err (exit 2).
 */
int settings_parse(struct settings *s, int argc, char **argv, FILE *out, FILE *err);

/* Log, through log_msg (LOG_WARN), the warnings the last settings_parse
 * found (memcached options ignored, ...), then forget them. Call once the
 * logger's format is set. */
void settings_log_warnings(void);

/* Parse a size such as "1048576", "1024k" or "1m" (k and m are powers of
 * 1024, either case). Returns 0, or -1 if it is not such a number. */
int settings_parse_size(const char *str, size_t *out);

/* Print the usage text. */
void settings_usage(FILE *f);

#endif /* SERVER_SETTINGS_H */
