/*
 * proto_text_suite: the text protocol parser (server/proto_text.c) driven
 * through an in-memory connection: a table of input bytes -> exact reply
 * bytes covering every command and every error, each case run with the
 * whole input at once and again fed one byte at a time. CAS and stats
 * values, which are not constant, have their own cases.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/conn.h"
#include "server/proto_text.h"
#include "server/settings.h"
#include "server/thread.h"
#include "tests/suites.h"

struct fixture {
    struct server *srv;
    struct conn   *c;
};

/* A server with one (not started) worker and an in-memory connection. */
static void
fixture_open(struct fixture *f, size_t item_size_max)
{
    struct settings st;

    settings_init(&st);
    st.num_threads = 1;
    st.maxbytes = 64u << 20;
    st.item_size_max = item_size_max;
    f->srv = server_new(&st);
    ck_assert_ptr_nonnull(f->srv);
    f->c = conn_new(&f->srv->workers[0], -1);
    ck_assert_ptr_nonnull(f->c);
}

static void
fixture_close(struct fixture *f)
{
    server_free(f->srv); /* closes the connection too */
}

/*
 * Feed input in chunks of `step` bytes (0 = all at once), processing after
 * each; stops at CLOSE or QUIT. Returns the replies (malloc'd, NUL-ended),
 * *st the last status.
 */
static char *
run(struct fixture *f, const char *in, size_t len, size_t step, enum proto_status *st,
    size_t *outlen)
{
    char  *out = malloc(1);
    size_t n = 0, off = 0;

    ck_assert_ptr_nonnull(out);
    *st = PROTO_MORE;
    if (step == 0) {
        step = len > 0 ? len : 1;
    }
    while (off < len) {
        size_t k = len - off < step ? len - off : step;
        char  *chunk;
        size_t clen;

        ck_assert_int_eq(conn_feed(f->c, in + off, k), 0);
        off += k;
        do {
            *st = proto_text_process(f->c);
            chunk = conn_out_take(f->c, &clen);
            if (chunk != NULL) {
                out = realloc(out, n + clen + 1);
                memcpy(out + n, chunk, clen);
                n += clen;
                free(chunk);
            }
        } while (*st == PROTO_PAUSE);
        if (*st == PROTO_CLOSE || *st == PROTO_QUIT) {
            break;
        }
    }
    out[n] = '\0';
    *outlen = n;
    return out;
}

/* Run in on a fresh fixture; returns the replies. */
static char *
run_fresh(const char *in, size_t len, size_t step, enum proto_status *st, size_t *outlen)
{
    struct fixture f;
    char          *out;

    fixture_open(&f, 1024 * 1024);
    out = run(&f, in, len, step, st, outlen);
    fixture_close(&f);
    return out;
}

#define E_FMT "CLIENT_ERROR bad command line format\r\n"
#define K50   "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"
#define K250  K50 K50 K50 K50 K50

struct pcase {
    const char       *name;
    const char       *in;
    const char       *out;
    enum proto_status st;
};

