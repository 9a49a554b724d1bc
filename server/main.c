/*
 * ringcached: a memcached-compatible cache node. main parses the flags,
 * builds the server (store, workers), listens, and runs until SIGTERM or
 * SIGINT; exit 0 after a clean stop, 1 on a start-up failure, 2 on a bad
 * command line. memcached's process options live here too: -d (the parent
 * exits once the child listens), -P, -u (dropped after binding), -k, -r.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/authfile.h"
#include "server/cluster.h"
#include "server/cport.h"
#include "server/log.h"
#include "server/metrics.h"
#include "server/peer_tls.h"
#include "server/proto_admin.h"
#include "server/settings.h"
#include "server/thread.h"

/* -u: whom to become once the sockets are bound. */
struct run_as {
    bool  drop; /* started as root with -u */
    uid_t uid;
    gid_t gid;
};

/* Tokens shipped as examples or typed as placeholders: never a real one
 * (compared without case; deploy/kubernetes/config.yaml's is the first). */
static const char *const PLACEHOLDER_TOKENS[] = {
    "replace-me: see the comment above",
    "replace-me",
    "replaceme",
    "changeme",
    "change-me",
    "change_me",
    "secret",
    "password",
    "token",
    "placeholder",
    "example",
    "your-token-here",
};

#define TOKEN_MIN 16 /* bytes: below this a token is refused */

/* Why a token must not be used (NULL: it may): a known placeholder, one
 * starting as one, one byte repeated, or shorter than TOKEN_MIN. */
static const char *
token_refused(const char *tok, size_t len)
{
    size_t i;

    for (i = 0; i < sizeof(PLACEHOLDER_TOKENS) / sizeof(PLACEHOLDER_TOKENS[0]); i++) {
        const char *p = PLACEHOLDER_TOKENS[i];

        if (strncasecmp(tok, p, strlen(p)) == 0 &&
            (len == strlen(p) || strncasecmp(p, "replace", 7) == 0 ||
             strncasecmp(p, "change", 6) == 0)) {
            return "a placeholder, not a secret: make one with "
                   "`head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`";
        }
    }
    if (len < TOKEN_MIN) {
        return "shorter than 16 bytes: make one with "
               "`head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`";
    }
    for (i = 1; i < len && tok[i] == tok[0]; i++) {
        continue;
    }
    return i == len ? "one byte repeated, not a secret" : NULL;
}

/* The admin token: the first line of the file, 16-256 bytes, not a
 * placeholder. 0 or -1 (logged). */
static int
read_token(const char *path, uint8_t *tok, size_t *len)
{
    char        line[CLUSTER_TOKEN_MAX + 3];
    FILE       *f = fopen(path, "r");
    const char *why;
    size_t      n;

    if (f == NULL) {
        log_msg(LOG_ERR, "--token-file %s: %s", path, strerror(errno));
        return -1;
    }
    if (fgets(line, sizeof(line), f) == NULL) {
        line[0] = '\0';
    }
    fclose(f);
    n = strcspn(line, "\r\n");
    if (n == 0 || n > CLUSTER_TOKEN_MAX) {
        log_msg(LOG_ERR, "%s:1: the token must be %d-%d bytes on the first line", path, TOKEN_MIN,
                CLUSTER_TOKEN_MAX);
        return -1;
    }
    line[n] = '\0';
    why = token_refused(line, n);
    if (why != NULL) {
        log_msg(LOG_ERR, "%s:1: the token is refused: %s", path, why);
        return -1;
    }
    memcpy(tok, line, n);
    *len = n;
    return 0;
}

/* Is addr (-l) a loopback address only (127.0.0.0/8, ::1, localhost)? A
 * wildcard or any other name or address reaches beyond the host. */
