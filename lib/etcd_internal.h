/*
 * etcd_internal: the etcd backend's state and its inner layers, shared by
 * its three files only: etcd_spec.c (the spec), etcd_http.c (HTTP and JSON
 * over libcurl and json-c) and mstore_etcd.c (records, transactions,
 * watch, leases). Nothing else includes this file; the API is lib/mstore.h.
 */
#ifndef LIB_ETCD_INTERNAL_H
#define LIB_ETCD_INTERNAL_H

#include <curl/curl.h>
#include <json-c/json.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ETCD_ENDPOINTS_MAX 16
#define ETCD_TIMEOUT_MS    5000 /* default per-request limit */

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

/*
 * The spec (etcd_spec.c)
 */

/* Parse "etcd[s]://H:P[,H:P...]/PREFIX[?OPTS]" into e (zeroed, with the
 * default timeout_ms), reading the password file it names. MSTORE_OK,
 * MSTORE_EINVAL with the reason in err, or MSTORE_ENOMEM; what it set is
 * the caller's to free either way (mstore_etcd.c, etcd_free). */
int etcd_spec_parse(struct etcd_store *e, const char *spec, char *err, size_t errlen);

/*
 * HTTP and JSON (etcd_http.c)
 */

/* Start e's libcurl handle with the spec's limits and TLS settings:
 * MSTORE_OK, or MSTORE_EIO with the reason in err. */
int etcd_http_open(struct etcd_store *e, char *err, size_t errlen);

/*
 * POST the JSON object req (taken: put here, NULL counts as out of
 * memory) to path, trying the endpoints in turn (see etcd_http.c). A write
 * (idempotent = false) goes to another endpoint only when it surely did
 * not reach the first. MSTORE_OK with the reply object in *rep (the
 * caller puts it), or MSTORE_EIO / MSTORE_ENOMEM with the reason in err.
 */
int etcd_post(struct etcd_store *e, const char *path, json_object *req, bool idempotent,
              json_object **rep, char *err, size_t errlen);

/* Log in (POST /v3/auth/authenticate) and keep the token. */
int etcd_authenticate(struct etcd_store *e, char *err, size_t errlen);

/* POST req (taken) to path on the current endpoint and hand the reply to
 * write(ptr, 1, n, arg) as it streams in, for at most timeout_ms (a
 * watch); returns curl's code (the callback refusing bytes ends it). */
CURLcode etcd_stream(struct etcd_store *e, const char *path, json_object *req,
                     curl_write_callback write, void *arg, int timeout_ms);

/* The error etcd put in a reply ({"error": ..., "message": ..., "code":
 * N}, or a stream's {"error": {"grpc_code": N, ...}}), or NULL. */
const char *etcd_reply_error(json_object *j, int *code);

/* A field that the gateway sends as a decimal string (int64), or 0 when
 * absent (a zero value is omitted). */
uint64_t etcd_json_u64(json_object *o, const char *field);

/* Whether all n json_object pointers that follow were made (none NULL);
 * if not, puts them all, so the caller only has to return ENOMEM. */
bool etcd_json_all(size_t n, ...);

#endif /* LIB_ETCD_INTERNAL_H */
