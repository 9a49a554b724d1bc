/*
 * libFuzzer target for the text protocol (server/proto_text.c) and the
 * connection's buffering: each input is fed to a fresh in-memory
 * connection of one long-lived server, once whole and once in 3-byte
 * pieces, with replies drained as they would be written; then whole again
 * on a connection that must log in first (-Y, user foo, password bar:
 * server/proto_auth.c).
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "server/authfile.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/proto_text.h"
#include "server/settings.h"
#include "server/thread.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct server   *srv;
static struct authfile *users;

/* Feed data to a new connection in pieces of step bytes, then close it. */
static void
feed(const uint8_t *data, size_t size, size_t step)
{
    struct conn *c = conn_new(&srv->workers[0], -1);
    size_t       off = 0;

    if (c == NULL) {
        abort();
    }
    while (off < size) {
        size_t            k = size - off < step ? size - off : step;
        enum proto_status st;
        size_t            n;

        if (conn_feed(c, data + off, k) < 0) {
            break;
        }
        off += k;
        do {
            st = proto_text_process(c);
            free(conn_out_take(c, &n));
        } while (st == PROTO_PAUSE);
        if (st == PROTO_CLOSE || st == PROTO_QUIT) {
            break;
        }
        /* What conn.c does between reads: give back an empty buffer. */
        conn_rbuf_release(c);
    }
    /* Inputs may say `verbosity 2`; keep the fuzzer's output readable. */
    log_set_level(LOG_QUIET);
    conn_close(c);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (srv == NULL) {
        struct settings st;
        char            err[AUTHFILE_ERR_MAX];

        settings_init(&st);
        st.num_threads = 1;
        st.maxbytes = 16u << 20;
        st.item_size_max = 64 * 1024;
        srv = server_new(&st);
        users = authfile_parse("fuzz", "foo:bar\n", 8, err, sizeof(err));
        if (srv == NULL || users == NULL) {
            abort();
        }
    }
    feed(data, size, size > 0 ? size : 1);
    feed(data, size, 3);
    srv->auth = users;
    feed(data, size, size > 0 ? size : 1);
    srv->auth = NULL;
    return 0;
}
