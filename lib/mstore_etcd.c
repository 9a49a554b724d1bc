/*
 * mstore_etcd: the membership store in etcd v3, through its JSON gateway
 * (POST /v3/kv/range, /v3/kv/txn, /v3/auth/authenticate) with libcurl and
 * json-c. A record NAME is the key PREFIX/NAME; its revision is the key's
 * mod_revision, which etcd makes store-wide and never reuses, as the
 * directory backend's counter does. A transaction is one etcd txn: every
 * check is a compare on mod_revision (0: absent), so either all writes
 * apply at one revision or none.
 *
 * Spec: etcd://HOST:PORT[,HOST:PORT...]/PREFIX[?OPTIONS] (etcds:// for
 * TLS). OPTIONS, '&'-separated: cacert=FILE, cert=FILE, key=FILE (TLS),
 * user=NAME and password-file=FILE (etcd auth; the password never on a
 * command line), timeout=MS (each request, default 5000).
 *
 * Endpoints are tried in order from the last one that answered. A request
 * that never reached etcd (no connection) moves on to the next endpoint;
 * a write that may have reached it and timed out is not sent again
 * (MSTORE_EIO, "outcome unknown"), since a second try of an applied txn
 * would fail its compares and read as another admin's win.
 *
 * The gateway's quirks: keys and values travel base64-encoded, int64s as
 * strings, zero values are omitted (a txn whose compares failed has no
 * "succeeded"; a missing key has no "kvs").
 */
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "lib/mstore.h"
#include "lib/util.h"

#define ETCD_ENDPOINTS_MAX 16
#define ETCD_TIMEOUT_MS    5000                    /* default per-request limit */
#define ETCD_CONNECT_MS    1000                    /* connect limit per endpoint */
#define ETCD_REPLY_MAX     (MSTORE_RECORD_MAX * 2) /* a reply larger is refused */
#define ETCD_EAUTH         (-100)                  /* post_one: etcd refused the auth token */

struct etcd_store {
    char  *endpoint[ETCD_ENDPOINTS_MAX]; /* "HOST:PORT" */
    size_t n_endpoints;
    size_t current;  /* the endpoint that answered last */
    char  *prefix;   /* "/ringcache/prod", no trailing '/' */
    bool   tls;      /* etcds:// */
    char  *cacert;   /* TLS: CA bundle to verify etcd with (NULL: system's) */
    char  *cert;     /* TLS: client certificate */
    char  *key;      /* TLS: its key */
    char  *user;     /* auth: user name (NULL: no auth) */
    char  *password; /* auth: read from password-file at open */
    char  *token;    /* auth: the token etcd gave (NULL until authenticated) */
    long   timeout_ms;
    CURL  *curl;
    char   spec_where[512]; /* "etcd://HOST:PORT/PREFIX" for messages */
};

