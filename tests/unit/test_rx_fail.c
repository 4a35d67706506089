/* SPDX-License-Identifier: MIT */
/* Receiver engine: failures, cancels, dedup, deadlines, gangs. Each
 * scenario is named after what it proves. */
#include "rx_fixture.h"



static int32_t last_failure(struct rx_fx *f)
{
	assert_true(f->nfailed > 0);
	return f->failed_err[(f->nfailed - 1) % RX_MAX_LOG];
}

/* A late batch of a request that ended is refused by its tombstone. */
static void assert_tombstoned(struct rx_fx *f, const char *req, uint64_t seq)
{
	struct rxf_batch late = { .req = req, .peer = 1, .seq = seq, .n = 1, .total = 8,
				  .first = 7 };

	assert_int_equal(rxf_alloc(f, &late), 0);
	assert_int_equal(rxf_got(f, 1, seq)->err, -ECANCELED);
}

/* ---- protocol violations and batch failure roll back everything -------------- */

static void test_more_chunks_than_declared_rolls_back(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a1 = { .req = "A", .peer = 1, .seq = 1, .n = 4, .total = 5 };
	struct rxf_batch a2 = { .req = "A", .peer = 1, .seq = 2, .n = 4, .total = 5,
				.first = 4 };

	rxf_batch_ok(f, &a1);
	assert_int_equal(rxf_alloc(f, &a2), 0);
	assert_int_equal(rxf_got(f, 1, 2)->err, -EPROTO);
	assert_int_equal(last_failure(f), -EPROTO);
	assert_int_equal(rxf_stats(f).proto_errors, 1);
	rxf_assert_empty(f);
	assert_tombstoned(f, "A", 3);
}

static void test_short_last_batch_and_changed_total_are_violations(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "A", .peer = 1, .seq = 1, .n = 2, .total = 5,
			       .is_last = 1 };
	struct rxf_batch b1 = { .req = "B", .peer = 1, .seq = 2, .n = 2, .total = 5 };
	struct rxf_batch b2 = { .req = "B", .peer = 1, .seq = 3, .n = 2, .total = 6,
				.first = 2 };

	assert_int_equal(rxf_alloc(f, &a), 0);
	assert_int_equal(rxf_got(f, 1, 1)->err, -EPROTO);
	rxf_batch_ok(f, &b1);
	assert_int_equal(rxf_alloc(f, &b2), 0);
	assert_int_equal(rxf_got(f, 1, 3)->err, -EPROTO);
	assert_int_equal(f->nfailed, 2);
	rxf_assert_empty(f);
}

/* The second batch cannot get slots (taken behind the engine's back): the
 * whole request, first batch included, is rolled back. */
static void test_batch_failure_rolls_back_earlier_batches(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a1 = { .req = "A", .peer = 1, .seq = 1, .n = 3, .total = 6 };
	struct rxf_batch a2 = { .req = "A", .peer = 1, .seq = 2, .n = 3, .total = 6,
				.first = 3, .is_last = 1 };
	struct pd_pool_who thief = { .owner = 99, .pid = 1, .tag = 1, .state = PD_SLOT_LOANED };
	pd_slot_ref stolen[7];

	rxf_batch_ok(f, &a1);
	assert_int_equal(pd_pool_alloc(&f->pool, &thief, 7, 0, stolen), 0);
	assert_int_equal(rxf_alloc(f, &a2), 0);
	assert_int_equal(rxf_got(f, 1, 2)->err, -ENOBUFS);
	assert_int_equal(last_failure(f), -ENOBUFS);
	assert_int_equal(rxf_stats(f).grant_errors, 1);
	assert_int_equal(pd_pool_nfree(&f->pool), 3); /* A's first batch came back */
	assert_int_equal(pd_pool_free(&f->pool, stolen, 7), 0);
	rxf_assert_empty(f);
}

