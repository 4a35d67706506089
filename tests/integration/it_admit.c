/* SPDX-License-Identifier: MIT */
/*
 * Declare before staging, between real pdbroker processes: every end of a
 * declared request ends it on both sides. A cancel, the sender's own
 * deadline, the receiver's admission timeout and the agent's death each
 * withdraw a reservation still waiting at the receiver (the next request
 * is admitted in its place); a request larger than the receive pool is
 * refused at once; the ranks of a request join the first rank's admission;
 * and the broker itself takes no batch of a request not declared or not
 * admitted, whatever an agent hands it.
 */
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "it_scenarios.h"

#define SEND 16u
#define RECV 8u

/* Wait (bounded) until a statistic of b is exactly want; its value. */
static uint64_t wait_stat_is(const struct pd_test_broker *b, const char *name, uint64_t want)
{
	uint64_t deadline = pd_deadline_ms(IT_WAIT_MS), v;

	while ((v = it_stat(b, name)) != want && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	return v;
}

/* Declare rank `rank` of req (world ranks, total chunks each) on a. */
static int declare_rank(struct it *t, struct pd_agent *a, const char *req, uint32_t total,
			uint32_t world, uint32_t rank, uint32_t timeout_ms)
{
	struct pd_decl d = { .req_id = req, .endpoint = t->d.ctrl, .total_chunks = total,
			     .world_size = world, .rank = rank, .timeout_ms = timeout_ms };

	return pd_declare(a, &d);
}

/* A (the whole pool) is admitted and half staged; B waits behind it. */
static struct it *start_full(const struct it_opts *o)
{
	struct it *t = it_start_opts(o);

	assert_int_equal(it_put(t, "A", 0, 4, RECV), 0);
	return t;
}

/* A finishes and is consumed: capacity comes back. */
static void finish_a(struct it *t)
{
	assert_int_equal(it_put(t, "A", 4, 4, RECV), 0);
	it_expect_event(t, "A", PD_EV_PUT_DONE);
	it_verify(t, "A", RECV);
	assert_int_equal(pd_recv_release(t->da, "A"), 0);
}

/* C (declared behind B) completes: B's reservation is gone for good. */
static void c_completes(struct it *t)
{
	assert_int_equal(it_wait_admission(t->pa, "C"), PD_REQ_ADMITTED);
	assert_int_equal(it_stage(t, t->pa, "C", 0, 2, 2, IT_WAIT_MS), 0);
	it_expect_event(t, "C", PD_EV_PUT_DONE);
	it_verify(t, "C", 2);
	assert_int_equal(pd_recv_release(t->da, "C"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, RECV), RECV);
	assert_int_equal(it_wait_free(&t->p, 0, SEND), SEND);
}

/* Cancel of a request waiting for admission: PUT_FAILED -ECANCELED at
 * once, and the receiver withdraws its place in the queue. */
static void test_cancel_withdraws_a_waiting_reservation(void **state)
{
	struct it *t = start_full(&(struct it_opts){ .send_slots = SEND, .recv_slots = RECV });

	(void)state;
	assert_int_equal(it_declare_on(t, t->pa, "B", RECV), 0);
	assert_int_equal(it_wait_stat(&t->d, "rx.waiting_requests", 1), 1);
	assert_int_equal(it_declare_on(t, t->pa, "C", 2), 0);
	assert_int_equal(it_wait_stat(&t->d, "rx.waiting_requests", 2), 2);
	assert_int_equal(pd_cancel(t->pa, "B"), 0);
	assert_int_equal(it_expect_event_from(t->pa, "B", PD_EV_PUT_FAILED), -ECANCELED);
	assert_int_equal(wait_stat_is(&t->d, "rx.waiting_requests", 1), 1); /* C only */
	finish_a(t);
	c_completes(t);
	assert_int_equal(it_stat(&t->d, "rx.cancelled"), 1);
	it_stop(t, 0);
}

/* The declaration's own deadline passes first: -ETIMEDOUT on the sender,
 * and the receiver forgets it (a CancelNotif). */
static void test_sender_deadline_fails_both_sides(void **state)
{
	struct it *t = start_full(&(struct it_opts){ .send_slots = SEND, .recv_slots = RECV });
	uint64_t t0 = pd_now_ns();
	pd_slot_ref r[1];

	(void)state;
	assert_int_equal(declare_rank(t, t->pa, "B", 4, 1, 0, 300), 0);
	assert_int_equal(it_declare_on(t, t->pa, "C", 2), 0);
	assert_int_equal(pd_alloc(t->pa, "B", 1, r, 5000), -ECANCELED); /* failed while waiting */
	assert_true(pd_now_ns() - t0 >= 250 * PD_NS_PER_MS);
	assert_true(pd_now_ns() - t0 < 3 * PD_NS_PER_S);
	assert_int_equal(it_expect_event_from(t->pa, "B", PD_EV_PUT_FAILED), -ETIMEDOUT);
	assert_int_equal(wait_stat_is(&t->d, "rx.waiting_requests", 1), 1); /* C only */
	finish_a(t);
	c_completes(t);
	it_stop(t, 0);
}

/* The receiver's --admission-timeout passes: it refuses the request, the
 * sender fails it with the receiver's -ETIMEDOUT. */
static void test_receiver_admission_timeout(void **state)
{
	struct it *t = start_full(&(struct it_opts){ .send_slots = SEND, .recv_slots = RECV,
						     .d_admission = "1" });
	int32_t st = 0;

	(void)state;
	assert_int_equal(it_declare_on(t, t->pa, "B", 4), 0);
	assert_int_equal(it_expect_event_from(t->pa, "B", PD_EV_PUT_FAILED), -ETIMEDOUT);
	assert_int_equal(pd_req_state(t->pa, "B", &st), PD_REQ_FAILED);
	assert_int_equal(st, -ETIMEDOUT);
	assert_int_equal(wait_stat_is(&t->d, "rx.waiting_requests", 0), 0);
	assert_int_equal(it_declare_on(t, t->pa, "C", 2), 0);
	finish_a(t);
	c_completes(t);
	it_stop(t, 0);
}

/* In a child: an agent that declares a request and dies before it is admitted. */
static int dies_declared(void *arg)
{
	struct it *t = arg;
	struct pd_agent *a;

	if (pd_test_agent_attach(&t->p, PD_AGENT_SEND, &a) < 0 ||
	    it_declare_on(t, a, "B", RECV) < 0 || it_wait_stat(&t->d, "rx.waiting_requests", 1) != 1)
		return 1;
	(void)raise(SIGKILL);
	return 2;
}

/* The agent of a request waiting for admission dies: the broker withdraws
 * the reservation (no one will stage it). */
static void test_agent_death_withdraws_the_reservation(void **state)
{
	struct it *t = start_full(&(struct it_opts){ .send_slots = SEND, .recv_slots = RECV });

	(void)state;
	assert_int_equal(pd_test_wait(pd_test_fork(dies_declared, t), IT_WAIT_MS), 128 + SIGKILL);
	assert_int_equal(wait_stat_is(&t->d, "rx.waiting_requests", 0), 0);
	assert_int_equal(it_declare_on(t, t->pa, "C", 2), 0);
	finish_a(t);
	c_completes(t);
	it_stop(t, 0);
}

/* Larger than the receive pool: refused at once (-E2BIG), nothing staged. */
static void test_too_big_is_refused_at_once(void **state)
{
	struct it *t = it_start(SEND, RECV);
	uint64_t t0 = pd_now_ns();
	pd_slot_ref r[1];

	(void)state;
	assert_int_equal(it_declare_on(t, t->pa, "big", RECV + 1), 0);
	assert_int_equal(pd_alloc(t->pa, "big", 1, r, IT_WAIT_MS), -ECANCELED);
	assert_true(pd_now_ns() - t0 < 2 * PD_NS_PER_S);
	assert_int_equal(it_expect_event_from(t->pa, "big", PD_EV_PUT_FAILED), -E2BIG);
	assert_int_equal(it_wait_free(&t->p, 0, SEND), SEND);
	it_stop(t, 0);
}

/* TP 2 on one prefill broker: rank 0's declaration admits the request for
 * both ranks, rank 1's joins it at once even though the pool is then full;
 * both complete, every byte checked. */
static void test_ranks_join_the_first_admission(void **state)
{
	struct it *t = it_start(SEND, RECV);
	struct pd_agent *a1 = it_attach(&t->p, PD_AGENT_SEND);
	struct pd_recv_info info;

	(void)state;
	assert_int_equal(declare_rank(t, t->pa, "G", 4, 2, 0, 0), 0);
	assert_int_equal(it_wait_admission(t->pa, "G"), PD_REQ_ADMITTED);
	assert_int_equal(it_wait_stat(&t->d, "rx.reserves", 1), 1);
	assert_int_equal(declare_rank(t, a1, "G", 4, 2, 1, 0), 0);
	assert_int_equal(it_wait_admission(a1, "G"), PD_REQ_ADMITTED);
	assert_int_equal(wait_stat_is(&t->d, "rx.waiting_requests", 0), 0);
	assert_int_equal(it_wait_stat(&t->d, "rx.reserves", 2), 2);
	assert_int_equal(pd_recv_wait(t->da, "G", 200, &info), -ETIMEDOUT); /* nothing staged */
	pd_agent_detach(a1);
	/* Rank 1's agent is gone: the request is cancelled on both sides. */
	assert_int_equal(it_expect_event_from(t->pa, "G", PD_EV_PUT_FAILED), -ECANCELED);
	assert_int_equal(pd_recv_wait(t->da, "G", IT_WAIT_MS, &info), 0);
	assert_int_equal(info.status, -ECANCELED);
	assert_int_equal(wait_stat_is(&t->d, "rx.live_requests", 0), 0);
	it_stop(t, 0);
}

/* Slots loaned for an admitted request, handed over under another name:
 * the broker takes no batch of a request it was never told of (-ENOENT) or
 * has not seen admitted (-EPROTO: that request fails, its reservation is
 * withdrawn), and the staging comes back either way. */
static void test_broker_refuses_batches_outside_the_rule(void **state)
{
	struct it *t = start_full(&(struct it_opts){ .send_slots = SEND, .recv_slots = RECV });
	struct pd_chunk c = { .len = 100, .klen = 1, .key = "k" };
	struct pd_batch b = { .endpoint = t->d.ctrl, .chunks = &c, .n = 1, .total_chunks = 1,
			      .world_size = 1, .last = 1 };
	pd_slot_ref r[1];

	(void)state;
	assert_int_equal(it_declare_on(t, t->pa, "B", 1), 0);
	assert_int_equal(it_wait_stat(&t->d, "rx.waiting_requests", 1), 1);
	assert_int_equal(pd_alloc(t->pa, "A", 1, r, IT_WAIT_MS), 0);
	c.slot = r[0];
	b.req_id = "nobody";
	assert_int_equal(pd_put(t->pa, &b), 0);
	assert_int_equal(it_expect_event_from(t->pa, "nobody", PD_EV_PUT_FAILED), -ENOENT);
	assert_int_equal(pd_alloc(t->pa, "A", 1, r, IT_WAIT_MS), 0);
	c.slot = r[0];
	b.req_id = "B";
	assert_int_equal(pd_put(t->pa, &b), 0);
	assert_int_equal(it_expect_event_from(t->pa, "B", PD_EV_PUT_FAILED), -EPROTO);
	assert_int_equal(wait_stat_is(&t->d, "rx.waiting_requests", 0), 0);
	assert_int_equal(it_wait_free(&t->p, 0, SEND), SEND);
	finish_a(t);
	assert_int_equal(it_wait_free(&t->d, 1, RECV), RECV);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cancel_withdraws_a_waiting_reservation),
		cmocka_unit_test(test_sender_deadline_fails_both_sides),
		cmocka_unit_test(test_receiver_admission_timeout),
		cmocka_unit_test(test_agent_death_withdraws_the_reservation),
		cmocka_unit_test(test_too_big_is_refused_at_once),
		cmocka_unit_test(test_ranks_join_the_first_admission),
		cmocka_unit_test(test_broker_refuses_batches_outside_the_rule),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
