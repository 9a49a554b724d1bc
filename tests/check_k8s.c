/*
 * client/k8s_plan: the Kubernetes API's StatefulSet and pod list parsed,
 * and ringctl watch --kubernetes's decisions replayed over a recorded
 * scale-out 3 -> 5 and scale-in 5 -> 3 (pods pending, running, deleted),
 * plus the cases it must leave alone.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/k8s_plan.h"
#include "ring/ring.h"
#include "tests/suites.h"

/* A StatefulSet as `kubectl get sts ringcache -o json` prints it (cut). */
static const char STS_JSON[] =
    "{\"apiVersion\":\"apps/v1\",\"kind\":\"StatefulSet\",\"metadata\":{\"name\":\"ringcache\"},"
    "\"spec\":{\"replicas\":%d,\"serviceName\":\"ringcache\",\"podManagementPolicy\":"
    "\"Parallel\",\"selector\":{\"matchLabels\":{\"app.kubernetes.io/name\":\"ringcache\","
    "\"app.kubernetes.io/component\":\"node\"}}}}";

/* One pod: name, phase, IP ("" none), running container, deleting. */
static void
pod_json(char *out, size_t len, const char *name, const char *phase, const char *ip, bool running,
         bool deleting)
{
    snprintf(out, len,
             "{\"metadata\":{\"name\":\"%s\"%s},\"status\":{\"phase\":\"%s\"%s%s%s,"
             "\"containerStatuses\":[{\"name\":\"ringcached\",\"state\":{\"%s\":{}}}]}}",
             name, deleting ? ",\"deletionTimestamp\":\"2026-12-07T06:00:00Z\"" : "", phase,
             ip[0] != '\0' ? ",\"podIP\":\"" : "", ip, ip[0] != '\0' ? "\"" : "",
             running ? "running" : "waiting");
}

/* A pod list of n pods ringcache-0.. with the given states. */
struct pstate {
    const char *phase;
    bool        running, deleting;
};

static struct k8s_state *
state_of(int replicas, const struct pstate *ps, int n)
{
    static char       json[16384];
    char              sts[1024], one[1024];
    struct k8s_state *st = calloc(1, sizeof(*st));
    char              err[256];
    size_t            used;
    int               i;

    ck_assert_ptr_nonnull(st);
    snprintf(sts, sizeof(sts), STS_JSON, replicas);
    ck_assert_int_eq(k8s_parse_statefulset(sts, st, err, sizeof(err)), 0);
    used = (size_t)snprintf(json, sizeof(json), "{\"kind\":\"PodList\",\"items\":[");
    for (i = 0; i < n; i++) {
        char name[32], ip[32];

        snprintf(name, sizeof(name), "ringcache-%d", i);
        snprintf(ip, sizeof(ip), strcmp(ps[i].phase, "Pending") == 0 ? "" : "10.0.0.%d", 10 + i);
        pod_json(one, sizeof(one), name, ps[i].phase, ip, ps[i].running, ps[i].deleting);
        used += (size_t)snprintf(json + used, sizeof(json) - used, "%s%s", i > 0 ? "," : "", one);
    }
    snprintf(json + used, sizeof(json) - used, "]}");
    ck_assert_int_eq(k8s_parse_pods(json, "ringcache", st, err, sizeof(err)), 0);
    return st;
}

/* A membership of ringcache-<ids...> at R = r. */
static struct ring_members *
members_of(int r, const int *ids, int n)
{
    char                 text[4096], why[256];
    size_t               used;
    struct ring_members *m = NULL;
    int                  i;

    used = (size_t)snprintf(text, sizeof(text), "epoch 7\nvnodes 160\nreplicas %d\n", r);
    for (i = 0; i < n; i++) {
        used +=
            (size_t)snprintf(text + used, sizeof(text) - used,
                             "node ringcache-%d ringcache-%d.ringcache:11211\n", ids[i], ids[i]);
    }
    ck_assert_int_eq(ring_members_parse(text, used, "t.members", &m, why, sizeof(why)), RING_OK);
    return m;
}

static const struct pstate RUN = { "Running", true, false };
static const struct pstate PENDING = { "Pending", false, false };
static const struct pstate GOING = { "Running", true, true };

START_TEST(test_parse)
{
    struct k8s_state *st = calloc(1, sizeof(*st));
    char              err[256] = "", sts[1024], pods[4096], p0[1024], p1[1024];

    snprintf(sts, sizeof(sts), STS_JSON, 4);
    ck_assert_int_eq(k8s_parse_statefulset(sts, st, err, sizeof(err)), 0);
    ck_assert_uint_eq(st->replicas, 4);
    ck_assert_str_eq(st->service, "ringcache");
    ck_assert_str_eq(st->selector,
                     "app.kubernetes.io/name=ringcache,app.kubernetes.io/component=node");
    /* Pods of another StatefulSet (a name that only starts alike, or no
     * ordinal) are not ours. */
    pod_json(p0, sizeof(p0), "ringcache-0", "Running", "10.0.0.1", true, false);
    pod_json(p1, sizeof(p1), "ringcache-watch-5d8f", "Running", "10.0.0.2", true, false);
    snprintf(pods, sizeof(pods), "{\"items\":[%s,%s]}", p0, p1);
    ck_assert_int_eq(k8s_parse_pods(pods, "ringcache", st, err, sizeof(err)), 0);
    ck_assert_uint_eq(st->n_pods, 1);
    ck_assert_str_eq(st->pods[0].name, "ringcache-0");
    ck_assert_int_eq(st->pods[0].ordinal, 0);
    ck_assert(st->pods[0].running && !st->pods[0].deleting);
    ck_assert_str_eq(st->pods[0].ip, "10.0.0.1");
    /* Bad replies: a reason, never a crash. */
    ck_assert_int_eq(k8s_parse_pods("<html>", "ringcache", st, err, sizeof(err)), -1);
    ck_assert(strstr(err, "not a JSON object") != NULL);
    ck_assert_int_eq(k8s_parse_pods("{\"items\":3}", "ringcache", st, err, sizeof(err)), -1);
    ck_assert(strstr(err, "items") != NULL);
    ck_assert_int_eq(k8s_parse_statefulset("{\"spec\":{}}", st, err, sizeof(err)), -1);
    ck_assert(strstr(err, "spec.replicas") != NULL);
    ck_assert_int_eq(k8s_parse_statefulset("{\"spec\":{\"replicas\":-1,\"selector\":"
                                           "{\"matchLabels\":{}}}}",
                                           st, err, sizeof(err)),
                     -1);
    free(st);
}
END_TEST