static void test_putdone_for_foreign_slot_rolls_back(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "A", .peer = 1, .seq = 1, .n = 2, .total = 2,
			       .is_last = 1 };
	int32_t bogus[1];

	assert_int_equal(rxf_alloc(f, &a), 0);
	bogus[0] = (rxf_got(f, 1, 1)->remote[0] + 5) % 10;
	/* From the wrong peer: A is rolled back. */
	assert_int_equal(pd_rx_put_done(f->rx, 1, (const uint8_t *)"A", 1, bogus, 1, f->now),
			 -EPROTO);
	assert_int_equal(last_failure(f), -EPROTO);
	rxf_assert_empty(f);
	/* Once it is gone, a PutDone is merely late. */
	assert_int_equal(pd_rx_put_done(f->rx, 1, (const uint8_t *)"A", 1, bogus, 1, f->now),
			 -ENOENT);
	assert_int_equal(rxf_stats(f).late_putdone, 1);
}

static void test_same_key_twice_in_a_request_is_a_violation(void **state)
{
	struct rx_fx *f = *state;
	struct pd_rx_key k[2] = { { (const uint8_t *)"dup", 3 }, { (const uint8_t *)"dup", 3 } };
	struct pd_rx_alloc a = { .peer = 1, .seq = 1, .req_id = (const uint8_t *)"A",
				 .req_id_len = 1, .nkeys = 2, .keys = k, .total_chunks = 4,
				 .world_size = 1 };

	assert_int_equal(pd_rx_alloc(f->rx, &a, f->now), 0);
	assert_int_equal(rxf_got(f, 1, 1)->err, -EPROTO);
	rxf_assert_empty(f);
	/* Across batches of one request too. */
	a.req_id = (const uint8_t *)"B", a.nkeys = 1, a.seq = 2;
	assert_int_equal(pd_rx_alloc(f->rx, &a, f->now), 0);
	assert_int_equal(rxf_got(f, 1, 2)->err, 0);
	a.seq = 3;
	assert_int_equal(pd_rx_alloc(f->rx, &a, f->now), 0);
	assert_int_equal(rxf_got(f, 1, 3)->err, -EPROTO);
	assert_int_equal(rxf_stats(f).proto_errors, 2);
	rxf_assert_empty(f);
}

/* ---- deadlines ------------------------------------------------------------------- */

static void test_admission_timeout_fails_the_waiter_only(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "A", .peer = 1, .seq = 1, .n = 8, .total = 8,
			       .is_last = 1 };
	struct rxf_batch b = { .req = "B", .peer = 1, .seq = 2, .n = 8, .total = 8,
			       .is_last = 1 };

	rxf_batch_ok(f, &a);
	assert_int_equal(rxf_alloc(f, &b), 1);
	f->now += RXF_ADMIT_NS - 1;
	assert_int_equal(pd_rx_tick(f->rx, f->now), 0);
	f->now += 1;
	assert_int_equal(pd_rx_tick(f->rx, f->now), 1);
	assert_int_equal(rxf_got(f, 1, 2)->err, -ETIMEDOUT);
	assert_int_equal(last_failure(f), -ETIMEDOUT);
	assert_int_equal(pd_rx_admit(f->rx)->stats.timed_out, 1);
	assert_int_equal(rxf_release(f, "A"), 0);
	rxf_assert_empty(f);
}

static void test_ttl_reclaims_unconsumed_ready_request(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "A", .peer = 1, .seq = 1, .n = 3, .total = 3,
			       .is_last = 1 };

	rxf_batch_ok(f, &a);
	assert_int_equal(f->nready, 1);
	f->now += RXF_TTL_NS;
	assert_int_equal(pd_rx_tick(f->rx, f->now), 1);
	assert_int_equal(rxf_stats(f).ttl_reclaimed, 1);
	assert_int_equal(rxf_release(f, "A"), -ENOENT);
	rxf_assert_empty(f);
	/* The tombstone expires too. */
	f->now += RXF_TOMB_NS;
	assert_int_equal(pd_rx_tick(f->rx, f->now), 0);
	assert_int_equal(rxf_stats(f).live_requests, 0);
	rxf_batch_ok(f, &a); /* the same req_id is usable again */
	assert_int_equal(rxf_release(f, "A"), 0);
}

/* ---- cancel at every stage ----------------------------------------------------------- */

