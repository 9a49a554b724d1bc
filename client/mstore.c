/*
 * mstore: the membership store front end and its directory backend. The
 * directory backend serialises every transaction under flock(DIR/lock),
 * so two admins' checks-then-writes are linearizable; each record is a file
 * whose first line is "# rev N", written crash-safely (temp file, fsync,
 * rename or link, directory fsync). DIR/revision holds the store-wide
 * revision counter, so a revision is never reused (no ABA on pending).
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
#include "client/mstore.h"
#include "ring/util.h"

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
 * (a create, write, fsync, rename, link, unlink or mkdir), after naming it
 * on stderr. With RC_MSTORE_CRASH_TXN=NAME[#K] only the operations of the
 * K-th (default the first) transaction of the process that writes record
 * NAME count, so a test can stop an admin at each operation of one
 * transaction while its other threads write too.
 */
static uint64_t      crash_ops;    /* operations counted so far (atomic) */
static uint64_t      crash_txns;   /* transactions that wrote NAME so far (atomic) */
static __thread bool crash_in_txn; /* this thread runs the selected transaction */

static void
crash_point(const char *what, const char *path)
{
    const char *at = getenv("RC_MSTORE_CRASH_AT");
    uint64_t    n;

    if (at == NULL || (getenv("RC_MSTORE_CRASH_TXN") != NULL && !crash_in_txn)) {
        return;
    }
    n = __atomic_add_fetch(&crash_ops, 1, __ATOMIC_RELAXED);
    if (n == strtoull(at, NULL, 10)) {
        fprintf(stderr, "mstore: RC_MSTORE_CRASH_AT=%s: exiting before %s %s\n", at, what, path);
        _exit(137);
    }
}

/* Is this transaction (its writes about to be applied) the one
 * RC_MSTORE_CRASH_TXN selects? Sets crash_in_txn for this thread. */
static void
crash_txn_begin(const struct mstore_op *ops, size_t n_ops)
{
    const char *sel = getenv("RC_MSTORE_CRASH_TXN");
    const char *hash;
    size_t      i, len;
    uint64_t    k = 1;

    crash_in_txn = false;
    if (sel == NULL || getenv("RC_MSTORE_CRASH_AT") == NULL) {
        return;
    }
    hash = strchr(sel, '#');
    len = hash != NULL ? (size_t)(hash - sel) : strlen(sel);
    if (hash != NULL) {
        k = strtoull(hash + 1, NULL, 10);
    }
    for (i = 0; i < n_ops; i++) {
        if (ops[i].kind != MSTORE_CHECK && strlen(ops[i].name) == len &&
            memcmp(ops[i].name, sel, len) == 0) {
            crash_in_txn = __atomic_add_fetch(&crash_txns, 1, __ATOMIC_RELAXED) == k;
            return;
        }
    }
}

/* fsync a directory so a rename, link or unlink in it is durable. */
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
 * when it does not exist, MSTORE_ECORRUPT when it is larger than the store
 * accepts, MSTORE_EIO otherwise.
 */
