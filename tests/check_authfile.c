/*
 * server/authfile: the -Y file's parser, table-driven over good files and
 * every refusal with its line number, memcached's limits at and past
 * their edge, the login check, and authfile_load on real files. Then the
 * login itself (server/proto_auth.c) through proto_text_process on an
 * in-memory connection of a node with a table: every case whole, in
 * 7-byte pieces and byte by byte; and SIGHUP's re-read of the file.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server/authfile.h"
#include "server/conn.h"
#include "server/proto_auth.h"
#include "server/proto_text.h"
#include "server/settings.h"
#include "server/thread.h"
#include "tests/suites.h"

/* A text with its length (it may hold NUL bytes). */
#define T(s) s, sizeof(s) - 1

static const struct {
    const char *text;
    size_t      len;
    size_t      users; /* 0: refused with err */
    const char *err;
} cases[] = {
    { T("foo:bar\n"), 1, NULL },
    { T("foo:bar\nbaaaz:quux\n"), 2, NULL },
    /* memcached's t/authfile2: no newline at the end. */
    { T("foo:bar"), 1, NULL },
    { T("foo:bar\r\nbaaaz:quux\r\n"), 2, NULL },
    /* The password is all after the first ':', spaces and ':' included. */
    { T("foo:b:a r\n"), 1, NULL },
    { T(""), 0, "f: no user:password line (the file is empty)" },
    { T("\n"), 0, "f:1: an empty line (each line is user:password)" },
    { T("foo:bar\n\n"), 0, "f:2: an empty line (each line is user:password)" },
    { T("foo:bar\r\n\r\n"), 0, "f:2: an empty line (each line is user:password)" },
    { T("foo:bar\nfoobar\n"), 0, "f:2: no ':' (each line is user:password)" },
    { T("foo:bar\nbaz"), 0, "f:2: no ':' (each line is user:password)" },
    { T(":bar\n"), 0, "f:1: an empty user name" },
    { T("a:b\nfoo:\n"), 0, "f:2: an empty password" },
    { T("fo o:bar\n"), 0,
      "f:1: a space in the user name (a login sends `user password`, so it could never log in)" },
    { T("foo:b\0r\n"), 0, "f:1: a NUL byte" },
    { T("foo:b\rr\n"), 0, "f:1: a carriage return inside the line" },
    { T("a:b\na:b\na:b\na:b\na:b\na:b\na:b\na:b\n"), 8, NULL },
    { T("a:b\na:b\na:b\na:b\na:b\na:b\na:b\na:b\na:b\n"), 0,
      "f:9: more than 8 users (memcached's limit)" },
};

START_TEST(test_parse_table)
{
    char             err[AUTHFILE_ERR_MAX] = "";
    struct authfile *a = authfile_parse("f", cases[_i].text, cases[_i].len, err, sizeof(err));

    if (cases[_i].users > 0) {
        ck_assert_msg(a != NULL, "case %d refused: %s", _i, err);
        ck_assert_uint_eq(authfile_count(a), cases[_i].users);
    } else {
        ck_assert_msg(a == NULL, "case %d accepted", _i);
        ck_assert_str_eq(err, cases[_i].err);
    }
    authfile_free(a);
}
END_TEST

/* A line of n bytes: "u:" and n - 2 (or, with nl, n - 3 and a '\n')
 * password bytes. */
static char *
line_of(size_t n, bool nl)
{
    char *s = malloc(n + 1);

    memset(s, 'p', n);
    memcpy(s, "u:", 2);
    if (nl) {
        s[n - 1] = '\n';
    }
    s[n] = '\0';
    return s;
}

/* AUTHFILE_LINE_MAX counts the "\n", as memcached's fgets into 256 bytes;
 * a last line without one may use the byte. */
