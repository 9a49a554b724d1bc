/*
 * _ringcache: the CPython extension under the `ringcache` package. A thin
 * layer over libringcache (client/ringcache.h): one Handle object per
 * libringcache handle, every call that may do I/O made with the GIL
 * released. Keys and values arrive as bytes (the package's ringcache/
 * __init__.py does the pymemcache-compatible API, serde and exceptions);
 * calls return the library's codes so that Python decides what they mean.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "ringcache.h"

/* compute() raised: the Python exception is kept and re-raised. */
#define RC_PY_EXCEPTION (-1000)

/* A libringcache handle. busy counts calls running with the GIL released;
 * close() frees the handle at once when none runs, else the last call
 * does (both under the GIL, so ringcache_free never races a call). */
struct handle {
    PyObject_HEAD struct ringcache *rc;
    int                             busy;
    int                             closing;
};

static PyObject *rc_error; /* _ringcache.Error(code, message) */

/* Raise _ringcache.Error for code; returns NULL. */
static PyObject *
raise_code(int code, const char *detail)
{
    PyObject *v = Py_BuildValue("(is)", code, detail ? detail : ringcache_strerror(code));

    if (v != NULL) {
        PyErr_SetObject(rc_error, v);
        Py_DECREF(v);
    }
    return NULL;
}

/* Start a call: the handle, or NULL with an exception when it is closed.
 * Must be paired with leave(). */
static struct ringcache *
enter(struct handle *h)
{
    if (h->rc == NULL || h->closing) {
        PyErr_SetString(PyExc_ValueError, "ringcache client is closed");
        return NULL;
    }
    h->busy++;
    return h->rc;
}

static void
leave(struct handle *h)
{
    if (--h->busy == 0 && h->closing && h->rc != NULL) {
        ringcache_free(h->rc);
        h->rc = NULL;
    }
}

static const char *const handle_kw[] = { "members_file",
                                         "members_text",
                                         "seeds",
                                         "connect_timeout_ms",
                                         "op_timeout_ms",
                                         "retry_interval_ms",
                                         "retry_max_ms",
                                         "max_value_bytes",
                                         "pool_size",
                                         "tls",
                                         "tls_skip_name_check",
                                         "tls_ca_file",
                                         "tls_cert_file",
                                         "tls_key_file",
                                         "auth_user",
                                         "auth_password",
                                         "poll_interval_ms",
                                         "store",
                                         NULL };

/* Handle(members_file=, members_text=, seeds=[str], store=, options...):
 * exactly one of the four membership sources. */
static int
handle_init(struct handle *h, PyObject *args, PyObject *kw)
{
    struct ringcache_options opt;
    const char              *file = NULL, *text = NULL, *store = NULL;
    Py_ssize_t               text_len = 0, n = 0, i;
    PyObject                *seeds = NULL;
    Py_ssize_t               max_value = -1;
    int                      pool = -1, poll_ms = -1, rc = RINGCACHE_EINVAL;
    char                     err[256] = "";
    const char             **addrs = NULL;

    ringcache_options_init(&opt);
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|zz#Oiiiinippzzzzziz", (char **)handle_kw, &file,
                                     &text, &text_len, &seeds, &opt.connect_timeout_ms,
                                     &opt.op_timeout_ms, &opt.retry_interval_ms, &opt.retry_max_ms,
                                     &max_value, &pool, &opt.tls, &opt.tls_skip_name_check,
                                     &opt.tls_ca_file, &opt.tls_cert_file, &opt.tls_key_file,
                                     &opt.auth_user, &opt.auth_password, &poll_ms, &store)) {
        return -1;
    }
    if (max_value >= 0) {
        opt.max_value_bytes = (size_t)max_value;
    }
    if (pool >= 0) {
        opt.pool_size = (unsigned)pool;
    }
    if (h->rc != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Handle already initialised");
        return -1;
    }
    if ((file != NULL) + (text != NULL) + (store != NULL) + (seeds != NULL && seeds != Py_None) !=
        1) {
        PyErr_SetString(PyExc_TypeError, "give one of members_file, members_text, seeds or store");
        return -1;
    }
    if (seeds != NULL && seeds != Py_None) {
        PyObject *seq = PySequence_Fast(seeds, "seeds must be a sequence of 'host:port'");

        if (seq == NULL) {
            return -1;
        }
        n = PySequence_Fast_GET_SIZE(seq);
        addrs = calloc(n ? (size_t)n : 1, sizeof(*addrs));
        for (i = 0; addrs != NULL && i < n; i++) {
            addrs[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
            if (addrs[i] == NULL) {
                free(addrs);
                Py_DECREF(seq);
                return -1;
            }
        }
        if (addrs == NULL) {
            Py_DECREF(seq);
            PyErr_NoMemory();
            return -1;
        }
        {
            PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
            rc = ringcache_new_seeds(&h->rc, addrs, (size_t)n, &opt, err, sizeof(err));
            PyEval_RestoreThread(ts);
        }
        free(addrs);
        Py_DECREF(seq);
    } else if (file != NULL || store != NULL) {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */

        rc = file != NULL ? ringcache_new_members_file(&h->rc, file, &opt, err, sizeof(err))
                          : ringcache_new_store(&h->rc, store, &opt, err, sizeof(err));
        PyEval_RestoreThread(ts);
    } else {
        rc = ringcache_new_members_text(&h->rc, text, (size_t)text_len, "members_text", &opt, err,
                                        sizeof(err));
    }
    if (rc != 0) {
        h->rc = NULL;
        raise_code(rc, err[0] ? err : NULL);
        return -1;
    }
    if (poll_ms >= 0) {
        ringcache_set_poll_interval(h->rc, poll_ms);
    }
    return 0;
}

