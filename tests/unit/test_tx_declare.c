/* SPDX-License-Identifier: MIT */
/*
 * Sender request engine: how requests start (broker/pd_tx_admit.c). A
 * request is declared (pd_tx_declare) before any of it is staged; its
 * Reserve is answered by the peer (admitted, or refused), or its admission
 * deadline fails it. Only an admitted request takes batches. Argument
 * checks and refusals first, then admission, its failures and deadlines,
 * then the stats. Every test ends with pd_tx_check() (fx_ok/fx_idle).
 */
#include "tx_fixture.h"

static const struct fx_req RQ = { "req-d", 0, 1, 4, 7, 3 };

/* Events of type for (req, rank). */
static uint32_t count_of(const struct fx *f, uint32_t type, const char *req, uint32_t rank)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < f->nev; i++)
		n += f->ev[i].type == type && !strcmp(f->ev[i].req, req) && f->ev[i].rank == rank;
	return n;
}

struct info_seen {
	uint32_t n, declared;
	uint32_t state[8];
};

static void on_info(void *ctx, const struct pd_tx_info *i)
{
	struct info_seen *s = ctx;

	if (s->n < PD_ARRAY_SIZE(s->state))
		s->state[s->n] = i->state;
	s->n++;
	s->declared += i->state == PD_TX_INFO_DECLARED;
}

static struct info_seen infos(const struct fx *f)
{
	struct info_seen s = { 0 };

	pd_tx_foreach(f->tx, on_info, &s);
	return s;
}

/* q failed with status before it was admitted: one PUT_FAILED, a CancelNotif
 * when cancel_notif (the Reserve told the peer), never an ADMITTED or an
 * AllocRequest; nothing live, nothing waiting. */
