/*
 * client/ctl_out: ringctl's --json result from the commands' TSV lines: the
 * cell types, tables with a header row or named columns, the error and
 * code of a failed command, and text mode printing the lines unchanged.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "client/ctl_out.h"
#include "tests/suites.h"

/* Run ctl_out_finish(rc) with stdout into a temporary file: what it printed
 * (malloc'd). */
static char *
finish_captured(int rc)
{
    FILE  *tmp = tmpfile();
    int    saved;
    long   len;
    char  *buf;
    size_t got;

    ck_assert_ptr_nonnull(tmp);
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    dup2(fileno(tmp), STDOUT_FILENO);
    ck_assert_int_eq(ctl_out_finish(rc), rc);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    len = ftell(tmp);
    buf = calloc(1, (size_t)len + 1);
    rewind(tmp);
    got = fread(buf, 1, (size_t)len, tmp);
    ck_assert_uint_eq(got, (size_t)len);
    fclose(tmp);
    return buf;
}

/* The JSON result of ctl_out_finish(rc), parsed (one line, one object). */
static struct json_object *
finish_json(int rc)
{
    char               *text = finish_captured(rc);
    size_t              len = strlen(text);
    struct json_object *o;

    ck_assert_msg(len > 0 && text[len - 1] == '\n' && strchr(text, '\n') == text + len - 1,
                  "one line: %s", text);
    o = json_tokener_parse(text);
    ck_assert_msg(o != NULL && json_object_is_type(o, json_type_object), "an object: %s", text);
    free(text);
    return o;
}

/* o's field name as compact JSON text ("null" when it is null). */
static const char *
field(struct json_object *o, const char *name)
{
    struct json_object *v;

    ck_assert_msg(json_object_object_get_ex(o, name, &v), "field %s present", name);
    return json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
}

START_TEST(test_field_types)
{
    static const struct {
        const char *types, *line, *name, *json;
    } CASES[] = {
        { "i", "epoch\t7\n", "epoch", "7" },
        { "i", "big\t18446744073709551615\n", "big", "18446744073709551615" },
        { "i", "unknown\t?\n", "unknown", "null" },
        { "f", "share\t0.2500\n", "share", "0.2500" },
        { "f", "dash\t-\n", "dash", "null" },
        { "S", "zone\t-\n", "zone", "null" },
        { "S", "zone2\teu-1\n", "zone2", "\"eu-1\"" },
        { "s", "flags\t-\n", "flags", "\"-\"" },
        { "l", "added\ta,b\n", "added", "[\"a\",\"b\"]" },
        { "l", "removed\t-\n", "removed", "[]" },
        { "b", "yes\tyes\n", "yes", "true" },
        { "b", "no\tno\n", "no", "false" },
        { "a", "word\t12 s ago\n", "word", "\"12 s ago\"" },
        { "a", "num\t-3\n", "num", "-3" },
        { "a", "nan\tnan\n", "nan", "\"nan\"" },
        { "iss", "pending\t5\tcopy\tjoin d\n", "pending", "[5,\"copy\",\"join d\"]" },
        { "s", "alone\n", "alone", "true" },
    };
    struct json_object *o;
    size_t              i;

    ctl_out_set_json(true);
    for (i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        ctl_out_line(stdout, NULL, CASES[i].types, "%s", CASES[i].line);
    }
    ctl_out_line(stdout, NULL, "i", "# a comment\t9\n");
    o = finish_json(0);
    for (i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        ck_assert_msg(strcmp(field(o, CASES[i].name), CASES[i].json) == 0, "%s: %s, want %s",
                      CASES[i].name, field(o, CASES[i].name), CASES[i].json);
    }
    ck_assert(!json_object_object_get_ex(o, "# a comment", NULL));
    ck_assert_str_eq(field(o, "ok"), "true");
    ck_assert(!json_object_object_get_ex(o, "error", NULL));
    json_object_put(o);
}
END_TEST

