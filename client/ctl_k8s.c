/*
 * ctl_k8s: ringctl watch's Kubernetes mode (see ctl_k8s.h): the API read
 * through libcurl, the change k8s_plan decides run, and `ringctl
 * wait-left`, the preStop hook of a node pod.
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/ctl_k8s.h"
#include "client/ctl_transition.h"
#include "client/ctl_util.h"
#include "lib/util.h"

#define SA_DIR        "/var/run/secrets/kubernetes.io/serviceaccount"
#define REPLY_MAX     (64u << 20) /* largest API reply read */
#define API_TIMEOUT_S 10L

/* ---- the API ------------------------------------------------------------ */

struct reply {
    char  *data;
    size_t len;
    bool   too_big;
};

static size_t
reply_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
    struct reply *r = arg;
    size_t        n = size * nmemb;
    char         *d;

    if (r->len + n + 1 > REPLY_MAX) {
        r->too_big = true;
        return 0;
    }
    d = realloc(r->data, r->len + n + 1);
    if (d == NULL) {
        return 0;
    }
    memcpy(d + r->len, ptr, n);
    r->data = d;
    r->len += n;
    d[r->len] = '\0';
    return n;
}

/* Read the first line of path into a malloc'd string (NULL: unreadable). */
static char *
first_line(const char *path)
{
    size_t len;
    char  *text = ctl_read_file(path, &len);

    if (text != NULL) {
        text[strcspn(text, "\r\n")] = '\0';
    }
    return text;
}

/* GET base + path: the reply body (malloc'd), or NULL after printing why. */
static char *
api_get(const struct k8s_conf *conf, const char *base, const char *path)
{
    CURL              *curl = curl_easy_init();
    struct curl_slist *hdr = NULL;
    struct reply       r = { 0 };
    char               url[2048], auth[4200];
    char              *token = NULL;
    const char        *tfile = conf->token_file != NULL ? conf->token_file : SA_DIR "/token";
    const char        *ca = conf->ca_file != NULL ? conf->ca_file : SA_DIR "/ca.crt";
    long               status = 0;
    CURLcode           rc;

    if (curl == NULL) {
        ctl_info("watch: kubernetes: cannot start libcurl");
        return NULL;
    }
    snprintf(url, sizeof(url), "%s%s", base, path);
    hdr = curl_slist_append(hdr, "Accept: application/json");
    token = first_line(tfile);
    if (token != NULL && token[0] != '\0' && strlen(token) < 4096) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hdr = curl_slist_append(hdr, auth);
        explicit_bzero(auth, sizeof(auth));
    }
    if (token != NULL) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, hdr);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, API_TIMEOUT_S);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, reply_write);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
    if (access(ca, R_OK) == 0) {
        curl_easy_setopt(curl, CURLOPT_CAINFO, ca);
    }
    rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(curl);
    if (rc != CURLE_OK || status != 200 || r.data == NULL) {
        ctl_info("watch: kubernetes: GET %s: %s", url,
                 rc != CURLE_OK  ? (r.too_big ? "reply too large" : curl_easy_strerror(rc))
                 : status != 200 ? "HTTP error (is the watch's service account allowed to get "
                                   "statefulsets and list pods?)"
                                 : "empty reply");
        if (rc == CURLE_OK && status != 200) {
            ctl_info("watch: kubernetes: HTTP %ld: %.200s", status, r.data != NULL ? r.data : "");
        }
        free(r.data);
        return NULL;
    }
    return r.data;
}

/* The namespace the watch runs in (its service account's), or "default". */
static char *
own_namespace(void)
{
    char *ns = first_line(SA_DIR "/namespace");

    if (ns == NULL || ns[0] == '\0') {
        free(ns);
        ns = strdup("default");
    }
    return ns;
}

int
k8s_fetch(const struct k8s_conf *conf, struct k8s_state *st)
{
    char        base[1024], path[2048], err[512];
    char       *ns = NULL, *body, *esc;
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    CURL       *curl;
    int         rc = -1;

    if (conf->api != NULL) {
        snprintf(base, sizeof(base), "%s", conf->api);
    } else if (host != NULL && port != NULL) {
        snprintf(base, sizeof(base),
                 strchr(host, ':') != NULL ? "https://[%s]:%s" : "https://%s:%s", host, port);
    } else {
        ctl_info("watch: kubernetes: no API (KUBERNETES_SERVICE_HOST is not set: give "
                 "--k8s-api URL)");
        return -1;
    }
    if (conf->ns == NULL || conf->ns[0] == '\0') {
        ns = own_namespace();
    }
    snprintf(path, sizeof(path), "/apis/apps/v1/namespaces/%s/statefulsets/%s",
             ns != NULL ? ns : conf->ns, conf->sts);
    body = api_get(conf, base, path);
    if (body == NULL) {
        goto out;
    }
    if (k8s_parse_statefulset(body, st, err, sizeof(err)) != 0) {
        ctl_info("watch: %s", err);
        free(body);
        goto out;
    }
    free(body);
    curl = curl_easy_init();
    esc = curl != NULL ? curl_easy_escape(curl, st->selector, 0) : NULL;
    if (esc == NULL) {
        ctl_info("watch: kubernetes: out of memory");
        curl_easy_cleanup(curl);
        goto out;
    }
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods?labelSelector=%s",
             ns != NULL ? ns : conf->ns, esc);
    curl_free(esc);
    curl_easy_cleanup(curl);
    body = api_get(conf, base, path);
    if (body == NULL) {
        goto out;
    }
    if (k8s_parse_pods(body, conf->sts, st, err, sizeof(err)) != 0) {
        ctl_info("watch: %s", err);
    } else {
        rc = 0;
    }
    free(body);
