/* SPDX-License-Identifier: MIT */
/* The tests' JSON reader (tests/support/pd_json.h): validity, paths, types, errors. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pd_json.h"

static const char doc[] =
	"{\"name\": \"decode0\", \"pid\": 42, \"up\": true, \"down\": false, \"gone\": null,\n"
	" \"pools\": {\"recv\": {\"slots\": 24, \"free\": 16}, \"send\": {}},\n"
	" \"rows\": [{\"state\": \"ready\", \"n\": -1.5e3}, {\"state\": \"w\\u00e4it\\n\"}],\n"
	" \"empty\": [], \"nested\": [[1, 2], [3]], \"big\": 18446744073709551615,\n"
	" \"esc\": \"a\\\"b\\\\c\\u20ac\\ud83d\\ude00\"}";

static void test_invalid_json(void **state)
{
	static const char *const bad[] = {
		"", "   ", "{", "[1, 2", "{\"a\": 1,}", "[1,]", "{\"a\" 1}", "{a: 1}",
		"{\"a\": 1} x", "{} {}", "01", "1.", ".5", "-", "+1", "1e", "tru", "nul",
		"\"unterminated", "\"bad \\x escape\"", "\"tab\tinside\"", "'single'",
		"\"\xff\"", "\"\xc0\xaf\"",        /* invalid UTF-8, overlong */
		"\"\\ud800\"",                     /* a lone surrogate */
		"{\"a\": 1, \"a\": 2}",            /* a duplicated key */
		"NaN", "Infinity", "[1] // comment",
	};
	double v = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (pd_json_valid(bad[i]) != -EINVAL)
			fail_msg("accepted as JSON: '%s'", bad[i]);
		assert_int_equal(pd_json_get_num(bad[i], "", &v), -EINVAL);
		assert_int_equal(pd_json_count(bad[i], ""), -EINVAL);
	}
	assert_int_equal(pd_json_valid(NULL), -EINVAL);
	assert_int_equal(pd_json_get_bool(NULL, "a"), -EINVAL);
}

static void test_bad_paths(void **state)
{
	/* Each would reach a number if read leniently. */
	static const char *const bad[] = { ".pid", "pid.", "pools..recv.slots", "rows.[0].n",
					   "rows[0]n", "rows[0].n.", "rows[", "rows[]", "rows[x].n",
					   "rows[0", "rows[0).n", "rows[-1].n", "rows[ 0].n",
					   "rows[999999999999]" };
	double v = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (pd_json_get_num(doc, bad[i], &v) != -EINVAL)
			fail_msg("path '%s' not refused", bad[i]);
	assert_true(v == 0);
	assert_int_equal(pd_json_get_num(doc, NULL, &v), -EINVAL);
}

static void test_missing(void **state)
{
	char buf[16];
	double v = 0;

	(void)state;
	assert_int_equal(pd_json_get_num(doc, "nope", &v), -ENOENT);
	assert_int_equal(pd_json_get_num(doc, "pools.recv.hwm", &v), -ENOENT);
	assert_int_equal(pd_json_get_num(doc, "pools.send.slots", &v), -ENOENT);
	assert_int_equal(pd_json_get_str(doc, "rows[2].state", buf, sizeof(buf)), -ENOENT);
	assert_int_equal(pd_json_count(doc, "empty[0]"), -ENOENT);
	/* A key into an array, an index into an object or a scalar. */
	assert_int_equal(pd_json_get_num(doc, "rows.state", &v), -ENOENT);
	assert_int_equal(pd_json_get_num(doc, "pools[0]", &v), -ENOENT);
	assert_int_equal(pd_json_get_num(doc, "pid.x", &v), -ENOENT);
	assert_int_equal(pd_json_get_num(doc, "pid[0]", &v), -ENOENT);
	/* Case matters; a key is matched whole. */
	assert_int_equal(pd_json_get_num(doc, "PID", &v), -ENOENT);
	assert_int_equal(pd_json_get_num(doc, "pi", &v), -ENOENT);
}

