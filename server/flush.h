/*
 * flush: flush_all in a cluster as one CAS floor (docs/guarantees.md
 * "flush_all"). The node a client sent it to proposes a floor a little
 * ahead of its clock; every member raises its CAS counter to it and
 * answers with what the counter was; then every member raises its flush
 * floor to the largest of those (the proposal unless a clock ran ahead), so
 * every owner drops the same items whatever order images and the flush
 * arrive in. One connection's flush_all runs after its earlier requests
 * are answered and before its later ones start.
 */
#ifndef SERVER_FLUSH_H
#define SERVER_FLUSH_H

#include <stdbool.h>
#include <stdint.h>

struct conn;
struct token;

/*
 * flush_all [delay] from client c, on a cluster member (flush_cluster_wide):
 * takes over its reply, `OK` once every member applied it, or
 * `SERVER_ERROR replica unavailable` (nothing with noreply). c parses
 * nothing more until it is done (flush_blocks). An immediate flush is the
 * members' largest CAS counter; a delayed one the moment's own floor
 * (store_flush), the same at every member.
 */
void flush_start(struct conn *c, int32_t delay, bool noreply);

/* rc_flush_cas questions this node answered as a member (asked), and
 * flushes it proposed whose floor a member's counter overtook (skewed:
 * that member's clock, or CAS counter, ran ahead of this node's by more
 * than the proposal's lead). */
void flush_counters(uint64_t *asked, uint64_t *skewed);

/* Whether flush_all on c is cluster-wide: a member with a membership,
 * and c is a client, not a peer. */
bool flush_cluster_wide(const struct conn *c);

/* Whether flush_all from client c must be refused: a cluster node with no
 * membership (never joined, or its state was lost) cannot reach the other
 * owners, and a flush it applied alone would be acknowledged while the
 * members still serve what it was to remove. */
bool flush_refused(const struct conn *c);

/*
 * Called before c parses a command: true while a flush_all of c is in
 * progress (c must then parse nothing; it is woken when that changes).
 * Starts the flush once c's earlier requests are all answered.
 */
bool flush_blocks(struct conn *c);

/*
 * The peer commands (peers only): `rc_flush_cas` answers `CAS <n>`, this
 * node's CAS counter (every CAS it minted or holds is below n);
 * `rc_flush <floor> [<when>]` raises its flush floor (store_flush_at: at
 * unix time when, a delayed flush_all), `OK`.
 */
void flush_peer_cas(struct conn *c, const struct token *t, int ntok);
void flush_peer_floor(struct conn *c, const struct token *t, int ntok);

#endif /* SERVER_FLUSH_H */
