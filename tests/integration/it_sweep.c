/* SPDX-License-Identifier: MIT */
/*
 * pdbench --sweep: a run per row of chunk size x batch x concurrency, in
 * the order given; a table row each on stdout, progress on stderr, and
 * (--json) a JSON document with one object per row whose figures are
 * there and consistent; --json - puts the JSON on stdout and the table on
 * stderr; a row with a corrupted chunk fails the sweep; flags the rows set
 * are usage errors beside --sweep (--help: it_pdbench).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pd_json.h"
#include "pd_run.h"

#define SWEEP_TIMEOUT_MS 180000u
#define NROWS            8       /* 2 chunks x 2 batches x 2 concurrencies */

static const uint64_t chunks[] = { 65536, 131072 };
static const uint64_t batches[] = { 1, 3 };
static const uint64_t concs[] = { 1, 2 };

/* pdbench --local --sweep-* (the tiny sweep) <extra>. */
static void sweep_run(struct pd_run_result *r, const char *const *extra)
{
	const char *argv[24] = { NULL, "--local", "--sweep-chunks", "64K,128K", "--sweep-batch",
				 "1,3", "--sweep-conc", "1,2", "--sweep-bytes", "512K" };
	char bin[256];
	int k = 10;

	assert_int_equal(pd_run_bin("pdbench", bin, sizeof(bin)), 0);
	argv[0] = bin;
	for (; extra && *extra; extra++)
		argv[k++] = *extra;
	argv[k] = NULL;
	assert_int_equal(pd_run(argv, SWEEP_TIMEOUT_MS, r), 0);
}

static double row_num(const char *json, uint32_t i, const char *key)
{
	char path[64];
	double v = -1;

	(void)snprintf(path, sizeof(path), "rows[%u].%s", i, key);
	if (pd_json_get_num(json, path, &v) != 0)
		fail_msg("no number %s in the sweep's JSON:\n%s", path, json);
	return v;
}

/* Each row: the chunk, batch and concurrency of its place in the product
 * (chunk slowest), figures that are there and agree, every byte checked. */
static void expect_rows(const char *json)
{
	char got[16] = "";

	assert_int_equal(pd_json_valid(json), 0);
	assert_int_equal(pd_json_count(json, "rows"), NROWS);
	for (uint32_t i = 0; i < NROWS; i++) {
		double timed = row_num(json, i, "timed_requests"), b = batches[(i / 2) % 2];

		assert_true(row_num(json, i, "block_size") == (double)chunks[i / 4]);
		assert_true(row_num(json, i, "batch_size") == b);
		assert_true(row_num(json, i, "concurrency") == (double)concs[i % 2]);
		assert_true(row_num(json, i, "warmup") == 2.0 * (double)concs[i % 2]);
		assert_true(row_num(json, i, "requests") == timed + row_num(json, i, "warmup"));
		assert_true(row_num(json, i, "requests_ok") == row_num(json, i, "requests"));
		assert_true(row_num(json, i, "bytes") == timed * b * (double)chunks[i / 4]);
		assert_true(row_num(json, i, "gb_per_s") > 0);
		assert_true(row_num(json, i, "lat_avg_us") > 0);
		assert_true(row_num(json, i, "lat_p50_us") > 0);
		assert_true(row_num(json, i, "lat_p99_us") >= row_num(json, i, "lat_p50_us"));
		assert_true(row_num(json, i, "lat_p999_us") >= row_num(json, i, "lat_p99_us"));
		assert_true(row_num(json, i, "corrupted") == 0 && row_num(json, i, "lost") == 0);
		assert_true(row_num(json, i, "leaked_slots") == 0);
	}
	assert_int_equal(pd_json_get_str(json, "rows[7].verified", got, sizeof(got)), 0);
	assert_string_equal(got, "ok");
}

/* Lines of text that start with a digit: the table's rows. */
static int table_rows(const char *text)
{
	int n = 0;

	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		n += *p >= '0' && *p <= '9';
	return n;
}

static void test_sweep_rows_table_and_json(void **state)
{
	char path[96], *json;
	const char *const extra[] = { "--json", path, NULL };
	struct pd_run_result r;

	(void)state;
	(void)snprintf(path, sizeof(path), "/tmp/it_sweep.%d.json", (int)getpid());
	sweep_run(&r, extra);
	json = pd_run_slurp(path);
	(void)unlink(path);
	if (r.exit_code != 0)
		fail_msg("pdbench --sweep exited %d\n--- stdout ---\n%s--- stderr ---\n%s",
			 r.exit_code, r.out, r.err);
	assert_non_null(json);
	expect_rows(json);
	assert_non_null(strstr(r.out, "Block Size (B)"));
	assert_non_null(strstr(r.out, "P999 Lat. (us)"));
	assert_int_equal(table_rows(r.out), NROWS);
	assert_non_null(strstr(r.err, "sweep 8/8"));    /* progress, on stderr */
	assert_null(strstr(r.out, "sweep 1/8"));
	free(json);
	pd_run_free(&r);
}

