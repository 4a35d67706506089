/* SPDX-License-Identifier: MIT */
/* Receiver engine: each scenario is named after what it proves. */
#include "rx_fixture.h"



/* ---- negative cases ------------------------------------------------------------ */

static void test_create_rejects_bad_opts(void **state)
{
	struct rx_fx *f = *state;
	struct pd_rx_ops no_ready = { .reply = rxf_reply, .failed = rxf_failed };
	struct pd_rx_opts o = { .pool = &f->pool, .index = &f->index, .ops = &rxf_ops,
				.max_requests = 1 };
	struct pd_rx *rx = NULL;

	assert_int_equal(pd_rx_create(NULL, &rx), -EINVAL);
	assert_int_equal(pd_rx_create(&o, NULL), -EINVAL);
	o.ops = &no_ready;
	assert_int_equal(pd_rx_create(&o, &rx), -EINVAL);
	o.ops = &rxf_ops;
	o.pool = NULL;
	assert_int_equal(pd_rx_create(&o, &rx), -EINVAL);
	o.pool = &f->pool;
	o.max_requests = 0;
	assert_int_equal(pd_rx_create(&o, &rx), -EINVAL);
	assert_null(rx);
	pd_rx_destroy(NULL);
}

static void test_malformed_alloc_is_answered_with_einval(void **state)
{
	struct rx_fx *f = *state;
	struct pd_rx_key k = { .p = (const uint8_t *)"k", .len = 1 };
	struct pd_rx_key empty = { .p = (const uint8_t *)"", .len = 0 };
	uint8_t big[PD_KEY_MAX + 1] = { 0 };
	struct pd_rx_key longk = { .p = big, .len = sizeof(big) };
	struct pd_rx_alloc a = { .peer = 1, .seq = 9, .req_id = (const uint8_t *)"r",
				 .req_id_len = 1, .nkeys = 1, .keys = &k, .total_chunks = 1,
				 .world_size = 1, .is_last = 1 };
	struct pd_rx_alloc bad;

	assert_int_equal(pd_rx_alloc(f->rx, NULL, 0), -EINVAL);
	bad = a, bad.world_size = 0;
	assert_int_equal(pd_rx_alloc(f->rx, &bad, 0), -EINVAL);
	bad = a, bad.rank = 1;
	assert_int_equal(pd_rx_alloc(f->rx, &bad, 0), -EINVAL);
	bad = a, bad.keys = &empty;
	assert_int_equal(pd_rx_alloc(f->rx, &bad, 0), -EINVAL);
	bad = a, bad.keys = &longk;
	assert_int_equal(pd_rx_alloc(f->rx, &bad, 0), -EINVAL);
	bad = a, bad.req_id_len = PD_REQ_ID_MAX + 1;
	assert_int_equal(pd_rx_alloc(f->rx, &bad, 0), -EINVAL);
	bad = a, bad.nkeys = PD_RX_MAX_BATCH + 1;
	assert_int_equal(pd_rx_alloc(f->rx, &bad, 0), -EINVAL);
	assert_int_equal(f->nreplies, 6);
	assert_int_equal(rxf_last(f)->err, -EINVAL);
	rxf_assert_empty(f);
}

static void test_immediate_rejections(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch zero = { .req = "z", .seq = 1, .n = 1, .total = 0 };
	struct rxf_batch big = { .req = "b", .seq = 2, .n = 1, .total = 11, .is_last = 0 };
	struct rxf_batch gang = { .req = "g", .seq = 3, .n = 1, .total = 6, .world_size = 2 };

	assert_int_equal(rxf_alloc(f, &zero), 0);
	assert_int_equal(rxf_last(f)->err, -EINVAL);
	assert_int_equal(rxf_alloc(f, &big), 0);
	assert_int_equal(rxf_last(f)->err, -E2BIG);
	assert_int_equal(rxf_alloc(f, &gang), 0); /* 6 x 2 > 10 */
	assert_int_equal(rxf_last(f)->err, -E2BIG);
	assert_int_equal(rxf_stats(f).rejected_zero, 1);
	assert_int_equal(rxf_stats(f).rejected_big, 2);
	rxf_assert_empty(f);
}