static const struct pcase cases[] = {
    /* storage */
    { "set", "set a 0 0 1\r\na\r\n", "STORED\r\n", PROTO_MORE },
    { "set get", "set a 5 0 3\r\nabc\r\nget a\r\n", "STORED\r\nVALUE a 5 3\r\nabc\r\nEND\r\n",
      PROTO_MORE },
    { "bare newlines", "set a 0 0 1\na\r\nget a\n", "STORED\r\nVALUE a 0 1\r\na\r\nEND\r\n",
      PROTO_MORE },
    { "runs of spaces", "set   a  1  0  1 \r\nb\r\nget  a \r\n",
      "STORED\r\nVALUE a 1 1\r\nb\r\nEND\r\n", PROTO_MORE },
    /* memcached 1.6.45: the command is what precedes the first space. */
    { "leading spaces name no command", "  set a 0 0 1\r\nbb\r\n  get a\r\n",
      "ERROR\r\nERROR\r\nERROR\r\n", PROTO_MORE },
    { "leading spaces before flush_all", " flush_all\r\n", "OK\r\n", PROTO_MORE },
    { "empty value", "set a 0 0 0\r\n\r\nget a\r\n", "STORED\r\nVALUE a 0 0\r\n\r\nEND\r\n",
      PROTO_MORE },
    { "value with crlf inside", "set a 0 0 4\r\n\r\n\r\n\r\nget a\r\n",
      "STORED\r\nVALUE a 0 4\r\n\r\n\r\n\r\nEND\r\n", PROTO_MORE },
    { "flags max", "set a 4294967295 0 1\r\na\r\nget a\r\n",
      "STORED\r\nVALUE a 4294967295 1\r\na\r\nEND\r\n", PROTO_MORE },
    { "flags 2^32 rejected, data swallowed", "set a 4294967296 0 1\r\na\r\nget a\r\n",
      E_FMT "END\r\n", PROTO_MORE },
    { "negative flags", "set a -1 0 1\r\na\r\nget a\r\n", E_FMT "END\r\n", PROTO_MORE },
    { "bad exptime swallowed", "set a 0 abc 1\r\na\r\nget a\r\n", E_FMT "END\r\n", PROTO_MORE },
    /* strtol's long cut to 32 bits, as memcached's safe_strtol stores it */
    { "exptime 2^31 is negative", "set a 0 2147483648 1\r\na\r\nget a\r\n", "STORED\r\nEND\r\n",
      PROTO_MORE },
    { "exptime 2^32+100 is 100", "set a 0 4294967396 1\r\na\r\nget a\r\n",
      "STORED\r\nVALUE a 0 1\r\na\r\nEND\r\n", PROTO_MORE },
    { "exptime out of long range swallowed", "set a 0 99999999999999999999 1\r\na\r\nget a\r\n",
      E_FMT "END\r\n", PROTO_MORE },
    { "flags end at a tab (strtoul)", "set a 5\t 0 1\r\nx\r\nset b 6\tjunk 0 1\r\ny\r\nget a b\r\n",
      "STORED\r\nSTORED\r\nVALUE a 5 1\r\nx\r\nVALUE b 6 1\r\ny\r\nEND\r\n", PROTO_MORE },
    { "exptime reads on into the next token (strtol)", "set a 7 \t 0\r\n\r\nget a\r\n",
      "STORED\r\nVALUE a 7 0\r\n\r\nEND\r\n", PROTO_MORE },
    { "negative bytes: no swallow", "set a 0 0 -1\r\nget a\r\n", E_FMT "END\r\n", PROTO_MORE },
    { "bad bytes: no swallow", "set a 0 0 x\r\nget a\r\n", E_FMT "END\r\n", PROTO_MORE },
    { "bytes over INT_MAX-2", "set a 0 0 2147483646\r\nversion\r\n",
      E_FMT "VERSION " PROTO_VERSION_STRING "\r\n", PROTO_MORE },
    { "too few tokens", "set a 0 0\r\n", E_FMT, PROTO_MORE },
    { "extra tokens ignored, noreply only last", "set a 0 0 1 noreply x\r\na\r\nget a\r\n",
      "STORED\r\nVALUE a 0 1\r\na\r\nEND\r\n", PROTO_MORE },
    { "noreply as the 23rd token", "set a 0 0 1 a b c d e f g h i j k l m n o p q noreply\r\na\r\n",
      "", PROTO_MORE },
    { "noreply past the 23rd token",
      "set a 0 0 1 a b c d e f g h i j k l m n o p q r noreply\r\na\r\n", "STORED\r\n",
      PROTO_MORE },
    { "bad length: noreply not seen", "set a 0 0 x noreply\r\n", E_FMT, PROTO_MORE },
    { "length: no plus, at most 11 characters, lone minus is 0",
      "set a 0 0 +1\r\nset a 0 0 000000000001\r\nset a 0 0 00000000001\r\nb\r\n"
      "set c 0 0 -\r\n\r\nget a c\r\n",
      E_FMT E_FMT "STORED\r\nSTORED\r\nVALUE a 0 1\r\nb\r\nVALUE c 0 0\r\n\r\nEND\r\n",
      PROTO_MORE },
    { "extra 6th token ignored", "set a 0 0 1 x\r\na\r\n", "STORED\r\n", PROTO_MORE },
    { "key 250", "set " K250 " 0 0 1\r\na\r\nget " K250 "\r\n",
      "STORED\r\nVALUE " K250 " 0 1\r\na\r\nEND\r\n", PROTO_MORE },
    { "key 251 swallowed", "set " K250 "k 0 0 1\r\na\r\nget a\r\n", E_FMT "END\r\n", PROTO_MORE },
    /* The leftover "\n" is a line under 4 bytes. */
    { "bad data chunk", "set a 0 0 1\r\nab\r\nget a\r\n",
      "CLIENT_ERROR bad data chunk\r\n" E_FMT "END\r\n", PROTO_MORE },
    { "bad data chunk keeps old", "set a 0 0 1\r\nx\r\nset a 0 0 1\r\nyzw\r\nget a\r\n",
      "STORED\r\nCLIENT_ERROR bad data chunk\r\n" E_FMT "VALUE a 0 1\r\nx\r\nEND\r\n", PROTO_MORE },
    { "noreply set", "set a 0 0 1 noreply\r\na\r\nget a\r\n", "VALUE a 0 1\r\na\r\nEND\r\n",
      PROTO_MORE },
    { "noreply hides bad chunk", "set a 0 0 1 noreply\r\nab\r\nversion\r\n",
      E_FMT "VERSION " PROTO_VERSION_STRING "\r\n", PROTO_MORE },
    { "noreply hides format error", "set a x 0 1 noreply\r\na\r\nversion\r\n",
      "VERSION " PROTO_VERSION_STRING "\r\n", PROTO_MORE },
    { "negative exptime stores then expires", "set a 0 -1 1\r\na\r\nget a\r\n", "STORED\r\nEND\r\n",
      PROTO_MORE },
    { "absolute exptime in the past", "set a 0 2592001 1\r\na\r\nget a\r\n", "STORED\r\nEND\r\n",
      PROTO_MORE },
    { "relative exptime", "set a 0 100 1\r\na\r\nget a\r\n",
      "STORED\r\nVALUE a 0 1\r\na\r\nEND\r\n", PROTO_MORE },
    { "add", "add a 0 0 1\r\na\r\nadd a 0 0 1\r\nb\r\nget a\r\n",
      "STORED\r\nNOT_STORED\r\nVALUE a 0 1\r\na\r\nEND\r\n", PROTO_MORE },
    { "replace", "replace a 0 0 1\r\na\r\nset a 0 0 1\r\na\r\nreplace a 3 0 1\r\nb\r\nget a\r\n",
      "NOT_STORED\r\nSTORED\r\nSTORED\r\nVALUE a 3 1\r\nb\r\nEND\r\n", PROTO_MORE },
    { "append prepend",
      "append a 0 0 1\r\nx\r\nprepend a 0 0 1\r\nx\r\n"
      "set a 7 0 2\r\nbc\r\nappend a 0 0 1\r\nd\r\nprepend a 0 0 1\r\na\r\nget a\r\n",
      "NOT_STORED\r\nNOT_STORED\r\nSTORED\r\nSTORED\r\nSTORED\r\nVALUE a 7 4\r\nabcd\r\nEND\r\n",
      PROTO_MORE },
    { "cas missing", "cas a 0 0 1 1\r\na\r\n", "NOT_FOUND\r\n", PROTO_MORE },
    { "cas mismatch and zero",
      "set a 0 0 1\r\na\r\ncas a 0 0 1 0\r\nb\r\n"
      "cas a 0 0 1 999999\r\nb\r\nget a\r\n",
      "STORED\r\nEXISTS\r\nEXISTS\r\nVALUE a 0 1\r\na\r\nEND\r\n", PROTO_MORE },
    { "cas bad unique swallowed", "cas a 0 0 1 x\r\na\r\nversion\r\n",
      E_FMT "VERSION " PROTO_VERSION_STRING "\r\n", PROTO_MORE },
    { "cas missing unique swallowed", "cas a 0 0 1 \r\na\r\nget a\r\n", E_FMT "END\r\n",
      PROTO_MORE },
    { "cas missing unique, noreply", "cas a 0 0 1 noreply\r\na\r\nget a\r\n", "END\r\n",
      PROTO_MORE },
    { "cas unique: digits only", "cas a 0 0 1 +1\r\na\r\nget a\r\n", E_FMT "END\r\n", PROTO_MORE },
    { "cas noreply", "cas a 0 0 1 5 noreply\r\na\r\nversion\r\n",
      "VERSION " PROTO_VERSION_STRING "\r\n", PROTO_MORE },
    /* retrieval */
    { "get miss", "get a\r\n", "END\r\n", PROTO_MORE },
    { "multi get order dup miss", "set a 0 0 1\r\n1\r\nset b 2 0 1\r\n2\r\nget b x a b\r\n",
      "STORED\r\nSTORED\r\nVALUE b 2 1\r\n2\r\nVALUE a 0 1\r\n1\r\nVALUE b 2 1\r\n2\r\nEND\r\n",
      PROTO_MORE },
    { "get without key", "get\r\n", E_FMT, PROTO_MORE },
    { "get with only spaces", "get   \r\n", E_FMT, PROTO_MORE },
    { "get key 251 is the only reply", "set a 0 0 1\r\n1\r\nget a " K250 "k a\r\n",
      "STORED\r\n" E_FMT, PROTO_MORE },
    { "tab is part of the key", "set a\tb 0 0 1\r\n1\r\nget a\tb\r\nget a\r\n",
      "STORED\r\nVALUE a\tb 0 1\r\n1\r\nEND\r\nEND\r\n", PROTO_MORE },
    { "gat", "set a 0 0 1\r\n1\r\ngat 100 a b\r\n", "STORED\r\nVALUE a 0 1\r\n1\r\nEND\r\n",
      PROTO_MORE },
    { "gat expires", "set a 0 0 1\r\n1\r\ngat -1 a\r\nget a\r\n",
      "STORED\r\nVALUE a 0 1\r\n1\r\nEND\r\nEND\r\n", PROTO_MORE },
    { "gat bad exptime", "gat x a\r\n", "CLIENT_ERROR invalid exptime argument\r\n", PROTO_MORE },
    { "gat without key", "gat 10\r\n", E_FMT, PROTO_MORE },
    { "gat without anything", "gat\r\n", E_FMT, PROTO_MORE },
    { "gats without key", "gats 1\r\n", E_FMT, PROTO_MORE },
    { "gat bad exptime without key", "gat x\r\n", E_FMT, PROTO_MORE },
    { "gat exptime: no plus, lone minus is 0", "gat +1 a\r\ngat - a\r\n",
      "CLIENT_ERROR invalid exptime argument\r\nEND\r\n", PROTO_MORE },
    /* touch */
    { "touch", "touch a 10\r\nset a 0 0 1\r\n1\r\ntouch a 10\r\n",
      "NOT_FOUND\r\nSTORED\r\nTOUCHED\r\n", PROTO_MORE },
    { "touch expires", "set a 0 0 1\r\n1\r\ntouch a -1\r\nget a\r\n",
      "STORED\r\nTOUCHED\r\nEND\r\n", PROTO_MORE },
    { "touch bad exptime", "touch a x\r\n", "CLIENT_ERROR invalid exptime argument\r\n",
      PROTO_MORE },
    { "touch missing exptime", "touch a\r\n", E_FMT, PROTO_MORE },
    { "touch extra tokens ignored", "touch a 0 1 2\r\n", "NOT_FOUND\r\n", PROTO_MORE },
    { "touch noreply", "touch a 1 noreply\r\nversion\r\n", "VERSION " PROTO_VERSION_STRING "\r\n",
      PROTO_MORE },
    /* delete */
    { "delete", "delete a\r\nset a 0 0 1\r\n1\r\ndelete a\r\nget a\r\n",
      "NOT_FOUND\r\nSTORED\r\nDELETED\r\nEND\r\n", PROTO_MORE },
    { "delete 0", "set a 0 0 1\r\n1\r\ndelete a 0\r\n", "STORED\r\nDELETED\r\n", PROTO_MORE },
    { "delete noreply", "set a 0 0 1\r\n1\r\ndelete a noreply\r\ndelete a 0 noreply\r\nget a\r\n",
      "STORED\r\nEND\r\n", PROTO_MORE },
    { "delete hold time", "delete a 5\r\n", E_FMT, PROTO_MORE },
    { "delete 0 0", "delete a 0 0\r\n", E_FMT, PROTO_MORE },
    { "delete too many", "delete a 0 noreply x\r\n", E_FMT, PROTO_MORE },
    { "delete no key", "delete\r\n", E_FMT, PROTO_MORE },
    { "delete key 251", "delete " K250 "k\r\n", E_FMT, PROTO_MORE },
    /* incr/decr */
    { "incr decr", "set n 0 0 2\r\n10\r\nincr n 5\r\ndecr n 3\r\ndecr n 100\r\nget n\r\n",
      "STORED\r\n15\r\n12\r\n0\r\nVALUE n 0 1\r\n0\r\nEND\r\n", PROTO_MORE },
    { "incr wraps", "set n 0 0 20\r\n18446744073709551615\r\nincr n 1\r\n", "STORED\r\n0\r\n",
      PROTO_MORE },
    { "incr keeps flags", "set n 9 0 1\r\n1\r\nincr n 99\r\nget n\r\n",
      "STORED\r\n100\r\nVALUE n 9 3\r\n100\r\nEND\r\n", PROTO_MORE },
    { "incr miss", "incr n 1\r\ndecr n 1\r\n", "NOT_FOUND\r\nNOT_FOUND\r\n", PROTO_MORE },
    { "incr non numeric", "set n 0 0 1\r\nx\r\nincr n 1\r\n",
      "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n", PROTO_MORE },
    { "incr negative delta", "incr n -1\r\n", "CLIENT_ERROR invalid numeric delta argument\r\n",
      PROTO_MORE },
    { "incr bad delta", "incr n abc\r\n", "CLIENT_ERROR invalid numeric delta argument\r\n",
      PROTO_MORE },
    { "incr delta too big", "incr n 18446744073709551616\r\n",
      "CLIENT_ERROR invalid numeric delta argument\r\n", PROTO_MORE },
    { "incr missing delta", "incr n\r\n", E_FMT, PROTO_MORE },
    { "incr extra tokens ignored", "incr n 1 2 3\r\n", "NOT_FOUND\r\n", PROTO_MORE },
    { "incr delta of 22 characters", "incr n 0000000000000000000001\r\n", "NOT_FOUND\r\n",
      PROTO_MORE },
    { "incr delta of 23 characters", "incr n 00000000000000000000001\r\n",
      "CLIENT_ERROR invalid numeric delta argument\r\n", PROTO_MORE },
    { "incr noreply", "set n 0 0 1\r\n1\r\nincr n 1 noreply\r\nget n\r\n",
      "STORED\r\nVALUE n 0 1\r\n2\r\nEND\r\n", PROTO_MORE },
    { "incr noreply hides error", "set n 0 0 1\r\nx\r\nincr n 1 noreply\r\n", "STORED\r\n",
      PROTO_MORE },
    /* flush_all */
    { "flush_all", "set a 0 0 1\r\n1\r\nflush_all\r\nget a\r\n", "STORED\r\nOK\r\nEND\r\n",
      PROTO_MORE },
    { "flush_all then set survives", "flush_all\r\nset a 0 0 1\r\n1\r\nget a\r\n",
      "OK\r\nSTORED\r\nVALUE a 0 1\r\n1\r\nEND\r\n", PROTO_MORE },
    { "flush_all 0 and negative",
      "set a 0 0 1\r\n1\r\nflush_all 0\r\nget a\r\n"
      "set a 0 0 1\r\n1\r\nflush_all -1\r\nget a\r\n",
      "STORED\r\nOK\r\nEND\r\nSTORED\r\nOK\r\nEND\r\n", PROTO_MORE },
    { "flush_all delayed", "set a 0 0 1\r\n1\r\nflush_all 86400\r\nget a\r\n",
      "STORED\r\nOK\r\nVALUE a 0 1\r\n1\r\nEND\r\n", PROTO_MORE },
    { "flush_all noreply",
      "set a 0 0 1\r\n1\r\nflush_all noreply\r\nflush_all 0 noreply\r\nget a\r\n",
      "STORED\r\nEND\r\n", PROTO_MORE },
    { "flush_all bad delay", "flush_all x\r\n", "CLIENT_ERROR invalid exptime argument\r\n",
      PROTO_MORE },
    { "flush_all extra tokens ignored", "flush_all 0 2 3\r\nflush_all 0 x noreply\r\n", "OK\r\n",
      PROTO_MORE },
    { "flush_all delay: no plus, lone minus is 0", "flush_all +0\r\nflush_all -\r\n",
      "CLIENT_ERROR invalid exptime argument\r\nOK\r\n", PROTO_MORE },
    /* misc */
    { "version", "version\r\nversion extra tokens\r\n",
      "VERSION " PROTO_VERSION_STRING "\r\nVERSION " PROTO_VERSION_STRING "\r\n", PROTO_MORE },
    { "verbosity", "verbosity 1\r\nverbosity 0 noreply\r\nverbosity 1 a b c d e f g h\r\n",
      "OK\r\nOK\r\n", PROTO_MORE },
    { "verbosity errors", "verbosity\r\nverbosity invalid\r\nverbosity noreply\r\n", E_FMT E_FMT,
      PROTO_MORE },
    { "verbosity level: digits only", "verbosity +0\r\nverbosity 4294967296\r\n", E_FMT E_FMT,
      PROTO_MORE },
    { "quit", "version\r\nquit\r\nversion\r\n", "VERSION " PROTO_VERSION_STRING "\r\n",
      PROTO_QUIT },
    { "quit with tokens", "quit now\r\n", "", PROTO_QUIT },
    { "unknown", "bogus\r\n", "ERROR\r\n", PROTO_MORE },
    { "unknown honours noreply", "bogus noreply\r\nnoreply\r\nversion\r\n",
      "VERSION " PROTO_VERSION_STRING "\r\n", PROTO_MORE },
    { "wrong case", "SET a 0 0 1\r\nGET a\r\n", "ERROR\r\nERROR\r\n", PROTO_MORE },
    /* memcached 1.6.45 refuses a line of fewer than 4 bytes, its end included. */
    { "empty line", "\r\n\n", E_FMT E_FMT, PROTO_MORE },
    { "lines under 4 bytes", "a\r\nab\n\r\r\nab\r\n", E_FMT E_FMT E_FMT "ERROR\r\n", PROTO_MORE },
    { "mn answers MN", "mn\r\n", "MN\r\n", PROTO_MORE },
    { "http closes", "version\r\nGET / HTTP/1.1\r\nversion\r\n",
      "VERSION " PROTO_VERSION_STRING "\r\n", PROTO_CLOSE },
    { "binary magic closes", "\x80\x01\x00\x00version\r\n", "", PROTO_CLOSE },
    { "0x80 later is a command", "version\r\n\x80x\r\n",
      "VERSION " PROTO_VERSION_STRING "\r\nERROR\r\n", PROTO_MORE },
    { "HTTP/ alone is unknown", "HTTP/1.1\r\n", "ERROR\r\n", PROTO_MORE },
    { "HTTP/ past the 23rd token is not seen",
      "x 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 HTTP/1.1\r\n", "ERROR\r\n",
      PROTO_MORE },
    { "stats bogus", "stats bogus\r\nstats noreply\r\n", "ERROR\r\nERROR\r\n", PROTO_MORE },
    { "stats reset", "stats reset\r\n", "RESET\r\n", PROTO_MORE },
    { "stats items slabs sizes", "stats items\r\nstats slabs\r\nstats sizes\r\n",
      "END\r\nEND\r\nSTAT sizes_status disabled\r\nEND\r\n", PROTO_MORE },
    /* Flags and exptime are strtoul/strtol's; the other numbers are digits only. */
    { "leading plus like strtoul", "set a +1 +0 1\r\n5\r\nincr a 5\r\nget a\r\n",
      "STORED\r\n10\r\nVALUE a 1 2\r\n10\r\nEND\r\n", PROTO_MORE },
    { "no plus in length or delta", "set a 0 0 +1\r\nincr a +5\r\n",
      E_FMT "CLIENT_ERROR invalid numeric delta argument\r\n", PROTO_MORE },
    { "lone plus is not a number", "incr a +\r\nset a + 0 1\r\n1\r\n",
      "CLIENT_ERROR invalid numeric delta argument\r\n" E_FMT, PROTO_MORE },
    { "partial command waits", "set a 0 0 5\r\nab", "", PROTO_MORE },
};

