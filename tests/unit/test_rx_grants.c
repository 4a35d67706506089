/* SPDX-License-Identifier: MIT */
/*
 * Receiver engine: grants with the admission (pd_rx_reserve() grants,
 * pd_rx_bind(), broker/engine/pd_rx_bind.c). The admitting answer to a
 * Reserve carries slots for the rank's first chunks, drawn from the
 * reservation (never more), keyless until a PutDone binds each to its key
 * and commits it; a key already present is deduplicated at the bind. A
 * plain PutDone cannot commit a keyless slot, a bind cannot rebind one; a
 * rollback (cancel, timeout) gives the unbound grants back. Refusals first;
 * pd_rx_check() after every step (rxf_check/rxf_assert_empty).
 */
#include "rx_fixture.h"

#define PEER 3u

/* A Reserve of (req, rank) from PEER asking grants. */
static int reserve(struct rx_fx *f, const char *req, uint32_t rank, uint32_t world,
		   uint32_t total, uint32_t grants, uint64_t seq)
{
	struct pd_rx_reserve q = { .peer = PEER, .seq = seq, .req_id = (const uint8_t *)req,
				   .req_id_len = (uint32_t)strlen(req), .total_chunks = total,
				   .world_size = world, .rank = rank, .grants = grants };

	return pd_rx_reserve(f->rx, &q, f->now);
}

/* Bind the n slots of reply r from position first, keys "<req>/<k>". */
static int bind(struct rx_fx *f, const char *req, const struct rx_reply *r, uint32_t first,
		uint32_t n, const char *prefix)
{
	struct pd_rx_key keys[RX_KEYS_MAX];
	uint32_t lens[RX_KEYS_MAX];

	for (uint32_t i = 0; i < n; i++) {
		int len = snprintf(f->keybuf[i], sizeof(f->keybuf[i]), "%s/%u", prefix,
				   first + i);

		keys[i] = (struct pd_rx_key){ .p = (const uint8_t *)f->keybuf[i],
					      .len = (uint32_t)len };
		lens[i] = 100 + first + i;
	}
	return pd_rx_bind(f->rx, PEER, (const uint8_t *)req, (uint32_t)strlen(req),
			  r->remote + first, keys, lens, n, f->now);
}

static uint32_t state_of(struct rx_fx *f, const char *req)
{
	return pd_rx_state(f->rx, (const uint8_t *)req, (uint32_t)strlen(req), NULL, NULL);
}

/* ---- refusals --------------------------------------------------------------------- */

/* More grants than the rank's total: malformed, answered -EINVAL, nothing held. */
static void test_grants_beyond_total_refused(void **state)
{
	struct rx_fx *f = *state;

	assert_int_equal(reserve(f, "big", 0, 1, 2, 3, 1), -EINVAL);
	assert_int_equal(rxf_got(f, PEER, 1)->err, -EINVAL);
	rxf_assert_empty(f);
}

/* A plain PutDone naming a keyless grant is a protocol error (it would
 * commit a chunk nobody can find); so is a bind of a slot bound already,
 * or of another peer. Each rolls the request back, every slot freed. */
static void test_wrong_putdone_for_grants(void **state)
{
	struct rx_fx *f = *state;
	const struct rx_reply *r;
	int32_t idx[1];

	assert_int_equal(reserve(f, "p", 0, 1, 2, 2, 1), 0);
	r = rxf_got(f, PEER, 1);
	idx[0] = r->remote[0];
	assert_int_equal(pd_rx_put_done(f->rx, PEER, (const uint8_t *)"p", 1, idx, 1, f->now),
			 -EPROTO);
	assert_int_equal(state_of(f, "p"), PD_RX_ENDED);
	rxf_assert_empty(f);

	assert_int_equal(reserve(f, "q", 0, 1, 2, 2, 2), 0);
	r = rxf_got(f, PEER, 2);
	assert_int_equal(bind(f, "q", r, 0, 1, "q"), 0);
	assert_int_equal(bind(f, "q", r, 0, 1, "q"), -EPROTO);
	rxf_assert_empty(f);

	assert_int_equal(reserve(f, "s", 0, 1, 1, 1, 3), 0);
	r = rxf_got(f, PEER, 3);
	assert_int_equal(pd_rx_bind(f->rx, PEER + 1, (const uint8_t *)"s", 1, r->remote,
				    &(struct pd_rx_key){ (const uint8_t *)"k", 1 },
				    &(uint32_t){ 1 }, 1, f->now),
			 -EPROTO);
	rxf_assert_empty(f);
}

/* ---- grants, binds ------------------------------------------------------------------- */

