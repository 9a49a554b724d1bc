/*
 * proto_admin: memcached 1.6's operator commands of the text protocol that
 * are not about one key: `stats detail on|off|dump` (per-prefix counters),
 * `lru_crawler metadump all|hash` and `stats cachedump` (what memcdump
 * reads), `shutdown` (with
 * -A), and ElastiCache's `config get cluster` (for AWS's cluster clients).
 * server/proto_text.c dispatches them here.
 */
#ifndef SERVER_PROTO_ADMIN_H
#define SERVER_PROTO_ADMIN_H

#include <stdbool.h>
#include <stddef.h>

#include "server/proto_text.h"
#include "server/proto_util.h"

/* One of the commands above, tokens t[0..ntok): answered, and true (with
 * *st what the connection does next: PROTO_MORE, or PROTO_QUIT after
 * shutdown); false when t[0] names none of them. */
bool proto_admin(struct conn *c, const struct token *t, int ntok, enum proto_status *st);

/* `stats detail ...` (t[1] is "detail"): answered. */
void proto_admin_stats_detail(struct conn *c, const struct token *t, int ntok);

/* `stats cachedump <class> <limit>` (t[1] is "cachedump"): answered, or
 * a dump started (CONN_PS_DUMP). */
void proto_admin_stats_cachedump(struct conn *c, const struct token *t, int ntok);

/* `stats conns`: every client connection of the node (and the listening
 * socket), memcached's lines. */
void proto_admin_stats_conns(struct conn *c);

/* A metadump in progress (c->pstate CONN_PS_DUMP): write the next slice of
 * items; PROTO_MORE (call again while the state stays, after the output
 * drained), its last line queued when the state is back to CONN_PS_CMD. */
enum proto_status proto_admin_dump_continue(struct conn *c);

/* What a key did, for `stats detail` (a no-op unless it is on). */
enum admin_detail_op {
    ADMIN_DETAIL_GET,
    ADMIN_DETAIL_SET,
    ADMIN_DETAIL_DEL,
};

/* Count op on key's prefix (the bytes before the -D delimiter, ':' by
 * default; none: not counted, as memcached); hit for a get. Any worker. */
void proto_admin_detail(const struct settings *st, const char *key, size_t nkey,
                        enum admin_detail_op op, bool hit);

/* Is `stats detail` on (a relaxed read)? The callers test it first. */
bool proto_admin_detail_on(void);

/* Turn it on or off (stats detail on|off, and -D at start). */
void proto_admin_detail_set(bool on);

#endif /* SERVER_PROTO_ADMIN_H */
