/*
 * ctl_svg: the ring drawn as an SVG picture (ringctl ring --svg FILE).
 */
#ifndef CLIENT_CTL_SVG_H
#define CLIENT_CTL_SVG_H

#include "ring/ring.h"

/* Draw ring r (share[]: each node's keyspace share, as ring_shares gives)
 * into out_path, titled with members_path. 0, or -1 after printing why
 * (no file is left behind). */
int ctl_ring_svg(const struct ring *r, const double *share, const char *members_path,
                 const char *out_path);

#endif
