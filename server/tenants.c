/*
 * tenants: the modules that live on the worker runtime (server/thread.h,
 * struct worker_tenant), in the order the runtime calls their hooks. The
 * runtime iterates this table and names none of them; a new tenant is one
 * entry here.
 */
#include "config.h"

#include <stddef.h>

#include "server/forward.h"
#include "server/proto_auth.h"
#include "server/replicate.h"
#include "server/thread.h"
#include "server/watch.h"

static const struct worker_tenant forward_tenant = {
    .name = "forward",
    .worker_free = forward_worker_free,
    .conn_closed = forward_conn_closed, /* a no-op for one that relayed nothing */
};

/* After forward: its worker_free fails the relays in flight, which may
 * finish replication ops into the pool this one frees. */
static const struct worker_tenant replicate_tenant = {
    .name = "replicate",
    .worker_free = replicate_worker_free,
};

static const struct worker_tenant proto_auth_tenant = {
    .name = "proto_auth",
    .reload = proto_auth_reload,
};

/* memcached's `watch`: a watcher that closes stops being streamed to. */
static const struct worker_tenant watch_tenant = {
    .name = "watch",
    .conn_closed = watch_detach,
};

const struct worker_tenant *const worker_tenants[] = {
    &forward_tenant, &replicate_tenant, &proto_auth_tenant, &watch_tenant, NULL,
};