static void
handle_dealloc(struct handle *h)
{
    if (h->rc != NULL) {
        ringcache_free(h->rc);
        h->rc = NULL;
    }
    Py_TYPE(h)->tp_free((PyObject *)h);
}

/* close(): free the handle (at once, or when the last running call ends). */
static PyObject *
handle_close(struct handle *h, PyObject *unused)
{
    (void)unused;
    h->closing = 1;
    if (h->busy == 0 && h->rc != NULL) {
        ringcache_free(h->rc);
        h->rc = NULL;
    }
    Py_RETURN_NONE;
}

/* A value tuple (bytes, flags, cas) from v, which is cleared. */
static PyObject *
value_tuple(struct ringcache_value *v)
{
    PyObject *r = Py_BuildValue("(y#kK)", v->data, (Py_ssize_t)v->len, (unsigned long)v->flags,
                                (unsigned long long)v->cas);

    ringcache_value_clear(v);
    return r;
}

/* get(key, with_cas) -> (value, flags, cas) or None on a miss. */
static PyObject *
handle_get(struct handle *h, PyObject *args)
{
    struct ringcache_value v = { 0 };
    struct ringcache      *rc;
    const char            *key;
    Py_ssize_t             klen;
    int                    with_cas = 0, code;

    if (!PyArg_ParseTuple(args, "y#|p", &key, &klen, &with_cas) || (rc = enter(h)) == NULL) {
        return NULL;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        code = with_cas ? ringcache_gets(rc, key, (size_t)klen, &v)
                        : ringcache_get(rc, key, (size_t)klen, &v);
        PyEval_RestoreThread(ts);
    }
    leave(h);
    if (code == RINGCACHE_ENOTFOUND) {
        Py_RETURN_NONE;
    }
    if (code != 0) {
        return raise_code(code, NULL);
    }
    return value_tuple(&v);
}

/* Store operations, by number (store()'s op). */
enum {
    OP_SET,
    OP_ADD,
    OP_REPLACE,
    OP_APPEND,
    OP_PREPEND,
    OP_CAS
};

