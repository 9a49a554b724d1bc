/*
 * etcd_spec: the etcd store's spec, etcd://HOST:PORT[,HOST:PORT...]/PREFIX
 * [?OPTIONS] (etcds:// for TLS), parsed into struct etcd_store. OPTIONS,
 * '&'-separated: cacert=FILE, cert=FILE, key=FILE (TLS), user=NAME and
 * password-file=FILE (etcd auth; the password never on a command line),
 * timeout=MS (each request, default 5000).
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "lib/etcd_internal.h"
#include "lib/mstore.h"
#include "lib/util.h"

/* Read the first line of a password file (without its newline). */
static int
read_password(const char *path, char **out, char *err, size_t errlen)
{
    char  *text = NULL;
    size_t len = 0;

    int rc = util_read_file(path, 4096, &text, &len, err, errlen);

    if (rc != 0) {
        if (rc == 1) {
            util_set_err(err, errlen, "etcd password-file %s: no such file", path);
        }
        return MSTORE_EINVAL;
    }
    len = strcspn(text, "\r\n");
    text[len] = '\0';
    if (len == 0) {
        util_set_err(err, errlen, "etcd password-file %s:1: empty password", path);
        free(text);
        return MSTORE_EINVAL;
    }
    *out = text;
    return MSTORE_OK;
}

/* One "name=value" option of the spec's query. */
static int
parse_option(struct etcd_store *e, const char *opt, size_t len, char *err, size_t errlen)
{
    static const char *const names[] = {
        "cacert", "cert", "key", "user", "password-file", "timeout"
    };
    const char *eq = memchr(opt, '=', len);
    size_t      nlen = eq != NULL ? (size_t)(eq - opt) : len, i;
    char       *val;
    int         rc = MSTORE_OK;

    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strlen(names[i]) == nlen && memcmp(names[i], opt, nlen) == 0) {
            break;
        }
    }
    if (eq == NULL || eq + 1 == opt + len || i == sizeof(names) / sizeof(names[0])) {
        util_set_err(err, errlen,
                     "etcd store option '%.*s': expected cacert=, cert=, key=, user=, "
                     "password-file= or timeout= with a value",
                     (int)len, opt);
        return MSTORE_EINVAL;
    }
    val = strndup(eq + 1, len - nlen - 1);
    if (val == NULL) {
        return MSTORE_ENOMEM;
    }
    if (i < 4) {
        char **slot[] = { &e->cacert, &e->cert, &e->key, &e->user };

        free(*slot[i]);
        *slot[i] = val;
        return MSTORE_OK;
    }
    switch (i) {
    case 4:
        if (e->password != NULL) {
            memset(e->password, 0, strlen(e->password));
            free(e->password);
            e->password = NULL;
        }
        rc = read_password(val, &e->password, err, errlen);
        free(val);
        break;
    default: {
        uint64_t ms;

        if (!util_parse_u64(val, &ms) || ms < 100 || ms > 600000) {
            util_set_err(err, errlen, "etcd store option timeout=%s: expected 100..600000 ms", val);
            rc = MSTORE_EINVAL;
        } else {
            e->timeout_ms = (long)ms;
        }
        free(val);
        break;
    }
    }
    return rc;
}

/* See etcd_internal.h. */
int
etcd_spec_parse(struct etcd_store *e, const char *spec, char *err, size_t errlen)
{
    const char *p, *slash, *q, *end;
    size_t      plen;

    e->tls = strncmp(spec, "etcds://", 8) == 0;
    p = spec + (e->tls ? 8 : 7);
    slash = strchr(p, '/');
    if (slash == NULL || slash == p) {
        util_set_err(err, errlen, "%s: expected etcd://HOST:PORT[,HOST:PORT...]/PREFIX", spec);
        return MSTORE_EINVAL;
    }
    while (p < slash) {
        const char *comma = memchr(p, ',', (size_t)(slash - p));
        const char *stop = comma != NULL ? comma : slash;
        const char *colon = memrchr(p, ':', (size_t)(stop - p));
        uint64_t    port;

        if (stop == p || colon == NULL || colon == p || (comma != NULL && comma + 1 == slash) ||
            !util_parse_u64n(colon + 1, (size_t)(stop - colon - 1), &port) || port == 0 ||
            port > 65535) {
            util_set_err(err, errlen, "%s: endpoint '%.*s' is not HOST:PORT", spec,
                         (int)(slash - p), p);
            return MSTORE_EINVAL;
        }
        if (e->n_endpoints == ETCD_ENDPOINTS_MAX) {
            util_set_err(err, errlen, "%s: more than %d endpoints", spec, ETCD_ENDPOINTS_MAX);
            return MSTORE_EINVAL;
        }
        e->endpoint[e->n_endpoints] = strndup(p, (size_t)(stop - p));
        if (e->endpoint[e->n_endpoints] == NULL) {
            return MSTORE_ENOMEM;
        }
        e->n_endpoints++;
        p = comma != NULL ? comma + 1 : slash;
    }
    q = strchr(slash, '?');
    end = q != NULL ? q : slash + strlen(slash);
    plen = (size_t)(end - slash);
    while (plen > 1 && slash[plen - 1] == '/') {
        plen--;
    }
    if (plen <= 1) {
        util_set_err(err, errlen, "%s: the key prefix is empty (etcd://HOST:PORT/PREFIX)", spec);
        return MSTORE_EINVAL;
    }
    e->prefix = strndup(slash, plen);
    if (e->prefix == NULL) {
        return MSTORE_ENOMEM;
    }
    while (q != NULL && *q != '\0') {
        const char *opt = q + 1, *amp = strchr(opt, '&');
        size_t      olen = amp != NULL ? (size_t)(amp - opt) : strlen(opt);
        int         rc = parse_option(e, opt, olen, err, errlen);

        if (rc != MSTORE_OK) {
            return rc;
        }
        q = amp;
    }
    if ((e->cert == NULL) != (e->key == NULL)) {
        util_set_err(err, errlen, "%s: cert= and key= go together", spec);
        return MSTORE_EINVAL;
    }
    if (!e->tls && (e->cacert != NULL || e->cert != NULL)) {
        util_set_err(err, errlen, "%s: TLS options need etcds://", spec);
        return MSTORE_EINVAL;
    }
    if ((e->user == NULL) != (e->password == NULL)) {
        util_set_err(err, errlen, "%s: user= and password-file= go together", spec);
        return MSTORE_EINVAL;
    }
    snprintf(e->spec_where, sizeof(e->spec_where), "%s://%s%s", e->tls ? "etcds" : "etcd",
             e->endpoint[0], e->prefix);
    return MSTORE_OK;
}