/* A growing reply buffer for curl's write callback. */
struct reply_buf {
    char  *data;
    size_t len, cap;
    bool   too_big;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode       curl_init_rc;

static void
curl_init_once(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/*
 * base64 (RFC 4648, with padding), as the gateway wants bytes
 */

static const char b64_chars[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Encode len bytes into a malloc'd NUL-terminated string (NULL: ENOMEM). */
static char *
b64_encode(const void *src, size_t len)
{
    const unsigned char *s = src;
    char                *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
    size_t               i;

    if (out == NULL) {
        return NULL;
    }
    for (i = 0; i + 2 < len; i += 3) {
        *o++ = b64_chars[s[i] >> 2];
        *o++ = b64_chars[(s[i] & 3) << 4 | s[i + 1] >> 4];
        *o++ = b64_chars[(s[i + 1] & 15) << 2 | s[i + 2] >> 6];
        *o++ = b64_chars[s[i + 2] & 63];
    }
    if (i < len) {
        *o++ = b64_chars[s[i] >> 2];
        if (i + 1 < len) {
            *o++ = b64_chars[(s[i] & 3) << 4 | s[i + 1] >> 4];
            *o++ = b64_chars[(s[i + 1] & 15) << 2];
        } else {
            *o++ = b64_chars[(s[i] & 3) << 4];
            *o++ = '=';
        }
        *o++ = '=';
    }
    *o = '\0';
    return out;
}

static int
b64_value(char c)
{
    const char *p = c != '\0' ? strchr(b64_chars, c) : NULL;

    return p != NULL ? (int)(p - b64_chars) : -1;
}

/* Decode a base64 string into a malloc'd buffer with room for `head`
 * bytes in front and a NUL after (out, *outlen = decoded length). -1 on
 * bad input (NULL too: what json_object_get_string makes of a JSON null),
 * -2 on ENOMEM. */
static int
b64_decode(const char *src, size_t head, char **out, size_t *outlen)
{
    size_t len, i, n = 0;
    char  *buf;
    int    v[4];

    if (src == NULL) {
        return -1;
    }
    len = strlen(src);
    while (len > 0 && src[len - 1] == '=') {
        len--;
    }
    if (len % 4 == 1) {
        return -1;
    }
    buf = malloc(head + len / 4 * 3 + 3 + 1);
    if (buf == NULL) {
        return -2;
    }
    for (i = 0; i < len; i += 4) {
        size_t k, m = len - i < 4 ? len - i : 4;

        for (k = 0; k < 4; k++) {
            v[k] = k < m ? b64_value(src[i + k]) : 0;
            if (v[k] < 0) {
                free(buf);
                return -1;
            }
        }
        buf[head + n++] = (char)(v[0] << 2 | v[1] >> 4);
        if (m > 2) {
            buf[head + n++] = (char)((v[1] & 15) << 4 | v[2] >> 2);
        }
        if (m > 3) {
            buf[head + n++] = (char)((v[2] & 3) << 6 | v[3]);
        }
    }
    buf[head + n] = '\0';
    *out = buf;
    *outlen = n;
    return 0;
}

/*
 * The spec
 */

static void
etcd_free(struct etcd_store *e)
{
    size_t i;

    if (e == NULL) {
        return;
    }
    for (i = 0; i < e->n_endpoints; i++) {
        free(e->endpoint[i]);
    }
    free(e->prefix);
    free(e->cacert);
    free(e->cert);
    free(e->key);
    free(e->user);
    if (e->password != NULL) {
        memset(e->password, 0, strlen(e->password));
        free(e->password);
    }
    free(e->token);
    if (e->curl != NULL) {
        curl_easy_cleanup(e->curl);
    }
    free(e);
}

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

/* Parse "etcd[s]://H:P[,H:P...]/PREFIX[?OPTS]" into e. */
static int
parse_spec(struct etcd_store *e, const char *spec, char *err, size_t errlen)
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

/*
 * HTTP and JSON
 */

static size_t
reply_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct reply_buf *b = arg;
    size_t            n = size * nmemb;

    if (b->len + n + 1 > ETCD_REPLY_MAX) {
        b->too_big = true;
        return 0;
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap != 0 ? b->cap : 4096;
        char  *d;

        while (cap < b->len + n + 1) {
            cap *= 2;
        }
        d = realloc(b->data, cap);
        if (d == NULL) {
            return 0;
        }
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* Did the request surely not reach etcd (so another endpoint may get it)? */
static bool
never_sent(CURLcode rc)
{
    return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
           rc == CURLE_SSL_CONNECT_ERROR || rc == CURLE_PEER_FAILED_VERIFICATION;
}

/* The error etcd put in a reply ({"error": ..., "message": ..., "code": N}),
 * or NULL. */
static const char *
reply_error(json_object *j, int *code)
{
    json_object *v;

    *code = 0;
    /* A streamed reply (watch) nests it: {"error": {"grpc_code": N,
     * "message": ...}}. */
    if (json_object_object_get_ex(j, "error", &v) && json_object_is_type(v, json_type_object)) {
        j = v;
        if (json_object_object_get_ex(j, "grpc_code", &v)) {
            *code = json_object_get_int(v);
        }
    }
    if (json_object_object_get_ex(j, "code", &v)) {
        *code = json_object_get_int(v);
    }
    if (json_object_object_get_ex(j, "message", &v) || json_object_object_get_ex(j, "error", &v)) {
        return json_object_get_string(v);
    }
    return NULL;
}

/* Point the handle at endpoint ep's path with body (kept by the caller
 * until the transfer ends) and the JSON and auth headers; returns the
 * header list to free after the transfer. */
static struct curl_slist *
request_begin(struct etcd_store *e, size_t ep, const char *path, const char *body)
{
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    char               url[1024], auth[4096];

    snprintf(url, sizeof(url), "%s://%s%s", e->tls ? "https" : "http", e->endpoint[ep], path);
    if (e->token != NULL) {
        snprintf(auth, sizeof(auth), "Authorization: %s", e->token);
        hdr = curl_slist_append(hdr, auth);
    }
    curl_easy_setopt(e->curl, CURLOPT_URL, url);
    curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e->curl, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    return hdr;
}

/* POST body to one endpoint: the parsed JSON reply in *out, or curl's
 * code (*crc) / an HTTP or parse failure in err. */
static int
post_one(struct etcd_store *e, size_t ep, const char *path, const char *body, json_object **out,
         CURLcode *crc, char *err, size_t errlen)
{
    struct curl_slist      *hdr = NULL;
    struct reply_buf        b = { 0 };
    long                    status = 0;
    json_object            *j;
    enum json_tokener_error jerr = json_tokener_success;
    int                     code;
    const char             *why;

    *out = NULL;
    hdr = request_begin(e, ep, path, body);
    curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, reply_write);
    curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, &b);
    *crc = curl_easy_perform(e->curl);
    curl_slist_free_all(hdr);
    curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, NULL);
    if (*crc != CURLE_OK) {
        bool dropped =
            *crc == CURLE_GOT_NOTHING || *crc == CURLE_SEND_ERROR || *crc == CURLE_RECV_ERROR;

        /* A TLS etcd hangs up on plain HTTP, and on TLS without the
         * client certificate it requires. */
        util_set_err(err, errlen, "etcd %s: %s%s", e->endpoint[ep],
                     b.too_big ? "reply too large" : curl_easy_strerror(*crc),
                     !dropped ? ""
                     : e->tls ? " (does etcd require a client certificate: cert=, key=?)"
                              : " (is it a TLS etcd? then etcds:// with cacert=)");
        free(b.data);
        return MSTORE_EIO;
    }
    curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, &status);
    j = b.data != NULL ? json_tokener_parse_verbose(b.data, &jerr) : NULL;
    if (j == NULL || !json_object_is_type(j, json_type_object)) {
        util_set_err(err, errlen, "etcd %s%s: HTTP %ld, not a JSON object (%s)", e->endpoint[ep],
                     path, status,
                     jerr != json_tokener_success ? json_tokener_error_desc(jerr) : "empty");
        json_object_put(j);
        free(b.data);
        return MSTORE_EIO;
    }
    free(b.data);
    why = reply_error(j, &code);
    if (status != 200 || why != NULL) {
        util_set_err(err, errlen, "etcd %s%s: HTTP %ld: %s (code %d)", e->endpoint[ep], path,
                     status, why != NULL ? why : "error", code);
        json_object_put(j);
        /* gRPC Unauthenticated (16): the token expired or was revoked. */
        return code == 16 ? ETCD_EAUTH : MSTORE_EIO;
    }
    *out = j;
    return MSTORE_OK;
}

