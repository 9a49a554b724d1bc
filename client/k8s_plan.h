/*
 * k8s_plan: what the ring should do next to follow a StatefulSet: the
 * Kubernetes API's StatefulSet and pod list parsed (json-c), and the
 * decision, a pure function so a recorded sequence of pod events can be
 * replayed in tests. ringctl watch --kubernetes (ctl_k8s.c) runs it.
 */
#ifndef CLIENT_K8S_PLAN_H
#define CLIENT_K8S_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

#define K8S_PODS_MAX 1024
#define K8S_WHY_MAX  384 /* a decision's log line */

/* One pod of the StatefulSet as the API gave it. */
struct k8s_pod {
    char name[RING_ID_MAX + 1];
    int  ordinal;  /* NAME-N: N; -1 when the name is not the StatefulSet's */
    bool running;  /* phase Running, a pod IP, every container running */
    bool deleting; /* metadata.deletionTimestamp set */
    char ip[64];
};

/* The StatefulSet and its pods. */
struct k8s_state {
    uint32_t       replicas;      /* spec.replicas */
    char           service[254];  /* spec.serviceName ("" when none) */
    char           selector[512]; /* spec.selector.matchLabels as a labelSelector */
    struct k8s_pod pods[K8S_PODS_MAX];
    size_t         n_pods;
};

enum k8s_do {
    K8S_NONE,
    K8S_JOIN,
    K8S_LEAVE
};

struct k8s_action {
    enum k8s_do what;
    char        id[RING_ID_MAX + 1];
    char        addr[RING_ADDR_MAX + 1];
    char        why[K8S_WHY_MAX]; /* what was decided and why, for the log */
};

/**
 * Parse a StatefulSet object (GET .../statefulsets/NAME) into st's
 * replicas, service and selector. 0, or -1 with a reason in err.
 */
int k8s_parse_statefulset(const char *json, struct k8s_state *st, char *err, size_t errlen);

/**
 * Parse a pod list (GET .../pods?labelSelector=...) into st->pods, keeping
 * the pods named STS-N. 0, or -1 with a reason in err.
 */
int k8s_parse_pods(const char *json, const char *sts, struct k8s_state *st, char *err,
                   size_t errlen);

/**
 * The one change the ring needs next, or K8S_NONE (with why):
 * 1. a member whose pod of sts has an ordinal at or beyond st->replicas
 *    and still runs (scale-in; its preStop waits for the leave) leaves,
 *    the highest ordinal first, unless the ring would keep fewer nodes
 *    than its R;
 * 2. a pod below st->replicas that runs, is not being deleted and is not
 *    a member joins, the lowest ordinal first, at POD.SERVICE:PORT (the
 *    stable name; the pod IP when the StatefulSet has no service).
 * Members that are not pods of sts, and members whose pod does not run
 * (the watch's failover handles those), are left alone. m may be NULL
 * (no active membership: nothing is done; `ringctl init` starts a ring).
 */
void k8s_decide(const struct ring_members *m, const char *sts, const struct k8s_state *st,
                unsigned port, struct k8s_action *out);

#endif /* CLIENT_K8S_PLAN_H */
