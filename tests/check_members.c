/* Placeholder: the members suite is being written. */
#include "tests/suites.h"

Suite *
members_suite(void)
{
    return suite_create("members");
}
