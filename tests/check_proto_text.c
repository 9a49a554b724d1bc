/* Placeholder: the proto_text suite is being written. */
#include "tests/suites.h"

Suite *
proto_text_suite(void)
{
    return suite_create("proto_text");
}
