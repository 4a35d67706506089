/* SPDX-License-Identifier: MIT */
/*
 * An idle broker keeps still: with no agent, request, recv wait or live
 * peer it ticks once a second (its statistics stay fresh for pdctl), not
 * ten times; an attach, a request or any other wake-up brings the 100 ms
 * tick back at once, and its deadlines hold. (Brokers that have a session
 * keep heartbeating each other: that is their liveness, not idleness.)
 */
#include <dirent.h>
#include <stdio.h>
#include <unistd.h>

#include "it_fixture.h"

/* Context switches of every thread of pid so far. */
static uint64_t switches(pid_t pid)
{
	char dir[64], path[400], line[128];
	struct dirent *e;
	uint64_t n = 0;
	DIR *d;

	(void)snprintf(dir, sizeof(dir), "/proc/%d/task", (int)pid);
	d = opendir(dir);
	assert_non_null(d);
	while ((e = readdir(d))) {
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		(void)snprintf(path, sizeof(path), "%s/%s/status", dir, e->d_name);
		f = fopen(path, "r");
		while (f && fgets(line, sizeof(line), f)) {
			unsigned long long v;

			if (sscanf(line, "voluntary_ctxt_switches: %llu", &v) == 1 ||
			    sscanf(line, "nonvoluntary_ctxt_switches: %llu", &v) == 1)
				n += v;
		}
		if (f)
			(void)fclose(f);
	}
	(void)closedir(d);
	return n;
}

static uint64_t switches_over(pid_t pid, unsigned int ms)
{
	uint64_t a = switches(pid);

	(void)usleep(ms * 1000u);
	return switches(pid) - a;
}

static void test_idle_broker_ticks_once_a_second(void **state)
{
	struct it *t = it_start(8, 8);
	uint64_t idle, busy;

	(void)state;
	pd_agent_detach(t->da); /* no agent, no request, no peer yet */
	t->da = NULL;
	(void)usleep(1500 * 1000); /* 3 idle ticks, then the slow pace */
	idle = switches_over(t->d.pid, 3000);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
	busy = switches_over(t->d.pid, 2000);
	(void)fprintf(stderr, "decode broker: %llu wake-ups in 3 s idle, %llu in 2 s with an agent\n",
		      (unsigned long long)idle, (unsigned long long)busy);
	assert_true(idle <= 8);  /* 3 ticks, and some slack */
	assert_true(busy >= 15); /* 20 ticks */
	assert_int_equal(it_put(t, "after", 0, 2, 2), 0);
	it_verify(t, "after", 2);
	assert_int_equal(pd_recv_release(t->da, "after"), 0);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_broker_ticks_once_a_second),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
