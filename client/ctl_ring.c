/* being written */
#include "client/ctl.h"
int ctl_locate(struct ctl_globals *g, int argc, char **argv) { (void)g; (void)argc; (void)argv; ctl_error("locate: not yet"); return 2; }
int ctl_ring(struct ctl_globals *g, int argc, char **argv) { (void)g; (void)argc; (void)argv; ctl_error("ring: not yet"); return 2; }
int ctl_plan(struct ctl_globals *g, int argc, char **argv) { (void)g; (void)argc; (void)argv; ctl_error("plan: not yet"); return 2; }
