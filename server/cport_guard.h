/*
 * cport_guard: the cluster port's admission before authentication
 * (docs/cluster.md, "Cluster port admission"; docs/security.md): the
 * bounded pre-auth table with its per-source share, eviction and Hello
 * deadline, and the throttle on a source's Hellos after wrong tokens.
 * Everything runs on the cluster thread (server/cport_internal.h).
 */
#ifndef SERVER_CPORT_GUARD_H
#define SERVER_CPORT_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/util.h>

#include "server/cport_internal.h"

/* The per-source key of a peer address: the family and the IPv4 address,
 * or the first 64 bits of an IPv6 one (one host usually owns a whole /64).
 * A v4-mapped IPv6 address counts as its IPv4 address. */
void source_key(const struct sockaddr_storage *ss, uint8_t key[CPORT_SRC_LEN]);

/* One line about the pre-auth connections closed since the last one, if
 * there were any and CPORT_DROP_LOG_MS has passed (a flood must not turn
 * into a flood of log lines); the sweep prints what is left over. */
void drop_log(struct cport *cp, uint64_t now);

/* Put new connection c (src set) at the end of the pre-auth table, its
 * Hello deadline running from now. */
void preauth_add(struct cp_conn *c);

/* Take c out of the pre-auth table (its Hello was accepted, or it goes);
 * nothing when it is not in it. */
void preauth_remove(struct cp_conn *c);

/* Make room for one more pre-auth connection from src: when that source
 * has its share, one of its connections is freed; else, when the pre-auth
 * table or the whole port is full, one of any (the oldest idle one, or
 * the oldest). */
void preauth_make_room(struct cport *cp, const uint8_t *src);

/* Free the pre-auth connections past their Hello deadline at now. */
void preauth_sweep(struct cport *cp, uint64_t now);

/* c's Hello had a wrong token: its source waits longer for the next. */
void auth_failed(struct cp_conn *c);

/* Whether c's Hello may be checked now. A source with failures gets one
 * check per penalty: this one takes the turn, or c waits (deferred, input
 * paused) and auth_cb resumes it. */
bool auth_turn(struct cp_conn *c);

/* cp->auth_ev's callback (arg: cp): resume the deferred Hellos whose turn
 * may have come, in accept order. */
void auth_cb(evutil_socket_t fd, short what, void *arg);

#endif /* SERVER_CPORT_GUARD_H */
