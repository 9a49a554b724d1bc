/*
 * mstore: the membership store, the single source of truth for epochs
 * (docs/cluster.md). Named text records with revisions and a small
 * transaction (checks, then writes, all or nothing against other admins),
 * behind a backend vtable: a directory (mstore.c) or etcd (mstore_etcd.c).
 */
#ifndef LIB_MSTORE_H
#define LIB_MSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Results (negative returns). */
#define MSTORE_OK        0
#define MSTORE_ENOENT    (-1) /* no such record */
#define MSTORE_ECONFLICT (-2) /* a check failed: another admin won */
#define MSTORE_EIO       (-3) /* the backend failed (message in err) */
#define MSTORE_ECORRUPT  (-4) /* a malformed record: "file:line: reason" */
#define MSTORE_EINVAL    (-5) /* bad argument (name, spec) */
#define MSTORE_ENOMEM    (-6)

/* Revision meaning "whatever is there, or nothing" in MSTORE_PUT/DELETE. */
#define MSTORE_ANY_REV UINT64_MAX

#define MSTORE_RECORD_MAX (16u << 20) /* largest record the store accepts */
#define MSTORE_WHERE_MAX  4096

/*
 * One record as read. text is the whole record as stored, NUL-terminated,
 * starting with its "# rev N" line (a comment to the membership and meta
 * parsers), so a parser given `where` as the name reports file lines.
 * rev > 0 is the store-wide revision of the record's last write; revisions
 * never repeat, so a deleted-and-recreated record has a new one.
 */
struct mstore_record {
    char    *text; /* malloc'd; mstore_record_clear frees */
    size_t   len;
    uint64_t rev;
    char     where[MSTORE_WHERE_MAX]; /* "DIR/name" (or the backend's URL) */
};

/* One step of a transaction. */
enum mstore_op_kind {
    MSTORE_CHECK,  /* the record's rev must equal rev (0: must be absent) */
    MSTORE_CREATE, /* create data; the record must be absent */
    MSTORE_PUT,    /* replace with data; rev must match (or MSTORE_ANY_REV) */
    MSTORE_DELETE  /* delete; rev must match (or MSTORE_ANY_REV: absent is ok) */
};

struct mstore_op {
    enum mstore_op_kind kind;
    const char         *name; /* "active.members", "history/epoch-3.members" */
    uint64_t            rev;
    const char         *data; /* CREATE/PUT: text without the rev line */
    size_t              len;
};

/*
 * A backend. txn checks every condition first and applies nothing unless
 * all hold (MSTORE_ECONFLICT, *failed = index of the first failing op);
 * then applies every write, atomically also across a crash of the writer:
 * a reader sees all of them or none (etcd: one etcd transaction; the
 * directory: a journal, lib/mstore.c). new_rev gets the revision the
 * writes were stamped with.
 */
struct mstore_backend {
    const char *name;
    int (*open)(const char *spec, void **state, char *err, size_t errlen);
    int (*get)(void *state, const char *name, struct mstore_record *rec, char *err, size_t errlen);
    /* Read n records as of one revision; an absent one is left with
     * rev 0 and no text. */
    int (*get_many)(void *state, const char *const *names, size_t n, struct mstore_record *recs,
                    char *err, size_t errlen);
    int (*txn)(void *state, const struct mstore_op *ops, size_t n_ops, size_t *failed,
               uint64_t *new_rev, char *err, size_t errlen);
    /* Block until a write above revision rev may have happened (0, with
     * *now_rev), or timeout_ms passed (MSTORE_ENOENT), or an error. */
    int (*wait)(void *state, uint64_t rev, int timeout_ms, uint64_t *now_rev, char *err,
                size_t errlen);
    /* Grant a lease of ttl_s seconds (*lease == 0) or keep *lease alive:
     * 0, or MSTORE_ENOENT when it expired. NULL: no leases (directory). */
    int (*lease)(void *state, uint64_t *lease, int ttl_s, char *err, size_t errlen);
    /* Write a record that lives while lease does: unconditionally, or
     * (create) only when it is absent (MSTORE_ECONFLICT otherwise). */
    int (*put_leased)(void *state, const char *name, const char *data, size_t len, uint64_t lease,
                      bool create, char *err, size_t errlen);
    /* The names of the records under dir/ (without the "dir/"). */
    int (*list)(void *state, const char *dir, char ***names, size_t *n, char *err, size_t errlen);
    void (*close)(void *state);
};