/* Every table case, fed at once, in 7-byte pieces and byte by byte. */
START_TEST(test_table)
{
    const struct pcase *pc = &cases[_i];
    static const size_t steps[] = { 0, 7, 1 };
    size_t              i;

    for (i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        enum proto_status st;
        size_t            n;
        char             *out = run_fresh(pc->in, strlen(pc->in), steps[i], &st, &n);

        ck_assert_msg(n == strlen(pc->out) && memcmp(out, pc->out, n) == 0,
                      "case '%s' step %zu:\n got: '%s'\nwant: '%s'", pc->name, steps[i], out,
                      pc->out);
        ck_assert_msg(st == pc->st, "case '%s' step %zu: status %d, want %d", pc->name, steps[i],
                      (int)st, (int)pc->st);
        free(out);
    }
}
END_TEST

/* Parse "VALUE k f n cas" and return cas. */
static uint64_t
cas_of(const char *out)
{
    const char *v = strstr(out, "VALUE ");
    char        key[300];
    unsigned    f, n;
    uint64_t    cas = 0;

    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(sscanf(v, "VALUE %299s %u %u %" SCNu64, key, &f, &n, &cas), 4);
    return cas;
}

/* gets shows a CAS; cas with it stores once; every mutation mints a new
 * one; touch and gat keep it. */
