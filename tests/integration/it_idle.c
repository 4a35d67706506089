/* SPDX-License-Identifier: MIT */
/*
 * An idle broker keeps still: with no request, recv wait, queued event or
 * session being set up it ticks once a heartbeat (at most a second: its
 * statistics stay fresh for pdctl), not ten times a second, also with
 * agents attached and a live session to a peer; work brings the 100 ms
 * tick back at once, and its deadlines hold.
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
	uint64_t idle, attached;

	(void)state;
	pd_agent_detach(t->da); /* no agent, no request, no peer yet */
	t->da = NULL;
	(void)usleep(1500 * 1000); /* 3 idle ticks, then the slow pace */
	idle = switches_over(t->d.pid, 3000);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
	(void)usleep(1500 * 1000); /* the attach's fast ticks end */
	attached = switches_over(t->d.pid, 3000);
	(void)fprintf(stderr, "decode broker: %llu wake-ups in 3 s idle, %llu with an agent\n",
		      (unsigned long long)idle, (unsigned long long)attached);
	assert_true(idle <= 8);     /* 3 ticks, and some slack */
	assert_true(attached <= 8); /* the same: an idle agent has nothing to time */
	assert_int_equal(it_put(t, "after", 0, 2, 2), 0);
	it_verify(t, "after", 2);
	assert_int_equal(pd_recv_release(t->da, "after"), 0);
	it_stop(t, 0);
}

/* Two brokers with a session and agents attached, idle: a tick per
 * heartbeat (1 s) and the heartbeats themselves, where the 100 ms tick
 * made some 14 wake-ups a second of each; and no beat is skipped. */
static void test_idle_session_ticks_once_a_heartbeat(void **state)
{
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 8, .recv_slots = 8,
							.heartbeat = "1s" });
	uint64_t p, d, beats;

	(void)state;
	assert_int_equal(it_put(t, "first", 0, 2, 2), 0); /* the session is up */
	it_verify(t, "first", 2);
	assert_int_equal(pd_recv_release(t->da, "first"), 0);
	(void)usleep(1500 * 1000);
	beats = it_stat(&t->p, "ctrl.heartbeats_sent") + it_stat(&t->d, "ctrl.heartbeats_sent");
	p = switches(t->p.pid);
	d = switches_over(t->d.pid, 5000);
	p = switches(t->p.pid) - p;
	beats = it_stat(&t->p, "ctrl.heartbeats_sent") + it_stat(&t->d, "ctrl.heartbeats_sent") -
		beats;
	(void)fprintf(stderr, "with a session, in 5 s: prefill %llu wake-ups, decode %llu, "
		      "%llu heartbeats\n", (unsigned long long)p, (unsigned long long)d,
		      (unsigned long long)beats);
	assert_true(p <= 45); /* 5 ticks, 5 beats each way (ZeroMQ's thread too), slack */
	assert_true(d <= 45);
	assert_true(beats >= 8); /* a tick a little early still beats: about 10 */
	assert_int_equal(it_put(t, "again", 0, 2, 2), 0); /* the session still holds */
	it_verify(t, "again", 2);
	assert_int_equal(pd_recv_release(t->da, "again"), 0);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idle_broker_ticks_once_a_second),
		cmocka_unit_test(test_idle_session_ticks_once_a_heartbeat),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
