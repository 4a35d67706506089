/* SPDX-License-Identifier: MIT */
/*
 * Per-peer shares of the receiver engine: the fair share of requests and a
 * fixed cap of slots, each refused -EBUSY and counted; admission fair
 * between peers, so one peer's backlog does not hold another back; and
 * expiry done in slices of PD_RX_TICK_BUDGET.
 */
#include "rx_fixture.h"

static int batch(struct rx_fx *f, const char *req, uint32_t peer, uint64_t seq, uint32_t n)
{
	struct rxf_batch b = { .req = req, .peer = peer, .seq = seq, .n = n, .total = n,
			       .is_last = 1 };

	return rxf_alloc(f, &b);
}

/* err of the answer to (peer, seq); 1 when none came yet. */
static int32_t answer(struct rx_fx *f, uint32_t peer, uint64_t seq)
{
	const struct rx_reply *r = rxf_reply_for(f, peer, seq);

	return r ? r->err : 1;
}

static uint32_t state_of_req(struct rx_fx *f, const char *req)
{
	return pd_rx_state(f->rx, (const uint8_t *)req, (uint32_t)strlen(req), NULL, NULL);
}

static int32_t last_err(struct rx_fx *f)
{
	assert_true(f->nfailed > 0);
	return f->failed_err[(f->nfailed - 1) % RX_MAX_LOG];
}

/* Fair share of 8 requests: alone, a peer may hold 8 / 2 = 4, tombstones
 * included; a second peer then gets its share (8 / 3 = 2) however many the
 * first holds; the first's share shrinks to 2 too. */
static void test_fair_share_of_requests(void **state)
{
	struct rx_fx *f = rxf_create_caps(64, 8, PD_RX_FAIR_SHARE, 0);
	char id[16];

	(void)state;
	for (uint32_t i = 0; i < 5; i++) {
		(void)snprintf(id, sizeof(id), "a%u", i);
		assert_int_equal(batch(f, id, 1, i + 1, 1), 0);
	}
	for (uint64_t s = 1; s <= 4; s++)
		assert_int_equal(answer(f, 1, s), 0);
	assert_int_equal(answer(f, 1, 5), -EBUSY);
	assert_int_equal(rxf_stats(f).rejected_peer_requests, 1);
	assert_int_equal(pd_rx_cancel(f->rx, (const uint8_t *)"a0", 2, f->now), 1);
	assert_int_equal(batch(f, "a9", 1, 6, 1), 0);         /* its tombstone still counts */
	assert_int_equal(answer(f, 1, 6), -EBUSY);
	assert_int_equal(batch(f, "b0", 2, 1, 1), 0);
	assert_int_equal(batch(f, "b1", 2, 2, 1), 0);
	assert_int_equal(batch(f, "b2", 2, 3, 1), 0);
	assert_int_equal(answer(f, 2, 1), 0);
	assert_int_equal(answer(f, 2, 2), 0);
	assert_int_equal(answer(f, 2, 3), -EBUSY);
	assert_int_equal(rxf_stats(f).rejected_peer_requests, 3);
	f->now += RXF_TOMB_NS + 1;                            /* a0's tombstone goes */
	(void)pd_rx_tick(f->rx, f->now);
	assert_int_equal(batch(f, "a10", 1, 7, 1), 0);        /* 3 held, share 8 / 3 = 2 */
	assert_int_equal(answer(f, 1, 7), -EBUSY);
	rxf_check(f);
	rxf_destroy(f);
}

/* A fixed cap of slots: a peer's requests may need 10 in all; its first is
 * never refused, however large; another peer is not affected. */
static void test_peer_slot_cap(void **state)
{
	struct rx_fx *f = rxf_create_caps(40, 64, 0, 10);

	(void)state;
	assert_int_equal(batch(f, "a0", 1, 1, 12), 0);        /* the first: admitted */
	assert_int_equal(answer(f, 1, 1), 0);
	assert_int_equal(batch(f, "a1", 1, 2, 1), 0);
	assert_int_equal(answer(f, 1, 2), -EBUSY);
	assert_int_equal(rxf_stats(f).rejected_peer_slots, 1);
	assert_int_equal(batch(f, "b0", 2, 1, 6), 0);
	assert_int_equal(batch(f, "b1", 2, 2, 4), 0);
	assert_int_equal(batch(f, "b2", 2, 3, 1), 0);
	assert_int_equal(answer(f, 2, 1), 0);
	assert_int_equal(answer(f, 2, 2), 0);
	assert_int_equal(answer(f, 2, 3), -EBUSY);
	assert_int_equal(rxf_stats(f).rejected_peer_slots, 2);
	assert_int_equal(pd_rx_cancel(f->rx, (const uint8_t *)"b0", 2, f->now), 1);
	assert_int_equal(batch(f, "b3", 2, 4, 6), 0);         /* b0's 6 came back */
	assert_int_equal(answer(f, 2, 4), 0);
	rxf_check(f);
	rxf_destroy(f);
}

/* Peer 1 holds the whole pool and queues 20 more; peer 2's request, asked
 * after all of them, is admitted as soon as the pool is back. */
