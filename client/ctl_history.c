/*
 * ctl_history: the kept report of past moves. Every transition that ends
 * (committed, or aborted with the reason) adds one line to the store's
 * record history/moves (the newest HISTORY_KEEP), and `ringctl history`
 * prints them: when, what moved, how much, how fast, the fence, the outcome.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

#include "client/ctl.h"
#include "client/ctl_transition.h"
#include "client/ctl_util.h"
#include "lib/mstore.h"
#include "lib/util.h"

#define HISTORY_RECORD CTL_HISTORY_RECORD
#define HISTORY_KEEP   200 /* lines kept */
#define HISTORY_TRIES  5   /* read-modify-write attempts against other admins */

/*
 * One line, tab-separated: started ended from_epoch epoch outcome items
 * bytes copy_bytes_per_s (0: no copy in the run that ended it) fence_ms
 * admin op why. Lines starting with '#' (the store's revision line) are
 * not history. The op ("join d ADDR")
 * and the reason may hold spaces, never tabs (ctl_history_add replaces
 * them).
 */
static int
format_line(const struct admin *a, const char *outcome, const char *why, char *out, size_t cap)
{
    int64_t  now = (int64_t)time(NULL);
    int64_t  began = a->rec.started != 0 ? a->rec.started : now;
    uint64_t rate = a->copy_ms > 0 ? a->moved_bytes * 1000 / a->copy_ms : 0;
    int      n;
    char    *p;

    n = snprintf(out, cap,
                 "%" PRId64 "\t%" PRId64 "\t%" PRIu64 "\t%" PRIu64 "\t%s\t%" PRIu64 "\t%" PRIu64
                 "\t%" PRIu64 "\t%" PRIu64 "\t%s\t%s\t%s\n",
                 began, now, a->rec.from_epoch, a->rec.epoch, outcome, a->moved_items,
                 a->moved_bytes, rate, a->fence_ms, a->rec.admin, a->rec.op,
                 why != NULL ? why : "");
    if (n < 0 || (size_t)n >= cap) {
        return -1;
    }
    /* Fields are tab-separated: no tab or newline inside one. */
    for (p = out; p < out + n - 1; p++) {
        if (*p == '\n') {
            *p = ' ';
        }
    }
    return n;
}

/* The history record with one more line (the newest HISTORY_KEEP - 1 of
 * the old ones kept) into *text (malloc'd), and the revision it was read
 * at (0: absent). MSTORE_OK, or the store's error (err set). */
static int
history_with(struct admin *a, const char *line, size_t n, char **text, size_t *len, uint64_t *rev,
             char *err, size_t errlen)
{
    struct mstore_record rec = { 0 };
    const char          *keep;
    uint32_t             lines = 0;
    size_t               i;
    int                  rc = mstore_get(a->store, HISTORY_RECORD, &rec, err, errlen);

    if (rc != MSTORE_OK && rc != MSTORE_ENOENT) {
        return rc;
    }
    keep = rec.text != NULL ? rec.text : "";
    while (keep[0] == '#' && strchr(keep, '\n') != NULL) {
        keep = strchr(keep, '\n') + 1;
    }
    for (i = 0; rec.text != NULL && i < rec.len; i++) {
        lines += rec.text[i] == '\n';
    }
    while (lines >= HISTORY_KEEP && strchr(keep, '\n') != NULL) {
        keep = strchr(keep, '\n') + 1;
        lines--;
    }
    *len = strlen(keep) + n;
    *text = malloc(*len + 1);
    if (*text == NULL) {
        mstore_record_clear(&rec);
        snprintf(err, errlen, "out of memory");
        return MSTORE_ENOMEM;
    }
    memcpy(*text, keep, *len - n);
    memcpy(*text + *len - n, line, n);
    *rev = rec.rev;
    mstore_record_clear(&rec);
    return MSTORE_OK;
}

/* ctl_history_text: see ctl_transition.h. */
char *
ctl_history_text(struct admin *a, const char *outcome, const char *why, size_t *len)
{
    char     line[2048], err[512];
    int      n = format_line(a, outcome, why, line, sizeof(line));
    char    *text = NULL;
    uint64_t rev;

    if (n < 0 || a->store == NULL ||
        history_with(a, line, (size_t)n, &text, len, &rev, err, sizeof(err)) != MSTORE_OK) {
        return NULL;
    }
    return text;
}

