/*
 * etcd_fuzz: libFuzzer target for what the etcd backend of the membership
 * store (lib/mstore_etcd.c) makes of etcd's JSON gateway replies. The
 * target links this file's libcurl instead of the real one: every
 * curl_easy_perform hands the next reply of the input to the backend's
 * write callback (in pieces, as a network would), so each call of the
 * store API (range, txn, lease grant and keepalive, leased put, list, the
 * watch stream, authentication) parses bytes from the input, and nothing
 * leaves the process.
 *
 * Input: byte 0 picks the call, byte 1 the setup (bit 0: etcd auth, bit 1:
 * two endpoints), byte 2 the piece size (1..256); then the replies, one
 * per request, separated by "\n--\n". A reply may start with "!NNN " (HTTP
 * status NNN instead of 200), "!E " (the request never reached etcd) or
 * "!T " (it timed out). Past the last reply, nothing answers.
 */
#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/mstore.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SEP     "\n--\n"
#define SEP_LEN 4

/* What the stub answers: the input's replies, and the callback the
 * backend set for them. */
static struct {
    const uint8_t      *p, *end; /* replies not yet given */
    size_t              piece;
    long                status; /* of the last reply */
    curl_write_callback write_fn;
    void               *write_arg;
} net;

static char password_file[64];

static void
remove_password_file(void)
{
    unlink(password_file);
}

/*
 * The libcurl the backend sees
 */

CURLcode
curl_global_init(long flags)
{
    (void)flags;
    return CURLE_OK;
}

CURL *
curl_easy_init(void)
{
    return malloc(1);
}

void
curl_easy_cleanup(CURL *curl)
{
    free(curl);
}

CURLcode(curl_easy_setopt)(CURL *curl, CURLoption option, ...)
{
    va_list ap;

    (void)curl;
    va_start(ap, option);
    if (option == CURLOPT_WRITEFUNCTION) {
        net.write_fn = va_arg(ap, curl_write_callback);
    } else if (option == CURLOPT_WRITEDATA) {
        net.write_arg = va_arg(ap, void *);
    }
    va_end(ap);
    return CURLE_OK;
}

CURLcode(curl_easy_getinfo)(CURL *curl, CURLINFO info, ...)
{
    va_list ap;

    (void)curl;
    va_start(ap, info);
    if (info == CURLINFO_RESPONSE_CODE) {
        *va_arg(ap, long *) = net.status;
    }
    va_end(ap);
    return CURLE_OK;
}

const char *
curl_easy_strerror(CURLcode rc)
{
    return rc == CURLE_OK ? "ok" : "a curl error";
}

struct curl_slist *
curl_slist_append(struct curl_slist *list, const char *s)
{
    struct curl_slist *n = malloc(sizeof(*n)), *l = list;

    if (n == NULL || (n->data = strdup(s)) == NULL) {
        free(n);
        return NULL;
    }
    n->next = NULL;
    if (list == NULL) {
        return n;
    }
    while (l->next != NULL) {
        l = l->next;
    }
    l->next = n;
    return list;
}

void
curl_slist_free_all(struct curl_slist *list)
{
    while (list != NULL) {
        struct curl_slist *next = list->next;

        free(list->data);
        free(list);
        list = next;
    }
}

/* The next reply: its status, then its body in pieces to the callback
 * (which may stop the transfer, as the watch does: a write error). */
CURLcode
curl_easy_perform(CURL *curl)
{
    const uint8_t *body, *end;
    CURLcode       rc = CURLE_OK;

    (void)curl;
    if (net.p >= net.end) {
        return CURLE_COULDNT_CONNECT;
    }
    body = net.p;
    end = memmem(body, (size_t)(net.end - body), SEP, SEP_LEN);
    if (end == NULL) {
        end = net.end;
        net.p = net.end;
    } else {
        net.p = end + SEP_LEN;
    }
    net.status = 200;
    if (end - body >= 3 && body[0] == '!') {
        if (body[1] == 'E') {
            return CURLE_COULDNT_CONNECT;
        }
        if (body[1] == 'T') {
            rc = CURLE_OPERATION_TIMEDOUT;
        } else if (end - body >= 5) {
            net.status = (body[1] - '0') * 100 + (body[2] - '0') * 10 + (body[3] - '0');
            body += 2;
        }
        body += 3;
    }
    while (body < end) {
        /* A piece of its own copy: a read past it trips ASan. */
        size_t n = (size_t)(end - body) < net.piece ? (size_t)(end - body) : net.piece;
        char  *copy = malloc(n);

        memcpy(copy, body, n);
        n = net.write_fn(copy, 1, n, net.write_arg) == n ? n : 0;
        free(copy);
        if (n == 0) {
            return CURLE_WRITE_ERROR;
        }
        body += n;
    }
    return rc;
}

