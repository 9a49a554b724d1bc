/*
 * ctl_lease: the admin's liveness, and roles (etcd). While ringctl runs a
 * transition (join, leave, remove --failed, resume) it holds the record
 * admin/HOST-PID, which a thread of its own renews every second: in etcd
 * on a 5 s lease; in a directory store (no leases, one host) by writing
 * its time ("written_ms T") into it, expired 5 s after. When the
 * admin ends, the record is deleted (etcd) or written expired (a
 * directory; the next admin to start deletes the expired ones). A pending
 * transition with no live admin/ record has lost its admin: `ringctl
 * watch` resumes it at once, within about 6-7 s of the admin's death. A
 * live admin, however slow its transition, keeps renewing. With no timed
 * record at all (an admin of an older version), the watch judges by the
 * transition record's `written` time and --transition-timeout.
 *
 * A role (role/watch) is an election: the first to create role/NAME on
 * its lease holds it while the lease lives (5 s, renewed every second);
 * the others try every second and take it once the holder's lease ran
 * out. Only the holder of role/watch acts, so several `ringctl watch` may
 * run for availability and one decides. Safety does not rest on it: every
 * transition is a store CAS, so a holder that lost its lease without yet
 * knowing starts at most a transition the other's CAS then refuses.
 */
#ifndef CLIENT_CTL_LEASE_H
#define CLIENT_CTL_LEASE_H

#include <stdbool.h>

struct admin_lease;
struct mstore;

/* Hold admin/HOST-PID for spec's store (value: what, e.g. the op). NULL
 * when the store has no leases or the lease could not be taken (then
 * printed; the transition goes on, watched by time as with a directory). */
struct admin_lease *admin_lease_start(const char *spec, const char *what);
/* Stop renewing; delete the record (etcd) or write it expired (a
 * directory). NULL is fine. */
void admin_lease_stop(struct admin_lease *l);

/* Does some admin hold a lease in store s (etcd), or a record renewed
 * within the TTL (a directory)? *known is false when no admin record says
 * (or the store could not be read: the caller falls back to time). */
bool admin_lease_held(struct mstore *s, bool *known);

/* Stand for role NAME in spec's store. NULL when the store has no leases
 * (a directory: one host, the role is always held). */
struct ctl_role *ctl_role_start(const char *spec, const char *role);
/* Held now? holder: who holds it as last read ("HOST-PID", "" unknown).
 * NULL r: held. */
bool ctl_role_held(struct ctl_role *r, char *holder, size_t len);
/* Stop standing; give the role up (delete the record) if held. */
void ctl_role_stop(struct ctl_role *r);

#endif
