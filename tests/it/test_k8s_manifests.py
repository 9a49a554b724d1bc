"""The Kubernetes manifests in deploy/kubernetes/, checked offline against
the Kubernetes API's own schema: the model classes of Debian's
python3-kubernetes (generated from the API's OpenAPI definitions). Every
document must name a known apiVersion and kind; every field must exist in
that kind's schema with the right type (a misspelt or misplaced field is
an error, not silently dropped); every required field must be present.
Then what the manifests promise: node ids from pod names, the memory
limit tied to -m, probes, the token from a Secret, the store from a
ConfigMap, a PodDisruptionBudget, and an initial membership whose nodes
are the StatefulSet's pods at their stable DNS names. And what keeps two
owners of a range from going down at once: readiness on GET /ready (the
metrics port, on the pod IP, with Prometheus' scrape annotations), a
budget of maxUnavailable 1 over the node pods, an update strategy that
replaces one pod at a time (RollingUpdate without a maxUnavailable above
1, or OnDelete), one pod per host and a spread over zones."""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loadgen as lg  # noqa: E402

yaml = lg.debian_import("yaml")
k8s = lg.debian_import("kubernetes.client")

SRCDIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KDIR = os.path.join(SRCDIR, "deploy", "kubernetes")
PRIMITIVE = {"str": str, "int": int, "bool": bool, "float": (int, float)}


def model_class(api_version, kind):
    """apps/v1 StatefulSet -> V1StatefulSet (None: unknown to the API)."""
    version = api_version.split("/")[-1]
    name = version[0].upper() + version[1:] + kind
    return getattr(k8s, name, None)


def check(value, typ, path, errors):
    """Validate value against the client's type string; returns the model
    (or plain value) so that constructors enforce required fields."""
    if value is None:
        return None
    m = re.fullmatch(r"list\[(.+)\]", typ)
    if m:
        if not isinstance(value, list):
            errors.append("%s: expected a list, got %s" % (path, type(value).__name__))
            return None
        return [check(v, m.group(1), "%s[%d]" % (path, i), errors) for i, v in enumerate(value)]
    m = re.fullmatch(r"dict\(str, (.+)\)", typ)
    if m:
        if not isinstance(value, dict):
            errors.append("%s: expected a map, got %s" % (path, type(value).__name__))
            return None
        return {kk: check(v, m.group(1), "%s.%s" % (path, kk), errors) for kk, v in value.items()}
    if typ in PRIMITIVE:
        if not isinstance(value, PRIMITIVE[typ]) or (typ == "int" and isinstance(value, bool)):
            errors.append("%s: expected %s, got %r" % (path, typ, value))
        return value
    if typ in ("object", "datetime", "date"):
        return value  # IntOrString, quantities, free-form
    cls = getattr(k8s, typ, None)
    if cls is None:
        errors.append("%s: unknown schema type %s" % (path, typ))
        return None
    if not isinstance(value, dict):
        errors.append("%s: expected an object (%s), got %r" % (path, typ, value))
        return None
    by_json = {j: a for a, j in cls.attribute_map.items()}
    kwargs = {}
    for key, v in value.items():
        attr = by_json.get(key)
        if attr is None:
            errors.append("%s.%s: no such field in %s" % (path, key, typ))
            continue
        kwargs[attr] = check(v, cls.openapi_types[attr], "%s.%s" % (path, key), errors)
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as ex:
        errors.append("%s (%s): %s" % (path, typ, ex))
        return None


def load_docs():
    docs = []
    for name in sorted(os.listdir(KDIR)):
        if name.endswith(".yaml"):
            with open(os.path.join(KDIR, name)) as f:
                for i, d in enumerate(yaml.safe_load_all(f)):
                    if d is not None:
                        docs.append(("%s#%d" % (name, i + 1), d))
    return docs


