/* SPDX-License-Identifier: MIT */
/*
 * Receiver engine: Reserves (pd_rx_reserve, broker/pd_rx_batch.c). A sender
 * rank declares its total before any batch; the first rank's Reserve asks
 * admission for the whole request (gang), a later rank's joins it; each is
 * answered with no indexes once the request is admitted, or with an error.
 * Malformed and refused Reserves first, then admission (at once, held in
 * FIFO order with AllocRequest-first requests, a second rank joining),
 * protocol violations (rolled back), cancel and timeout while waiting, and
 * an old-style sender (no Reserve) admitted exactly as before.
 * pd_rx_check() after every step (rxf_check/rxf_assert_empty).
 */
#include "rx_fixture.h"

/* A Reserve of (req, rank) from peer. */
struct rxf_resv {
	const char *req;
	uint32_t peer, rank, world_size, total;
	uint64_t seq;
};

static int rxf_reserve(struct rx_fx *f, const struct rxf_resv *v)
{
	struct pd_rx_reserve q = {
		.peer = v->peer, .seq = v->seq, .req_id = (const uint8_t *)v->req,
		.req_id_len = (uint32_t)strlen(v->req), .total_chunks = v->total,
		.world_size = v->world_size ? v->world_size : 1, .rank = v->rank,
	};

	return pd_rx_reserve(f->rx, &q, f->now);
}

/* The Reserve was answered: err, and never with an index. */
static void expect_answer(struct rx_fx *f, uint32_t peer, uint64_t seq, int32_t err)
{
	const struct rx_reply *r = rxf_got(f, peer, seq);

	assert_int_equal(r->err, err);
	assert_int_equal(r->n, 0);
	assert_int_equal(r->nalready, 0);
}

static uint32_t state_of(struct rx_fx *f, const char *req, int32_t *status)
{
	return pd_rx_state(f->rx, (const uint8_t *)req, (uint32_t)strlen(req), NULL, status);
}

/* Position of the reply for (peer, seq) in the log. */
static uint32_t reply_pos(struct rx_fx *f, uint32_t peer, uint64_t seq)
{
	for (uint32_t i = 0; i < f->nreplies; i++)
		if (f->replies[i].peer == peer && f->replies[i].seq == seq)
			return i;
	fail_msg("no reply for peer %u seq %llu", peer, (unsigned long long)seq);
	return 0;
}

static int32_t last_failure(struct rx_fx *f)
{
	assert_true(f->nfailed > 0);
	return f->failed_err[(f->nfailed - 1) % RX_MAX_LOG];
}

/* A request of n chunks in one batch, written: it holds n slots (READY). */
static void hold(struct rx_fx *f, const char *req, uint32_t n, uint64_t seq)
{
	struct rxf_batch b = { .req = req, .peer = 9, .seq = seq, .n = n, .total = n,
			       .is_last = 1 };

	rxf_batch_ok(f, &b);
	assert_int_equal(state_of(f, req, NULL), PD_RX_READY);
}

/* ---- negative ------------------------------------------------------------------ */

/* Malformed: -EINVAL, answered with -EINVAL (when there is someone to
 * answer), nothing created, nothing counted as a Reserve. */