/* The admitting answer carries the grants; binding them commits the keys:
 * READY with no AllocRequest; the accounting drew exactly the grants. */
static void test_grants_then_bind_ready(void **state)
{
	struct rx_fx *f = *state;
	const struct pd_admit *a = pd_rx_admit(f->rx);
	const struct rx_reply *r;

	assert_int_equal(reserve(f, "one", 0, 1, 2, 2, 1), 0);
	r = rxf_got(f, PEER, 1);
	assert_int_equal(r->err, 0);
	assert_int_equal(r->n, 2);
	assert_int_equal(a->free, f->nslots - 2);
	assert_int_equal(a->outstanding, 0); /* both drawn */
	assert_int_equal(rxf_stats(f).pregranted, 2);
	rxf_check(f);
	assert_int_equal(bind(f, "one", r, 0, 2, "one"), 0);
	assert_int_equal(state_of(f, "one"), PD_RX_READY);
	assert_int_equal(rxf_stats(f).bound, 2);
	assert_int_equal(pd_index_count(&f->index), 2);
	assert_int_equal(rxf_release(f, "one"), 0);
	rxf_assert_empty(f);
}

/* Fewer grants than chunks: the AllocRequests declare only the chunks
 * after them (the grants are the rank's first ones); one more is a
 * protocol error. */
static void test_grants_then_alloc_for_the_rest(void **state)
{
	struct rx_fx *f = *state;
	const struct rxf_batch more = { .req = "r", .peer = PEER, .total = 5, .first = 2,
					.n = 3, .is_last = 1, .seq = 2 };
	const struct rx_reply *r;

	assert_int_equal(reserve(f, "r", 0, 1, 5, 2, 1), 0);
	r = rxf_got(f, PEER, 1);
	assert_int_equal(bind(f, "r", r, 0, 2, "r-0"), 0);
	rxf_batch_ok(f, &more);
	assert_int_equal(state_of(f, "r"), PD_RX_READY);
	assert_int_equal(rxf_release(f, "r"), 0);
	rxf_assert_empty(f);

	assert_int_equal(reserve(f, "x", 0, 1, 3, 2, 3), 0);
	assert_int_equal(rxf_alloc(f, &(struct rxf_batch){ .req = "x", .peer = PEER, .total = 3,
							    .n = 3, .is_last = 1, .seq = 4 }),
			 0);
	assert_int_equal(rxf_got(f, PEER, 4)->err, -EPROTO);
	rxf_assert_empty(f);
}

/* A key another request holds is deduplicated at the bind: pinned, the
 * slot written for nothing freed; READY once the other is. */
static void test_bind_dedups_a_present_key(void **state)
{
	struct rx_fx *f = *state;
	const struct rxf_batch first = { .req = "a", .keys = "k", .peer = PEER, .total = 1,
					 .n = 1, .is_last = 1, .seq = 1 };
	const struct rx_reply *r;

	rxf_batch_ok(f, &first); /* key "k-0-0" committed by a */
	assert_int_equal(reserve(f, "b", 0, 1, 2, 2, 2), 0);
	r = rxf_got(f, PEER, 2);
	assert_int_equal(pd_pool_nfree(&f->pool), f->nslots - 3);
	{
		struct pd_rx_key k[2] = { { (const uint8_t *)"k-0-0", 5 },
					  { (const uint8_t *)"b/1", 3 } };
		uint32_t lens[2] = { 100, 100 };

		assert_int_equal(pd_rx_bind(f->rx, PEER, (const uint8_t *)"b", 1, r->remote, k,
					    lens, 2, f->now),
				 0);
	}
	assert_int_equal(pd_pool_nfree(&f->pool), f->nslots - 2);
	assert_int_equal(state_of(f, "b"), PD_RX_READY);
	assert_int_equal(rxf_stats(f).deduped, 1);
	rxf_check(f);
	assert_int_equal(rxf_release(f, "a"), 0);
	assert_int_equal(rxf_release(f, "b"), 0);
	rxf_assert_empty(f);
}

/* A PutDone that names one slot twice, the first time with a key another
 * request holds (the slot is given back by the dedup) and then with a new
 * key: a protocol error that rolls the request back, never a commit of a
 * slot nobody holds. */
