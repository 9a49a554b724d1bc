/*
 * ctl_pending: the transition record in the membership store (see
 * client/ctl_pending.h): its text form, parsed and formatted, and read
 * from and written to the store.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "config.h"
#include "client/ctl.h"
#include "client/ctl_pending.h"
#include "client/ctl_util.h"
#include "lib/mstore.h"

static const char *const tphase_names[] = {
    [TREC_PREPARED] = "PREPARED",
    [TREC_COPYING] = "COPYING",
    [TREC_FENCED] = "FENCED",
    [TREC_ABORTED] = "ABORTED",
};

/* trec_phase_name: see ctl_pending.h. */
const char *
trec_phase_name(enum trec_phase phase)
{
    return tphase_names[phase];
}

/* trec_clear: see ctl_pending.h. */
void
trec_clear(struct trec *m)
{
    free(m->boot);
    memset(m, 0, sizeof(*m));
}

/* trec_format: see ctl_pending.h. */
char *
trec_format(const struct trec *m, size_t *len)
{
    char     hex[2 * TREC_TOKEN_BYTES + 1];
    size_t   cap = 1024 + (size_t)m->n_boot * (RING_ID_MAX + 32), n;
    char    *buf = malloc(cap);
    uint32_t i;

    if (buf == NULL) {
        return NULL;
    }
    util_hex(m->token, TREC_TOKEN_BYTES, hex);
    n = (size_t)snprintf(buf, cap,
                         "token %s\nphase %s\nfrom_epoch %" PRIu64 "\nepoch %" PRIu64
                         "\nrate %" PRIu64 "\nstarted %" PRId64 "\nwritten %" PRId64
                         "\nop %s\nadmin %s\n",
                         hex, trec_phase_name(m->phase), m->from_epoch, m->epoch, m->rate,
                         m->started, (int64_t)time(NULL), m->op, m->admin);
    for (i = 0; i < m->n_boot && n < cap; i++) {
        n += (size_t)snprintf(buf + n, cap - n, "boot %s %016" PRIx64 "%s\n", m->boot[i].id,
                              m->boot[i].boot_id, m->boot[i].stale ? " stale" : "");
    }
    *len = n < cap ? n : cap - 1;
    return buf;
}

/* Parse an unsigned decimal field; -1 when it is not one. */
static int
parse_u64(const char *s, uint64_t *out)
{
    char *end;

    if (*s < '0' || *s > '9') {
        return -1;
    }
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno != 0 || *end != '\0' ? -1 : 0;
}

/* trec_parse: see ctl_pending.h. Unknown keys are an error; '#' lines
 * and empty lines are skipped. */