static void test_too_many_requests_is_ebusy(void **state)
{
	struct rx_fx *f = rxf_create(10, 2);
	struct rxf_batch b = { .req = "a", .seq = 1, .n = 1, .total = 2 };

	(void)state;
	assert_int_equal(rxf_alloc(f, &b), 0);
	b.req = "b", b.seq = 2;
	assert_int_equal(rxf_alloc(f, &b), 0);
	b.req = "c", b.seq = 3;
	assert_int_equal(rxf_alloc(f, &b), 0);
	assert_int_equal(rxf_last(f)->err, -EBUSY);
	assert_int_equal(rxf_stats(f).rejected_busy, 1);
	rxf_destroy(f);
}

/* ---- the seed's scenarios -------------------------------------------------------- */

/* Pool 10, A=8 and B=8 in batches of 4, interleaved: B waits (its batches
 * are held, not answered), A completes, is released, then B runs. */
static void test_seed_b_waits_until_a_released(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a1 = { .req = "A", .peer = 1, .seq = 1, .n = 4, .total = 8 };
	struct rxf_batch b1 = { .req = "B", .peer = 1, .seq = 2, .n = 4, .total = 8 };
	struct rxf_batch a2 = { .req = "A", .peer = 1, .seq = 3, .n = 4, .total = 8,
				.first = 4, .is_last = 1 };
	struct rxf_batch b2 = { .req = "B", .peer = 1, .seq = 4, .n = 4, .total = 8,
				.first = 4, .is_last = 1 };

	rxf_batch_ok(f, &a1);
	assert_int_equal(rxf_alloc(f, &b1), 1);
	rxf_batch_ok(f, &a2);
	assert_int_equal(rxf_alloc(f, &b2), 1);
	assert_null(rxf_reply_for(f, 1, 2));
	assert_int_equal(f->nready, 1);
	assert_int_equal(rxf_stats(f).waiting_requests, 1);
	assert_int_equal(rxf_release(f, "A"), 0);
	/* B admitted: both held batches answered, in order. */
	assert_int_equal(rxf_got(f, 1, 2)->err, 0);
	assert_int_equal(rxf_got(f, 1, 4)->err, 0);
	assert_int_equal(rxf_put_done(f, "B", rxf_got(f, 1, 2)), 0);
	assert_int_equal(rxf_put_done(f, "B", rxf_got(f, 1, 4)), 0);
	assert_int_equal(f->nready, 2);
	assert_int_equal(rxf_release(f, "B"), 0);
	rxf_assert_empty(f);
}

/* A decode group of 3 tensor-parallel ranks consumes a request when each
 * rank has released it: the first two releases free nothing (the third
 * rank still reads its chunks), a rank twice counts once, the third frees
 * it, and then the request is gone for everyone. */
static void test_group_release_waits_for_every_rank(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "A", .peer = 1, .seq = 1, .n = 4, .total = 4,
			       .is_last = 1 };
	const uint8_t *id = (const uint8_t *)"A";

	rxf_batch_ok(f, &a);
	assert_int_equal(f->nready, 1);
	assert_int_equal(pd_rx_release(f->rx, id, 1, 0, 3, f->now), 0);
	assert_int_equal(pd_rx_release(f->rx, id, 1, 0, 3, f->now), 0);
	assert_int_equal(pd_rx_release(f->rx, id, 1, 2, 3, f->now), 0);
	assert_int_equal(rxf_stats(f).released, 0);
	assert_int_equal(rxf_stats(f).release_waits, 3);
	assert_int_equal(pd_pool_nfree(&f->pool), f->nslots - 4);
	assert_int_equal(pd_rx_release(f->rx, id, 1, 1, 3, f->now), 0);
	assert_int_equal(rxf_stats(f).released, 1);
	assert_int_equal(pd_rx_release(f->rx, id, 1, 1, 3, f->now), -ENOENT);
	rxf_assert_empty(f);
}

/* A rank out of its group's range, or a group of one, frees at once. */
static void test_release_without_group_frees_at_once(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "A", .peer = 1, .seq = 1, .n = 2, .total = 2,
			       .is_last = 1 };
	struct rxf_batch b = { .req = "B", .peer = 1, .seq = 2, .n = 2, .total = 2,
			       .is_last = 1 };

	rxf_batch_ok(f, &a);
	rxf_batch_ok(f, &b);
	assert_int_equal(pd_rx_release(f->rx, (const uint8_t *)"A", 1, 5, 2, f->now), 0);
	assert_int_equal(pd_rx_release(f->rx, (const uint8_t *)"B", 1, 0, 65, f->now), 0);
	assert_int_equal(rxf_stats(f).released, 2);
	rxf_assert_empty(f);
}

