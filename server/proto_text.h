/*
 * proto_text: memcached's classic text protocol, parsed in place from a
 * connection's read buffer (no line copies) and answered into its output
 * queue. No sockets here, so tests and the fuzzer drive it directly.
 */
#ifndef SERVER_PROTO_TEXT_H
#define SERVER_PROTO_TEXT_H

struct conn;

enum proto_status {
    PROTO_MORE = 0, /* everything complete was handled; need more input */
    PROTO_PAUSE,    /* output queue is full; write, then call again */
    PROTO_QUIT,     /* `quit`: write what is queued, then close */
    PROTO_CLOSE,    /* close now without a reply (bad framing) */
};

/* The version string `version` and `stats` report. */
#define PROTO_VERSION_STRING "1.6.21-ringcache-" PACKAGE_VERSION

/*
 * Execute every complete command in c's input ([rpos, rend) of rbuf),
 * queueing replies on c. Consumes what it handled. Runs on c's worker.
 */
enum proto_status proto_text_process(struct conn *c);

/*
 * Shutdown: continue only a multi-get that paused on a full output queue
 * (an in-flight reply), never a new command. PROTO_PAUSE while it still
 * has keys to serve, PROTO_MORE when nothing is in flight.
 */
enum proto_status proto_text_drain(struct conn *c);

#endif /* SERVER_PROTO_TEXT_H */