int
trec_parse(const char *text, const char *where, struct trec *m, char *err, size_t errlen)
{
    const char *p = text, *nl;
    unsigned    seen = 0;
    int         line = 0;
    char        buf[1024], *val;

    memset(m, 0, sizeof(*m));
    for (; *p != '\0'; p = nl + 1) {
        size_t   l;
        uint64_t v;

        line++;
        nl = strchr(p, '\n');
        if (nl == NULL) {
            nl = p + strlen(p) - 1;
            l = strlen(p);
        } else {
            l = (size_t)(nl - p);
        }
        if (l == 0 || p[0] == '#') {
            continue;
        }
        if (l >= sizeof(buf)) {
            snprintf(err, errlen, "%s:%d: line too long", where, line);
            goto fail;
        }
        memcpy(buf, p, l);
        buf[l] = '\0';
        val = strchr(buf, ' ');
        if (val == NULL) {
            snprintf(err, errlen, "%s:%d: expected 'key value'", where, line);
            goto fail;
        }
        *val++ = '\0';
        if (strcmp(buf, "token") == 0) {
            if (ctl_unhex(val, strlen(val), m->token, TREC_TOKEN_BYTES) != 0) {
                snprintf(err, errlen, "%s:%d: token must be %d hex digits", where, line,
                         2 * TREC_TOKEN_BYTES);
                goto fail;
            }
            seen |= 1;
        } else if (strcmp(buf, "phase") == 0) {
            int k;

            for (k = TREC_PREPARED; k <= TREC_ABORTED; k++) {
                if (strcmp(val, tphase_names[k]) == 0) {
                    m->phase = (enum trec_phase)k;
                }
            }
            if (m->phase == 0) {
                snprintf(err, errlen, "%s:%d: unknown phase '%s'", where, line, val);
                goto fail;
            }
            seen |= 2;
        } else if (strcmp(buf, "from_epoch") == 0 || strcmp(buf, "epoch") == 0 ||
                   strcmp(buf, "rate") == 0 || strcmp(buf, "started") == 0 ||
                   strcmp(buf, "written") == 0) {
            if (parse_u64(val, &v) != 0) {
                snprintf(err, errlen, "%s:%d: %.32s: expected a number", where, line, buf);
                goto fail;
            }
            if (buf[0] == 'f') {
                m->from_epoch = v;
                seen |= 4;
            } else if (buf[0] == 'e') {
                m->epoch = v;
                seen |= 8;
            } else if (buf[0] == 'r') {
                m->rate = v;
            } else if (buf[0] == 'w') {
                m->written = (int64_t)v;
            } else {
                m->started = (int64_t)v;
            }
        } else if (strcmp(buf, "op") == 0) {
            snprintf(m->op, sizeof(m->op), "%s", val);
        } else if (strcmp(buf, "admin") == 0) {
            snprintf(m->admin, sizeof(m->admin), "%s", val);
        } else if (strcmp(buf, "boot") == 0) {
            char             *sp = strchr(val, ' ');
            struct trec_boot *nb;
            char             *end;
            bool              stale = false;

            if (sp == NULL || sp == val || (size_t)(sp - val) > RING_ID_MAX) {
                snprintf(err, errlen, "%s:%d: expected 'boot ID HEX'", where, line);
                goto fail;
            }
            *sp++ = '\0';
            errno = 0;
            v = strtoull(sp, &end, 16);
            if (strcmp(end, " stale") == 0) {
                stale = true;
                *end = '\0';
            }
            if (errno != 0 || *end != '\0' || end == sp) {
                snprintf(err, errlen, "%s:%d: bad boot id '%s'", where, line, sp);
                goto fail;
            }
            nb = realloc(m->boot, (m->n_boot + 1) * sizeof(*nb));
            if (nb == NULL) {
                snprintf(err, errlen, "out of memory");
                goto fail;
            }
            m->boot = nb;
            snprintf(nb[m->n_boot].id, sizeof(nb[m->n_boot].id), "%s", val);
            nb[m->n_boot].boot_id = v;
            nb[m->n_boot].stale = stale;
            m->n_boot++;
        } else {
            snprintf(err, errlen, "%s:%d: unknown key '%.64s'", where, line, buf);
            goto fail;
        }
        if (nl[0] == '\0') {
            break;
        }
    }
    if (seen != 15) {
        snprintf(err, errlen, "%s:%d: missing %s line", where, line,
                 !(seen & 1)   ? "token"
                 : !(seen & 2) ? "phase"
                 : !(seen & 4) ? "from_epoch"
                               : "epoch");
        goto fail;
    }
    if (m->epoch != m->from_epoch + 1) {
        snprintf(err, errlen, "%s:%d: epoch must be from_epoch + 1", where, line);
        goto fail;
    }
    return 0;
fail:
    trec_clear(m);
    return -1;
}

/* trec_boot_id: see ctl_pending.h. */
uint64_t
trec_boot_id(const struct trec *m, const char *id)
{
    uint32_t i;

    for (i = 0; i < m->n_boot; i++) {
        if (strcmp(m->boot[i].id, id) == 0) {
            return m->boot[i].boot_id;
        }
    }
    return 0;
}

/* trec_of_record: see ctl_pending.h. */
int
trec_of_record(const struct mstore_record *rec, struct trec *t, bool *have, uint64_t *rev)
{
    char err[MSTORE_WHERE_MAX + 1024];

    trec_clear(t);
    *have = false;
    *rev = 0;
    if (rec->rev == 0) {
        return EX_OK;
    }
    if (trec_parse(rec->text, rec->where, t, err, sizeof(err)) != 0) {
        ctl_error("%s", err);
        return EX_USAGE;
    }
    *rev = rec->rev;
    *have = true;
    return EX_OK;
}

