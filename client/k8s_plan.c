/*
 * k8s_plan: the StatefulSet and pod list of the Kubernetes API parsed,
 * and the next change for the ring (see k8s_plan.h).
 */
#include "config.h"

#include <errno.h>
#include <json-c/json.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/k8s_plan.h"
#include "lib/util.h"

/* ---- parsing ---------------------------------------------------------- */

/* The object at path a.b.c of j (NULL when a step is missing). */
static json_object *
at(json_object *j, const char *const *path)
{
    for (; j != NULL && *path != NULL; path++) {
        if (!json_object_is_type(j, json_type_object) || !json_object_object_get_ex(j, *path, &j)) {
            return NULL;
        }
    }
    return j;
}

static const char *
str_at(json_object *j, const char *const *path)
{
    j = at(j, path);
    return j != NULL && json_object_is_type(j, json_type_string) ? json_object_get_string(j) : NULL;
}

static json_object *
parse_object(const char *json, const char *what, char *err, size_t errlen)
{
    enum json_tokener_error jerr = json_tokener_success;
    json_object            *j = json_tokener_parse_verbose(json, &jerr);

    if (j == NULL || !json_object_is_type(j, json_type_object)) {
        util_set_err(err, errlen, "kubernetes: the %s is not a JSON object (%s)", what,
                     jerr != json_tokener_success ? json_tokener_error_desc(jerr) : "empty");
        json_object_put(j);
        return NULL;
    }
    return j;
}

int
k8s_parse_statefulset(const char *json, struct k8s_state *st, char *err, size_t errlen)
{
    static const char *const rep[] = { "spec", "replicas", NULL };
    static const char *const svc[] = { "spec", "serviceName", NULL };
    static const char *const sel[] = { "spec", "selector", "matchLabels", NULL };
    json_object             *j = parse_object(json, "StatefulSet", err, errlen);
    json_object             *r, *labels;
    const char              *s;
    size_t                   used = 0;

    if (j == NULL) {
        return -1;
    }
    r = at(j, rep);
    labels = at(j, sel);
    if (r == NULL || !json_object_is_type(r, json_type_int) || json_object_get_int64(r) < 0 ||
        json_object_get_int64(r) > K8S_PODS_MAX || labels == NULL ||
        !json_object_is_type(labels, json_type_object)) {
        util_set_err(err, errlen, "%s",
                     "kubernetes: the StatefulSet has no spec.replicas (0..1024) or no "
                     "spec.selector.matchLabels");
        json_object_put(j);
        return -1;
    }
    st->replicas = (uint32_t)json_object_get_int64(r);
    s = str_at(j, svc);
    snprintf(st->service, sizeof(st->service), "%s", s != NULL ? s : "");
    st->selector[0] = '\0';
    json_object_object_foreach(labels, k, v)
    {
        int n = snprintf(st->selector + used, sizeof(st->selector) - used, "%s%s=%s",
                         used > 0 ? "," : "", k, json_object_get_string(v));

        if (n < 0 || (size_t)n >= sizeof(st->selector) - used) {
            util_set_err(err, errlen, "%s", "kubernetes: the StatefulSet's selector is too long");
            json_object_put(j);
            return -1;
        }
        used += (size_t)n;
    }
    json_object_put(j);
    return 0;
}

/* STS-N: N, else -1. */
static int
ordinal_of(const char *name, const char *sts)
{
    size_t      n = strlen(sts);
    const char *p = name + n + 1;
    char       *end;
    long        v;

    if (strncmp(name, sts, n) != 0 || name[n] != '-' || *p < '0' || *p > '9' ||
        (p[0] == '0' && p[1] != '\0')) {
        return -1;
    }
    errno = 0;
    v = strtol(p, &end, 10);
    return errno == 0 && *end == '\0' && v < 1000000 ? (int)v : -1;
}

/* Is every container of the pod running (and is there one)? */
static bool
containers_running(json_object *pod)
{
    static const char *const cs[] = { "status", "containerStatuses", NULL };
    json_object             *list = at(pod, cs);
    size_t                   i, n;

    if (list == NULL || !json_object_is_type(list, json_type_array)) {
        return false;
    }
    n = json_object_array_length(list);
    for (i = 0; i < n; i++) {
        static const char *const running[] = { "state", "running", NULL };

        if (at(json_object_array_get_idx(list, i), running) == NULL) {
            return false;
        }
    }
    return n > 0;
}

