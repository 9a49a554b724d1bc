/*
 * ctl_util: helpers shared by ringctl's command files (client/ctl_util.h).
 */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "client/ctl.h"
#include "client/ctl_out.h"
#include "client/ctl_util.h"
#include "ring/ring.h"

static FILE *error_sink;  /* NULL: stderr */
static bool  error_stamp; /* ctl_error_stamp: lines start with the time */

void
ctl_error_stamp(bool on)
{
    error_stamp = on;
}

const char *
ctl_now_stamp(char *buf, size_t len)
{
    struct timespec ts;
    struct tm       tm;
    size_t          n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
    return buf;
}

void
ctl_error_to(FILE *f)
{
    error_sink = f;
}

/* A "ringctl: " line on the error sink; error: also ctl_out's last error. */
static void
message(bool error, const char *fmt, va_list ap)
{
    FILE *f = error_sink != NULL ? error_sink : stderr;
    char  when[40], *line = NULL;

    if (vasprintf(&line, fmt, ap) < 0) {
        return; /* out of memory: nothing to say it with */
    }
    ctl_out_error(error, line);
    if (error_stamp) {
        fprintf(f, "%s ", ctl_now_stamp(when, sizeof(when)));
    }
    fprintf(f, "ringctl: %s\n", line);
    free(line);
}

void
ctl_error(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    message(true, fmt, ap);
    va_end(ap);
}

void
ctl_info(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    message(false, fmt, ap);
    va_end(ap);
}

char *
ctl_read_file(const char *path, size_t *len)
{
    char *buf = NULL, err[8];
    int   rc;

    errno = 0;
    rc = util_read_file(path, SIZE_MAX, &buf, len, err, sizeof(err));
    if (rc == 0) {
        return buf;
    }
    if (rc == 1) {
        errno = ENOENT;
    } else if (errno == 0) {
        errno = EIO;
    }
    return NULL;
}

struct ring_members *
ctl_load_members(const char *path)
{
    struct ring_members *m = NULL;
    char                 err[4096 + 1024]; /* the message starts with the path */
    size_t               len = 0;
    char                *text;

    text = ctl_read_file(path, &len);
    if (text == NULL) {
        ctl_error("%s: %s", path, strerror(errno));
        return NULL;
    }
    if (ring_members_parse(text, len, path, &m, err, sizeof(err)) != RING_OK) {
        ctl_error("%s", err);
        m = NULL;
    }
    free(text);
    return m;
}

char *
ctl_members_text(const struct ring_members *m, size_t *len)
{
    size_t need = ring_members_format(m, NULL, 0);
    char  *buf = malloc(need + 1);

    if (buf != NULL) {
        ring_members_format(m, buf, need + 1);
        *len = need;
    }
    return buf;
}

void
ctl_sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int
ctl_unhex(const char *s, size_t slen, uint8_t *b, size_t n)
{
    size_t i;

    if (slen != 2 * n) {
        return -1;
    }
    for (i = 0; i < 2 * n; i++) {
        char c = s[i];
        int  v = c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : -1;

        if (v < 0) {
            return -1;
        }
        if (i % 2 == 0) {
            b[i / 2] = (uint8_t)(v << 4);
        } else {
            b[i / 2] |= (uint8_t)v;
        }
    }
    return 0;
}

const char *
ctl_fmt_bytes(double b, char *buf, size_t len)
{
    static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int                u = 0;

    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, len, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
    return buf;
}

double
ctl_arc_frac(uint64_t lo, uint64_t hi)
{
    return lo == hi ? 1.0 : (double)(hi - lo) / 18446744073709551616.0;
}

int
ctl_parse_rate(const char *what, const char *arg, double *out)
{
    char *end;

    errno = 0;
    *out = strtod(arg, &end);
    if (errno != 0 || *end != '\0' || !(*out >= 0) || *out > 1e6) {
        ctl_error("%s: --rate MIB_PER_S: expected a number >= 0 (0 = unlimited)", what);
        return EX_USAGE;
    }
    return EX_OK;
}

void
ctl_table_row(struct ctl_table *t, const char *fmt, ...)
{
    char     line[4096], *p, *tab;
    uint32_t c;
    va_list  ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (t->nrows == t->cap) {
        char **n;

        t->cap = t->cap ? t->cap * 2 : 16;
        n = realloc(t->cells, (size_t)t->cap * t->ncols * sizeof(*n));
        if (n == NULL) {
            return; /* out of memory: the row is dropped */
        }
        t->cells = n;
    }
    p = line;
    for (c = 0; c < t->ncols; c++) {
        tab = p != NULL ? strchr(p, '\t') : NULL;
        if (tab != NULL) {
            *tab = '\0';
        }
        t->cells[(size_t)t->nrows * t->ncols + c] = strdup(p != NULL ? p : "");
        p = tab != NULL ? tab + 1 : NULL;
    }
    t->nrows++;
}

void
ctl_table_print(struct ctl_table *t, bool human, FILE *out)
{
    uint32_t r, c;
    size_t  *w = calloc(t->ncols ? t->ncols : 1, sizeof(*w));

    for (r = 0; r < t->nrows && w != NULL && ctl_out_json(); r++) {
        const char *row[t->ncols];

        for (c = 0; c < t->ncols; c++) {
            row[c] = t->cells[(size_t)r * t->ncols + c];
            row[c] = row[c] != NULL ? row[c] : "";
            w[c] = strlen(row[c]);
        }
        ctl_out_cells(t->name != NULL ? t->name : "rows", t->types, (int)t->ncols, row, w);
    }
    for (r = 0; r < t->nrows && w != NULL && !ctl_out_json(); r++) {
        for (c = 0; c < t->ncols; c++) {
            const char *s = t->cells[(size_t)r * t->ncols + c];
            size_t      l = s ? strlen(s) : 0;

            if (l > w[c]) {
                w[c] = l;
            }
        }
    }
    for (r = 0; r < t->nrows && !ctl_out_json(); r++) {
        for (c = 0; c < t->ncols; c++) {
            const char *s = t->cells[(size_t)r * t->ncols + c];

            s = s ? s : "";
            if (c + 1 == t->ncols) {
                fprintf(out, "%s\n", s);
            } else if (human && w != NULL) {
                fprintf(out, "%-*s   ", (int)w[c], s);
            } else {
                fprintf(out, "%s\t", s);
            }
        }
    }
    for (r = 0; r < (size_t)t->nrows * t->ncols; r++) {
        free(t->cells[r]);
    }
    free(t->cells);
    free(w);
    t->cells = NULL;
    t->nrows = t->cap = 0;
}

int
ctl_getopt_default(int c, const char *usage, unsigned flags)
{
    if (c == 'h') {
        printf("usage: %s\n", usage);
        exit(0);
    }
    if (flags & CTL_USAGE_ON_ERROR) {
        fprintf(stderr, "usage: %s\n", usage);
    }
    return EX_USAGE;
}

int
ctl_no_options(int argc, char **argv, const char *usage, unsigned flags)
{
    static const struct option opts[] = { { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    int                        c;

    optind = 0;
    while ((c = getopt_long(argc, argv, "+h", opts, NULL)) != -1) {
        ctl_getopt_default(c, usage, flags);
        return -1;
    }
    if ((flags & CTL_NO_OPERANDS) && optind != argc) {
        ctl_error("usage: %s", usage);
        return -1;
    }
    return optind;
}
