/*
 * mstore: the membership store front end and its directory backend. The
 * directory backend serialises every transaction under flock(DIR/lock),
 * so two admins' checks-then-writes are linearizable; each record is a file
 * whose first line is "# rev N", written crash-safely (temp file, fsync,
 * rename, directory fsync). DIR/revision holds the store-wide revision
 * counter, so a revision is never reused (no ABA on pending). A transaction
 * of several writes is all or nothing across a crash: DIR/txn.journal.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "lib/mstore.h"
#include "lib/util.h"

#define NAME_MAX_LEN 255

struct mstore {
    const struct mstore_backend *be;
    void                        *state;
};

/* Directory backend state. */
struct dir_store {
    char *dir;     /* the directory, without a trailing '/' */
    int   lock_fd; /* DIR/lock, flock'ed around every read and txn */
};

/* A record name is one or more '/'-separated components of
 * [A-Za-z0-9._-], none empty, "." or "..": it stays inside the store. */
static bool
name_ok(const char *name)
{
    size_t i, len = strlen(name), comp = 0;

    if (len == 0 || len > NAME_MAX_LEN) {
        return false;
    }
    for (i = 0; i <= len; i++) {
        char c = name[i];

        if (c == '/' || c == '\0') {
            if (comp == 0 || (comp == 1 && name[i - 1] == '.') ||
                (comp == 2 && name[i - 1] == '.' && name[i - 2] == '.')) {
                return false;
            }
            comp = 0;
            continue;
        }
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-')) {
            return false;
        }
        comp++;
    }
    return true;
}

/*
 * Crash injection (tests only). RC_MSTORE_CRASH_AT=N: the process
 * _exit(137)s just before its Nth file operation in the directory backend
 * (a create, write, fsync, rename, unlink or mkdir), naming it on stderr.
 * With RC_MSTORE_CRASH_TXN=NAME[#K] only the operations of the K-th
 * (default the first) transaction of the process that writes record NAME
 * count: a test stops an admin at each operation of one transaction while
 * its other threads write too.
 */
static uint64_t      crash_ops, crash_txns; /* operations, transactions writing NAME */
static __thread bool crash_in_txn;          /* this thread runs the selected transaction */

static void
crash_point(const char *what, const char *path)
{
    const char *at = getenv("RC_MSTORE_CRASH_AT");

    if (at == NULL || (getenv("RC_MSTORE_CRASH_TXN") != NULL && !crash_in_txn)) {
        return;
    }
    if (__atomic_add_fetch(&crash_ops, 1, __ATOMIC_RELAXED) == strtoull(at, NULL, 10)) {
        fprintf(stderr, "mstore: RC_MSTORE_CRASH_AT=%s: exiting before %s %s\n", at, what, path);
        _exit(137);
    }
}

/* Is this transaction (its writes about to be applied) the one
 * RC_MSTORE_CRASH_TXN selects? Sets crash_in_txn for this thread. */
static void
crash_txn_begin(const struct mstore_op *ops, size_t n_ops)
{
    const char        *sel = getenv("RC_MSTORE_CRASH_TXN");
    char               name[NAME_MAX_LEN + 1];
    unsigned long long k = 1;
    size_t             i;

    crash_in_txn = false;
    if (sel == NULL || getenv("RC_MSTORE_CRASH_AT") == NULL ||
        sscanf(sel, "%255[^#]#%llu", name, &k) < 1) {
        return;
    }
    for (i = 0; i < n_ops; i++) {
        if (ops[i].kind != MSTORE_CHECK && strcmp(ops[i].name, name) == 0) {
            crash_in_txn = __atomic_add_fetch(&crash_txns, 1, __ATOMIC_RELAXED) == k;
            return;
        }
    }
}

/* fsync a directory so a rename or unlink in it is durable. */
static int
fsync_dir(const char *path)
{
    int fd, rc = 0;

    crash_point("fsync", path);
    fd = open(path, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        return -1;
    }
    if (fsync(fd) != 0 && errno != EINVAL) {
        rc = -1;
    }
    close(fd);
    return rc;
}

/* The directory holding path (a malloc'd copy); NULL on ENOMEM. */
static char *
parent_of(const char *path)
{
    char *p = strdup(path), *slash;

    if (p == NULL) {
        return NULL;
    }
    slash = strrchr(p, '/');
    if (slash == NULL) {
        strcpy(p, ".");
    } else if (slash == p) {
        slash[1] = '\0';
    } else {
        *slash = '\0';
    }
    return p;
}

/*
 * Read a whole file into a malloc'd NUL-terminated buffer. MSTORE_ENOENT
 * when it does not exist, MSTORE_ECORRUPT when it is larger than max,
 * MSTORE_EIO otherwise.
 */