/* store(op, key, value, flags, ttl, cas) -> the library's code. */
static PyObject *
handle_store(struct handle *h, PyObject *args)
{
    struct ringcache  *rc;
    const char        *key, *val;
    Py_ssize_t         klen, vlen;
    int                op, code = RINGCACHE_EINVAL, ttl = 0;
    unsigned long      flags = 0;
    unsigned long long cas = 0;

    if (!PyArg_ParseTuple(args, "iy#y#|kiK", &op, &key, &klen, &val, &vlen, &flags, &ttl, &cas) ||
        (rc = enter(h)) == NULL) {
        return NULL;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        switch (op) {
        case OP_SET:
            code = ringcache_set(rc, key, klen, val, vlen, (uint32_t)flags, ttl);
            break;
        case OP_ADD:
            code = ringcache_add(rc, key, klen, val, vlen, (uint32_t)flags, ttl);
            break;
        case OP_REPLACE:
            code = ringcache_replace(rc, key, klen, val, vlen, (uint32_t)flags, ttl);
            break;
        case OP_APPEND:
            code = ringcache_append(rc, key, klen, val, vlen);
            break;
        case OP_PREPEND:
            code = ringcache_prepend(rc, key, klen, val, vlen);
            break;
        case OP_CAS:
            code = ringcache_cas(rc, key, klen, val, vlen, (uint32_t)flags, ttl, cas);
            break;
        }
        PyEval_RestoreThread(ts);
    }
    leave(h);
    return PyLong_FromLong(code);
}

/* delete(key) -> code. */
static PyObject *
handle_delete(struct handle *h, PyObject *args)
{
    struct ringcache *rc;
    const char       *key;
    Py_ssize_t        klen;
    int               code;

    if (!PyArg_ParseTuple(args, "y#", &key, &klen) || (rc = enter(h)) == NULL) {
        return NULL;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        code = ringcache_delete(rc, key, (size_t)klen);
        PyEval_RestoreThread(ts);
    }
    leave(h);
    return PyLong_FromLong(code);
}

/* touch(key, ttl) -> code. */
static PyObject *
handle_touch(struct handle *h, PyObject *args)
{
    struct ringcache *rc;
    const char       *key;
    Py_ssize_t        klen;
    int               code, ttl;

    if (!PyArg_ParseTuple(args, "y#i", &key, &klen, &ttl) || (rc = enter(h)) == NULL) {
        return NULL;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        code = ringcache_touch(rc, key, (size_t)klen, ttl);
        PyEval_RestoreThread(ts);
    }
    leave(h);
    return PyLong_FromLong(code);
}

/* incr(key, delta, decr) -> (code, new value). */
static PyObject *
handle_incr(struct handle *h, PyObject *args)
{
    struct ringcache  *rc;
    const char        *key;
    Py_ssize_t         klen;
    unsigned long long delta;
    uint64_t           result = 0;
    int                code, decr = 0;

    if (!PyArg_ParseTuple(args, "y#K|p", &key, &klen, &delta, &decr) || (rc = enter(h)) == NULL) {
        return NULL;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        code = decr ? ringcache_decr(rc, key, klen, delta, &result)
                    : ringcache_incr(rc, key, klen, delta, &result);
        PyEval_RestoreThread(ts);
    }
    leave(h);
    return Py_BuildValue("(iK)", code, (unsigned long long)result);
}

/* The keys of a multi-key call: pointers into the bytes of seq (which
 * the caller keeps alive). 0, or -1 with an exception. */
static int
key_arrays(PyObject *seq, Py_ssize_t n, const char ***keys, size_t **lens)
{
    Py_ssize_t i;

    *keys = malloc((n ? n : 1) * sizeof(**keys));
    *lens = malloc((n ? n : 1) * sizeof(**lens));
    if (*keys == NULL || *lens == NULL) {
        free(*keys);
        free(*lens);
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < n; i++) {
        char      *p;
        Py_ssize_t len;

        if (PyBytes_AsStringAndSize(PySequence_Fast_GET_ITEM(seq, i), &p, &len) < 0) {
            free(*keys);
            free(*lens);
            return -1;
        }
        (*keys)[i] = p;
        (*lens)[i] = (size_t)len;
    }
    return 0;
}

/* One reply of a multi-get, kept until the GIL is back. */
struct mget_slot {
    int                    status;
    struct ringcache_value v;
};

/* ringcache_mget_cb callback: copy the value (it belongs to the library). */
static void
mget_copy(void *arg, size_t index, int node, int status, const struct ringcache_value *v)
{
    struct mget_slot *s = (struct mget_slot *)arg + index;

    (void)node;
    s->status = status;
    if (status == 0 && v != NULL) {
        s->v = *v;
        s->v.data = malloc(v->len + 1);
        if (s->v.data == NULL) {
            s->status = RINGCACHE_ENOMEM;
            return;
        }
        memcpy(s->v.data, v->data, v->len);
        s->v.data[v->len] = '\0';
    }
}