/* The recorded scale-out 3 -> 5, then scale-in 5 -> 3, one decision per
 * step as the watch makes them. */
START_TEST(test_scale_out_in)
{
    static const int     three[] = { 0, 1, 2 }, four[] = { 0, 1, 2, 4 }, five[] = { 0, 1, 2, 3, 4 };
    struct pstate        ps[5] = { RUN, RUN, RUN, PENDING, PENDING };
    struct ring_members *m = members_of(2, three, 3);
    struct k8s_state    *st;
    struct k8s_action    act;

    /* Steady at 3: nothing. */
    st = state_of(3, ps, 3);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_NONE);
    free(st);
    /* kubectl scale --replicas=5: the new pods are Pending: nothing yet. */
    st = state_of(5, ps, 5);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_NONE);
    free(st);
    /* ringcache-4 runs first: it joins at its stable name. */
    ps[4] = RUN;
    st = state_of(5, ps, 5);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_JOIN);
    ck_assert_str_eq(act.id, "ringcache-4");
    ck_assert_str_eq(act.addr, "ringcache-4.ringcache:11211");
    free(st);
    ring_members_free(m);
    /* Then ringcache-3. */
    m = members_of(2, four, 4);
    ps[3] = RUN;
    st = state_of(5, ps, 5);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_JOIN);
    ck_assert_str_eq(act.id, "ringcache-3");
    free(st);
    ring_members_free(m);
    /* All five members: nothing. */
    m = members_of(2, five, 5);
    st = state_of(5, ps, 5);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_NONE);
    free(st);
    /* kubectl scale --replicas=3: the pods beyond are being deleted (in
     * their preStop): the highest ordinal leaves first. */
    ps[3] = GOING;
    ps[4] = GOING;
    st = state_of(3, ps, 5);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_LEAVE);
    ck_assert_str_eq(act.id, "ringcache-4");
    free(st);
    ring_members_free(m);
    m = members_of(2, (const int[]){ 0, 1, 2, 3 }, 4);
    st = state_of(3, ps, 5);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_LEAVE);
    ck_assert_str_eq(act.id, "ringcache-3");
    free(st);
    ring_members_free(m);
    /* Back at three: the deleting pods are not joined again. */
    m = members_of(2, three, 3);
    st = state_of(3, ps, 5);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_NONE);
    free(st);
    ring_members_free(m);
}
END_TEST

START_TEST(test_left_alone)
{
    static const int     two[] = { 0, 1 }, three[] = { 0, 1, 2 };
    struct pstate        ps[3] = { RUN, RUN, RUN };
    struct ring_members *m;
    struct k8s_state    *st;
    struct k8s_action    act;

    /* No active membership: the watch does not init a ring by itself. */
    st = state_of(3, ps, 3);
    k8s_decide(NULL, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_NONE);
    ck_assert(strstr(act.why, "ringctl init") != NULL);
    free(st);
    /* Scaled in below R: the ring keeps its copies. */
    m = members_of(2, two, 2);
    st = state_of(1, ps, 2);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_NONE);
    ck_assert(strstr(act.why, "R = 2") != NULL);
    free(st);
    ring_members_free(m);
    /* A member beyond replicas whose pod is already gone, or no longer
     * runs: the failover (remove --failed) handles it, not a leave. */
    m = members_of(1, three, 3);
    st = state_of(2, ps, 2);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_NONE);
    free(st);
    ps[2] = PENDING;
    st = state_of(2, ps, 3);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_NONE);
    free(st);
    ring_members_free(m);
    /* A pod restarting below replicas (rolling update: deleted, or not
     * yet running) is not joined; members stay. */
    m = members_of(1, two, 2);
    ps[2] = GOING;
    st = state_of(3, ps, 3);
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_NONE);
    free(st);
    /* No service: the pod's IP (IPv6 in brackets). */
    ps[2] = RUN;
    st = state_of(3, ps, 3);
    st->service[0] = '\0';
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_int_eq(act.what, K8S_JOIN);
    ck_assert_str_eq(act.addr, "10.0.0.12:11211");
    snprintf(st->pods[2].ip, sizeof(st->pods[2].ip), "fd00::12");
    k8s_decide(m, "ringcache", st, 11211, &act);
    ck_assert_str_eq(act.addr, "[fd00::12]:11211");
    free(st);
    ring_members_free(m);
}
END_TEST

Suite *
k8s_suite(void)
{
    Suite *s = suite_create("k8s");
    TCase *tc = tcase_create("plan");

    tcase_add_test(tc, test_parse);
    tcase_add_test(tc, test_scale_out_in);
    tcase_add_test(tc, test_left_alone);
    suite_add_tcase(s, tc);
    return s;
}