static bool
loopback_only(const char *addr)
{
    struct in_addr  v4;
    struct in6_addr v6;

    if (strcmp(addr, "localhost") == 0) {
        return true;
    }
    if (inet_pton(AF_INET, addr, &v4) == 1) {
        return (ntohl(v4.s_addr) >> 24) == 127;
    }
    return inet_pton(AF_INET6, addr, &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

/* The cluster's grace period before it frees an old view: every worker
 * passed its event loop once (server_barrier). */
static int
worker_barrier(void *arg)
{
    return server_barrier(arg);
}

/* Cluster mode: load the state directory, start the cluster port. */
static int
start_cluster(struct server *srv, const struct settings *st, struct cport **cp)
{
    uint8_t tok[CLUSTER_TOKEN_MAX];
    size_t  tok_len = 0;
    char    err[1400];
    int     port;

    if (st->token_file[0] != '\0' && read_token(st->token_file, tok, &tok_len) < 0) {
        return -1;
    }
    if (cluster_new(worker_barrier, srv, st->node_id, st->state_dir, st->cluster_name,
                    st->token_file[0] != '\0' ? tok : NULL, tok_len, &srv->cluster, err,
                    sizeof(err)) < 0) {
        log_msg(LOG_ERR, "%s", err);
        return -1;
    }
    /* TLS between nodes: the cluster port (--cluster-tls) and relays to
     * peers' client ports (-Z), with the node's own files. */
    if (st->cluster_tls || st->ssl_enabled) {
        struct peer_tls *t = peer_tls_new(st->ssl_chain_cert, st->ssl_key, st->ssl_ca_cert,
                                          st->cluster_tls, st->ssl_enabled, err, sizeof(err));

        if (t == NULL) {
            log_msg(LOG_ERR, "%s", err);
            return -1;
        }
        cluster_set_peer_tls(srv->cluster, t);
    }
    port = st->cluster_port != 0 ? st->cluster_port : srv->bound_port + CLUSTER_PORT_OFFSET;
    if (port > 65535) {
        log_msg(LOG_ERR,
                "cluster port %d (client port + %d) is over 65535: give "
                "--cluster-port",
                port, CLUSTER_PORT_OFFSET);
        return -1;
    }
    if (!st->cluster_tls && !loopback_only(st->listen_addr)) {
        log_msg(LOG_WARN,
                "the cluster port %s:%d listens beyond loopback without --cluster-tls: the "
                "admin token, handoffs and heartbeats cross the network in clear "
                "(docs/security.md, \"TLS between nodes\")",
                st->listen_addr, port);
    }
    *cp = cport_new(srv, srv->cluster, st->listen_addr, port);
    if (*cp == NULL) {
        return -1;
    }
    if (st->store[0] != '\0' && cport_watch_store(*cp, st->store, err, sizeof(err)) < 0) {
        log_msg(LOG_ERR, "--store %s: %s", st->store, err);
        return -1;
    }
    if (cport_start(*cp) < 0) {
        return -1;
    }
    return 0;
}

/*
 * -u as memcached: only a process started as root changes user, and as
 * root -d needs -u (memcached asks it of every start as root; ringcached
 * keeps running in the foreground as root without it, as its tests and
 * scripts do). 0, -1 (logged: no such user) or -2 (usage).
 */
static int
resolve_user(const struct settings *st, struct run_as *ra)
{
    struct passwd *pw;

    memset(ra, 0, sizeof(*ra));
    if (getuid() != 0 && geteuid() != 0) {
        return 0;
    }
    if (st->user[0] == '\0') {
        if (st->daemonize) {
            log_msg(LOG_ERR, "can't run as root without the -u switch");
            return -2;
        }
        return 0;
    }
    pw = getpwnam(st->user);
    if (pw == NULL) {
        log_msg(LOG_ERR, "can't find the user %s to switch to", st->user);
        return -1;
    }
    ra->drop = true;
    ra->uid = pw->pw_uid;
    ra->gid = pw->pw_gid;
    return 0;
}

/* Become the -u user: the files made as root first pass to it (memcached
 * creates them after its switch), then groups, gid, uid. The state
 * directory must be writable by it. 0 or -1 (logged). */
static int
drop_privileges(const struct settings *st, const struct run_as *ra)
{
    const char *files[2] = { st->pid_file, st->socket_path };
    int         i;

    if (!ra->drop) {
        return 0;
    }
    for (i = 0; i < 2; i++) {
        if (files[i][0] != '\0' && chown(files[i], ra->uid, ra->gid) < 0) {
            log_msg(LOG_ERR, "-u %s: cannot give %s to the user: %s", st->user, files[i],
                    strerror(errno));
            return -1;
        }
    }
    if (initgroups(st->user, ra->gid) < 0 || setgid(ra->gid) < 0 || setuid(ra->uid) < 0) {
        log_msg(LOG_ERR, "failed to assume identity of user %s: %s", st->user, strerror(errno));
        return -1;
    }
    if (ra->uid != 0 && setuid(0) == 0) {
        log_msg(LOG_ERR, "-u %s: root could be regained; stopping", st->user);
        return -1;
    }
    /* A change of user makes the process undumpable; -r asked for cores. */
    if (st->core_dumps) {
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    }
    if (st->state_dir[0] != '\0' && access(st->state_dir, W_OK | X_OK) < 0) {
        log_msg(LOG_ERR, "--state-dir %s: not writable by user %s: %s", st->state_dir, st->user,
                strerror(errno));
        return -1;
    }
    return 0;
}

/* -r, as memcached: unlimited core files, or at least the hard limit;
 * a soft limit of 0 is a failure. 0 or -1 (logged). */
static int
raise_core_limit(void)
{
    struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };

    if (setrlimit(RLIMIT_CORE, &rl) < 0 && getrlimit(RLIMIT_CORE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_CORE, &rl);
    }
    if (getrlimit(RLIMIT_CORE, &rl) < 0 || rl.rlim_cur == 0) {
        log_msg(LOG_ERR, "-r: failed to ensure corefile creation");
        return -1;
    }
    return 0;
}

/* A relative path made absolute in place (a daemon works from /).
 * 0, or -1 when the result does not fit (reported). */
static int
make_absolute(char *path, size_t size, const char *opt)
{
    char   cwd[PATH_MAX], buf[PATH_MAX + 1024];
    size_t n;

    if (path[0] == '\0' || path[0] == '/') {
        return 0;
    }
    if (getcwd(cwd, sizeof(cwd)) == NULL) {
        log_msg(LOG_ERR, "%s %s: cannot read the current directory: %s", opt, path,
                strerror(errno));
        return -1;
    }
    n = (size_t)snprintf(buf, sizeof(buf), "%s/%s", cwd, path);
    if (n >= size || n >= sizeof(buf)) {
        log_msg(LOG_ERR, "%s %s: its absolute path is too long", opt, path);
        return -1;
    }
    memcpy(path, buf, n + 1);
    return 0;
}

/* With -d, every path the node still uses after start-up (the -Z files
 * are read after the fork, and again by refresh_certs; the -Y file again
 * at SIGHUP). 0 or -1. */
static int
absolute_paths(struct settings *st)
{
    if (make_absolute(st->pid_file, sizeof(st->pid_file), "-P") < 0 ||
        make_absolute(st->socket_path, sizeof(st->socket_path), "-s") < 0 ||
        make_absolute(st->state_dir, sizeof(st->state_dir), "--state-dir") < 0 ||
        make_absolute(st->auth_file, sizeof(st->auth_file), "-Y") < 0 ||
        make_absolute(st->metrics_auth, sizeof(st->metrics_auth), "--metrics-auth") < 0 ||
        make_absolute(st->metrics_tls_cert, sizeof(st->metrics_tls_cert), "--metrics-tls-cert") <
            0 ||
        make_absolute(st->metrics_tls_key, sizeof(st->metrics_tls_key), "--metrics-tls-key") < 0 ||
        make_absolute(st->ssl_chain_cert, sizeof(st->ssl_chain_cert), "-o ssl_chain_cert") < 0 ||
        make_absolute(st->ssl_key, sizeof(st->ssl_key), "-o ssl_key") < 0 ||
        make_absolute(st->ssl_ca_cert, sizeof(st->ssl_ca_cert), "-o ssl_ca_cert") < 0) {
        return -1;
    }
    if (strstr(st->store, "://") == NULL &&
        make_absolute(st->store, sizeof(st->store), "--store") < 0) {
        return -1;
    }
    return 0;
}

/*
 * -d, first half: fork before any thread exists. The parent waits on a
 * pipe: one byte means the child is listening (exit 0); end of file means
 * it failed, after printing why on the stderr they share (exit with its
 * status). The child starts its own session. Returns the pipe's write end
 * in the child, -1 (logged) if fork failed; the parent never returns.
 */
static int
daemon_fork(void)
{
    pid_t   pid, rc;
    int     p[2], status = 0;
    ssize_t n;
    char    b;

    if (pipe2(p, O_CLOEXEC) < 0) {
        log_msg(LOG_ERR, "-d: pipe: %s", strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid < 0) {
        log_msg(LOG_ERR, "-d: fork: %s", strerror(errno));
        return -1;
    }
    if (pid > 0) {
        close(p[1]);
        do {
            n = read(p[0], &b, 1);
        } while (n < 0 && errno == EINTR);
        if (n == 1) {
            _exit(0);
        }
        while ((rc = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
            continue;
        }
        _exit(rc == pid && WIFEXITED(status) && WEXITSTATUS(status) != 0 ? WEXITSTATUS(status) : 1);
    }
    close(p[0]);
    if (setsid() < 0) {
        log_msg(LOG_ERR, "-d: setsid: %s", strerror(errno));
        close(p[1]);
        return -1;
    }
    return p[1];
}

/* -d, second half, once listening: leave the directory (unless -r, as
 * memcached), put stdio on /dev/null (unless -v, as memcached), then let
 * the parent go. 0 or -1 (logged). */
static int
daemon_ready(const struct settings *st, int ready_fd)
{
    int fd;

    if (!st->core_dumps && chdir("/") < 0) {
        log_msg(LOG_ERR, "-d: chdir /: %s", strerror(errno));
        return -1;
    }
    if (st->verbose == 0) {
        fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd < 0 || dup2(fd, STDIN_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0 ||
            dup2(fd, STDERR_FILENO) < 0) {
            log_msg(LOG_ERR, "-d: /dev/null: %s", strerror(errno));
            return -1;
        }
        close(fd);
    }
    if (write(ready_fd, "r", 1) != 1) {
        return -1;
    }
    close(ready_fd);
    return 0;
}

/* -P: the pid, written to FILE.tmp and renamed over FILE so a reader never
 * sees it half written (memcached's way, and its warning when the old file
 * names a live process). 0 or -1 (logged). */
static int
write_pid_file(const char *path)
{
    char  tmp[1040];
    FILE *f;
    long  old;

    f = fopen(path, "r");
    if (f != NULL) {
        if (fscanf(f, "%ld", &old) == 1 && old > 0 && old != (long)getpid() &&
            kill((pid_t)old, 0) == 0) {
            log_msg(LOG_WARN, "the pid file %s contained the running pid %ld", path, old);
        }
        fclose(f);
    }
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (f == NULL) {
        log_msg(LOG_ERR, "cannot write the pid file %s: %s", tmp, strerror(errno));
        return -1;
    }
    fprintf(f, "%ld\n", (long)getpid());
    if (fclose(f) != 0 || rename(tmp, path) < 0) {
        log_msg(LOG_ERR, "cannot write the pid file %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    struct settings  settings;
    struct run_as    run_as;
    struct server   *srv = NULL;
    struct cport    *cp = NULL;
    struct metrics  *metrics = NULL;
    struct authfile *auth = NULL, *metrics_auth = NULL;
    bool             pid_written = false, listening = false;
    int              rc, ready_fd = -1;

    settings_init(&settings);
    rc = settings_parse(&settings, argc, argv, stdout, stderr);
    /* The logger first: even the parser's warnings go through it. */
    log_set_format((enum log_format)settings.log_format);
    log_set_node(settings.node_id);
    log_set_level(settings.verbose);
    settings_log_warnings();
    if (rc != 0) {
        return rc > 0 ? 0 : 2;
    }
    if (settings.daemonize && absolute_paths(&settings) < 0) {
        return 2;
    }
    rc = resolve_user(&settings, &run_as);
    if (rc < 0) {
        return rc == -2 ? 2 : 1;
    }
    if (settings.core_dumps && raise_core_limit() < 0) {
        return 1;
    }
    if (settings.daemonize && (ready_fd = daemon_fork()) < 0) {
        return 1;
    }
    /* After the fork: memory locks are not inherited. */
    if (settings.lock_memory && mlockall(MCL_CURRENT | MCL_FUTURE) < 0) {
        log_msg(LOG_WARN, "-k: mlockall failed: %s", strerror(errno));
    }
    /* -D: stats detail from the start, as memcached. */
    proto_admin_detail_set(settings.detail_at_start);
    /* A client that hangs up mid-reply must not kill the node. */
    signal(SIGPIPE, SIG_IGN);
    /* Read before -u drops privileges and -d leaves the directory (a
     * SIGHUP re-reads it as the node's user: proto_auth_reload). */
    if (settings.auth_file[0] != '\0') {
        char err[AUTHFILE_ERR_MAX];

        auth = authfile_load(settings.auth_file, err, sizeof(err));
        if (auth == NULL) {
            log_msg(LOG_ERR, "-Y: %s", err);
            return 1;
        }
    }
    if (settings.metrics_auth[0] != '\0') {
        char err[AUTHFILE_ERR_MAX];

        metrics_auth = authfile_load(settings.metrics_auth, err, sizeof(err));
        if (metrics_auth == NULL) {
            log_msg(LOG_ERR, "--metrics-auth: %s", err);
            authfile_free(auth);
            return 1;
        }
    }

    rc = 1;
    srv = server_new(&settings);
    if (srv == NULL) {
        goto out;
    }
    srv->auth = auth;
    if (server_listen(srv) < 0) {
        goto out;
    }
    listening = true;
    if (settings.state_dir[0] != '\0' && start_cluster(srv, &settings, &cp) < 0) {
        goto out;
    }
    /* After the cluster: a scrape reads srv->cluster. */
    if (settings.metrics_addr[0] != '\0' &&
        (metrics = metrics_start(srv, settings.metrics_addr, settings.metrics_port, metrics_auth,
                                 settings.metrics_tls_cert, settings.metrics_tls_key)) == NULL) {
        goto out;
    }
    srv->metrics = metrics; /* refresh_certs reloads its certificate too */
    if (settings.pid_file[0] != '\0') {
        if (write_pid_file(settings.pid_file) < 0) {
            goto out;
        }
        pid_written = true;
    }
    if (drop_privileges(&settings, &run_as) < 0) {
        goto out;
    }
    if (ready_fd >= 0 && daemon_ready(&settings, ready_fd) < 0) {
        goto out;
    }
    rc = server_run(srv) == 0 ? 0 : 1;
out:
    /* The metrics thread reads the cluster and the server: stop it first. */
    if (srv != NULL) {
        srv->metrics = NULL;
    }
    metrics_free(metrics);
    /* Workers are joined: stop the cluster thread, then free its state. */
    cport_free(cp);
    if (srv != NULL) {
        cluster_free(srv->cluster);
        srv->cluster = NULL;
    }
    server_free(srv);
    authfile_free(auth);
    authfile_free(metrics_auth);
    if (pid_written && unlink(settings.pid_file) < 0) {
        log_msg(LOG_ERR, "cannot remove the pid file %s: %s", settings.pid_file, strerror(errno));
    }
    if (listening && settings.socket_path[0] != '\0') {
        unlink(settings.socket_path);
    }
    return rc;
}