/* get_many(list of bytes keys, with_cas) -> list with, per key, None (a
 * miss), (value, flags, cas) or an int error code. */
static PyObject *
handle_get_many(struct handle *h, PyObject *args)
{
    struct ringcache *rc;
    PyObject         *keys_in, *seq, *out = NULL;
    const char      **keys = NULL;
    size_t           *lens = NULL;
    struct mget_slot *slots;
    Py_ssize_t        n, i;
    int               with_cas = 0, code;

    if (!PyArg_ParseTuple(args, "O|p", &keys_in, &with_cas)) {
        return NULL;
    }
    if ((seq = PySequence_Fast(keys_in, "keys must be a sequence of bytes")) == NULL) {
        return NULL;
    }
    n = PySequence_Fast_GET_SIZE(seq);
    if (key_arrays(seq, n, &keys, &lens) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    slots = calloc(n ? n : 1, sizeof(*slots));
    if (slots == NULL || (rc = enter(h)) == NULL) {
        if (slots == NULL) {
            PyErr_NoMemory();
        }
        goto out;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        code = n ? ringcache_mget_cb(rc, keys, lens, (size_t)n, with_cas, mget_copy, slots) : 0;
        PyEval_RestoreThread(ts);
    }
    leave(h);
    if (code != 0) {
        raise_code(code, NULL);
        goto out;
    }
    if ((out = PyList_New(n)) == NULL) {
        goto out;
    }
    for (i = 0; i < n; i++) {
        PyObject *item;

        if (slots[i].status == 0) {
            item = value_tuple(&slots[i].v);
        } else if (slots[i].status == RINGCACHE_ENOTFOUND) {
            item = Py_NewRef(Py_None);
        } else {
            item = PyLong_FromLong(slots[i].status);
        }
        if (item == NULL) {
            Py_CLEAR(out);
            goto out;
        }
        PyList_SET_ITEM(out, i, item);
    }
out:
    for (i = 0; slots != NULL && i < n; i++) {
        ringcache_value_clear(&slots[i].v);
    }
    free(slots);
    free(keys);
    free(lens);
    Py_DECREF(seq);
    return out;
}

static const char *const meta_kw[] = { "want",       "ttl",     "vivify_ttl", "recache_below",
                                       "cas",        "new_cas", "flags",      "mode",
                                       "invalidate", "no_bump", "delta",      "initial",
                                       "wait_ms",    NULL };

/* Fill *o from a dict of meta options (None values keep the default). */
static int
meta_opts(PyObject *d, struct ringcache_meta_opts *o)
{
    const char *const *k;

    ringcache_meta_opts_init(o);
    if (d == NULL || d == Py_None) {
        return 0;
    }
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "meta options must be a dict");
        return -1;
    }
    for (k = meta_kw; *k != NULL; k++) {
        PyObject          *v = PyDict_GetItemString(d, *k);
        unsigned long long u;
        long long          s;

        if (v == NULL || v == Py_None) {
            continue;
        }
        s = PyLong_AsLongLong(v);
        u = (unsigned long long)s;
        if (s == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            u = PyLong_AsUnsignedLongLong(v);
            if (PyErr_Occurred()) {
                return -1;
            }
        }
        if (!strcmp(*k, "want")) {
            o->want = (unsigned)u;
        } else if (!strcmp(*k, "ttl")) {
            o->ttl = (int32_t)s;
        } else if (!strcmp(*k, "vivify_ttl")) {
            o->vivify_ttl = (int32_t)s;
        } else if (!strcmp(*k, "recache_below")) {
            o->recache_below = (int32_t)s;
        } else if (!strcmp(*k, "cas")) {
            o->cas = u;
        } else if (!strcmp(*k, "new_cas")) {
            o->new_cas = u;
        } else if (!strcmp(*k, "flags")) {
            o->flags = (uint32_t)u;
        } else if (!strcmp(*k, "mode")) {
            o->mode = (unsigned)u;
        } else if (!strcmp(*k, "invalidate")) {
            o->invalidate = s != 0;
        } else if (!strcmp(*k, "no_bump")) {
            o->no_bump = s != 0;
        } else if (!strcmp(*k, "delta")) {
            o->delta = u;
        } else if (!strcmp(*k, "initial")) {
            o->initial = u;
        } else if (!strcmp(*k, "wait_ms")) {
            o->wait_ms = (int)s;
        }
    }
    return 0;
}

