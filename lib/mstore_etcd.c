/*
 * mstore_etcd: the membership store in etcd v3 (the spec: etcd_spec.c; the
 * transport: etcd_http.c). A record NAME is the key PREFIX/NAME; its
 * revision is the key's mod_revision, which etcd makes store-wide and never
 * reuses, as the directory backend's counter does. A transaction is one
 * etcd txn: every check is a compare on mod_revision (0: absent), so either
 * all writes apply at one revision or none.
 *
 * The gateway's quirks: keys and values travel base64-encoded, int64s as
 * strings, zero values are omitted (a txn whose compares failed has no
 * "succeeded"; a missing key has no "kvs").
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "lib/etcd_internal.h"
#include "lib/mstore.h"
#include "lib/util.h"

/*
 * base64 (RFC 4648, with padding), as the gateway wants bytes
 */

/* Encode len bytes into a malloc'd NUL-terminated string (NULL: ENOMEM). */
static char *
b64_encode(const void *src, size_t len)
{
    char *out = malloc((len + 2) / 3 * 4 + 1);

    if (out != NULL) {
        out[util_b64_encode(src, len, out)] = '\0';
    }
    return out;
}

/* Decode a base64 string (util_b64_decode_strict) into a malloc'd buffer
 * with room for `head` bytes in front and a NUL after (out, *outlen =
 * decoded length). -1 on bad input (NULL too: what json_object_get_string
 * makes of a JSON null), -2 on ENOMEM. */
