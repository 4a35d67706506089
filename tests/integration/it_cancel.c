/* SPDX-License-Identifier: MIT */
/*
 * A cancel ends a request at the receiver at once, whoever sends it: here
 * rank 1 of a two-rank request cancels it without ever having declared or
 * staged anything, after rank 0 completed. The decode broker, which holds
 * rank 0's chunks and waits for rank 1's, frees everything within a few
 * heartbeats, not at --recv-ttl.
 */
#include "it_fixture.h"

static int declare_rank(struct it *t, struct pd_agent *a, const char *req, uint32_t total,
			uint32_t rank)
{
	struct pd_decl d = { .req_id = req, .endpoint = t->d.ctrl, .total_chunks = total,
			     .world_size = 2, .rank = rank };

	return pd_declare(a, &d);
}

/* Rank 0's whole part: one batch of total chunks. */
static int put_rank0(struct it *t, const char *req, uint32_t total)
{
	pd_slot_ref r[8];
	struct pd_chunk c[8];
	char keys[8][48];
	struct pd_batch b = { .req_id = req, .endpoint = t->d.ctrl, .chunks = c, .n = total,
			      .total_chunks = total, .world_size = 2, .rank = 0, .last = 1 };
	int rc = pd_alloc(t->pa, req, total, r, IT_WAIT_MS);

	for (uint32_t i = 0; rc == 0 && i < total; i++) {
		it_key(keys[i], sizeof(keys[i]), req, i);
		c[i] = (struct pd_chunk){ .slot = r[i], .len = it_len(i),
					  .klen = (uint32_t)strlen(keys[i]), .key = keys[i] };
		memset(pd_slot_data(t->pa, r[i]), 0x5a, c[i].len);
	}
	return rc == 0 ? pd_put(t->pa, &b) : rc;
}

/* Rank 0 completes; rank 1 (declared first when declared is set) cancels. */
static void cancel_after_sibling_completed(int declared)
{
	static const char *const ttl[] = { "--recv-ttl", "120s", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 16,
							.d_extra = ttl });
	struct pd_agent *rank1 = it_attach(&t->p, PD_AGENT_SEND);
	uint64_t t0;

	assert_int_equal(declare_rank(t, t->pa, "R", 4, 0), 0);
	if (declared)
		assert_int_equal(declare_rank(t, rank1, "R", 4, 1), 0);
	assert_int_equal(it_wait_admission(t->pa, "R"), PD_REQ_ADMITTED);
	assert_int_equal(put_rank0(t, "R", 4), 0);
	it_expect_event(t, "R", PD_EV_PUT_DONE);
	assert_true(it_free_slots(&t->d, 1) < 16); /* rank 0's chunks, rank 1's reservation */
	t0 = pd_now_ns();
	assert_int_equal(pd_cancel(rank1, "R"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_true(pd_now_ns() - t0 < 5 * PD_NS_PER_S);
	pd_agent_detach(rank1);
	it_stop(t, 0);
}

static void test_cancel_by_a_rank_never_declared(void **state)
{
	(void)state;
	cancel_after_sibling_completed(0);
}

static void test_cancel_by_a_rank_declared_never_staged(void **state)
{
	(void)state;
	cancel_after_sibling_completed(1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cancel_by_a_rank_never_declared),
		cmocka_unit_test(test_cancel_by_a_rank_declared_never_staged),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
