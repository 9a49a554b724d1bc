/*
 * proto_auth: memcached's -Y login (protocol.txt, "Authentication"). A
 * connection of a node started with -Y may send nothing but a login until
 * one succeeds: `set <key> <flags> <exptime> <bytes>` whose data is
 * `<user> <password>`. server/proto_text.c hands such a connection's input
 * here, before any command is dispatched.
 */
#ifndef SERVER_PROTO_AUTH_H
#define SERVER_PROTO_AUTH_H

#include "server/proto_text.h"

struct conn;
struct server;

/* memcached's limit on a login's data block (its MAX_AUTH_REQ_LEN). */
#define PROTO_AUTH_TOKEN_MAX 16384

/* Failed logins after which the connection is closed (its reply sent). */
#define PROTO_AUTH_FAILURES_MAX 5

/*
 * Consume the input of a connection that has not logged in, line by line
 * (a login with its data block once all of it is in), queueing memcached's
 * replies: STORED for a good login (c->authenticated is set and the rest
 * of the input is for the commands), CLIENT_ERROR for anything else. A
 * cluster peer's `rc_peer` proof is also a login (docs/security.md).
 * PROTO_MORE when it needs more input or has logged in; PROTO_PAUSE,
 * PROTO_QUIT (PROTO_AUTH_FAILURES_MAX failures) or PROTO_CLOSE (no line
 * end in 2048 bytes) as proto_text_process. Counts auth_cmds, auth_errors
 * and auth_kicks. Runs on c's worker.
 */
enum proto_status proto_auth(struct conn *c);

/*
 * SIGHUP with -Y (a no-op without): re-read srv's -Y file with
 * authfile_load's checks. A good file replaces the users for every login
 * from then on (connections already logged in stay so) and logs one INFO
 * line with their number; a bad or unreadable one (read as the node's
 * user, after -u) logs one ERR line naming FILE:LINE and keeps the users
 * in use. Main thread.
 */
void proto_auth_reload(struct server *srv);

#endif /* SERVER_PROTO_AUTH_H */
