/*
 * ctl: ringctl's subcommands. ringctl.c parses the global options and
 * dispatches; each subcommand parses the rest of argv itself and returns
 * the process exit status (0 ok, 1 operation failed, 2 bad usage/input).
 * The helpers they share are in ctl_util.h.
 */
#ifndef CLIENT_CTL_H
#define CLIENT_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct ctl_globals {
    const char *members;    /* --members FILE given before the subcommand */
    const char *token_file; /* --token-file FILE */
    const char *store;      /* --store DIR|etcd://... */
    bool        human;      /* --human: aligned columns instead of TSV */
    int         timeout_ms; /* --timeout MS */
    const char *cluster;    /* --cluster NAME (default "ringcache") */
    const char *seeds;      /* --seeds HOST:PORT,...: data commands learn the membership */
    /* Data commands over TLS (--tls, or any --tls-* option): the nodes run
     * with -Z (ringcache_options' tls fields). */
    bool        tls, tls_skip_name_check;
    bool        cluster_tls; /* --cluster-tls: the cluster port too, with the same files */
    const char *tls_ca, *tls_cert, *tls_key;
    /* Data commands log in (nodes started with -Y): --auth-user, and the
     * password from the first line of --auth-password-file. */
    const char *auth_user, *auth_password_file;
};

/* Ring subcommands (ctl_ring.c). */
int ctl_locate(struct ctl_globals *g, int argc, char **argv);
int ctl_ring(struct ctl_globals *g, int argc, char **argv);
int ctl_plan(struct ctl_globals *g, int argc, char **argv);

/* Data subcommands (ctl_data.c). */
int ctl_get(struct ctl_globals *g, int argc, char **argv);
int ctl_set(struct ctl_globals *g, int argc, char **argv);
int ctl_delete(struct ctl_globals *g, int argc, char **argv);
int ctl_mget(struct ctl_globals *g, int argc, char **argv);
int ctl_stats(struct ctl_globals *g, int argc, char **argv);
int ctl_top(struct ctl_globals *g, int argc, char **argv);

/* Cluster administration (docs/cluster.md): the front ends are in
 * ctl_admin.c, the transition they run in ctl_transition.c. Exit status
 * 0 done, 1 failed (and aborted), 2 bad usage or input, 3 another
 * transition is pending, 4 RINGCTL_EXIT_AFTER (tests). */
#define EX_OK       0
#define EX_FAILED   1
#define EX_USAGE    2
#define EX_PENDING  3
#define EX_INJECTED 4

int ctl_init(struct ctl_globals *g, int argc, char **argv);
int ctl_status(struct ctl_globals *g, int argc, char **argv);
/* One `status` report into out (ctl_view.c); the exit status. */
int ctl_status_print(struct ctl_globals *g, FILE *out);
/* status --watch: the report redrawn in place every interval seconds
 * until q, SIGINT or SIGTERM (ctl_view.c). */
int ctl_status_watch(struct ctl_globals *g, double interval);
int ctl_join(struct ctl_globals *g, int argc, char **argv);
int ctl_leave(struct ctl_globals *g, int argc, char **argv);

/* Membership changes that keep the node set (ctl_reshape.c). */
int ctl_reweight(struct ctl_globals *g, int argc, char **argv);
int ctl_replicas(struct ctl_globals *g, int argc, char **argv);
int ctl_vnodes(struct ctl_globals *g, int argc, char **argv);
int ctl_abort(struct ctl_globals *g, int argc, char **argv);
int ctl_resume(struct ctl_globals *g, int argc, char **argv);
/* "plan join|leave ..." (a dry run against the store), else ctl_plan. */
int ctl_admin_plan(struct ctl_globals *g, int argc, char **argv);

/* Node failure (ctl_failure.c; docs/cluster.md, "Node failure"): remove
 * --failed ID, repair ID [ADDR], and the watch loop. */
int ctl_remove(struct ctl_globals *g, int argc, char **argv);
int ctl_repair(struct ctl_globals *g, int argc, char **argv);
int ctl_watch(struct ctl_globals *g, int argc, char **argv);
int ctl_history(struct ctl_globals *g, int argc, char **argv);
int ctl_rate(struct ctl_globals *g, int argc, char **argv);
int ctl_pause(struct ctl_globals *g, int argc, char **argv);
int ctl_unpause(struct ctl_globals *g, int argc, char **argv);

#endif
