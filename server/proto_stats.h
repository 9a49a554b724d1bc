/*
 * proto_stats: `stats [settings|reset|items|slabs|sizes|hotkeys|latency|detail]` of the text
 * protocol (server/proto_text.c dispatches it here).
 */
#ifndef SERVER_PROTO_STATS_H
#define SERVER_PROTO_STATS_H

#include "server/proto_util.h"

/* Answer `stats` with tokens t[0..ntok) (t[0] is "stats"); anything but
 * the known groups is ERROR. Always answered, even with noreply. */
void proto_stats(struct conn *c, const struct token *t, int ntok);

#endif /* SERVER_PROTO_STATS_H */