static void test_reserve_malformed_einval(void **state)
{
	struct rx_fx *f = *state;
	char big[PD_REQ_ID_MAX + 1];
	struct pd_rx_reserve ok = { .peer = 1, .seq = 50, .req_id = (const uint8_t *)"R",
				    .req_id_len = 1, .total_chunks = 2, .world_size = 2,
				    .rank = 1 };
	struct pd_rx_reserve bad;
	uint64_t seq = 50;
	uint32_t n0;

	assert_int_equal(pd_rx_reserve(f->rx, NULL, 0), -EINVAL);
	assert_int_equal(pd_rx_reserve(NULL, &ok, 0), -EINVAL);
	assert_int_equal(f->nreplies, 0);
	memset(big, 'x', sizeof(big));
#define BAD(field, val)                                                                \
	do {                                                                           \
		bad = ok;                                                              \
		bad.field = val;                                                       \
		bad.seq = ++seq;                                                       \
		n0 = f->nreplies;                                                      \
		assert_int_equal(pd_rx_reserve(f->rx, &bad, f->now), -EINVAL);         \
		assert_int_equal(f->nreplies, n0 + 1);                                 \
		expect_answer(f, 1, bad.seq, -EINVAL);                                 \
	} while (0)
	BAD(req_id_len, 0);                    /* an empty id cannot be reserved */
	BAD(req_id, NULL);
	BAD(total_chunks, 0);
	BAD(world_size, 0);
	BAD(world_size, PD_RX_MAX_RANKS + 1);
	BAD(rank, 2);                          /* rank >= world_size 2 */
	ok.req_id = (const uint8_t *)big;
	BAD(req_id_len, sizeof(big));          /* 128 bytes, readable */
	BAD(req_id_len, 0);
#undef BAD
	ok.req_id_len = PD_REQ_ID_MAX;         /* the longest id is fine */
	assert_int_equal(pd_rx_reserve(f->rx, &ok, f->now), 0);
	expect_answer(f, 1, ok.seq, 0);
	assert_int_equal(rxf_cancel(f, "x"), 0);
	assert_int_equal(pd_rx_cancel(f->rx, ok.req_id, ok.req_id_len, f->now), 1);
	assert_int_equal(rxf_stats(f).reserves, 1);           /* only the good one */
	assert_int_equal(rxf_stats(f).live_requests, 0);      /* cancelled: a tombstone */
	assert_int_equal(state_of(f, "R", NULL), PD_RX_UNKNOWN);
	rxf_assert_empty(f);
}

/* Larger than the pool (its gang): -E2BIG; too many requests: -EBUSY. */
static void test_reserve_refused_big_and_busy(void **state)
{
	struct rx_fx *f = rxf_create(10, 2);
	struct rxf_resv big = { .req = "B", .peer = 1, .seq = 1, .total = 11 };
	struct rxf_resv gang = { .req = "G", .peer = 1, .seq = 2, .total = 6, .world_size = 2 };
	struct rxf_resv v = { .req = "a", .peer = 1, .seq = 3, .total = 1 };

	(void)state;
	assert_int_equal(rxf_reserve(f, &big), 0);
	expect_answer(f, 1, 1, -E2BIG);
	assert_int_equal(rxf_reserve(f, &gang), 0);          /* 6 x 2 > 10 */
	expect_answer(f, 1, 2, -E2BIG);
	assert_int_equal(rxf_stats(f).rejected_big, 2);
	assert_int_equal(rxf_reserve(f, &v), 0);
	v.req = "b", v.seq = 4;
	assert_int_equal(rxf_reserve(f, &v), 0);
	v.req = "c", v.seq = 5;
	assert_int_equal(rxf_reserve(f, &v), 0);
	expect_answer(f, 1, 5, -EBUSY);
	assert_int_equal(rxf_stats(f).rejected_busy, 1);
	assert_int_equal(rxf_stats(f).reserves, 5);
	assert_int_equal(state_of(f, "B", NULL), PD_RX_UNKNOWN);
	rxf_check(f);
	rxf_destroy(f);
}

/* A tombstoned request refuses a Reserve of any rank: -ECANCELED. */
static void test_reserve_tombstone_ecanceled(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv r0 = { .req = "T", .peer = 1, .seq = 1, .total = 2, .world_size = 2 };
	struct rxf_resv r1 = r0;

	assert_int_equal(rxf_reserve(f, &r0), 0);
	expect_answer(f, 1, 1, 0);
	assert_int_equal(rxf_cancel(f, "T"), 1);
	assert_int_equal(last_failure(f), -ECANCELED);
	r1.rank = 1, r1.seq = 2;
	assert_int_equal(rxf_reserve(f, &r1), 0);
	expect_answer(f, 1, 2, -ECANCELED);
	r0.seq = 3;
	assert_int_equal(rxf_reserve(f, &r0), 0);
	expect_answer(f, 1, 3, -ECANCELED);
	assert_int_equal(rxf_stats(f).rejected_tomb, 2);
	rxf_assert_empty(f);
}

/* ---- admission ----------------------------------------------------------------------- */

/* Room: admitted at once, answered with no indexes; its batches are then
 * granted as the request's, and it completes as any other. */
