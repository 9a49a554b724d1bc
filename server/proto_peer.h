/*
 * proto_peer: the cluster's text-protocol commands (config, epoch, rc_peer,
 * rc_set, rc_del), dispatched here by server/proto_text.c.
 */
#ifndef SERVER_PROTO_PEER_H
#define SERVER_PROTO_PEER_H

#include "server/proto_util.h"

/* `config`: the active membership, "CONFIG <epoch> <len>" + text + END. */
void proto_peer_config(struct conn *c);

/* `epoch`: "EPOCH <active> <pending>"; `epoch <n>`: the connection
 * declares its epoch and gets MOVED instead of forwarding (0 withdraws). */
void proto_peer_epoch(struct conn *c, const struct token *t, int ntok);

/* `rc_peer <auth>`: the connection becomes a cluster peer (it may send
 * replica writes and is never forwarded) if auth proves the token. */
void proto_peer_rc_peer(struct conn *c, const struct token *t, int ntok);

/* `rc_set <key> <flags> <ttl> <cas> <bytes>` + data block: a post-image
 * from the key's primary (peers only), applied unless older by CAS. */
void proto_peer_rc_set(struct conn *c, const struct token *t, int ntok);

/* `rc_del <key> <cas>`: a tombstone from the key's primary (peers only). */
void proto_peer_rc_del(struct conn *c, const struct token *t, int ntok);

#endif /* SERVER_PROTO_PEER_H */
