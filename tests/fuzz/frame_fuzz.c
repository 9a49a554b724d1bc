/*
 * libFuzzer target: arbitrary bytes on the cluster port. Decodes frames
 * back to back as a connection would, and unpacks membership payloads;
 * a valid membership must survive a wire round trip unchanged.
 */
#include <stdlib.h>
#include <string.h>

#include "proto/frame.h"
#include "proto/members_pb.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check_membership(const uint8_t *buf, size_t len)
{
    struct ring_members *m = NULL, *back = NULL;
    char                 err[256];
    uint8_t             *packed;
    size_t               plen;

    if (members_pb_unpack(buf, len, &m, err, sizeof(err)) != RING_OK) {
        return;
    }
    packed = members_pb_pack(m, &plen);
    if (packed != NULL) {
        if (members_pb_unpack(packed, plen, &back, err, sizeof(err)) != RING_OK ||
            back->n_nodes != m->n_nodes || back->epoch != m->epoch || back->vnodes != m->vnodes ||
            back->replicas != m->replicas) {
            abort();
        }
        ring_members_free(back);
        free(packed);
    }
    ring_members_free(m);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct frame f;
    size_t       used;

    /* The first 8 bytes pick the cluster id, so ECLUSTER and OK both occur. */
    uint64_t cluster = 0;
    if (size >= 8) {
        memcpy(&cluster, data, 8);
        data += 8;
        size -= 8;
    }
    check_membership(data, size);
    while (size > 0) {
        int rc = frame_decode(data, size, cluster, 1 << 16, &f, &used);

        if (rc != FRAME_OK) {
            break;
        }
        if (used < FRAME_HEADER_SIZE || used > size) {
            abort();
        }
        if (f.type == FRAME_MEMBERSHIP) {
            check_membership(f.payload, f.length);
        }
        data += used;
        size -= used;
    }
    return 0;
}