static int authenticate(struct etcd_store *e, char *err, size_t errlen);

/* POST body to path, trying the endpoints in turn (see the top). A write
 * (idempotent = false) is sent to another endpoint only when it surely did
 * not reach the first. A rejected auth token is renewed once. */
static int
post(struct etcd_store *e, const char *path, const char *body, bool idempotent, json_object **out,
     char *err, size_t errlen)
{
    size_t   tried, ep;
    int      rc = MSTORE_EIO, reauth = e->user != NULL && strcmp(path, "/v3/auth/authenticate");
    CURLcode crc = CURLE_OK;

    if (reauth && e->token == NULL && (rc = authenticate(e, err, errlen)) != MSTORE_OK) {
        return rc;
    }
    for (tried = 0; tried < e->n_endpoints; tried++) {
        ep = (e->current + tried) % e->n_endpoints;
        rc = post_one(e, ep, path, body, out, &crc, err, errlen);
        if (rc == ETCD_EAUTH && reauth) {
            /* The token was refused: a new one, then this endpoint again. */
            reauth = 0;
            free(e->token);
            e->token = NULL;
            if ((rc = authenticate(e, err, errlen)) != MSTORE_OK) {
                return rc;
            }
            rc = post_one(e, ep, path, body, out, &crc, err, errlen);
        }
        if (rc == ETCD_EAUTH) {
            return MSTORE_EIO; /* still refused: the message says why */
        }
        if (rc == MSTORE_OK) {
            e->current = ep;
            return MSTORE_OK;
        }
        if (crc == CURLE_OK || (!idempotent && !never_sent(crc))) {
            if (!idempotent && crc != CURLE_OK) {
                size_t l = strlen(err);

                snprintf(err + l, errlen > l ? errlen - l : 0,
                         " (the write may or may not have been applied: read the store again)");
            }
            return MSTORE_EIO; /* etcd answered an error, or the outcome is unknown */
        }
    }
    if (e->n_endpoints > 1) {
        size_t l = strlen(err);

        snprintf(err + l, errlen > l ? errlen - l : 0, " (and %zu other endpoint%s)",
                 e->n_endpoints - 1, e->n_endpoints > 2 ? "s" : "");
    }
    return rc;
}

/* Log in: POST /v3/auth/authenticate, keep the token. */
static int
authenticate(struct etcd_store *e, char *err, size_t errlen)
{
    json_object *req = json_object_new_object(), *rep = NULL, *tok;
    int          rc;

    if (req == NULL) {
        return MSTORE_ENOMEM;
    }
    json_object_object_add(req, "name", json_object_new_string(e->user));
    json_object_object_add(req, "password", json_object_new_string(e->password));
    rc = post(e, "/v3/auth/authenticate",
              json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN), true, &rep, err, errlen);
    json_object_put(req);
    if (rc != MSTORE_OK) {
        return rc;
    }
    if (!json_object_object_get_ex(rep, "token", &tok) ||
        !json_object_is_type(tok, json_type_string) ||
        (e->token = strdup(json_object_get_string(tok))) == NULL) {
        util_set_err(err, errlen, "etcd: authenticate as %s: no token in the reply", e->user);
        json_object_put(rep);
        return MSTORE_EIO;
    }
    json_object_put(rep);
    return MSTORE_OK;
}

