/* SPDX-License-Identifier: MIT */
/*
 * Sender request engine (broker/pd_tx.c, pd_tx_end.c), second part: abort
 * at every stage, agent and peer loss, receiver and write failures,
 * deadlines, tombstones. Randomized interleavings are in test_tx_random.c;
 * argument checks and completion in test_tx.c.
 */
#include "tx_fixture.h"

static const struct fx_req RQ = { "req-a", 0, 1, 4, 7, 3 };

/* The request ended failed with status: one PUT_FAILED (unless agent_gone),
 * a CancelNotif only when cancel_notif, no success ProxyNotif; every slot
 * freed once; nothing live. */
static void expect_failed(const struct fx *f, int status, int cancel_notif, int agent_gone)
{
	assert_int_equal(fx_count(f, EV_AGENT), agent_gone ? 0 : 1);
	if (!agent_gone)
		assert_int_equal(fx_last(f, EV_AGENT)->status, status);
	assert_int_equal(fx_count(f, EV_CANCEL), cancel_notif);
	if (f->o.notify_failures) {
		assert_int_equal(fx_count(f, EV_PROXY), 1);
		assert_int_equal(fx_last(f, EV_PROXY)->status, status);
	} else {
		assert_int_equal(fx_count(f, EV_PROXY), 0);
	}
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* A late AllocResponse for seq is ignored and counted; a late batch refused. */
static void expect_late_refused(struct fx *f, const struct fx_req *q, uint64_t seq)
{
	uint64_t stale = fx_stats(f).stale_responses;
	uint32_t nev = f->nev;

	assert_int_equal(fx_grant(f, seq), -ENOENT);
	assert_int_equal(fx_stats(f).stale_responses, stale + 1);
	assert_int_equal(fx_put(f, q, 1, 0), -ECANCELED);
	assert_int_equal(f->nev, nev + 1);                  /* only the free of its staging */
	assert_int_equal(f->ev[nev].type, EV_FREE);
	fx_all_freed(f);
}

/* ---- abort at every stage ----------------------------------------------------- */

static void test_abort_before_any_response(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	assert_int_equal(fx_put(f, &RQ, 1, 0), 0);
	seq = fx_last_seq(f);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 1);
	assert_int_equal(fx_last(f, EV_WAKE)->tag, 77);
	assert_true(fx_index(f, EV_WAKE, 0) < fx_index(f, EV_FREE, 0));
	expect_failed(f, -ECANCELED, 1, 0);
	assert_int_equal(fx_stats(f).requests_cancelled, 1);
	expect_late_refused(f, &RQ, seq);
}

/* One batch completed, the next awaiting its response: that one's staging
 * is freed at once and the request ends at once (no write in flight). */
static void test_abort_with_batch_awaiting_response(void **state)
{
	struct fx *f = *state;
	uint64_t s1, s2;

	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	s1 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	assert_int_equal(fx_done(f, s1, 0), 0);
	assert_int_equal(fx_put(f, &RQ, 2, 1), 0);
	s2 = fx_last_seq(f);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 1);
	assert_int_equal(fx_count(f, EV_PUT), 1);
	expect_failed(f, -ECANCELED, 1, 0);
	assert_int_equal(fx_last(f, EV_AGENT)->chunks, 2);
	expect_late_refused(f, &RQ, s2);
}

/* Writes in flight: the staging of the unposted batch is freed at once,
 * the written one's only when its writes complete; CancelNotif and
 * PUT_FAILED only after that, and no PutDone for it. */
static void test_abort_with_writes_in_flight(void **state)
{
	struct fx *f = *state;
	uint32_t w0, u0, at;
	uint64_t s1, s2;

	w0 = f->next_slot;
	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	s1 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	u0 = f->next_slot;
	assert_int_equal(fx_put(f, &RQ, 2, 1), 0);
	s2 = fx_last_seq(f);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 1);
	fx_freed(f, u0, 2, 1);
	fx_freed(f, w0, 2, 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 0);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_stats(f).writes_in_flight, 1);
	at = f->nev;
	assert_int_equal(fx_done(f, s1, 0), 0);
	fx_freed(f, w0, 2, 1);
	assert_int_equal(fx_index(f, EV_FREE, at), at);     /* staging first, then the rest */
	assert_true(fx_index(f, EV_CANCEL, at) > at);
	assert_int_equal(fx_count(f, EV_PUT), 0);
	expect_failed(f, -ECANCELED, 1, 0);
	expect_late_refused(f, &RQ, s2);
}