static int
read_whole(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen)
{
    struct stat st;
    char       *buf = NULL;
    size_t      n = 0;
    ssize_t     got;
    int         fd, rc = MSTORE_OK;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            return MSTORE_ENOENT;
        }
        util_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return MSTORE_EIO;
    }
    if (fstat(fd, &st) != 0) {
        util_set_err(err, errlen, "%s: %s", path, strerror(errno));
        rc = MSTORE_EIO;
        goto out;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        util_set_err(err, errlen, "%s:1: not a regular file of at most %zu bytes", path, max);
        rc = MSTORE_ECORRUPT;
        goto out;
    }
    buf = malloc((size_t)st.st_size + 1);
    if (buf == NULL) {
        rc = MSTORE_ENOMEM;
        goto out;
    }
    while (n < (size_t)st.st_size) {
        got = read(fd, buf + n, (size_t)st.st_size - n);
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            util_set_err(err, errlen, "%s: %s", path, strerror(errno));
            rc = MSTORE_EIO;
            goto out;
        }
        if (got == 0) {
            break; /* shrank under us: take what is there */
        }
        n += (size_t)got;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return rc;
}

/* Parse "N\n"-style decimal at p (up to the end of line); -1 if it is not
 * a positive 64-bit decimal followed by '\n'. */
static int
parse_rev_digits(const char *p, const char *end, uint64_t *rev)
{
    uint64_t    v = 0;
    const char *start = p;

    while (p < end && *p >= '0' && *p <= '9') {
        if (v > (UINT64_MAX - 9) / 10) {
            return -1;
        }
        v = v * 10 + (uint64_t)(*p - '0');
        p++;
    }
    if (p == start || p >= end || *p != '\n' || v == 0 || v == MSTORE_ANY_REV) {
        return -1;
    }
    *rev = v;
    return 0;
}

/* Read the record file at path into rec (rev from its first line). */
static int
read_record(const char *path, struct mstore_record *rec, char *err, size_t errlen)
{
    static const char prefix[] = "# rev ";
    char             *text = NULL;
    size_t            len = 0;
    int               rc;

    memset(rec, 0, sizeof(*rec));
    snprintf(rec->where, sizeof(rec->where), "%s", path);
    rc = read_whole(path, MSTORE_RECORD_MAX, &text, &len, err, errlen);
    if (rc != MSTORE_OK) {
        return rc;
    }
    if (len < sizeof(prefix) - 1 || memcmp(text, prefix, sizeof(prefix) - 1) != 0 ||
        parse_rev_digits(text + sizeof(prefix) - 1, text + len, &rec->rev) != 0) {
        util_set_err(err, errlen, "%s:1: expected '# rev N' (N > 0) as the first line", path);
        free(text);
        return MSTORE_ECORRUPT;
    }
    rec->text = text;
    rec->len = len;
    return MSTORE_OK;
}

/* Write head and data to path crash-safely: path.tmp, fsync, then rename
 * over path; then (sync_dir) the directory is fsync'd, else the caller
 * does it. */
static int
write_atomic(const char *path, const char *head, size_t head_len, const char *data, size_t len,
             bool sync_dir, char *err, size_t errlen)
{
    char        tmp[MSTORE_WHERE_MAX + 8];
    char       *parent = NULL;
    const char *parts[2] = { head, data };
    size_t      lens[2] = { head_len, len };
    int         fd = -1, rc = MSTORE_EIO, i;

    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
        util_set_err(err, errlen, "%s: path too long", path);
        return MSTORE_EINVAL;
    }
    crash_point("create", tmp);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        util_set_err(err, errlen, "%s: %s", tmp, strerror(errno));
        return MSTORE_EIO;
    }
    crash_point("write", tmp);
    for (i = 0; i < 2; i++) {
        size_t off = 0;

        while (off < lens[i]) {
            ssize_t w = write(fd, parts[i] + off, lens[i] - off);

            if (w < 0 && errno == EINTR) {
                continue;
            }
            if (w < 0) {
                util_set_err(err, errlen, "%s: %s", tmp, strerror(errno));
                goto out;
            }
            off += (size_t)w;
        }
    }
    crash_point("fsync", tmp);
    if (fsync(fd) != 0) {
        util_set_err(err, errlen, "%s: fsync: %s", tmp, strerror(errno));
        goto out;
    }
    close(fd);
    fd = -1;
    crash_point("rename", path);
    if (rename(tmp, path) != 0) {
        util_set_err(err, errlen, "%s: rename: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    parent = sync_dir ? parent_of(path) : NULL;
    if (sync_dir && (parent == NULL || fsync_dir(parent) != 0)) {
        util_set_err(err, errlen, "%s: fsync of the directory failed", path);
        goto out;
    }
    rc = MSTORE_OK;
out:
    if (fd >= 0) {
        close(fd);
    }
    free(parent);
    return rc;
}

/* Create the directories leading to DIR/name (e.g. DIR/history). */
static int
make_parents(const char *dir, const char *name, char *err, size_t errlen)
{
    char        path[MSTORE_WHERE_MAX];
    const char *p = name;
    const char *slash;

    while ((slash = strchr(p, '/')) != NULL) {
        struct stat st;

        snprintf(path, sizeof(path), "%s/%.*s", dir, (int)(slash - name), name);
        p = slash + 1;
        if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
            continue;
        }
        crash_point("mkdir", path);
        if (mkdir(path, 0755) == 0) {
            if (fsync_dir(dir) != 0) {
                util_set_err(err, errlen, "%s: fsync failed", dir);
                return MSTORE_EIO;
            }
        } else if (errno != EEXIST) {
            util_set_err(err, errlen, "%s: %s", path, strerror(errno));
            return MSTORE_EIO;
        }
    }
    return MSTORE_OK;
}

