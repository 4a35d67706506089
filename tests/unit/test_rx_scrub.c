/* SPDX-License-Identifier: MIT */
/*
 * The recv pool's shared copy damaged by someone else's writes: the
 * receiver engine notices (a slot it holds handed out again; descriptors or
 * a waiter that disagree with its records, at the periodic check), repairs
 * the copy from its records and counts it; it never asserts, never gives a
 * slot twice, and the requests it holds complete.
 */
#include "rx_fixture.h"

static const struct rx_reply *grant(struct rx_fx *f, const char *req, uint32_t peer,
				    uint32_t n)
{
	struct rxf_batch b = { .req = req, .peer = peer, .seq = 1, .n = n, .total = n,
			       .is_last = 1 };

	assert_int_equal(rxf_alloc(f, &b), 0);
	return rxf_got(f, peer, 1);
}

/* A slot request A holds, marked FREE and pushed back on the free stack. */
static void steal(struct rx_fx *f, uint32_t slot)
{
	atomic_store(&f->pool.desc[slot].state, PD_SLOT_FREE);
	f->pool.free_stack[f->pool.shm->nfree++] = slot;
}

static void test_slot_in_use_handed_out_again(void **state)
{
	struct rx_fx *f = rxf_create(8, 64);
	const struct rx_reply *a;
	struct rx_reply ra;

	(void)state;
	a = grant(f, "A", 1, 2);
	assert_int_equal(a->err, 0);
	ra = *a;
	steal(f, (uint32_t)ra.remote[0]);
	a = grant(f, "B", 2, 6);                      /* the stolen one on top of the stack */
	assert_int_equal(a->err, -EIO);
	assert_int_equal(rxf_stats(f).pool_repairs, 1);
	assert_int_equal(pd_pool_nfree(&f->pool), 6);  /* A's two held, nothing else */
	assert_int_equal(rxf_put_done(f, "A", &ra), 0);
	assert_int_equal(pd_rx_state(f->rx, (const uint8_t *)"A", 1, NULL, NULL), PD_RX_READY);
	assert_int_equal(rxf_release(f, "A"), 0);
	rxf_check(f);
	f->now += RXF_TOMB_NS + 1;
	(void)pd_rx_tick(f->rx, f->now);
	rxf_assert_empty(f);
	rxf_destroy(f);
}

static void tick_a_second(struct rx_fx *f)
{
	for (int i = 0; i < 10; i++) {
		f->now += 100 * 1000 * 1000;
		(void)pd_rx_tick(f->rx, f->now);
	}
}

/* Descriptors that lie and a waiter nobody is: found by the periodic
 * check within a second, repaired; grants go on, A completes. */
static void test_periodic_check_repairs(void **state)
{
	struct rx_fx *f = rxf_create(8, 64);
	const struct rx_reply *a;
	struct rx_reply ra;

	(void)state;
	a = grant(f, "A", 1, 2);
	ra = *a;
	atomic_store(&f->pool.desc[ra.remote[1]].state, PD_SLOT_FREE);
	f->pool.desc[ra.remote[0]].gen += 5;
	f->pool.shm->waiters[0] = (struct pd_pool_waiter){ .ticket = 1, .n = 1, .pid = 1,
							   .seen_ns = UINT64_MAX };
	f->pool.shm->nwaiters = 1;
	tick_a_second(f);
	assert_int_equal(rxf_stats(f).pool_repairs, 1);
	assert_int_equal(f->pool.shm->nwaiters, 0);
	assert_int_equal(grant(f, "B", 2, 6)->err, 0);  /* all the rest, none of A's */
	assert_int_equal(rxf_put_done(f, "A", &ra), 0);
	assert_int_equal(pd_rx_state(f->rx, (const uint8_t *)"A", 1, NULL, NULL), PD_RX_READY);
	tick_a_second(f);
	assert_int_equal(rxf_stats(f).pool_repairs, 1); /* nothing more to repair */
	rxf_check(f);
	rxf_destroy(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slot_in_use_handed_out_again),
		cmocka_unit_test(test_periodic_check_repairs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
