/*
 * proto/tlsctx: contexts built from certificates made here (a CA, a
 * certificate it signs for IP 127.0.0.1, a key that is not its key): a
 * good pair loads and a handshake over memory BIOs verifies it by name and
 * only with the CA loaded; a mismatched key, a missing file, a non-PEM
 * file and an unknown minimum version are refused with one line naming
 * the file; the minimum version holds against a peer that only speaks
 * older ones. Last, tls_client over a socketpair: a node's TLS 1.3 refusal
 * of a missing client certificate is still read as TLS's after a write
 * met the closed socket (what pool.c and cport_client.c rely on).
 */
#include "config.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "client/ringcache.h"
#include "client/tls_client.h"
#include "lib/util.h"
#include "proto/tlsctx.h"
#include "tests/suites.h"

static char dir[64];
static char ca_pem[128], srv_crt[128], srv_key[128], other_key[128], garbage[128], missing[128];

static void
write_key(const char *path, EVP_PKEY *k)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL), 1);
    fclose(f);
}

static void
write_cert(const char *path, X509 *x)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(PEM_write_X509(f, x), 1);
    fclose(f);
}

/* A certificate for cn with key k, signed by issuer's key (self-signed
 * when issuer is NULL); san: a subjectAltName value or NULL. */
static X509 *
make_cert(const char *cn, EVP_PKEY *k, X509 *issuer, EVP_PKEY *issuer_key, const char *san,
          long serial)
{
    X509      *x = X509_new();
    X509_NAME *name = X509_NAME_new();
    X509V3_CTX v3;

    ck_assert_ptr_nonnull(x);
    X509_set_version(x, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x), serial);
    X509_gmtime_adj(X509_getm_notBefore(x), -60);
    X509_gmtime_adj(X509_getm_notAfter(x), 86400);
    X509_set_pubkey(x, k);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_subject_name(x, name);
    X509_set_issuer_name(x, issuer != NULL ? X509_get_subject_name(issuer) : name);
    X509V3_set_ctx(&v3, issuer != NULL ? issuer : x, x, NULL, NULL, 0);
    if (issuer == NULL) {
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints, "critical,CA:TRUE");

        X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
    }
    if (san != NULL) {
        X509_EXTENSION *e = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);

        X509_add_ext(x, e, -1);
        X509_EXTENSION_free(e);
    }
    ck_assert_int_gt(X509_sign(x, issuer_key, EVP_sha256()), 0);
    X509_NAME_free(name);
    return x;
}

static void
setup(void)
{
    EVP_PKEY *ca_k = EVP_EC_gen("P-256"), *srv_k = EVP_EC_gen("P-256"),
             *oth_k = EVP_EC_gen("P-256");
    X509     *ca, *srv;
    FILE     *f;

    ck_assert(ca_k != NULL && srv_k != NULL && oth_k != NULL);
    snprintf(dir, sizeof(dir), "/tmp/check_tlsctx.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(ca_pem, sizeof(ca_pem), "%s/ca.pem", dir);
    snprintf(srv_crt, sizeof(srv_crt), "%s/srv.crt", dir);
    snprintf(srv_key, sizeof(srv_key), "%s/srv.key", dir);
    snprintf(other_key, sizeof(other_key), "%s/other.key", dir);
    snprintf(garbage, sizeof(garbage), "%s/garbage.pem", dir);
    snprintf(missing, sizeof(missing), "%s/missing.pem", dir);
    ca = make_cert("test CA", ca_k, NULL, ca_k, NULL, 1);
    srv = make_cert("node", srv_k, ca, ca_k, "IP:127.0.0.1", 2);
    write_cert(ca_pem, ca);
    write_cert(srv_crt, srv);
    write_key(srv_key, srv_k);
    write_key(other_key, oth_k);
    f = fopen(garbage, "w");
    ck_assert_ptr_nonnull(f);
    fputs("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n", f);
    fclose(f);
    X509_free(ca);
    X509_free(srv);
    EVP_PKEY_free(ca_k);
    EVP_PKEY_free(srv_k);
    EVP_PKEY_free(oth_k);
}

static void
teardown(void)
{
    const char *files[] = { ca_pem, srv_crt, srv_key, other_key, garbage };
    size_t      i;

    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        unlink(files[i]);
    }
    rmdir(dir);
}

static struct tlsctx_spec
server_spec(void)
{
    struct tlsctx_spec s = {
        .role = TLSCTX_SERVER,
        .chain = srv_crt,
        .key = srv_key,
        .ca = ca_pem,
        .verify = SSL_VERIFY_PEER,
        .min_version = TLS1_2_VERSION,
    };

    return s;
}