/* Open (creating if needed) a store directory and its lock file. */
static int
dir_open(const char *spec, void **state, char *err, size_t errlen)
{
    struct dir_store *d;
    char              path[MSTORE_WHERE_MAX];
    size_t            len = strlen(spec);
    struct stat       st;

    while (len > 1 && spec[len - 1] == '/') {
        len--;
    }
    if (len == 0 || len > MSTORE_WHERE_MAX - NAME_MAX_LEN - 16) {
        util_set_err(err, errlen, "store: bad directory '%s'", spec);
        return MSTORE_EINVAL;
    }
    if (mkdir(spec, 0755) != 0 && errno != EEXIST) {
        util_set_err(err, errlen, "%s: %s", spec, strerror(errno));
        return MSTORE_EIO;
    }
    if (stat(spec, &st) != 0 || !S_ISDIR(st.st_mode)) {
        util_set_err(err, errlen, "%s: not a directory", spec);
        return MSTORE_EIO;
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL || (d->dir = strndup(spec, len)) == NULL) {
        free(d);
        return MSTORE_ENOMEM;
    }
    snprintf(path, sizeof(path), "%s/lock", d->dir);
    d->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (d->lock_fd < 0) {
        util_set_err(err, errlen, "%s: %s", path, strerror(errno));
        free(d->dir);
        free(d);
        return MSTORE_EIO;
    }
    *state = d;
    return MSTORE_OK;
}

static void
dir_close(void *state)
{
    struct dir_store *d = state;

    if (d == NULL) {
        return;
    }
    close(d->lock_fd);
    free(d->dir);
    free(d);
}

/* flock with EINTR retries. */
static int
lock_fd(int fd, int op, const char *dir, char *err, size_t errlen)
{
    while (flock(fd, op) != 0) {
        if (errno != EINTR) {
            util_set_err(err, errlen, "%s/lock: flock: %s", dir, strerror(errno));
            return MSTORE_EIO;
        }
    }
    return MSTORE_OK;
}

/* The store-wide revision counter (0 when DIR/revision does not exist). */
static int
read_counter(struct dir_store *d, uint64_t *out, char *err, size_t errlen)
{
    char   path[MSTORE_WHERE_MAX];
    char  *text = NULL;
    size_t len = 0;
    int    rc;

    snprintf(path, sizeof(path), "%s/revision", d->dir);
    rc = read_whole(path, MSTORE_RECORD_MAX, &text, &len, err, errlen);
    if (rc == MSTORE_ENOENT) {
        *out = 0;
        return MSTORE_OK;
    }
    if (rc != MSTORE_OK) {
        return rc;
    }
    if (parse_rev_digits(text, text + len, out) != 0) {
        util_set_err(err, errlen, "%s:1: expected a positive revision number", path);
        rc = MSTORE_ECORRUPT;
    }
    free(text);
    return rc;
}

/*
 * The journal. A transaction of several writes is first written whole to
 * DIR/txn.journal.tmp, fsync'd and renamed to DIR/txn.journal: that rename
 * is its commit point. Then its writes are applied and the journal removed.
 * Whoever takes the lock next (a writer, or a reader, which then takes it
 * exclusively) applies a journal left in place by a writer that died: after
 * a crash at any point a transaction is all there or not at all. One write alone needs none (its
 * rename is atomic). Format: JOURNAL_MAGIC, "rev N", then per write
 * "put NAME LEN\n" + LEN bytes + "\n" or "delete NAME", then "end".
 */
#define JOURNAL       "txn.journal"
#define JOURNAL_MAGIC "ringcache-mstore-journal 1\n"
#define JOURNAL_MAX   ((size_t)MSTORE_RECORD_MAX * 16)

/* One write of a transaction, from its ops or from a journal. */
struct jwrite {
    bool        put; /* else delete */
    const char *name;
    const char *data;
    size_t      len;
};

/* The directory backend's own files, which no record may be. */
static bool
dir_reserved(const char *name)
{
    return strcmp(name, "lock") == 0 || strcmp(name, "revision") == 0 ||
           strncmp(name, JOURNAL, strlen(JOURNAL)) == 0;
}

