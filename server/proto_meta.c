/*
 * proto_meta: see proto_meta.h.
 */
#include "config.h"
#include "server/proto_meta.h"

#include "server/conn.h"

void
proto_meta(struct conn *c, const char *line, const char *end)
{
    (void)line;
    (void)end;
    conn_out_add(c, "ERROR\r\n", 7);
}