/* Python's json module reads it too, as a script would (where there is a
 * python3). */
static void python_reads(const char *json)
{
	static const char prog[] = "import json, sys\n"
		"d = json.load(open(sys.argv[1]))\n"
		"assert [(r['block_size'], r['batch_size'], r['concurrency']) for r in d['rows']] == "
		"[(c, b, q) for c in (65536, 131072) for b in (1, 3) for q in (1, 2)]\n"
		"assert all(r['passed'] and r['gb_per_s'] > 0 for r in d['rows'])\n";
	char path[96];
	const char *argv[] = { "/usr/bin/python3", "-c", prog, path, NULL };
	struct pd_run_result r;
	FILE *f;

	if (access(argv[0], X_OK) != 0)
		return;
	(void)snprintf(path, sizeof(path), "/tmp/it_sweep.%d.py.json", (int)getpid());
	f = fopen(path, "w");
	assert_non_null(f);
	assert_true(fputs(json, f) >= 0);
	assert_int_equal(fclose(f), 0);
	assert_int_equal(pd_run(argv, 30000, &r), 0);
	(void)unlink(path);
	if (r.exit_code != 0)
		fail_msg("python3 does not read the sweep's JSON: %s", r.err);
	pd_run_free(&r);
}

/* --json -: the JSON alone on stdout, the table on stderr. */
static void test_sweep_json_on_stdout(void **state)
{
	const char *const extra[] = { "--json", "-", "--quiet", NULL };
	struct pd_run_result r;

	(void)state;
	sweep_run(&r, extra);
	if (r.exit_code != 0)
		fail_msg("pdbench --sweep exited %d\n--- stderr ---\n%s", r.exit_code, r.err);
	expect_rows(r.out);
	python_reads(r.out);
	assert_non_null(strstr(r.err, "Block Size (B)"));
	assert_int_equal(table_rows(r.err), NROWS);
	assert_null(strstr(r.err, "sweep 1/8")); /* --quiet */
	pd_run_free(&r);
}

/* A row whose bytes differ fails it, and the sweep. */
static void test_sweep_corrupted_row_fails(void **state)
{
	const char *const extra[] = { "--sweep-chunks", "64K", "--sweep-batch", "2",
				      "--sweep-conc", "1", "--requests", "6", "--inject-corruption",
				      "3", "--json", "-", NULL };
	struct pd_run_result r;
	char got[16] = "";
	double v = -1;

	(void)state;
	sweep_run(&r, extra);
	assert_int_equal(r.exit_code, 1);
	assert_int_equal(pd_json_count(r.out, "rows"), 1);
	assert_int_equal(pd_json_get_str(r.out, "rows[0].verified", got, sizeof(got)), 0);
	assert_string_equal(got, "corrupted");
	assert_int_equal(pd_json_get_num(r.out, "rows[0].corrupted", &v), 0);
	assert_true(v == 3); /* requests 0, 3, 6 of 2 warm-up + 6 */
	assert_non_null(strstr(r.err, "first wrong byte at offset"));
	pd_run_free(&r);
}

static void test_sweep_usage_errors(void **state)
{
	static const char *const bad[][3] = {
		{ "--sweep", "--batch", "4" }, { "--sweep", "--slot-size", "64K" },
		{ "--sweep", "--concurrency", "2" }, { "--sweep-chunks", "1000", NULL },
		{ "--sweep-batch", "1,,2", NULL }, { "--sweep-batch", "2048", NULL },
		{ "--sweep-conc", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17", NULL },
		{ "--sweep-conc", "2,", NULL },
	};
	char bin[256];

	(void)state;
	assert_int_equal(pd_run_bin("pdbench", bin, sizeof(bin)), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *argv[] = { bin, "--local", bad[i][0], bad[i][1], bad[i][2], NULL };
		const char *flag = bad[i][2] ? bad[i][1] : bad[i][0];
		struct pd_run_result r;

		assert_int_equal(pd_run(argv, 10000, &r), 0);
		if (r.exit_code != 2 || !strstr(r.err, flag))
			fail_msg("%s %s: exit %d, stderr: %s", bad[i][0], bad[i][1], r.exit_code,
				 r.err);
		pd_run_free(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sweep_usage_errors),
		cmocka_unit_test(test_sweep_rows_table_and_json),
		cmocka_unit_test(test_sweep_json_on_stdout),
		cmocka_unit_test(test_sweep_corrupted_row_fails),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
