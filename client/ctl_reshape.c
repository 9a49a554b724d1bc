/*
 * ctl_reshape: membership changes that keep the node set: `reweight ID W`
 * (a node's share), `replicas R` (copies per key) and `vnodes V` (points
 * per unit of weight). Each is a transition like a join: the ranges whose
 * owners change are copied, fenced and activated with the new epoch
 * (change_run), so nothing acknowledged is lost and no key goes cold.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/ctl.h"
#include "client/ctl_transition.h"
#include "client/ctl_util.h"
#include "ring/ring.h"

/* change_opts.reshape: a->new = a->old with o's weight (of o->id), R or
 * vnodes, epoch + 1. */
static int
reshape(struct admin *a, const struct change_opts *o)
{
    int idx = o->id[0] != '\0' ? ring_members_find(a->old, o->id) : -1;

    if (o->id[0] != '\0' && idx < 0) {
        ctl_error("reweight: %s is not a member of epoch %" PRIu64, o->id, a->old->epoch);
        return EX_USAGE;
    }
    if (o->replicas > a->old->n_nodes) {
        ctl_error("replicas: R = %u needs at least %u members (epoch %" PRIu64 " has %u)",
                  o->replicas, o->replicas, a->old->epoch, a->old->n_nodes);
        return EX_USAGE;
    }
    if ((idx >= 0 && a->old->nodes[idx].weight == o->weight) ||
        (o->replicas != 0 && a->old->replicas == o->replicas) ||
        (o->vnodes != 0 && a->old->vnodes == o->vnodes)) {
        ctl_error("%s: epoch %" PRIu64 " has it already: nothing to change", o->op, a->old->epoch);
        return EX_USAGE;
    }
    a->new = ring_members_dup(a->old);
    if (a->new == NULL) {
        ctl_error("out of memory");
        return EX_FAILED;
    }
    a->new->epoch = a->old->epoch + 1;
    if (idx >= 0) {
        a->new->nodes[idx].weight = o->weight;
    }
    if (o->replicas != 0) {
        a->new->replicas = o->replicas;
    }
    if (o->vnodes != 0) {
        a->new->vnodes = o->vnodes;
    }
    return EX_OK;
}

/* Parse "CMD [ID] N [--rate MIB_PER_S]" (ID when with_id), N in lo..hi,
 * into o and run the change. */
static int
run_reshape(struct ctl_globals *g, int argc, char **argv, const char *cmd, bool with_id,
            unsigned long lo, unsigned long hi, const char *usage)
{
    static const struct option opts[] = { { "rate", required_argument, NULL, 'r' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    struct change_opts         o = { .rate_mib = DEFAULT_RATE_MIB, .reshape = reshape };
    unsigned long              n;
    const char                *arg;
    char                      *end;
    int                        c;

    optind = 0;
    /* No "+": --rate may follow the operands. */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'r':
            if (ctl_parse_rate(cmd, optarg, &o.rate_mib) != EX_OK) {
                return EX_USAGE;
            }
            break;
        default:
            return ctl_getopt_default(c, usage, 0);
        }
    }
    if (argc - optind != (with_id ? 2 : 1)) {
        ctl_error("usage: %s", usage);
        return EX_USAGE;
    }
    if (with_id && strlen(argv[optind]) > RING_ID_MAX) {
        ctl_error("%s: id too long", cmd);
        return EX_USAGE;
    }
    arg = argv[optind + (with_id ? 1 : 0)];
    errno = 0;
    n = strtoul(arg, &end, 10);
    if (errno != 0 || end == arg || *end != '\0' || n < lo || n > hi) {
        ctl_error("%s: expected %lu..%lu, got '%s'", cmd, lo, hi, arg);
        return EX_USAGE;
    }
    if (with_id) {
        snprintf(o.id, sizeof(o.id), "%s", argv[optind]);
        o.weight = (uint32_t)n;
        snprintf(o.op, sizeof(o.op), "%s %s %lu", cmd, o.id, n);
    } else {
        *(strcmp(cmd, "replicas") == 0 ? &o.replicas : &o.vnodes) = (uint32_t)n;
        snprintf(o.op, sizeof(o.op), "%s %lu", cmd, n);
    }
    return change_run(g, &o);
}

int
ctl_reweight(struct ctl_globals *g, int argc, char **argv)
{
    return run_reshape(g, argc, argv, "reweight", true, 1, RING_WEIGHT_MAX,
                       CTL_USAGE_ADMIN " reweight ID WEIGHT [--rate MIB_PER_S]");
}

int
ctl_replicas(struct ctl_globals *g, int argc, char **argv)
{
    return run_reshape(g, argc, argv, "replicas", false, 1, RING_R_MAX,
                       CTL_USAGE_ADMIN " replicas R [--rate MIB_PER_S]");
}

int
ctl_vnodes(struct ctl_globals *g, int argc, char **argv)
{
    return run_reshape(g, argc, argv, "vnodes", false, 1, 65535,
                       CTL_USAGE_ADMIN " vnodes V [--rate MIB_PER_S]");
}
