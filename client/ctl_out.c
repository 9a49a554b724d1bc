/*
 * ctl_out: ringctl's output, as text or as one JSON object built with
 * json-c from the commands' TSV lines (client/ctl_out.h).
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "config.h"
#include "client/ctl_out.h"

#define MAX_CELLS 64

static bool                json_mode;
static const char         *command;
static struct json_object *root;    /* the result so far (JSON mode) */
static struct json_object *headers; /* table name -> its header's cells */
static char                last_error[1024], last_info[1024];

void
ctl_out_set_json(bool on)
{
    json_mode = on;
}

bool
ctl_out_json(void)
{
    return json_mode;
}

void
ctl_out_command(const char *name)
{
    command = name;
}

void
ctl_out_error(bool error, const char *msg)
{
    snprintf(error ? last_error : last_info, sizeof(last_error), "%s", msg);
}

static struct json_object *
get_root(void)
{
    if (root == NULL) {
        root = json_object_new_object();
    }
    return root;
}

/* s[len] as a JSON number, or NULL (JSON null) when it is not one. */
static struct json_object *
number_of(const char *s, size_t len, bool integer_only)
{
    char  buf[64], *end;
    bool  neg;
    void *v = NULL;

    if (len == 0 || len >= sizeof(buf)) {
        return NULL;
    }
    memcpy(buf, s, len);
    buf[len] = '\0';
    neg = buf[0] == '-';
    errno = 0;
    if (neg) {
        long long x = strtoll(buf, &end, 10);

        v = errno == 0 && *end == '\0' ? json_object_new_int64(x) : NULL;
    } else {
        unsigned long long x = strtoull(buf, &end, 10);

        v = errno == 0 && *end == '\0' && end != buf ? json_object_new_uint64(x) : NULL;
    }
    if (v == NULL && !integer_only) {
        double d;

        errno = 0;
        d = strtod(buf, &end);
        v = errno == 0 && *end == '\0' && end != buf && isfinite(d)
                ? json_object_new_double_s(d, buf)
                : NULL;
    }
    return v;
}

/* One cell as the JSON value its type letter says (ctl_out.h). */
static struct json_object *
cell_value(char type, const char *s, size_t len)
{
    bool dash = len == 1 && s[0] == '-';

    switch (type) {
    case 'S':
        return dash ? NULL : json_object_new_string_len(s, (int)len);
    case 'i':
        return number_of(s, len, true);
    case 'f':
        return number_of(s, len, false);
    case 'a': {
        struct json_object *n = number_of(s, len, false);

        return n != NULL || dash ? n : json_object_new_string_len(s, (int)len);
    }
    case 'b':
        return len == 3 && memcmp(s, "yes", 3) == 0  ? json_object_new_boolean(1)
               : len == 2 && memcmp(s, "no", 2) == 0 ? json_object_new_boolean(0)
                                                     : NULL;
    case 'l': {
        struct json_object *a = json_object_new_array();
        const char         *p = s, *end = s + len, *comma;

        while (!dash && p < end) {
            comma = memchr(p, ',', (size_t)(end - p));
            comma = comma != NULL ? comma : end;
            json_object_array_add(a, json_object_new_string_len(p, (int)(comma - p)));
            p = comma + 1;
        }
        return a;
    }
    default:
        return json_object_new_string_len(s, (int)len);
    }
}

/* The type letter of cell i (the last letter repeats; none: string). */
static char
type_at(const char *types, int i)
{
    size_t n = types != NULL ? strlen(types) : 0;

    return n == 0 ? 's' : types[(size_t)i < n ? (size_t)i : n - 1];
}

/* The column names of a table spec "TABLE:a,b,c" into a new array, or
 * NULL when it names none; *name_len gets the length of TABLE. */
static struct json_object *
spec_columns(const char *spec, size_t *name_len)
{
    const char *colon = strchr(spec, ':');

    *name_len = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
    return colon != NULL ? cell_value('l', colon + 1, strlen(colon + 1)) : NULL;
}