static void expect_failed_unadmitted(const struct fx *f, int status, int cancel_notif)
{
	assert_int_equal(fx_count(f, EV_AGENT), 1);
	assert_int_equal(fx_last(f, EV_AGENT)->status, status);
	assert_int_equal(fx_count(f, EV_CANCEL), cancel_notif);
	assert_int_equal(fx_count(f, EV_ADMITTED), 0);
	assert_int_equal(fx_count(f, EV_ALLOC), 0);
	assert_int_equal(fx_count(f, EV_PROXY), f->o.notify_failures);
	if (cancel_notif)
		assert_true(fx_index(f, EV_CANCEL, 0) < fx_index(f, EV_AGENT, 0));
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* A late answer to Reserve seq is ignored (-ENOENT) and counted; nothing happens. */
static void expect_stale_answer(struct fx *f, uint64_t seq)
{
	uint64_t stale = fx_stats(f).stale_responses;
	uint32_t nev = f->nev;

	assert_int_equal(fx_admit(f, seq, 0), -ENOENT);
	assert_int_equal(fx_stats(f).stale_responses, stale + 1);
	assert_int_equal(f->nev, nev);
	assert_int_equal(fx_stats(f).admitted, 0);
}

/* ---- negative ------------------------------------------------------------------ */

/* Each bad field alone gives -EINVAL: nothing sent, nothing counted. */
static void test_declare_negative(void **state)
{
	struct fx *f = *state;
	char big[PD_REQ_ID_MAX + 1];
	struct pd_tx_declare d = fx_decl(&RQ, 0);

	assert_int_equal(pd_tx_declare(NULL, &d, 0), -EINVAL);
	assert_int_equal(pd_tx_declare(f->tx, NULL, 0), -EINVAL);
#define BAD(field, val)                                                                \
	do {                                                                           \
		d = fx_decl(&RQ, 0);                                                   \
		d.field = val;                                                         \
		assert_int_equal(pd_tx_declare(f->tx, &d, 0), -EINVAL);                \
	} while (0)
	BAD(req_id, NULL);
	BAD(req_id_len, 0);
	BAD(req_id_len, PD_REQ_ID_MAX + 1);
	BAD(world_size, 0);
	BAD(rank, 1);                          /* rank >= world_size 1 */
#undef BAD
	memset(big, 'x', sizeof(big));
	d = fx_decl(&RQ, 0);
	d.req_id = (const uint8_t *)big;
	d.req_id_len = sizeof(big);
	assert_int_equal(pd_tx_declare(f->tx, &d, 0), -EINVAL);
	d.req_id_len = PD_REQ_ID_MAX;         /* the longest id is fine */
	assert_int_equal(pd_tx_declare(f->tx, &d, 0), 0);
	assert_int_equal(fx_count(f, EV_RESERVE), 1);
	assert_int_equal(fx_last(f, EV_RESERVE)->seq, 1);
	assert_int_equal(fx_stats(f).declared, 1);
	assert_int_equal(fx_stats(f).refused, 0);
	assert_int_equal(pd_tx_check(NULL), -EINVAL);
	fx_ok(f);
}

/* A (req_id, rank) known to the engine, live or ended, is -EEXIST and sends
 * nothing; another rank of the same req_id is a request of its own. */
static void test_declare_twice_eexist(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ, r1 = RQ;
	uint32_t nev;

	q.total = 1;
	q.world = r1.world = 2;
	r1.rank = 1;
	r1.total = 1;
	assert_int_equal(fx_declare(f, &q, 0), 0);
	nev = f->nev;
	assert_int_equal(fx_declare(f, &q, 0), -EEXIST);       /* waiting */
	assert_int_equal(f->nev, nev);
	assert_int_equal(fx_admit(f, fx_reserve_seq(f), 0), 0);
	assert_int_equal(fx_declare(f, &q, 0), -EEXIST);       /* admitted */
	assert_int_equal(fx_put(f, &q, 1, 1), 0);
	assert_int_equal(fx_grant(f, fx_last_seq(f)), 0);
	assert_int_equal(fx_done(f, fx_last_seq(f), 0), 0);
	assert_int_equal(fx_last(f, EV_AGENT)->status, 0);
	nev = f->nev;
	assert_int_equal(fx_declare(f, &q, 0), -EEXIST);       /* ended: tombstoned */
	assert_int_equal(f->nev, nev);
	assert_int_equal(fx_count(f, EV_RESERVE), 1);
	assert_int_equal(fx_declare(f, &r1, 0), 0);            /* rank 1: its own */
	assert_int_equal(fx_count(f, EV_RESERVE), 2);
	assert_int_equal(fx_last(f, EV_RESERVE)->rank, 1);
	assert_int_equal(fx_stats(f).declared, 2);
	fx_ok(f);
}

/* max_requests counts live requests and tombstones: the next declaration is
 * -EBUSY (nothing sent, no event) until a tombstone expires. */
static void test_declare_busy(void **state)
{
	struct fx *f = fx_new(2, 0);
	struct fx_req a = RQ, b = RQ, c = RQ;
	uint32_t nev;

	(void)state;
	b.id = "req-b";
	c.id = "req-c";
	assert_int_equal(fx_declare(f, &a, 0), 0);
	assert_int_equal(fx_declare(f, &b, 0), 0);
	nev = f->nev;
	assert_int_equal(fx_declare(f, &c, 0), -EBUSY);
	assert_int_equal(f->nev, nev);
	assert_int_equal(fx_stats(f).declared, 2);
	assert_int_equal(fx_cancel(f, a.id, a.rank), 1);       /* a is a tombstone now */
	assert_int_equal(fx_stats(f).tombstones, 1);
	nev = f->nev;
	assert_int_equal(fx_declare(f, &c, 0), -EBUSY);
	assert_int_equal(f->nev, nev);
	assert_int_equal(pd_tx_tick(f->tx, FX_TOMBSTONE), 1);  /* b's admission expires too */
	f->now = FX_TOMBSTONE;
	assert_int_equal(pd_tx_tick(f->tx, f->now), 0);
	assert_int_equal(fx_declare(f, &c, 0), 0);
	assert_int_equal(fx_stats(f).declared, 3);
	fx_ok(f);
	fx_free(f);
}

/* A batch of a request never declared: -ENOENT, its staging freed, no event
 * from the engine (the caller reports it), no request created. */
static void test_submit_undeclared_enoent(void **state)
{
	struct fx *f = *state;
	struct pd_tx_submit s = fx_sub(&RQ, 2, 0, NULL);
	uint32_t s0 = f->next_slot;

	assert_int_equal(fx_submit(f, &s), -ENOENT);
	fx_freed(f, s0, 2, 1);
	assert_int_equal(f->nev, 1);
	assert_int_equal(f->ev[0].type, EV_FREE);
	assert_int_equal(f->ev[0].n, 2);
	s = fx_sub(&RQ, 0, 1, NULL);                              /* an empty last one too */
	assert_int_equal(fx_submit(f, &s), -ENOENT);
	assert_int_equal(f->nev, 1);
	assert_int_equal(fx_stats(f).refused, 2);
	assert_int_equal(fx_stats(f).declared, 0);
	assert_int_equal(fx_stats(f).live_requests, 0);
	assert_int_equal(fx_declare(f, &RQ, 0), 0);              /* it was not remembered */
	fx_all_freed(f);
	fx_ok(f);
}

/* A batch while the Reserve waits: the request fails (-EPROTO), the batch's
 * staging is freed, CancelNotif (the Reserve went out) and PUT_FAILED; the
 * admission answer that comes later is stale. */
static void test_submit_before_admission_eproto(void **state)
{
	struct fx *f = *state;
	struct pd_tx_submit s = fx_sub(&RQ, 2, 0, NULL);
	uint32_t s0;
	uint64_t seq;

	assert_int_equal(fx_declare(f, &RQ, 0), 0);
	seq = fx_reserve_seq(f);
	s0 = f->next_slot;
	assert_int_equal(fx_submit(f, &s), -EPROTO);
	fx_freed(f, s0, 2, 1);
	assert_true(fx_index(f, EV_FREE, 0) < fx_index(f, EV_AGENT, 0));
	expect_failed_unadmitted(f, -EPROTO, 1);
	assert_int_equal(fx_stats(f).requests_failed, 1);
	assert_int_equal(fx_stats(f).refused, 1);
	expect_stale_answer(f, seq);
	s = fx_sub(&RQ, 1, 0, NULL);
	assert_int_equal(fx_submit(f, &s), -ECANCELED);          /* tombstoned, failed */
	fx_all_freed(f);
	fx_ok(f);
}

/* ---- the answer to a Reserve ---------------------------------------------------- */

/* Admitted: one ADMITTED (status 0, chunks = total) before any batch; then
 * the request runs as before; a second answer is stale. */
static void test_reserve_admits(void **state)
{
	struct fx *f = *state;
	const struct fx_ev *e;
	uint64_t seq;

	assert_int_equal(fx_declare(f, &RQ, 0), 0);
	e = fx_last(f, EV_RESERVE);
	seq = e->seq;
	assert_int_equal(e->peer, RQ.peer);
	assert_int_equal(e->rank, RQ.rank);
	assert_int_equal(e->chunks, RQ.total);
	assert_int_equal(e->world, RQ.world);
	assert_int_equal(e->n, 0);
	assert_string_equal(e->req, RQ.id);
	assert_int_equal(infos(f).declared, 1);
	assert_int_equal(fx_count(f, EV_ADMITTED), 0);
	assert_int_equal(fx_admit(f, seq, 0), 0);
	e = fx_last(f, EV_ADMITTED);
	assert_int_equal(e->status, 0);
	assert_int_equal(e->chunks, RQ.total);
	assert_int_equal(e->agent, RQ.agent);
	assert_int_equal(e->peer, RQ.peer);
	assert_string_equal(e->req, RQ.id);
	assert_int_equal(infos(f).declared, 0);
	assert_int_equal(infos(f).state[0], PD_TX_INFO_IDLE);
	assert_int_equal(fx_admit(f, seq, 0), -ENOENT);          /* second answer */
	assert_int_equal(fx_count(f, EV_ADMITTED), 1);
	assert_int_equal(fx_put(f, &RQ, 4, 1), 0);               /* already declared */
	assert_int_equal(fx_count(f, EV_RESERVE), 1);
	assert_int_equal(fx_grant(f, fx_last_seq(f)), 0);
	assert_int_equal(fx_done(f, fx_last_seq(f), 0), 0);
	assert_int_equal(fx_last(f, EV_AGENT)->status, 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 0);
	assert_true(fx_index(f, EV_ADMITTED, 0) < fx_index(f, EV_ALLOC, 0));
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* An answer from another peer is not the answer (stale); an answer of
 * the right peer still admits afterwards. */
static void test_reserve_answer_other_peer_stale(void **state)
{
	struct fx *f = *state;
	struct pd_tx_resp m = { .peer = RQ.peer + 1 };

	assert_int_equal(fx_declare(f, &RQ, 0), 0);
	m.seq = fx_reserve_seq(f);
	assert_int_equal(pd_tx_alloc_resp(f->tx, &m, f->now), -ENOENT);
	assert_int_equal(fx_stats(f).stale_responses, 1);
	assert_int_equal(fx_count(f, EV_ADMITTED), 0);
	assert_int_equal(fx_admit(f, m.seq, 0), 0);
	assert_int_equal(fx_count(f, EV_ADMITTED), 1);
	fx_ok(f);
}

/* A Reserve answered with indexes (or already_sent positions) is a corrupt
 * answer: -EPROTO, the request fails, CancelNotif. */
static void test_reserve_answered_with_indexes_eproto(void **state)
{
	int32_t remote[1] = { 3 }, already[1] = { 0 };

	(void)state;
	for (int i = 0; i < 2; i++) {
		struct fx *f = fx_new(8, 0);
		struct pd_tx_resp m = { .peer = RQ.peer, .remote = remote,
					.already_sent = already };

		assert_int_equal(fx_declare(f, &RQ, 0), 0);
		m.seq = fx_reserve_seq(f);
		m.n = i == 0;
		m.nalready = i == 1;
		assert_int_equal(pd_tx_alloc_resp(f->tx, &m, f->now), -EPROTO);
		expect_failed_unadmitted(f, -EPROTO, 1);
		expect_stale_answer(f, m.seq);
		fx_free(f);
	}
}

/* The receiver refuses (err < 0): PUT_FAILED with that error (a failure
 * ProxyNotif with notify_failures), CancelNotif; err > 0 is -EPROTO. */
static void test_reserve_error_fails(void **state)
{
	struct fx *f = *state;
	struct fx *g = fx_new(8, 0);
	uint64_t seq;

	assert_int_equal(fx_declare(f, &RQ, 0), 0);
	seq = fx_reserve_seq(f);
	assert_int_equal(fx_admit(f, seq, -E2BIG), 0);
	expect_failed_unadmitted(f, -E2BIG, 1);
	if (f->o.notify_failures)
		assert_int_equal(fx_last(f, EV_PROXY)->status, -E2BIG);
	assert_int_equal(fx_stats(f).requests_failed, 1);
	expect_stale_answer(f, seq);
	assert_int_equal(fx_declare(g, &RQ, 0), 0);
	assert_int_equal(fx_admit(g, fx_reserve_seq(g), 5), 0);
	expect_failed_unadmitted(g, -EPROTO, 1);
	fx_free(g);
}

/* total 0: nothing to reserve, admitted at once (no Reserve, nothing to
 * withdraw: no CancelNotif when cancelled); its empty last batch completes. */
static void test_total_zero_admitted_at_once(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ, c = RQ;

	q.total = 0;
	c.total = 0;
	c.id = "req-z";
	assert_int_equal(fx_declare(f, &q, 0), 0);
	assert_int_equal(f->nev, 1);
	assert_int_equal(f->ev[0].type, EV_ADMITTED);
	assert_int_equal(f->ev[0].chunks, 0);
	assert_int_equal(fx_stats(f).admitting, 0);
	assert_int_equal(fx_stats(f).admitted, 1);
	assert_int_equal(infos(f).declared, 0);
	assert_int_equal(pd_tx_tick(f->tx, 10 * FX_ALLOC_TIMEOUT), 0); /* no deadline */
	assert_int_equal(fx_put(f, &q, 0, 1), 0);
	assert_int_equal(fx_last(f, EV_AGENT)->status, 0);
	assert_int_equal(fx_declare(f, &c, 0), 0);
	assert_int_equal(fx_cancel(f, c.id, c.rank), 1);
	assert_int_equal(fx_last(f, EV_AGENT)->status, -ECANCELED);
	assert_int_equal(fx_count(f, EV_RESERVE), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 0);
	fx_idle(f);
	fx_ok(f);
}

/* ---- deadlines --------------------------------------------------------------------- */

/* Its own timeout: fails at now + timeout_ns exactly, -ETIMEDOUT, CancelNotif. */
static void test_admission_deadline_custom(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	f->now = 100;
	assert_int_equal(fx_declare(f, &RQ, 300), 0);
	seq = fx_reserve_seq(f);
	assert_int_equal(pd_tx_tick(f->tx, 399), 0);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	f->now = 400;
	assert_int_equal(pd_tx_tick(f->tx, f->now), 1);
	expect_failed_unadmitted(f, -ETIMEDOUT, 1);
	assert_int_equal(pd_tx_tick(f->tx, 10 * FX_ALLOC_TIMEOUT), 0);
	expect_stale_answer(f, seq);
}

/* timeout_ns 0: alloc_timeout_ns; both 0: no deadline at all. */
static void test_admission_deadline_default(void **state)
{
	struct fx *f = *state;
	struct fx *g = fx_new(8, 0);

	f->now = 50;
	assert_int_equal(fx_declare(f, &RQ, 0), 0);
	assert_int_equal(pd_tx_tick(f->tx, 50 + FX_ALLOC_TIMEOUT - 1), 0);
	f->now = 50 + FX_ALLOC_TIMEOUT;
	assert_int_equal(pd_tx_tick(f->tx, f->now), 1);
	expect_failed_unadmitted(f, -ETIMEDOUT, 1);

	pd_tx_destroy(g->tx);
	g->o.alloc_timeout_ns = 0;
	assert_int_equal(pd_tx_create(&g->o, &g->tx), 0);
	assert_int_equal(fx_declare(g, &RQ, 0), 0);
	assert_int_equal(pd_tx_tick(g->tx, UINT64_MAX - 1), 0);
	assert_int_equal(fx_stats(g).admitting, 1);
	assert_int_equal(fx_admit(g, fx_reserve_seq(g), 0), 0);
	assert_int_equal(fx_count(g, EV_ADMITTED), 1);
	fx_ok(g);
	fx_free(g);
}

/* Deadlines of different lengths expire in deadline order, not in the
 * order of declaration: a short one declared after a long one goes first. */
static void test_admission_deadlines_sorted(void **state)
{
	static const struct {
		const char *id;
		uint64_t timeout;
	} d[4] = { { "long", 1000 }, { "short", 100 }, { "mid", 500 }, { "dflt", 0 } };
	static const char *const order[4] = { "short", "mid", "long", "dflt" };
	static const uint64_t at[4] = { 100, 500, 1000, FX_ALLOC_TIMEOUT + 10 };
	struct fx *f = *state;

	for (int i = 0; i < 4; i++) {
		struct fx_req q = RQ;

		q.id = d[i].id;
		f->now = i == 3 ? 10 : 0;
		assert_int_equal(fx_declare(f, &q, d[i].timeout), 0);
	}
	assert_int_equal(fx_stats(f).admitting, 4);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pd_tx_tick(f->tx, at[i] - 1), 0);
		f->now = at[i];
		assert_int_equal(pd_tx_tick(f->tx, f->now), 1);
		assert_int_equal(fx_count(f, EV_AGENT), i + 1);
		assert_string_equal(fx_last(f, EV_AGENT)->req, order[i]);
		assert_int_equal(fx_last(f, EV_AGENT)->status, -ETIMEDOUT);
		assert_int_equal(fx_stats(f).admitting, 3 - i);
		fx_ok(f);
	}
	assert_int_equal(fx_count(f, EV_CANCEL), 4);
	fx_idle(f);
}

