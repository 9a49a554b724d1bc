/* Placeholder: the client suite is being written. */
#include "tests/suites.h"

Suite *
client_suite(void)
{
    return suite_create("client");
}