/* A field that the gateway sends as a decimal string (int64), or 0 when
 * absent (a zero value is omitted). */
static uint64_t
json_u64(json_object *o, const char *field)
{
    json_object *v;
    uint64_t     n = 0;
    const char  *s;

    if (o == NULL || !json_object_object_get_ex(o, field, &v)) {
        return 0;
    }
    s = json_object_get_string(v);
    if (s == NULL || !util_parse_u64(s, &n)) {
        return 0;
    }
    return n;
}

/* The etcd key of record name, base64-encoded (NULL: ENOMEM). */
static char *
key_b64(const struct etcd_store *e, const char *name)
{
    size_t len = strlen(e->prefix) + 1 + strlen(name);
    char  *k = malloc(len + 1), *b;

    if (k == NULL) {
        return NULL;
    }
    snprintf(k, len + 1, "%s/%s", e->prefix, name);
    b = b64_encode(k, len);
    free(k);
    return b;
}

/* A JSON string value holding the record key (ownership passes to json). */
static json_object *
key_json(const struct etcd_store *e, const char *name)
{
    char        *b = key_b64(e, name);
    json_object *o = b != NULL ? json_object_new_string(b) : NULL;

    free(b);
    return o;
}

/* The first kv of a range reply (NULL: the key is absent). */
static json_object *
first_kv(json_object *range)
{
    json_object *kvs;

    if (range == NULL || !json_object_object_get_ex(range, "kvs", &kvs) ||
        !json_object_is_type(kvs, json_type_array) || json_object_array_length(kvs) == 0) {
        return NULL;
    }
    return json_object_array_get_idx(kvs, 0);
}

/*
 * The backend
 */

static int
etcd_open(const char *spec, void **state, char *err, size_t errlen)
{
    struct etcd_store *e = calloc(1, sizeof(*e));
    int                rc;

    if (e == NULL) {
        return MSTORE_ENOMEM;
    }
    e->timeout_ms = ETCD_TIMEOUT_MS;
    rc = parse_spec(e, spec, err, errlen);
    if (rc != MSTORE_OK) {
        etcd_free(e);
        return rc;
    }
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK || (e->curl = curl_easy_init()) == NULL) {
        util_set_err(err, errlen, "etcd: cannot start libcurl");
        etcd_free(e);
        return MSTORE_EIO;
    }
    curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_CONNECT_MS);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, e->timeout_ms);
    curl_easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, e->tls ? "https" : "http");
    if (e->tls) {
        curl_easy_setopt(e->curl, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(e->curl, CURLOPT_SSL_VERIFYHOST, 2L);
        if (e->cacert != NULL) {
            curl_easy_setopt(e->curl, CURLOPT_CAINFO, e->cacert);
        }
        if (e->cert != NULL) {
            curl_easy_setopt(e->curl, CURLOPT_SSLCERT, e->cert);
            curl_easy_setopt(e->curl, CURLOPT_SSLKEY, e->key);
        }
    }
    *state = e;
    return MSTORE_OK;
}

static void
etcd_close(void *state)
{
    etcd_free(state);
}

/* Make rec from a kv: "# rev N\n" then the value. */
static int
record_from_kv(json_object *kv, struct mstore_record *rec, char *err, size_t errlen)
{
    json_object *v;
    char         head[32];
    size_t       hlen, vlen = 0;
    char        *text = NULL;
    int          rc;

    rec->rev = json_u64(kv, "mod_revision");
    if (rec->rev == 0) {
        util_set_err(err, errlen, "%s: the key has no mod_revision", rec->where);
        return MSTORE_ECORRUPT;
    }
    hlen = (size_t)snprintf(head, sizeof(head), "# rev %" PRIu64 "\n", rec->rev);
    /* An empty value is omitted by the gateway. */
    rc = b64_decode(json_object_object_get_ex(kv, "value", &v) ? json_object_get_string(v) : "",
                    hlen, &text, &vlen);
    if (rc == -2) {
        return MSTORE_ENOMEM;
    }
    if (rc != 0) {
        util_set_err(err, errlen, "%s: the value is not base64", rec->where);
        return MSTORE_ECORRUPT;
    }
    memcpy(text, head, hlen);
    rec->text = text;
    rec->len = hlen + vlen;
    return MSTORE_OK;
}

static int
etcd_get(void *state, const char *name, struct mstore_record *rec, char *err, size_t errlen)
{
    struct etcd_store *e = state;
    json_object       *req = json_object_new_object(), *rep = NULL, *kv;
    json_object       *key = key_json(e, name);
    int                rc;

    memset(rec, 0, sizeof(*rec));
    snprintf(rec->where, sizeof(rec->where), "%s/%s", e->spec_where, name);
    if (req == NULL || key == NULL) {
        json_object_put(req);
        json_object_put(key);
        return MSTORE_ENOMEM;
    }
    json_object_object_add(req, "key", key);
    rc = post(e, "/v3/kv/range", json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN), true,
              &rep, err, errlen);
    json_object_put(req);
    if (rc != MSTORE_OK) {
        return rc;
    }
    kv = first_kv(rep);
    rc = kv == NULL ? MSTORE_ENOENT : record_from_kv(kv, rec, err, errlen);
    json_object_put(rep);
    return rc;
}

