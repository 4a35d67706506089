/* SPDX-License-Identifier: MIT */
/*
 * Sender request engine: grants that come with the admission (pd_tx.h,
 * admit_grants). A Reserve asks for slots for the rank's first chunks; a
 * batch they cover is written at once, without an AllocRequest, and its
 * PutDone binds the keys; a longer batch is split. The grants belong to
 * their request: an abort (its own, a sibling rank's, a cancel) drops the
 * ones not used, and an answer after the abort is ignored. Refusals first.
 * Every test ends with pd_tx_check() (fx_ok/fx_idle).
 */
#include "tx_fixture.h"

#define GRANTS 4u
#define G0     9000 /* the receiver's slot of grant i: G0 + i */

static int setup_grants(void **state)
{
	struct fx *f = fx_new(64, 0);

	pd_tx_destroy(f->tx);
	f->o.admit_grants = GRANTS;
	assert_int_equal(pd_tx_create(&f->o, &f->tx), 0);
	f->manual = 1;
	*state = f;
	return 0;
}

/* Declare q; the Reserve's seq. */
static uint64_t declare(struct fx *f, const struct fx_req *q)
{
	assert_int_equal(fx_declare(f, q, 0), 0);
	return fx_reserve_seq(f);
}

/* The admitting answer to Reserve seq, with n grants (G0 + i, gen 70 + i). */
static int admit_with(struct fx *f, uint64_t seq, uint32_t n)
{
	int32_t remote[64];
	uint32_t gens[64];
	struct pd_tx_resp m = { .peer = f->b[seq % FX_SEQS].peer, .seq = seq, .n = n,
				.remote = remote, .gens = gens };

	for (uint32_t i = 0; i < n; i++) {
		remote[i] = G0 + (int32_t)i;
		gens[i] = 70 + i;
	}
	return pd_tx_alloc_resp(f->tx, &m, f->now);
}

static int submit(struct fx *f, const struct fx_req *q, uint32_t n, uint32_t last)
{
	struct pd_tx_submit s = fx_sub(q, n, last, NULL);

	return fx_submit(f, &s);
}

static const struct fx_req RQ = { "req-g", 0, 1, 6, 7, 3 };

/* ---- negative --------------------------------------------------------------------- */

/* An admitting answer with more grants than asked, a failed one, or
 * already_sent positions fails the request (-EPROTO): none is ever used. */
static void test_bad_grants_fail_the_request(void **state)
{
	struct fx *f = *state;
	const struct fx_req small = { "small", 0, 1, 2, 7, 3 };
	const int32_t bad[2] = { G0, -1 }, already[1] = { 0 };
	uint64_t seq = declare(f, &small);

	assert_int_equal(fx_last(f, EV_RESERVE)->grants, 2); /* its total, below GRANTS */
	assert_int_equal(admit_with(f, seq, 3), -EPROTO);
	assert_int_equal(fx_last(f, EV_AGENT)->status, -EPROTO);
	seq = declare(f, &(struct fx_req){ "neg", 0, 1, 2, 7, 3 });
	assert_int_equal(fx_resp_raw(f, seq, bad, 2, NULL, 0), -EPROTO);
	seq = declare(f, &(struct fx_req){ "dup", 0, 1, 2, 7, 3 });
	assert_int_equal(fx_resp_raw(f, seq, bad, 1, already, 1), -EPROTO);
	assert_int_equal(fx_count(f, EV_ADMITTED), 0);
	assert_int_equal(fx_count(f, EV_WRITE), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 3); /* each Reserve withdrawn */
	fx_idle(f);
	fx_ok(f);
}

/* Without admit_grants a Reserve asks none, and an answer with indexes is
 * refused as before. */
static void test_no_grants_asked_none_taken(void **state)
{
	struct fx *f = fx_new(64, 0);
	uint64_t seq;

	(void)state;
	assert_int_equal(fx_declare(f, &RQ, 0), 0);
	seq = fx_reserve_seq(f);
	assert_int_equal(fx_last(f, EV_RESERVE)->grants, 0);
	assert_int_equal(admit_with(f, seq, 1), -EPROTO);
	assert_int_equal(fx_last(f, EV_AGENT)->status, -EPROTO);
	fx_idle(f);
	fx_ok(f);
	fx_free(f);
}

/* ---- the fast path ---------------------------------------------------------------- */

/* A batch the grants cover: written at once on them, no AllocRequest; its
 * PutDone binds; PUT_DONE once written. */