/* ---- aborts while declared ------------------------------------------------------------ */

/* Cancelled while its Reserve waits: PUT_FAILED -ECANCELED, CancelNotif
 * (the peer may hold a reservation for it), wake_alloc; the admission that
 * comes later is ignored (stale, counted): no ADMITTED. */
static void test_cancel_while_declared(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	assert_int_equal(fx_declare(f, &RQ, 0), 0);
	seq = fx_reserve_seq(f);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 1);
	assert_int_equal(fx_count(f, EV_WAKE), 1);
	expect_failed_unadmitted(f, -ECANCELED, 1);
	assert_int_equal(fx_stats(f).requests_cancelled, 1);
	expect_stale_answer(f, seq);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 0);
	assert_int_equal(fx_count(f, EV_AGENT), 1);
}

/* Cancelled before a rank is declared: that rank's declaration is refused
 * (-ECANCELED) and reported once (PUT_FAILED -ECANCELED); no Reserve; a
 * second declaration of it is -EEXIST, silent. */
static void test_cancel_before_rank_declared(void **state)
{
	struct fx *f = *state;
	struct fx_req r0 = RQ, r1 = RQ;
	uint32_t nev;

	r0.world = r1.world = 2;
	r1.rank = 1;
	assert_int_equal(fx_declare(f, &r0, 0), 0);
	assert_int_equal(fx_cancel(f, RQ.id, PD_TX_ANY_RANK), 1);
	assert_int_equal(count_of(f, EV_AGENT, RQ.id, 0), 1);
	assert_int_equal(fx_declare(f, &r1, 0), -ECANCELED);
	assert_int_equal(count_of(f, EV_AGENT, RQ.id, 1), 1);
	assert_int_equal(fx_last(f, EV_AGENT)->status, -ECANCELED);
	assert_int_equal(fx_last(f, EV_AGENT)->agent, r1.agent);
	nev = f->nev;
	assert_int_equal(fx_declare(f, &r1, 0), -EEXIST);
	assert_int_equal(f->nev, nev);
	assert_int_equal(count_of(f, EV_RESERVE, RQ.id, 1), 0);
	assert_int_equal(fx_stats(f).requests_cancelled, 2);
	assert_int_equal(fx_stats(f).declared, 1);
	/* Nothing known of a request at all: its first rank is refused too. */
	assert_int_equal(fx_cancel(f, "req-x", 0), 0);
	assert_int_equal(pd_tx_declare(f->tx, &(struct pd_tx_declare){
				       .agent = 3, .peer = 7, .req_id = (const uint8_t *)"req-x",
				       .req_id_len = 5, .world_size = 1, .total_chunks = 2 },
				       f->now), -ECANCELED);
	assert_int_equal(count_of(f, EV_AGENT, "req-x", 0), 1);
	assert_int_equal(fx_count(f, EV_RESERVE), 1);
	fx_idle(f);
	fx_ok(f);
}

