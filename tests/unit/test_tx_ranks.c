/* SPDX-License-Identifier: MIT */
/*
 * Sender request engine: the ranks of one request share its fate (the
 * receiver rolls the whole request back on its first CancelNotif). A
 * CancelNotif waits until no rank writes; a cancel aborts every rank,
 * reaches ranks that completed, and is remembered for ranks not seen yet.
 * Randomized interleavings of the same rules are in test_tx_random.c.
 */
#include "tx_fixture.h"

/* Two ranks of one request, 2 chunks each, one agent, one peer. */
static const struct fx_req R0 = { "req-r", 0, 2, 2, 7, 3 };
static const struct fx_req R1 = { "req-r", 1, 2, 2, 7, 3 };

static uint32_t agent_events(const struct fx *f, uint32_t rank, int32_t status)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < f->nev; i++)
		n += f->ev[i].type == EV_AGENT && f->ev[i].rank == rank &&
		     f->ev[i].status == status;
	return n;
}

/* Rank 1 cancelled while both ranks have writes in flight: no CancelNotif
 * until the last write of either rank completed; then both ranks end. */
static void test_cancel_waits_for_every_rank_writes(void **state)
{
	struct fx *f = *state;
	uint64_t s0, s1;

	assert_int_equal(fx_put(f, &R0, 2, 1), 0);
	s0 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s0), 0);
	assert_int_equal(fx_put(f, &R1, 1, 0), 0);
	s1 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	assert_int_equal(fx_cancel(f, R1.id, R1.rank), 2); /* both ranks aborted */
	assert_int_equal(fx_done(f, s1, 0), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 0);        /* rank 0 still writing */
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_done(f, s0, 0), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 2);
	assert_int_equal(agent_events(f, 0, -ECANCELED), 1);
	assert_int_equal(agent_events(f, 1, -ECANCELED), 1);
	assert_int_equal(fx_stats(f).live_requests, 0);
	fx_all_freed(f);
	fx_ok(f);
}

/* Rank 0 completed, rank 1 never seen, then cancelled: the receiver still
 * waits for rank 1, so rank 0's CancelNotif goes out; rank 1's declaration
 * is refused with one PUT_FAILED -ECANCELED (no Reserve), a batch of it
 * then silently (-ECANCELED, staging freed). */
static void test_cancel_reaches_completed_and_unseen_ranks(void **state)
{
	struct fx *f = *state;
	uint64_t s0;

	assert_int_equal(fx_put(f, &R0, 2, 1), 0);
	s0 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s0), 0);
	assert_int_equal(fx_done(f, s0, 0), 0);
	assert_int_equal(agent_events(f, 0, 0), 1);        /* PUT_DONE */
	assert_int_equal(fx_cancel(f, R1.id, R1.rank), 0); /* nothing live */
	assert_int_equal(fx_count(f, EV_CANCEL), 1);
	assert_int_equal(fx_last(f, EV_CANCEL)->rank, 0);
	assert_int_equal(fx_put(f, &R1, 1, 0), -ECANCELED); /* at its declaration */
	assert_int_equal(agent_events(f, 1, -ECANCELED), 1);
	assert_int_equal(fx_put(f, &R1, 1, 1), -ECANCELED);
	assert_int_equal(agent_events(f, 1, -ECANCELED), 1); /* told once */
	assert_int_equal(fx_count(f, EV_ALLOC), 1);          /* rank 1 never asked */
	assert_int_equal(fx_count(f, EV_RESERVE), 1);        /* nor reserved */
	fx_all_freed(f);
	fx_ok(f);
}

/* Every rank completed: a late cancel has nothing to undo at the receiver. */
static void test_cancel_after_every_rank_completed_sends_nothing(void **state)
{
	struct fx *f = *state;
	const struct fx_req *r[2] = { &R0, &R1 };

	for (int i = 0; i < 2; i++) {
		assert_int_equal(fx_put(f, r[i], 2, 1), 0);
		assert_int_equal(fx_grant(f, fx_last_seq(f)), 0);
		assert_int_equal(fx_done(f, fx_last_seq(f), 0), 0);
	}
	assert_int_equal(fx_cancel(f, R0.id, R0.rank), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 0);
	assert_int_equal(agent_events(f, 0, 0) + agent_events(f, 1, 0), 2);
	fx_all_freed(f);
	fx_ok(f);
}

/* One rank fails (its write): the receiver will roll the whole request
 * back, so the other rank fails with it; the CancelNotif waits for the
 * other's writes in flight, and the other's rank gets PUT_FAILED too. */
static void test_failure_of_one_rank_fails_the_other_after_its_writes(void **state)
{
	struct fx *f = *state;
	uint64_t s0, s1;

	assert_int_equal(fx_put(f, &R0, 2, 1), 0);
	s0 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s0), 0);
	assert_int_equal(fx_put(f, &R1, 2, 1), 0);
	s1 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	assert_int_equal(fx_done(f, s1, -EIO), 0);         /* rank 1 fails */
	assert_int_equal(fx_count(f, EV_CANCEL), 0);        /* rank 0 still writing */
	assert_int_equal(fx_done(f, s0, 0), 0);             /* rank 0's writes end */
	assert_int_equal(agent_events(f, 0, -EIO), 1);
	assert_int_equal(agent_events(f, 1, -EIO), 1);
	assert_true(fx_count(f, EV_CANCEL) >= 1);
	assert_int_equal(fx_stats(f).live_requests, 0);
	fx_all_freed(f);
	fx_ok(f);
}

/* One rank fails while the other's AllocRequest waits for its grant: the
 * other is aborted at once (its batch dropped, staging freed), and a grant
 * arriving after the CancelNotif is never written (the receiver may have
 * given that slot to another request by then). */
static void test_failure_drops_the_other_ranks_ungranted_batch(void **state)
{
	struct fx *f = *state;
	uint64_t s0, s1;
	uint32_t writes;

	assert_int_equal(fx_put(f, &R0, 2, 1), 0);
	s0 = fx_last_seq(f);
	assert_int_equal(fx_put(f, &R1, 2, 1), 0);
	s1 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	assert_int_equal(fx_done(f, s1, -EIO), 0);         /* rank 1 fails, rank 0 ungranted */
	assert_true(fx_count(f, EV_CANCEL) >= 1);           /* nothing writes: at once */
	writes = fx_count(f, EV_WRITE);
	assert_int_equal(fx_grant(f, s0), -ENOENT);          /* late grant: stale */
	assert_int_equal(fx_count(f, EV_WRITE), writes);     /* never written */
	assert_int_equal(agent_events(f, 0, -EIO), 1);
	assert_int_equal(agent_events(f, 1, -EIO), 1);
	fx_all_freed(f);
	fx_ok(f);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_cancel_waits_for_every_rank_writes),
		T(test_cancel_reaches_completed_and_unseen_ranks),
		T(test_cancel_after_every_rank_completed_sends_nothing),
		T(test_failure_of_one_rank_fails_the_other_after_its_writes),
		T(test_failure_drops_the_other_ranks_ungranted_batch),
	};

	return cmocka_run_group_tests_name("tx_ranks", tests, NULL, NULL);
}
