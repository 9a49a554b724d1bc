/*
 * etcd_http: the etcd store's transport, POSTs to etcd v3's JSON gateway
 * (/v3/kv/..., /v3/lease/..., /v3/watch, /v3/auth/authenticate) with
 * libcurl, replies parsed with json-c.
 *
 * Endpoints are tried in order from the last one that answered. A request
 * that never reached etcd (no connection) moves on to the next endpoint;
 * a write that may have reached it and timed out is not sent again
 * (MSTORE_EIO, "outcome unknown"), since a second try of an applied txn
 * would fail its compares and read as another admin's win.
 */
#include <curl/curl.h>
#include <json-c/json.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "lib/etcd_internal.h"
#include "lib/mstore.h"
#include "lib/util.h"

#define ETCD_CONNECT_MS 1000                    /* connect limit per endpoint */
#define ETCD_REPLY_MAX  (MSTORE_RECORD_MAX * 2) /* a reply larger is refused */
#define ETCD_EAUTH      (-100)                  /* post_one: etcd refused the auth token */

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

/* See etcd_internal.h. */
int
etcd_http_open(struct etcd_store *e, char *err, size_t errlen)
{
    pthread_once(&curl_once, curl_init_once);
    if (curl_init_rc != CURLE_OK || (e->curl = curl_easy_init()) == NULL) {
        util_set_err(err, errlen, "etcd: cannot start libcurl");
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
    return MSTORE_OK;
}

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

/* See etcd_internal.h. */
const char *
etcd_reply_error(json_object *j, int *code)
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
        /* A plain-text reply is etcd's own reason (e.g. its gateway
         * refusing a client certificate's CommonName when auth is on):
         * quote its first line. */
        size_t line = b.data != NULL ? strcspn(b.data, "\r\n") : 0;

        util_set_err(
            err, errlen, "etcd %s%s: HTTP %ld, not a JSON object (%s)%s%.*s", e->endpoint[ep], path,
            status, jerr != json_tokener_success ? json_tokener_error_desc(jerr) : "empty",
            line > 0 ? ": " : "", (int)(line > 200 ? 200 : line), b.data != NULL ? b.data : "");
        json_object_put(j);
        free(b.data);
        return MSTORE_EIO;
    }
    free(b.data);
    why = etcd_reply_error(j, &code);
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

/* POST body to path, trying the endpoints in turn (see the top). A write
 * (idempotent = false) is sent to another endpoint only when it surely did
 * not reach the first. A rejected auth token is renewed once. */
static int
post_text(struct etcd_store *e, const char *path, const char *body, bool idempotent,
          json_object **out, char *err, size_t errlen)
{
    size_t   tried, ep;
    int      rc = MSTORE_EIO, reauth = e->user != NULL && strcmp(path, "/v3/auth/authenticate");
    CURLcode crc = CURLE_OK;

    if (reauth && e->token == NULL && (rc = etcd_authenticate(e, err, errlen)) != MSTORE_OK) {
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
            if ((rc = etcd_authenticate(e, err, errlen)) != MSTORE_OK) {
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

/* See etcd_internal.h. */
int
etcd_post(struct etcd_store *e, const char *path, json_object *req, bool idempotent,
          json_object **rep, char *err, size_t errlen)
{
    const char *body =
        req != NULL ? json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN) : NULL;
    int rc = body != NULL ? post_text(e, path, body, idempotent, rep, err, errlen) : MSTORE_ENOMEM;

    json_object_put(req);
    return rc;
}

/* See etcd_internal.h. */
int
etcd_authenticate(struct etcd_store *e, char *err, size_t errlen)
{
    json_object *req = json_object_new_object(), *rep = NULL, *tok;
    int          rc;

    if (req == NULL) {
        return MSTORE_ENOMEM;
    }
    json_object_object_add(req, "name", json_object_new_string(e->user));
    json_object_object_add(req, "password", json_object_new_string(e->password));
    rc = etcd_post(e, "/v3/auth/authenticate", req, true, &rep, err, errlen);
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

/* See etcd_internal.h. */
CURLcode
etcd_stream(struct etcd_store *e, const char *path, json_object *req, curl_write_callback write,
            void *arg, int timeout_ms)
{
    struct curl_slist *hdr;
    CURLcode           crc;

    hdr = request_begin(e, e->current, path,
                        json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
    curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, write);
    curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, arg);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    crc = curl_easy_perform(e->curl);
    curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, e->timeout_ms);
    curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdr);
    json_object_put(req);
    return crc;
}

/* See etcd_internal.h. */
uint64_t
etcd_json_u64(json_object *o, const char *field)
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

/* See etcd_internal.h. */
bool
etcd_json_all(size_t n, ...)
{
    va_list ap, again;
    bool    all = true;
    size_t  i;

    va_start(ap, n);
    va_copy(again, ap);
    for (i = 0; i < n; i++) {
        if (va_arg(ap, json_object *) == NULL) {
            all = false;
        }
    }
    for (i = 0; !all && i < n; i++) {
        json_object_put(va_arg(again, json_object *));
    }
    va_end(again);
    va_end(ap);
    return all;
}
