/*
 * notify: sd_notify(3) messages for systemd's Type=notify units. Built with
 * libsystemd when configure found it (HAVE_LIBSYSTEMD); otherwise the calls
 * do nothing and a unit must use Type=simple.
 */
#include "config.h"
#include "server/notify.h"

#include <inttypes.h>
#include <stdio.h>
#include <time.h>

#include "server/log.h"

#ifdef HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>

/* Send one message; a failure is logged, never fatal (the node serves). */
static void
send_state(const char *state)
{
    int rc = sd_notify(0, state);

    if (rc < 0) {
        log_msg(LOG_ERR, "sd_notify %s: error %d", state, -rc);
    }
}
#else
static void
send_state(const char *state)
{
    (void)state;
}
#endif

/* See notify.h. */
void
notify_ready(const char *status)
{
    char msg[512];

    snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", status);
    send_state(msg);
}

/* See notify.h. */
void
notify_reloading(void)
{
    struct timespec ts;
    char            msg[96];

    clock_gettime(CLOCK_MONOTONIC, &ts);
    snprintf(msg, sizeof(msg), "RELOADING=1\nMONOTONIC_USEC=%" PRIu64,
             (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u);
    send_state(msg);
}

/* See notify.h. */
void
notify_stopping(void)
{
    send_state("STOPPING=1");
}