static void test_reserve_admitted_at_once(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv v = { .req = "A", .peer = 1, .seq = 1, .total = 4 };
	struct rxf_batch b1 = { .req = "A", .peer = 1, .seq = 2, .n = 2, .total = 4 };
	struct rxf_batch b2 = { .req = "A", .peer = 1, .seq = 3, .n = 2, .total = 4,
				.first = 2, .is_last = 1 };
	const struct pd_admit *adm = pd_rx_admit(f->rx);

	assert_int_equal(rxf_reserve(f, &v), 0);
	assert_int_equal(f->nreplies, 1);
	expect_answer(f, 1, 1, 0);
	assert_int_equal(state_of(f, "A", NULL), PD_RX_ACTIVE);
	assert_int_equal(adm->stats.admitted_at_once, 1);
	assert_int_equal(adm->outstanding, 4);                /* reserved, no slot granted */
	assert_int_equal(adm->free, 10);
	assert_int_equal(pd_pool_nfree(&f->pool), 10);
	assert_int_equal(rxf_stats(f).reserves, 1);
	assert_int_equal(rxf_stats(f).batches, 0);
	assert_int_equal(rxf_stats(f).granted, 0);
	rxf_check(f);
	rxf_batch_ok(f, &b1);
	rxf_batch_ok(f, &b2);
	assert_int_equal(f->nready, 1);
	assert_int_equal(adm->stats.admitted, 1);             /* one admission, not three */
	assert_int_equal(rxf_stats(f).batches, 2);
	assert_int_equal(rxf_release(f, "A"), 0);
	rxf_assert_empty(f);
}

/* No room: the Reserve is held (no answer) and answered on admission, in
 * FIFO order with requests whose first message was an AllocRequest. */
static void test_reserve_held_fifo_with_alloc_first(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv w = { .req = "W", .peer = 1, .seq = 1, .total = 8 };
	struct rxf_batch s = { .req = "S", .peer = 2, .seq = 1, .n = 1, .total = 1,
			       .is_last = 1 };
	struct rxf_resv v = { .req = "V", .peer = 1, .seq = 2, .total = 2 };

	hold(f, "H", 6, 100);
	assert_int_equal(rxf_reserve(f, &w), 1);             /* 8 > 4 free: waits */
	assert_null(rxf_reply_for(f, 1, 1));
	assert_int_equal(state_of(f, "W", NULL), PD_RX_WAITING);
	assert_int_equal(rxf_alloc(f, &s), 1);               /* fits, but W is first */
	assert_int_equal(rxf_reserve(f, &v), 1);
	assert_int_equal(rxf_stats(f).waiting_requests, 3);
	rxf_check(f);
	assert_int_equal(rxf_release(f, "H"), 0);
	/* W (8), then S (1) fit in 10; V (2) waits for them. */
	expect_answer(f, 1, 1, 0);
	assert_int_equal(rxf_got(f, 2, 1)->err, 0);
	assert_int_equal(rxf_got(f, 2, 1)->n, 1);
	assert_true(reply_pos(f, 1, 1) < reply_pos(f, 2, 1));
	assert_null(rxf_reply_for(f, 1, 2));
	assert_int_equal(rxf_stats(f).waiting_requests, 1);
	assert_int_equal(state_of(f, "W", NULL), PD_RX_ACTIVE);
	assert_int_equal(state_of(f, "V", NULL), PD_RX_WAITING);
	rxf_check(f);
	assert_int_equal(rxf_cancel(f, "W"), 1);             /* frees 8: V in */
	expect_answer(f, 1, 2, 0);
	assert_int_equal(rxf_stats(f).waiting_requests, 0);
	rxf_check(f);
}

/* Ranks of one request: rank 0's Reserve admits the gang (total x world);
 * rank 1's joins it, answered at once; both ranks' batches then fill it. */