/* The agent dies while its request is declared: no event to it, but a
 * CancelNotif withdraws the reservation; another agent's request goes on. */
static void test_agent_gone_while_declared(void **state)
{
	struct fx *f = *state;
	struct fx_req other = RQ;
	uint64_t seq, oseq;

	other.id = "req-o";
	other.agent = RQ.agent + 1;
	assert_int_equal(fx_declare(f, &RQ, 0), 0);
	seq = fx_reserve_seq(f);
	assert_int_equal(fx_declare(f, &other, 0), 0);
	oseq = fx_reserve_seq(f);
	assert_int_equal(pd_tx_agent_gone(f->tx, RQ.agent, f->now), 1);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 1);
	assert_string_equal(fx_last(f, EV_CANCEL)->req, RQ.id);
	assert_int_equal(fx_stats(f).requests_cancelled, 1);
	assert_int_equal(fx_admit(f, seq, 0), -ENOENT);
	assert_int_equal(fx_admit(f, oseq, 0), 0);
	assert_int_equal(fx_count(f, EV_ADMITTED), 1);
	assert_int_equal(fx_last(f, EV_ADMITTED)->agent, other.agent);
	assert_int_equal(fx_stats(f).admitting, 0);
	fx_ok(f);
}

/* The peer fails while the request is declared: it fails with the peer's
 * error, and no CancelNotif goes to a dead peer. */