/* Drive a client and a server SSL over memory BIOs until both finish or
 * one fails: 1 when both finished. */
static int
handshake(SSL_CTX *cctx, SSL_CTX *sctx, const char *host)
{
    SSL *c = SSL_new(cctx), *s = SSL_new(sctx);
    BIO *cb, *sb;
    int  i, cr = 0, sr = 0, ok;

    ck_assert(c != NULL && s != NULL);
    ck_assert_int_eq(BIO_new_bio_pair(&cb, 0, &sb, 0), 1);
    SSL_set_bio(c, cb, cb);
    SSL_set_bio(s, sb, sb);
    SSL_set_connect_state(c);
    SSL_set_accept_state(s);
    if (host != NULL) {
        ck_assert_int_eq(tlsctx_expect_name(c, host), 0);
    }
    for (i = 0; i < 20 && (cr != 1 || sr != 1); i++) {
        if (cr != 1) {
            cr = SSL_do_handshake(c);
            if (cr <= 0 && SSL_get_error(c, cr) != SSL_ERROR_WANT_READ) {
                break;
            }
        }
        if (sr != 1) {
            sr = SSL_do_handshake(s);
            if (sr <= 0 && SSL_get_error(s, sr) != SSL_ERROR_WANT_READ) {
                break;
            }
        }
    }
    ok = cr == 1 && sr == 1;
    SSL_free(c);
    SSL_free(s);
    ERR_clear_error();
    return ok;
}

START_TEST(good_pair)
{
    struct tlsctx_spec s = server_spec();
    struct tlsctx_spec c = { .role = TLSCTX_CLIENT, .ca = ca_pem, .verify = SSL_VERIFY_PEER };
    char               err[512] = "";
    SSL_CTX           *sctx = tlsctx_new(&s, err, sizeof(err)), *cctx;

    ck_assert_msg(sctx != NULL, "%s", err);
    ck_assert_int_eq(SSL_CTX_get_verify_mode(sctx), SSL_VERIFY_PEER);
    ck_assert_int_eq(SSL_CTX_get_min_proto_version(sctx), TLS1_2_VERSION);
    /* Accepting, it names the CA clients should show a certificate of. */
    ck_assert_int_eq(sk_X509_NAME_num(SSL_CTX_get_client_CA_list(sctx)), 1);
    cctx = tlsctx_new(&c, err, sizeof(err));
    ck_assert_msg(cctx != NULL, "%s", err);
    ck_assert_int_eq(ERR_peek_error(), 0);
    ck_assert_msg(handshake(cctx, sctx, "127.0.0.1"), "the certificate names 127.0.0.1");
    ck_assert_msg(!handshake(cctx, sctx, "127.0.0.2"), "but not 127.0.0.2");
    ck_assert_msg(!handshake(cctx, sctx, "node.example"), "nor a DNS name");
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
}
END_TEST

/* The CA is what verifies: a client without it (and without the
 * system's CAs) refuses the same server; an accepting context without one
 * names no client CAs. */
START_TEST(ca_load)
{
    struct tlsctx_spec s = server_spec();
    struct tlsctx_spec bare = { .role = TLSCTX_CLIENT, .verify = SSL_VERIFY_PEER };
    struct tlsctx_spec c = bare;
    char               err[512] = "";
    SSL_CTX           *sctx, *cctx, *nctx;

    c.ca = ca_pem;
    sctx = tlsctx_new(&s, err, sizeof(err));
    ck_assert_msg(sctx != NULL, "%s", err);
    cctx = tlsctx_new(&c, err, sizeof(err));
    ck_assert_msg(cctx != NULL, "%s", err);
    nctx = tlsctx_new(&bare, err, sizeof(err));
    ck_assert_msg(nctx != NULL, "%s", err);
    ck_assert_msg(handshake(cctx, sctx, "127.0.0.1"), "with the CA: verified");
    ck_assert_msg(!handshake(nctx, sctx, "127.0.0.1"), "without it: refused");
    SSL_CTX_free(sctx);
    s.ca = "";
    sctx = tlsctx_new(&s, err, sizeof(err));
    ck_assert_msg(sctx != NULL, "%s", err);
    ck_assert_int_eq(sk_X509_NAME_num(SSL_CTX_get_client_CA_list(sctx)), 0);
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    SSL_CTX_free(nctx);
}
END_TEST

