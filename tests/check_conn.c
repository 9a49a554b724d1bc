/* Placeholder: the conn suite is being written. */
#include "tests/suites.h"

Suite *
conn_suite(void)
{
    return suite_create("conn");
}
