/*
 * admin: the node's side of the admin requests on the cluster port
 * (docs/cluster.md): Prepare, StartCopy, Fence, Commit, Abort and Status,
 * decoded from their protobuf into the node's own structs, run through
 * server/transition.h, answered with the node's NodeStatus. The mirror of
 * client/cport_client.c: a new admin command lands in both.
 */
#ifndef SERVER_ADMIN_H
#define SERVER_ADMIN_H

struct cp_conn;
struct frame;

/* One AdminRequest frame f on c, an ADMIN connection: decode, run, reply
 * (a Fence replies once its drain is over; c reads nothing until then).
 * A frame that does not decode is an Error and a close. Cluster thread. */
void admin_request(struct cp_conn *c, const struct frame *f);

/* c goes away: a Fence or a Status it waits for is cancelled (its reply
 * never sent). */
void admin_conn_gone(struct cp_conn *c);

/* An abort the node decided by itself (transition_set_end_streams; arg:
 * the struct cport): fail a waiting Fence, end the incoming streams. */
void admin_end_streams(void *arg);

#endif /* SERVER_ADMIN_H */
