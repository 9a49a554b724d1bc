/*
 * proto_meta: memcached's meta protocol (mg, ms, md, ma, mn, me) as in
 * memcached 1.6.45's doc/protocol.txt, on the same request pipeline as the
 * classic commands (server/route.h): one route decision per key, relayed
 * for plain clients, MOVED/TRYAGAIN for declared ones, replicated from the
 * acting primary with the item's meta state (stale mark, win token, CAS).
 * docs/cluster.md "Meta commands" says what holds across the cluster.
 */
#ifndef SERVER_PROTO_META_H
#define SERVER_PROTO_META_H

struct conn;

/* Execute a meta command line [line, end) (no "\r\n") whose command is
 * two bytes, 'm' and one more, at line (after leading spaces). */
void proto_meta(struct conn *c, const char *line, const char *end);

#endif