static void test_second_rank_joins(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv r0 = { .req = "G", .peer = 1, .seq = 1, .total = 3, .world_size = 2 };
	struct rxf_resv r1 = { .req = "G", .peer = 2, .seq = 1, .total = 3, .world_size = 2,
			       .rank = 1 };
	struct rxf_batch b0 = { .req = "G", .peer = 1, .seq = 2, .n = 3, .total = 3,
				.world_size = 2, .is_last = 1 };
	struct rxf_batch b1 = { .req = "G", .peer = 2, .seq = 2, .n = 3, .total = 3,
				.world_size = 2, .rank = 1, .is_last = 1 };
	const struct pd_admit *adm = pd_rx_admit(f->rx);

	assert_int_equal(rxf_reserve(f, &r0), 0);
	expect_answer(f, 1, 1, 0);
	assert_int_equal(adm->outstanding, 6);                /* the gang: 3 x 2 */
	assert_int_equal(rxf_reserve(f, &r1), 0);
	expect_answer(f, 2, 1, 0);
	assert_int_equal(adm->outstanding, 6);                /* joined: nothing more */
	assert_int_equal(adm->stats.admitted, 1);
	rxf_batch_ok(f, &b0);
	assert_int_equal(f->nready, 0);
	rxf_batch_ok(f, &b1);
	assert_int_equal(f->nready, 1);
	assert_int_equal(rxf_release(f, "G"), 0);
	rxf_assert_empty(f);
}

/* Both ranks' Reserves arrive while the gang waits: both held, both
 * answered on admission, in order. */
static void test_ranks_reserved_while_waiting(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv r0 = { .req = "G", .peer = 1, .seq = 1, .total = 3, .world_size = 2 };
	struct rxf_resv r1 = { .req = "G", .peer = 2, .seq = 1, .total = 3, .world_size = 2,
			       .rank = 1 };

	hold(f, "H", 5, 100);
	assert_int_equal(rxf_reserve(f, &r1), 1);
	assert_int_equal(rxf_reserve(f, &r0), 1);
	assert_int_equal(f->nreplies, 1);                     /* H's batch only */
	assert_int_equal(rxf_release(f, "H"), 0);
	expect_answer(f, 2, 1, 0);
	expect_answer(f, 1, 1, 0);
	assert_true(reply_pos(f, 2, 1) < reply_pos(f, 1, 1));
	assert_int_equal(state_of(f, "G", NULL), PD_RX_ACTIVE);
	rxf_check(f);
}

/* ---- protocol violations roll the request back --------------------------------------- */

/* The request failed with err: its failed callback, a tombstone keeping
 * err, every slot and reservation back. */
static void expect_rolled_back(struct rx_fx *f, const char *req, int32_t err)
{
	int32_t status = 0;

	assert_int_equal(last_failure(f), err);
	assert_int_equal(state_of(f, req, &status), PD_RX_ENDED);
	assert_int_equal(status, err);
	rxf_assert_empty(f);
}

static void test_rank_reserved_twice_eproto(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv r0 = { .req = "D", .peer = 1, .seq = 1, .total = 2, .world_size = 2 };

	assert_int_equal(rxf_reserve(f, &r0), 0);
	expect_answer(f, 1, 1, 0);
	r0.seq = 2;
	assert_int_equal(rxf_reserve(f, &r0), 0);
	expect_answer(f, 1, 2, -EPROTO);
	assert_int_equal(rxf_stats(f).proto_errors, 1);
	expect_rolled_back(f, "D", -EPROTO);
}

/* Twice while waiting: the first is answered on admission, the second
 * then breaks the request (rolled back, the next waiter admitted). */
static void test_rank_reserved_twice_while_waiting(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv d = { .req = "D", .peer = 1, .seq = 1, .total = 6 };
	struct rxf_resv n = { .req = "N", .peer = 1, .seq = 3, .total = 6 };

	hold(f, "H", 6, 100);
	assert_int_equal(rxf_reserve(f, &d), 1);
	d.seq = 2;
	assert_int_equal(rxf_reserve(f, &d), 1);
	assert_int_equal(rxf_reserve(f, &n), 1);
	assert_int_equal(rxf_release(f, "H"), 0);
	expect_answer(f, 1, 1, 0);
	expect_answer(f, 1, 2, -EPROTO);
	assert_int_equal(last_failure(f), -EPROTO);
	expect_answer(f, 1, 3, 0);                            /* D's room went to N */
	assert_int_equal(state_of(f, "N", NULL), PD_RX_ACTIVE);
	assert_int_equal(rxf_cancel(f, "N"), 1);
	rxf_assert_empty(f);
}