/* One txn without conditions whose success branch is a range per record:
 * etcd runs it at one revision. */
static int
etcd_get_many(void *state, const char *const *names, size_t n, struct mstore_record *recs,
              char *err, size_t errlen)
{
    struct etcd_store *e = state;
    json_object       *req = json_object_new_object(), *ok = json_object_new_array();
    json_object       *rep = NULL, *resps = NULL;
    size_t             i;
    int                rc = MSTORE_OK;

    if (req == NULL || ok == NULL) {
        json_object_put(req);
        json_object_put(ok);
        return MSTORE_ENOMEM;
    }
    json_object_object_add(req, "success", ok);
    for (i = 0; i < n; i++) {
        json_object *r = json_object_new_object(), *rr = json_object_new_object();
        json_object *key = key_json(e, names[i]);

        if (r == NULL || rr == NULL || key == NULL) {
            json_object_put(r);
            json_object_put(rr);
            json_object_put(key);
            json_object_put(req);
            return MSTORE_ENOMEM;
        }
        json_object_object_add(rr, "key", key);
        json_object_object_add(r, "request_range", rr);
        json_object_array_add(ok, r);
    }
    rc = post(e, "/v3/kv/txn", json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN), true,
              &rep, err, errlen);
    json_object_put(req);
    if (rc != MSTORE_OK) {
        return rc;
    }
    if (!json_object_object_get_ex(rep, "responses", &resps) ||
        !json_object_is_type(resps, json_type_array) || json_object_array_length(resps) != n) {
        util_set_err(err, errlen, "%s: a read of %zu records got a malformed reply",
                     e->spec_where, n);
        json_object_put(rep);
        return MSTORE_EIO;
    }
    for (i = 0; i < n && rc == MSTORE_OK; i++) {
        json_object *range = NULL, *kv;

        snprintf(recs[i].where, sizeof(recs[i].where), "%s/%s", e->spec_where, names[i]);
        json_object_object_get_ex(json_object_array_get_idx(resps, i), "response_range", &range);
        kv = first_kv(range);
        if (kv != NULL) {
            rc = record_from_kv(kv, &recs[i], err, errlen);
        }
    }
    json_object_put(rep);
    return rc;
}

/* The revision op i requires of its record, or false if it requires
 * none (a write of whatever is there). */
static bool
op_expects(const struct mstore_op *op, uint64_t *rev)
{
    switch (op->kind) {
    case MSTORE_CHECK:
        *rev = op->rev;
        return true;
    case MSTORE_CREATE:
        *rev = 0;
        return true;
    default:
        *rev = op->rev;
        return op->rev != MSTORE_ANY_REV;
    }
}

/* Build the txn: a compare per condition, the writes on success, and on
 * failure a read of every checked key (to name the op that failed). */
static json_object *
txn_request(const struct etcd_store *e, const struct mstore_op *ops, size_t n_ops)
{
    json_object *req = json_object_new_object();
    json_object *cmp = json_object_new_array(), *ok = json_object_new_array();
    json_object *fail = json_object_new_array();
    size_t       i;

    if (req == NULL || cmp == NULL || ok == NULL || fail == NULL) {
        json_object_put(req);
        json_object_put(cmp);
        json_object_put(ok);
        json_object_put(fail);
        return NULL;
    }
    json_object_object_add(req, "compare", cmp);
    json_object_object_add(req, "success", ok);
    json_object_object_add(req, "failure", fail);
    for (i = 0; i < n_ops; i++) {
        const struct mstore_op *op = &ops[i];
        uint64_t                rev;
        char                    revs[24];

        if (op_expects(op, &rev)) {
            json_object *c = json_object_new_object(), *r = json_object_new_object();
            json_object *rr = json_object_new_object();

            snprintf(revs, sizeof(revs), "%" PRIu64, rev);
            json_object_object_add(c, "key", key_json(e, op->name));
            json_object_object_add(c, "target", json_object_new_string("MOD"));
            json_object_object_add(c, "result", json_object_new_string("EQUAL"));
            json_object_object_add(c, "mod_revision", json_object_new_string(revs));
            json_object_array_add(cmp, c);
            json_object_object_add(rr, "key", key_json(e, op->name));
            json_object_object_add(r, "request_range", rr);
            json_object_array_add(fail, r);
        }
        if (op->kind == MSTORE_CREATE || op->kind == MSTORE_PUT) {
            json_object *w = json_object_new_object(), *put = json_object_new_object();
            char        *val = b64_encode(op->data != NULL ? op->data : "", op->len);

            json_object_object_add(put, "key", key_json(e, op->name));
            json_object_object_add(put, "value", val != NULL ? json_object_new_string(val) : NULL);
            free(val);
            json_object_object_add(w, "request_put", put);
            json_object_array_add(ok, w);
        } else if (op->kind == MSTORE_DELETE) {
            json_object *w = json_object_new_object(), *del = json_object_new_object();

            json_object_object_add(del, "key", key_json(e, op->name));
            json_object_object_add(w, "request_delete_range", del);
            json_object_array_add(ok, w);
        }
    }
    return req;
}