static int
read_whole(const char *path, char **out, size_t *len, char *err, size_t errlen)
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
    if (!S_ISREG(st.st_mode) || st.st_size > (off_t)MSTORE_RECORD_MAX) {
        util_set_err(err, errlen, "%s:1: not a regular file of at most %u bytes", path,
                     MSTORE_RECORD_MAX);
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
    rc = read_whole(path, &text, &len, err, errlen);
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

/* Write content to path crash-safely: path.tmp, fsync, then rename over
 * path (exclusive = false) or link to path, which fails if it exists
 * (exclusive = true: the O_EXCL create, but never half-written). Then the
 * directory is fsync'd. MSTORE_ECONFLICT when an exclusive create finds
 * the name taken. */
static int
write_atomic(const char *path, const char *head, size_t head_len, const char *data, size_t len,
             bool exclusive, char *err, size_t errlen)
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
    if (exclusive) {
        crash_point("link", path);
        if (link(tmp, path) != 0) {
            int e = errno;

            unlink(tmp);
            if (e == EEXIST) {
                util_set_err(err, errlen, "%s: exists", path);
                rc = MSTORE_ECONFLICT;
            } else {
                util_set_err(err, errlen, "%s: %s", path, strerror(e));
            }
            goto out;
        }
        crash_point("unlink", tmp);
        unlink(tmp);
    } else if (crash_point("rename", path), rename(tmp, path) != 0) {
        util_set_err(err, errlen, "%s: rename: %s", path, strerror(errno));
        unlink(tmp);
        goto out;
    }
    parent = parent_of(path);
    if (parent == NULL || fsync_dir(parent) != 0) {
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
        snprintf(path, sizeof(path), "%s/%.*s", dir, (int)(slash - name), name);
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
        p = slash + 1;
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

/* Read one record under a shared lock (so the pending pair is seen whole
 * relative to other admins' transactions). */
static int
dir_get(void *state, const char *name, struct mstore_record *rec, char *err, size_t errlen)
{
    struct dir_store *d = state;
    char              path[MSTORE_WHERE_MAX];
    int               rc;

    snprintf(path, sizeof(path), "%s/%s", d->dir, name);
    rc = lock_fd(d->lock_fd, LOCK_SH, d->dir, err, errlen);
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
dir_get_many(void *state, const char *const *names, size_t n, struct mstore_record *recs,
             char *err, size_t errlen)
{
    struct dir_store *d = state;
    char              path[MSTORE_WHERE_MAX];
    size_t            i;
    int               rc;

    rc = lock_fd(d->lock_fd, LOCK_SH, d->dir, err, errlen);
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

/* The store-wide revision counter (0 when DIR/revision does not exist). */
static int
read_counter(struct dir_store *d, uint64_t *out, char *err, size_t errlen)
{
    char   path[MSTORE_WHERE_MAX];
    char  *text = NULL;
    size_t len = 0;
    int    rc;

    snprintf(path, sizeof(path), "%s/revision", d->dir);
    rc = read_whole(path, &text, &len, err, errlen);
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
 * Check every op's condition, then stamp a new revision (the counter is
 * written first, so it is never behind a record), then apply the writes in
 * order. All under the exclusive flock: two admins' transactions are
 * serialised, which makes create_if_absent and CAS linearizable.
 */
static int
dir_txn(void *state, const struct mstore_op *ops, size_t n_ops, size_t *failed, uint64_t *new_rev,
        char *err, size_t errlen)
{
    struct dir_store *d = state;
    char              path[MSTORE_WHERE_MAX];
    char              head[64];
    uint64_t          counter = 0, rev;
    size_t            i;
    int               rc, hl;

    rc = lock_fd(d->lock_fd, LOCK_EX, d->dir, err, errlen);
    if (rc != MSTORE_OK) {
        return rc;
    }
    rc = read_counter(d, &counter, err, errlen);
    if (rc != MSTORE_OK) {
        goto out;
    }
    for (i = 0; i < n_ops; i++) {
        struct mstore_record cur;
        uint64_t             have;
        bool                 ok;

        snprintf(path, sizeof(path), "%s/%s", d->dir, ops[i].name);
        rc = read_record(path, &cur, err, errlen);
        if (rc != MSTORE_OK && rc != MSTORE_ENOENT) {
            goto out;
        }
        have = rc == MSTORE_OK ? cur.rev : 0;
        mstore_record_clear(&cur);
        rc = MSTORE_OK;
        if (have > counter) {
            counter = have; /* a lost counter file: never reuse a rev */
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
            rc = MSTORE_ECONFLICT;
            goto out;
        }
    }
    for (i = 0; i < n_ops && ops[i].kind == MSTORE_CHECK; i++) {
    }
    if (i == n_ops) {
        goto out; /* checks only: nothing to stamp */
    }
    crash_txn_begin(ops, n_ops);
    rev = counter + 1;
    hl = snprintf(head, sizeof(head), "%" PRIu64 "\n", rev);
    snprintf(path, sizeof(path), "%s/revision", d->dir);
    rc = write_atomic(path, head, (size_t)hl, "", 0, false, err, errlen);
    if (rc != MSTORE_OK) {
        goto out;
    }
    hl = snprintf(head, sizeof(head), "# rev %" PRIu64 "\n", rev);
    for (i = 0; i < n_ops; i++) {
        snprintf(path, sizeof(path), "%s/%s", d->dir, ops[i].name);
        switch (ops[i].kind) {
        case MSTORE_CHECK:
            break;
        case MSTORE_CREATE:
        case MSTORE_PUT:
            rc = make_parents(d->dir, ops[i].name, err, errlen);
            if (rc == MSTORE_OK) {
                rc = write_atomic(path, head, (size_t)hl, ops[i].data, ops[i].len,
                                  ops[i].kind == MSTORE_CREATE, err, errlen);
            }
            break;
        case MSTORE_DELETE:
            crash_point("unlink", path);
            if (unlink(path) != 0 && errno != ENOENT) {
                util_set_err(err, errlen, "%s: %s", path, strerror(errno));
                rc = MSTORE_EIO;
            } else {
                char *parent = parent_of(path);

                if (parent == NULL || fsync_dir(parent) != 0) {
                    util_set_err(err, errlen, "%s: fsync of the directory failed", path);
                    rc = MSTORE_EIO;
                }
                free(parent);
            }
            break;
        }
        if (rc != MSTORE_OK) {
            if (failed != NULL) {
                *failed = i;
            }
            goto out;
        }
    }
    if (new_rev != NULL) {
        *new_rev = rev;
    }
out:
    crash_in_txn = false;
    flock(d->lock_fd, LOCK_UN);
    return rc;
}

/* Poll DIR/revision (every txn that writes raises it) every 100 ms. */
static int
dir_wait(void *state, uint64_t rev, int timeout_ms, uint64_t *now_rev, char *err, size_t errlen)
{
    struct dir_store *d = state;
    int64_t           deadline = util_now_ms() + timeout_ms;

    for (;;) {
        uint64_t now = 0;
        int      rc = read_counter(d, &now, err, errlen);

        if (rc != MSTORE_OK) {
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

/* The record names in DIR/dir (no temp files). */
static int
dir_list(void *state, const char *dir, char ***names, size_t *n, char *err, size_t errlen)
{
    struct dir_store *d = state;
    char              path[MSTORE_WHERE_MAX];
    DIR              *dh;
    struct dirent    *de;
    char            **out = NULL;
    size_t            cnt = 0;

    *names = NULL;
    *n = 0;
    snprintf(path, sizeof(path), "%s/%s", d->dir, dir);
    dh = opendir(path);
    if (dh == NULL) {
        if (errno == ENOENT) {
            return MSTORE_OK;
        }
        util_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return MSTORE_EIO;
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
            mstore_names_free(out, cnt);
            return MSTORE_ENOMEM;
        }
        out = grown;
        cnt++;
    }
    closedir(dh);
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
