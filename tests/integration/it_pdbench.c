/* SPDX-License-Identifier: MIT */
/* pdbench end to end: it starts its own brokers, drives requests with and
 * without aborts in both prefill engines (--engine step: one scheduler
 * thread per rank; --engine threads: a thread per request), over tcp and
 * shm, including the configurations that used to deadlock before declare
 * before staging, and its JSON says nothing was lost, corrupted or leaked;
 * a bad flag is a usage error naming the flag. */
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
#define MAX_ARGS         64

struct bench {
	struct pd_run_result r;
	char path[128];
	char *json;                 /* the --json file's text (malloc'ed), or NULL */
};

/* 2 prefill, 1 decode brokers, TP 2. */
static const char *const two_one[] = { "--prefill", "2", "--decode", "1", "--tp", "2",
				       "--slot-size", "64K", NULL };

/* The issue's failing configuration: 6 requests of 16 chunks in flight
 * against 32 receive slots (2 admitted at a time) and 32 send slots, each
 * decoded request held 30 ms. Before declare before staging, batches of
 * unadmitted requests filled the send pool and nothing moved. */
static const char *const issue[] = { "--prefill", "1", "--decode", "1", "--tp", "1",
				     "--send-slots", "32", "--recv-slots", "32", "--slot-size",
				     "64K", "--concurrency", "6", "--chunks", "16", "--batch", "4",
				     "--requests", "30", "--decode-hold", "30", NULL };

/* The old README troubleshooting case: staging smaller than requests in
 * flight x chunks x ranks (8 x 16 x 2 = 256 > 128). */
static const char *const readme[] = { "--prefill", "1", "--decode", "1", "--tp", "2",
				      "--concurrency", "8", "--chunks", "16", "--send-slots",
				      "128", "--recv-slots", "64", "--slot-size", "64K",
				      "--requests", "60", NULL };

static int add_args(const char **argv, int k, const char *const *more)
{
	for (; more && *more; more++) {
		assert_true(k < MAX_ARGS - 1);
		argv[k++] = *more;
	}
	return k;
}