/* The txn failed: which op's condition does not hold (from the failure
 * branch's reads, one per condition, in op order)? */
static size_t
txn_failed_op(json_object *rep, const struct mstore_op *ops, size_t n_ops)
{
    json_object *resps;
    size_t       i, k = 0;

    if (!json_object_object_get_ex(rep, "responses", &resps) ||
        !json_object_is_type(resps, json_type_array)) {
        return 0;
    }
    for (i = 0; i < n_ops; i++) {
        uint64_t     want;
        json_object *r, *range = NULL;

        if (!op_expects(&ops[i], &want)) {
            continue;
        }
        r = json_object_array_get_idx(resps, k++);
        if (r != NULL) {
            json_object_object_get_ex(r, "response_range", &range);
        }
        if (json_u64(first_kv(range), "mod_revision") != want) {
            return i;
        }
    }
    return 0; /* changed back in between: name the first */
}

static int
etcd_txn(void *state, const struct mstore_op *ops, size_t n_ops, size_t *failed, uint64_t *new_rev,
         char *err, size_t errlen)
{
    struct etcd_store *e = state;
    json_object       *req = txn_request(e, ops, n_ops), *rep = NULL, *ok;
    bool               writes = false;
    size_t             i;
    int                rc;

    if (req == NULL) {
        return MSTORE_ENOMEM;
    }
    for (i = 0; i < n_ops; i++) {
        writes = writes || ops[i].kind != MSTORE_CHECK;
    }
    rc = post(e, "/v3/kv/txn", json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN), !writes,
              &rep, err, errlen);
    json_object_put(req);
    if (rc != MSTORE_OK) {
        return rc;
    }
    if (!json_object_object_get_ex(rep, "succeeded", &ok) || !json_object_get_boolean(ok)) {
        size_t f = txn_failed_op(rep, ops, n_ops);

        if (failed != NULL) {
            *failed = f;
        }
        util_set_err(err, errlen, "%s/%s: revision conflict", e->spec_where, ops[f].name);
        json_object_put(rep);
        return MSTORE_ECONFLICT;
    }
    if (new_rev != NULL) {
        json_object *hdr = NULL;

        json_object_object_get_ex(rep, "header", &hdr);
        *new_rev = json_u64(hdr, "revision");
    }
    json_object_put(rep);
    return MSTORE_OK;
}

/* The watch stream: JSON messages, one after the other, parsed as they
 * come; the transfer ends (the write callback refuses more) at the first
 * message with events, or one saying the start revision was compacted. */
struct watch_stream {
    json_tokener *tok;
    uint64_t      rev; /* the revision of the first change seen */
    bool          changed;
    bool          failed; /* a malformed message, or an error from etcd */
    char          why[256];
};

static void
watch_message(struct watch_stream *w, json_object *msg)
{
    json_object *res, *events, *hdr = NULL;
    int          code;
    const char  *why = reply_error(msg, &code);

    if (why != NULL) {
        w->failed = true;
        snprintf(w->why, sizeof(w->why), "%s (code %d)", why, code);
        return;
    }
    if (!json_object_object_get_ex(msg, "result", &res)) {
        return;
    }
    json_object_object_get_ex(res, "header", &hdr);
    if (json_u64(res, "compact_revision") != 0 ||
        (json_object_object_get_ex(res, "events", &events) &&
         json_object_is_type(events, json_type_array) && json_object_array_length(events) > 0)) {
        w->changed = true;
        w->rev = json_u64(hdr, "revision");
    }
}

static size_t
watch_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct watch_stream *w = arg;
    size_t               n = size * nmemb, off = 0;

    while (off < n && !w->changed && !w->failed) {
        json_object            *msg = json_tokener_parse_ex(w->tok, ptr + off, (int)(n - off));
        enum json_tokener_error jerr = json_tokener_get_error(w->tok);
        size_t                  used = json_tokener_get_parse_end(w->tok);

        if (msg != NULL) {
            watch_message(w, msg);
            json_object_put(msg);
            json_tokener_reset(w->tok);
        } else if (jerr != json_tokener_continue) {
            w->failed = true;
            snprintf(w->why, sizeof(w->why), "bad watch message: %s",
                     json_tokener_error_desc(jerr));
            break;
        }
        if (used == 0) {
            break;
        }
        off += used;
        /* Whitespace between messages. */
        while (off < n && (ptr[off] == '\n' || ptr[off] == '\r' || ptr[off] == ' ')) {
            off++;
        }
    }
    return w->changed || w->failed ? 0 : n;
}