/* 2P1D: pool 20, A=10 from peer 1, B=10 from peer 2: no waiting at all. */
static void test_2p1d_both_admitted_at_once(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a = { .req = "A", .peer = 1, .seq = 1, .n = 10, .total = 10,
			       .is_last = 1 };
	struct rxf_batch b = { .req = "B", .peer = 2, .seq = 1, .n = 10, .total = 10,
			       .is_last = 1 };

	rxf_batch_ok(f, &a);
	rxf_batch_ok(f, &b);
	assert_int_equal(pd_rx_admit(f->rx)->stats.admitted_at_once, 2);
	assert_int_equal(pd_rx_admit(f->rx)->stats.wait_ns, 0);
	assert_int_equal(f->nready, 2);
	assert_int_equal(rxf_release(f, "A"), 0);
	assert_int_equal(rxf_release(f, "B"), 0);
	rxf_assert_empty(f);
}

/* One sender: A's second batch arrives after B's first, which waits; A
 * still gets its grant (no per-receiver lock held across B's wait). */
static void test_one_sender_b_between_a_batches(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a1 = { .req = "A", .peer = 1, .seq = 1, .n = 4, .total = 8 };
	struct rxf_batch b1 = { .req = "B", .peer = 1, .seq = 2, .n = 8, .total = 8,
				.is_last = 1 };
	struct rxf_batch a2 = { .req = "A", .peer = 1, .seq = 3, .n = 4, .total = 8,
				.first = 4, .is_last = 1 };

	rxf_batch_ok(f, &a1);
	assert_int_equal(rxf_alloc(f, &b1), 1);
	rxf_batch_ok(f, &a2);
	assert_int_equal(rxf_release(f, "A"), 0);
	assert_int_equal(rxf_put_done(f, "B", rxf_got(f, 1, 2)), 0);
	assert_int_equal(rxf_release(f, "B"), 0);
	rxf_assert_empty(f);
}

/* FIFO: a stream of 1-chunk requests cannot overtake a waiting 9-chunk one. */
static void test_fifo_small_requests_do_not_overtake(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch hold = { .req = "H", .peer = 1, .seq = 1, .n = 2, .total = 2,
				  .is_last = 1 };
	struct rxf_batch big = { .req = "W", .peer = 1, .seq = 2, .n = 9, .total = 9,
				 .is_last = 1 };
	char name[8];

	rxf_batch_ok(f, &hold);
	assert_int_equal(rxf_alloc(f, &big), 1);
	for (uint32_t i = 0; i < 5; i++) {
		struct rxf_batch s = { .req = name, .peer = 1, .seq = 10 + i, .n = 1,
				       .total = 1, .is_last = 1 };

		(void)snprintf(name, sizeof(name), "s%u", i);
		assert_int_equal(rxf_alloc(f, &s), 1); /* fits, but W is first */
	}
	assert_int_equal(rxf_stats(f).waiting_requests, 6);
	assert_int_equal(rxf_release(f, "H"), 0);
	/* W (9) and then s0 (1) fit in 10; the rest still wait. */
	assert_int_equal(rxf_got(f, 1, 2)->err, 0);
	assert_int_equal(rxf_got(f, 1, 10)->err, 0);
	assert_null(rxf_reply_for(f, 1, 11));
	assert_int_equal(rxf_stats(f).waiting_requests, 4);
	rxf_check(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn, setup) cmocka_unit_test_setup_teardown(fn, setup, rxf_teardown)
		T(test_create_rejects_bad_opts, rxf_setup10),
		T(test_malformed_alloc_is_answered_with_einval, rxf_setup10),
		T(test_immediate_rejections, rxf_setup10),
		cmocka_unit_test(test_too_many_requests_is_ebusy),
		T(test_seed_b_waits_until_a_released, rxf_setup10),
		T(test_group_release_waits_for_every_rank, rxf_setup10),
		T(test_release_without_group_frees_at_once, rxf_setup10),
		T(test_2p1d_both_admitted_at_once, rxf_setup20),
		T(test_one_sender_b_between_a_batches, rxf_setup10),
		T(test_fifo_small_requests_do_not_overtake, rxf_setup10),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
