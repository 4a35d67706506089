/* SPDX-License-Identifier: MIT */
/* pdbench end to end: it starts its own brokers (2 prefill, 1 decode, TP 2),
 * drives requests with and without aborts, and its JSON says nothing was
 * lost, corrupted or leaked; a bad flag is a usage error naming the flag. */
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

#define BENCH_TIMEOUT_MS 180000u
#define SLOT             65536.0

struct bench {
	struct pd_run_result r;
	char path[128];
	char *json;                 /* the --json file's text (malloc'ed), or NULL */
};

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		text = calloc(1, (size_t)n + 1);
		if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
			free(text);
			text = NULL;
		}
	}
	(void)fclose(f);
	return text;
}

/* pdbench --local ... --json FILE --quiet <extra>. */
static void bench_run(struct bench *b, const char *const *extra)
{
	static int n;
	const char *argv[48] = { NULL, "--local", "--prefill", "2", "--decode", "1", "--tp", "2",
				 "--slot-size", "64K", "--json", b->path, "--quiet" };
	char bin[256];
	int k = 13;

	memset(b, 0, sizeof(*b));
	(void)snprintf(b->path, sizeof(b->path), "/tmp/it_pdbench.%d.%d.json", (int)getpid(), n++);
	argv[11] = b->path;
	assert_int_equal(pd_run_bin("pdbench", bin, sizeof(bin)), 0);
	argv[0] = bin;
	for (; extra && *extra && k < 46; extra++)
		argv[k++] = *extra;
	argv[k] = NULL;
	assert_int_equal(pd_run(argv, BENCH_TIMEOUT_MS, &b->r), 0);
	b->json = slurp(b->path);
	(void)unlink(b->path);
}

static void bench_free(struct bench *b)
{
	pd_run_free(&b->r);
	free(b->json);
	b->json = NULL;
}

/* On a failed expectation, what pdbench printed says why. */
static void bench_expect_exit(const struct bench *b, int code)
{
	if (b->r.exit_code != code)
		fail_msg("pdbench exited %d (expected %d)\n--- stdout ---\n%s--- stderr ---\n%s",
			 b->r.exit_code, code, b->r.out ? b->r.out : "", b->r.err ? b->r.err : "");
}

static double num(const struct bench *b, const char *path)
{
	double v = -1;

	if (pd_json_get_num(b->json, path, &v) != 0)
		fail_msg("no number \"%s\" in pdbench's JSON:\n%s", path, b->json);
	return v;
}

static void expect_clean(const struct bench *b)
{
	assert_non_null(b->json);
	assert_int_equal(pd_json_valid(b->json), 0);
	assert_true(num(b, "lost") == 0);
	assert_true(num(b, "corrupted") == 0);
	assert_true(num(b, "leaked_slots") == 0);
	assert_true(num(b, "requests_failed") == 0);
	assert_true(num(b, "requests_ok") + num(b, "requests_cancelled") == num(b, "requests"));
}

/* A fifth of the requests cancelled by one rank at a random stage. */
static void test_aborts_lose_nothing(void **state)
{
	const char *const extra[] = { "--requests", "40", "--concurrency", "6", "--abort-rate",
				      "0.2", NULL };
	struct bench b;

	(void)state;
	bench_run(&b, extra);
	bench_expect_exit(&b, 0);
	expect_clean(&b);
	assert_true(num(&b, "requests") == 40);
	assert_true(num(&b, "requests_cancelled") > 0);
	assert_true(num(&b, "tp") == 2 && num(&b, "prefill") == 2 && num(&b, "decode") == 1);
	bench_free(&b);
}

/* No aborts: every request ok, every byte of every chunk counted once. */
static void test_all_ok_every_byte(void **state)
{
	const char *const extra[] = { "--requests", "40", "--concurrency", "6", "--abort-rate",
				      "0", "--chunks", "8", "--batch", "3", NULL };
	struct bench b;

	(void)state;
	bench_run(&b, extra);
	bench_expect_exit(&b, 0);
	expect_clean(&b);
	assert_true(num(&b, "requests_ok") == 40);
	assert_true(num(&b, "requests_cancelled") == 0);
	assert_true(num(&b, "bytes") == 40.0 * 2 /* tp */ * 8 * SLOT);
	assert_true(num(&b, "lat_p99_ms") >= num(&b, "lat_p50_ms"));
	assert_true(num(&b, "lat_p50_ms") > 0);
	bench_free(&b);
}

/* Bad values: exit 2, and the message names the flag. */
static void test_bad_flag_is_usage_error(void **state)
{
	static const char *const bad[][2] = {
		{ "--tp", "0" }, { "--abort-rate", "1.5" }, { "--slot-size", "1000" },
		{ "--concurrency", "x" }, { "--recv-slots", "8" }, /* < chunks x tp */
	};
	char bin[256];

	(void)state;
	assert_int_equal(pd_run_bin("pdbench", bin, sizeof(bin)), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *argv[] = { bin, "--local", "--tp", "2", bad[i][0], bad[i][1], NULL };
		struct pd_run_result r;

		assert_int_equal(pd_run(argv, 10000, &r), 0);
		if (r.exit_code != 2 || !strstr(r.err, bad[i][0]))
			fail_msg("%s %s: exit %d, stderr: %s", bad[i][0], bad[i][1], r.exit_code,
				 r.err);
		pd_run_free(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_flag_is_usage_error),
		cmocka_unit_test(test_aborts_lose_nothing),
		cmocka_unit_test(test_all_ok_every_byte),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
