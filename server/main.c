/*
 * ringcached: a memcached-compatible cache node. main parses the flags,
 * builds the server (store, workers), listens, and runs until SIGTERM or
 * SIGINT; exit 0 after a clean stop, 1 on a start-up failure, 2 on a bad
 * command line.
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/cluster.h"
#include "server/cport.h"
#include "server/log.h"
#include "server/settings.h"
#include "server/thread.h"

/* The admin token: the first line of the file, 1-256 bytes. 0 or -1. */
static int
read_token(const char *path, uint8_t *tok, size_t *len)
{
    char   line[CLUSTER_TOKEN_MAX + 3];
    FILE  *f = fopen(path, "r");
    size_t n;

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
        log_msg(LOG_ERR, "%s:1: the token must be 1-%d bytes on the first line", path,
                CLUSTER_TOKEN_MAX);
        return -1;
    }
    memcpy(tok, line, n);
    *len = n;
    return 0;
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
    port = st->cluster_port != 0 ? st->cluster_port : srv->bound_port + CLUSTER_PORT_OFFSET;
    if (port > 65535) {
        log_msg(LOG_ERR,
                "cluster port %d (client port + %d) is over 65535: give "
                "--cluster-port",
                port, CLUSTER_PORT_OFFSET);
        return -1;
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

int
main(int argc, char **argv)
{
    struct settings settings;
    struct server  *srv;
    struct cport   *cp = NULL;
    int             rc;

    settings_init(&settings);
    rc = settings_parse(&settings, argc, argv, stdout, stderr);
    if (rc != 0) {
        return rc > 0 ? 0 : 2;
    }
    log_set_level(settings.verbose);
    /* A client that hangs up mid-reply must not kill the node. */
    signal(SIGPIPE, SIG_IGN);

    srv = server_new(&settings);
    if (srv == NULL) {
        return 1;
    }
    if (server_listen(srv) < 0) {
        server_free(srv);
        return 1;
    }
    if (settings.state_dir[0] != '\0' && start_cluster(srv, &settings, &cp) < 0) {
        cport_free(cp);
        cluster_free(srv->cluster);
        srv->cluster = NULL;
        server_free(srv);
        return 1;
    }
    rc = server_run(srv);
    /* Workers are joined: stop the cluster thread, then free its state. */
    cport_free(cp);
    cluster_free(srv->cluster);
    srv->cluster = NULL;
    server_free(srv);
    return rc == 0 ? 0 : 1;
}
