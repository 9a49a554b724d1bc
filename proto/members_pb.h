/*
 * members_pb: the wire form of a membership (ringcache.Membership) and the
 * conversion to and from ring/'s struct ring_members. Both forms carry the
 * same fields, so converting one to the other loses nothing. Generated
 * protobuf types stay behind this header.
 */
#ifndef PROTO_MEMBERS_PB_H
#define PROTO_MEMBERS_PB_H

#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

/* Serialise m. Returns a malloc'd buffer (caller frees) and its length in
 * *len; NULL on ENOMEM. */
uint8_t *members_pb_pack(const struct ring_members *m, size_t *len);

/* Parse and validate a wire membership. RING_OK and a new membership in
 * *out (free with ring_members_free); RING_EPARSE with a reason in err for
 * bytes that are not a Membership or whose content is invalid (the same
 * rules as the text form); RING_ENOMEM. */
int members_pb_unpack(const uint8_t *buf, size_t len, struct ring_members **out, char *err,
                      size_t errlen);

#endif
