/*
 * peer_tls: TLS between the nodes of a cluster, and from ringctl to a
 * node's cluster port (docs/security.md, "TLS between nodes").
 *
 * With --cluster-tls the cluster port speaks mutual TLS: whoever connects
 * (a peer's heartbeat or handoff stream, ringctl) must show a certificate
 * that chains to the cluster's CA (-o ssl_ca_cert), and the node shows its
 * own (-o ssl_chain_cert, ssl_key): the same files as the data port's -Z.
 * A node that dials a peer also checks that the peer's certificate names
 * the address it dialled, as libringcache does, so a host that took over
 * an address cannot pose as the member. The admin token's challenge runs
 * inside the TLS session as before: TLS proves the certificate, the token
 * proves the right to administer.
 *
 * With -Z on a cluster node, the relays to a peer's client port (forward.c)
 * speak TLS too, showing the node's certificate (a peer may require one,
 * ssl_verify_mode=2).
 *
 * Connections are libevent bufferevents; TLS ones are bufferevent_openssl
 * over the same socket, so the code above them does not change. Everything
 * here is immutable once built, shared by the cluster thread, the
 * heartbeat and handoff threads and the workers.
 */
#ifndef SERVER_PEER_TLS_H
#define SERVER_PEER_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

struct bufferevent;
struct event_base;

struct peer_tls {
    SSL_CTX *accept;  /* the cluster port's (client certificate required); NULL: plain port */
    SSL_CTX *connect; /* links to peers: our certificate shown, theirs verified */
    bool     cport;   /* cluster ports speak TLS (--cluster-tls) */
    bool     data;    /* client ports speak TLS (-Z): relays use it */
    uint64_t handshake_errors; /* failed handshakes on the cluster port (atomic) */
};

/* Build the contexts from the node's certificate chain, key and CA files
 * (PEM). cport: the cluster port and the links to it; data: relays to
 * peers' client ports. NULL with a reason naming the file in err. */
struct peer_tls *peer_tls_new(const char *chain, const char *key, const char *ca, bool cport,
                              bool data, char *err, size_t errlen);

void peer_tls_free(struct peer_tls *t);

/* A bufferevent over the accepted socket fd of the cluster port: TLS in the
 * accepting state when t has a cluster port context, else a plain one.
 * BEV_OPT_CLOSE_ON_FREE; NULL when out of memory (fd is then closed). */
struct bufferevent *peer_tls_accept(const struct peer_tls *t, struct event_base *base, int fd);

/* A bufferevent for a connection yet to be made (bufferevent_socket_connect)
 * to host's cluster port (cport true) or client port: TLS in the connecting
 * state when t says that port speaks it, checking that the certificate
 * names host; else a plain one. NULL when out of memory. */
struct bufferevent *peer_tls_dial(const struct peer_tls *t, struct event_base *base,
                                  const char *host, bool cport);

/* The verification error of a TLS bufferevent's failed handshake, or the
 * last OpenSSL error, as text for a log line ("" when there is none). */
const char *peer_tls_error(struct bufferevent *bev, char *buf, size_t len);

#endif
