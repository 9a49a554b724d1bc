/*
 * ctl_control: an operator's hand on a running move. `ringctl rate`,
 * `ringctl pause` and `ringctl unpause` write the store's record `control`
 * (the pending transition's token, a rate, paused or not); the admin that
 * copies polls it and sends StartCopy again with the new settings, so the
 * nodes change their rate or stop and go on within a poll.
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "client/ctl.h"
#include "client/ctl_transition.h"
#include "client/ctl_util.h"
#include "lib/mstore.h"
#include "lib/util.h"

#define CONTROL_RECORD "control"

/* Parse the record's text: true when it is for the transition `token`. */
static bool
control_parse(const char *text, const uint8_t *token, uint64_t *rate, bool *paused)
{
    char               hex[2 * TREC_TOKEN_BYTES + 1], want[2 * TREC_TOKEN_BYTES + 1];
    unsigned long long r;
    int                p;

    util_hex(token, TREC_TOKEN_BYTES, want);
    if (text == NULL || sscanf(text, "token %32s\nrate %llu\npaused %d", hex, &r, &p) != 3 ||
        strcmp(hex, want) != 0) {
        return false;
    }
    *rate = (uint64_t)r;
    *paused = p != 0;
    return true;
}

/* control_poll: see ctl_transition.h. */
bool
control_poll(struct admin *a, uint64_t *rate, bool *paused)
{
    struct mstore_record rec = { 0 };
    char                 err[256];
    bool                 mine = false;
    const char          *text;

    if (mstore_get(a->store, CONTROL_RECORD, &rec, err, sizeof(err)) == MSTORE_OK) {
        /* The store's revision line (dir backend) comes first. */
        for (text = rec.text; text != NULL && text[0] == '#' && strchr(text, '\n') != NULL;) {
            text = strchr(text, '\n') + 1;
        }
        mine = control_parse(text, a->rec.token, rate, paused);
    }
    mstore_record_clear(&rec);
    return mine;
}

/* Write the control record for the pending transition: rate (bytes/s, 0
 * unlimited) when set_rate, paused when set_paused; the rest as it is. */
static int
control_set(struct ctl_globals *g, const char *cmd, bool set_rate, uint64_t rate, bool set_paused,
            bool paused)
{
    struct admin     a;
    struct mstore_op op;
    char             text[160], hex[2 * TREC_TOKEN_BYTES + 1], err[512];
    uint64_t         cur_rate;
    bool             cur_paused = false;
    int              rc, n;

    memset(&a, 0, sizeof(a));
    a.g = g;
    rc = admin_load(&a, false);
    if (rc != EX_OK) {
        return rc;
    }
    if (!a.have_rec || a.new == NULL) {
        ctl_error("%s: no move is pending", cmd);
        admin_free(&a);
        return EX_FAILED;
    }
    cur_rate = a.rec.rate;
    if (!control_poll(&a, &cur_rate, &cur_paused)) {
        cur_rate = a.rec.rate;
        cur_paused = false;
    }
    rate = set_rate ? rate : cur_rate;
    paused = set_paused ? paused : cur_paused;
    util_hex(a.rec.token, TREC_TOKEN_BYTES, hex);
    n = snprintf(text, sizeof(text), "token %s\nrate %" PRIu64 "\npaused %d\n", hex, rate,
                 paused ? 1 : 0);
    op = (struct mstore_op){ MSTORE_PUT, CONTROL_RECORD, MSTORE_ANY_REV, text, (size_t)n };
    rc = mstore_txn(a.store, &op, 1, NULL, NULL, err, sizeof(err));
    if (rc != MSTORE_OK) {
        ctl_error("%s: store: %s", cmd, err);
        admin_free(&a);
        return EX_FAILED;
    }
    if (rate == 0) {
        ctl_info("%s: %s (epoch %" PRIu64 " -> %" PRIu64 "): unlimited rate, %s; the copying "
                 "admin applies it within a second",
                 cmd, a.rec.op, a.rec.from_epoch, a.rec.epoch, paused ? "paused" : "running");
    } else {
        ctl_info("%s: %s (epoch %" PRIu64 " -> %" PRIu64 "): %.1f MiB/s, %s; the copying admin "
                 "applies it within a second",
                 cmd, a.rec.op, a.rec.from_epoch, a.rec.epoch, (double)rate / 1048576.0,
                 paused ? "paused" : "running");
    }
    ctl_out_add("op", json_object_new_string(a.rec.op));
    ctl_out_add("epoch", json_object_new_uint64(a.rec.epoch));
    ctl_out_add("rate_bytes_per_s", json_object_new_uint64(rate));
    ctl_out_add("paused", json_object_new_boolean(paused));
    admin_free(&a);
    return EX_OK;
}

/* ringctl rate MIB_PER_S (0: unlimited) */
int
ctl_rate(struct ctl_globals *g, int argc, char **argv)
{
    double mib;

    if (argc != 2) {
        ctl_error("usage: rate MIB_PER_S (0: unlimited)");
        return EX_USAGE;
    }
    if (strcmp(argv[1], "0") == 0) {
        mib = 0;
    } else if (ctl_parse_rate("rate", argv[1], &mib) != EX_OK) {
        return EX_USAGE;
    }
    return control_set(g, "rate", true, (uint64_t)(mib * 1048576.0), false, false);
}

/* ringctl pause */
int
ctl_pause(struct ctl_globals *g, int argc, char **argv)
{
    (void)argv;
    if (argc != 1) {
        ctl_error("usage: pause");
        return EX_USAGE;
    }
    return control_set(g, "pause", false, 0, true, true);
}

/* ringctl unpause */
int
ctl_unpause(struct ctl_globals *g, int argc, char **argv)
{
    (void)argv;
    if (argc != 1) {
        ctl_error("usage: unpause");
        return EX_USAGE;
    }
    return control_set(g, "unpause", false, 0, true, false);
}
