/*
 * ctl_view: `ringctl status --watch`, the status report as a live view.
 * On a terminal it takes the alternate screen and redraws the report in
 * place every interval (cursor home, each line cut to the width and
 * cleared to its end, the rest of the screen cleared), reads q without
 * Enter, and gives the terminal back as it found it on q, Ctrl-C or
 * SIGTERM. Not on a terminal, it prints one report after another.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "client/ctl.h"
#include "client/ctl_util.h"

static volatile sig_atomic_t view_stop;

static void
on_stop(int sig)
{
    (void)sig;
    view_stop = 1;
}

/* SIGWINCH only has to wake the wait; the next frame reads the size. */
static void
on_winch(int sig)
{
    (void)sig;
}

/* The terminal's size, 80x24 when it does not say. */
static void
term_size(int *cols, int *rows)
{
    struct winsize ws;

    *cols = 80;
    *rows = 24;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
        *cols = ws.ws_col;
        *rows = ws.ws_row;
    }
}

/* Draw frame [buf, buf+len) over the previous one: line by line from the
 * top, each cut to the width (a wrapped line would scroll the screen) and
 * cleared to its end, then the screen below cleared. */
static void
draw_in_place(const char *buf, size_t len)
{
    const char *p = buf, *end = buf + len;
    int         cols, rows, row = 0;

    term_size(&cols, &rows);
    fputs("\033[H", stdout);
    while (p < end && row < rows) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t      n = (size_t)((nl != NULL ? nl : end) - p);

        if (row > 0) {
            fputs("\r\n", stdout);
        }
        fwrite(p, 1, n < (size_t)cols ? n : (size_t)cols, stdout);
        fputs("\033[K", stdout);
        row++;
        p = nl != NULL ? nl + 1 : end;
    }
    fputs("\033[J", stdout);
    fflush(stdout);
}

/* Wait up to ms for q on the keyboard (keys: stdin is a terminal in
 * non-canonical mode). True when the view should end. */
static bool
wait_for_quit(int ms, bool keys)
{
    struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
    char          c;

    if (poll(&pfd, keys ? 1 : 0, ms) > 0 && (pfd.revents & POLLIN)) {
        ssize_t n = read(STDIN_FILENO, &c, 1);

        if (n == 0 || (n == 1 && (c == 'q' || c == 'Q'))) {
            return true;
        }
    }
    return view_stop != 0;
}

int
ctl_status_watch(struct ctl_globals *g, double interval)
{
    struct ctl_globals frame_g = *g;
    struct sigaction   sa, old_int, old_term, old_winch;
    struct termios     saved, raw;
    bool               tty = isatty(STDOUT_FILENO), keys = false;
    int                ms = (int)(interval * 1000);

    frame_g.human = true;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop; /* no SA_RESTART: the wait returns at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sa.sa_handler = on_winch;
    sigaction(SIGWINCH, &sa, &old_winch);
    if (tty && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0) {
        raw = saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 0;
        raw.c_cc[VTIME] = 0;
        keys = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    if (tty) {
        fputs("\033[?1049h\033[?25l", stdout); /* alternate screen, no cursor */
    }
    while (view_stop == 0) {
        char     *buf = NULL, when[32];
        size_t    len = 0;
        FILE     *m = open_memstream(&buf, &len);
        time_t    now = time(NULL);
        struct tm tm;

        if (m == NULL) {
            break;
        }
        gmtime_r(&now, &tm);
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
        fprintf(m, "ringctl status --watch: every %gs, %s UTC%s\n\n", interval, when,
                keys ? "  (q quits)" : "");
        /* A node that does not answer, or the store, is reported in the
         * frame, where it is seen, not under it. */
        ctl_error_to(m);
        ctl_status_print(&frame_g, m);
        ctl_error_to(NULL);
        fclose(m);
        if (view_stop != 0) {
            /* A signal cut the report short (its reads were interrupted):
             * end without showing half of it. */
            free(buf);
            break;
        }
        if (tty) {
            draw_in_place(buf, len);
        } else {
            fwrite(buf, 1, len, stdout);
            fputc('\n', stdout);
            fflush(stdout);
        }
        free(buf);
        if (wait_for_quit(ms, keys)) {
            break;
        }
    }
    if (tty) {
        fputs("\033[?25h\033[?1049l", stdout);
        fflush(stdout);
    }
    if (keys) {
        tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGWINCH, &old_winch, NULL);
    return EX_OK;
}
