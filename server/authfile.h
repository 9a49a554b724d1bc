/*
 * authfile: memcached's -Y file of `user:password` lines (docs/security.md,
 * "Client authentication"), parsed once at start into an immutable table
 * that every worker reads without a lock, and the constant-time check of
 * a login against it. No sockets, no server state: the unit tests and
 * the fuzzer drive it directly.
 */
#ifndef SERVER_AUTHFILE_H
#define SERVER_AUTHFILE_H

#include <stdbool.h>
#include <stddef.h>

/* memcached's limits (authfile.c): at most 8 users, and a line is read
 * into 256 bytes, so 255 with its "\n". memcached silently drops users
 * past the 8th and splits a longer line in two; here both refuse the file. */
#define AUTHFILE_USERS_MAX 8
#define AUTHFILE_LINE_MAX  255

/* Room for an error message ("<file>:<line>: <reason>"). */
#define AUTHFILE_ERR_MAX 1400

struct authfile;

/*
 * Parse len bytes of an authfile's text; name is the file's name in
 * messages. Each line is user:password (split at the first ':'), ended by
 * "\n" or "\r\n" (the last one may have neither). Returns the table, or
 * NULL with "<name>:<line>: <reason>" in err: a line that is empty, has no
 * ':', an empty user or password, a space in the user (a login names the
 * user before its first space), a NUL byte or a stray '\r', or is longer
 * than AUTHFILE_LINE_MAX; more than AUTHFILE_USERS_MAX users; no user at
 * all ("<name>: ..."); or no memory. The caller frees the table.
 */
struct authfile *authfile_parse(const char *name, const char *text, size_t len, char *err,
                                size_t errlen);

/* Read and parse the file at path (authfile_parse's errors, and
 * "<path>: <why>" when it cannot be read). */
struct authfile *authfile_load(const char *path, char *err, size_t errlen);

/*
 * Whether user (ulen bytes) and pass (plen bytes) are a user of a and its
 * password. Every entry is compared with peerauth_equal and none is
 * skipped, so the time says neither where a guess differs nor which user
 * matched. Any thread.
 */
bool authfile_check(const struct authfile *a, const char *user, size_t ulen, const char *pass,
                    size_t plen);

/* How many users a holds. */
size_t authfile_count(const struct authfile *a);

void authfile_free(struct authfile *a);

#endif /* SERVER_AUTHFILE_H */