static void test_abort_after_completion_is_noop(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ;
	uint32_t nev;

	q.total = 1;
	assert_int_equal(fx_put(f, &q, 1, 1), 0);
	assert_int_equal(fx_grant(f, fx_last_seq(f)), 0);
	assert_int_equal(fx_done(f, fx_last_seq(f), 0), 0);
	nev = f->nev;
	assert_int_equal(fx_cancel(f, q.id, q.rank), 0);
	assert_int_equal(pd_tx_agent_gone(f->tx, q.agent, 0), 0);
	assert_int_equal(pd_tx_peer_failed(f->tx, q.peer, -EIO, 0), 0);
	assert_int_equal(f->nev, nev);
	assert_int_equal(fx_stats(f).requests_done, 1);
	assert_int_equal(fx_stats(f).requests_cancelled, 0);
}

static void test_cancel_twice_is_harmless(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	seq = fx_last_seq(f);
	assert_int_equal(fx_grant(f, seq), 0);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 1);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 0);
	assert_int_equal(fx_cancel(f, RQ.id, PD_TX_ANY_RANK), 0);
	assert_int_equal(fx_done(f, seq, 0), 0);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 0);
	assert_int_equal(fx_count(f, EV_WAKE), 1);
	expect_failed(f, -ECANCELED, 1, 0);
}

static void test_cancel_any_rank_spares_other_requests(void **state)
{
	struct fx *f = *state;
	struct fx_req r0 = RQ, r1 = RQ, other = RQ;

	r0.world = r1.world = 2;
	r1.rank = 1;
	other.id = "req-a2";                /* same prefix, longer: another request */
	assert_int_equal(fx_put(f, &r0, 1, 0), 0);
	assert_int_equal(fx_put(f, &r1, 1, 0), 0);
	assert_int_equal(fx_put(f, &other, 1, 0), 0);
	assert_int_equal(fx_cancel(f, RQ.id, PD_TX_ANY_RANK), 2);
	assert_int_equal(fx_count(f, EV_AGENT), 2);
	assert_int_equal(fx_count(f, EV_CANCEL), 2);
	assert_int_equal(fx_stats(f).live_requests, 1);
	assert_int_equal(fx_cancel(f, "req-", PD_TX_ANY_RANK), 0);
}

/* ---- agent and peer loss ---------------------------------------------------------- */

static void test_agent_gone_no_events_cancel_sent(void **state)
{
	struct fx *f = *state;
	struct fx_req mine = RQ, other = RQ;
	uint64_t s1, s2;

	other.id = "req-b";
	other.agent = RQ.agent + 1;
	other.total = 1;
	assert_int_equal(fx_put(f, &mine, 2, 0), 0);
	s1 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	assert_int_equal(fx_put(f, &mine, 1, 0), 0);
	assert_int_equal(fx_put(f, &other, 1, 1), 0);
	s2 = fx_last_seq(f);
	assert_int_equal(pd_tx_agent_gone(f->tx, RQ.agent, 0), 1);
	assert_int_equal(pd_tx_agent_gone(f->tx, RQ.agent, 0), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 0);        /* a write is in flight */
	assert_int_equal(fx_done(f, s1, 0), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 1);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_stats(f).requests_cancelled, 1);
	assert_int_equal(fx_grant(f, s2), 0);               /* the other agent goes on */
	assert_int_equal(fx_done(f, s2, 0), 0);
	assert_int_equal(fx_count(f, EV_AGENT), 1);
	assert_int_equal(fx_last(f, EV_AGENT)->agent, other.agent);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* Cancelled first, agent gone while its writes drain: still no event. */
static void test_agent_gone_while_aborting(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	seq = fx_last_seq(f);
	assert_int_equal(fx_grant(f, seq), 0);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 1);
	assert_int_equal(pd_tx_agent_gone(f->tx, RQ.agent, 0), 0);
	assert_int_equal(fx_done(f, seq, -EIO), 0);
	expect_failed(f, -ECANCELED, 1, 1);
}