/* (code, result dict) from a meta result r, which is cleared. */
static PyObject *
meta_reply(int code, struct ringcache_meta_result *r)
{
    PyObject *d = Py_BuildValue(
        "{s:i,s:I,s:K,s:K,s:k,s:L,s:K,s:i,s:K,s:i,s:i,s:i}", "status", r->status, "got", r->got,
        "number", (unsigned long long)r->number, "cas", (unsigned long long)r->cas, "flags",
        (unsigned long)r->flags, "ttl", (long long)r->ttl, "size", (unsigned long long)r->size,
        "hit_before", r->hit_before, "last_access", (unsigned long long)r->last_access, "won",
        r->won, "stale", r->stale, "token_sent", r->token_sent);
    PyObject *v, *out;

    if (d == NULL) {
        ringcache_meta_result_clear(r);
        return NULL;
    }
    v = r->value ? PyBytes_FromStringAndSize(r->value, (Py_ssize_t)r->value_len)
                 : Py_NewRef(Py_None);
    if (v == NULL || PyDict_SetItemString(d, "value", v) < 0) {
        Py_XDECREF(v);
        Py_DECREF(d);
        ringcache_meta_result_clear(r);
        return NULL;
    }
    Py_DECREF(v);
    if (r->got & RINGCACHE_WANT_KEY) {
        v = PyBytes_FromStringAndSize(r->key, (Py_ssize_t)r->key_len);
        if (v == NULL || PyDict_SetItemString(d, "key", v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            ringcache_meta_result_clear(r);
            return NULL;
        }
        Py_DECREF(v);
    }
    ringcache_meta_result_clear(r);
    out = Py_BuildValue("(iN)", code, d);
    return out;
}

/* Meta commands, by number (meta()'s cmd). */
enum {
    META_MG,
    META_MS,
    META_MD,
    META_MA
};

/* meta(cmd, key, value or None, opts dict) -> (code, result dict). */
static PyObject *
handle_meta(struct handle *h, PyObject *args)
{
    struct ringcache_meta_result r;
    struct ringcache_meta_opts   o;
    struct ringcache            *rc;
    const char                  *key, *val = NULL;
    Py_ssize_t                   klen, vlen = 0;
    PyObject                    *d = NULL;
    int                          cmd, code = RINGCACHE_EINVAL;

    memset(&r, 0, sizeof(r));
    if (!PyArg_ParseTuple(args, "iy#z#|O", &cmd, &key, &klen, &val, &vlen, &d) ||
        meta_opts(d, &o) < 0 || (rc = enter(h)) == NULL) {
        return NULL;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        switch (cmd) {
        case META_MG:
            code = ringcache_mg(rc, key, klen, &o, &r);
            break;
        case META_MS:
            code = ringcache_ms(rc, key, klen, val ? val : "", vlen, &o, &r);
            break;
        case META_MD:
            code = ringcache_md(rc, key, klen, &o, &r);
            break;
        case META_MA:
            code = ringcache_ma(rc, key, klen, &o, &r);
            break;
        }
        PyEval_RestoreThread(ts);
    }
    leave(h);
    return meta_reply(code, &r);
}

/* get_or_compute's state: the Python callable, and its exception. */
struct compute_ctx {
    PyObject *fn;
    PyObject *exc_type, *exc_value, *exc_tb;
};

/* ringcache_compute_fn: call fn(key) with the GIL; it returns (bytes, flags). */
static int
compute_cb(void *arg, const char *key, size_t key_len, struct ringcache_value *out)
{
    struct compute_ctx *c = arg;
    PyGILState_STATE    g = PyGILState_Ensure();
    PyObject           *r = PyObject_CallFunction(c->fn, "y#", key, (Py_ssize_t)key_len);
    char               *p;
    Py_ssize_t          len;
    unsigned long       flags = 0;
    int                 code = 0;

    if (r == NULL || !PyArg_ParseTuple(r, "y#k", &p, &len, &flags)) {
        code = RC_PY_EXCEPTION;
    } else if ((out->data = malloc((size_t)len + 1)) == NULL) {
        code = RINGCACHE_ENOMEM;
    } else {
        memcpy(out->data, p, (size_t)len);
        out->data[len] = '\0';
        out->len = (size_t)len;
        out->flags = (uint32_t)flags;
    }
    if (code == RC_PY_EXCEPTION) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "compute must return (bytes, flags)");
        }
        Py_XDECREF(c->exc_type);
        Py_XDECREF(c->exc_value);
        Py_XDECREF(c->exc_tb);
        PyErr_Fetch(&c->exc_type, &c->exc_value, &c->exc_tb);
    }
    Py_XDECREF(r);
    PyGILState_Release(g);
    return code;
}

