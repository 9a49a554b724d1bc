/*
 * store_open: a handle made from a membership store's active membership
 * (ringcache_new_store), the same store ringctl --store and ringcached
 * --store name. The store is read once, at creation; later epochs reach
 * the handle from its nodes (the poll and MOVED), as for a file.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "client/rc_internal.h"
#include "client/ringcache.h"
#include "lib/mstore.h"

#define ACTIVE_RECORD "active.members" /* client/ctl_transition.h's REC_ACTIVE */

/* A directory store must exist already: mstore_open would create it, and
 * a client that names a wrong path should hear so, not read an empty
 * store. */
static int
check_dir_store(const char *spec, char *err, size_t errlen)
{
    struct stat st;
    const char *dir = spec;

    if (strstr(spec, "://") != NULL) {
        return 0;
    }
    if (strncmp(dir, "dir:", 4) == 0) {
        dir += 4;
    }
    if (stat(dir, &st) != 0) {
        if (err != NULL && errlen > 0) {
            snprintf(err, errlen, "store %s: %s", dir, strerror(errno));
        }
        return RINGCACHE_EMEMBERS;
    }
    if (!S_ISDIR(st.st_mode)) {
        rc_set_err(err, errlen, "store %s: not a directory", dir);
        return RINGCACHE_EMEMBERS;
    }
    return 0;
}

int
ringcache_new_store(struct ringcache **out, const char *spec, const struct ringcache_options *opt,
                    char *err, size_t errlen)
{
    struct mstore_record rec = { 0 };
    struct mstore       *st;
    char                 why[512] = "";
    int                  rc;

    if (out == NULL || spec == NULL || spec[0] == '\0') {
        return RINGCACHE_EINVAL;
    }
    rc = check_dir_store(spec, err, errlen);
    if (rc != 0) {
        return rc;
    }
    st = mstore_open(spec, why, sizeof(why));
    if (st == NULL) {
        rc_set_err(err, errlen, "%s", why);
        return RINGCACHE_EMEMBERS;
    }
    rc = mstore_get(st, ACTIVE_RECORD, &rec, why, sizeof(why));
    mstore_close(st);
    switch (rc) {
    case MSTORE_OK:
        break;
    case MSTORE_ENOENT:
        rc_set_err(err, errlen, "store %s: no active membership (ringctl init publishes one)",
                   spec);
        return RINGCACHE_EMEMBERS;
    case MSTORE_ENOMEM:
        return RINGCACHE_ENOMEM;
    case MSTORE_EIO:
        rc_set_err(err, errlen, "%s", why[0] != '\0' ? why : "the store did not answer");
        return RINGCACHE_EIO;
    default:
        rc_set_err(err, errlen, "%s", why[0] != '\0' ? why : mstore_strerror(rc));
        return RINGCACHE_EMEMBERS;
    }
    /* rec.where names the record ("DIR/active.members" or the URL), so a
     * bad record is reported at its line there. */
    rc = ringcache_new_members_text(out, rec.text, rec.len, rec.where, opt, err, errlen);
    mstore_record_clear(&rec);
    return rc;
}