/* A Reserve after the rank's batches: -EPROTO, the request (and the slots
 * its batch holds) rolled back. Another rank without batches may reserve. */
static void test_reserve_after_batch_eproto(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch b0 = { .req = "L", .peer = 1, .seq = 1, .n = 2, .total = 4,
				.world_size = 2 };
	struct rxf_resv r1 = { .req = "L", .peer = 2, .seq = 1, .total = 4, .world_size = 2,
			       .rank = 1 };
	struct rxf_resv r0 = { .req = "L", .peer = 1, .seq = 2, .total = 4, .world_size = 2 };

	assert_int_equal(rxf_alloc(f, &b0), 0);
	assert_int_equal(rxf_got(f, 1, 1)->n, 2);
	assert_int_equal(pd_pool_nfree(&f->pool), 8);
	assert_int_equal(rxf_reserve(f, &r1), 0);             /* rank 1: no batch yet */
	expect_answer(f, 2, 1, 0);
	assert_int_equal(rxf_reserve(f, &r0), 0);
	expect_answer(f, 1, 2, -EPROTO);
	expect_rolled_back(f, "L", -EPROTO);
}

/* Totals or world size that disagree: between Reserves, or between a
 * Reserve and the rank's later batches of the same peer. */
static void test_reserve_disagreements_eproto(void **state)
{
	static const struct {
		uint32_t world, total, peer, batch;   /* the second message; batch: AllocRequest */
		uint32_t rank;
	} cases[] = {
		{ 2, 5, 1, 1, 0 },                    /* rank 0's batch: total 5, reserved 4 */
		{ 3, 4, 1, 1, 0 },                    /* rank 0's batch: world 3 */
		{ 3, 4, 1, 0, 1 },                    /* rank 1's Reserve: world 3 */
		{ 2, 5, 1, 0, 1 },                    /* rank 1's Reserve: total 5 */
	};

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(cases); i++) {
		struct rx_fx *f = rxf_create(20, 64);
		struct rxf_resv r0 = { .req = "X", .peer = 1, .seq = 1, .total = 4,
				       .world_size = 2 };
		int rc;

		assert_int_equal(rxf_reserve(f, &r0), 0);
		expect_answer(f, 1, 1, 0);
		if (cases[i].batch) {
			struct rxf_batch b = { .req = "X", .peer = cases[i].peer, .seq = 2, .n = 1,
					       .total = cases[i].total,
					       .world_size = cases[i].world };

			rc = rxf_alloc(f, &b);
		} else {
			struct rxf_resv r = { .req = "X", .peer = cases[i].peer, .seq = 2,
					      .total = cases[i].total,
					      .world_size = cases[i].world, .rank = cases[i].rank };

			rc = rxf_reserve(f, &r);
		}
		assert_int_equal(rc, 0);
		assert_int_equal(rxf_got(f, cases[i].peer, 2)->err, -EPROTO);
		assert_int_equal(rxf_got(f, cases[i].peer, 2)->n, 0);
		expect_rolled_back(f, "X", -EPROTO);
		rxf_destroy(f);
	}
}

/* A peer that is not part of a request can neither fail nor cancel it: its
 * batch for a rank another peer took, or with other totals, is refused
 * -EPERM and counted, as is its cancel; the request goes on. It may still
 * join with a rank nobody took. */