/* A watch on every key under the prefix from rev + 1, for timeout_ms. */
static int
etcd_wait(void *state, uint64_t rev, int timeout_ms, uint64_t *now_rev, char *err, size_t errlen)
{
    struct etcd_store  *e = state;
    struct watch_stream w = { 0 };
    struct curl_slist  *hdr = NULL;
    json_object        *req = json_object_new_object(), *cr = json_object_new_object();
    char                revs[24], *lo, *hi;
    size_t              plen = strlen(e->prefix);
    CURLcode            crc;
    int                 rc = MSTORE_OK;

    if (e->user != NULL && e->token == NULL && (rc = authenticate(e, err, errlen)) != MSTORE_OK) {
        json_object_put(req);
        json_object_put(cr);
        return rc;
    }
    /* [PREFIX/, PREFIX0): '0' follows '/'. */
    {
        char range[1024];

        snprintf(range, sizeof(range), "%s/", e->prefix);
        lo = b64_encode(range, plen + 1);
        range[plen] = '0';
        hi = b64_encode(range, plen + 1);
    }
    w.tok = json_tokener_new();
    if (req == NULL || cr == NULL || lo == NULL || hi == NULL || w.tok == NULL) {
        json_object_put(req);
        json_object_put(cr);
        free(lo);
        free(hi);
        if (w.tok != NULL) {
            json_tokener_free(w.tok);
        }
        return MSTORE_ENOMEM;
    }
    snprintf(revs, sizeof(revs), "%" PRIu64, rev + 1);
    json_object_object_add(cr, "key", json_object_new_string(lo));
    json_object_object_add(cr, "range_end", json_object_new_string(hi));
    json_object_object_add(cr, "start_revision", json_object_new_string(revs));
    json_object_object_add(req, "create_request", cr);
    free(lo);
    free(hi);
    hdr = request_begin(e, e->current, "/v3/watch",
                        json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
    curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, watch_write);
    curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, &w);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    crc = curl_easy_perform(e->curl);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, e->timeout_ms);
    curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdr);
    json_object_put(req);
    json_tokener_free(w.tok);
    if (w.changed) {
        *now_rev = w.rev;
        return MSTORE_OK;
    }
    if (w.failed) {
        util_set_err(err, errlen, "etcd %s/v3/watch: %s", e->endpoint[e->current], w.why);
        if (strstr(w.why, "code 16") != NULL) {
            free(e->token); /* renewed at the next call */
            e->token = NULL;
        }
        return MSTORE_EIO;
    }
    if (crc == CURLE_OPERATION_TIMEDOUT) {
        return MSTORE_ENOENT;
    }
    util_set_err(err, errlen, "etcd %s/v3/watch: %s", e->endpoint[e->current],
                 crc == CURLE_OK ? "the stream ended" : curl_easy_strerror(crc));
    /* The next wait tries the next endpoint. */
    e->current = (e->current + 1) % e->n_endpoints;
    return MSTORE_EIO;
}

/* POST /v3/lease/grant, or one keepalive on /v3/lease/keepalive (a
 * stream; one request, one reply). An expired lease comes back with no
 * TTL. */
static int
etcd_lease(void *state, uint64_t *lease, int ttl_s, char *err, size_t errlen)
{
    struct etcd_store *e = state;
    json_object       *req = json_object_new_object(), *rep = NULL, *res = NULL;
    char               num[24];
    int                rc;

    if (req == NULL) {
        return MSTORE_ENOMEM;
    }
    if (*lease == 0) {
        snprintf(num, sizeof(num), "%d", ttl_s);
        json_object_object_add(req, "TTL", json_object_new_string(num));
        rc = post(e, "/v3/lease/grant", json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN),
                  false, &rep, err, errlen);
        json_object_put(req);
        if (rc != MSTORE_OK) {
            return rc;
        }
        *lease = json_u64(rep, "ID");
        json_object_put(rep);
        if (*lease == 0) {
            util_set_err(err, errlen, "etcd: lease grant: no ID in the reply");
            return MSTORE_EIO;
        }
        return MSTORE_OK;
    }
    snprintf(num, sizeof(num), "%" PRIu64, *lease);
    json_object_object_add(req, "ID", json_object_new_string(num));
    rc = post(e, "/v3/lease/keepalive", json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN),
              true, &rep, err, errlen);
    json_object_put(req);
    if (rc != MSTORE_OK) {
        return rc;
    }
    json_object_object_get_ex(rep, "result", &res);
    rc = json_u64(res, "TTL") > 0 ? MSTORE_OK : MSTORE_ENOENT;
    json_object_put(rep);
    if (rc == MSTORE_ENOENT) {
        *lease = 0;
    }
    return rc;
}

/* POST /v3/kv/put with the lease; to create only, a txn whose compare is
 * the key's absence (mod_revision 0) and whose success branch is the put. */