START_TEST(test_cas_flow)
{
    struct fixture    f;
    enum proto_status st;
    char             *out, cmd[128];
    uint64_t          c1, c2, c3;
    size_t            n;

    fixture_open(&f, 1024 * 1024);
    out = run(&f, "set a 0 0 1\r\n1\r\ngets a\r\n", 24, 0, &st, &n);
    c1 = cas_of(out);
    ck_assert_uint_ne(c1, 0);
    free(out);
    snprintf(cmd, sizeof(cmd), "cas a 0 0 1 %" PRIu64 "\r\n2\r\ncas a 0 0 1 %" PRIu64 "\r\n3\r\n",
             c1, c1);
    out = run(&f, cmd, strlen(cmd), 0, &st, &n);
    ck_assert_str_eq(out, "STORED\r\nEXISTS\r\n");
    free(out);
    out = run(&f, "gets a\r\n", 8, 0, &st, &n);
    c2 = cas_of(out);
    ck_assert_uint_ne(c2, c1);
    ck_assert_str_eq(strchr(out, '\n') + 1, "2\r\nEND\r\n");
    free(out);
    out = run(&f, "touch a 100\r\ngats 200 a\r\n", 25, 0, &st, &n);
    ck_assert_uint_eq(cas_of(out), c2);
    free(out);
    out = run(&f, "set b 0 0 1\r\n1\r\ngets b a\r\n", 26, 0, &st, &n);
    c3 = cas_of(out);
    ck_assert_uint_ne(c3, c2);
    ck_assert_uint_eq(cas_of(strstr(out, "VALUE a")), c2);
    free(out);
    out = run(&f, "incr b 1\r\ngets b\r\n", 18, 0, &st, &n);
    ck_assert_uint_ne(cas_of(out), c3);
    free(out);
    fixture_close(&f);
}
END_TEST

