/* SPDX-License-Identifier: MIT */
/* Statistics region: buckets, quantiles, values, and the sequence lock
 * against a writer in another process. */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pd_stats.h"
#include "pd_time.h"

static void test_buckets(void **state)
{
	(void)state;
	assert_int_equal(pd_stats_bucket_of(0), 0);
	assert_int_equal(pd_stats_bucket_of(1000), 0);     /* 1 us */
	assert_int_equal(pd_stats_bucket_of(1001), 1);     /* just over 1 us */
	assert_int_equal(pd_stats_bucket_of(2000), 1);
	assert_int_equal(pd_stats_bucket_of(1000000), 10); /* 1 ms <= 1024 us */
	assert_int_equal(pd_stats_bucket_of(UINT64_MAX / 2), PD_STATS_BUCKETS - 1);
	assert_int_equal(pd_stats_bucket_le_us(3), 8);
	assert_true(pd_stats_bucket_le_us(PD_STATS_BUCKETS - 1) == UINT64_MAX);
}

static void test_quantiles(void **state)
{
	struct pd_stat_hist h;

	(void)state;
	memset(&h, 0, sizeof(h));
	assert_int_equal(pd_stats_hist_quantile_ns(&h, 0.5), 0);
	for (int i = 0; i < 90; i++)
		pd_stats_hist_add(&h, 3000);   /* bucket le 4 us */
	for (int i = 0; i < 10; i++)
		pd_stats_hist_add(&h, 900000); /* bucket le 1024 us */
	assert_int_equal(h.count, 100);
	assert_int_equal(h.sum_ns, 90 * 3000 + 10 * 900000);
	assert_int_equal(pd_stats_hist_quantile_ns(&h, 0.5), 4000);
	assert_int_equal(pd_stats_hist_quantile_ns(&h, 0.90), 4000);
	assert_int_equal(pd_stats_hist_quantile_ns(&h, 0.91), 1024000);
	assert_int_equal(pd_stats_hist_quantile_ns(&h, 1.0), 1024000);
}

static void test_values_and_snapshot(void **state)
{
	struct pd_stats *s = calloc(1, sizeof(*s)), *c = calloc(1, sizeof(*c));
	uint64_t v = 0;

	(void)state;
	assert_non_null(s);
	assert_non_null(c);
	assert_int_equal(pd_stats_snapshot(s, c), -EPROTO); /* not initialised */
	pd_stats_init(s);
	pd_stats_write_begin(s);
	pd_stats_set(s, 0, "rx.ready", PD_STAT_KIND_COUNTER, 7);
	pd_stats_set(s, 1, "a.name.much.longer.than.the.limit.of.forty.seven.bytes",
		     PD_STAT_KIND_GAUGE, 9);
	pd_stats_set(s, PD_STATS_MAX_VALUES, "ignored", PD_STAT_KIND_GAUGE, 1);
	pd_stats_write_end(s);
	assert_int_equal(pd_stats_snapshot(s, c), 0);
	assert_int_equal(c->nvalues, 2);
	assert_int_equal(pd_stats_find(c, "rx.ready", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(strlen(c->val[1].name), PD_STATS_NAME_MAX);
	assert_int_equal(pd_stats_find(c, "nope", &v), -ENOENT);
	s->nvalues = PD_STATS_MAX_VALUES + 1; /* corrupt: refused */
	assert_int_equal(pd_stats_snapshot(s, c), -EPROTO);
	free(s);
	free(c);
}

/* A writer process keeps every value equal to a generation number; a
 * reader's snapshot must never see two generations mixed. */
static void test_seqlock_across_processes(void **state)
{
	struct pd_stats *s = mmap(NULL, sizeof(*s), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	struct pd_stats *c = calloc(1, sizeof(*c));
	uint32_t torn = 0, ok = 0;
	uint64_t until = pd_now_ns() + PD_NS_PER_S;
	pid_t pid;

	(void)state;
	assert_true(s != MAP_FAILED);
	memset(s, 0, sizeof(*s));
	pd_stats_init(s);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (uint64_t g = 1;; g++) {
			pd_stats_write_begin(s);
			for (uint32_t i = 0; i < 64; i++)
				pd_stats_set(s, i, "v", PD_STAT_KIND_GAUGE, g);
			pd_stats_write_end(s);
			(void)sched_yield(); /* readers on a shared core get turns too */
		}
	}
	for (int n = 0; n < 20000 && (n < 100 || pd_now_ns() < until); n++) {
		if (pd_stats_snapshot(s, c) < 0)
			continue;
		ok++;
		for (uint32_t i = 1; i < c->nvalues; i++)
			torn += c->val[i].v != c->val[0].v;
	}
	(void)kill(pid, SIGKILL);
	(void)waitpid(pid, NULL, 0);
	assert_int_equal(torn, 0);
	assert_true(ok > 0);
	free(c);
	(void)munmap(s, sizeof(*s));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_buckets),
		cmocka_unit_test(test_quantiles),
		cmocka_unit_test(test_values_and_snapshot),
		cmocka_unit_test(test_seqlock_across_processes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
