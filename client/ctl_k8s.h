/*
 * ctl_k8s: ringctl watch's Kubernetes mode. Each round reads the node
 * StatefulSet and its pods from the Kubernetes API and makes the ring
 * follow them: a pod that runs is joined, a member whose pod is beyond the
 * StatefulSet's replicas (a scale-in) leaves while its pod waits in its
 * preStop hook (`ringctl wait-left`). The decision is k8s_plan.h's.
 */
#ifndef CLIENT_CTL_K8S_H
#define CLIENT_CTL_K8S_H

#include "client/ctl.h"
#include "client/k8s_plan.h"

/* Where the API is and what to follow (ringctl watch --kubernetes). */
struct k8s_conf {
    const char *sts;        /* the node StatefulSet's name */
    const char *ns;         /* its namespace ("" or NULL: the service account's) */
    const char *api;        /* base URL (NULL: in-cluster, from KUBERNETES_SERVICE_*) */
    const char *token_file; /* bearer token (NULL: the service account's, if present) */
    const char *ca_file;    /* CA of the API (NULL: the service account's, if present) */
    unsigned    port;       /* the nodes' client port (default 11211) */
};

/**
 * Read the StatefulSet and its pods from the API. 0, or -1 after printing
 * why (the watch tries again next round).
 */
int k8s_fetch(const struct k8s_conf *conf, struct k8s_state *st);

/**
 * One round of the Kubernetes mode for the watch: fetch, decide, and run
 * the join or leave (one change). Prints each action as the watch does
 * ("TIME<TAB>watch<TAB>ID<TAB>join|leave<TAB>done|failed"). *last_why
 * (a buffer of K8S_WHY_MAX bytes the caller keeps) suppresses repeating the same
 * decision in the log. Returns EX_OK when nothing was needed or the
 * change succeeded.
 */
int k8s_round(struct ctl_globals *g, const struct k8s_conf *conf, char *last_why);

/* ringctl wait-left ID [--grace S] [--timeout S]: a node pod's preStop. */
int ctl_wait_left(struct ctl_globals *g, int argc, char **argv);

#endif /* CLIENT_CTL_K8S_H */
