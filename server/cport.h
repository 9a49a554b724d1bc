/*
 * cport: the cluster port (docs/cluster.md). A listener on its own thread
 * and event_base, so no worker ever waits for it: the Hello handshake
 * (cluster id, admin token), the admin requests (Prepare, StartCopy, Fence,
 * Commit, Abort, Status), peer handoff connections, and the background
 * cleanup after a commit. A bad frame closes that connection only.
 */
#ifndef SERVER_CPORT_H
#define SERVER_CPORT_H

#include <stddef.h>

struct bufferevent;
struct cluster;
struct event_base;
struct server;
struct cport;

/* Create the cluster port of srv for listen_addr:port (not yet bound).
 * NULL on ENOMEM. */
struct cport *cport_new(struct server *srv, struct cluster *cl, const char *listen_addr, int port);

/* Watch the membership store spec (`--store`; server/storewatch.h) from
 * cport_start on. 0, or -1 with a reason in err. */
int cport_watch_store(struct cport *cp, const char *spec, char *err, size_t errlen);

/* Bind, listen and start the thread. 0, or -1 (logged). */
int cport_start(struct cport *cp);

/* Serve bev, a bufferevent on cport_base(cp), as one more accepted
 * connection (from no address): how tests and the fuzz target drive the
 * port in memory (bufferevent_pair_new), without a socket or the thread.
 * The port owns bev from then on. 0, or -1 (out of memory). */
int                cport_adopt(struct cport *cp, struct bufferevent *bev);
struct event_base *cport_base(struct cport *cp);

/* Stop the thread (if started), close every connection, free. NULL is
 * fine. The workers may still run; the store must still exist. */
void cport_free(struct cport *cp);

#endif /* SERVER_CPORT_H */