/* A journal of n writes stamped rev (malloc'd, *len bytes); NULL on ENOMEM. */
static char *
journal_encode(const struct jwrite *w, size_t n, uint64_t rev, size_t *len)
{
    size_t i, cap = sizeof(JOURNAL_MAGIC) + 64, off;
    char  *buf;

    for (i = 0; i < n; i++) {
        cap += strlen(w[i].name) + 48 + (w[i].put ? w[i].len : 0);
    }
    buf = malloc(cap);
    if (buf == NULL) {
        return NULL;
    }
    off = (size_t)snprintf(buf, cap, "%srev %" PRIu64 "\n", JOURNAL_MAGIC, rev);
    for (i = 0; i < n; i++) {
        if (!w[i].put) {
            off += (size_t)snprintf(buf + off, cap - off, "delete %s\n", w[i].name);
            continue;
        }
        off += (size_t)snprintf(buf + off, cap - off, "put %s %zu\n", w[i].name, w[i].len);
        memcpy(buf + off, w[i].data, w[i].len);
        off += w[i].len;
        buf[off++] = '\n';
    }
    off += (size_t)snprintf(buf + off, cap - off, "end\n");
    *len = off;
    return buf;
}

/* Parse a journal (text: len bytes and a NUL, edited in place; the
 * writes point into it). MSTORE_ECORRUPT "path:entry K: ..." unless it
 * is whole and well formed. */