out:
    free(ns);
    return rc;
}

/* ---- the round, and wait-left ------------------------------------------ */

int
k8s_round(struct ctl_globals *g, const struct k8s_conf *conf, char *last_why)
{
    struct k8s_state *st = calloc(1, sizeof(*st));
    struct admin      a = { .g = g };
    struct k8s_action act;
    char              when[40];
    int               rc;

    if (st == NULL) {
        return EX_FAILED;
    }
    if (k8s_fetch(conf, st) != 0) {
        free(st);
        return EX_FAILED;
    }
    rc = admin_open(&a, false);
    if (rc == EX_OK) {
        rc = admin_load_state(&a);
    }
    if (rc != EX_OK || a.new != NULL || a.have_rec) {
        /* The store is down, or a change is pending: its admin (or the
         * watch's takeover) finishes it first. */
        admin_free(&a);
        free(st);
        return rc;
    }
    k8s_decide(a.old, conf->sts, st, conf->port, &act);
    admin_free(&a);
    free(st);
    if (strcmp(act.why, last_why) != 0) {
        ctl_info("watch: kubernetes: %s", act.why);
        snprintf(last_why, K8S_WHY_MAX, "%s", act.why);
    }
    if (act.what == K8S_NONE) {
        return EX_OK;
    }
    {
        struct change_opts o = { .join = act.what == K8S_JOIN,
                                 .weight = 1,
                                 .rate_mib = DEFAULT_RATE_MIB };

        snprintf(o.id, sizeof(o.id), "%s", act.id);
        snprintf(o.addr, sizeof(o.addr), "%s", act.addr);
        rc = change_run(g, &o);
    }
    ctl_out_event(WATCH_EVENT, "ssSss", "%s\twatch\t%s\t%s\t%s\n",
                  ctl_now_stamp(when, sizeof(when)), act.id,
                  act.what == K8S_JOIN ? "join" : "leave", rc == EX_OK ? "done" : "failed");
    last_why[0] = '\0'; /* say the next decision even if it repeats */
    return rc;
}

/* Is id a member of the store's active membership, and is a change that
 * drops it pending? -1 when the store cannot be read (printed). */
static int
store_view(struct ctl_globals *g, const char *id, bool *member, bool *leaving)
{
    struct admin a = { .g = g };
    int          rc = admin_open(&a, false);

    if (rc == EX_OK) {
        rc = admin_load_state(&a);
    }
    if (rc == EX_OK) {
        *member = a.old != NULL && ring_members_find(a.old, id) >= 0;
        *leaving = *member && a.new != NULL &&ring_members_find(a.new, id) < 0;
    }
    admin_free(&a);
    return rc == EX_OK ? 0 : -1;
}

int
ctl_wait_left(struct ctl_globals *g, int argc, char **argv)
{
    static const struct option opts[] = { { "grace", required_argument, NULL, 'g' },
                                          { "timeout", required_argument, NULL, 't' },
                                          { "help", no_argument, NULL, 'h' },
                                          { NULL, 0, NULL, 0 } };
    static const char usage[] = "ringctl --store STORE wait-left ID [--grace S] [--timeout S]";
    double            grace = 10, timeout = 3600;
    int64_t           t0 = util_now_ms();
    bool              member = true, leaving = false, seen_leaving = false;
    const char       *id;
    char             *end;
    int               c;

    optind = 0;
    /* No "+": the options may follow ID. */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'g':
        case 't':
            errno = 0;
            *(c == 'g' ? &grace : &timeout) = strtod(optarg, &end);
            if (errno != 0 || *end != '\0' || !(grace >= 0) || !(timeout >= 0) || grace > 86400 ||
                timeout > 86400) {
                ctl_error("wait-left: --grace S, --timeout S (0..86400)");
                return EX_USAGE;
            }
            break;
        default:
            return ctl_getopt_default(c, usage, 0);
        }
    }
    if (argc - optind != 1) {
        ctl_error("usage: %s", usage);
        return EX_USAGE;
    }
    id = argv[optind];
    for (;;) {
        double waited = (double)(util_now_ms() - t0) / 1000;

        if (store_view(g, id, &member, &leaving) == 0) {
            if (!member) {
                ctl_info("wait-left: %s is not a member%s", id, seen_leaving ? ": it left" : "");
                return EX_OK;
            }
            if (leaving && !seen_leaving) {
                ctl_info("wait-left: %s is leaving: waiting for the change to end", id);
                seen_leaving = true;
            }
            if (!seen_leaving && waited >= grace) {
                ctl_info("wait-left: no change removes %s after %.0f s: not a scale-in", id, grace);
                return EX_OK;
            }
            /* A leave that was aborted: the member stays; stop waiting. */
            if (seen_leaving && !leaving) {
                ctl_info("wait-left: the change that removed %s ended and it is still a member",
                         id);
                return EX_FAILED;
            }
        }
        if (waited >= timeout) {
            ctl_error("wait-left: %s is still a member after %.0f s", id, timeout);
            return EX_FAILED;
        }
        ctl_sleep_ms(200);
    }
}