/* Values over -I are refused with the data swallowed; a failed set drops
 * the old value, a failed append keeps it. */
START_TEST(test_too_large)
{
    struct fixture    f;
    enum proto_status st;
    size_t            vlen = 4096, n, len;
    char             *in = malloc(vlen + 256), *out;

    ck_assert_ptr_nonnull(in);
    fixture_open(&f, 2048);
    out = run(&f, "set a 0 0 1\r\n1\r\nset b 0 0 1\r\n2\r\n", 32, 0, &st, &n);
    ck_assert_str_eq(out, "STORED\r\nSTORED\r\n");
    free(out);
    len = (size_t)sprintf(in, "set a 0 0 %zu\r\n", vlen);
    memset(in + len, 'x', vlen);
    len += vlen;
    len += (size_t)sprintf(in + len, "\r\nget a\r\n");
    out = run(&f, in, len, 0, &st, &n);
    ck_assert_str_eq(out, "SERVER_ERROR object too large for cache\r\nEND\r\n");
    free(out);
    len = (size_t)sprintf(in, "append b 0 0 %zu\r\n", vlen);
    memset(in + len, 'x', vlen);
    len += vlen;
    len += (size_t)sprintf(in + len, "\r\nget b\r\n");
    out = run(&f, in, len, 0, &st, &n);
    ck_assert_str_eq(out, "SERVER_ERROR object too large for cache\r\nVALUE b 0 1\r\n2\r\nEND\r\n");
    free(out);
    /* The same, byte by byte: the swallow must span many feeds. */
    len = (size_t)sprintf(in, "set c 0 0 %zu noreply\r\n", vlen);
    memset(in + len, 'y', vlen);
    len += vlen;
    len += (size_t)sprintf(in + len, "\r\nget c\r\n");
    out = run(&f, in, len, 1, &st, &n);
    ck_assert_str_eq(out, "END\r\n");
    free(out);
    free(in);
    fixture_close(&f);
}
END_TEST