static void test_peer_failed_waits_for_writes_no_cancel(void **state)
{
	struct fx *f = *state;
	struct fx_req other = RQ;
	uint32_t w0;
	uint64_t s1, s2;

	other.id = "req-b";
	other.peer = RQ.peer + 1;
	w0 = f->next_slot;
	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	s1 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	assert_int_equal(fx_put(f, &RQ, 1, 0), 0);
	assert_int_equal(fx_put(f, &other, 1, 0), 0);
	s2 = fx_last_seq(f);
	assert_int_equal(pd_tx_peer_failed(f->tx, RQ.peer, -EHOSTDOWN, 0), 1);
	fx_freed(f, w0, 2, 0);                                /* still being written */
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_done(f, s1, -EIO), 0);
	fx_freed(f, w0, 2, 1);
	assert_int_equal(fx_count(f, EV_CANCEL), 0);
	assert_int_equal(fx_last(f, EV_AGENT)->status, -EHOSTDOWN);
	assert_int_equal(fx_stats(f).requests_failed, 1);
	assert_int_equal(fx_stats(f).live_requests, 1);     /* the other peer's */
	assert_int_equal(fx_cancel(f, other.id, other.rank), 1);
	assert_int_equal(fx_grant(f, s2), -ENOENT);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* Cancelled with a write in flight, then the peer fails: no CancelNotif. */
static void test_peer_failed_while_aborting(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	seq = fx_last_seq(f);
	assert_int_equal(fx_grant(f, seq), 0);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 1);
	assert_int_equal(pd_tx_peer_failed(f->tx, RQ.peer, -EIO, 0), 0);
	assert_int_equal(fx_done(f, seq, -EIO), 0);
	expect_failed(f, -ECANCELED, 0, 0);
}

/* ---- failures ---------------------------------------------------------------------- */

static void test_receiver_error_fails_request(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	seq = fx_last_seq(f);
	assert_int_equal(fx_resp_full(f, seq, -ENOSPC, NULL, 0), 0);
	assert_int_equal(fx_count(f, EV_WRITE), 0);
	expect_failed(f, -ENOSPC, 1, 0);
	assert_int_equal(fx_stats(f).requests_failed, 1);
	expect_late_refused(f, &RQ, seq);
}

static void test_failed_remote_index_fails_request(void **state)
{
	struct fx *f = *state;
	int32_t remote[3] = { 10, -1, 12 };

	assert_int_equal(fx_put(f, &RQ, 3, 0), 0);
	assert_int_equal(fx_resp_raw(f, fx_last_seq(f), remote, 3, NULL, 0), 0);
	assert_int_equal(fx_count(f, EV_WRITE), 0);
	expect_failed(f, -ENOBUFS, 1, 0);
}

/* -1 at an already_sent position is fine: it is not written. */
static void test_failed_index_ignored_when_already_sent(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ;
	int32_t remote[2] = { 10, -1 }, already[1] = { 1 };
	uint64_t seq;

	q.total = 2;
	assert_int_equal(fx_put(f, &q, 2, 1), 0);
	seq = fx_last_seq(f);
	assert_int_equal(fx_resp_raw(f, seq, remote, 2, already, 1), 0);
	assert_int_equal(fx_last(f, EV_WRITE)->nwrite, 1);
	assert_int_equal(fx_done(f, seq, 0), 0);
	assert_int_equal(fx_last(f, EV_PROXY)->status, 0);
	fx_all_freed(f);
	fx_ok(f);
}

/* One of two batches' writes fails: its staging freed at once, the other
 * still being written keeps its staging; the request ends after both. */
static void test_write_failure_fails_request(void **state)
{
	struct fx *f = *state;
	uint32_t s0;
	uint64_t s1, s2;

	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	s1 = fx_last_seq(f);
	s0 = f->next_slot;
	assert_int_equal(fx_put(f, &RQ, 2, 1), 0);
	s2 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	assert_int_equal(fx_grant(f, s2), 0);
	assert_int_equal(fx_done(f, s1, -EIO), 0);
	fx_freed(f, s0, 2, 0);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_done(f, s2, 0), 0);
	assert_int_equal(fx_count(f, EV_PUT), 0);
	expect_failed(f, -EIO, 1, 0);
}