/* Add one line's n cells to the result (JSON mode), as ctl_out_line says. */
static void
add_cells(const char *spec, const char *types, int n, const char *const *cells, const size_t *lens)
{
    struct json_object *cols, *table, *row;
    char                name[128];
    size_t              name_len;
    int                 i;

    if (n == 0 || (lens[0] > 0 && cells[0][0] == '#')) {
        return;
    }
    if (spec != NULL && spec[0] == '=') {
        /* The whole line, tabs as spaces, is the field's string. */
        size_t total = 0, at = 0;
        char  *text;

        for (i = 0; i < n; i++) {
            total += lens[i] + 1;
        }
        text = malloc(total);
        for (i = 0; i < n && text != NULL; i++) {
            memcpy(text + at, cells[i], lens[i]);
            at += lens[i];
            text[at++] = i + 1 < n ? ' ' : '\0';
        }
        if (text != NULL) {
            json_object_object_add(get_root(), spec + 1, json_object_new_string(text));
        }
        free(text);
        return;
    }
    if (spec == NULL) {
        snprintf(name, sizeof(name), "%.*s", (int)lens[0], cells[0]);
        if (n == 1) {
            json_object_object_add(get_root(), name, json_object_new_boolean(1));
        } else if (n == 2) {
            json_object_object_add(get_root(), name,
                                   cell_value(type_at(types, 0), cells[1], lens[1]));
        } else {
            struct json_object *a = json_object_new_array();

            for (i = 1; i < n; i++) {
                json_object_array_add(a, cell_value(type_at(types, i - 1), cells[i], lens[i]));
            }
            json_object_object_add(get_root(), name, a);
        }
        return;
    }
    cols = spec_columns(spec, &name_len);
    snprintf(name, sizeof(name), "%.*s", (int)name_len, spec);
    if (!json_object_object_get_ex(get_root(), name, &table)) {
        table = json_object_new_array();
        json_object_object_add(root, name, table);
    }
    if (cols == NULL) {
        if (headers == NULL) {
            headers = json_object_new_object();
        }
        if (!json_object_object_get_ex(headers, name, &cols)) {
            /* The first line of a table is its header. */
            cols = json_object_new_array();
            for (i = 0; i < n; i++) {
                json_object_array_add(cols, json_object_new_string_len(cells[i], (int)lens[i]));
            }
            json_object_object_add(headers, name, cols);
            return;
        }
        json_object_get(cols);
    }
    row = json_object_new_object();
    for (i = 0; i < n && (size_t)i < json_object_array_length(cols); i++) {
        json_object_object_add(row, json_object_get_string(json_object_array_get_idx(cols, i)),
                               cell_value(type_at(types, i), cells[i], lens[i]));
    }
    json_object_array_add(table, row);
    json_object_put(cols);
}

/* Cut line (its trailing newline dropped) at its tabs into cells. */
static int
split_line(char *line, const char **cells, size_t *lens)
{
    size_t len = strlen(line);
    int    n = 0;
    char  *p = line, *tab;

    if (len > 0 && line[len - 1] == '\n') {
        line[--len] = '\0';
    }
    while (n < MAX_CELLS) {
        tab = strchr(p, '\t');
        cells[n] = p;
        lens[n] = tab != NULL ? (size_t)(tab - p) : strlen(p);
        n++;
        if (tab == NULL) {
            break;
        }
        p = tab + 1;
    }
    return n;
}

void
ctl_out_line(FILE *out, const char *spec, const char *types, const char *fmt, ...)
{
    const char *cells[MAX_CELLS];
    size_t      lens[MAX_CELLS];
    char       *line = NULL;
    va_list     ap;

    va_start(ap, fmt);
    if (vasprintf(&line, fmt, ap) < 0) {
        va_end(ap);
        return;
    }
    va_end(ap);
    /* Lines for stderr stay text there, and are part of the result too. */
    if (!json_mode || out != stdout) {
        fputs(line, out);
    }
    if (json_mode) {
        add_cells(spec, types, split_line(line, cells, lens), cells, lens);
    }
    free(line);
}

void
ctl_out_cells(const char *spec, const char *types, int n, const char *const *cells,
              const size_t *lens)
{
    int i;

    if (json_mode) {
        add_cells(spec, types, n, cells, lens);
        return;
    }
    for (i = 0; i < n; i++) {
        fwrite(cells[i], 1, lens[i], stdout);
        putchar(i + 1 < n ? '\t' : '\n');
    }
}

void
ctl_out_add(const char *name, struct json_object *v)
{
    if (!json_mode) {
        json_object_put(v);
        return;
    }
    json_object_object_add(get_root(), name, v);
}

void
ctl_out_event(const char *cols, const char *types, const char *fmt, ...)
{
    const char         *cells[MAX_CELLS];
    size_t              lens[MAX_CELLS];
    struct json_object *result = root, *names;
    char               *line = NULL;
    va_list             ap;
    int                 i, n;

    va_start(ap, fmt);
    if (!json_mode) {
        vprintf(fmt, ap);
    } else if (vasprintf(&line, fmt, ap) >= 0) {
        /* The event is a row of its own: a fresh result object. */
        root = json_object_new_object();
        n = split_line(line, cells, lens);
        names = cell_value('l', cols, strlen(cols));
        for (i = 0; i < n && (size_t)i < json_object_array_length(names); i++) {
            json_object_object_add(root,
                                   json_object_get_string(json_object_array_get_idx(names, i)),
                                   cell_value(type_at(types, i), cells[i], lens[i]));
        }
        json_object_put(names);
        if (result != NULL) {
            json_object_object_add(root, "result", result);
        }
        puts(json_object_to_json_string_ext(root, JSON_C_TO_STRING_PLAIN |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(root);
        root = NULL;
        free(line);
    }
    va_end(ap);
    fflush(stdout);
}

int
ctl_out_finish(int rc)
{
    struct json_object *r;

    if (!json_mode) {
        return rc;
    }
    r = get_root();
    if (command != NULL) {
        json_object_object_add(r, "command", json_object_new_string(command));
    }
    json_object_object_add(r, "ok", json_object_new_boolean(rc == 0));
    if (rc != 0) {
        json_object_object_add(r, "error",
                               json_object_new_string(last_error[0] != '\0'  ? last_error
                                                      : last_info[0] != '\0' ? last_info
                                                                             : "failed"));
        json_object_object_add(r, "code", json_object_new_int(rc));
    }
    puts(
        json_object_to_json_string_ext(r, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    fflush(stdout);
    json_object_put(r);
    json_object_put(headers);
    root = headers = NULL;
    return rc;
}