static void test_backlog_does_not_hold_another_peer(void **state)
{
	struct rx_fx *f = rxf_create(8, 64);
	char id[16];

	(void)state;
	assert_int_equal(batch(f, "hog", 1, 1, 8), 0);
	for (uint32_t i = 0; i < 20; i++) {
		(void)snprintf(id, sizeof(id), "q%u", i);
		assert_int_equal(batch(f, id, 1, i + 2, 2), 1);
	}
	assert_int_equal(batch(f, "b", 2, 1, 4), 1);
	assert_int_equal(answer(f, 2, 1), 1);
	assert_int_equal(pd_rx_cancel(f->rx, (const uint8_t *)"hog", 3, f->now), 1);
	assert_int_equal(answer(f, 2, 1), 0);                 /* ahead of q2..q19 */
	assert_int_equal(answer(f, 1, 2), 0);                 /* q0 and q1: 4 slots */
	assert_int_equal(answer(f, 1, 3), 0);
	assert_int_equal(answer(f, 1, 4), 1);
	rxf_check(f);
	rxf_destroy(f);
}

/* 5000 requests time out waiting at once: one tick expires PD_RX_TICK_BUDGET
 * of them, the next the rest. */
static void test_expiry_in_slices(void **state)
{
	struct rx_fx *f = rxf_create(4, 8192);
	const struct pd_admit *a = pd_rx_admit(f->rx);
	char id[16];

	(void)state;
	assert_int_equal(batch(f, "hog", 1, 1, 4), 0);
	for (uint32_t i = 0; i < 5000; i++) {
		(void)snprintf(id, sizeof(id), "w%u", i);
		assert_int_equal(batch(f, id, 1 + i % 3, i + 2, 1), 1);
	}
	f->now += RXF_ADMIT_NS + 1;
	(void)pd_rx_tick(f->rx, f->now);
	assert_int_equal(a->stats.timed_out, PD_RX_TICK_BUDGET);
	assert_int_equal(a->nwaiting, 5000 - PD_RX_TICK_BUDGET);
	(void)pd_rx_tick(f->rx, f->now);
	assert_int_equal(a->stats.timed_out, 5000);
	assert_int_equal(a->nwaiting, 0);
	rxf_check(f);
	rxf_destroy(f);
}

#define SEC 1000000000ull

/* Peer 1 holds all 8 slots with requests it never writes; peer 2's request
 * waits. Once it waited 1 s and peer 1's requests sat idle 5 s, the least
 * recently active of them fail -EBUSY until peer 2's fits, and it is
 * admitted; nothing is preempted before that, nor from a peer that holds
 * no more than its share (8 / 2). */
static void test_idle_hog_preempted_for_a_starved_peer(void **state)
{
	struct rx_fx *f = rxf_create_share(8, 64, 0, 0, 5 * SEC);
	char id[16];

	(void)state;
	for (uint32_t i = 0; i < 4; i++) {
		(void)snprintf(id, sizeof(id), "h%u", i);
		assert_int_equal(batch(f, id, 1, i + 1, 2), 0);
		f->now += 1000;                               /* h0 least recently active */
	}
	assert_int_equal(batch(f, "b", 2, 1, 3), 1);          /* waits */
	f->now += 2 * SEC;
	(void)pd_rx_tick(f->rx, f->now);                      /* hog idle only 2 s */
	assert_int_equal(rxf_stats(f).preempted, 0);
	f->now += 3 * SEC + 1000000;
	(void)pd_rx_tick(f->rx, f->now);
	assert_int_equal(rxf_stats(f).preempted, 2);          /* h0, h1: 4 slots */
	assert_int_equal(state_of_req(f, "h0"), PD_RX_ENDED);
	assert_int_equal(state_of_req(f, "h1"), PD_RX_ENDED);
	assert_int_equal(state_of_req(f, "h2"), PD_RX_ACTIVE);
	assert_int_equal(last_err(f), -EBUSY);
	assert_int_equal(answer(f, 2, 1), 0);                 /* admitted */
	assert_int_equal(batch(f, "c", 2, 2, 2), 1);          /* 1 slot free */
	f->now += 2 * SEC;
	(void)pd_rx_tick(f->rx, f->now);
	assert_int_equal(rxf_stats(f).preempted, 2);          /* peer 1 holds its 8 / 2 only */
	assert_int_equal(state_of_req(f, "h2"), PD_RX_ACTIVE);
	assert_int_equal(answer(f, 2, 2), 1);
	rxf_check(f);
	rxf_destroy(f);
}

/* Without preemption (the default of the engine) the hog keeps its slots. */
static void test_no_preemption_when_off(void **state)
{
	struct rx_fx *f = rxf_create(8, 64);

	(void)state;
	assert_int_equal(batch(f, "h", 1, 1, 8), 0);
	assert_int_equal(batch(f, "b", 2, 1, 1), 1);
	f->now += 20 * SEC;
	(void)pd_rx_tick(f->rx, f->now);
	assert_int_equal(rxf_stats(f).preempted, 0);
	assert_int_equal(answer(f, 2, 1), 1);
	rxf_destroy(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fair_share_of_requests),
		cmocka_unit_test(test_peer_slot_cap),
		cmocka_unit_test(test_backlog_does_not_hold_another_peer),
		cmocka_unit_test(test_expiry_in_slices),
		cmocka_unit_test(test_idle_hog_preempted_for_a_starved_peer),
		cmocka_unit_test(test_no_preemption_when_off),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