/* The write op refuses to post: the request fails at once. */
static void test_write_post_failure_fails_request(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	seq = fx_last_seq(f);
	f->write_rc = -ENOTCONN;
	assert_int_equal(fx_grant(f, seq), 0);
	f->write_rc = 0;
	assert_int_equal(fx_done(f, seq, 0), -ENOENT);
	expect_failed(f, -ENOTCONN, 1, 0);
}

/* ---- deadlines ------------------------------------------------------------------------ */

static void test_alloc_timeout_via_tick(void **state)
{
	struct fx *f = *state;
	struct fx_req other = RQ;
	uint64_t late, other_seq;

	other.id = "req-b";
	f->now = 100;
	assert_int_equal(fx_put(f, &other, 1, 0), 0);
	other_seq = fx_last_seq(f);
	assert_int_equal(fx_grant(f, other_seq), 0);        /* answered: no deadline */
	assert_int_equal(fx_put(f, &RQ, 1, 0), 0);
	f->now = 200;
	assert_int_equal(fx_put(f, &RQ, 1, 0), 0);
	late = fx_last_seq(f);
	assert_int_equal(pd_tx_tick(f->tx, 100 + FX_ALLOC_TIMEOUT - 1), 0);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	f->now = 100 + FX_ALLOC_TIMEOUT;
	assert_int_equal(pd_tx_tick(f->tx, f->now), 1);
	assert_int_equal(fx_last(f, EV_AGENT)->status, -ETIMEDOUT);
	assert_int_equal(pd_tx_tick(f->tx, f->now + 10 * FX_ALLOC_TIMEOUT), 0);
	assert_int_equal(fx_stats(f).live_requests, 1);     /* the answered one lives */
	assert_int_equal(fx_grant(f, late), -ENOENT);
	assert_int_equal(fx_done(f, other_seq, 0), 0);
	fx_all_freed(f);
	fx_ok(f);
}

/* A tombstone refuses batches until it expires; it holds a request place
 * meanwhile; then the same (req_id, rank) is a new request. */
static void test_tombstone_expiry_allows_reuse(void **state)
{
	struct fx *f = fx_new(1, 0);
	struct fx_req q = RQ, other = RQ;

	(void)state;
	q.total = 1;
	other.id = "req-b";
	assert_int_equal(fx_put(f, &q, 1, 0), 0);
	assert_int_equal(fx_cancel(f, q.id, q.rank), 1);
	assert_int_equal(fx_stats(f).tombstones, 1);
	assert_int_equal(fx_put(f, &other, 1, 0), -EBUSY);
	assert_int_equal(pd_tx_tick(f->tx, FX_TOMBSTONE - 1), 0);
	assert_int_equal(fx_put(f, &q, 1, 1), -ECANCELED);
	assert_int_equal(pd_tx_tick(f->tx, FX_TOMBSTONE), 0);
	assert_int_equal(fx_stats(f).tombstones, 0);
	f->now = FX_TOMBSTONE;
	assert_int_equal(fx_put(f, &q, 1, 1), 0);
	assert_int_equal(fx_grant(f, fx_last_seq(f)), 0);
	assert_int_equal(fx_done(f, fx_last_seq(f), 0), 0);
	assert_int_equal(fx_last(f, EV_PROXY)->status, 0);
	assert_int_equal(fx_count(f, EV_AGENT), 2);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
	fx_free(f);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
#define TN(fn) cmocka_unit_test_setup_teardown(fn, fx_setup_notify, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_abort_before_any_response),
		T(test_abort_with_batch_awaiting_response),
		T(test_abort_with_writes_in_flight),
		TN(test_abort_with_writes_in_flight),
		T(test_abort_after_completion_is_noop),
		T(test_cancel_twice_is_harmless),
		T(test_cancel_any_rank_spares_other_requests),
		T(test_agent_gone_no_events_cancel_sent),
		T(test_agent_gone_while_aborting),
		T(test_peer_failed_waits_for_writes_no_cancel),
		T(test_peer_failed_while_aborting),
		T(test_receiver_error_fails_request),
		TN(test_receiver_error_fails_request),
		T(test_failed_remote_index_fails_request),
		T(test_failed_index_ignored_when_already_sent),
		T(test_write_failure_fails_request),
		T(test_write_post_failure_fails_request),
		T(test_alloc_timeout_via_tick),
		cmocka_unit_test(test_tombstone_expiry_allows_reuse),
	};

	return cmocka_run_group_tests_name("tx_more", tests, NULL, NULL);
}
