/*
 * ringcached: a memcached-compatible cache node. main parses the flags,
 * builds the server (store, workers), listens, and runs until SIGTERM or
 * SIGINT; exit 0 after a clean stop, 1 on a start-up failure, 2 on a bad
 * command line.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "server/log.h"
#include "server/settings.h"
#include "server/thread.h"

int
main(int argc, char **argv)
{
    struct settings settings;
    struct server *srv;
    int rc;

    settings_init(&settings);
    rc = settings_parse(&settings, argc, argv, stdout, stderr);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    log_set_level(settings.verbose);
    /* A client that hangs up mid-reply must not kill the node. */
    signal(SIGPIPE, SIG_IGN);

    srv = server_new(&settings);
    if (srv == NULL)
        return 1;
    if (server_listen(srv) < 0) {
        server_free(srv);
        return 1;
    }
    rc = server_run(srv);
    server_free(srv);
    return rc == 0 ? 0 : 1;
}
