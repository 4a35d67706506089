/* SPDX-License-Identifier: MIT */
/* A broker dies: its peer and its agents notice, clean up, and recover. */
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "it_scenarios.h"

static const struct it_xport tcp = IT_XPORT_TCP;

/* The decode broker killed mid-transfer: the sender fails the request
 * within the heartbeat timeout and frees its staging; restarted, the
 * decode broker takes new requests. */
static void test_decode_broker_killed_then_restarted(void **state)
{
	struct it *t = it_start(16, 64);
	char req[32];
	uint64_t t0;

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 4, 8), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16); /* batch written, staging back */
	it_kill(&t->d);
	t0 = pd_now_ns();
	assert_int_equal(it_expect_event_from(t->pa, "A", PD_EV_PUT_FAILED) < 0, 1);
	assert_true(pd_now_ns() - t0 < 3 * PD_NS_PER_S);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	/* Once the sender knows the peer is down, a new request fails at once
	 * (not at the allocation timeout). */
	(void)nanosleep(&(struct timespec){ 1, 0 }, NULL);
	t0 = pd_now_ns();
	assert_int_equal(it_put(t, "C", 0, 1, 1), -ECANCELED); /* failed before admission */
	assert_int_equal(it_expect_event_from(t->pa, "C", PD_EV_PUT_FAILED), -ENOTCONN);
	assert_int_equal(pd_req_state(t->pa, "C", NULL), PD_REQ_FAILED);
	assert_true(pd_now_ns() - t0 < 2 * PD_NS_PER_S);
	it_restart_decode(t);
	assert_true(it_put_until_done(t, "B", req, sizeof(req)) >= 0);
	it_verify(t, req, 2);
	assert_int_equal(pd_recv_release(t->da, req), 0);
	it_stop(t, 0);
}

static int kill_later(void *arg)
{
	struct timespec nap = { 0, 300 * 1000 * 1000 };

	(void)nanosleep(&nap, NULL);
	return kill(*(pid_t *)arg, SIGKILL) == 0 ? 0 : 1;
}

/* The prefill broker killed: an agent blocked in alloc gets -ENOTCONN
 * within a second; the decode broker rolls back that peer's request. */
static void test_prefill_broker_killed(void **state)
{
	struct it *t = it_start(8, 32);
	pd_slot_ref r[9];
	pid_t killer;
	uint64_t t0;

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 4, 8), 0); /* admitted for 8, 4 granted */
	assert_int_equal(it_wait_free(&t->p, 0, 8), 8);
	assert_int_equal(it_declare_on(t, t->pa, "x", 8), 0);
	assert_int_equal(it_declare_on(t, t->pa, "y", 1), 0);
	assert_int_equal(pd_alloc(t->pa, "x", 8, r, 1000), 0);
	assert_int_equal(it_wait_admission(t->pa, "y"), PD_REQ_ADMITTED); /* y waits for staging */
	killer = pd_test_fork(kill_later, &t->p.pid);
	t0 = pd_now_ns();
	assert_int_equal(pd_alloc(t->pa, "y", 1, r + 8, 10000), -ENOTCONN);
	assert_true(pd_now_ns() - t0 < 1500 * PD_NS_PER_MS);
	assert_int_equal(pd_test_wait(killer, 2000), 0);
	assert_int_equal(pd_test_wait(t->p.pid, 2000), 128 + SIGKILL);
	t->p.pid = 0;
	/* The half-sent request A is rolled back when the session goes (its
	 * heartbeats stop), not left to the recv-ttl (120 s). */
	t0 = pd_now_ns();
	assert_int_equal(it_wait_free(&t->d, 1, 32), 32);
	(void)fprintf(stderr, "decode slots of the dead sender's half-sent request back in %.2f s\n",
		      (double)(pd_now_ns() - t0) / 1e9);
	assert_true(pd_now_ns() - t0 < 5 * PD_NS_PER_S);
	it_stop(t, 0);
}

/* Two brokers whose silence deadline is 3 heartbeats of 5 s, request A
 * half sent (4 of 8 chunks written). */