int
k8s_parse_pods(const char *json, const char *sts, struct k8s_state *st, char *err, size_t errlen)
{
    static const char *const name_p[] = { "metadata", "name", NULL };
    static const char *const del_p[] = { "metadata", "deletionTimestamp", NULL };
    static const char *const phase_p[] = { "status", "phase", NULL };
    static const char *const ip_p[] = { "status", "podIP", NULL };
    json_object             *j = parse_object(json, "pod list", err, errlen);
    json_object             *items;
    size_t                   i, n;

    if (j == NULL) {
        return -1;
    }
    if (!json_object_object_get_ex(j, "items", &items) ||
        !json_object_is_type(items, json_type_array)) {
        util_set_err(err, errlen, "%s", "kubernetes: the pod list has no items array");
        json_object_put(j);
        return -1;
    }
    st->n_pods = 0;
    n = json_object_array_length(items);
    for (i = 0; i < n && st->n_pods < K8S_PODS_MAX; i++) {
        json_object    *pod = json_object_array_get_idx(items, i);
        const char     *name = str_at(pod, name_p), *phase = str_at(pod, phase_p);
        const char     *ip = str_at(pod, ip_p);
        struct k8s_pod *p = &st->pods[st->n_pods];

        if (name == NULL || strlen(name) > RING_ID_MAX || ordinal_of(name, sts) < 0) {
            continue;
        }
        memset(p, 0, sizeof(*p));
        snprintf(p->name, sizeof(p->name), "%s", name);
        snprintf(p->ip, sizeof(p->ip), "%s", ip != NULL ? ip : "");
        p->ordinal = ordinal_of(name, sts);
        p->deleting = at(pod, del_p) != NULL;
        p->running = phase != NULL && strcmp(phase, "Running") == 0 && p->ip[0] != '\0' &&
                     containers_running(pod);
        st->n_pods++;
    }
    json_object_put(j);
    return 0;
}

/* ---- the decision ----------------------------------------------------- */

static const struct k8s_pod *
pod_named(const struct k8s_state *st, const char *name)
{
    size_t i;

    for (i = 0; i < st->n_pods; i++) {
        if (strcmp(st->pods[i].name, name) == 0) {
            return &st->pods[i];
        }
    }
    return NULL;
}

void
k8s_decide(const struct ring_members *m, const char *sts, const struct k8s_state *st, unsigned port,
           struct k8s_action *out)
{
    const struct k8s_pod *best = NULL;
    uint32_t              i;
    size_t                k;

    memset(out, 0, sizeof(*out));
    if (m == NULL) {
        snprintf(out->why, sizeof(out->why),
                 "no active membership: run ringctl init with the first pods");
        return;
    }
    /* 1. Scale-in: members beyond spec.replicas whose pod still runs. */
    for (i = 0; i < m->n_nodes; i++) {
        const struct k8s_pod *p = pod_named(st, m->nodes[i].id);

        if (p != NULL && p->ordinal >= (int)st->replicas && p->running &&
            (best == NULL || p->ordinal > best->ordinal)) {
            best = p;
        }
    }
    if (best != NULL) {
        if (m->n_nodes - 1 < m->replicas) {
            snprintf(out->why, sizeof(out->why),
                     "%s is beyond %s's %u replicas, but the ring keeps R = %u copies: it "
                     "stays a member",
                     best->name, sts, st->replicas, m->replicas);
            return;
        }
        out->what = K8S_LEAVE;
        snprintf(out->id, sizeof(out->id), "%s", best->name);
        snprintf(out->why, sizeof(out->why), "%s: leave (%s scaled in to %u replicas)", best->name,
                 sts, st->replicas);
        return;
    }
    /* 2. Scale-out (or a pod that was never joined): running pods below
     * spec.replicas that are not members. */
    for (k = 0; k < st->n_pods; k++) {
        const struct k8s_pod *p = &st->pods[k];

        if (p->ordinal < (int)st->replicas && p->running && !p->deleting &&
            ring_members_find(m, p->name) < 0 && (best == NULL || p->ordinal < best->ordinal)) {
            best = p;
        }
    }
    if (best != NULL) {
        char addr[RING_ADDR_MAX + 64];
        int  n = st->service[0] != '\0'
                     ? snprintf(addr, sizeof(addr), "%s.%s:%u", best->name, st->service, port)
                     : snprintf(addr, sizeof(addr),
                               strchr(best->ip, ':') != NULL ? "[%s]:%u" : "%s:%u", best->ip, port);

        if (n < 0 || (size_t)n >= sizeof(out->addr)) {
            snprintf(out->why, sizeof(out->why), "%.64s: its address is over %d bytes", best->name,
                     RING_ADDR_MAX);
            return;
        }
        out->what = K8S_JOIN;
        memcpy(out->addr, addr, (size_t)n + 1);
        snprintf(out->id, sizeof(out->id), "%s", best->name);
        snprintf(out->why, sizeof(out->why),
                 "%.64s: join at %.128s (it runs; %.32s has %u replicas)", best->name, out->addr,
                 sts, st->replicas);
        return;
    }
    snprintf(out->why, sizeof(out->why), "the ring follows %s (%u replicas)", sts, st->replicas);
}