static int
journal_parse(char *text, size_t len, const char *path, uint64_t *rev, struct jwrite **out,
              size_t *n, char *err, size_t errlen)
{
    char          *p = text + sizeof(JOURNAL_MAGIC) - 1, *end = text + len, *nl, *sp, *e;
    struct jwrite *w = NULL, *grown;
    size_t         cnt = 0;

    if (len < sizeof(JOURNAL_MAGIC) + 4 || memcmp(text, JOURNAL_MAGIC, p - text) != 0 ||
        memcmp(p, "rev ", 4) != 0 || parse_rev_digits(p + 4, end, rev) != 0) {
        goto bad;
    }
    p = strchr(p, '\n') + 1;
    while ((nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        *nl = '\0';
        if (strcmp(p, "end") == 0 && nl + 1 == end && cnt > 0) {
            *out = w;
            *n = cnt;
            return MSTORE_OK;
        }
        grown = realloc(w, (cnt + 1) * sizeof(*w));
        if (grown == NULL) {
            free(w);
            return MSTORE_ENOMEM;
        }
        w = grown;
        w[cnt] = (struct jwrite){ strncmp(p, "put ", 4) == 0, p + 4, NULL, 0 };
        if (w[cnt].put) {
            sp = strrchr(p, ' ');
            *sp = '\0';
            errno = 0;
            w[cnt].len = strtoull(sp + 1, &e, 10);
            w[cnt].data = nl + 1;
            if (errno != 0 || *e != '\0' || w[cnt].len >= (size_t)(end - w[cnt].data) ||
                w[cnt].data[w[cnt].len] != '\n') {
                break;
            }
            nl = (char *)w[cnt].data + w[cnt].len;
        } else if (strncmp(p, "delete ", 7) == 0) {
            w[cnt].name = p + 7;
        } else {
            break;
        }
        if (!name_ok(w[cnt].name) || dir_reserved(w[cnt].name)) {
            break;
        }
        cnt++;
        p = nl + 1;
    }
    free(w);
bad:
    util_set_err(err, errlen, "%s:entry %zu: malformed journal", path, cnt + 1);
    return MSTORE_ECORRUPT;
}

/* fsync DIR, then the directory of each write in a subdirectory. */
static int
fsync_dirs(struct dir_store *d, const struct jwrite *w, size_t n, char *err, size_t errlen)
{
    char        path[MSTORE_WHERE_MAX];
    const char *slash;
    size_t      i;

    snprintf(path, sizeof(path), "%s", d->dir);
    for (i = 0; i <= n; i++) {
        if (i > 0 && (slash = strrchr(w[i - 1].name, '/')) == NULL) {
            continue;
        } else if (i > 0) {
            snprintf(path, sizeof(path), "%s/%.*s", d->dir, (int)(slash - w[i - 1].name),
                     w[i - 1].name);
        }
        if (fsync_dir(path) != 0) {
            util_set_err(err, errlen, "%s: fsync failed", path);
            return MSTORE_EIO;
        }
    }
    return MSTORE_OK;
}

/*
 * Apply n writes stamped rev, under the exclusive lock: the counter first
 * (never behind a record), then each record (a temp file renamed over it,
 * or an unlink), then one fsync per directory touched. Journaled, the
 * journal is removed last, once all of that is durable; every step can be
 * repeated, so a crash anywhere leaves it to be applied again. A single
 * write is not journaled: the counter is made durable before it.
 */
static int
apply_writes(struct dir_store *d, uint64_t rev, const struct jwrite *w, size_t n, bool journaled,
             char *err, size_t errlen)
{
    char     path[MSTORE_WHERE_MAX], head[64];
    size_t   i;
    uint64_t counter = 0;
    int      rc, hl;

    snprintf(path, sizeof(path), "%s/revision", d->dir);
    rc = read_counter(d, &counter, err, errlen);
    if (rc == MSTORE_OK && counter < rev) {
        hl = snprintf(head, sizeof(head), "%" PRIu64 "\n", rev);
        rc = write_atomic(path, head, (size_t)hl, "", 0, !journaled, err, errlen);
    }
    hl = snprintf(head, sizeof(head), "# rev %" PRIu64 "\n", rev);
    for (i = 0; i < n && rc == MSTORE_OK; i++) {
        snprintf(path, sizeof(path), "%s/%s", d->dir, w[i].name);
        rc = make_parents(d->dir, w[i].name, err, errlen);
        if (rc == MSTORE_OK && w[i].put) {
            rc = write_atomic(path, head, (size_t)hl, w[i].data, w[i].len, false, err, errlen);
        } else if (rc == MSTORE_OK) {
            crash_point("unlink", path);
            if (unlink(path) != 0 && errno != ENOENT) {
                util_set_err(err, errlen, "%s: %s", path, strerror(errno));
                rc = MSTORE_EIO;
            }
        }
    }
    if (rc == MSTORE_OK) {
        rc = fsync_dirs(d, w, n, err, errlen);
    }
    if (rc == MSTORE_OK && journaled) {
        snprintf(path, sizeof(path), "%s/" JOURNAL, d->dir);
        crash_point("unlink", path);
        if (unlink(path) != 0 || fsync_dir(d->dir) != 0) {
            util_set_err(err, errlen, "%s: %s", path, strerror(errno));
            rc = MSTORE_EIO;
        }
    }
    return rc;
}

/* Under the exclusive lock: apply a journal left in place by a writer that
 * died (the transaction happened), unless the counter went past it (a
 * writer that knows no journal moved on). A txn.journal.tmp never got in
 * place (the transaction did not happen): the next journal overwrites it. */
static int
journal_recover(struct dir_store *d, char *err, size_t errlen)
{
    char           path[MSTORE_WHERE_MAX];
    char          *text = NULL;
    struct jwrite *w = NULL;
    size_t         len = 0, n = 0;
    uint64_t       rev = 0, counter = 0;
    int            rc;

    snprintf(path, sizeof(path), "%s/" JOURNAL, d->dir);
    rc = read_whole(path, JOURNAL_MAX, &text, &len, err, errlen);
    if (rc == MSTORE_ENOENT) {
        return MSTORE_OK;
    }
    if (rc == MSTORE_OK &&
        (rc = journal_parse(text, len, path, &rev, &w, &n, err, errlen)) == MSTORE_OK &&
        (rc = read_counter(d, &counter, err, errlen)) == MSTORE_OK) {
        /* Past it: nothing to apply, the journal is only removed. */
        rc = apply_writes(d, rev, w, counter > rev ? 0 : n, true, err, errlen);
    }
    free(w);
    free(text);
    return rc;
}

/* Lock the store to read it: shared, or exclusive when a journal is in
 * place, which is applied first: no reader sees a transaction half
 * applied. The caller unlocks (flock LOCK_UN). */
static int
lock_read(struct dir_store *d, char *err, size_t errlen)
{
    char path[MSTORE_WHERE_MAX];
    int  rc = lock_fd(d->lock_fd, LOCK_SH, d->dir, err, errlen);

    snprintf(path, sizeof(path), "%s/" JOURNAL, d->dir);
    if (rc != MSTORE_OK || access(path, F_OK) != 0) {
        return rc;
    }
    flock(d->lock_fd, LOCK_UN);
    rc = lock_fd(d->lock_fd, LOCK_EX, d->dir, err, errlen);
    if (rc == MSTORE_OK && (rc = journal_recover(d, err, errlen)) != MSTORE_OK) {
        flock(d->lock_fd, LOCK_UN);
    }
    return rc;
}

/* Read one record under a shared lock (so the pending pair is seen whole
 * relative to other admins' transactions). */
static int
dir_get(void *state, const char *name, struct mstore_record *rec, char *err, size_t errlen)
{
    struct dir_store *d = state;
    char              path[MSTORE_WHERE_MAX];
    int               rc;

    snprintf(path, sizeof(path), "%s/%s", d->dir, name);
    rc = lock_read(d, err, errlen);
    if (rc != MSTORE_OK) {
        return rc;
    }
    rc = read_record(path, rec, err, errlen);
    flock(d->lock_fd, LOCK_UN);
    if (rc == MSTORE_ENOENT) {
        util_set_err(err, errlen, "%s: no such record", path);
    }
    return rc;
}

/* Read n records under one shared lock: no transaction (which holds the
 * lock exclusively) lands between them. */
static int
dir_get_many(void *state, const char *const *names, size_t n, struct mstore_record *recs, char *err,
             size_t errlen)
{
    struct dir_store *d = state;
    char              path[MSTORE_WHERE_MAX];
    size_t            i;
    int               rc;

    rc = lock_read(d, err, errlen);
    if (rc != MSTORE_OK) {
        return rc;
    }
    for (i = 0; i < n && rc == MSTORE_OK; i++) {
        snprintf(path, sizeof(path), "%s/%s", d->dir, names[i]);
        rc = read_record(path, &recs[i], err, errlen);
        if (rc == MSTORE_ENOENT) {
            rc = MSTORE_OK; /* absent: rev 0, no text */
        }
    }
    flock(d->lock_fd, LOCK_UN);
    return rc;
}

/* Check every op's condition against the records (the counter raised to
 * any record's revision above it: a lost counter file never makes a
 * revision be reused). MSTORE_ECONFLICT with *failed at the first that
 * does not hold. */
static int
dir_check(struct dir_store *d, const struct mstore_op *ops, size_t n_ops, uint64_t *counter,
          size_t *failed, char *err, size_t errlen)
{
    char   path[MSTORE_WHERE_MAX];
    size_t i;
    int    rc;

    for (i = 0; i < n_ops; i++) {
        struct mstore_record cur;
        uint64_t             have;
        bool                 ok;

        snprintf(path, sizeof(path), "%s/%s", d->dir, ops[i].name);
        rc = read_record(path, &cur, err, errlen);
        if (rc != MSTORE_OK && rc != MSTORE_ENOENT) {
            return rc;
        }
        have = rc == MSTORE_OK ? cur.rev : 0;
        mstore_record_clear(&cur);
        if (have > *counter) {
            *counter = have;
        }
        switch (ops[i].kind) {
        case MSTORE_CHECK:
            ok = have == ops[i].rev;
            break;
        case MSTORE_CREATE:
            ok = have == 0;
            break;
        default:
            ok = ops[i].rev == MSTORE_ANY_REV || have == ops[i].rev;
            break;
        }
        if (!ok) {
            if (failed != NULL) {
                *failed = i;
            }
            util_set_err(err, errlen, "%s: revision is %" PRIu64 ", expected %s%" PRIu64, path,
                         have, ops[i].kind == MSTORE_CREATE ? "absent, " : "", ops[i].rev);
            return MSTORE_ECONFLICT;
        }
    }
    return MSTORE_OK;
}

/*
 * Under the exclusive flock (two admins' transactions are serialised,
 * which makes create_if_absent and CAS linearizable): finish a transaction
 * a dead writer left, check every op's condition, then stamp a new
 * revision and apply the writes, through the journal when there are
 * several (all or nothing across a crash).
 */
static int
dir_txn(void *state, const struct mstore_op *ops, size_t n_ops, size_t *failed, uint64_t *new_rev,
        char *err, size_t errlen)
{
    struct dir_store *d = state;
    struct jwrite    *w = calloc(n_ops + 1, sizeof(*w));
    char              path[MSTORE_WHERE_MAX];
    char             *journal = NULL;
    uint64_t          counter = 0;
    size_t            i, n_w = 0, jlen = 0;
    int               rc;

    for (i = 0; i < n_ops && w != NULL; i++) {
        if (ops[i].kind != MSTORE_CHECK) {
            w[n_w++] = (struct jwrite){ ops[i].kind != MSTORE_DELETE, ops[i].name, ops[i].data,
                                        ops[i].len };
        }
        if (dir_reserved(ops[i].name)) {
            util_set_err(err, errlen, "%s: a file of the store, not a record", ops[i].name);
            free(w);
            return MSTORE_EINVAL;
        }
    }
    rc = w == NULL ? MSTORE_ENOMEM : lock_fd(d->lock_fd, LOCK_EX, d->dir, err, errlen);
    if (rc != MSTORE_OK) {
        free(w);
        return rc;
    }
    if ((rc = journal_recover(d, err, errlen)) != MSTORE_OK ||
        (rc = read_counter(d, &counter, err, errlen)) != MSTORE_OK ||
        (rc = dir_check(d, ops, n_ops, &counter, failed, err, errlen)) != MSTORE_OK || n_w == 0) {
        goto out; /* checks only: nothing to stamp */
    }
    crash_txn_begin(ops, n_ops);
    if (n_w > 1) {
        journal = journal_encode(w, n_w, counter + 1, &jlen);
        snprintf(path, sizeof(path), "%s/" JOURNAL, d->dir);
        rc = journal == NULL      ? MSTORE_ENOMEM
             : jlen > JOURNAL_MAX ? MSTORE_EINVAL
                                  : write_atomic(path, journal, jlen, "", 0, true, err, errlen);
    }
    if (rc == MSTORE_OK) {
        /* Journaled, it happened even if this fails: the next to lock
         * the store applies it. */
        rc = apply_writes(d, counter + 1, w, n_w, n_w > 1, err, errlen);
    }
    if (rc == MSTORE_OK && new_rev != NULL) {
        *new_rev = counter + 1;
    }
out:
    crash_in_txn = false;
    flock(d->lock_fd, LOCK_UN);
    free(journal);
    free(w);
    return rc;
}

/* Poll DIR/revision (every txn that writes raises it) every 100 ms; a
 * journal a dead writer left is applied first. */
static int
dir_wait(void *state, uint64_t rev, int timeout_ms, uint64_t *now_rev, char *err, size_t errlen)
{
    struct dir_store *d = state;
    int64_t           deadline = util_now_ms() + timeout_ms;
    char              path[MSTORE_WHERE_MAX];

    snprintf(path, sizeof(path), "%s/" JOURNAL, d->dir);
    for (;;) {
        uint64_t now = 0;
        int      rc = MSTORE_OK;

        if (access(path, F_OK) == 0 && (rc = lock_read(d, err, errlen)) == MSTORE_OK) {
            flock(d->lock_fd, LOCK_UN);
        }
        if (rc != MSTORE_OK || (rc = read_counter(d, &now, err, errlen)) != MSTORE_OK) {
            return rc;
        }
        if (now > rev) {
            *now_rev = now;
            return MSTORE_OK;
        }
        if (util_now_ms() >= deadline) {
            return MSTORE_ENOENT;
        }
        {
            struct timespec ts = { 0, 100 * 1000 * 1000 };

            nanosleep(&ts, NULL);
        }
    }
}

/* The record names in DIR/dir (no temp files), read under the lock. */
static int
dir_list(void *state, const char *dir, char ***names, size_t *n, char *err, size_t errlen)
{
    struct dir_store *d = state;
    char              path[MSTORE_WHERE_MAX];
    DIR              *dh;
    struct dirent    *de;
    char            **out = NULL;
    size_t            cnt = 0;
    int               rc;

    *names = NULL;
    *n = 0;
    snprintf(path, sizeof(path), "%s/%s", d->dir, dir);
    rc = lock_read(d, err, errlen);
    if (rc != MSTORE_OK) {
        return rc;
    }
    dh = opendir(path);
    if (dh == NULL) {
        rc = errno == ENOENT ? MSTORE_OK : MSTORE_EIO;
        util_set_err(err, errlen, "%s: %s", path, strerror(errno));
        flock(d->lock_fd, LOCK_UN);
        return rc;
    }
    while ((de = readdir(dh)) != NULL) {
        size_t len = strlen(de->d_name);
        char **grown;

        if (de->d_name[0] == '.' || (len > 4 && strcmp(de->d_name + len - 4, ".tmp") == 0)) {
            continue;
        }
        grown = realloc(out, (cnt + 1) * sizeof(*out));
        if (grown == NULL || (grown[cnt] = strdup(de->d_name)) == NULL) {
            out = grown != NULL ? grown : out;
            closedir(dh);
            flock(d->lock_fd, LOCK_UN);
            mstore_names_free(out, cnt);
            return MSTORE_ENOMEM;
        }
        out = grown;
        cnt++;
    }
    closedir(dh);
    flock(d->lock_fd, LOCK_UN);
    *names = out;
    *n = cnt;
    return MSTORE_OK;
}

const struct mstore_backend mstore_dir_backend = {
    .name = "dir",
    .open = dir_open,
    .get = dir_get,
    .get_many = dir_get_many,
    .txn = dir_txn,
    .wait = dir_wait,
    .list = dir_list,
    .close = dir_close,
};

struct mstore *
mstore_open(const char *spec, char *err, size_t errlen)
{
    const struct mstore_backend *be = &mstore_dir_backend;
    struct mstore               *s;
    int                          rc;

    if (spec == NULL || spec[0] == '\0') {
        util_set_err(err, errlen, "no store given (--store DIR)");
        return NULL;
    }
    if (strncmp(spec, "etcd://", 7) == 0 || strncmp(spec, "etcds://", 8) == 0) {
        be = &mstore_etcd_backend;
    } else if (strstr(spec, "://") != NULL) {
        util_set_err(err, errlen, "%s: unknown store (DIR, dir:DIR, etcd:// or etcds://)", spec);
        return NULL;
    }
    if (be == &mstore_dir_backend && strncmp(spec, "dir:", 4) == 0) {
        spec += 4;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        util_set_err(err, errlen, "out of memory");
        return NULL;
    }
    s->be = be;
    rc = be->open(spec, &s->state, err, errlen);
    if (rc != MSTORE_OK) {
        if (rc == MSTORE_ENOMEM) {
            util_set_err(err, errlen, "out of memory");
        }
        free(s);
        return NULL;
    }
    return s;
}

void
mstore_close(struct mstore *s)
{
    if (s == NULL) {
        return;
    }
    s->be->close(s->state);
    free(s);
}

int
mstore_get(struct mstore *s, const char *name, struct mstore_record *rec, char *err, size_t errlen)
{
    memset(rec, 0, sizeof(*rec));
    if (!name_ok(name)) {
        util_set_err(err, errlen, "bad record name '%s'", name);
        return MSTORE_EINVAL;
    }
    return s->be->get(s->state, name, rec, err, errlen);
}

int
mstore_get_many(struct mstore *s, const char *const *names, size_t n, struct mstore_record *recs,
                char *err, size_t errlen)
{
    size_t i;
    int    rc;

    memset(recs, 0, n * sizeof(*recs));
    for (i = 0; i < n; i++) {
        if (!name_ok(names[i])) {
            util_set_err(err, errlen, "bad record name '%s'", names[i]);
            return MSTORE_EINVAL;
        }
    }
    rc = s->be->get_many(s->state, names, n, recs, err, errlen);
    if (rc != MSTORE_OK) {
        for (i = 0; i < n; i++) {
            mstore_record_clear(&recs[i]);
        }
    }
    return rc;
}

int
mstore_txn(struct mstore *s, const struct mstore_op *ops, size_t n_ops, size_t *failed,
           uint64_t *new_rev, char *err, size_t errlen)
{
    size_t i;

    for (i = 0; i < n_ops; i++) {
        if (!name_ok(ops[i].name) ||
            ((ops[i].kind == MSTORE_CREATE || ops[i].kind == MSTORE_PUT) &&
             (ops[i].len > MSTORE_RECORD_MAX - 64 || (ops[i].len > 0 && ops[i].data == NULL)))) {
            util_set_err(err, errlen, "bad record name or data for '%s'", ops[i].name);
            if (failed != NULL) {
                *failed = i;
            }
            return MSTORE_EINVAL;
        }
    }
    return s->be->txn(s->state, ops, n_ops, failed, new_rev, err, errlen);
}

int
mstore_create_if_absent(struct mstore *s, const char *name, const char *data, size_t len,
                        uint64_t *new_rev, char *err, size_t errlen)
{
    struct mstore_op op = { MSTORE_CREATE, name, 0, data, len };

    return mstore_txn(s, &op, 1, NULL, new_rev, err, errlen);
}

int
mstore_cas(struct mstore *s, const char *name, uint64_t expect_rev, const char *data, size_t len,
           uint64_t *new_rev, char *err, size_t errlen)
{
    struct mstore_op op = { MSTORE_PUT, name, expect_rev, data, len };

    return mstore_txn(s, &op, 1, NULL, new_rev, err, errlen);
}

int
mstore_delete(struct mstore *s, const char *name, uint64_t expect_rev, char *err, size_t errlen)
{
    struct mstore_op op = { MSTORE_DELETE, name, expect_rev, NULL, 0 };

    return mstore_txn(s, &op, 1, NULL, NULL, err, errlen);
}

int
mstore_wait(struct mstore *s, uint64_t rev, int timeout_ms, uint64_t *now_rev, char *err,
            size_t errlen)
{
    *now_rev = 0;
    return s->be->wait(s->state, rev, timeout_ms, now_rev, err, errlen);
}

int
mstore_lease(struct mstore *s, uint64_t *lease, int ttl_s, char *err, size_t errlen)
{
    if (s->be->lease == NULL) {
        util_set_err(err, errlen, "the %s store has no leases", s->be->name);
        return MSTORE_EINVAL;
    }
    return s->be->lease(s->state, lease, ttl_s, err, errlen);
}

static int
put_leased(struct mstore *s, const char *name, const char *data, size_t len, uint64_t lease,
           bool create, char *err, size_t errlen)
{
    if (s->be->put_leased == NULL) {
        util_set_err(err, errlen, "the %s store has no leases", s->be->name);
        return MSTORE_EINVAL;
    }
    if (!name_ok(name) || len > MSTORE_RECORD_MAX - 64) {
        util_set_err(err, errlen, "bad record name or data for '%s'", name);
        return MSTORE_EINVAL;
    }
    return s->be->put_leased(s->state, name, data, len, lease, create, err, errlen);
}

int
mstore_put_leased(struct mstore *s, const char *name, const char *data, size_t len, uint64_t lease,
                  char *err, size_t errlen)
{
    return put_leased(s, name, data, len, lease, false, err, errlen);
}

int
mstore_create_leased(struct mstore *s, const char *name, const char *data, size_t len,
                     uint64_t lease, char *err, size_t errlen)
{
    return put_leased(s, name, data, len, lease, true, err, errlen);
}

bool
mstore_has_leases(const struct mstore *s)
{
    return s->be->lease != NULL;
}

int
mstore_list(struct mstore *s, const char *dir, char ***names, size_t *n, char *err, size_t errlen)
{
    *names = NULL;
    *n = 0;
    if (!name_ok(dir)) {
        util_set_err(err, errlen, "bad record directory '%s'", dir);
        return MSTORE_EINVAL;
    }
    return s->be->list(s->state, dir, names, n, err, errlen);
}

void
mstore_names_free(char **names, size_t n)
{
    size_t i;

    for (i = 0; names != NULL && i < n; i++) {
        free(names[i]);
    }
    free(names);
}

void
mstore_record_clear(struct mstore_record *rec)
{
    free(rec->text);
    rec->text = NULL;
    rec->len = 0;
    rec->rev = 0;
}

const char *
mstore_strerror(int rc)
{
    switch (rc) {
    case MSTORE_OK:
        return "ok";
    case MSTORE_ENOENT:
        return "no such record";
    case MSTORE_ECONFLICT:
        return "revision conflict";
    case MSTORE_EIO:
        return "I/O error";
    case MSTORE_ECORRUPT:
        return "malformed record";
    case MSTORE_EINVAL:
        return "invalid argument";
    case MSTORE_ENOMEM:
        return "out of memory";
    default:
        return "unknown error";
    }
}