/* A non-get line past 2048 bytes without a newline closes (2048 waits, as
 * in memcached); a get line may be longer; a long line with its newline
 * is processed. */
START_TEST(test_line_limit)
{
    enum proto_status st;
    size_t            n, len = 5000;
    char             *in = malloc(len + 16), *out;

    ck_assert_ptr_nonnull(in);
    memset(in, 'x', len);
    out = run_fresh(in, 2048, 0, &st, &n);
    ck_assert_int_eq(st, PROTO_MORE);
    free(out);
    out = run_fresh(in, 2049, 0, &st, &n);
    ck_assert_int_eq(st, PROTO_CLOSE);
    ck_assert_uint_eq(n, 0);
    free(out);
    /* "get " then many short keys, still no newline: keep reading. */
    memcpy(in, "get ", 4);
    for (size_t i = 4; i < len; i++) {
        in[i] = (i % 5 == 0) ? ' ' : 'k';
    }
    out = run_fresh(in, len, 0, &st, &n);
    ck_assert_int_eq(st, PROTO_MORE);
    free(out);
    memcpy(in + len, "\r\n", 2);
    out = run_fresh(in, len + 2, 0, &st, &n);
    ck_assert_int_eq(st, PROTO_MORE);
    ck_assert_str_eq(out, "END\r\n");
    free(out);
    /* More than 100 spaces before "get" is not a get line. */
    memset(in, ' ', 101);
    memcpy(in + 101, "get ", 4);
    out = run_fresh(in, 3000, 0, &st, &n);
    ck_assert_int_eq(st, PROTO_CLOSE);
    free(out);
    free(in);
}
END_TEST

