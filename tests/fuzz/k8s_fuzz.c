/*
 * k8s_fuzz: libFuzzer target for the Kubernetes API replies `ringctl watch
 * --kubernetes` parses (client/k8s_plan.c): the first input byte picks the
 * StatefulSet or the pod list parser, the rest is the reply. Anything must
 * parse or fail with a reason; what parses must hold sane values, and the
 * decision over it (for a small membership) must name a pod that exists
 * and an address that fits.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/k8s_plan.h"
#include "ring/ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct k8s_state st;

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char    members[] = "epoch 3\nvnodes 16\nreplicas 2\n"
                                     "node ringcache-0 ringcache-0.ringcache:11211\n"
                                     "node ringcache-1 ringcache-1.ringcache:11211\n"
                                     "node ringcache-5 ringcache-5.ringcache:11211\n";
    struct ring_members *m = NULL;
    struct k8s_action    act;
    char                 err[256] = "", why[256];
    char                *json;
    size_t               i;
    int                  rc;

    if (size < 1) {
        return 0;
    }
    json = malloc(size);
    if (json == NULL) {
        return 0;
    }
    memcpy(json, data + 1, size - 1);
    json[size - 1] = '\0';
    if (data[0] & 1) {
        rc = k8s_parse_statefulset(json, &st, err, sizeof(err));
        if (rc == 0 && st.replicas > K8S_PODS_MAX) {
            abort();
        }
    } else {
        st.replicas = data[0] >> 1;
        snprintf(st.service, sizeof(st.service), "%s", (data[0] & 2) ? "ringcache" : "");
        rc = k8s_parse_pods(json, "ringcache", &st, err, sizeof(err));
        if (rc == 0) {
            if (st.n_pods > K8S_PODS_MAX) {
                abort();
            }
            for (i = 0; i < st.n_pods; i++) {
                if (st.pods[i].ordinal < 0 || strncmp(st.pods[i].name, "ringcache-", 10) != 0) {
                    abort();
                }
            }
            if (ring_members_parse(members, sizeof(members) - 1, "f", &m, why, sizeof(why)) !=
                RING_OK) {
                abort();
            }
            k8s_decide(m, "ringcache", &st, 11211, &act);
            if (act.what != K8S_NONE &&
                (act.id[0] == '\0' || (act.what == K8S_JOIN && act.addr[0] == '\0'))) {
                abort();
            }
            ring_members_free(m);
        }
    }
    if (rc != 0 && err[0] == '\0') {
        abort(); /* a refusal says why */
    }
    free(json);
    return 0;
}