static struct it *start_slow_heartbeat(void)
{
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 64,
							.heartbeat = "5s" });

	assert_int_equal(it_put(t, "A", 0, 4, 8), 0);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16); /* first batch written */
	return t;
}

/* The decode broker stopped with SIGTERM: it exits 0 and leaves no
 * segment; the sender fails the request in flight at once (its data lanes
 * close, and it says goodbye) and frees its staging. */
static void test_decode_broker_sigterm(void **state)
{
	struct it *t = start_slow_heartbeat();
	char path[128];
	uint64_t t0;

	(void)state;
	pd_agent_detach(t->da);
	t->da = NULL;
	t0 = pd_now_ns();
	assert_int_equal(kill(t->d.pid, SIGTERM), 0);
	assert_int_equal(pd_test_wait(t->d.pid, 5000), 0);
	t->d.pid = 0;
	assert_int_equal(it_expect_event_from(t->pa, "A", PD_EV_PUT_FAILED) < 0, 1);
	assert_true(pd_now_ns() - t0 < 3 * PD_NS_PER_S);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	(void)snprintf(path, sizeof(path), "/dev/shm/pdkv.%s", t->d.name);
	assert_int_equal(access(path, F_OK), -1);
	it_stop(t, 0);
}

/* The prefill broker stopped with SIGTERM says goodbye: the decode broker
 * rolls back the half-received request at once, not after the silence
 * deadline (15 s here), and its receive pool is full again. */
static void test_prefill_broker_sigterm_says_goodbye(void **state)
{
	struct it *t = start_slow_heartbeat();
	uint64_t t0;

	(void)state;
	assert_int_equal(it_wait_free(&t->d, 1, 56), 56); /* A's 8 granted with its admission */
	t0 = pd_now_ns();
	assert_int_equal(kill(t->p.pid, SIGTERM), 0);
	assert_int_equal(pd_test_wait(t->p.pid, 5000), 0);
	t->p.pid = 0;
	assert_int_equal(it_wait_free(&t->d, 1, 64), 64);
	assert_true(pd_now_ns() - t0 < 3 * PD_NS_PER_S);
	it_stop(t, 0);
}

/* The prefill broker killed with A half received at the decode broker,
 * and started again at once under its name and control endpoint, well
 * inside the silence deadline (15 s here): the decode broker ends the old
 * session on its connections' reset, so A's decode slots are back before
 * the new broker's first request (which succeeds), not at the deadline
 * nor at the recv-ttl. */
static void test_prefill_broker_restarted_quickly(void **state)
{
	struct it *t = start_slow_heartbeat();
	char req[32];
	uint64_t t0;

	(void)state;
	assert_int_equal(it_wait_free(&t->d, 1, 56), 56); /* A's 8 granted with its admission */
	it_kill(&t->p);
	t0 = pd_now_ns();
	it_restart_prefill(t);
	assert_true(it_put_until_done(t, "B", req, sizeof(req)) >= 0);
	it_verify(t, req, 2);
	assert_int_equal(pd_recv_release(t->da, req), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 64), 64);
	(void)fprintf(stderr, "decode slots of the restarted sender's half-sent request back in "
		      "%.2f s after the kill\n", (double)(pd_now_ns() - t0) / 1e9);
	assert_true(pd_now_ns() - t0 < 5 * PD_NS_PER_S);
	it_stop(t, 0);
}

/* The decode broker restarted faster than the silence deadline: the
 * sender sees its data lanes drop, says Hello again at once and holds new
 * requests for the new session, so the first request after the restart
 * succeeds. */
static void test_decode_broker_restarted_quickly(void **state)
{
	(void)state;
	it_scn_decode_restarted_quickly(&tcp);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_broker_killed_then_restarted),
		cmocka_unit_test(test_prefill_broker_killed),
		cmocka_unit_test(test_prefill_broker_restarted_quickly),
		cmocka_unit_test(test_decode_broker_restarted_quickly),
		cmocka_unit_test(test_decode_broker_sigterm),
		cmocka_unit_test(test_prefill_broker_sigterm_says_goodbye),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
