/*
 * ctl_util: the small helpers ringctl's command files share: messages,
 * reading files and memberships, the clock, hex, byte counts, arc lengths,
 * the output tables (TSV, or aligned with --human) and the argv of a
 * subcommand without options of its own.
 */
#ifndef CLIENT_CTL_UTIL_H
#define CLIENT_CTL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "client/ctl_out.h"
#include "lib/util.h"

struct ring_members;

/* Print "ringctl: <message>" on stderr (or where ctl_error_to said). */
void ctl_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Send ctl_error's lines to f from now on (NULL: stderr again); the live
 * view collects them into its frame. */
void ctl_error_to(FILE *f);

/* From now on (on: true), every ctl_error line starts with the UTC time,
 * as ctl_now_stamp writes it (the watch, a daemon whose lines are a log). */
void ctl_error_stamp(bool on);

/* The UTC time to the millisecond, "2026-01-02T03:04:05.678Z", into
 * buf[len] (40 bytes are enough); returns buf. */
const char *ctl_now_stamp(char *buf, size_t len);

/* A progress or info line on stderr ("ringctl: phase: ..."): the same
 * shape as an error line, but not the error --json reports. */
void ctl_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Read a whole file ("-": stdin) into a NUL-terminated malloc'd buffer;
 * NULL with errno set on failure. *len gets the length (without the NUL). */
char *ctl_read_file(const char *path, size_t *len);

/* Read and parse a membership file: the caller's to free, or NULL after
 * printing why ("PATH: reason", or the parser's "PATH:LINE: reason"). */
struct ring_members *ctl_load_members(const char *path);

/* The text form of a membership in a malloc'd buffer, its length in *len;
 * NULL when out of memory. */
char *ctl_members_text(const struct ring_members *m, size_t *len);

/* Sleep ms milliseconds (a poll period, never a wait for a result). */
void ctl_sleep_ms(int ms);

/* Parse exactly 2n hex digits (either case) of s into b; -1 when s (slen
 * bytes) is not that. */
int ctl_unhex(const char *s, size_t slen, uint8_t *b, size_t n);

/* A byte count for people ("512 B", "1.5 MiB") into buf; returns buf. */
const char *ctl_fmt_bytes(double b, char *buf, size_t len);

/* Length of the arc (lo, hi] as a fraction of the keyspace (lo == hi: the
 * whole circle, 1). */
double ctl_arc_frac(uint64_t lo, uint64_t hi);

/* Parse --rate MIB_PER_S (0..1e6; 0 = unlimited) of command `what`:
 * EX_OK, or EX_USAGE after printing why. */
int ctl_parse_rate(const char *what, const char *arg, double *out);

/*
 * Output tables: rows of cells, printed as TSV or (--human) aligned with
 * three spaces between columns, or under --json as the array name of
 * ctl_out (the first row is the header; types as ctl_out_line's). Start
 * with { .ncols = N, .name = "nodes", .types = "ss..." }.
 */
struct ctl_table {
    uint32_t    ncols, nrows, cap;
    char      **cells; /* nrows * ncols, malloc'd strings */
    const char *name, *types;
};

/* Append a row: fmt is printf'd, then cut into ncols cells at its tabs
 * (missing cells are empty). Out of memory drops the row. */
void ctl_table_row(struct ctl_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print the table on out and free it (it is empty and reusable after). */
void ctl_table_print(struct ctl_table *t, bool human, FILE *out);

/* The start of a subcommand's usage line, by the global options it needs:
 * "usage: " CTL_USAGE_DATA " get KEY...". */
#define CTL_USAGE_DATA  "ringctl --members FILE"
#define CTL_USAGE_ADMIN "ringctl --store DIR --token-file F"

/* Flags of ctl_no_options. */
#define CTL_USAGE_ON_ERROR 1 /* a bad option: also "usage: USAGE" on stderr */
#define CTL_NO_OPERANDS    2 /* an operand is a usage error too */

/*
 * The default case of a subcommand's getopt switch (c: what getopt
 * returned that the subcommand does not take itself): 'h' (--help) prints
 * "usage: USAGE" on stdout and exits 0; anything else is a bad option
 * getopt has already named: 2 (EX_USAGE), after "usage: USAGE" on stderr
 * too with CTL_USAGE_ON_ERROR.
 */
int ctl_getopt_default(int c, const char *usage, unsigned flags);

/*
 * Parse the argv of a subcommand that has no options of its own: --help
 * prints "usage: USAGE" on stdout and exits 0. Returns the index of the
 * first operand, or -1 on a usage error: a bad option (getopt says which;
 * see CTL_USAGE_ON_ERROR) or, with CTL_NO_OPERANDS, any operand (then
 * "ringctl: usage: USAGE" on stderr).
 */
int ctl_no_options(int argc, char **argv, const char *usage, unsigned flags);

#endif