static int
etcd_put_leased(void *state, const char *name, const char *data, size_t len, uint64_t lease,
                bool create, char *err, size_t errlen)
{
    struct etcd_store *e = state;
    json_object       *put = json_object_new_object(), *req = NULL, *rep = NULL, *ok;
    char              *val = b64_encode(data != NULL ? data : "", len), num[24];
    int                rc;

    if (put == NULL || val == NULL) {
        json_object_put(put);
        free(val);
        return MSTORE_ENOMEM;
    }
    snprintf(num, sizeof(num), "%" PRIu64, lease);
    json_object_object_add(put, "key", key_json(e, name));
    json_object_object_add(put, "value", json_object_new_string(val));
    json_object_object_add(put, "lease", json_object_new_string(num));
    free(val);
    if (!create) {
        rc = post(e, "/v3/kv/put", json_object_to_json_string_ext(put, JSON_C_TO_STRING_PLAIN),
                  true, &rep, err, errlen);
        json_object_put(put);
        json_object_put(rep);
        return rc;
    }
    req = json_object_new_object();
    {
        json_object *cmp = json_object_new_array(), *c = json_object_new_object();
        json_object *succ = json_object_new_array(), *w = json_object_new_object();

        json_object_object_add(c, "key", key_json(e, name));
        json_object_object_add(c, "target", json_object_new_string("MOD"));
        json_object_object_add(c, "result", json_object_new_string("EQUAL"));
        json_object_object_add(c, "mod_revision", json_object_new_string("0"));
        json_object_array_add(cmp, c);
        json_object_object_add(w, "request_put", put);
        json_object_array_add(succ, w);
        json_object_object_add(req, "compare", cmp);
        json_object_object_add(req, "success", succ);
    }
    /* Not retried elsewhere after a timeout: a second try of an applied
     * create would read as somebody else's win. */
    rc = post(e, "/v3/kv/txn", json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN), false,
              &rep, err, errlen);
    json_object_put(req);
    if (rc == MSTORE_OK &&
        (!json_object_object_get_ex(rep, "succeeded", &ok) || !json_object_get_boolean(ok))) {
        util_set_err(err, errlen, "%s/%s: held by another", e->spec_where, name);
        rc = MSTORE_ECONFLICT;
    }
    json_object_put(rep);
    return rc;
}

/* A keys-only range over PREFIX/dir/. */
static int
etcd_list(void *state, const char *dir, char ***names, size_t *n, char *err, size_t errlen)
{
    struct etcd_store *e = state;
    json_object       *req = json_object_new_object(), *rep = NULL, *kvs;
    char               range[1024];
    size_t             rlen, i, cnt = 0, len;
    char              *lo, *hi, **out = NULL;
    int                rc;

    rlen = (size_t)snprintf(range, sizeof(range), "%s/%s/", e->prefix, dir);
    lo = b64_encode(range, rlen);
    range[rlen - 1] = '0'; /* '0' follows '/' */
    hi = b64_encode(range, rlen);
    if (req == NULL || lo == NULL || hi == NULL) {
        json_object_put(req);
        free(lo);
        free(hi);
        return MSTORE_ENOMEM;
    }
    json_object_object_add(req, "key", json_object_new_string(lo));
    json_object_object_add(req, "range_end", json_object_new_string(hi));
    json_object_object_add(req, "keys_only", json_object_new_boolean(1));
    free(lo);
    free(hi);
    rc = post(e, "/v3/kv/range", json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN), true,
              &rep, err, errlen);
    json_object_put(req);
    if (rc != MSTORE_OK) {
        return rc;
    }
    if (json_object_object_get_ex(rep, "kvs", &kvs) && json_object_is_type(kvs, json_type_array)) {
        len = json_object_array_length(kvs);
        out = calloc(len + 1, sizeof(*out));
        for (i = 0; out != NULL && i < len; i++) {
            json_object *k;
            char        *key = NULL;
            size_t       klen = 0;

            if (!json_object_object_get_ex(json_object_array_get_idx(kvs, i), "key", &k) ||
                b64_decode(json_object_get_string(k), 0, &key, &klen) != 0) {
                continue;
            }
            if (klen > rlen - 1 + 1 && (out[cnt] = strdup(key + rlen)) != NULL) {
                cnt++;
            }
            free(key);
        }
        if (out == NULL) {
            json_object_put(rep);
            return MSTORE_ENOMEM;
        }
    }
    json_object_put(rep);
    *names = out;
    *n = cnt;
    return MSTORE_OK;
}

const struct mstore_backend mstore_etcd_backend = {
    .name = "etcd",
    .open = etcd_open,
    .get = etcd_get,
    .get_many = etcd_get_many,
    .txn = etcd_txn,
    .wait = etcd_wait,
    .lease = etcd_lease,
    .put_leased = etcd_put_leased,
    .list = etcd_list,
    .close = etcd_close,
};
