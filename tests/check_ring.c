/* Placeholder: the ring suite is being written. */
#include "tests/suites.h"

Suite *
ring_suite(void)
{
    return suite_create("ring");
}