/* get_or_compute(key, fn, opts) -> (code, result dict); fn's exception
 * is raised as it was. */
static PyObject *
handle_get_or_compute(struct handle *h, PyObject *args)
{
    struct ringcache_meta_result r;
    struct ringcache_meta_opts   o;
    struct compute_ctx           c = { 0 };
    struct ringcache            *rc;
    const char                  *key;
    Py_ssize_t                   klen;
    PyObject                    *d = NULL;
    int                          code;

    memset(&r, 0, sizeof(r));
    if (!PyArg_ParseTuple(args, "y#O|O", &key, &klen, &c.fn, &d) || meta_opts(d, &o) < 0 ||
        (rc = enter(h)) == NULL) {
        return NULL;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        code = ringcache_get_or_compute(rc, key, klen, &o, compute_cb, &c, &r);
        PyEval_RestoreThread(ts);
    }
    leave(h);
    if (c.exc_type != NULL) {
        ringcache_meta_result_clear(&r);
        PyErr_Restore(c.exc_type, c.exc_value, c.exc_tb);
        return NULL;
    }
    return meta_reply(code, &r);
}

/* locate(key) -> [(id, addr), ...] in preference order. */
static PyObject *
handle_locate(struct handle *h, PyObject *args)
{
    struct ringcache *rc;
    const char       *key;
    Py_ssize_t        klen;
    size_t            owners[64];
    int               n, i;
    PyObject         *out;

    if (!PyArg_ParseTuple(args, "y#", &key, &klen) || (rc = enter(h)) == NULL) {
        return NULL;
    }
    n = ringcache_locate(rc, key, (size_t)klen, owners, 64);
    if (n < 0) {
        leave(h);
        return raise_code(n, NULL);
    }
    out = PyList_New(n);
    for (i = 0; out != NULL && i < n; i++) {
        PyObject *t = Py_BuildValue("(ss)", ringcache_node_id(rc, owners[i]),
                                    ringcache_node_addr(rc, owners[i]));
        if (t == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, t);
    }
    leave(h);
    return out;
}