static int
b64_decode(const char *src, size_t head, char **out, size_t *outlen)
{
    size_t len, n;
    char  *buf;

    if (src == NULL) {
        return -1;
    }
    len = strlen(src);
    buf = malloc(head + len / 4 * 3 + 3 + 1);
    if (buf == NULL) {
        return -2;
    }
    if (!util_b64_decode_strict(src, len, (unsigned char *)buf + head, &n)) {
        free(buf);
        return -1;
    }
    buf[head + n] = '\0';
    *out = buf;
    *outlen = n;
    return 0;
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

/* A txn compare that holds when record name's revision is rev (0: the
 * record is absent); NULL on ENOMEM. */
static json_object *
compare_rev(const struct etcd_store *e, const char *name, uint64_t rev)
{
    json_object *c = json_object_new_object();
    char         revs[24];

    if (c == NULL) {
        return NULL;
    }
    snprintf(revs, sizeof(revs), "%" PRIu64, rev);
    json_object_object_add(c, "key", key_json(e, name));
    json_object_object_add(c, "target", json_object_new_string("MOD"));
    json_object_object_add(c, "result", json_object_new_string("EQUAL"));
    json_object_object_add(c, "mod_revision", json_object_new_string(revs));
    return c;
}

/* A txn read of record name ({"request_range": {"key": ...}}); NULL on
 * ENOMEM. */
static json_object *
range_op(const struct etcd_store *e, const char *name)
{
    json_object *r = json_object_new_object(), *rr = json_object_new_object();
    json_object *key = key_json(e, name);

    if (!etcd_json_all(3, r, rr, key)) {
        return NULL;
    }
    json_object_object_add(rr, "key", key);
    json_object_object_add(r, "request_range", rr);
    return r;
}

/* Set o's "key" and "range_end" to the keys under dir[0..len), which ends
 * in '/': from dir to dir with a '0' for that '/' ('0' follows '/').
 * false on ENOMEM. */
static bool
add_range_under(json_object *o, char *dir, size_t len)
{
    char *lo = b64_encode(dir, len), *hi;
    bool  ok;

    dir[len - 1] = '0';
    hi = b64_encode(dir, len);
    dir[len - 1] = '/';
    ok = lo != NULL && hi != NULL;
    if (ok) {
        json_object_object_add(o, "key", json_object_new_string(lo));
        json_object_object_add(o, "range_end", json_object_new_string(hi));
    }
    free(lo);
    free(hi);
    return ok;
}

/*
 * The backend
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

static int
etcd_open(const char *spec, void **state, char *err, size_t errlen)
{
    struct etcd_store *e = calloc(1, sizeof(*e));
    int                rc;

    if (e == NULL) {
        return MSTORE_ENOMEM;
    }
    e->timeout_ms = ETCD_TIMEOUT_MS;
    rc = etcd_spec_parse(e, spec, err, errlen);
    if (rc == MSTORE_OK) {
        rc = etcd_http_open(e, err, errlen);
    }
    if (rc != MSTORE_OK) {
        etcd_free(e);
        return rc;
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

    rec->rev = etcd_json_u64(kv, "mod_revision");
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
    if (!etcd_json_all(2, req, key)) {
        return MSTORE_ENOMEM;
    }
    json_object_object_add(req, "key", key);
    rc = etcd_post(e, "/v3/kv/range", req, true, &rep, err, errlen);
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

    if (!etcd_json_all(2, req, ok)) {
        return MSTORE_ENOMEM;
    }
    json_object_object_add(req, "success", ok);
    for (i = 0; i < n; i++) {
        json_object *r = range_op(e, names[i]);

        if (r == NULL) {
            json_object_put(req);
            return MSTORE_ENOMEM;
        }
        json_object_array_add(ok, r);
    }
    rc = etcd_post(e, "/v3/kv/txn", req, true, &rep, err, errlen);
    if (rc != MSTORE_OK) {
        return rc;
    }
    if (!json_object_object_get_ex(rep, "responses", &resps) ||
        !json_object_is_type(resps, json_type_array) || json_object_array_length(resps) != n) {
        util_set_err(err, errlen, "%s: a read of %zu records got a malformed reply", e->spec_where,
                     n);
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

    if (!etcd_json_all(4, req, cmp, ok, fail)) {
        return NULL;
    }
    json_object_object_add(req, "compare", cmp);
    json_object_object_add(req, "success", ok);
    json_object_object_add(req, "failure", fail);
    for (i = 0; i < n_ops; i++) {
        const struct mstore_op *op = &ops[i];
        uint64_t                rev;

        if (op_expects(op, &rev)) {
            json_object_array_add(cmp, compare_rev(e, op->name, rev));
            json_object_array_add(fail, range_op(e, op->name));
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
        if (etcd_json_u64(first_kv(range), "mod_revision") != want) {
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
    rc = etcd_post(e, "/v3/kv/txn", req, !writes, &rep, err, errlen);
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
        *new_rev = etcd_json_u64(hdr, "revision");
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
    const char  *why = etcd_reply_error(msg, &code);

    if (why != NULL) {
        w->failed = true;
        snprintf(w->why, sizeof(w->why), "%s (code %d)", why, code);
        return;
    }
    if (!json_object_object_get_ex(msg, "result", &res)) {
        return;
    }
    json_object_object_get_ex(res, "header", &hdr);
    if (etcd_json_u64(res, "compact_revision") != 0 ||
        (json_object_object_get_ex(res, "events", &events) &&
         json_object_is_type(events, json_type_array) && json_object_array_length(events) > 0)) {
        w->changed = true;
        w->rev = etcd_json_u64(hdr, "revision");
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
    json_object        *req, *cr;
    char                range[1024], revs[24];
    CURLcode            crc;
    int                 rc = MSTORE_OK;

    if (e->user != NULL && e->token == NULL &&
        (rc = etcd_authenticate(e, err, errlen)) != MSTORE_OK) {
        return rc;
    }
    req = json_object_new_object();
    cr = json_object_new_object();
    if (!etcd_json_all(2, req, cr)) {
        return MSTORE_ENOMEM;
    }
    json_object_object_add(req, "create_request", cr);
    snprintf(range, sizeof(range), "%s/", e->prefix);
    w.tok = json_tokener_new();
    if (w.tok == NULL || !add_range_under(cr, range, strlen(e->prefix) + 1)) {
        json_object_put(req);
        if (w.tok != NULL) {
            json_tokener_free(w.tok);
        }
        return MSTORE_ENOMEM;
    }
    snprintf(revs, sizeof(revs), "%" PRIu64, rev + 1);
    json_object_object_add(cr, "start_revision", json_object_new_string(revs));
    crc = etcd_stream(e, "/v3/watch", req, watch_write, &w, timeout_ms);
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
        rc = etcd_post(e, "/v3/lease/grant", req, false, &rep, err, errlen);
        if (rc != MSTORE_OK) {
            return rc;
        }
        *lease = etcd_json_u64(rep, "ID");
        json_object_put(rep);
        if (*lease == 0) {
            util_set_err(err, errlen, "etcd: lease grant: no ID in the reply");
            return MSTORE_EIO;
        }
        return MSTORE_OK;
    }
    snprintf(num, sizeof(num), "%" PRIu64, *lease);
    json_object_object_add(req, "ID", json_object_new_string(num));
    rc = etcd_post(e, "/v3/lease/keepalive", req, true, &rep, err, errlen);
    if (rc != MSTORE_OK) {
        return rc;
    }
    json_object_object_get_ex(rep, "result", &res);
    rc = etcd_json_u64(res, "TTL") > 0 ? MSTORE_OK : MSTORE_ENOENT;
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
        rc = etcd_post(e, "/v3/kv/put", put, true, &rep, err, errlen);
        json_object_put(rep);
        return rc;
    }
    req = json_object_new_object();
    {
        json_object *cmp = json_object_new_array();
        json_object *succ = json_object_new_array(), *w = json_object_new_object();

        json_object_array_add(cmp, compare_rev(e, name, 0));
        json_object_object_add(w, "request_put", put);
        json_object_array_add(succ, w);
        json_object_object_add(req, "compare", cmp);
        json_object_object_add(req, "success", succ);
    }
    /* Not retried elsewhere after a timeout: a second try of an applied
     * create would read as somebody else's win. */
    rc = etcd_post(e, "/v3/kv/txn", req, false, &rep, err, errlen);
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
    char             **out = NULL;
    int                rc;

    rlen = (size_t)snprintf(range, sizeof(range), "%s/%s/", e->prefix, dir);
    if (req == NULL || !add_range_under(req, range, rlen)) {
        json_object_put(req);
        return MSTORE_ENOMEM;
    }
    json_object_object_add(req, "keys_only", json_object_new_boolean(1));
    rc = etcd_post(e, "/v3/kv/range", req, true, &rep, err, errlen);
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