static void test_bind_same_slot_twice_after_dedup(void **state)
{
	struct rx_fx *f = *state;
	const struct rxf_batch first = { .req = "a", .keys = "k", .peer = PEER, .total = 1,
					 .n = 1, .is_last = 1, .seq = 1 };
	const struct rx_reply *r;

	rxf_batch_ok(f, &first); /* key "k-0-0" committed by a */
	assert_int_equal(reserve(f, "b", 0, 1, 2, 2, 2), 0);
	r = rxf_got(f, PEER, 2);
	{
		struct pd_rx_key k[2] = { { (const uint8_t *)"k-0-0", 5 },
					  { (const uint8_t *)"b/new", 5 } };
		int32_t slots[2] = { r->remote[0], r->remote[0] };
		uint32_t lens[2] = { 100, 100 };

		assert_int_equal(pd_rx_bind(f->rx, PEER, (const uint8_t *)"b", 1, slots, k,
					    lens, 2, f->now),
				 -EPROTO);
	}
	assert_int_equal(state_of(f, "b"), PD_RX_ENDED);
	rxf_check(f);
	assert_int_equal(rxf_release(f, "a"), 0);
	rxf_assert_empty(f);
}

/* A later rank's Reserve joins the admitted request and gets its own
 * grants, all from the one reservation (total x world). */
static void test_second_rank_grants_from_the_reservation(void **state)
{
	struct rx_fx *f = *state;
	const struct pd_admit *a = pd_rx_admit(f->rx);

	assert_int_equal(reserve(f, "g", 0, 2, 3, 2, 1), 0);
	assert_int_equal(a->outstanding, 4);
	assert_int_equal(reserve(f, "g", 1, 2, 3, 3, 2), 0);
	assert_int_equal(rxf_got(f, PEER, 2)->n, 3);
	assert_int_equal(a->outstanding, 1);
	assert_int_equal(a->free, f->nslots - 5);
	rxf_check(f);
	assert_int_equal(rxf_cancel(f, "g"), 1);
	rxf_assert_empty(f);
}

/* Cancelled (or timed out) with its grants unbound: every one comes back,
 * nothing enters the index, and a bind afterwards is late. */
static void test_rollback_gives_grants_back(void **state)
{
	struct rx_fx *f = *state;
	struct rx_reply r;

	assert_int_equal(reserve(f, "c", 0, 1, 4, 4, 1), 0);
	r = *rxf_got(f, PEER, 1);
	assert_int_equal(pd_pool_nfree(&f->pool), f->nslots - 4);
	assert_int_equal(rxf_cancel(f, "c"), 1);
	rxf_assert_empty(f);
	assert_int_equal(bind(f, "c", &r, 0, 4, "c"), -ENOENT);
	assert_int_equal(rxf_stats(f).late_putdone, 1);
	rxf_assert_empty(f);

	assert_int_equal(reserve(f, "t", 0, 1, 2, 2, 2), 0);
	f->now += RXF_TTL_NS + 1;
	assert_int_equal(pd_rx_tick(f->rx, f->now), 1);
	rxf_assert_empty(f);
}

/* Held for admission (the pool is busy), the Reserve is answered with its
 * grants once admitted. */
static void test_held_reserve_gets_grants_on_admission(void **state)
{
	struct rx_fx *f = *state;
	const struct rx_reply *r;

	assert_int_equal(reserve(f, "full", 0, 1, 10, 0, 1), 0);
	assert_int_equal(reserve(f, "w", 0, 1, 2, 2, 2), 1);
	assert_null(rxf_reply_for(f, PEER, 2));
	assert_int_equal(rxf_cancel(f, "full"), 1);
	r = rxf_got(f, PEER, 2);
	assert_int_equal(r->err, 0);
	assert_int_equal(r->n, 2);
	assert_int_equal(bind(f, "w", r, 0, 2, "w"), 0);
	assert_int_equal(state_of(f, "w"), PD_RX_READY);
	assert_int_equal(rxf_release(f, "w"), 0);
	rxf_assert_empty(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_grants_beyond_total_refused, rxf_setup10,
						rxf_teardown),
		cmocka_unit_test_setup_teardown(test_wrong_putdone_for_grants, rxf_setup10,
						rxf_teardown),
		cmocka_unit_test_setup_teardown(test_grants_then_bind_ready, rxf_setup10,
						rxf_teardown),
		cmocka_unit_test_setup_teardown(test_grants_then_alloc_for_the_rest, rxf_setup10,
						rxf_teardown),
		cmocka_unit_test_setup_teardown(test_bind_same_slot_twice_after_dedup, rxf_setup10,
						rxf_teardown),
		cmocka_unit_test_setup_teardown(test_bind_dedups_a_present_key, rxf_setup10,
						rxf_teardown),
		cmocka_unit_test_setup_teardown(test_second_rank_grants_from_the_reservation,
						rxf_setup10, rxf_teardown),
		cmocka_unit_test_setup_teardown(test_rollback_gives_grants_back, rxf_setup10,
						rxf_teardown),
		cmocka_unit_test_setup_teardown(test_held_reserve_gets_grants_on_admission,
						rxf_setup10, rxf_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
