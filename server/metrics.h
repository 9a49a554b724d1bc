/*
 * metrics: `--metrics ADDR:PORT`, the node's counters as Prometheus text
 * (format 0.0.4) at GET /metrics, with memcached_exporter's names and
 * labels (so its dashboards work unchanged) plus ringcache_* cluster
 * figures; and GET /ready, 200 or 503 with a one-line reason
 * (server/ready.h), for readiness probes. Served by libevent's evhttp on a
 * thread and event base of its own: a scrape never runs on a worker. Over
 * HTTPS only with --metrics-tls-cert (libevent's OpenSSL bufferevents).
 */
#ifndef SERVER_METRICS_H
#define SERVER_METRICS_H

struct server;
#include <stddef.h>

#include <openssl/ssl.h>

struct authfile;
struct metrics;

/*
 * Bind addr:port and start the metrics thread, which reads srv (its
 * counters, store figures and srv->cluster, which must be set by now) until
 * metrics_free. auth (--metrics-auth, NULL: none) is who may GET /metrics
 * with HTTP basic auth; the caller keeps it until after metrics_free.
 * tls_cert (--metrics-tls-cert; NULL or "": plain HTTP) and tls_key (its
 * key; NULL or "": in the cert file): HTTPS only. NULL after logging why
 * (a certificate or key that does not load, the port cannot be bound, no
 * memory, no thread).
 */
struct metrics *metrics_start(struct server *srv, const char *addr, int port, struct authfile *auth,
                              const char *tls_cert, const char *tls_key);

/* Stop the thread, close the port, free everything; NULL is a no-op. Call
 * it before srv->cluster or srv is freed. */
void metrics_free(struct metrics *m);

/* refresh_certs and SIGHUP (server_refresh_certs): build a new HTTPS
 * context from the --metrics-tls-cert/-key files named at start, into
 * *out (NULL, returning 0, when the port is plain HTTP or m is NULL); -1
 * with the reason, naming the file, in err. Nothing changes until
 * metrics_tls_install puts it in use (connections already open keep the
 * old one). */
int  metrics_tls_build(const struct metrics *m, SSL_CTX **out, char *err, size_t errlen);
void metrics_tls_install(struct metrics *m, SSL_CTX *ctx);

#endif /* SERVER_METRICS_H */
