/*
 * ctl_out: where ringctl's commands print their results. Text mode (the
 * default) prints each line as given; with --json (or RINGCTL_JSON=1) the
 * same TSV lines are collected as typed fields of one JSON object, printed
 * on stdout when the command returns (docs/operations.md, "JSON output").
 */
#ifndef CLIENT_CTL_OUT_H
#define CLIENT_CTL_OUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct json_object;

/* Choose the output mode, once, before any command prints. */
void ctl_out_set_json(bool on);

/* True under --json. */
bool ctl_out_json(void);

/* Name the command whose result this is ("command" in the JSON object). */
void ctl_out_command(const char *name);

/*
 * One TSV line of a command's result, fmt as printf's (with its "\n").
 * Text mode prints it on out. JSON mode cuts it at its tabs into cells:
 *   spec NULL: "name<TAB>value..." is a field of the result object (two
 *     or more values: an array);
 *   spec "TABLE": a row of the array TABLE; the table's first line is its
 *     header, whose cells name the fields of the rows after it;
 *   spec "TABLE:col,col,...": a row, the columns named here (output with
 *     no header line).
 * Lines starting with '#' are comments, left out of the JSON.
 * types gives each cell's JSON type, one letter per cell (the last one
 * repeats; for a field, the letters start at the value): s string,
 * S string or null for "-", i integer, f number, a number when it reads
 * as one else string, l comma-separated list ("-": empty), b yes/no as a
 * boolean; a number cell that is not one ("-", "?") is null.
 */
void ctl_out_line(FILE *out, const char *spec, const char *types, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ctl_out_line of n cells given as bytes (lens[i] each; they may hold
 * tabs or newlines, as a cached value does): text mode writes them on
 * stdout joined by tabs, and a newline. */
void ctl_out_cells(const char *spec, const char *types, int n, const char *const *cells,
                   const size_t *lens);

/* Set field name of the result object to v (taking it); JSON mode only,
 * text mode frees v. For what the text says in words or comments. */
void ctl_out_add(const char *name, struct json_object *v);

/*
 * One event of a long-running command (the watch), fmt a TSV line as for
 * ctl_out_line with columns named by cols ("a,b,c"): text mode prints it,
 * JSON mode prints it as one JSON object on a line of its own, with the
 * fields collected since the previous event as its "result". Both flush.
 */
/* The columns of the watch's event lines. */
#define WATCH_EVENT "time,source,id,action,outcome"

void ctl_out_event(const char *cols, const char *types, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * The end of the command, rc its exit status: JSON mode prints the result
 * object on stdout with "command", "ok" (rc is 0) and, when rc is not 0,
 * "error" (the last ctl_error message, else ctl_info's) and "code" (rc).
 * Returns rc.
 */
int ctl_out_finish(int rc);

/* Remember msg as the last error (error: true; ctl_error calls it) or
 * info line (ctl_info): the error of a failed command is the last error,
 * else the last info line. */
void ctl_out_error(bool error, const char *msg);

#endif