/* nodes() -> [(id, addr, down, last error code), ...]. */
static PyObject *
handle_nodes(struct handle *h, PyObject *unused)
{
    struct ringcache *rc;
    size_t            n, i;
    PyObject         *out;

    (void)unused;
    if ((rc = enter(h)) == NULL) {
        return NULL;
    }
    n = ringcache_node_count(rc);
    out = PyList_New((Py_ssize_t)n);
    for (i = 0; out != NULL && i < n; i++) {
        PyObject *t = Py_BuildValue("(ssOi)", ringcache_node_id(rc, i), ringcache_node_addr(rc, i),
                                    ringcache_node_is_down(rc, i) ? Py_True : Py_False,
                                    ringcache_node_error(rc, i));
        if (t == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
    leave(h);
    return out;
}

/* The stats lines of one node, gathered with the GIL released. */
struct stats_ctx {
    char  *buf;
    size_t len, cap;
    int    oom;
};

/* ringcache_stat_fn: append "name\tvalue\n" (no GIL held). */
static void
stats_line(void *arg, const char *name, const char *value)
{
    struct stats_ctx *c = arg;
    size_t            need = strlen(name) + strlen(value) + 2;

    if (c->len + need + 1 > c->cap) {
        size_t cap = (c->cap + need + 1) * 2;
        char  *p = realloc(c->buf, cap);

        if (p == NULL) {
            c->oom = 1;
            return;
        }
        c->buf = p;
        c->cap = cap;
    }
    c->len += (size_t)sprintf(c->buf + c->len, "%s\t%s\n", name, value);
}

/* stats(node index, group or None) -> text "name\tvalue\n..." */
static PyObject *
handle_stats(struct handle *h, PyObject *args)
{
    struct stats_ctx  c = { 0 };
    struct ringcache *rc;
    Py_ssize_t        i;
    const char       *group = NULL;
    int               code;
    PyObject         *out;

    if (!PyArg_ParseTuple(args, "n|z", &i, &group) || (rc = enter(h)) == NULL) {
        return NULL;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        code = ringcache_stats_group(rc, (size_t)i, group, stats_line, &c);
        PyEval_RestoreThread(ts);
    }
    leave(h);
    if (code != 0 || c.oom) {
        free(c.buf);
        return c.oom ? PyErr_NoMemory() : raise_code(code, NULL);
    }
    out = PyUnicode_DecodeUTF8(c.buf ? c.buf : "", (Py_ssize_t)c.len, "replace");
    free(c.buf);
    return out;
}

/* epoch() -> int. */
static PyObject *
handle_epoch(struct handle *h, PyObject *unused)
{
    struct ringcache *rc;
    uint64_t          e;

    (void)unused;
    if ((rc = enter(h)) == NULL) {
        return NULL;
    }
    e = ringcache_epoch(rc);
    leave(h);
    return PyLong_FromUnsignedLongLong(e);
}

/* refresh() -> code. */
static PyObject *
handle_refresh(struct handle *h, PyObject *unused)
{
    struct ringcache *rc;
    int               code;

    (void)unused;
    if ((rc = enter(h)) == NULL) {
        return NULL;
    }
    {
        PyThreadState *ts = PyEval_SaveThread(); /* the GIL is released */
        code = ringcache_refresh(rc);
        PyEval_RestoreThread(ts);
    }
    leave(h);
    return PyLong_FromLong(code);
}

static PyMethodDef handle_methods[] = {
    { "get", (PyCFunction)handle_get, METH_VARARGS, "get(key, with_cas=False)" },
    { "store", (PyCFunction)handle_store, METH_VARARGS,
      "store(op, key, value, flags, ttl, cas) -> code" },
    { "delete", (PyCFunction)handle_delete, METH_VARARGS, "delete(key) -> code" },
    { "touch", (PyCFunction)handle_touch, METH_VARARGS, "touch(key, ttl) -> code" },
    { "incr", (PyCFunction)handle_incr, METH_VARARGS, "incr(key, delta, decr) -> (code, n)" },
    { "get_many", (PyCFunction)handle_get_many, METH_VARARGS, "get_many(keys, with_cas)" },
    { "meta", (PyCFunction)handle_meta, METH_VARARGS, "meta(cmd, key, value, opts)" },
    { "get_or_compute", (PyCFunction)handle_get_or_compute, METH_VARARGS,
      "get_or_compute(key, fn, opts)" },
    { "locate", (PyCFunction)handle_locate, METH_VARARGS, "locate(key) -> [(id, addr)]" },
    { "nodes", (PyCFunction)handle_nodes, METH_NOARGS, "nodes() -> [(id, addr, down, err)]" },
    { "stats", (PyCFunction)handle_stats, METH_VARARGS, "stats(i, group=None) -> text" },
    { "epoch", (PyCFunction)handle_epoch, METH_NOARGS, "epoch() -> int" },
    { "refresh", (PyCFunction)handle_refresh, METH_NOARGS, "refresh() -> code" },
    { "close", (PyCFunction)handle_close, METH_NOARGS, "close()" },
    { NULL, NULL, 0, NULL },
};

static PyTypeObject handle_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ringcache._ringcache.Handle",
    .tp_basicsize = sizeof(struct handle),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A libringcache handle (use ringcache.Client).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)handle_init,
    .tp_dealloc = (destructor)handle_dealloc,
    .tp_methods = handle_methods,
};

/* strerror(code) -> str. */
static PyObject *
mod_strerror(PyObject *m, PyObject *args)
{
    int code;

    (void)m;
    if (!PyArg_ParseTuple(args, "i", &code)) {
        return NULL;
    }
    return PyUnicode_FromString(ringcache_strerror(code));
}

