/*
 * storewatch: a node's own watch of the membership store (`ringcached
 * --store SPEC`, the same spec as ringctl's: a directory or etcd://).
 *
 * A thread of its own reads the store's active membership and then waits
 * for the next write (mstore_wait: an etcd watch, or a poll of the
 * directory's revision); every active membership it reads is handed to
 * the cluster thread (through a pipe in its event base), which calls
 * on_active there. The store is never on the data path: when it is down
 * the thread logs it once, retries with a backoff, and nothing else waits.
 */
#ifndef SERVER_STOREWATCH_H
#define SERVER_STOREWATCH_H

#include <stdint.h>

#include <event2/event.h>

struct ring_members;
struct storewatch;

/* Called on the base's thread with the store's active membership (owned by
 * the watch: copy what must outlive the call). */
typedef void (*storewatch_fn)(void *arg, const struct ring_members *active);

/* A watch of spec for the thread running base, by node node_id (boot_id:
 * this process's, written in its liveness record). NULL with a reason in
 * err (a malformed spec: the same message as ringctl's). Starts nothing. */
struct storewatch *storewatch_new(struct event_base *base, const char *spec, const char *node_id,
                                  uint64_t boot_id, storewatch_fn fn, void *arg, char *err,
                                  size_t errlen);
/* Start the thread: 0, or -1 (logged). */
int storewatch_start(struct storewatch *w);
/* Stop the thread (it ends within a store request's timeout) and free. */
void storewatch_free(struct storewatch *w);

#endif /* SERVER_STOREWATCH_H */
