/*
 * ready: whether the node is serving, as GET /ready on the metrics port
 * answers it (server/metrics.c) for a Kubernetes readiness probe or a load
 * balancer: ready only for a member serving its active epoch. A pure
 * decision over a cluster_snapshot, so each case is unit-tested.
 */
#ifndef SERVER_READY_H
#define SERVER_READY_H

#include <stdbool.h>
#include <stddef.h>

#include "server/cluster.h"

#define READY_REASON_MAX 160

/*
 * Decide readiness. clustered: the node runs with --state-dir (cs is then
 * its cluster_snapshot; ignored otherwise); stopping: SIGTERM, SIGINT or
 * `shutdown` began the stop. Writes a one-line reason without a newline
 * into why (READY_REASON_MAX bytes are enough), saying what the node is
 * and, when not ready, what ends it. Returns true when ready: a plain node
 * that is not stopping, or a member of a non-zero active epoch that is not
 * recovering, behind, suspect, isolated or removed by the pending epoch.
 */
bool ready_check(bool clustered, bool stopping, const struct cluster_snapshot *cs, char *why,
                 size_t len);

#endif /* SERVER_READY_H */