enum stage { WAITING, PARTLY_GRANTED, FULLY_GRANTED, PARTLY_COMMITTED, READY };

static void drive_to(struct rx_fx *f, enum stage st)
{
	struct rxf_batch blocker = { .req = "X", .peer = 1, .seq = 100, .n = 8, .total = 8,
				     .is_last = 1 };
	struct rxf_batch a1 = { .req = "A", .peer = 1, .seq = 1, .n = 3, .total = 6 };
	struct rxf_batch a2 = { .req = "A", .peer = 1, .seq = 2, .n = 3, .total = 6,
				.first = 3, .is_last = 1 };

	if (st == WAITING) {
		rxf_batch_ok(f, &blocker);
		assert_int_equal(rxf_alloc(f, &a1), 1);
		return;
	}
	assert_int_equal(rxf_alloc(f, &a1), 0);
	if (st >= FULLY_GRANTED)
		assert_int_equal(rxf_alloc(f, &a2), 0);
	if (st >= PARTLY_COMMITTED)
		assert_int_equal(rxf_put_done(f, "A", rxf_got(f, 1, 1)), 0);
	if (st == READY)
		assert_int_equal(rxf_put_done(f, "A", rxf_got(f, 1, 2)), 0);
}

static void cancel_at(enum stage st)
{
	struct rx_fx *f = rxf_create(10, 64);

	drive_to(f, st);
	assert_int_equal(f->nready, st == READY || st == WAITING); /* A, or blocker X */
	assert_int_equal(rxf_cancel(f, "A"), 1);
	assert_int_equal(last_failure(f), -ECANCELED);
	assert_int_equal(rxf_cancel(f, "A"), 0); /* harmless twice */
	if (st == WAITING) {
		assert_int_equal(rxf_got(f, 1, 1)->err, -ECANCELED); /* held batch answered */
		assert_int_equal(rxf_release(f, "X"), 0);
	}
	assert_int_equal(rxf_stats(f).cancelled, 1);
	rxf_assert_empty(f);
	assert_tombstoned(f, "A", 50);
	rxf_destroy(f);
}

static void test_cancel_at_every_stage_leaves_nothing(void **state)
{
	(void)state;
	for (enum stage st = WAITING; st <= READY; st++)
		cancel_at(st);
}

/* ---- dedup ------------------------------------------------------------------------------- */

static void test_dedup_pins_and_reports_already_sent(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "A", .keys = "K", .peer = 1, .seq = 1, .n = 3,
			       .total = 3, .is_last = 1 };
	struct rxf_batch b = { .req = "B", .keys = "K", .peer = 2, .seq = 1, .n = 3,
			       .total = 3, .is_last = 1 };
	const struct rx_reply *rb;

	rxf_batch_ok(f, &a);
	assert_int_equal(rxf_alloc(f, &b), 0);
	rb = rxf_got(f, 2, 1);
	assert_int_equal(rb->err, 0);
	assert_int_equal(rb->nalready, 3);
	assert_int_equal(f->nready, 2);           /* nothing to write: READY at once */
	assert_int_equal(pd_pool_nfree(&f->pool), 7); /* no new slot */
	assert_int_equal(rxf_release(f, "A"), 0);
	assert_int_equal(pd_pool_nfree(&f->pool), 7); /* B still holds them */
	assert_int_equal(rxf_release(f, "B"), 0);
	rxf_assert_empty(f);
}

/* B pins A's key before A writes it; A is cancelled: B cannot complete. */
static void test_writer_failure_fails_the_pinner(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "A", .keys = "K", .peer = 1, .seq = 1, .n = 2,
			       .total = 2, .is_last = 1 };
	struct rxf_batch b = { .req = "B", .keys = "K", .peer = 2, .seq = 1, .n = 2,
			       .total = 2, .is_last = 1 };

	assert_int_equal(rxf_alloc(f, &a), 0);
	assert_int_equal(rxf_alloc(f, &b), 0);
	assert_int_equal(rxf_got(f, 2, 1)->nalready, 2);
	assert_int_equal(f->nready, 0);
	assert_int_equal(rxf_cancel(f, "A"), 1);
	assert_int_equal(f->nfailed, 2);
	assert_int_equal(last_failure(f), -EPIPE);
	rxf_assert_empty(f);
	/* The key is free again: a new writer gets a fresh slot. */
	b.req = "C", b.seq = 2;
	rxf_batch_ok(f, &b);
	assert_int_equal(rxf_release(f, "C"), 0);
	rxf_assert_empty(f);
}