static void test_stranger_cannot_fail_or_cancel(void **state)
{
	struct rx_fx *f = rxf_create(20, 64);
	struct rxf_resv r0 = { .req = "X", .peer = 1, .seq = 1, .total = 4, .world_size = 2 };
	struct rxf_batch take = { .req = "X", .peer = 3, .seq = 2, .n = 1, .total = 4,
				  .world_size = 2 };
	struct rxf_batch totals = { .req = "X", .peer = 3, .seq = 3, .n = 1, .total = 5,
				    .world_size = 2, .rank = 1 };
	struct rxf_batch join = { .req = "X", .peer = 3, .seq = 4, .n = 4, .total = 4,
				  .world_size = 2, .rank = 1, .is_last = 1 };
	struct rxf_resv world = { .req = "X", .peer = 3, .seq = 5, .total = 4, .world_size = 3,
				  .rank = 1 };

	(void)state;
	assert_int_equal(rxf_reserve(f, &r0), 0);
	expect_answer(f, 1, 1, 0);
	assert_int_equal(rxf_alloc(f, &take), 0);             /* rank 0 is peer 1's */
	expect_answer(f, 3, 2, -EPERM);
	assert_int_equal(rxf_alloc(f, &totals), 0);           /* other totals */
	expect_answer(f, 3, 3, -EPERM);
	assert_int_equal(pd_rx_cancel_from(f->rx, 3, (const uint8_t *)"X", 1, f->now), -EPERM);
	assert_int_equal(rxf_stats(f).rejected_foreign, 3);
	assert_int_equal(f->nfailed, 0);
	assert_int_equal(state_of(f, "X", NULL), PD_RX_ACTIVE);
	assert_int_equal(rxf_reserve(f, &world), 0);          /* another world size */
	expect_answer(f, 3, 5, -EPERM);
	assert_int_equal(rxf_stats(f).rejected_foreign, 4);
	assert_int_equal(rxf_alloc(f, &join), 0);             /* rank 1: nobody's yet */
	assert_int_equal(rxf_got(f, 3, 4)->err, 0);
	assert_int_equal(rxf_got(f, 3, 4)->n, 4);
	assert_int_equal(pd_rx_cancel_from(f->rx, 3, (const uint8_t *)"X", 1, f->now), 1);
	expect_rolled_back(f, "X", -ECANCELED);
	rxf_destroy(f);
}

/* ---- cancel and timeout while waiting ---------------------------------------------------- */

/* Cancelled while waiting: its held Reserve answered -ECANCELED, its place
 * in the queue given up (the next waiter admitted). */
static void test_cancel_while_waiting_withdraws(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv w = { .req = "W", .peer = 1, .seq = 1, .total = 8 };
	struct rxf_resv v = { .req = "V", .peer = 1, .seq = 2, .total = 2 };

	hold(f, "H", 8, 100);
	assert_int_equal(rxf_reserve(f, &w), 1);
	assert_int_equal(rxf_reserve(f, &v), 1);             /* 2 fit, but W is first */
	assert_int_equal(rxf_cancel(f, "W"), 1);
	expect_answer(f, 1, 1, -ECANCELED);
	assert_int_equal(last_failure(f), -ECANCELED);
	expect_answer(f, 1, 2, 0);
	assert_int_equal(rxf_stats(f).waiting_requests, 0);
	assert_int_equal(rxf_stats(f).cancelled, 1);
	assert_int_equal(state_of(f, "W", NULL), PD_RX_ENDED);
	assert_int_equal(rxf_cancel(f, "W"), 0);             /* idempotent */
	rxf_check(f);
}

/* Not admitted within admission_timeout_ns: answered -ETIMEDOUT. */
static void test_admission_timeout_etimedout(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv w = { .req = "W", .peer = 1, .seq = 1, .total = 8 };
	uint64_t t0 = f->now;
	int32_t status = 0;

	hold(f, "H", 8, 100);
	assert_int_equal(rxf_reserve(f, &w), 1);
	assert_int_equal(pd_rx_tick(f->rx, t0 + RXF_ADMIT_NS - 1), 0);
	assert_null(rxf_reply_for(f, 1, 1));
	assert_int_equal(pd_rx_tick(f->rx, t0 + RXF_ADMIT_NS), 1);
	expect_answer(f, 1, 1, -ETIMEDOUT);
	assert_int_equal(last_failure(f), -ETIMEDOUT);
	assert_int_equal(state_of(f, "W", &status), PD_RX_ENDED);
	assert_int_equal(status, -ETIMEDOUT);
	assert_int_equal(pd_rx_admit(f->rx)->stats.timed_out, 1);
	assert_int_equal(rxf_stats(f).waiting_requests, 0);
	rxf_check(f);
}

/* A peer fails: requests it only reserved go too, admitted (the rank's
 * peer is known from its Reserve) or waiting (its held Reserve answered
 * with the failure); another peer's are untouched. */
