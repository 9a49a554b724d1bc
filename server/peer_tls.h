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
 * over the same socket, so the code above them does not change. The
 * struct is shared by the cluster thread, the heartbeat and handoff threads
 * and the workers; only the two contexts change after start
 * (peer_tls_refresh, from refresh_certs and SIGHUP), swapped under lock.
 * Readers hold the lock just long enough for SSL_new, and each SSL keeps
 * its own reference to its context, so a swapped-out one lives on until
 * the last connection made with it is freed.
 */
#ifndef SERVER_PEER_TLS_H
#define SERVER_PEER_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>
#include <stdint.h>

#include <openssl/ssl.h>

struct bufferevent;
struct event_base;

struct peer_tls {
    pthread_mutex_t lock;    /* guards accept and connect (a leaf) */
    SSL_CTX        *accept;  /* the cluster port's (client certificate required); NULL: plain port */
    SSL_CTX        *connect; /* links to peers: our certificate shown, theirs verified */
    bool            cport;   /* cluster ports speak TLS (--cluster-tls) */
    bool            data;    /* client ports speak TLS (-Z): relays use it */
    uint64_t        handshake_errors; /* failed handshakes on the cluster port (atomic) */
    char           *chain, *key, *ca; /* the files, read again by a refresh */
};

/* Build the contexts from the node's certificate chain, key and CA files
 * (PEM). cport: the cluster port and the links to it; data: relays to
 * peers' client ports. NULL with a reason naming the file in err. */
struct peer_tls *peer_tls_new(const char *chain, const char *key, const char *ca, bool cport,
                              bool data, char *err, size_t errlen);

void peer_tls_free(struct peer_tls *t);

/* New contexts from the files as they are now (peer_tls_new's checks and
 * wording), to install or discard: 0, or -1 with the reason in err and
 * nothing built. *accept stays NULL when the cluster port is plain. */
int  peer_tls_build(struct peer_tls *t, SSL_CTX **accept, SSL_CTX **connect, char *err,
                    size_t errlen);
/* Swap in what peer_tls_build made; the old contexts are released. */
void peer_tls_install(struct peer_tls *t, SSL_CTX *accept, SSL_CTX *connect);
/* Discard what peer_tls_build made (another refresh failed). */
void peer_tls_discard(SSL_CTX *accept, SSL_CTX *connect);
/* Build both, and only when both were built, install them: 0, or -1 with
 * the reason in err and the old contexts still in use. */
int  peer_tls_refresh(struct peer_tls *t, char *err, size_t errlen);

/* A bufferevent over the accepted socket fd of the cluster port: TLS in the
 * accepting state when t has a cluster port context, else a plain one.
 * BEV_OPT_CLOSE_ON_FREE; NULL when out of memory (fd is then closed). */
struct bufferevent *peer_tls_accept(struct peer_tls *t, struct event_base *base, int fd);

/* A bufferevent for a connection yet to be made (bufferevent_socket_connect)
 * to host's cluster port (cport true) or client port: TLS in the connecting
 * state when t says that port speaks it, checking that the certificate
 * names host; else a plain one. NULL when out of memory. */
struct bufferevent *peer_tls_dial(struct peer_tls *t, struct event_base *base,
                                  const char *host, bool cport);

/* The verification error of a TLS bufferevent's failed handshake, or the
 * last OpenSSL error, as text for a log line ("" when there is none). */
const char *peer_tls_error(struct bufferevent *bev, char *buf, size_t len);

#endif