START_TEST(test_tables)
{
    struct json_object *o;
    struct cells3 {
        const char *cells[3];
        size_t      lens[3];
    } bin = { { "k", "a\tb\nc", "n1" }, { 1, 5, 2 } };

    ctl_out_set_json(true);
    ctl_out_command("status");
    ctl_out_line(stdout, "nodes", "sii", "id\tactive\titems\n");
    ctl_out_line(stdout, "nodes", "sii", "n1\t3\t-\n");
    ctl_out_line(stdout, "nodes", "sii", "n2\t4\t10\n");
    ctl_out_line(stdout, "owners:key,nodes", "sl", "k1\ta,b\n");
    ctl_out_cells("values:key,value,node", "s", 3, bin.cells, bin.lens);
    ctl_out_line(stdout, "=result", "s", "nothing pending\tlast aborted epoch 3\n");
    o = finish_json(0);
    ck_assert_str_eq(field(o, "nodes"), "[{\"id\":\"n1\",\"active\":3,\"items\":null},"
                                        "{\"id\":\"n2\",\"active\":4,\"items\":10}]");
    ck_assert_str_eq(field(o, "owners"), "[{\"key\":\"k1\",\"nodes\":[\"a\",\"b\"]}]");
    ck_assert_str_eq(field(o, "values"),
                     "[{\"key\":\"k\",\"value\":\"a\\tb\\nc\",\"node\":\"n1\"}]");
    ck_assert_str_eq(field(o, "result"), "\"nothing pending last aborted epoch 3\"");
    ck_assert_str_eq(field(o, "command"), "\"status\"");
    json_object_put(o);
}
END_TEST

/* A failed command's error is its last error line, else (status's nodes
 * down print info lines only) its last info line; code is the status. */
START_TEST(test_errors)
{
    static const struct {
        const char *error, *info;
        int         rc;
        const char *want;
    } CASES[] = {
        { "leave: zz is not a member", "progress after it", 2, "\"leave: zz is not a member\"" },
        { NULL, "status: c (127.0.0.1:1): refused", 1, "\"status: c (127.0.0.1:1): refused\"" },
        { NULL, NULL, 3, "\"failed\"" },
    };
    size_t i;

    for (i = 0; i < sizeof(CASES) / sizeof(CASES[0]); i++) {
        struct json_object *o;
        char                code[8];

        ctl_out_set_json(true);
        ctl_out_error(true, "");
        ctl_out_error(false, "");
        if (CASES[i].error != NULL) {
            ctl_out_error(true, CASES[i].error);
        }
        if (CASES[i].info != NULL) {
            ctl_out_error(false, CASES[i].info);
        }
        ctl_out_line(stdout, NULL, "i", "epoch\t2\n");
        o = finish_json(CASES[i].rc);
        snprintf(code, sizeof(code), "%d", CASES[i].rc);
        ck_assert_str_eq(field(o, "ok"), "false");
        ck_assert_str_eq(field(o, "error"), CASES[i].want);
        ck_assert_str_eq(field(o, "code"), code);
        ck_assert_str_eq(field(o, "epoch"), "2");
        json_object_put(o);
    }
}
END_TEST

/* Text mode: every line as given, the cells joined by tabs, no JSON. */
START_TEST(test_text_mode)
{
    const char *cells[2] = { "k", "v\tw" };
    size_t      lens[2] = { 1, 3 };
    char       *out;
    FILE       *tmp = tmpfile();
    int         saved;
    char        buf[256] = { 0 };

    ctl_out_set_json(false);
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    dup2(fileno(tmp), STDOUT_FILENO);
    ctl_out_line(stdout, "nodes", "si", "id\tn\n");
    ctl_out_line(stdout, NULL, "i", "# epoch %d\n", 3);
    ctl_out_cells("values:key,value", "s", 2, cells, lens);
    ctl_out_add("ignored", json_object_new_int(1));
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    rewind(tmp);
    ck_assert_uint_gt(fread(buf, 1, sizeof(buf) - 1, tmp), 0);
    fclose(tmp);
    ck_assert_str_eq(buf, "id\tn\n# epoch 3\nk\tv\tw\n");
    out = finish_captured(1);
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

Suite *
ctl_out_suite(void)
{
    Suite *s = suite_create("ctl_out");
    TCase *tc = tcase_create("ctl_out");

    tcase_add_test(tc, test_field_types);
    tcase_add_test(tc, test_tables);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_text_mode);
    suite_add_tcase(s, tc);
    return s;
}
