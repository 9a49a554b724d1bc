/*
 * statedir: the files of a node's state directory (docs/cluster.md, "State
 * directory"). The cluster (server/cluster.c) decides what to persist and
 * when; this module only reads and writes the files, each one atomically.
 * Errors are "path: reason", or "path:line: reason" for a malformed file.
 */
#ifndef SERVER_STATEDIR_H
#define SERVER_STATEDIR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

#define STATEDIR_ACTIVE    "active.members"  /* the active membership */
#define STATEDIR_PENDING   "pending.members" /* the pending membership, if any */
#define STATEDIR_PHASE     "pending.phase"   /* its token and phase (with pending.members) */
#define STATEDIR_SERVED    "served"          /* present once the node served as a member */
#define STATEDIR_TOKEN_MAX 256               /* bytes of a phase record's token */

/* Write dir/name.tmp, fsync, rename over dir/name, fsync the directory.
 * 0 or -1 with err set. */
int statedir_write_file(const char *dir, const char *name, const char *data, size_t len, char *err,
                        size_t errlen);

/* Remove dir/name (absent is fine) and sync the directory. 0 or -1. */
int statedir_remove(const char *dir, const char *name, char *err, size_t errlen);

/* Load the membership file dir/name into *out (the caller frees it).
 * 0, 1 if the file is absent, -1 with err set. */
int statedir_load_members(const char *dir, const char *name, struct ring_members **out, char *err,
                          size_t errlen);

/* Write m to dir/name in text form. 0 or -1 with err set. */
int statedir_save_members(const char *dir, const char *name, const struct ring_members *m,
                          char *err, size_t errlen);

/*
 * Read the pending transition's phase record: its token (at most token_max
 * bytes, into token[], *token_len set) and its phase, whose name phase_of
 * turns into *phase (-1: unknown, reported as "path:line: unknown phase").
 * Only called when pending.members exists, so an absent record is an
 * error. A state directory written before the record was renamed has a
 * `pending.meta` instead: it is read when pending.phase is absent. 0 or -1
 * with err set.
 */
int statedir_load_phase(const char *dir, uint8_t *token, size_t token_max, size_t *token_len,
                        int (*phase_of)(const char *name), int *phase, char *err, size_t errlen);

/* Write the phase record (pending.phase): the token and the phase's name.
 * 0 or -1 with err set. */
int statedir_save_phase(const char *dir, const uint8_t *token, size_t token_len, const char *phase,
                        char *err, size_t errlen);

/* Remove the phase record, and a legacy pending.meta if there is one.
 * 0 or -1 with err set. */
int statedir_remove_phase(const char *dir, char *err, size_t errlen);

/* Remove the pending membership and the phase record (and a legacy
 * pending.meta) without syncing the directory: for after a commit, whose
 * active membership is synced already. A crash that loses the removals
 * leaves a pending at or below the active epoch, which the load drops.
 * 0 or -1 with err set. */
int statedir_drop_pending(const char *dir, char *err, size_t errlen);

/* Has this node served as a member (the `served` marker exists)? */
bool statedir_served(const char *dir);

/* Write the `served` marker: a later start is a restart. 0 or -1. */
int statedir_mark_served(const char *dir, char *err, size_t errlen);

#endif /* SERVER_STATEDIR_H */