/* trec_load: see ctl_pending.h. */
int
trec_load(struct mstore *s, const char *name, struct trec *t, bool *have, uint64_t *rev)
{
    char                 err[MSTORE_WHERE_MAX + 1024];
    struct mstore_record rec;
    int                  rc;

    trec_clear(t);
    *have = false;
    *rev = 0;
    rc = mstore_get(s, name, &rec, err, sizeof(err));
    if (rc == MSTORE_ENOENT) {
        return EX_OK;
    }
    if (rc != MSTORE_OK) {
        ctl_error("%s", err);
        return EX_USAGE;
    }
    rc = trec_of_record(&rec, t, have, rev);
    mstore_record_clear(&rec);
    return rc;
}

/* trec_store: see ctl_pending.h. */
int
trec_store(struct mstore *s, const struct trec *t, uint64_t *rev)
{
    char     err[MSTORE_WHERE_MAX + 1024];
    uint64_t nrev = 0;
    size_t   len = 0;
    char    *text = trec_format(t, &len);
    int      rc;

    if (text == NULL) {
        ctl_error("out of memory");
        return EX_FAILED;
    }
    rc = mstore_cas(s, REC_PENDING_TREC, *rev, text, len, &nrev, err, sizeof(err));
    free(text);
    if (rc != MSTORE_OK) {
        ctl_error("store: cannot record phase %s: %s%s", trec_phase_name(t->phase), err,
                  rc == MSTORE_ECONFLICT ? " (another admin aborted or took over?)" : "");
        return EX_FAILED;
    }
    *rev = nrev;
    return EX_OK;
}

/* trec_aborted_load: see ctl_pending.h. */
uint32_t
trec_aborted_load(struct mstore *s, struct trec_aborted *out, uint32_t max)
{
    struct mstore_record rec;
    char                 err[MSTORE_WHERE_MAX + 256];
    const char          *p;
    uint32_t             n = 0;

    if (mstore_get(s, REC_ABORTED_TOKENS, &rec, err, sizeof(err)) != MSTORE_OK) {
        return 0;
    }
    for (p = rec.text; p != NULL && *p != '\0' && n < max;) {
        const char        *nl = strchr(p, '\n');
        char               hex[2 * TREC_TOKEN_BYTES + 1];
        unsigned long long e;

        if (sscanf(p, "epoch %llu token %32s", &e, hex) == 2 && strlen(hex) == sizeof(hex) - 1 &&
            ctl_unhex(hex, strlen(hex), out[n].token, TREC_TOKEN_BYTES) == 0) {
            out[n++].epoch = e;
        }
        p = nl != NULL ? nl + 1 : NULL;
    }
    mstore_record_clear(&rec);
    return n;
}

/* trec_aborted_text: see ctl_pending.h. */
char *
trec_aborted_text(struct mstore *s, const struct trec *t, size_t *len)
{
    struct trec_aborted old[TREC_ABORTED_KEEP];
    uint32_t            n = trec_aborted_load(s, old, TREC_ABORTED_KEEP - 1), i;
    size_t              cap = (size_t)(n + 1) * (2 * TREC_TOKEN_BYTES + 48), used = 0;
    char               *buf = malloc(cap);
    char                hex[2 * TREC_TOKEN_BYTES + 1];

    if (buf == NULL) {
        return NULL;
    }
    util_hex(t->token, TREC_TOKEN_BYTES, hex);
    used += (size_t)snprintf(buf + used, cap - used, "epoch %" PRIu64 " token %s\n", t->epoch, hex);
    for (i = 0; i < n; i++) {
        if (memcmp(old[i].token, t->token, TREC_TOKEN_BYTES) == 0) {
            continue;
        }
        util_hex(old[i].token, TREC_TOKEN_BYTES, hex);
        used += (size_t)snprintf(buf + used, cap - used, "epoch %" PRIu64 " token %s\n",
                                 old[i].epoch, hex);
    }
    *len = used;
    return buf;
}
