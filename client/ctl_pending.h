/*
 * ctl_pending: the transition record, the admin's record of a transition
 * in the membership store (docs/cluster.md). It is the store's
 * pending.meta while the transition runs, next to pending.members, and is
 * kept as aborted.meta after an abort (a repeated abort re-notifies the
 * nodes from it) and as committed.meta after a commit (resume re-sends
 * Commit with its token to nodes still pending with it). One "key value" a line: token, phase,
 * from_epoch, epoch, rate, started, written, op, admin, and "boot ID HEX"
 * per node.
 *
 * Not to be confused with the node's own state-directory file of the same
 * old name (server/cluster.c): another format, another owner.
 */
#ifndef CLIENT_CTL_PENDING_H
#define CLIENT_CTL_PENDING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ring/ring.h"

struct mstore;
struct mstore_record;

/* The store's names of the transition record. */
#define REC_PENDING_TREC "pending.meta" /* the pending transition's */
#define REC_ABORTED_TREC "aborted.meta" /* the last aborted one's */
/* The last committed one's: its token lets `resume` finish a commit on
 * every node. */
#define REC_COMMITTED_TREC "committed.meta"

/* The last TREC_ABORTED_KEEP aborted transitions' epochs and tokens, newest
 * first ("epoch E token HEX" a line): a node that missed an abort, even of
 * a transition an abort since then replaced in aborted.meta, can be told by
 * `ringctl abort`. */
#define REC_ABORTED_TOKENS "aborted.tokens"
#define TREC_ABORTED_KEEP  16

#define TREC_TOKEN_BYTES 16

/* The phase a transition record holds (what the admin last recorded). */
enum trec_phase {
    TREC_PREPARED = 1,
    TREC_COPYING,
    TREC_FENCED,
    TREC_ABORTED
};

/* A node's boot id as recorded at PREPARE. */
/* A node as the transition's plan saw it before the Prepare: its boot id
 * (0: unreachable then, filled in after the Prepare) and whether it held
 * nothing current (stale: its ranges are copied to it). */
struct trec_boot {
    char     id[RING_ID_MAX + 1];
    uint64_t boot_id;
    bool     stale;
};

/* The transition record, parsed. */
struct trec {
    uint8_t         token[TREC_TOKEN_BYTES];
    enum trec_phase phase;
    uint64_t        from_epoch, epoch;
    uint64_t        rate;    /* bytes/s for StartCopy, 0 = unlimited */
    int64_t         started; /* unix seconds */
    int64_t         written; /* unix seconds it was last stored: the admin's heartbeat
                              * (watch takes over a transition whose admin stopped) */
    char              op[RING_ID_MAX + RING_ADDR_MAX + 32]; /* "join ID ADDR" / "leave ID" */
    char              admin[256];
    uint32_t          n_boot;
    struct trec_boot *boot; /* malloc'd */
};

/* "PREPARED", "COPYING", "FENCED" or "ABORTED". */
const char *trec_phase_name(enum trec_phase phase);

/* Free a record's boot list and zero it. */
void trec_clear(struct trec *t);

/* The text of a record in a malloc'd buffer, its length in *len; NULL when
 * out of memory. */
char *trec_format(const struct trec *t, size_t *len);

/* Parse the text of a record (NUL-terminated) into *t. On failure writes
 * "where:line: reason" into err, leaves *t cleared and returns -1. */
int trec_parse(const char *text, const char *where, struct trec *t, char *err, size_t errlen);

/* The boot id recorded for node id, or 0 when none was recorded. */
uint64_t trec_boot_id(const struct trec *t, const char *id);

/* Read the record `name` (REC_PENDING_TREC, REC_ABORTED_TREC or
 * REC_COMMITTED_TREC) from the store into *t, *have false when it is
 * absent, *rev its revision (0 when absent). EX_OK, or EX_USAGE after
 * printing why. */
int trec_load(struct mstore *s, const char *name, struct trec *t, bool *have, uint64_t *rev);

/* The same from a record already read (rec->rev == 0: absent), for reads
 * of several records at one revision (mstore_get_many). */
int trec_of_record(const struct mstore_record *rec, struct trec *t, bool *have, uint64_t *rev);

/* One entry of REC_ABORTED_TOKENS. */
struct trec_aborted {
    uint64_t epoch;
    uint8_t  token[TREC_TOKEN_BYTES];
};

/* Read REC_ABORTED_TOKENS into out[max] (newest first); the count, 0 when
 * absent or unreadable (the list is a help for recovery, not a record). */
uint32_t trec_aborted_load(struct mstore *s, struct trec_aborted *out, uint32_t max);

/* The text of REC_ABORTED_TOKENS with t's epoch and token first, then the
 * current list (at most TREC_ABORTED_KEEP lines), malloc'd; NULL on ENOMEM. */
char *trec_aborted_text(struct mstore *s, const struct trec *t, size_t *len);

/* Write *t as REC_PENDING_TREC, conditional on revision *rev (updated).
 * EX_OK, or EX_FAILED after printing why. */
int trec_store(struct mstore *s, const struct trec *t, uint64_t *rev);

#endif