START_TEST(key_in_chain_file)
{
    struct tlsctx_spec s = server_spec();
    char               both[160], err[512] = "";
    FILE              *out, *in;
    int                ch, i;
    SSL_CTX           *ctx;

    /* No key given: it is looked for in the chain file. */
    snprintf(both, sizeof(both), "%s/both.pem", dir);
    out = fopen(both, "w");
    ck_assert_ptr_nonnull(out);
    for (i = 0; i < 2; i++) {
        in = fopen(i == 0 ? srv_crt : srv_key, "r");
        ck_assert_ptr_nonnull(in);
        while ((ch = fgetc(in)) != EOF) {
            fputc(ch, out);
        }
        fclose(in);
    }
    fclose(out);
    s.chain = both;
    s.key = "";
    ctx = tlsctx_new(&s, err, sizeof(err));
    ck_assert_msg(ctx != NULL, "%s", err);
    SSL_CTX_free(ctx);
    unlink(both);
}
END_TEST

START_TEST(key_not_matching)
{
    struct tlsctx_spec s = server_spec();
    char               err[512] = "", want[256];

    s.key = other_key;
    ck_assert_ptr_null(tlsctx_new(&s, err, sizeof(err)));
    /* OpenSSL checks an EC key as it loads it, an RSA one after. */
    snprintf(want, sizeof(want), "Error loading the key: %s : key values mismatch", other_key);
    ck_assert_msg(strcmp(err, want) == 0 ||
                      strncmp(err, "Error validating the certificate: ", 34) == 0,
                  "%s", err);
    ck_assert_int_eq(ERR_peek_error(), 0);
}
END_TEST

/* tlsctx_new refuses s with memcached's "Error loading the WHAT: PATH :
 * WHY..." (why: the reason's start; "": any reason) and leaves OpenSSL's
 * error queue empty. */
static void
refused(struct tlsctx_spec s, const char *what, const char *path, const char *why)
{
    char err[512] = "", want[256];

    ck_assert_ptr_null(tlsctx_new(&s, err, sizeof(err)));
    snprintf(want, sizeof(want), "Error loading the %s: %s : %s", what, path, why);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0 && strlen(err) > strlen(want) - strlen(why),
                  "%s", err);
    ck_assert_int_eq(ERR_peek_error(), 0);
}

/* A missing file and one that is not PEM (a certificate given as the key
 * too), each in the one place it is named. */
START_TEST(files_named)
{
    const struct {
        int         field; /* 0 chain, 1 key, 2 ca */
        const char *what, *path, *why;
    } cases[] = {
        { 0, "certificate chain", missing, "No such file" },
        { 1, "key", missing, "No such file" },
        { 2, "CA certificate", missing, "No such file" },
        { 0, "certificate chain", garbage, "" },
        { 1, "key", srv_crt, "" },
        { 2, "CA certificate", garbage, "" },
    };
    size_t i;

    for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct tlsctx_spec s = server_spec();
        const char       **f[] = { &s.chain, &s.key, &s.ca };

        *f[cases[i].field] = cases[i].path;
        refused(s, cases[i].what, cases[i].path, cases[i].why);
    }
}
END_TEST

START_TEST(min_version)
{
    struct tlsctx_spec s = server_spec();
    struct tlsctx_spec c = { .role = TLSCTX_CLIENT, .ca = ca_pem, .verify = SSL_VERIFY_PEER };
    char               err[512] = "";
    SSL_CTX           *sctx, *cctx;

    s.min_version = TLS1_3_VERSION;
    sctx = tlsctx_new(&s, err, sizeof(err));
    ck_assert_msg(sctx != NULL, "%s", err);
    ck_assert_int_eq(SSL_CTX_get_min_proto_version(sctx), TLS1_3_VERSION);
    cctx = tlsctx_new(&c, err, sizeof(err));
    ck_assert_msg(cctx != NULL, "%s", err);
    ck_assert(handshake(cctx, sctx, NULL));
    /* A client that stops at TLS 1.2 cannot talk to it. */
    SSL_CTX_set_max_proto_version(cctx, TLS1_2_VERSION);
    ck_assert(!handshake(cctx, sctx, NULL));
    SSL_CTX_free(sctx);
    SSL_CTX_free(cctx);
    s.min_version = 0x7777;
    ck_assert_ptr_null(tlsctx_new(&s, err, sizeof(err)));
    ck_assert_msg(strncmp(err, "Error setting the minimum TLS version", 37) == 0, "%s", err);
}
END_TEST

