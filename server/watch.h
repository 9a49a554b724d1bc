/*
 * watch: memcached's `watch` command. A connection that sends `watch
 * [fetchers] [mutations] [deletions]` gets OK, then a stream of
 * memcached's log lines ("ts=... gid=... type=item_get key=... status=...
 * clsid=... cfd=... size=..."), for every worker's requests. Logging
 * costs one relaxed load per request while nobody watches.
 */
#ifndef SERVER_WATCH_H
#define SERVER_WATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/proto_util.h"

struct conn;
struct store_item;

#define WATCH_FETCHERS  1u
#define WATCH_MUTATIONS 2u
#define WATCH_DELETIONS 4u

/* The streams someone watches (0: nobody; checked before any formatting). */
extern unsigned watch_mask;

static inline bool
watch_on(unsigned what)
{
    return (__atomic_load_n(&watch_mask, __ATOMIC_RELAXED) & what) != 0;
}

/**
 * `watch [fetchers|mutations|deletions]...` on c (no stream named:
 * fetchers, as memcached 1.6): OK and c becomes a watcher (c->pstate
 * CONN_PS_WATCH: its input is ignored from then on), or ERROR for an
 * unknown stream.
 */
void watch_start(struct conn *c, const struct token *t, int ntok);

/* c is closing: stop streaming to it. */
void watch_detach(struct conn *c);

/* A get of key by c: found (size: the value's bytes) or not. */
void watch_fetch(const struct conn *c, const char *key, size_t nkey, bool found, uint32_t size);

/* A storage command of c stored it (op: enum store_op) with result r
 * (STORE_STORED, ...), at store time now; memcached's cmd and status
 * words. For append and prepend, it is the data block sent. */
void watch_stored(const struct conn *c, const struct store_item *it, int op, int r, int64_t now);

/* A delete of c that found key (cmd "delete" or "md"). */
void watch_delete(const struct conn *c, const char *key, size_t nkey, const char *cmd);

#endif /* SERVER_WATCH_H */
