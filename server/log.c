/*
 * log: leveled messages to stderr. One write per line so lines from
 * different threads do not interleave; the JSON form escapes through
 * json-c, logfmt quotes by its rules (quotes and backslashes escaped).
 */
#include "config.h"
#include "server/log.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static int             log_verbosity = 0;
static enum log_format log_format = LOG_FORMAT_TEXT;
static char            log_node[72];

static const char *const LEVEL_NAMES[] = { "error", "warning", "notice", "info", "debug" };
static const char *const FORMAT_NAMES[] = { "text", "logfmt", "json" };

/* Set the verbosity (clamped to LOG_QUIET..LOG_VERBOSITY_MAX); any thread. */
void
log_set_level(int verbosity)
{
    if (verbosity < LOG_QUIET) {
        verbosity = LOG_QUIET;
    } else if (verbosity > LOG_VERBOSITY_MAX) {
        verbosity = LOG_VERBOSITY_MAX;
    }
    __atomic_store_n(&log_verbosity, verbosity, __ATOMIC_RELAXED);
}

/* The current verbosity; any thread. */
int
log_get_level(void)
{
    return __atomic_load_n(&log_verbosity, __ATOMIC_RELAXED);
}

/* See log.h. */
void
log_set_format(enum log_format f)
{
    log_format = f;
}

/* See log.h. */
int
log_parse_format(const char *name, enum log_format *out)
{
    size_t i;

    for (i = 0; i < sizeof(FORMAT_NAMES) / sizeof(FORMAT_NAMES[0]); i++) {
        if (strcmp(name, FORMAT_NAMES[i]) == 0) {
            *out = (enum log_format)i;
            return 0;
        }
    }
    return -1;
}

/* See log.h. */
void
log_set_node(const char *id)
{
    snprintf(log_node, sizeof(log_node), "%s", id != NULL ? id : "");
}

/* logfmt's value: bare when it needs no quotes, else quoted with " and \
 * escaped and control characters dropped to spaces. Into out[size]. */
static void
logfmt_value(const char *v, char *out, size_t size)
{
    size_t i, o = 0;
    bool   quote = v[0] == '\0' || strpbrk(v, " =\"\\\t") != NULL;

    if (quote && o + 1 < size) {
        out[o++] = '"';
    }
    for (i = 0; v[i] != '\0' && o + 3 < size; i++) {
        unsigned char ch = (unsigned char)v[i];

        if (ch == '"' || ch == '\\') {
            out[o++] = '\\';
            out[o++] = (char)ch;
        } else {
            out[o++] = ch < 0x20 ? ' ' : (char)ch;
        }
    }
    if (quote) {
        out[o++] = '"';
    }
    out[o] = '\0';
}

/* Format the message into one buffer, then write it in one call. Each
 * line carries the UTC time to the millisecond, so the logs of several
 * nodes can be merged in order, and the node's id. */
void
log_msg(int level, const char *fmt, ...)
{
    char           msg[1024], when[40], line[2400], val[2100];
    const char    *name;
    struct timeval tv;
    struct tm      tm;
    va_list        ap;
    size_t         n;

    if (level > LOG_NOTICE + log_get_level()) {
        return;
    }
    name = LEVEL_NAMES[level < LOG_ERR ? LOG_ERR : level > LOG_DEBUG ? LOG_DEBUG : level];
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    gettimeofday(&tv, NULL);
    gmtime_r(&tv.tv_sec, &tm);
    n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(when + n, sizeof(when) - n, ".%03ldZ", (long)(tv.tv_usec / 1000));
    switch (log_format) {
    case LOG_FORMAT_JSON: {
        struct json_object *o = json_object_new_object();

        if (o == NULL) {
            return;
        }
        json_object_object_add(o, "ts", json_object_new_string(when));
        json_object_object_add(o, "level", json_object_new_string(name));
        if (log_node[0] != '\0') {
            json_object_object_add(o, "node", json_object_new_string(log_node));
        }
        json_object_object_add(o, "msg", json_object_new_string(msg));
        snprintf(line, sizeof(line), "%s\n",
                 json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                       JSON_C_TO_STRING_NOSLASHESCAPE));
        json_object_put(o);
        break;
    }
    case LOG_FORMAT_LOGFMT: {
        char node[sizeof(log_node) * 2 + 8] = "", nval[sizeof(log_node) * 2 + 2];

        if (log_node[0] != '\0') {
            logfmt_value(log_node, nval, sizeof(nval));
            snprintf(node, sizeof(node), " node=%s", nval);
        }
        logfmt_value(msg, val, sizeof(val));
        snprintf(line, sizeof(line), "ts=%s level=%s%s msg=%s\n", when, name, node, val);
        break;
    }
    default:
        snprintf(line, sizeof(line), "%s ringcached%s%s%s: %s: %s\n", when,
                 log_node[0] != '\0' ? "[" : "", log_node, log_node[0] != '\0' ? "]" : "", name,
                 msg);
    }
    fputs(line, stderr);
}