START_TEST(why_texts)
{
    char buf[256];

    OPENSSL_init_ssl(0, NULL);
    ck_assert_str_eq(tlsctx_why(NULL, 0, buf, sizeof(buf)), "");
    ERR_raise(ERR_LIB_PEM, PEM_R_NO_START_LINE);
    ck_assert_str_eq(tlsctx_why(NULL, ERR_peek_last_error(), buf, sizeof(buf)),
                     "no start line");
    ERR_clear_error();
    ERR_raise(ERR_LIB_PEM, PEM_R_BAD_END_LINE);
    ck_assert_str_eq(tlsctx_reason(buf, sizeof(buf)), "bad end line");
    ck_assert_int_eq(ERR_peek_error(), 0);
}
END_TEST

/* A node that requires a client certificate: its handshake on fd fails
 * (none came), it sends its alert and hangs up. */
struct refuser {
    SSL_CTX *ctx;
    int      fd;
};

static void *
refuse(void *arg)
{
    struct refuser *r = arg;
    SSL            *ssl = SSL_new(r->ctx);

    SSL_set_fd(ssl, r->fd);
    ck_assert_int_le(SSL_accept(ssl), 0);
    SSL_free(ssl);
    close(r->fd);
    ERR_clear_error();
    return NULL;
}

/* tls_client's session, showing no certificate, with a node that wants
 * one, under TLS 1.3: the client's handshake finishes first; the node
 * refuses, alerts and has closed by the time the client acts. */
static SSL *
refused_session(int *fd)
{
    struct tlsctx_spec       s = server_spec();
    struct ringcache_options o;
    struct refuser           r;
    pthread_t                th;
    SSL_CTX                 *cctx;
    SSL                     *ssl = NULL;
    char                     err[512] = "";
    int                      sv[2];

    s.verify = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    s.min_version = TLS1_3_VERSION;
    r.ctx = tlsctx_new(&s, err, sizeof(err));
    ck_assert_msg(r.ctx != NULL, "%s", err);
    ringcache_options_init(&o);
    o.tls_ca_file = ca_pem;
    cctx = tls_client_ctx_new(&o, err, sizeof(err));
    ck_assert_msg(cctx != NULL, "%s", err);
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    r.fd = sv[1];
    ck_assert_int_eq(pthread_create(&th, NULL, refuse, &r), 0);
    ck_assert_int_eq(tls_client_handshake(cctx, sv[0], "127.0.0.1", true, util_now_ms() + 5000,
                                          &ssl, err, sizeof(err)),
                     0);
    pthread_join(th, NULL);
    SSL_CTX_free(r.ctx);
    SSL_CTX_free(cctx);
    *fd = sv[0];
    return ssl;
}

/* The write meets the closed socket before the alert is read; the alert
 * is still there to read after it, and reads as TLS's failure (the
 * refusal), not a broken connection: pool.c's tls_write_broke and
 * cport_client.c read it so. */
START_TEST(alert_after_failed_write)
{
    struct iovec v = { "ping", 4 };
    char         buf[64];
    short        want;
    long         w;
    int          fd;
    SSL         *ssl = refused_session(&fd);

    w = tls_client_write(ssl, &v, 1, &want);
    ck_assert_msg(w == RINGCACHE_EIO || w == RINGCACHE_ETLS, "write: %ld", w);
    ck_assert_int_eq(tls_client_read(ssl, buf, sizeof(buf), &want), RINGCACHE_ETLS);
    tls_client_close(ssl, false);
    close(fd);
}
END_TEST

/* A read finds the alert at once: the same answer. */
START_TEST(alert_on_read)
{
    char  buf[64];
    short want;
    int   fd;
    SSL  *ssl = refused_session(&fd);

    ck_assert_int_eq(tls_client_read(ssl, buf, sizeof(buf), &want), RINGCACHE_ETLS);
    tls_client_close(ssl, false);
    close(fd);
}
END_TEST

Suite *
tlsctx_suite(void)
{
    Suite *s = suite_create("tlsctx");
    TCase *tc = tcase_create("tlsctx");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, good_pair);
    tcase_add_test(tc, ca_load);
    tcase_add_test(tc, key_in_chain_file);
    tcase_add_test(tc, key_not_matching);
    tcase_add_test(tc, files_named);
    tcase_add_test(tc, min_version);
    tcase_add_test(tc, why_texts);
    tcase_add_test(tc, alert_after_failed_write);
    tcase_add_test(tc, alert_on_read);
    suite_add_tcase(s, tc);
    return s;
}
