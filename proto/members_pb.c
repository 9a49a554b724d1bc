/*
 * members_pb: ring_members <-> ringcache.Membership (protobuf-c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/members_pb.h"
#include "proto/ringcache.pb-c.h"

uint8_t *
members_pb_pack(const struct ring_members *m, size_t *len)
{
    Ringcache__Membership pb = RINGCACHE__MEMBERSHIP__INIT;
    Ringcache__Node      *nodes = NULL;
    Ringcache__Node     **ptrs = NULL;
    uint8_t              *buf = NULL;
    uint32_t              i;

    if (m->n_nodes > 0) {
        nodes = calloc(m->n_nodes, sizeof(*nodes));
        ptrs = calloc(m->n_nodes, sizeof(*ptrs));
        if (nodes == NULL || ptrs == NULL) {
            goto out;
        }
    }
    for (i = 0; i < m->n_nodes; i++) {
        ringcache__node__init(&nodes[i]);
        /* protobuf-c's string fields are char *; it never writes them. */
        nodes[i].id = (char *)m->nodes[i].id;
        nodes[i].addr = (char *)m->nodes[i].addr;
        nodes[i].weight = m->nodes[i].weight;
        nodes[i].zone = (char *)m->nodes[i].zone;
        ptrs[i] = &nodes[i];
    }
    pb.epoch = m->epoch;
    pb.vnodes = m->vnodes;
    pb.replicas = m->replicas;
    pb.n_nodes = m->n_nodes;
    pb.nodes = ptrs;
    *len = ringcache__membership__get_packed_size(&pb);
    /* One spare byte: an empty membership packs to zero bytes. */
    buf = malloc(*len + 1);
    if (buf == NULL) {
        goto out;
    }
    ringcache__membership__pack(&pb, buf);
out:
    free(nodes);
    free(ptrs);
    return buf;
}

int
members_pb_unpack(const uint8_t *buf, size_t len, struct ring_members **out, char *err,
                  size_t errlen)
{
    Ringcache__Membership *pb;
    struct ring_members   *m = NULL;
    size_t                 i;
    int                    rc;

    pb = ringcache__membership__unpack(NULL, len, buf);
    if (pb == NULL) {
        snprintf(err, errlen, "membership: not a valid protobuf message");
        return RING_EPARSE;
    }
    m = ring_members_new();
    if (m == NULL) {
        rc = RING_ENOMEM;
        goto out;
    }
    m->epoch = pb->epoch;
    m->vnodes = pb->vnodes;
    m->replicas = pb->replicas;
    for (i = 0; i < pb->n_nodes; i++) {
        const Ringcache__Node *n = pb->nodes[i];

        rc = ring_members_add(m, n->id, n->addr, n->weight, n->zone);
        if (rc != RING_OK) {
            snprintf(err, errlen, "membership: node %zu ('%.64s'): invalid or duplicate node",
                     i + 1, n->id);
            rc = rc == RING_ENOMEM ? RING_ENOMEM : RING_EPARSE;
            goto out;
        }
    }
    if (ring_members_validate(m, err, errlen) != RING_OK) {
        rc = RING_EPARSE;
        goto out;
    }
    *out = m;
    m = NULL;
    rc = RING_OK;
out:
    ring_members_free(m);
    ringcache__membership__free_unpacked(pb, NULL);
    return rc;
}
