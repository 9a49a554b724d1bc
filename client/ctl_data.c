/* being written */
#include "client/ctl.h"
int ctl_get(struct ctl_globals *g, int argc, char **argv) { (void)g; (void)argc; (void)argv; ctl_error("get: not yet"); return 2; }
int ctl_set(struct ctl_globals *g, int argc, char **argv) { (void)g; (void)argc; (void)argv; ctl_error("set: not yet"); return 2; }
int ctl_delete(struct ctl_globals *g, int argc, char **argv) { (void)g; (void)argc; (void)argv; ctl_error("delete: not yet"); return 2; }
int ctl_mget(struct ctl_globals *g, int argc, char **argv) { (void)g; (void)argc; (void)argv; ctl_error("mget: not yet"); return 2; }
int ctl_stats(struct ctl_globals *g, int argc, char **argv) { (void)g; (void)argc; (void)argv; ctl_error("stats: not yet"); return 2; }
