/*
 * notify: the node's state to its service manager (systemd's Type=notify,
 * through libsystemd's sd_notify): ready, reloading, stopping. Without
 * libsystemd at build time, or without $NOTIFY_SOCKET, each call is a no-op.
 */
#ifndef SERVER_NOTIFY_H
#define SERVER_NOTIFY_H

/* READY=1 with a STATUS= line: the node is serving. Main thread. */
void notify_ready(const char *status);

/* RELOADING=1 (with MONOTONIC_USEC, as systemd 253's notify-reload wants):
 * a SIGHUP reload began; notify_ready follows when it is done. */
void notify_reloading(void);

/* STOPPING=1: the node is shutting down. */
void notify_stopping(void);

#endif /* SERVER_NOTIFY_H */
