/* being written */
typedef int rc_placeholder_ringcache;