static void test_peer_failed_after_reserve(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_resv a = { .req = "A", .peer = 1, .seq = 1, .total = 4 };
	struct rxf_resv w = { .req = "W", .peer = 1, .seq = 2, .total = 5 };
	struct rxf_resv o = { .req = "O", .peer = 2, .seq = 1, .total = 2 };

	assert_int_equal(rxf_reserve(f, &a), 0);
	assert_int_equal(rxf_reserve(f, &o), 0);
	assert_int_equal(rxf_reserve(f, &w), 1);              /* 5 > 10 - 6 */
	assert_int_equal(pd_rx_peer_failed(f->rx, 1, f->now), 2);
	expect_answer(f, 1, 2, -ENOTCONN);
	assert_int_equal(state_of(f, "A", NULL), PD_RX_ENDED);
	assert_int_equal(state_of(f, "W", NULL), PD_RX_ENDED);
	assert_int_equal(state_of(f, "O", NULL), PD_RX_ACTIVE);
	assert_int_equal(f->nfailed, 2);
	assert_int_equal(last_failure(f), -ENOTCONN);
	assert_int_equal(rxf_stats(f).waiting_requests, 0);
	rxf_check(f);
}

/* ---- an old-style sender ---------------------------------------------------------------- */

/* No Reserve: the first AllocRequest (with total_chunks) asks admission as
 * before, beside a Reserve-first request in the same engine; neither
 * counts as the other. */
static void test_old_style_sender_admitted_as_before(void **state)
{
	struct rx_fx *f = *state;
	struct rxf_batch a1 = { .req = "A", .peer = 1, .seq = 1, .n = 2, .total = 4 };
	struct rxf_batch a2 = { .req = "A", .peer = 1, .seq = 2, .n = 2, .total = 4,
				.first = 2, .is_last = 1 };
	struct rxf_resv b = { .req = "B", .peer = 2, .seq = 1, .total = 8 };
	const struct pd_admit *adm = pd_rx_admit(f->rx);

	rxf_batch_ok(f, &a1);                                 /* admitted by its first batch */
	assert_int_equal(adm->stats.admitted_at_once, 1);
	assert_int_equal(adm->outstanding, 2);                /* 4 reserved, 2 drawn */
	assert_int_equal(adm->free, 10 - 2);
	assert_int_equal(rxf_reserve(f, &b), 1);              /* B waits for A */
	rxf_batch_ok(f, &a2);
	assert_int_equal(f->nready, 1);
	assert_int_equal(rxf_stats(f).reserves, 1);
	assert_int_equal(rxf_stats(f).batches, 2);
	assert_int_equal(rxf_release(f, "A"), 0);
	expect_answer(f, 2, 1, 0);
	assert_int_equal(rxf_cancel(f, "B"), 1);
	rxf_assert_empty(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn, setup) cmocka_unit_test_setup_teardown(fn, setup, rxf_teardown)
		T(test_reserve_malformed_einval, rxf_setup10),
		cmocka_unit_test(test_reserve_refused_big_and_busy),
		T(test_reserve_tombstone_ecanceled, rxf_setup10),
		T(test_reserve_admitted_at_once, rxf_setup10),
		T(test_reserve_held_fifo_with_alloc_first, rxf_setup10),
		T(test_second_rank_joins, rxf_setup10),
		T(test_ranks_reserved_while_waiting, rxf_setup10),
		T(test_rank_reserved_twice_eproto, rxf_setup10),
		T(test_rank_reserved_twice_while_waiting, rxf_setup10),
		T(test_reserve_after_batch_eproto, rxf_setup10),
		cmocka_unit_test(test_reserve_disagreements_eproto),
		cmocka_unit_test(test_stranger_cannot_fail_or_cancel),
		T(test_cancel_while_waiting_withdraws, rxf_setup10),
		T(test_admission_timeout_etimedout, rxf_setup10),
		T(test_peer_failed_after_reserve, rxf_setup10),
		T(test_old_style_sender_admitted_as_before, rxf_setup10),
#undef T
	};

	return cmocka_run_group_tests_name("rx_reserve", tests, NULL, NULL);
}