/* ctl_history_add: see ctl_transition.h. */
void
ctl_history_add(struct admin *a, const char *outcome, const char *why)
{
    char line[2048], err[512] = "";
    int  n = format_line(a, outcome, why, line, sizeof(line)), tries;

    if (n < 0 || a->store == NULL) {
        return;
    }
    for (tries = 0; tries < HISTORY_TRIES; tries++) {
        char    *text;
        size_t   len;
        uint64_t rev;
        int      rc = history_with(a, line, (size_t)n, &text, &len, &rev, err, sizeof(err));

        if (rc != MSTORE_OK) {
            break;
        }
        rc = rev == 0
                 ? mstore_create_if_absent(a->store, HISTORY_RECORD, text, len, NULL, err,
                                           sizeof(err))
                 : mstore_cas(a->store, HISTORY_RECORD, rev, text, len, NULL, err, sizeof(err));
        free(text);
        if (rc == MSTORE_OK) {
            return;
        }
        if (rc != MSTORE_ECONFLICT) {
            break;
        }
    }
    /* A report, not a record the cluster depends on: say so and go on. */
    ctl_info("history: the move was not recorded: %s", err);
}

/* The UTC time of a unix second, "2026-12-07 03:04:05". */
static void
fmt_time(int64_t t, char *out, size_t cap)
{
    time_t    tt = (time_t)t;
    struct tm tm;

    if (gmtime_r(&tt, &tm) == NULL || strftime(out, cap, "%Y-%m-%d %H:%M:%S", &tm) == 0) {
        snprintf(out, cap, "%" PRId64, t);
    }
}

/* Print one stored line as a row; false when it is not a history line. */
static bool
print_row(char *line)
{
    char    *f[12], *save = NULL, *tok, when[32];
    int      n = 0;
    int64_t  began, ended;
    uint64_t bytes, rate;

    for (tok = strtok_r(line, "\t", &save); tok != NULL && n < 12;
         tok = strtok_r(NULL, "\t", &save)) {
        f[n++] = tok;
    }
    if (n < 11) {
        return false;
    }
    if (ctl_out_json()) {
        size_t lens[12];
        int    i;

        for (i = 0; i < n; i++) {
            lens[i] = strlen(f[i]);
        }
        ctl_out_cells("moves:started,ended,from_epoch,epoch,outcome,items,bytes,copy_bytes_per_s,"
                      "fence_ms,admin,op,why",
                      "iiiisiiiisss", n, (const char *const *)f, lens);
        return true;
    }
    began = strtoll(f[0], NULL, 10);
    ended = strtoll(f[1], NULL, 10);
    bytes = strtoull(f[6], NULL, 10);
    rate = strtoull(f[7], NULL, 10);
    fmt_time(began, when, sizeof(when));
    printf("%s  %5" PRId64 "s  %4s -> %-4s  %-9s %9s items %10.1f MiB %8.1f MiB/s  fence %4s ms  "
           "%s%s%s  (%s)\n",
           when, ended - began, f[2], f[3], f[4], f[5], (double)bytes / 1048576.0,
           (double)rate / 1048576.0, f[8], f[10], n > 11 ? ": " : "", n > 11 ? f[11] : "", f[9]);
    return true;
}

/* ringctl history [--last N] */
int
ctl_history(struct ctl_globals *g, int argc, char **argv)
{
    struct admin         a;
    struct mstore_record rec = { 0 };
    char                 err[512], *line, *save = NULL;
    long                 last = 20, total = 0, skip;
    int                  rc;

    if (argc == 3 && strcmp(argv[1], "--last") == 0) {
        char *end;

        last = strtol(argv[2], &end, 10);
        if (*end != '\0' || last <= 0) {
            ctl_error("history: --last takes a positive count, not '%s'", argv[2]);
            return EX_USAGE;
        }
    } else if (argc != 1) {
        ctl_error("usage: history [--last N]");
        return EX_USAGE;
    }
    memset(&a, 0, sizeof(a));
    a.g = g;
    rc = admin_open(&a, false);
    if (rc != EX_OK) {
        return rc;
    }
    rc = mstore_get(a.store, HISTORY_RECORD, &rec, err, sizeof(err));
    /* JSON: "moves", an array even when empty. */
    ctl_out_add("moves", json_object_new_array());
    if (rc == MSTORE_ENOENT) {
        if (!ctl_out_json()) {
            printf("no move recorded yet\n");
        }
        admin_free(&a);
        return EX_OK;
    }
    if (rc != MSTORE_OK) {
        ctl_error("history: store: %s", err);
        admin_free(&a);
        return EX_FAILED;
    }
    for (line = rec.text; line != NULL && *line != '\0'; line = strchr(line, '\n')) {
        line += *line == '\n';
        total += *line != '#' && *line != '\0';
    }
    if (!ctl_out_json()) {
        printf("%-19s  %6s  %-12s  %-9s %15s %14s %14s  %-13s  %s\n", "started (UTC)", "took",
               "epoch", "outcome", "items", "bytes", "copy rate", "fence", "op (admin)");
    }
    skip = total > last ? total - last : 0;
    for (line = strtok_r(rec.text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') {
            continue;
        }
        if (skip > 0) {
            skip--;
            continue;
        }
        if (!print_row(line)) {
            ctl_info("history: %s: a line in an unknown format: skipped", rec.where);
        }
    }
    mstore_record_clear(&rec);
    admin_free(&a);
    return EX_OK;
}
