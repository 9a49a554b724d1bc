/*
 * authfile_fuzz: libFuzzer target for the -Y file's parser
 * (server/authfile.h). Any input must parse or fail with one
 * "f:<line>: <reason>" (or "f: <reason>") line naming a line of the input;
 * what parses must hold every line's user:password as a login that
 * succeeds, and refuse the same login with its password cut short unless
 * another line says exactly that.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/authfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct pair {
    const char *user, *pass;
    size_t      ulen, plen;
};

/* Is (user, pass) one of the n pairs? */
static int
listed(const struct pair *p, size_t n, const char *user, size_t ulen, const char *pass,
       size_t plen)
{
    size_t i;

    for (i = 0; i < n; i++) {
        if (p[i].ulen == ulen && p[i].plen == plen && memcmp(p[i].user, user, ulen) == 0 &&
            memcmp(p[i].pass, pass, plen) == 0) {
            return 1;
        }
    }
    return 0;
}

/* The parsed lines again, the parser's way: split at "\n", one trailing
 * "\r" dropped, user before the first ':'. */
static size_t
split(const char *text, size_t len, struct pair *p)
{
    const char *s = text, *end = text + len;
    size_t      n = 0;

    while (s < end && n < AUTHFILE_USERS_MAX) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl != NULL ? nl : end;
        const char *colon;

        if (e > s && e[-1] == '\r') {
            e--;
        }
        colon = memchr(s, ':', (size_t)(e - s));
        if (colon == NULL) {
            abort(); /* the parser accepted a line without ':' */
        }
        p[n].user = s;
        p[n].ulen = (size_t)(colon - s);
        p[n].pass = colon + 1;
        p[n].plen = (size_t)(e - colon - 1);
        n++;
        s = nl != NULL ? nl + 1 : end;
    }
    return n;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char             err[AUTHFILE_ERR_MAX];
    struct pair      p[AUTHFILE_USERS_MAX];
    struct authfile *a;
    const char      *text = (const char *)data;
    size_t           n, i, lines = 1;

    err[0] = '\0';
    a = authfile_parse("f", text, size, err, sizeof(err));
    if (a == NULL) {
        unsigned long at;
        char         *end;

        for (i = 0; i < size; i++) {
            lines += data[i] == '\n';
        }
        /* "f: reason" or "f:<line>: reason" with a line of the input. */
        if (strchr(err, '\n') != NULL || strncmp(err, "f:", 2) != 0) {
            abort();
        }
        if (err[2] != ' ') {
            at = strtoul(err + 2, &end, 10);
            if (err[2] < '1' || err[2] > '9' || at > lines || strncmp(end, ": ", 2) != 0) {
                abort();
            }
        }
        return 0;
    }
    n = split(text, size, p);
    if (n == 0 || n != authfile_count(a)) {
        abort();
    }
    for (i = 0; i < n; i++) {
        if (!authfile_check(a, p[i].user, p[i].ulen, p[i].pass, p[i].plen)) {
            abort();
        }
        if (authfile_check(a, p[i].user, p[i].ulen, p[i].pass, p[i].plen - 1) !=
            listed(p, n, p[i].user, p[i].ulen, p[i].pass, p[i].plen - 1)) {
            abort();
        }
    }
    authfile_free(a);
    return 0;
}
