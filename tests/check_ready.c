/*
 * server/ready: the readiness decision behind GET /ready, one row per state
 * of a node: ready or not, and the words its one-line reason must carry
 * (what the node is, and what ends the wait).
 */
#include "config.h"

#include <string.h>

#include "server/ready.h"
#include "tests/suites.h"

/* A member (index 1) of epoch 7 of 3 nodes, nothing pending, all well. */
static struct cluster_snapshot
member(void)
{
    struct cluster_snapshot cs;

    memset(&cs, 0, sizeof(cs));
    cs.epoch = 7;
    cs.n_nodes = 3;
    cs.self = 1;
    cs.pending_self = -1;
    return cs;
}

START_TEST(test_ready_states)
{
    static const struct {
        const char *name;
        bool        clustered, stopping;
        int         tweak; /* which field of member() to change */
        bool        ready;
        const char *words;
    } CASES[] = {
        { "plain node", false, false, 0, true, "ready: a single node" },
        { "plain node stopping", false, true, 0, false, "shutting down" },
        { "member serving", true, false, 0, true, "ready: member 1 of epoch 7 (3 members)" },
        { "member stopping", true, true, 0, false, "shutting down" },
        { "no membership yet", true, false, 1, false, "no membership yet" },
        { "not a member", true, false, 2, false, "not a member of epoch 7" },
        { "recovering", true, false, 3, false, "recovering" },
        { "behind", true, false, 4, false, "behind: epoch 7, a peer runs 9" },
        { "leaving, prepared", true, false, 5, false, "leaving: pending epoch 8 removes" },
        { "leaving, fenced", true, false, 6, false, "(fenced)" },
        { "joining a pending epoch that keeps it", true, false, 7, true, "ready: member 1" },
        { "suspect", true, false, 8, false, "suspect" },
        { "isolated", true, false, 9, false, "isolated" },
        { "behind_epoch not above epoch", true, false, 10, true, "ready" },
    };
    size_t i;

    for (i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        struct cluster_snapshot cs = member();
        char                    why[READY_REASON_MAX];
        bool                    ok;

        switch (CASES[i].tweak) {
        case 1:
            cs.epoch = 0;
            cs.self = -1;
            break;
        case 2:
            cs.self = -1;
            break;
        case 3:
            cs.recovering = true;
            break;
        case 4:
            cs.behind_epoch = 9;
            break;
        case 5:
            cs.pending_epoch = 8;
            cs.phase = CLUSTER_PHASE_PREPARED;
            break;
        case 6:
            cs.pending_epoch = 8;
            cs.phase = CLUSTER_PHASE_FENCED;
            break;
        case 7:
            cs.pending_epoch = 8;
            cs.pending_self = 2;
            cs.phase = CLUSTER_PHASE_COPYING;
            break;
        case 8:
            cs.suspect = true;
            break;
        case 9:
            cs.isolated = true;
            break;
        case 10:
            cs.behind_epoch = 7;
            break;
        default:
            break;
        }
        memset(why, 'x', sizeof(why));
        ok = ready_check(CASES[i].clustered, CASES[i].stopping, &cs, why, sizeof(why));
        ck_assert_msg(ok == CASES[i].ready, "%s: ready %d, want %d (%s)", CASES[i].name, ok,
                      CASES[i].ready, why);
        ck_assert_msg(memchr(why, '\0', sizeof(why)) != NULL && strchr(why, '\n') == NULL,
                      "%s: one terminated line", CASES[i].name);
        ck_assert_msg(strstr(why, CASES[i].words) != NULL, "%s: \"%s\" lacks \"%s\"", CASES[i].name,
                      why, CASES[i].words);
        ck_assert_msg(strncmp(why, ok ? "ready: " : "not ready: ", ok ? 7 : 11) == 0,
                      "%s: \"%s\" opens with its verdict", CASES[i].name, why);
    }
}
END_TEST

START_TEST(test_ready_short_buffer)
{
    struct cluster_snapshot cs = member();
    char                    why[8];

    cs.recovering = true;
    ck_assert(!ready_check(true, false, &cs, why, sizeof(why)));
    ck_assert_str_eq(why, "not rea"); /* cut, terminated */
}
END_TEST

Suite *
ready_suite(void)
{
    Suite *s = suite_create("ready");
    TCase *tc = tcase_create("core");

    tcase_add_test(tc, test_ready_states);
    tcase_add_test(tc, test_ready_short_buffer);
    suite_add_tcase(s, tc);
    return s;
}
