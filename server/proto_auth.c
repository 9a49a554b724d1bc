/*
 * proto_auth: the -Y login (server/proto_auth.h), with memcached 1.6.45's
 * replies (its proto_text.c try_read_command_asciiauth). Where 1.6.18
 * differs, the choice is in docs/security.md, "Client authentication".
 * A login's line stays in the read buffer until its data block is in too,
 * so nothing is kept between calls but the buffer itself.
 */
#include "config.h"
#include "server/proto_auth.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "server/authfile.h"
#include "server/conn.h"
#include "server/log.h"
#include "server/proto_peer.h"
#include "server/proto_util.h"
#include "server/stats.h"
#include "server/thread.h"

/* As memcached: past this many bytes without a '\n', hang up. */
#define AUTH_LINE_MAX 2048
/* Tokens looked at: `set` and its four arguments, or `rc_peer` and its
 * two (one more tells a line with too many). */
#define AUTH_TOKENS 5

/* Queue a literal reply (a login is answered even with noreply, as in
 * memcached). */
#define AUTH_REPLY(c, lit) conn_out_add((c), lit "\r\n", sizeof(lit "\r\n") - 1)

/* Split [p, end) at spaces into at most max tokens; the count. */
static int
auth_tokenize(const char *p, const char *end, struct token *t, int max)
{
    int n = 0;

    while (n < max && proto_next_key(&p, end, &t[n])) {
        n++;
    }
    return n;
}

/* Check a login against the users in use: the last SIGHUP's, else the
 * start's. The lock is held through the check so that proto_auth_reload
 * cannot free the table under it; logins are rare enough for one lock. */
static bool
auth_check(struct server *srv, const char *user, size_t ulen, const char *pass, size_t plen)
{
    bool ok;

    pthread_mutex_lock(&srv->auth_lock);
    ok = authfile_check(srv->auth_reloaded != NULL ? srv->auth_reloaded : srv->auth, user, ulen,
                        pass, plen);
    pthread_mutex_unlock(&srv->auth_lock);
    return ok;
}

/*
 * The data block of a login, n bytes and its "\r\n" at p: `<user>
 * <password>`, split at the first space (the password may hold more).
 * PROTO_MORE, or PROTO_QUIT once the connection has failed too often.
 */
static enum proto_status
auth_login(struct conn *c, const char *p, size_t n)
{
    struct thread_stats *ts = &c->w->stats;
    const char          *sp;

    if (p[n] != '\r' || p[n + 1] != '\n') {
        AUTH_REPLY(c, "CLIENT_ERROR bad command line termination");
        return PROTO_MORE;
    }
    sp = memchr(p, ' ', n);
    if (sp == NULL) {
        AUTH_REPLY(c, "CLIENT_ERROR bad authentication token format");
        return PROTO_MORE;
    }
    STATS_ADD(ts, auth_cmds, 1);
    if (auth_check(c->w->srv, p, (size_t)(sp - p), sp + 1, (size_t)(p + n - sp - 1))) {
        c->authenticated = true;
        AUTH_REPLY(c, "STORED");
        return PROTO_MORE;
    }
    STATS_ADD(ts, auth_errors, 1);
    AUTH_REPLY(c, "CLIENT_ERROR authentication failure");
    if (++c->auth_failures < PROTO_AUTH_FAILURES_MAX) {
        return PROTO_MORE;
    }
    /* A password guesser: it must reconnect for every few guesses. */
    STATS_ADD(ts, auth_kicks, 1);
    log_msg(LOG_INFO, "connection %d: %d failed logins, closing", c->fd, PROTO_AUTH_FAILURES_MAX);
    return PROTO_QUIT;
}

/* Consume an unauthenticated connection's input; see proto_auth.h. */
enum proto_status
proto_auth(struct conn *c)
{
    while (!c->authenticated) {
        struct token      t[AUTH_TOKENS];
        const char       *start = c->rbuf + c->rpos, *nl, *end;
        size_t            avail = c->rend - c->rpos, llen;
        uint32_t          size;
        int               ntok;
        enum proto_status st;

        if (c->out_bytes >= c->out_cap) {
            return PROTO_PAUSE;
        }
        nl = avail > 0 ? memchr(start, '\n', avail) : NULL;
        if (nl == NULL) {
            return avail > AUTH_LINE_MAX ? PROTO_CLOSE : PROTO_MORE;
        }
        llen = (size_t)(nl + 1 - start);
        end = nl > start && nl[-1] == '\r' ? nl - 1 : nl;
        ntok = auth_tokenize(start, end, t, AUTH_TOKENS);
        if (ntok > 0 && TOK_IS(&t[0], "rc_peer") && c->w->srv->cluster != NULL) {
            /* A peer proves the cluster token instead (forward.c sends
             * it first): that is its login. */
            c->rpos += (uint32_t)llen;
            proto_peer_rc_peer(c, t, ntok);
            c->authenticated = c->peer;
            continue;
        }
        /* As memcached 1.6.45, the line must start with "set": no
         * leading space. Its key, flags and exptime are not looked at. */
        if (ntok < 5 || t[0].p != start || !TOK_IS(&t[0], "set") || !proto_tok_u32(&t[4], &size)) {
            c->rpos += (uint32_t)llen;
            AUTH_REPLY(c, "CLIENT_ERROR unauthenticated");
            continue;
        }
        if (size > PROTO_AUTH_TOKEN_MAX) {
            /* Its block is not skipped: memcached reads on from the
             * next line. */
            c->rpos += (uint32_t)llen;
            AUTH_REPLY(c, "CLIENT_ERROR auth token too long");
            continue;
        }
        if (avail - llen < (size_t)size + 2) {
            return PROTO_MORE;
        }
        c->rpos += (uint32_t)(llen + size + 2);
        st = auth_login(c, start + llen, size);
        if (st != PROTO_MORE) {
            return st;
        }
    }
    return PROTO_MORE;
}

/* Re-read the -Y file; see proto_auth.h. */
void
proto_auth_reload(struct server *srv)
{
    char             err[AUTHFILE_ERR_MAX];
    struct authfile *a, *old;

    if (srv->auth == NULL) {
        return;
    }
    /* Parsed whole before the swap: a bad file changes nothing. */
    a = authfile_load(srv->settings.auth_file, err, sizeof(err));
    if (a == NULL) {
        log_msg(LOG_ERR, "SIGHUP: -Y %s, keeping the old users", err);
        return;
    }
    pthread_mutex_lock(&srv->auth_lock);
    old = srv->auth_reloaded;
    srv->auth_reloaded = a;
    pthread_mutex_unlock(&srv->auth_lock);
    /* No worker holds old now: each takes the lock for its check. */
    authfile_free(old);
    log_msg(LOG_INFO, "SIGHUP: -Y %s reloaded, %zu users", srv->settings.auth_file,
            authfile_count(a));
}