/*
 * The calls
 */

/* Abort (a finding) on a result outside the documented ones, or an error
 * without a message. */
static void
check_rc(int rc, const char *err)
{
    if (rc > 0 || rc < MSTORE_ENOMEM ||
        (rc != MSTORE_OK && rc != MSTORE_ENOENT && err[0] == '\0')) {
        abort();
    }
}

/* A record the backend returned must hold what it says: NUL-terminated
 * text of len bytes after its "# rev N" line. */
static void
check_record(const struct mstore_record *r)
{
    if (r->text != NULL && (r->rev == 0 || r->text[r->len] != '\0' || r->len < 8 ||
                            memcmp(r->text, "# rev ", 6) != 0)) {
        abort();
    }
}

static void
run(struct mstore *s, uint8_t call)
{
    static const char *const names[] = { "active.members", "pending.members", "transition" };
    struct mstore_record     rec, recs[3];
    struct mstore_op         ops[4] = {
        { MSTORE_CHECK, "transition", 0, NULL, 0 },
        { MSTORE_PUT, "active.members", 7, "epoch 2\n", 8 },
        { MSTORE_DELETE, "pending.members", MSTORE_ANY_REV, NULL, 0 },
        { MSTORE_CREATE, "history/epoch-2.members", 0, "x", 1 },
    };
    char     err[512] = "", **list = NULL;
    size_t   failed = 0, n = 0, i;
    uint64_t rev = 0, lease = 0;
    int      rc;

    switch (call % 10) {
    case 0:
        rc = mstore_get(s, "active.members", &rec, err, sizeof(err));
        check_rc(rc, err);
        check_record(&rec);
        mstore_record_clear(&rec);
        break;
    case 1:
        rc = mstore_get_many(s, names, 3, recs, err, sizeof(err));
        check_rc(rc, err);
        for (i = 0; rc == MSTORE_OK && i < 3; i++) {
            check_record(&recs[i]);
            mstore_record_clear(&recs[i]);
        }
        break;
    case 2:
        rc = mstore_txn(s, ops, 4, &failed, &rev, err, sizeof(err));
        check_rc(rc, err);
        if (rc == MSTORE_ECONFLICT && failed >= 4) {
            abort();
        }
        break;
    case 3:
        rc = mstore_wait(s, 41, 1000, &rev, err, sizeof(err));
        check_rc(rc, err);
        break;
    case 4:
        rc = mstore_lease(s, &lease, 10, err, sizeof(err));
        check_rc(rc, err);
        if (rc == MSTORE_OK && lease == 0) {
            abort();
        }
        break;
    case 5:
        lease = 1234;
        rc = mstore_lease(s, &lease, 10, err, sizeof(err));
        check_rc(rc, err);
        if ((rc == MSTORE_ENOENT) != (lease == 0)) {
            abort();
        }
        break;
    case 6:
        rc = mstore_put_leased(s, "alive/a", "up\n", 3, 1234, err, sizeof(err));
        check_rc(rc, err);
        break;
    case 7:
        rc = mstore_create_leased(s, "role/watch", "a\n", 2, 1234, err, sizeof(err));
        check_rc(rc, err);
        break;
    case 8:
        rc = mstore_list(s, "alive", &list, &n, err, sizeof(err));
        check_rc(rc, err);
        for (i = 0; rc == MSTORE_OK && i < n; i++) {
            if (list[i] == NULL) {
                abort();
            }
        }
        if (rc == MSTORE_OK) {
            mstore_names_free(list, n);
        }
        break;
    default:
        rc = mstore_cas(s, "active.members", 5, "epoch 3\n", 8, &rev, err, sizeof(err));
        check_rc(rc, err);
        break;
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mstore *s;
    char           spec[256], err[512];

    if (password_file[0] == '\0') {
        int fd;

        strcpy(password_file, "/tmp/etcd_fuzz.XXXXXX");
        fd = mkstemp(password_file);
        if (fd < 0 || write(fd, "secret\n", 7) != 7 || close(fd) != 0) {
            abort();
        }
        atexit(remove_password_file);
    }
    if (size < 3) {
        return 0;
    }
    snprintf(spec, sizeof(spec), "etcd://127.0.0.1:2379%s/rc/fuzz%s%s",
             data[1] & 2 ? ",127.0.0.2:2379" : "", data[1] & 1 ? "?user=u&password-file=" : "",
             data[1] & 1 ? password_file : "");
    memset(&net, 0, sizeof(net));
    net.p = data + 3;
    net.end = data + size;
    net.piece = (size_t)data[2] + 1;
    s = mstore_open(spec, err, sizeof(err));
    if (s == NULL) {
        abort();
    }
    run(s, data[0]);
    mstore_close(s);
    return 0;
}