static void test_batch_on_grants_needs_no_alloc(void **state)
{
	struct fx *f = *state;
	const struct fx_req q = { "one", 0, 1, 2, 7, 3 };
	uint64_t seq = declare(f, &q);
	const struct fx_ev *w;

	assert_int_equal(admit_with(f, seq, 2), 0);
	assert_int_equal(fx_last(f, EV_ADMITTED)->chunks, 2);
	assert_int_equal(submit(f, &q, 2, 1), 0);
	assert_int_equal(fx_count(f, EV_ALLOC), 0);
	w = fx_last(f, EV_WRITE);
	assert_int_equal(w->bind, 1);
	assert_int_equal(w->nwrite, 2);
	assert_int_equal(w->remote0, G0);
	assert_int_equal(fx_done(f, w->seq, 0), 0);
	assert_int_equal(fx_last(f, EV_PUT)->bind, 1);
	assert_int_equal(fx_last(f, EV_PUT)->n, 2);
	assert_int_equal(fx_last(f, EV_AGENT)->status, 0);
	assert_int_equal(fx_stats(f).pregranted, 1);
	assert_int_equal(fx_stats(f).batches, 0);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* Grants are the rank's first chunks, in order, across batches; a batch
 * longer than what is left is split: the covered chunks written now, an
 * AllocRequest for the rest only. */
static void test_grants_in_order_then_split(void **state)
{
	struct fx *f = *state;
	uint64_t seq = declare(f, &RQ), w1, w2, w3, a;

	assert_int_equal(admit_with(f, seq, 3), 0);
	assert_int_equal(submit(f, &RQ, 1, 0), 0);
	w1 = fx_last(f, EV_WRITE)->seq;
	assert_int_equal(fx_last(f, EV_WRITE)->remote0, G0);
	assert_int_equal(submit(f, &RQ, 1, 0), 0);
	w2 = fx_last(f, EV_WRITE)->seq;
	assert_int_equal(fx_last(f, EV_WRITE)->remote0, G0 + 1);
	assert_int_equal(submit(f, &RQ, 4, 1), 0); /* grant 2, then 3 by AllocRequest */
	w3 = fx_last(f, EV_WRITE)->seq;
	assert_int_equal(fx_last(f, EV_WRITE)->remote0, G0 + 2);
	assert_int_equal(fx_last(f, EV_WRITE)->nwrite, 1);
	assert_int_equal(fx_count(f, EV_ALLOC), 1);
	a = fx_last_seq(f);
	assert_int_equal(fx_last(f, EV_ALLOC)->n, 3);
	assert_int_equal(fx_grant(f, a), 0);
	assert_int_equal(fx_done(f, w1, 0), 0);
	assert_int_equal(fx_done(f, w2, 0), 0);
	assert_int_equal(fx_done(f, w3, 0), 0);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_done(f, a, 0), 0);
	assert_int_equal(fx_last(f, EV_AGENT)->status, 0);
	assert_int_equal(fx_last(f, EV_AGENT)->chunks, 6);
	assert_int_equal(fx_stats(f).pregranted, 3);
	assert_int_equal(fx_stats(f).batches, 1);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* ---- the grants never outlive their request ---------------------------------------- */

/* Cancelled after its admission, before a batch: CancelNotif (the receiver
 * takes the grants back with its rollback), and nothing is ever written on
 * them, not even by a batch that comes later. */
static void test_cancel_drops_grants(void **state)
{
	struct fx *f = *state;
	uint64_t seq = declare(f, &RQ);

	assert_int_equal(admit_with(f, seq, 4), 0);
	assert_int_equal(fx_cancel(f, RQ.id, 0), 1);
	assert_int_equal(fx_count(f, EV_CANCEL), 1);
	assert_int_equal(fx_last(f, EV_AGENT)->status, -ECANCELED);
	assert_int_equal(submit(f, &RQ, 2, 0), -ECANCELED);
	assert_int_equal(fx_count(f, EV_WRITE), 0);
	assert_int_equal(admit_with(f, seq, 4), -ENOENT); /* a second answer: stale */
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* A write on the grants that cannot be posted fails the request at once,
 * and the AllocRequest for the rest of the batch is never sent. */
static void test_write_refused_on_grants(void **state)
{
	struct fx *f = *state;
	uint64_t seq = declare(f, &RQ);

	assert_int_equal(admit_with(f, seq, 2), 0);
	f->write_rc = -EPROTONOSUPPORT;
	assert_int_equal(submit(f, &RQ, 6, 1), 0);
	assert_int_equal(fx_count(f, EV_ALLOC), 0);
	assert_int_equal(fx_last(f, EV_AGENT)->status, -EPROTONOSUPPORT);
	assert_int_equal(fx_count(f, EV_CANCEL), 1);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* One rank fails while the other holds grants: the other's are dropped
 * with its abort; its next batch is refused and nothing is written. */
static void test_sibling_abort_drops_grants(void **state)
{
	struct fx *f = *state;
	const struct fx_req r0 = { "gang", 0, 2, 3, 7, 3 }, r1 = { "gang", 1, 2, 3, 7, 4 };
	uint64_t s0 = declare(f, &r0), s1 = declare(f, &r1);

	assert_int_equal(admit_with(f, s0, 3), 0);
	assert_int_equal(admit_with(f, s1, 3), 0);
	assert_int_equal(submit(f, &r1, 1, 0), 0);
	assert_int_equal(fx_done(f, fx_last(f, EV_WRITE)->seq, -EIO), 0);
	assert_int_equal(submit(f, &r0, 3, 1), -ECANCELED);
	assert_int_equal(fx_count(f, EV_WRITE), 1);
	assert_int_equal(fx_count(f, EV_AGENT), 2);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bad_grants_fail_the_request, setup_grants,
						fx_teardown),
		cmocka_unit_test(test_no_grants_asked_none_taken),
		cmocka_unit_test_setup_teardown(test_batch_on_grants_needs_no_alloc, setup_grants,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_grants_in_order_then_split, setup_grants,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_cancel_drops_grants, setup_grants,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_write_refused_on_grants, setup_grants,
						fx_teardown),
		cmocka_unit_test_setup_teardown(test_sibling_abort_drops_grants, setup_grants,
						fx_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