START_TEST(test_line_limit)
{
    char             err[AUTHFILE_ERR_MAX] = "";
    char            *s, *two;
    struct authfile *a;

    s = line_of(AUTHFILE_LINE_MAX, true);
    a = authfile_parse("f", s, strlen(s), err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    ck_assert(authfile_check(a, "u", 1, s + 2, AUTHFILE_LINE_MAX - 3));
    authfile_free(a);
    free(s);

    s = line_of(AUTHFILE_LINE_MAX, false);
    a = authfile_parse("f", s, strlen(s), err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    authfile_free(a);
    free(s);

    s = line_of(AUTHFILE_LINE_MAX + 1, true);
    ck_assert_ptr_null(authfile_parse("f", s, strlen(s), err, sizeof(err)));
    ck_assert_str_eq(err, "f:1: a line over 255 bytes (memcached's limit)");
    free(s);

    /* Line 2 of a file, without its newline: still counted from 1. */
    s = line_of(AUTHFILE_LINE_MAX + 1, false);
    two = malloc(strlen(s) + 5);
    sprintf(two, "a:b\n%s", s);
    ck_assert_ptr_null(authfile_parse("f", two, strlen(two), err, sizeof(err)));
    ck_assert_str_eq(err, "f:2: a line over 255 bytes (memcached's limit)");
    free(two);
    free(s);
}
END_TEST

/* Right user and password only: a prefix, an extension, another user's
 * password, a case change all fail. */
START_TEST(test_check)
{
    static const char text[] = "foo:bar\nbaaaz:quux\nsp:a b:c\n";
    char              err[AUTHFILE_ERR_MAX];
    struct authfile  *a = authfile_parse("f", text, sizeof(text) - 1, err, sizeof(err));

    ck_assert_ptr_nonnull(a);
    ck_assert(authfile_check(a, "foo", 3, "bar", 3));
    ck_assert(authfile_check(a, "baaaz", 5, "quux", 4));
    ck_assert(authfile_check(a, "sp", 2, "a b:c", 5));
    ck_assert(!authfile_check(a, "foo", 3, "bab", 3));
    ck_assert(!authfile_check(a, "foo", 3, "ba", 2));
    ck_assert(!authfile_check(a, "foo", 3, "barr", 4));
    ck_assert(!authfile_check(a, "foo", 3, "quux", 4));
    ck_assert(!authfile_check(a, "Foo", 3, "bar", 3));
    ck_assert(!authfile_check(a, "fo", 2, "bar", 3));
    ck_assert(!authfile_check(a, "", 0, "", 0));
    authfile_free(a);
}
END_TEST

/* A real file, a missing one, a directory, one just past the largest the
 * limits allow (the offending line is still named). */
START_TEST(test_load)
{
    char             dir[] = "/tmp/check_authfile.XXXXXX", path[64], err[AUTHFILE_ERR_MAX];
    struct authfile *a;
    FILE            *f;
    int              i;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/auth", dir);

    ck_assert_ptr_null(authfile_load(path, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, ": No such file or directory"));
    ck_assert(strncmp(err, path, strlen(path)) == 0);

    ck_assert_ptr_null(authfile_load(dir, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, ": Is a directory"));

    f = fopen(path, "w");
    fputs("foo:bar\nbaaaz:quux\n", f);
    fclose(f);
    a = authfile_load(path, err, sizeof(err));
    ck_assert_msg(a != NULL, "%s", err);
    ck_assert(authfile_check(a, "baaaz", 5, "quux", 4));
    authfile_free(a);

    /* Eight full lines, then a ninth: refused at line 9. */
    f = fopen(path, "w");
    for (i = 0; i < AUTHFILE_USERS_MAX; i++) {
        char *s = line_of(AUTHFILE_LINE_MAX, true);
        fputs(s, f);
        free(s);
    }
    fputs("x:y\n", f);
    fclose(f);
    ck_assert_ptr_null(authfile_load(path, err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, ":9: more than 8 users"));

    unlink(path);
    rmdir(dir);
}
END_TEST

#define UNAUTH  "CLIENT_ERROR unauthenticated\r\n"
#define FAILURE "CLIENT_ERROR authentication failure\r\n"
#define LOGIN   "set foo 0 0 7\r\nfoo bar\r\n"
#define BAD     "set foo 0 0 7\r\nfoo bab\r\n"

static const struct {
    const char       *name;
    const char       *in;
    const char       *out;
    enum proto_status st;
    uint64_t          cmds, errors, kicks; /* the worker's counters after it */
} logins[] = {
    { "get refused", "get a\r\n", UNAUTH, PROTO_MORE, 0, 0, 0 },
    { "meta refused", "mn\r\nmg a v\r\n", UNAUTH UNAUTH, PROTO_MORE, 0, 0, 0 },
    { "quit refused", "quit\r\n", UNAUTH, PROTO_MORE, 0, 0, 0 },
    { "login then commands", LOGIN "set a 0 0 1\r\nx\r\nget a\r\nmn\r\n",
      "STORED\r\nSTORED\r\nVALUE a 0 1\r\nx\r\nEND\r\nMN\r\n", PROTO_MORE, 1, 0, 0 },
    { "failure then login", BAD LOGIN "mn\r\n", FAILURE "STORED\r\nMN\r\n", PROTO_MORE, 2, 1, 0 },
    { "noreply login answered", "set k 1 2 7 noreply\r\nfoo bar\r\nmn\r\n", "STORED\r\nMN\r\n",
      PROTO_MORE, 1, 0, 0 },
    { "second user", "set k 0 0 10\r\nbaaaz quux\r\nmn\r\n", "STORED\r\nMN\r\n", PROTO_MORE, 1, 0,
      0 },
    { "password is the rest", "set k 0 0 8\r\nsp a b:c\r\nmn\r\n", "STORED\r\nMN\r\n", PROTO_MORE,
      1, 0, 0 },
    { "no space", "set foo 0 0 2\r\nhi\r\n", "CLIENT_ERROR bad authentication token format\r\n",
      PROTO_MORE, 0, 0, 0 },
    { "bad termination", "set foo 0 0 7\r\nfoo barXXmn\r\n",
      "CLIENT_ERROR bad command line termination\r\n" UNAUTH, PROTO_MORE, 0, 0, 0 },
    { "too long", "set foo 0 0 16385\r\n", "CLIENT_ERROR auth token too long\r\n", PROTO_MORE, 0,
      0, 0 },
    { "longest waits for its block", "set foo 0 0 16384\r\nfoo", "", PROTO_MORE, 0, 0, 0 },
    { "leading space", " " LOGIN, UNAUTH UNAUTH, PROTO_MORE, 0, 0, 0 },
    { "set with 3 arguments", "set foo 0 7\r\n", UNAUTH, PROTO_MORE, 0, 0, 0 },
    { "bad length", "set foo 0 0 +7\r\n", UNAUTH, PROTO_MORE, 0, 0, 0 },
    { "rc_peer outside a cluster", "rc_peer\r\n", UNAUTH, PROTO_MORE, 0, 0, 0 },
    { "five failures close", BAD BAD BAD BAD BAD LOGIN, FAILURE FAILURE FAILURE FAILURE FAILURE,
      PROTO_QUIT, 5, 5, 1 },
    { "binary magic closes", "\x80\n", "", PROTO_CLOSE, 0, 0, 0 },
};

/* A node with the users of "foo:bar\nbaaaz:quux\nsp:a b:c\n" and a fresh
 * connection of it, fed in steps of step bytes (0: at once). */
START_TEST(test_login)
{
    static const char   users[] = "foo:bar\nbaaaz:quux\nsp:a b:c\n";
    static const size_t steps[] = { 0, 7, 1 };
    char                err[AUTHFILE_ERR_MAX];
    size_t              i;

    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        const char       *in = logins[_i].in;
        size_t            len = strlen(in), step = steps[i] != 0 ? steps[i] : len, off = 0, n = 0;
        struct settings   st;
        struct server    *srv;
        struct authfile  *a = authfile_parse("u", users, sizeof(users) - 1, err, sizeof(err));
        struct conn      *c;
        enum proto_status ps = PROTO_MORE;
        char              out[4096];

        settings_init(&st);
        st.num_threads = 1;
        srv = server_new(&st);
        ck_assert_ptr_nonnull(srv);
        srv->auth = a;
        c = conn_new(&srv->workers[0], -1);
        ck_assert(!c->authenticated);
        while (off < len && ps != PROTO_CLOSE && ps != PROTO_QUIT) {
            size_t k = len - off < step ? len - off : step, clen;
            char  *chunk;

            ck_assert_int_eq(conn_feed(c, in + off, k), 0);
            off += k;
            ps = proto_text_process(c);
            chunk = conn_out_take(c, &clen);
            if (chunk != NULL) {
                ck_assert_uint_lt(n + clen, sizeof(out));
                memcpy(out + n, chunk, clen);
                n += clen;
                free(chunk);
            }
        }
        out[n] = '\0';
        ck_assert_msg(strcmp(out, logins[_i].out) == 0, "'%s' step %zu:\n got: '%s'\nwant: '%s'",
                      logins[_i].name, steps[i], out, logins[_i].out);
        ck_assert_msg(ps == logins[_i].st, "'%s' step %zu: status %d", logins[_i].name, steps[i],
                      (int)ps);
        ck_assert_uint_eq(srv->workers[0].stats.auth_cmds, logins[_i].cmds);
        ck_assert_uint_eq(srv->workers[0].stats.auth_errors, logins[_i].errors);
        ck_assert_uint_eq(srv->workers[0].stats.auth_kicks, logins[_i].kicks);
        server_free(srv);
        authfile_free(a);
    }
}
END_TEST

/* The longest login block (16384 bytes, past the 16 KiB read buffer)
 * is read whole and checked: a failure, then the stream is in step. */
START_TEST(test_login_longest)
{
    static const char users[] = "foo:bar\n";
    char              err[AUTHFILE_ERR_MAX], *in, *out;
    struct settings   st;
    struct server    *srv;
    struct authfile  *a = authfile_parse("u", users, sizeof(users) - 1, err, sizeof(err));
    struct conn      *c;
    size_t            n, len;

    in = malloc(PROTO_AUTH_TOKEN_MAX + 64);
    len = (size_t)sprintf(in, "set foo 0 0 %d\r\nfoo ", PROTO_AUTH_TOKEN_MAX);
    memset(in + len, 'p', PROTO_AUTH_TOKEN_MAX - 4);
    len += PROTO_AUTH_TOKEN_MAX - 4;
    len += (size_t)sprintf(in + len, "\r\nmn\r\n");
    settings_init(&st);
    st.num_threads = 1;
    srv = server_new(&st);
    srv->auth = a;
    c = conn_new(&srv->workers[0], -1);
    ck_assert_int_eq(conn_feed(c, in, len), 0);
    ck_assert_int_eq(proto_text_process(c), PROTO_MORE);
    out = conn_out_take(c, &n);
    ck_assert_ptr_nonnull(out);
    ck_assert(n == sizeof(FAILURE UNAUTH) - 1 && memcmp(out, FAILURE UNAUTH, n) == 0);
    ck_assert_uint_eq(srv->workers[0].stats.auth_errors, 1);
    free(out);
    free(in);
    server_free(srv);
    authfile_free(a);
}
END_TEST

/* The reply to one login on a new connection of srv. */
static char *
login_reply(struct server *srv, const char *in, char *out, size_t outlen)
{
    struct conn *c = conn_new(&srv->workers[0], -1);
    char        *chunk;
    size_t       n;

    ck_assert_int_eq(conn_feed(c, in, strlen(in)), 0);
    proto_text_process(c);
    chunk = conn_out_take(c, &n);
    ck_assert_ptr_nonnull(chunk);
    ck_assert_uint_lt(n, outlen);
    memcpy(out, chunk, n);
    out[n] = '\0';
    free(chunk);
    return out;
}

/* SIGHUP's proto_auth_reload: a good file replaces the users for new
 * logins, a connection logged in before stays so, a bad or missing file
 * changes nothing; server_free frees the reloaded table (ASan). */
START_TEST(test_reload)
{
    char             dir[] = "/tmp/check_authfile.XXXXXX", err[AUTHFILE_ERR_MAX], out[256];
    struct settings  st;
    struct server   *srv;
    struct authfile *a = authfile_parse("u", T("foo:bar\n"), err, sizeof(err));
    struct conn     *old;
    FILE            *f;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    settings_init(&st);
    st.num_threads = 1;
    snprintf(st.auth_file, sizeof(st.auth_file), "%s/auth", dir);
    srv = server_new(&st);
    ck_assert_ptr_nonnull(srv);
    srv->auth = a;
    old = conn_new(&srv->workers[0], -1);
    ck_assert_int_eq(conn_feed(old, T(LOGIN)), 0);
    proto_text_process(old);
    ck_assert(old->authenticated);

    f = fopen(st.auth_file, "w");
    fputs("new:pw\n", f);
    fclose(f);
    proto_auth_reload(srv);
    ck_assert_str_eq(login_reply(srv, "set k 0 0 6\r\nnew pw\r\n", out, sizeof(out)),
                     "STORED\r\n");
    ck_assert_str_eq(login_reply(srv, LOGIN, out, sizeof(out)), FAILURE);
    ck_assert(old->authenticated);

    /* A second good reload frees the first reloaded table. */
    f = fopen(st.auth_file, "w");
    fputs("foo:bar\nnew:pw\n", f);
    fclose(f);
    proto_auth_reload(srv);
    ck_assert_str_eq(login_reply(srv, LOGIN, out, sizeof(out)), "STORED\r\n");

    f = fopen(st.auth_file, "w");
    fputs("other:pw\nbroken\n", f);
    fclose(f);
    proto_auth_reload(srv);
    ck_assert_str_eq(login_reply(srv, LOGIN, out, sizeof(out)), "STORED\r\n");
    ck_assert_str_eq(login_reply(srv, "set k 0 0 8\r\nother pw\r\n", out, sizeof(out)),
                     FAILURE);

    unlink(st.auth_file);
    proto_auth_reload(srv);
    ck_assert_str_eq(login_reply(srv, "set k 0 0 6\r\nnew pw\r\n", out, sizeof(out)),
                     "STORED\r\n");

    server_free(srv);
    authfile_free(a);
    rmdir(dir);
}
END_TEST

Suite *
authfile_suite(void)
{
    Suite *s = suite_create("authfile");
    TCase *tc = tcase_create("core");

    tcase_add_loop_test(tc, test_parse_table, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, test_line_limit);
    tcase_add_test(tc, test_check);
    tcase_add_test(tc, test_load);
    suite_add_tcase(s, tc);
    tc = tcase_create("login");
    tcase_add_loop_test(tc, test_login, 0, (int)(sizeof(logins) / sizeof(logins[0])));
    tcase_add_test(tc, test_login_longest);
    tcase_add_test(tc, test_reload);
    suite_add_tcase(s, tc);
    return s;
}
