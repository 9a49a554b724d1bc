/*
 * statedir: the node's state directory (--state-dir): the active and
 * pending memberships, the pending transition's phase record and the
 * `served` marker. Every file is written tmp + fsync + rename + directory
 * fsync, so a crash leaves the old file or the new one.
 */
#include "config.h"
#include "server/statedir.h"
#include "lib/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LEGACY_PHASE_FILE "pending.meta" /* its older name: read and removed, not written */
#define STATE_FILE_MAX    (16u << 20)    /* largest state file we read */

/* Write a state file atomically; see statedir.h. */
int
statedir_write_file(const char *dir, const char *name, const char *data, size_t len, char *err,
                    size_t errlen)
{
    char   tmp[1200], path[1200];
    int    fd, dfd;
    size_t off = 0;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, name);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        goto fail;
    }
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);

        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            close(fd);
            goto fail;
        }
        off += (size_t)n;
    }
    if (fsync(fd) < 0 || close(fd) < 0) {
        goto fail;
    }
    if (rename(tmp, path) < 0) {
        goto fail;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        goto fail;
    }
    if (fsync(dfd) < 0) {
        close(dfd);
        goto fail;
    }
    close(dfd);
    return 0;
fail:
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
}

/* Unlink dir/name, absent being fine. 0 or -1 with err set. */
static int
unlink_state(const char *dir, const char *name, char *err, size_t errlen)
{
    char path[1200];

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (unlink(path) < 0 && errno != ENOENT) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Remove a state file (absent is fine) and sync the directory. */
int
statedir_remove(const char *dir, const char *name, char *err, size_t errlen)
{
    int dfd;

    if (unlink_state(dir, name, err, errlen) < 0) {
        return -1;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

/* Load a membership file; 1 if absent. */
int
statedir_load_members(const char *dir, const char *name, struct ring_members **out, char *err,
                      size_t errlen)
{
    char   path[1200];
    char  *buf = NULL;
    size_t len = 0;
    int    rc;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    rc = util_read_file(path, STATE_FILE_MAX, &buf, &len, err, errlen);
    if (rc != 0) {
        return rc;
    }
    rc = ring_members_parse(buf, len, path, out, err, errlen) == RING_OK ? 0 : -1;
    free(buf);
    return rc;
}

static int
hexval(char c)
{
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

/* Parse the phase record at dir/name: "token <hex>" and "phase <name>"
 * lines, '#' comments. 1 if absent. */
static int
load_phase_file(const char *dir, const char *name, uint8_t *token, size_t token_max,
                size_t *token_len, int (*phase_of)(const char *name), int *phase, char *err,
                size_t errlen)
{
    char   path[1200];
    char  *buf = NULL, *line;
    size_t len;
    int    rc, lineno = 0;
    bool   have_token = false, have_phase = false;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    rc = util_read_file(path, STATE_FILE_MAX, &buf, &len, err, errlen);
    if (rc != 0) {
        return rc;
    }
    if (strlen(buf) != len) {
        snprintf(err, errlen, "%s:1: NUL byte in file", path);
        goto fail;
    }
    line = buf;
    while (line != NULL && *line != '\0') {
        char *nl = strchr(line, '\n'), *val;

        lineno++;
        if (nl != NULL) {
            *nl = '\0';
        }
        if (nl != NULL && nl > line && nl[-1] == '\r') {
            nl[-1] = '\0';
        }
        val = strchr(line, ' ');
        if (line[0] == '\0' || line[0] == '#') {
            /* blank or comment */
        } else if (val != NULL && strncmp(line, "token ", 6) == 0) {
            size_t i, n;

            val++;
            n = strlen(val);
            if (have_token || n == 0 || n % 2 != 0 || n / 2 > token_max) {
                snprintf(err, errlen, "%s:%d: bad token line", path, lineno);
                goto fail;
            }
            for (i = 0; i < n / 2; i++) {
                int hi = hexval(val[2 * i]), lo = hexval(val[2 * i + 1]);

                if (hi < 0 || lo < 0) {
                    snprintf(err, errlen, "%s:%d: token is not hex", path, lineno);
                    goto fail;
                }
                token[i] = (uint8_t)(hi << 4 | lo);
            }
            *token_len = n / 2;
            have_token = true;
        } else if (val != NULL && strncmp(line, "phase ", 6) == 0) {
            val++;
            if (have_phase) {
                snprintf(err, errlen, "%s:%d: second phase line", path, lineno);
                goto fail;
            }
            *phase = phase_of(val);
            if (*phase < 0) {
                snprintf(err, errlen, "%s:%d: unknown phase '%.32s'", path, lineno, val);
                goto fail;
            }
            have_phase = true;
        } else {
            snprintf(err, errlen, "%s:%d: expected 'token <hex>' or 'phase <name>'", path, lineno);
            goto fail;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    if (!have_token || !have_phase) {
        snprintf(err, errlen, "%s:%d: missing %s line", path, lineno > 0 ? lineno : 1,
                 have_token ? "phase" : "token");
        goto fail;
    }
    free(buf);
    return 0;
fail:
    free(buf);
    return -1;
}

/* Write the phase record; see statedir.h. */
int
statedir_save_phase(const char *dir, const uint8_t *token, size_t token_len, const char *phase,
                    char *err, size_t errlen)
{
    char   buf[2 * STATEDIR_TOKEN_MAX + 64];
    size_t n = 0, i;

    if (token_len > STATEDIR_TOKEN_MAX || strlen(phase) > 32) {
        snprintf(err, errlen, "%s/%s: token or phase too long", dir, STATEDIR_PHASE);
        return -1;
    }
    n += (size_t)snprintf(buf, sizeof(buf), "token ");
    for (i = 0; i < token_len; i++) {
        n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%02x", token[i]);
    }
    n += (size_t)snprintf(buf + n, sizeof(buf) - n, "\nphase %s\n", phase);
    return statedir_write_file(dir, STATEDIR_PHASE, buf, n, err, errlen);
}

/* Write a membership file in text form. */
int
statedir_save_members(const char *dir, const char *name, const struct ring_members *m, char *err,
                      size_t errlen)
{
    size_t len = ring_members_format(m, NULL, 0);
    char  *buf = malloc(len + 1);
    int    rc;

    if (buf == NULL) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    ring_members_format(m, buf, len + 1);
    rc = statedir_write_file(dir, name, buf, len, err, errlen);
    free(buf);
    return rc;
}

/* The phase record: pending.phase, or a legacy pending.meta when only that
 * one exists (a state directory written before the rename). */
int
statedir_load_phase(const char *dir, uint8_t *token, size_t token_max, size_t *token_len,
                    int (*phase_of)(const char *name), int *phase, char *err, size_t errlen)
{
    int rc = load_phase_file(dir, STATEDIR_PHASE, token, token_max, token_len, phase_of, phase, err,
                             errlen);

    if (rc == 1) {
        rc = load_phase_file(dir, LEGACY_PHASE_FILE, token, token_max, token_len, phase_of, phase,
                             err, errlen);
    }
    if (rc == 1) {
        snprintf(err, errlen, "%s/%s:1: missing (%s exists)", dir, STATEDIR_PHASE,
                 STATEDIR_PENDING);
        return -1;
    }
    return rc;
}

/* Remove the phase record and its legacy name; see statedir.h. */
int
statedir_remove_phase(const char *dir, char *err, size_t errlen)
{
    if (statedir_remove(dir, STATEDIR_PHASE, err, errlen) < 0) {
        return -1;
    }
    return statedir_remove(dir, LEGACY_PHASE_FILE, err, errlen);
}

/* See statedir.h. */
int
statedir_drop_pending(const char *dir, char *err, size_t errlen)
{
    static const char *const names[] = { STATEDIR_PENDING, STATEDIR_PHASE, LEGACY_PHASE_FILE };
    size_t                   i;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (unlink_state(dir, names[i], err, errlen) < 0) {
            return -1;
        }
    }
    return 0;
}

/* See statedir.h. */
bool
statedir_served(const char *dir)
{
    char path[1200];

    snprintf(path, sizeof(path), "%s/%s", dir, STATEDIR_SERVED);
    return access(path, F_OK) == 0;
}

/* See statedir.h. */
int
statedir_mark_served(const char *dir, char *err, size_t errlen)
{
    static const char text[] = "# this node has served as a member: a start is a restart\n";

    return statedir_write_file(dir, STATEDIR_SERVED, text, sizeof(text) - 1, err, errlen);
}