static void test_peer_failed_while_declared(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	assert_int_equal(fx_declare(f, &RQ, 0), 0);
	seq = fx_reserve_seq(f);
	assert_int_equal(pd_tx_peer_failed(f->tx, RQ.peer + 1, -EHOSTDOWN, f->now), 0);
	assert_int_equal(pd_tx_peer_failed(f->tx, RQ.peer, -EHOSTDOWN, f->now), 1);
	expect_failed_unadmitted(f, -EHOSTDOWN, 0);
	assert_int_equal(fx_stats(f).requests_failed, 1);
	expect_stale_answer(f, seq);
}

/* Rank 0 admitted and writing, rank 1 declared: a cancel takes both, and
 * the CancelNotifs wait for rank 0's writes (the receiver rolls back the
 * whole request); rank 1's late admission is stale. */
static void test_cancel_declared_rank_waits_for_sibling_writes(void **state)
{
	struct fx *f = *state;
	struct fx_req r0 = RQ, r1 = RQ;
	uint64_t s0, res1;

	r0.world = r1.world = 2;
	r1.rank = 1;
	assert_int_equal(fx_put(f, &r0, 2, 0), 0);
	s0 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s0), 0);
	assert_int_equal(fx_declare(f, &r1, 0), 0);
	res1 = fx_reserve_seq(f);
	assert_int_equal(fx_cancel(f, RQ.id, 1), 2);
	assert_int_equal(fx_count(f, EV_CANCEL), 0);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_admit(f, res1, 0), -ENOENT);
	assert_int_equal(fx_done(f, s0, 0), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 2);
	assert_int_equal(count_of(f, EV_AGENT, RQ.id, 0), 1);
	assert_int_equal(count_of(f, EV_AGENT, RQ.id, 1), 1);
	assert_int_equal(count_of(f, EV_ADMITTED, RQ.id, 1), 0);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* ---- stats ------------------------------------------------------------------------------ */