struct mstore;

/* Open a store: "DIR" (created if missing), "dir:DIR", or etcd v3:
 * "etcd://HOST:PORT[,HOST:PORT...]/PREFIX[?OPTIONS]" ("etcds://" for TLS;
 * OPTIONS in lib/etcd_spec.c and ringctl(1)). NULL with a reason in
 * err on failure. Close with mstore_close. */
struct mstore *mstore_open(const char *spec, char *err, size_t errlen);
void           mstore_close(struct mstore *s);

/* Read a record into rec (free with mstore_record_clear). MSTORE_ENOENT
 * when absent (rec->rev = 0); MSTORE_ECORRUPT with "file:line: reason". */
int mstore_get(struct mstore *s, const char *name, struct mstore_record *rec, char *err,
               size_t errlen);

/* Read n records as of one store revision: no transaction lands between
 * two of them (the active, pending and transition records of one
 * ringctl run). MSTORE_OK with recs[i].rev == 0 and recs[i].text == NULL
 * for each absent record; an error (the first malformed record's
 * "file:line: reason") leaves nothing to free. Free each with
 * mstore_record_clear. */
int mstore_get_many(struct mstore *s, const char *const *names, size_t n,
                    struct mstore_record *recs, char *err, size_t errlen);

/* Run a transaction (see struct mstore_backend). failed and new_rev may be
 * NULL. */
int mstore_txn(struct mstore *s, const struct mstore_op *ops, size_t n_ops, size_t *failed,
               uint64_t *new_rev, char *err, size_t errlen);

/* One-op conveniences over mstore_txn. */
int mstore_create_if_absent(struct mstore *s, const char *name, const char *data, size_t len,
                            uint64_t *new_rev, char *err, size_t errlen);
int mstore_cas(struct mstore *s, const char *name, uint64_t expect_rev, const char *data,
               size_t len, uint64_t *new_rev, char *err, size_t errlen);
int mstore_delete(struct mstore *s, const char *name, uint64_t expect_rev, char *err,
                  size_t errlen);

/* Wait until the store may have changed after revision rev: MSTORE_OK
 * (*now_rev: the revision seen, when known, else 0), MSTORE_ENOENT when
 * timeout_ms passed without a write, or an error (the store is down: the
 * caller retries later). A node's store watch (server/storewatch.c). */
int mstore_wait(struct mstore *s, uint64_t rev, int timeout_ms, uint64_t *now_rev, char *err,
                size_t errlen);

/* Leases (etcd): grant one of ttl_s seconds when *lease is 0, else keep
 * *lease alive. MSTORE_OK; MSTORE_ENOENT when it had expired (*lease is
 * set to 0: grant another, and write again what lived on it);
 * MSTORE_EINVAL when the backend has none. mstore_put_leased writes a
 * record the store deletes when the lease expires: a node's liveness
 * record (alive/ID). */
int mstore_lease(struct mstore *s, uint64_t *lease, int ttl_s, char *err, size_t errlen);
int mstore_put_leased(struct mstore *s, const char *name, const char *data, size_t len,
                      uint64_t lease, char *err, size_t errlen);
/* The same, only if the record is absent: MSTORE_ECONFLICT when another
 * holds it. An election: whoever creates it holds the role while its lease
 * lives (role/watch, client/ctl_lease.c). */
int mstore_create_leased(struct mstore *s, const char *name, const char *data, size_t len,
                         uint64_t lease, char *err, size_t errlen);
/* Does the backend have leases? */
bool mstore_has_leases(const struct mstore *s);

/* The records under dir/ ("alive"): *names (malloc'd, *n of them, each
 * without "dir/"; free with mstore_names_free), none when dir is empty or
 * absent. */
int  mstore_list(struct mstore *s, const char *dir, char ***names, size_t *n, char *err,
                 size_t errlen);
void mstore_names_free(char **names, size_t n);

void mstore_record_clear(struct mstore_record *rec);

/* A short description of a result code. */
const char *mstore_strerror(int rc);

/* The backends: a directory (one host), etcd v3 (lib/mstore_etcd.c). */
extern const struct mstore_backend mstore_dir_backend;
extern const struct mstore_backend mstore_etcd_backend;

#endif
