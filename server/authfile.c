/*
 * authfile: the -Y file's parser and the login check (server/authfile.h).
 * The table is a fixed array of at most AUTHFILE_USERS_MAX entries,
 * written once by the parse and only read afterwards.
 */
#include "config.h"
#include "server/authfile.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/peerauth.h"

/* A file this long holds more than AUTHFILE_USERS_MAX lines of at most
 * AUTHFILE_LINE_MAX bytes, whatever follows: reading one byte past the
 * largest acceptable file is enough to name the offending line. */
#define AUTHFILE_READ_MAX (AUTHFILE_USERS_MAX * AUTHFILE_LINE_MAX + 1)

struct authfile_user {
    char   user[AUTHFILE_LINE_MAX];
    size_t ulen;
    char   pass[AUTHFILE_LINE_MAX];
    size_t plen;
};

struct authfile {
    size_t               n;
    struct authfile_user users[AUTHFILE_USERS_MAX];
};

static void __attribute__((format(printf, 3, 4)))
fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/*
 * Check one line [p, p + len) (its "\n" removed, "\r" kept) and store it
 * in u. NULL, or the reason it is refused.
 */
static const char *
parse_line(const char *p, size_t len, struct authfile_user *u)
{
    const char *colon;

    if (len > 0 && p[len - 1] == '\r') {
        len--;
    }
    if (len == 0) {
        return "an empty line (each line is user:password)";
    }
    if (memchr(p, '\0', len) != NULL) {
        return "a NUL byte";
    }
    if (memchr(p, '\r', len) != NULL) {
        return "a carriage return inside the line";
    }
    colon = memchr(p, ':', len);
    if (colon == NULL) {
        return "no ':' (each line is user:password)";
    }
    u->ulen = (size_t)(colon - p);
    u->plen = len - u->ulen - 1;
    if (u->ulen == 0) {
        return "an empty user name";
    }
    if (u->plen == 0) {
        return "an empty password";
    }
    if (memchr(p, ' ', u->ulen) != NULL) {
        return "a space in the user name (a login sends `user password`, so it could never "
               "log in)";
    }
    memcpy(u->user, p, u->ulen);
    memcpy(u->pass, colon + 1, u->plen);
    return NULL;
}

/* Parse; see authfile.h. */
struct authfile *
authfile_parse(const char *name, const char *text, size_t len, char *err, size_t errlen)
{
    struct authfile *a = calloc(1, sizeof(*a));
    const char      *p = text, *end = text + len;
    unsigned         line = 0;

    if (a == NULL) {
        fail(err, errlen, "%s: out of memory", name);
        return NULL;
    }
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t      n = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        const char *why;

        line++;
        /* The limit counts the "\n", as memcached's fgets does. */
        if (n + (nl != NULL) > AUTHFILE_LINE_MAX) {
            fail(err, errlen, "%s:%u: a line over %d bytes (memcached's limit)", name, line,
                 AUTHFILE_LINE_MAX);
            goto fail;
        }
        if (a->n == AUTHFILE_USERS_MAX) {
            fail(err, errlen, "%s:%u: more than %d users (memcached's limit)", name, line,
                 AUTHFILE_USERS_MAX);
            goto fail;
        }
        why = parse_line(p, n, &a->users[a->n]);
        if (why != NULL) {
            fail(err, errlen, "%s:%u: %s", name, line, why);
            goto fail;
        }
        a->n++;
        p += n + (nl != NULL);
    }
    if (a->n == 0) {
        fail(err, errlen, "%s: no user:password line (the file is empty)", name);
        goto fail;
    }
    return a;
fail:
    authfile_free(a);
    return NULL;
}

/* Load; see authfile.h. */
struct authfile *
authfile_load(const char *path, char *err, size_t errlen)
{
    char             buf[AUTHFILE_READ_MAX];
    FILE            *f = fopen(path, "r");
    struct authfile *a;
    size_t           n;

    if (f == NULL) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        return NULL;
    }
    n = fread(buf, 1, sizeof(buf), f);
    if (ferror(f)) {
        fail(err, errlen, "%s: %s", path, strerror(errno));
        fclose(f);
        return NULL;
    }
    fclose(f);
    a = authfile_parse(path, buf, n, err, errlen);
    explicit_bzero(buf, sizeof(buf));
    return a;
}

/* Check a login; see authfile.h. */
bool
authfile_check(const struct authfile *a, const char *user, size_t ulen, const char *pass,
               size_t plen)
{
    unsigned ok = 0;
    size_t   i;

    /* Bitwise, not &&: both comparisons run for every entry. */
    for (i = 0; i < a->n; i++) {
        const struct authfile_user *u = &a->users[i];

        ok |= (unsigned)peerauth_equal(user, ulen, u->user, u->ulen) &
              (unsigned)peerauth_equal(pass, plen, u->pass, u->plen);
    }
    return ok != 0;
}

size_t
authfile_count(const struct authfile *a)
{
    return a->n;
}

void
authfile_free(struct authfile *a)
{
    if (a != NULL) {
        /* The passwords do not outlive the table in freed memory. */
        explicit_bzero(a, sizeof(*a));
        free(a);
    }
}
