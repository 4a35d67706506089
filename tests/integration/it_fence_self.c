/* SPDX-License-Identifier: MIT */
/*
 * An agent the broker cannot kill is fenced all the same when its lease
 * breaks. A broker embedded in a program (libpdbroker, run here in a
 * thread of the test process) cannot kill an agent of its own process, as
 * a broker not root cannot kill another user's worker: the fenced agent
 * lives on, its calls fail -ENOTCONN at once and it takes no more staging,
 * its request ends, and its loans come back when it detaches (they stay
 * out while it could still write them).
 */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "it_fixture.h"
#include "pd_broker.h"
#include "pd_config.h"

struct self {
	struct pd_broker *b;
	pthread_t loop;
	char rundir[64];
};

static void *run_loop(void *arg)
{
	(void)pd_broker_run(arg);
	return NULL;
}

/* A prefill broker in this process: 8 send slots, a 1 s loan lease. */
static void self_start(struct self *s, struct pd_test_broker *pb)
{
	char port[16], ctrl[64], err[256] = "";
	struct pd_config cfg;

	(void)snprintf(s->rundir, sizeof(s->rundir), "/tmp/pdkv-it-%d-self", (int)getpid());
	assert_int_equal(mkdir(s->rundir, 0700), 0);
	(void)snprintf(port, sizeof(port), "%d", pd_test_free_port());
	(void)snprintf(ctrl, sizeof(ctrl), "tcp://127.0.0.1:%s", port);
	(void)snprintf(pb->name, sizeof(pb->name), "test.%d.self", (int)getpid());
	(void)snprintf(pb->rundir, sizeof(pb->rundir), "%s", s->rundir);
	(void)snprintf(pb->ctrl, sizeof(pb->ctrl), "%s", ctrl);
	pb->pid = getpid();
	const char *args[] = { "pdbroker", "--name", pb->name, "--rundir", s->rundir, "--ctrl", ctrl,
			       "--data", "127.0.0.1:0", "--send-slots", "8", "--recv-slots", "0",
			       "--slot-size", "64K", "--loan-timeout", "1s", "--heartbeat", "200ms" };
	char store[PD_ARRAY_SIZE(args)][96], *argv[PD_ARRAY_SIZE(args) + 1];

	for (size_t i = 0; i < PD_ARRAY_SIZE(args); i++)
		argv[i] = strcpy(store[i], args[i]); /* parse_args takes char *const[] */
	argv[PD_ARRAY_SIZE(args)] = NULL;
	pd_config_defaults(&cfg);
	assert_int_equal(pd_config_parse_args(&cfg, (int)PD_ARRAY_SIZE(args), argv, err,
					      sizeof(err)), 0);
	if (pd_broker_create(&cfg, &s->b, err, sizeof(err)) < 0)
		fail_msg("in-process broker: %s", err);
	assert_int_equal(pthread_create(&s->loop, NULL, run_loop, s->b), 0);
}

/* SIGTERM reaches the loop's signalfd (blocked in every thread). */
static void self_stop(struct self *s)
{
	assert_int_equal(kill(getpid(), SIGTERM), 0);
	assert_int_equal(pthread_join(s->loop, NULL), 0);
	pd_broker_destroy(s->b);
	assert_int_equal(rmdir(s->rundir), 0);
}

static void test_unkillable_agent_is_fenced_and_keeps_only_its_loans(void **state)
{
	static const char *const dargs[] = { "--send-slots", "0", "--recv-slots", "16",
					     "--slot-size", "64K", "--heartbeat", "200ms", NULL };
	struct it t = { 0 };
	struct self s;
	pd_slot_ref r[4];

	(void)state;
	assert_int_equal(pd_test_broker_start(&t.d, "itSd", dargs), 0);
	self_start(&s, &t.p);
	t.pa = it_attach(&t.p, PD_AGENT_SEND);
	assert_int_equal(it_declare_on(&t, t.pa, "R", 4), 0);
	assert_int_equal(it_wait_admission(t.pa, "R"), PD_REQ_ADMITTED);
	assert_int_equal(pd_alloc(t.pa, "R", 4, r, IT_WAIT_MS), 0);

	/* Held past the 1 s lease: fenced, not killed (we are still here). */
	assert_int_equal(it_wait_stat(&t.p, "agents.fenced", 1), 1);
	assert_int_equal(pd_declare(t.pa, &(struct pd_decl){ .req_id = "S", .endpoint = t.d.ctrl,
							     .total_chunks = 1, .world_size = 1 }),
			 -ENOTCONN);
	assert_int_equal(pd_alloc(t.pa, "R", 1, r, 100), -ENOTCONN);
	assert_int_equal(it_free_slots(&t.p, 0), 4); /* it could still write its four */

	pd_agent_detach(t.pa);
	assert_int_equal(it_wait_free(&t.p, 0, 8), 8);
	self_stop(&s);
	assert_int_equal(pd_test_broker_stop(&t.d), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unkillable_agent_is_fenced_and_keeps_only_its_loans),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