/* ---- gangs, peers, anonymous requests ----------------------------------------------------- */

static void test_gang_of_two_ranks_reserves_once(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch r0 = { .req = "G", .peer = 1, .seq = 1, .n = 4, .total = 4,
				.world_size = 2, .rank = 0, .is_last = 1 };
	struct rxf_batch r1 = { .req = "G", .peer = 1, .seq = 2, .n = 4, .total = 4,
				.world_size = 2, .rank = 1, .is_last = 1 };
	struct rxf_batch other = { .req = "O", .peer = 1, .seq = 3, .n = 3, .total = 3,
				   .is_last = 1 };

	rxf_batch_ok(f, &r0);
	assert_int_equal(pd_rx_admit(f->rx)->outstanding, 4); /* rank 1's share kept */
	assert_int_equal(rxf_alloc(f, &other), 1);            /* 10 - 8 < 3 */
	assert_int_equal(f->nready, 0);
	rxf_batch_ok(f, &r1);
	assert_int_equal(pd_rx_admit(f->rx)->stats.admitted, 1);
	assert_int_equal(f->nready, 1);
	assert_int_equal(rxf_release(f, "G"), 0);
	assert_int_equal(rxf_got(f, 1, 3)->err, 0);
	rxf_check(f);
}

static void test_peer_failure_rolls_back_incomplete_only(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch done = { .req = "D", .peer = 1, .seq = 1, .n = 2, .total = 2,
				  .is_last = 1 };
	struct rxf_batch part = { .req = "P", .peer = 1, .seq = 2, .n = 2, .total = 4 };
	struct rxf_batch other = { .req = "O", .peer = 2, .seq = 1, .n = 2, .total = 4 };

	rxf_batch_ok(f, &done);
	rxf_batch_ok(f, &part);
	rxf_batch_ok(f, &other);
	assert_int_equal(pd_rx_peer_failed(f->rx, 1, f->now), 1);
	assert_int_equal(last_failure(f), -ENOTCONN);
	assert_int_equal(rxf_release(f, "D"), 0); /* READY data stays usable */
	assert_int_equal(rxf_cancel(f, "O"), 1);
	rxf_assert_empty(f);
}

static void test_empty_req_id_is_a_request_of_its_own(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "", .keys = "anon", .peer = 1, .seq = 1, .n = 3 };
	struct rxf_batch b = { .req = "", .keys = "other", .peer = 1, .seq = 2, .n = 2 };

	rxf_batch_ok(f, &a);
	rxf_batch_ok(f, &b);
	assert_int_equal(f->nready, 2);
	assert_int_equal(pd_pool_nfree(&f->pool), 5);
	f->now += RXF_TTL_NS; /* nobody can release them by name: the ttl does */
	assert_int_equal(pd_rx_tick(f->rx, f->now), 2);
	rxf_assert_empty(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, rxf_setup10, rxf_teardown)
		T(test_more_chunks_than_declared_rolls_back),
		T(test_short_last_batch_and_changed_total_are_violations),
		T(test_batch_failure_rolls_back_earlier_batches),
		T(test_putdone_for_foreign_slot_rolls_back),
		T(test_same_key_twice_in_a_request_is_a_violation),
		T(test_admission_timeout_fails_the_waiter_only),
		T(test_ttl_reclaims_unconsumed_ready_request),
		cmocka_unit_test(test_cancel_at_every_stage_leaves_nothing),
		T(test_dedup_pins_and_reports_already_sent),
		T(test_writer_failure_fails_the_pinner),
		T(test_gang_of_two_ranks_reserves_once),
		T(test_peer_failure_rolls_back_incomplete_only),
		T(test_empty_req_id_is_a_request_of_its_own),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
