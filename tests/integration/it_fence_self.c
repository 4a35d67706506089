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

/* A broker in this process: a prefill one (8 send slots, a 1 s loan lease)
 * or, recv set, a decode one (16 recv slots, a 1 s recv-ttl). */
static void self_start(struct self *s, struct pd_test_broker *pb, int recv)
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
			       "--data", "127.0.0.1:0", "--send-slots", recv ? "0" : "8",
			       "--recv-slots", recv ? "16" : "0", "--slot-size", "64K",
			       recv ? "--recv-ttl" : "--loan-timeout", "1s", "--heartbeat", "200ms" };
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
	self_start(&s, &t.p, 0);
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

/* The same on the receive side: a decode agent pinning a request past
 * --recv-ttl is fenced; its pins are dropped at once (read-only memory:
 * nothing it can spoil), the slots come back while it is still attached,
 * and its receive calls fail -ENOTCONN. */
static void test_unkillable_pinner_is_fenced_and_loses_its_pins(void **state)
{
	static const char *const pargs[] = { "--send-slots", "16", "--recv-slots", "0",
					     "--slot-size", "64K", "--heartbeat", "200ms", NULL };
	struct it t = { 0 };
	struct self s;
	struct pd_recv_info info;
	const void *ptr;
	uint32_t len;
	char key[48];

	(void)state;
	assert_int_equal(pd_test_broker_start(&t.p, "itSp", pargs), 0);
	self_start(&s, &t.d, 1);
	t.pa = it_attach(&t.p, PD_AGENT_SEND);
	t.da = it_attach(&t.d, PD_AGENT_RECV);
	assert_int_equal(it_put(&t, "P", 0, 4, 4), 0);
	it_expect_event(&t, "P", PD_EV_PUT_DONE);
	assert_int_equal(pd_recv_wait(t.da, "P", IT_WAIT_MS, &info), 0);
	assert_int_equal(info.status, 0);
	for (uint32_t i = 0; i < 4; i++) {
		it_key(key, sizeof(key), "P", i);
		assert_int_equal(pd_recv_lookup(t.da, key, (uint32_t)strlen(key), &ptr, &len), 0);
	}
	assert_int_equal(it_free_slots(&t.d, 1), 12);

	/* A wait under way when the fence comes ends with it (no --recv-ttl
	 * here: the fence is due 1 s after the pins). */
	uint64_t t0 = pd_now_ns();

	assert_int_equal(pd_recv_wait(t.da, "never", 10000, &info), -ENOTCONN);
	assert_true(pd_now_ns() - t0 < 5000 * PD_NS_PER_MS);
	assert_int_equal(it_stat(&t.d, "agents.fenced"), 1);
	assert_int_equal(it_wait_free(&t.d, 1, 16), 16); /* still attached, pins gone */
	it_key(key, sizeof(key), "P", 0);
	assert_int_equal(pd_recv_lookup(t.da, key, (uint32_t)strlen(key), &ptr, &len), -ENOTCONN);
	assert_int_equal(pd_recv_wait(t.da, "P", 100, &info), -ENOTCONN);
	assert_int_equal(pd_recv_release(t.da, "P"), -ENOTCONN);

	pd_agent_detach(t.da);
	pd_agent_detach(t.pa);
	self_stop(&s);
	assert_int_equal(pd_test_broker_stop(&t.p), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unkillable_agent_is_fenced_and_keeps_only_its_loans),
		cmocka_unit_test(test_unkillable_pinner_is_fenced_and_loses_its_pins),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