static void test_stats_declared_admitted_admitting(void **state)
{
	struct fx *f = *state;
	struct fx_req a = RQ, b = RQ, z = RQ;
	struct pd_tx_stats st;
	uint64_t sa;

	b.id = "req-b";
	z.id = "req-z";
	z.total = 0;
	assert_int_equal(fx_declare(f, &a, 0), 0);
	sa = fx_reserve_seq(f);
	assert_int_equal(fx_declare(f, &b, 0), 0);
	assert_int_equal(fx_declare(f, &z, 0), 0);
	assert_int_equal(fx_declare(f, &a, 0), -EEXIST);         /* not counted */
	st = fx_stats(f);
	assert_int_equal(st.declared, 3);
	assert_int_equal(st.admitted, 1);
	assert_int_equal(st.admitting, 2);
	assert_int_equal(st.live_requests, 3);
	assert_int_equal(st.batches, 0);
	assert_int_equal(st.live_batches, 0);                     /* Reserves are not batches */
	assert_int_equal(infos(f).declared, 2);
	assert_int_equal(fx_admit(f, sa, 0), 0);
	st = fx_stats(f);
	assert_int_equal(st.admitted, 2);
	assert_int_equal(st.admitting, 1);
	assert_int_equal(fx_cancel(f, b.id, b.rank), 1);
	st = fx_stats(f);
	assert_int_equal(st.declared, 3);
	assert_int_equal(st.admitted, 2);
	assert_int_equal(st.admitting, 0);
	assert_int_equal(st.live_requests, 2);
	assert_int_equal(infos(f).declared, 0);
	fx_ok(f);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)
#define TN(fn) cmocka_unit_test_setup_teardown(fn, fx_setup_notify, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_declare_negative),
		T(test_declare_twice_eexist),
		cmocka_unit_test(test_declare_busy),
		T(test_submit_undeclared_enoent),
		T(test_submit_before_admission_eproto),
		T(test_reserve_admits),
		T(test_reserve_answer_other_peer_stale),
		cmocka_unit_test(test_reserve_answered_with_indexes_eproto),
		T(test_reserve_error_fails),
		TN(test_reserve_error_fails),
		T(test_total_zero_admitted_at_once),
		T(test_admission_deadline_custom),
		TN(test_admission_deadline_custom),
		T(test_admission_deadline_default),
		T(test_admission_deadlines_sorted),
		T(test_cancel_while_declared),
		TN(test_cancel_while_declared),
		T(test_cancel_before_rank_declared),
		T(test_agent_gone_while_declared),
		T(test_peer_failed_while_declared),
		T(test_cancel_declared_rank_waits_for_sibling_writes),
		T(test_stats_declared_admitted_admitting),
	};

	return cmocka_run_group_tests_name("tx_declare", tests, NULL, NULL);
}