/* pdbench --local --json FILE --quiet <base> <extra>. */
static void bench_run(struct bench *b, const char *const *base, const char *const *extra)
{
	static int n;
	const char *argv[MAX_ARGS] = { NULL, "--local", "--json", b->path, "--quiet" };
	char bin[256];
	int k = 5;

	memset(b, 0, sizeof(*b));
	(void)snprintf(b->path, sizeof(b->path), "/tmp/it_pdbench.%d.%d.json", (int)getpid(), n++);
	argv[3] = b->path;
	assert_int_equal(pd_run_bin("pdbench", bin, sizeof(bin)), 0);
	argv[0] = bin;
	k = add_args(argv, k, base);
	k = add_args(argv, k, extra);
	argv[k] = NULL;
	assert_int_equal(pd_run(argv, BENCH_TIMEOUT_MS, &b->r), 0);
	b->json = pd_run_slurp(b->path);
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

static void expect_engine(const struct bench *b, const char *engine)
{
	char got[16] = "";

	assert_int_equal(pd_json_get_str(b->json, "engine", got, sizeof(got)), 0);
	assert_string_equal(got, engine);
}

static void expect_clean(const struct bench *b)
{
	assert_non_null(b->json);
	assert_int_equal(pd_json_valid(b->json), 0);
	assert_true(num(b, "lost") == 0);
	assert_true(num(b, "corrupted") == 0);
	assert_true(num(b, "leaked_slots") == 0);
	assert_true(num(b, "reserved_left") == 0); /* every reservation granted or withdrawn */
	assert_true(num(b, "waiting_left") == 0);
	assert_true(num(b, "requests_failed") == 0);
	assert_true(num(b, "bad_exits") == 0);
	assert_true(num(b, "requests_ok") + num(b, "requests_cancelled") == num(b, "requests"));
}

/* Every request ok, in the engine and over the transport given ("tcp", or
 * "shm,tcp": shm preferred), and that transport moved every byte. */
static void run_all_ok(struct bench *b, const char *const *base, const char *engine,
		       const char *transport)
{
	const char *const extra[] = { "--engine", engine, "--transport", transport, NULL };
	int shm = !strncmp(transport, "shm", 3);

	bench_run(b, base, extra);
	bench_expect_exit(b, 0);
	expect_clean(b);
	expect_engine(b, engine);
	assert_true(num(b, "requests_ok") == num(b, "requests"));
	assert_true(num(b, shm ? "moved_shm_bytes" : "moved_tcp_bytes") >= num(b, "bytes"));
	assert_true(num(b, shm ? "moved_tcp_bytes" : "moved_shm_bytes") == 0);
}

/* A fifth of the requests cancelled by one rank at a random stage (every
 * stage after its pd_declare: the cancel of a declared request). */
static void run_aborts(const char *engine)
{
	const char *const extra[] = { "--requests", "40", "--concurrency", "6", "--abort-rate",
				      "0.2", "--engine", engine, NULL };
	struct bench b;

	bench_run(&b, two_one, extra);
	bench_expect_exit(&b, 0);
	expect_clean(&b);
	expect_engine(&b, engine);
	assert_true(num(&b, "requests") == 40);
	assert_true(num(&b, "requests_cancelled") > 0);
	assert_true(num(&b, "tp") == 2 && num(&b, "prefill") == 2 && num(&b, "decode") == 1);
	bench_free(&b);
}

static void test_aborts_lose_nothing_step(void **state)
{
	(void)state;
	run_aborts("step");
}

static void test_aborts_lose_nothing_threads(void **state)
{
	(void)state;
	run_aborts("threads");
}

/* No aborts, the default engine (step): every request ok, every byte of
 * every chunk counted once. */
static void test_all_ok_every_byte(void **state)
{
	const char *const extra[] = { "--requests", "40", "--concurrency", "6", "--abort-rate",
				      "0", "--chunks", "8", "--batch", "3", NULL };
	struct bench b;

	(void)state;
	bench_run(&b, two_one, extra);
	bench_expect_exit(&b, 0);
	expect_clean(&b);
	expect_engine(&b, "step");
	assert_true(num(&b, "requests_ok") == 40);
	assert_true(num(&b, "requests_cancelled") == 0);
	assert_true(num(&b, "bytes") == 40.0 * 2 /* tp */ * 8 * SLOT);
	assert_true(num(&b, "lat_p99_ms") >= num(&b, "lat_p50_ms"));
	assert_true(num(&b, "lat_p50_ms") > 0);
	assert_true(num(&b, "xfer_samples") == 40); /* first pd_put -> PUT_DONE, each request */
	assert_true(num(&b, "xfer_p50_us") > 0 && num(&b, "xfer_avg_us") > 0);
	assert_true(num(&b, "xfer_p999_us") >= num(&b, "xfer_p99_us"));
	assert_true(num(&b, "xfer_p99_us") >= num(&b, "xfer_p50_us"));
	/* the transfer is part of the request: declare -> verified */
	assert_true(num(&b, "xfer_p50_us") <= 1000.0 * num(&b, "lat_p99_ms"));
	bench_free(&b);
}

/* --warmup 6: 6 requests first, verified and counted as requests, then
 * the 10 measured ones: only theirs are the bytes and latency samples. */
static void test_warmup_not_in_figures(void **state)
{
	const char *const extra[] = { "--requests", "10", "--warmup", "6", "--concurrency", "4",
				      "--chunks", "4", "--batch", "2", NULL };
	struct bench b;

	(void)state;
	bench_run(&b, two_one, extra);
	bench_expect_exit(&b, 0);
	expect_clean(&b);
	assert_true(num(&b, "warmup") == 6);
	assert_true(num(&b, "requests") == 16 && num(&b, "requests_ok") == 16);
	assert_true(num(&b, "bytes") == 10.0 * 2 * 4 * SLOT);
	assert_true(num(&b, "sender_admit_samples") == 10);
	assert_true(num(&b, "xfer_samples") == 10); /* the transfers timed: not the warm-up's */
	assert_true(num(&b, "moved_tcp_bytes") >= 16.0 * 2 * 4 * SLOT);
	bench_free(&b);
}

/*
 * The issue's configuration completes. Admission really was the
 * bottleneck: only 2 of the 6 requests in flight fit the receive pool, so
 * some request waited for one held 30 ms to be released (sender admission
 * >= 30 ms), and the step engine skipped requests not admitted yet
 * (pd_alloc -EAGAIN) instead of blocking on them.
 */
static void run_issue(const char *engine, const char *transport)
{
	struct bench b;

	run_all_ok(&b, issue, engine, transport);
	assert_true(num(&b, "requests_ok") == 30);
	assert_true(num(&b, "bytes") == 30.0 * 16 * SLOT);
	assert_true(num(&b, "decode_hold_ms") == 30);
	assert_true(num(&b, "sender_admit_samples") == 30);
	assert_true(num(&b, "sender_admit_p99_ms") >= 30.0);
	assert_true(num(&b, "admit_wait_p99_ms") > 0);
	if (!strcmp(engine, "step")) {
		assert_true(num(&b, "alloc_deferred") > 0);
		assert_true(num(&b, "engine_steps") > 0);
		assert_true(num(&b, "engine_sleeps") > 0); /* it slept, never spun */
	}
	bench_free(&b);
}

static void test_issue_step_tcp(void **state)
{
	(void)state;
	run_issue("step", "tcp");
}

static void test_issue_step_shm(void **state)
{
	(void)state;
	run_issue("step", "shm,tcp");
}

static void test_issue_threads_tcp(void **state)
{
	(void)state;
	run_issue("threads", "tcp");
}

static void test_issue_threads_shm(void **state)
{
	(void)state;
	run_issue("threads", "shm,tcp");
}

/* The old README troubleshooting configuration completes. */
static void run_readme(const char *engine, const char *transport)
{
	struct bench b;

	run_all_ok(&b, readme, engine, transport);
	assert_true(num(&b, "requests_ok") == 60);
	assert_true(num(&b, "bytes") == 60.0 * 2 * 16 * SLOT);
	bench_free(&b);
}

static void test_readme_step_tcp(void **state)
{
	(void)state;
	run_readme("step", "tcp");
}

static void test_readme_step_shm(void **state)
{
	(void)state;
	run_readme("step", "shm,tcp");
}

static void test_readme_threads_tcp(void **state)
{
	(void)state;
	run_readme("threads", "tcp");
}

static void test_readme_threads_shm(void **state)
{
	(void)state;
	run_readme("threads", "shm,tcp");
}

/* Cancels under admission pressure, TP 2: requests cancelled while
 * declared and waiting for admission, admitted, or staging; their
 * reservations are withdrawn and the others still complete. */
static void run_aborts_pressure(const char *engine)
{
	const char *const extra[] = { "--tp", "2", "--chunks", "8", "--requests", "40",
				      "--abort-rate", "0.3", "--engine", engine, NULL };
	struct bench b;

	bench_run(&b, issue, extra);
	bench_expect_exit(&b, 0);
	expect_clean(&b);
	expect_engine(&b, engine);
	assert_true(num(&b, "requests_cancelled") > 0);
	assert_true(num(&b, "requests_ok") > 0);
	bench_free(&b);
}

static void test_aborts_under_pressure_step(void **state)
{
	(void)state;
	run_aborts_pressure("step");
}

static void test_aborts_under_pressure_threads(void **state)
{
	(void)state;
	run_aborts_pressure("threads");
}

/* The check catches a changed byte: --inject-corruption 3 changes one byte
 * of one chunk of requests 0, 3, 6 and 9 (rank 0, after the pattern is
 * written); each of those is corrupted, said on stderr, and fails the run;
 * the others (and rank 1 of the same requests) verify. */
static void test_injected_corruption_is_caught(void **state)
{
	const char *const extra[] = { "--requests", "12", "--concurrency", "3", "--chunks", "5",
				      "--batch", "2", "--inject-corruption", "3", NULL };
	struct bench b;

	(void)state;
	bench_run(&b, two_one, extra);
	bench_expect_exit(&b, 1);
	assert_non_null(b.json);
	assert_true(num(&b, "inject_corruption") == 3);
	assert_true(num(&b, "corrupted") == 4);
	assert_true(num(&b, "corrupted_chunks") == 4);
	assert_true(num(&b, "requests_ok") == 8);
	assert_true(num(&b, "lost") == 0 && num(&b, "requests_failed") == 0);
	assert_true(num(&b, "bytes") == 8.0 * 2 * 5 * SLOT);
	if (!strstr(b.r.err, "first wrong byte at offset"))
		fail_msg("no corrupted chunk named on stderr:\n%s", b.r.err);
	bench_free(&b);
}

/* --help names both engines and says which one is the default; it tells
 * of the sweep, its lists, and what the transfer latency is. */
static void test_help_names_engines(void **state)
{
	static const char *const want[] = { "--sweep ", "--sweep-chunks LIST", "--sweep-batch LIST",
					    "--sweep-conc LIST", "--sweep-bytes SIZE", "--warmup W",
					    "pd_put -> PUT_DONE", "--json FILE", "--inject-corruption N" };
	const char *argv[] = { NULL, "--help", NULL };
	struct pd_run_result r;
	char bin[256];

	(void)state;
	assert_int_equal(pd_run_bin("pdbench", bin, sizeof(bin)), 0);
	argv[0] = bin;
	assert_int_equal(pd_run(argv, 10000, &r), 0);
	assert_int_equal(r.exit_code, 0);
	assert_non_null(strstr(r.out, "--engine step|threads"));
	assert_non_null(strstr(r.out, "step (default)"));
	assert_non_null(strstr(r.out, "--decode-hold MS"));
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		if (!strstr(r.out, want[i]))
			fail_msg("--help does not say '%s'", want[i]);
	pd_run_free(&r);
}

/* Bad values: exit 2, and the message names the flag. */
static void test_bad_flag_is_usage_error(void **state)
{
	static const char *const bad[][2] = {
		{ "--tp", "0" }, { "--abort-rate", "1.5" }, { "--slot-size", "1000" },
		{ "--concurrency", "x" }, { "--recv-slots", "8" }, /* < chunks x tp */
		{ "--engine", "fast" }, { "--decode-hold", "60001" },
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
		cmocka_unit_test(test_help_names_engines),
		cmocka_unit_test(test_injected_corruption_is_caught),
		cmocka_unit_test(test_aborts_lose_nothing_step),
		cmocka_unit_test(test_aborts_lose_nothing_threads),
		cmocka_unit_test(test_all_ok_every_byte),
		cmocka_unit_test(test_warmup_not_in_figures),
		cmocka_unit_test(test_issue_step_tcp),
		cmocka_unit_test(test_issue_step_shm),
		cmocka_unit_test(test_issue_threads_tcp),
		cmocka_unit_test(test_issue_threads_shm),
		cmocka_unit_test(test_readme_step_tcp),
		cmocka_unit_test(test_readme_step_shm),
		cmocka_unit_test(test_readme_threads_tcp),
		cmocka_unit_test(test_readme_threads_shm),
		cmocka_unit_test(test_aborts_under_pressure_step),
		cmocka_unit_test(test_aborts_under_pressure_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