static PyMethodDef mod_methods[] = {
    { "strerror", mod_strerror, METH_VARARGS, "strerror(code) -> str" },
    { NULL, NULL, 0, NULL },
};

static struct PyModuleDef mod_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_ringcache",
    .m_doc = "libringcache for Python (see the ringcache package)",
    .m_size = -1,
    .m_methods = mod_methods,
};

/* The codes and want bits, exported by name. */
static const struct {
    const char *name;
    long        value;
} mod_consts[] = {
    { "OK", RINGCACHE_OK },
    { "ENOTFOUND", RINGCACHE_ENOTFOUND },
    { "ENOTSTORED", RINGCACHE_ENOTSTORED },
    { "EEXISTS", RINGCACHE_EEXISTS },
    { "EINVAL", RINGCACHE_EINVAL },
    { "EKEY", RINGCACHE_EKEY },
    { "ETOOBIG", RINGCACHE_ETOOBIG },
    { "ENOMEM", RINGCACHE_ENOMEM },
    { "EDOWN", RINGCACHE_EDOWN },
    { "ETIMEDOUT", RINGCACHE_ETIMEDOUT },
    { "EIO", RINGCACHE_EIO },
    { "EPROTO", RINGCACHE_EPROTO },
    { "ECLIENT", RINGCACHE_ECLIENT },
    { "ESERVER", RINGCACHE_ESERVER },
    { "ENONNUMERIC", RINGCACHE_ENONNUMERIC },
    { "EMEMBERS", RINGCACHE_EMEMBERS },
    { "EMOVED", RINGCACHE_EMOVED },
    { "ETRYAGAIN", RINGCACHE_ETRYAGAIN },
    { "EUNAVAILABLE", RINGCACHE_EUNAVAILABLE },
    { "ETLS", RINGCACHE_ETLS },
    { "EAUTH", RINGCACHE_EAUTH },
    { "WANT_VALUE", RINGCACHE_WANT_VALUE },
    { "WANT_CAS", RINGCACHE_WANT_CAS },
    { "WANT_FLAGS", RINGCACHE_WANT_FLAGS },
    { "WANT_TTL", RINGCACHE_WANT_TTL },
    { "WANT_SIZE", RINGCACHE_WANT_SIZE },
    { "WANT_HIT", RINGCACHE_WANT_HIT },
    { "WANT_LAST_ACCESS", RINGCACHE_WANT_LAST_ACCESS },
    { "WANT_KEY", RINGCACHE_WANT_KEY },
    { "META_HIT", RINGCACHE_META_HIT },
    { "META_MISS", RINGCACHE_META_MISS },
    { "META_STORED", RINGCACHE_META_STORED },
    { "META_DELETED", RINGCACHE_META_DELETED },
    { "META_NOT_STORED", RINGCACHE_META_NOT_STORED },
    { "META_EXISTS", RINGCACHE_META_EXISTS },
    { "META_NOT_FOUND", RINGCACHE_META_NOT_FOUND },
    { "META_UNSET", RINGCACHE_META_UNSET },
    { "KEY_MAX", RINGCACHE_KEY_MAX },
    { "META_BINARY_KEY_MAX", RINGCACHE_META_BINARY_KEY_MAX },
};

PyMODINIT_FUNC PyInit__ringcache(void);

/** The module's entry point: the Handle type, Error and the constants. */
PyMODINIT_FUNC
PyInit__ringcache(void)
{
    PyObject *m;
    size_t    i;

    if (PyType_Ready(&handle_type) < 0 || (m = PyModule_Create(&mod_def)) == NULL) {
        return NULL;
    }
    rc_error = PyErr_NewException("ringcache._ringcache.Error", NULL, NULL);
    if (rc_error == NULL || PyModule_AddObjectRef(m, "Error", rc_error) < 0 ||
        PyModule_AddObjectRef(m, "Handle", (PyObject *)&handle_type) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    for (i = 0; i < sizeof(mod_consts) / sizeof(mod_consts[0]); i++) {
        if (PyModule_AddIntConstant(m, mod_consts[i].name, mod_consts[i].value) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    }
    return m;
}