def main():
    t = lg.Tap()
    if k8s is None:
        t.skip("Kubernetes manifests against the API schema",
               "python3-kubernetes / python3-yaml not installed")
        t.done()
    docs = load_docs()
    by_kind = {}
    for where, d in docs:
        errors = []
        cls = model_class(d.get("apiVersion", ""), d.get("kind", ""))
        if cls is None:
            errors.append("unknown apiVersion/kind %s %s" % (d.get("apiVersion"), d.get("kind")))
        else:
            check(d, cls.__name__, where, errors)
        t.ok(not errors, "%s: %s %s matches the Kubernetes API schema"
             % (where, d.get("kind"), d.get("metadata", {}).get("name")), "\n".join(errors))
        by_kind.setdefault(d.get("kind"), []).append(d)

    # Broken on purpose: the checker must catch each of these.
    bad = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x"},
            "spec": {"serviceName": "x", "selector": {}, "template": {"spec": {
                "containers": [{"name": "c", "imagePullPolice": "Always"}]}}}},
           {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
            "spec": {"ports": [{"port": "eleven"}]}},
           {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x"},
            "spec": {"serviceName": "x", "selector": {}, "template": {"spec": {
                "containers": [{"image": "i"}]}}}},
           {"apiVersion": "policy/v1", "kind": "PodDisruptionBug", "metadata": {}}]
    caught = []
    for d in bad:
        errors = []
        cls = model_class(d["apiVersion"], d["kind"])
        if cls is None:
            errors.append("unknown kind")
        else:
            check(d, cls.__name__, "bad", errors)
        caught.append(bool(errors))
    t.ok(all(caught), "the checker rejects a misspelt field, a wrong type, a missing required "
         "field and an unknown kind", caught)

    sts = by_kind.get("StatefulSet", [{}])[0]
    spec = sts.get("spec", {})
    pod = spec.get("template", {}).get("spec", {})
    c = (pod.get("containers") or [{}])[0]
    env = {e["name"]: e for e in c.get("env", [])}
    args = " ".join(c.get("args", []))
    t.ok(env.get("POD_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
         == "metadata.name" and '--id "$POD_NAME"' in args,
         "StatefulSet: the node id is the pod name")
    cm = {d["metadata"]["name"]: d for d in by_kind.get("ConfigMap", [])}
    mem_mb = int(cm.get("ringcache-config", {}).get("data", {}).get("RINGCACHE_MEMORY_MB", 0))
    lim = c.get("resources", {}).get("limits", {}).get("memory", "0Mi")
    lim_mb = int(lim[:-2]) if lim.endswith("Mi") else 0
    t.ok(mem_mb > 0 and '-m "$RINGCACHE_MEMORY_MB"' in args and
         mem_mb * 1.2 <= lim_mb <= mem_mb * 1.5,
         "StatefulSet: the memory limit (%s) is -m (%d MiB) plus 20-50%%" % (lim, mem_mb))
    t.ok(c.get("readinessProbe") and c.get("livenessProbe"),
         "StatefulSet: readiness and liveness probes")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    t.ok(vols.get("token", {}).get("secret", {}).get("secretName") == "ringcache-token" and
         "--token-file /etc/ringcache/token" in args,
         "StatefulSet: the token comes from the Secret")
    t.ok(any(e.get("configMapRef", {}).get("name") == "ringcache-config"
             for e in c.get("envFrom", [])) and '--store "$RINGCACHE_STORE"' in args and
         cm["ringcache-config"]["data"]["RINGCACHE_STORE"].startswith("etcd"),
         "StatefulSet: the etcd endpoints come from the ConfigMap")
    svc = [d for d in by_kind.get("Service", []) if d["metadata"]["name"] == spec.get(
        "serviceName")]
    t.ok(svc and svc[0]["spec"].get("clusterIP") == "None",
         "the StatefulSet's Service is headless")
    # Ready means serving: a pod restarted empty is not Ready until the
    # watch repaired it, and the repair reaches it by its DNS name.
    t.ok(svc and svc[0]["spec"].get("publishNotReadyAddresses") is True,
         "the Service publishes pods that are not Ready (a recovering pod stays reachable "
         "by name for its repair)")
    pod_labels = spec.get("template", {}).get("metadata", {}).get("labels", {})

    def selects(sel):
        """Does a label selector pick exactly the node pods' labels?"""
        ml = (sel or {}).get("matchLabels") or {}
        return bool(ml) and all(pod_labels.get(k) == v for k, v in ml.items()) and \
            ml.get("app.kubernetes.io/component") == "node"
    pdbs = by_kind.get("PodDisruptionBudget", [])
    t.ok(len(pdbs) == 1 and pdbs[0]["spec"].get("maxUnavailable") == 1
         and "minAvailable" not in pdbs[0]["spec"] and selects(pdbs[0]["spec"].get("selector")),
         "a PodDisruptionBudget of maxUnavailable 1 over the node pods",
         [d.get("spec") for d in pdbs])
    us = spec.get("updateStrategy", {})
    ru = us.get("rollingUpdate", {})
    t.ok((us.get("type") == "RollingUpdate" and ru.get("maxUnavailable", 1) in (1, "1")
          and isinstance(ru.get("partition", 0), int) and spec.get("minReadySeconds", 0) > 0)
         or us.get("type") == "OnDelete",
         "StatefulSet: updates take one pod at a time (RollingUpdate, maxUnavailable 1, "
         "minReadySeconds > 0)", (us, spec.get("minReadySeconds")))
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports", [])}
    rp = c.get("readinessProbe", {})
    t.ok(rp.get("httpGet", {}).get("path") == "/ready"
         and rp["httpGet"].get("port") == "metrics" and ports.get("metrics") == 9150
         and "tcpSocket" not in rp and '--metrics "$POD_IP:9150"' in args
         and env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
         == "status.podIP",
         "StatefulSet: readiness is GET /ready on the metrics port (--metrics on the pod IP, "
         "port 9150 named metrics)", (rp, ports))
    ann = spec.get("template", {}).get("metadata", {}).get("annotations", {})
    t.ok(ann.get("prometheus.io/scrape") == "true"
         and ann.get("prometheus.io/port") == str(ports.get("metrics"))
         and ann.get("prometheus.io/path") == "/metrics",
         "StatefulSet: Prometheus scrape annotations name the metrics port and /metrics", ann)
    anti = pod.get("affinity", {}).get("podAntiAffinity", {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution", [])
    spread = {c2.get("topologyKey"): c2 for c2 in pod.get("topologySpreadConstraints", [])}
    t.ok(any(a.get("topologyKey") == "kubernetes.io/hostname" and selects(a.get("labelSelector"))
             for a in anti)
         and "topology.kubernetes.io/zone" in spread
         and spread["topology.kubernetes.io/zone"].get("maxSkew") == 1
         and selects(spread["topology.kubernetes.io/zone"].get("labelSelector")),
         "StatefulSet: one node pod per host (required anti-affinity), spread over zones "
         "(maxSkew 1)", (anti, spread))
    members = cm.get("ringcache-members", {}).get("data", {}).get("initial.members", "")
    m = lg.parse_members(members) if members else {"nodes": []}
    want = [("%s-%d" % (sts["metadata"]["name"], i),
             "%s-%d.%s:11211" % (sts["metadata"]["name"], i, spec.get("serviceName")))
            for i in range(spec.get("replicas", 0))]
    t.ok(sorted(m["nodes"]) == want,
         "the initial membership names the %d pods at their stable DNS names"
         % spec.get("replicas", 0), m["nodes"])
    # Scaling with the StatefulSet: the watch follows it with its own
    # account (get the StatefulSet, list pods, nothing more), and a pod
    # waits in its preStop while it leaves, within its termination grace.
    watch = [d for d in by_kind.get("Deployment", []) if d["metadata"]["name"] == "ringcache-watch"]
    wpod = watch[0]["spec"]["template"]["spec"] if watch else {}
    wargs = " ".join((wpod.get("containers") or [{}])[0].get("args", []))
    roles = {d["metadata"]["name"]: d for d in by_kind.get("Role", [])}
    rules = roles.get("ringcache-watch", {}).get("rules", [])
    grants = sorted((tuple(r.get("resources", [])), tuple(r.get("verbs", []))) for r in rules)
    binds = [b for b in by_kind.get("RoleBinding", [])
             if b["roleRef"]["name"] == "ringcache-watch"
             and any(sj.get("kind") == "ServiceAccount" and sj.get("name") == wpod.get(
                 "serviceAccountName") for sj in b.get("subjects", []))]
    t.ok(("--kubernetes %s" % sts["metadata"]["name"]) in wargs
         and wpod.get("serviceAccountName") == "ringcache-watch" and binds
         and grants == [(("pods",), ("list",)), (("statefulsets",), ("get",))],
         "the watch runs --kubernetes on the StatefulSet with an account that may only get it "
         "and list pods", (wargs, wpod.get("serviceAccountName"), grants, len(binds)))
    pre = " ".join(c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", []))
    tm = re.search(r"--timeout (\d+)", pre)
    t.ok('wait-left "$POD_NAME"' in pre and tm is not None
         and int(tm.group(1)) < pod.get("terminationGracePeriodSeconds", 30),
         "StatefulSet: preStop waits for the pod's leave (ringctl wait-left), within its "
         "termination grace", (pre, pod.get("terminationGracePeriodSeconds")))
    t.done()


if __name__ == "__main__":
    main()
