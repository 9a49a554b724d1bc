/*
 * util_io: util_read_file (see util.h), the one helper of lib/util that
 * does I/O. Apart from util.c so that the client library, which reads no
 * files, does not link it (libutil_io.la: the node and ringctl).
 */
#include "lib/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* See util.h. */
int
util_read_file(const char *path, size_t max, char **buf, size_t *len, char *err, size_t errlen)
{
    bool   in = strcmp(path, "-") == 0;
    FILE  *f = in ? stdin : fopen(path, "rb");
    char  *b = NULL;
    size_t n = 0, cap = 0;

    if (f == NULL) {
        if (errno == ENOENT) {
            return 1;
        }
        util_set_err(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    for (;;) {
        size_t got;

        if (cap - n < 4096) {
            char *nb;

            if (cap >= max) {
                util_set_err(err, errlen, "%s:1: file too large", path);
                goto fail;
            }
            cap = cap == 0 ? 8192 : cap * 2;
            nb = realloc(b, cap + 1);
            if (nb == NULL) {
                util_set_err(err, errlen, "%s: out of memory", path);
                goto fail;
            }
            b = nb;
        }
        got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            break;
        }
    }
    if (ferror(f)) {
        util_set_err(err, errlen, "%s: read error", path);
        goto fail;
    }
    if (!in) {
        fclose(f);
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
fail:
    if (!in) {
        fclose(f);
    }
    free(b);
    return -1;
}