/* Find "STAT name " in a stats reply and return its number. */
static long long
stat_of(const char *out, const char *name)
{
    char        pat[64];
    const char *p;

    snprintf(pat, sizeof(pat), "STAT %s ", name);
    p = strstr(out, pat);
    ck_assert_msg(p != NULL, "no %s in stats", name);
    return atoll(p + strlen(pat));
}

/* Counters: cmd_get counts keys, hits/misses, touches, sets; stats reset
 * zeroes them; settings reports the options. */
START_TEST(test_stats)
{
    static const char *const names[] = {
        "pid",
        "uptime",
        "time",
        "version",
        "pointer_size",
        "rusage_user",
        "rusage_system",
        "curr_items",
        "total_items",
        "bytes",
        "max_connections",
        "curr_connections",
        "total_connections",
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "get_expired",
        "get_flushed",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "decr_hits",
        "decr_misses",
        "cas_hits",
        "cas_misses",
        "cas_badval",
        "touch_hits",
        "touch_misses",
        "store_too_large",
        "store_no_memory",
        "evictions",
        "bytes_read",
        "bytes_written",
        "limit_maxbytes",
        "threads",
    };
    const char    *in = "set a 0 0 1\r\n1\r\nget a b a\r\ngat 10 a z\r\ntouch a 5\r\ndelete q\r\n"
                        "incr a 1\r\ndecr x 1\r\ncas a 0 0 1 1\r\n1\r\ncas z 0 0 1 1\r\n1\r\n"
                        "flush_all 1000\r\nstats\r\n";
    struct fixture f;
    enum proto_status st;
    size_t            n, i;
    char             *out;

    fixture_open(&f, 1024 * 1024);
    out = run(&f, in, strlen(in), 0, &st, &n);
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char pat[64];

        snprintf(pat, sizeof(pat), "\r\nSTAT %s ", names[i]);
        ck_assert_msg(strstr(out, pat) != NULL, "missing STAT %s", names[i]);
    }
    ck_assert_int_eq(stat_of(out, "cmd_get"), 5);
    ck_assert_int_eq(stat_of(out, "get_hits"), 2);
    ck_assert_int_eq(stat_of(out, "get_misses"), 1);
    ck_assert_int_eq(stat_of(out, "cmd_touch"), 3);
    ck_assert_int_eq(stat_of(out, "touch_hits"), 2);
    ck_assert_int_eq(stat_of(out, "touch_misses"), 1);
    ck_assert_int_eq(stat_of(out, "cmd_set"), 3);
    ck_assert_int_eq(stat_of(out, "delete_misses"), 1);
    ck_assert_int_eq(stat_of(out, "incr_hits"), 1);
    ck_assert_int_eq(stat_of(out, "decr_misses"), 1);
    ck_assert_int_eq(stat_of(out, "cas_badval"), 1);
    ck_assert_int_eq(stat_of(out, "cas_misses"), 1);
    ck_assert_int_eq(stat_of(out, "cmd_flush"), 1);
    ck_assert_int_eq(stat_of(out, "curr_items"), 1);
    ck_assert_int_eq(stat_of(out, "limit_maxbytes"), 64 << 20);
    ck_assert_int_eq(stat_of(out, "threads"), 1);
    ck_assert_ptr_nonnull(strstr(out, "STAT version " PROTO_VERSION_STRING "\r\n"));
    ck_assert_str_eq(out + n - 5, "END\r\n");
    free(out);

    out = run(&f, "stats reset\r\nget a\r\nstats\r\n", 27, 0, &st, &n);
    ck_assert_int_eq(strncmp(out, "RESET\r\n", 7), 0);
    ck_assert_int_eq(stat_of(out, "cmd_get"), 1);
    ck_assert_int_eq(stat_of(out, "cmd_set"), 0);
    ck_assert_int_eq(stat_of(out, "curr_items"), 1);
    free(out);

    out = run(&f, "stats settings\r\n", 16, 0, &st, &n);
    ck_assert_int_eq(stat_of(out, "maxbytes"), 64 << 20);
    ck_assert_int_eq(stat_of(out, "maxconns"), 1024);
    ck_assert_int_eq(stat_of(out, "item_size_max"), 1024 * 1024);
    ck_assert_int_eq(stat_of(out, "client_flags_size"), 4);
    ck_assert_int_eq(stat_of(out, "num_threads"), 1);
    ck_assert_ptr_nonnull(strstr(out, "STAT cas_enabled yes\r\n"));
    ck_assert_ptr_nonnull(strstr(out, "STAT tcpport "));
    ck_assert_str_eq(out + n - 5, "END\r\n");
    free(out);
    fixture_close(&f);
}
END_TEST

