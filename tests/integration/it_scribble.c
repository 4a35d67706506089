/* SPDX-License-Identifier: MIT */
/*
 * A worker's stray writes cost that worker, never the node: an attached
 * agent's process writing into what only the broker writes (the segment
 * header, the recv pool, the recv arena, the statistics) faults at once
 * (SIGSEGV in that process); the broker stays up, its header unchanged,
 * and the other agents' requests complete, every byte verified.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "it_fixture.h"
#include "it_shmmap.h"
#include "pd_shm_layout.h"

struct scribble {
	const struct pd_test_broker *b;
	int region;                  /* PD_REGION_*, or -1: the header */
};

/* The child: attach as a decode agent, then write where it must not. It
 * returns (exit 0) only if the write did not fault. */
static int scribbler(void *arg)
{
	const struct scribble *s = arg;
	struct pd_agent *a = NULL;
	volatile uint8_t *p;
	uint8_t *base;
	struct pd_shm_hdr h;

	if (pd_test_agent_attach(s->b, PD_AGENT_RECV | PD_AGENT_SEND, &a) < 0)
		return 2;
	base = it_mapped_segment(s->b);
	if (!base)
		return 3;
	memcpy(&h, base, sizeof(h));
	if (s->region < 0)
		p = base + offsetof(struct pd_shm_hdr, state);
	else if (h.regions[s->region].len)
		p = base + h.regions[s->region].off;
	else
		return 4;
	(void)signal(SIGSEGV, SIG_DFL); /* not cmocka's: the fault ends this process */
	p[0] = 0xff; /* a bad state, a FREE descriptor, garbage: all one */
	return 0;
}

static void expect_faults(struct it *t, int region)
{
	struct scribble s = { .b = &t->d, .region = region };
	pid_t pid = pd_test_fork(scribbler, &s);

	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, 10000), 128 + SIGSEGV);
}

static void still_moves(struct it *t, const char *req)
{
	assert_int_equal(it_put(t, req, 0, 4, 4), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, 4);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

static void test_stray_writes_fault_in_the_worker(void **state)
{
	static const int targets[] = { -1, PD_REGION_RECV_POOL, PD_REGION_RECV_ARENA,
				       PD_REGION_STATS };
	struct it *t = it_start(8, 16);
	uint64_t epoch = it_stat(&t->d, "info.epoch");
	char req[32];

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(targets); i++) {
		expect_faults(t, targets[i]);
		(void)snprintf(req, sizeof(req), "after%zu", i);
		still_moves(t, req);
	}
	assert_int_equal(it_stat(&t->d, "info.epoch"), epoch);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stray_writes_fault_in_the_worker),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
