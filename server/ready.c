/*
 * ready: the readiness decision behind GET /ready (server/ready.h). The
 * order of the checks is the order of what an operator must act on first:
 * a stopping or unconfigured node before one waiting for its data.
 */
#include "config.h"
#include "server/ready.h"

#include <inttypes.h>
#include <stdio.h>

/* See ready.h. */
bool
ready_check(bool clustered, bool stopping, const struct cluster_snapshot *cs, char *why, size_t len)
{
    if (stopping) {
        snprintf(why, len, "not ready: shutting down");
        return false;
    }
    if (!clustered) {
        snprintf(why, len, "ready: a single node (no cluster)");
        return true;
    }
    if (cs->epoch == 0) {
        snprintf(why, len, "not ready: no membership yet (ringctl init or join)");
        return false;
    }
    if (cs->self < 0) {
        snprintf(why, len, "not ready: not a member of epoch %" PRIu64, cs->epoch);
        return false;
    }
    if (cs->recovering) {
        snprintf(why, len,
                 "not ready: recovering: restarted empty in epoch %" PRIu64
                 ", waits for its ranges (ringctl repair)",
                 cs->epoch);
        return false;
    }
    if (cs->behind_epoch > cs->epoch) {
        snprintf(why, len, "not ready: behind: epoch %" PRIu64 ", a peer runs %" PRIu64, cs->epoch,
                 cs->behind_epoch);
        return false;
    }
    if (cs->pending_epoch != 0 && cs->pending_self < 0) {
        snprintf(why, len, "not ready: leaving: pending epoch %" PRIu64 " removes this node (%s)",
                 cs->pending_epoch, cluster_phase_name(cs->phase));
        return false;
    }
    if (cs->suspect) {
        snprintf(why, len, "not ready: suspect: this process stalled, until a heartbeat round");
        return false;
    }
    if (cs->isolated) {
        snprintf(why, len, "not ready: isolated: no peer answers heartbeats");
        return false;
    }
    snprintf(why, len, "ready: member %" PRId32 " of epoch %" PRIu64 " (%" PRIu32 " members)",
             cs->self, cs->epoch, cs->n_nodes);
    return true;
}
