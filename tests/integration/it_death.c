/* SPDX-License-Identifier: MIT */
/* A broker dies: its peer and its agents notice, clean up, and recover. */
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "it_fixture.h"
#include "pd_test.h"

static const char *const decode_args[] = { "--send-slots", "0", "--recv-slots", "64",
					   "--slot-size", "64K", "--heartbeat", "200ms",
					   "--log-level", "info", NULL };

/* A request sent before the sender noticed the restart may fail (its
 * session was the dead broker's); once noticed, requests succeed. Puts
 * "<base>.N" for N = 0, 1, ... until one is done; its name goes to req. */
static int put_until_done(struct it *t, const char *base, char *req, size_t len)
{
	struct timespec nap = { 0, 300 * 1000 * 1000 };
	struct pd_event ev;

	for (int i = 0; i < 10; i++) {
		(void)snprintf(req, len, "%s.%d", base, i);
		if (it_put(t, req, 0, 2, 2) == 0 && pd_next_event(t->pa, &ev, IT_WAIT_MS) == 0 &&
		    ev.type == PD_EV_PUT_DONE)
			return i;
		(void)nanosleep(&nap, NULL);
	}
	return -1;
}

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
	assert_int_equal(kill(t->d.pid, SIGKILL), 0);
	assert_int_equal(pd_test_wait(t->d.pid, 5000), 128 + SIGKILL);
	t0 = pd_now_ns();
	assert_int_equal(it_expect_event_from(t->pa, "A", PD_EV_PUT_FAILED) < 0, 1);
	assert_true(pd_now_ns() - t0 < 3 * PD_NS_PER_S);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	/* Once the sender knows the peer is down, a new request fails at once
	 * (not at the allocation timeout). */
	(void)nanosleep(&(struct timespec){ 1, 0 }, NULL);
	t0 = pd_now_ns();
	assert_int_equal(it_put(t, "C", 0, 1, 1), 0);
	assert_int_equal(it_expect_event_from(t->pa, "C", PD_EV_PUT_FAILED) < 0, 1);
	assert_true(pd_now_ns() - t0 < 2 * PD_NS_PER_S);
	pd_agent_detach(t->da);
	assert_int_equal(pd_test_broker_restart(&t->d, decode_args), 0);
	t->da = it_attach(&t->d, PD_AGENT_RECV);
	assert_true(put_until_done(t, "B", req, sizeof(req)) >= 0);
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
	struct it *t = it_start(8, 16);
	pd_slot_ref r[9];
	pid_t killer;
	uint64_t t0;

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 4, 8), 0); /* admitted for 8, 4 granted */
	assert_int_equal(it_wait_free(&t->p, 0, 8), 8);
	assert_int_equal(pd_alloc(t->pa, "x", 8, r, 1000), 0);
	killer = pd_test_fork(kill_later, &t->p.pid);
	t0 = pd_now_ns();
	assert_int_equal(pd_alloc(t->pa, "y", 1, r + 8, 10000), -ENOTCONN);
	assert_true(pd_now_ns() - t0 < 1500 * PD_NS_PER_MS);
	assert_int_equal(pd_test_wait(killer, 2000), 0);
	assert_int_equal(pd_test_wait(t->p.pid, 2000), 128 + SIGKILL);
	t->p.pid = 0;
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_broker_killed_then_restarted),
		cmocka_unit_test(test_prefill_broker_killed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