/* A multi-get whose replies pass the output cap pauses and resumes, and
 * the result is complete and in order. */
START_TEST(test_get_streams)
{
    struct fixture    f;
    enum proto_status st;
    size_t            vlen = 100000, nkeys = 40, len, n, pauses = 0, total = 0;
    char             *in = malloc(vlen + 64), *line = malloc(nkeys * 3 + 8), *chunk;
    struct conn      *c;

    ck_assert_ptr_nonnull(in);
    ck_assert_ptr_nonnull(line);
    fixture_open(&f, 1024 * 1024);
    c = f.c;
    len = (size_t)sprintf(in, "set v 0 0 %zu\r\n", vlen);
    memset(in + len, 'v', vlen);
    memcpy(in + len + vlen, "\r\n", 2);
    ck_assert_int_eq(conn_feed(c, in, len + vlen + 2), 0);
    ck_assert_int_eq(proto_text_process(c), PROTO_MORE);
    free(conn_out_take(c, &n));
    len = (size_t)sprintf(line, "get");
    for (size_t i = 0; i < nkeys; i++) {
        len += (size_t)sprintf(line + len, " v");
    }
    len += (size_t)sprintf(line + len, "\r\nversion\r\n");
    ck_assert_int_eq(conn_feed(c, line, len), 0);
    while ((st = proto_text_process(c)) == PROTO_PAUSE) {
        pauses++;
        ck_assert_uint_le(c->out_bytes, c->out_cap + vlen + 300);
        chunk = conn_out_take(c, &n);
        total += n;
        free(chunk);
    }
    ck_assert_int_eq(st, PROTO_MORE);
    chunk = conn_out_take(c, &n);
    total += n;
    ck_assert_uint_gt(pauses, 2);
    ck_assert_uint_eq(total, nkeys * (vlen + 2 + strlen("VALUE v 0 100000\r\n")) + 5 +
                                 strlen("VERSION " PROTO_VERSION_STRING "\r\n"));
    ck_assert_int_eq(strncmp(chunk + n - 10 - strlen(PROTO_VERSION_STRING), "VERSION ", 8), 0);
    free(chunk);
    free(in);
    free(line);
    fixture_close(&f);
}
END_TEST

Suite *
proto_text_suite(void)
{
    Suite *s = suite_create("proto_text");
    TCase *tc = tcase_create("proto_text");

    tcase_set_timeout(tc, 30);
    tcase_add_loop_test(tc, test_table, 0, (int)(sizeof(cases) / sizeof(cases[0])));
    tcase_add_test(tc, test_cas_flow);
    tcase_add_test(tc, test_too_large);
    tcase_add_test(tc, test_line_limit);
    tcase_add_test(tc, test_stats);
    tcase_add_test(tc, test_get_streams);
    suite_add_tcase(s, tc);
    return s;
}
