/*
 * handoff_in: the destination side of the handoff (docs/cluster.md, COPY).
 * Each PEER connection on the cluster port has one import state; its
 * HandoffBatch payloads are checked against the pending transition and
 * imported into the store. The source side is server/handoff.h. Cluster
 * thread only.
 */
#ifndef SERVER_HANDOFF_IN_H
#define SERVER_HANDOFF_IN_H

#include <stddef.h>
#include <stdint.h>

struct cluster;
struct handoff_in;
struct store;

/* The import state of one peer connection (a value in chunks) into store
 * s, checked against cl's pending transition. NULL: out of memory. The
 * imports are counted in cl's counters (cluster_counters_get). */
struct handoff_in *handoff_in_new(struct cluster *cl, struct store *s);
/* Free it; a value still arriving in chunks is dropped. */
void handoff_in_free(struct handoff_in *in);

/*
 * Apply one HandoffBatch payload. 0: applied, ack seq; 1: the store
 * refused (no memory, an import evicted items): ack with err, the source
 * fails the transfer; -1: a peer that lies (wrong token or epoch, a key
 * outside the arcs this node imports, a broken chunk sequence): Error and
 * close.
 */
int handoff_in_batch(struct handoff_in *in, const uint8_t *payload, size_t len, uint64_t *seq,
                     char *err, size_t errlen);

#endif /* SERVER_HANDOFF_IN_H */