static void test_wrong_types(void **state)
{
	char buf[16];
	double v = 7;

	(void)state;
	assert_int_equal(pd_json_get_num(doc, "name", &v), -EINVAL);
	assert_int_equal(pd_json_get_num(doc, "up", &v), -EINVAL);
	assert_int_equal(pd_json_get_num(doc, "gone", &v), -EINVAL);
	assert_int_equal(pd_json_get_num(doc, "pools", &v), -EINVAL);
	assert_true(v == 7); /* untouched on failure */
	assert_int_equal(pd_json_get_str(doc, "pid", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(pd_json_get_str(doc, "gone", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(pd_json_get_bool(doc, "pid"), -EINVAL);
	assert_int_equal(pd_json_get_bool(doc, "gone"), -EINVAL);
	assert_int_equal(pd_json_get_bool(doc, "name"), -EINVAL);
	assert_int_equal(pd_json_count(doc, "name"), -EINVAL);
	assert_int_equal(pd_json_count(doc, "pid"), -EINVAL);
}

static void test_values_by_path(void **state)
{
	char buf[32];
	double v = 0;

	(void)state;
	assert_int_equal(pd_json_valid(doc), 0);
	assert_int_equal(pd_json_get_str(doc, "name", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "decode0");
	assert_int_equal(pd_json_get_num(doc, "pid", &v), 0);
	assert_true(v == 42);
	assert_int_equal(pd_json_get_num(doc, "pid", NULL), 0);
	assert_int_equal(pd_json_get_bool(doc, "up"), 1);
	assert_int_equal(pd_json_get_bool(doc, "down"), 0);
	assert_int_equal(pd_json_get_num(doc, "pools.recv.free", &v), 0);
	assert_true(v == 16);
	assert_int_equal(pd_json_get_num(doc, "rows[0].n", &v), 0);
	assert_true(v == -1500);
	assert_int_equal(pd_json_get_str(doc, "rows[1].state", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "w\xc3\xa4it\n");
	assert_int_equal(pd_json_get_num(doc, "nested[1][0]", &v), 0);
	assert_true(v == 3);
	assert_int_equal(pd_json_get_num(doc, "big", &v), 0); /* beyond int64: a double */
	assert_true(v == 18446744073709551615.0);
	assert_int_equal(pd_json_get_str(doc, "esc", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "a\"b\\c\xe2\x82\xac\xf0\x9f\x98\x80");
}

static void test_arrays_and_top_level(void **state)
{
	static const char arr[] = " [ {\"name\": \"a\"}, 2, {\"name\": \"c\"} ] \n";
	char buf[8];
	double v = 0;

	(void)state;
	assert_int_equal(pd_json_count(doc, "rows"), 2);
	assert_int_equal(pd_json_count(doc, "empty"), 0);
	assert_int_equal(pd_json_count(doc, "nested[0]"), 2);
	assert_int_equal(pd_json_count(doc, "pools"), 2);
	assert_int_equal(pd_json_count(doc, "pools.send"), 0);
	assert_int_equal(pd_json_count(doc, ""), 11);
	assert_int_equal(pd_json_count(arr, ""), 3);
	assert_int_equal(pd_json_get_str(arr, "[2].name", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "c");
	assert_int_equal(pd_json_get_num(arr, "[1]", &v), 0);
	assert_true(v == 2);
	assert_int_equal(pd_json_get_num(arr, "[3]", &v), -ENOENT);
	assert_int_equal(pd_json_get_num("  -0.25e1 ", "", &v), 0); /* a scalar at the top */
	assert_true(v == -2.5);
	assert_int_equal(pd_json_get_bool("true", ""), 1);
	assert_int_equal(pd_json_valid("null"), 0);
	assert_int_equal(pd_json_valid("\"\\u0000\""), 0);
}

static void test_string_buffer(void **state)
{
	char buf[8] = "keep";

	(void)state;
	assert_int_equal(pd_json_get_str(doc, "name", buf, 7), -ENOSPC); /* 7 bytes + NUL */
	assert_int_equal(pd_json_get_str(doc, "name", NULL, 0), -ENOSPC);
	assert_int_equal(pd_json_get_str(doc, "name", buf, 8), 0);
	assert_string_equal(buf, "decode0");
	assert_int_equal(pd_json_get_str("{\"e\": \"\"}", "e", buf, 1), 0);
	assert_string_equal(buf, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_invalid_json),
		cmocka_unit_test(test_bad_paths),
		cmocka_unit_test(test_missing),
		cmocka_unit_test(test_wrong_types),
		cmocka_unit_test(test_values_by_path),
		cmocka_unit_test(test_arrays_and_top_level),
		cmocka_unit_test(test_string_buffer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
