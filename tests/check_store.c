/* Placeholder: the store suite is being written. */
#include "tests/suites.h"

Suite *
store_suite(void)
{
    return suite_create("store");
}
