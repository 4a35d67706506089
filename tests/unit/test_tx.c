/* SPDX-License-Identifier: MIT */
/*
 * Sender request engine (broker/pd_tx.c, pd_tx_end.c) against a recording
 * fake of its ops (tx_fixture.h): argument checks and refusals first, then
 * completion scenarios. Aborts, failures, deadlines and the randomized
 * interleavings are in test_tx_more.c.
 */
#include "tx_fixture.h"

static const struct fx_req RQ = { "req-a", 0, 1, 4, 7, 3 };

/* ---- negative ------------------------------------------------------------------ */

static void test_create_negative(void **state)
{
	struct pd_tx_ops ops = fx_ops;
	struct pd_tx_opts o = { .ops = &fx_ops, .max_requests = 4 };
	struct pd_tx *tx = NULL;
	struct pd_tx_stats st;

	(void)state;
	assert_int_equal(pd_tx_create(NULL, &tx), -EINVAL);
	assert_int_equal(pd_tx_create(&o, NULL), -EINVAL);
	o.max_requests = 0;
	assert_int_equal(pd_tx_create(&o, &tx), -EINVAL);
	o.max_requests = 4;
	o.notify_failures = 2;
	assert_int_equal(pd_tx_create(&o, &tx), -EINVAL);
	o.notify_failures = 0;
	o.ops = NULL;
	assert_int_equal(pd_tx_create(&o, &tx), -EINVAL);
	ops.wake_alloc = NULL;
	o.ops = &ops;
	assert_int_equal(pd_tx_create(&o, &tx), -EINVAL);
	ops = fx_ops;
	ops.send_reserve = NULL;
	assert_int_equal(pd_tx_create(&o, &tx), -EINVAL);
	ops = fx_ops;
	ops.admitted = NULL;
	assert_int_equal(pd_tx_create(&o, &tx), -EINVAL);
	assert_null(tx);
	pd_tx_destroy(NULL);
	memset(&st, 0xff, sizeof(st));
	pd_tx_get_stats(NULL, &st);
	assert_int_equal(st.live_requests, 0);
	pd_tx_get_stats(NULL, NULL);
}

/* Each bad field alone gives -EINVAL; nothing is called, no slot freed. */
static void test_submit_negative(void **state)
{
	struct fx *f = *state;
	struct pd_tx_chunk c[2];
	struct pd_tx_submit s;
	char big[PD_REQ_ID_MAX + 2];

	fx_chunks(f, c, 2);
	s = fx_sub(&RQ, 2, 0, c);
	assert_int_equal(pd_tx_submit(NULL, &s, 0), -EINVAL);
	assert_int_equal(pd_tx_submit(f->tx, NULL, 0), -EINVAL);
#define BAD(field, val)                                                                \
	do {                                                                           \
		s = fx_sub(&RQ, 2, 0, c);                                              \
		s.field = val;                                                         \
		assert_int_equal(pd_tx_submit(f->tx, &s, 0), -EINVAL);                 \
	} while (0)
	BAD(req_id, NULL);
	BAD(req_id_len, 0);
	BAD(req_id_len, PD_REQ_ID_MAX + 1);
	BAD(world_size, 0);
	BAD(rank, 1);                          /* rank >= world_size 1 */
	BAD(is_last, 2);
	BAD(n, PD_TX_MAX_BATCH + 1);
	BAD(chunks, NULL);
	BAD(n, 0);                             /* zero chunks, not last */
#undef BAD
	memset(big, 'x', sizeof(big));
	s = fx_sub(&RQ, 2, 0, c);
	s.req_id = (const uint8_t *)big;
	s.req_id_len = sizeof(big);
	assert_int_equal(pd_tx_submit(f->tx, &s, 0), -EINVAL);
	c[1].klen = 0;
	s = fx_sub(&RQ, 2, 0, c);
	assert_int_equal(pd_tx_submit(f->tx, &s, 0), -EINVAL);
	assert_int_equal(f->nev, 0);
	assert_int_equal(fx_stats(f).refused, 0);
	fx_idle(f);
}

/* Too many requests: the declaration is refused (-EBUSY, nothing sent, no
 * event: the caller reports it), so a batch of it is one of a request
 * never declared: refused (-ENOENT), its staging freed. */
static void test_submit_busy(void **state)
{
	struct fx *f = fx_new(2, 0);
	struct fx_req a = RQ, b = RQ, c = RQ;
	struct pd_tx_submit s;
	uint32_t s0, nev;

	(void)state;
	b.id = "req-b";
	c.id = "req-c";
	assert_int_equal(fx_put(f, &a, 1, 0), 0);
	assert_int_equal(fx_put(f, &b, 1, 0), 0);
	nev = f->nev;
	assert_int_equal(fx_put(f, &c, 2, 0), -EBUSY);
	assert_int_equal(f->nev, nev);
	s0 = f->next_slot;
	s = fx_sub(&c, 2, 0, NULL);
	assert_int_equal(fx_submit(f, &s), -ENOENT);
	fx_freed(f, s0, 2, 1);
	assert_int_equal(f->nev, nev + 1);          /* the free, nothing else */
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_stats(f).refused, 1);
	assert_int_equal(fx_stats(f).declared, 2);
	assert_int_equal(fx_put(f, &a, 1, 0), 0);   /* known requests still go on */
	assert_int_equal(fx_stats(f).live_requests, 2);
	fx_ok(f);
	fx_free(f);
}

static void test_submit_after_cancel(void **state)
{
	struct fx *f = *state;
	uint32_t s0;

	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	assert_int_equal(fx_cancel(f, RQ.id, RQ.rank), 1);
	s0 = f->next_slot;
	assert_int_equal(fx_put(f, &RQ, 2, 1), -ECANCELED);
	fx_freed(f, s0, 2, 1);
	assert_int_equal(fx_count(f, EV_AGENT), 1);
	assert_int_equal(fx_count(f, EV_ALLOC), 1);
	fx_all_freed(f);
	fx_ok(f);
}

/* The request has one batch out; the bad one fails it: -EPROTO, its
 * staging freed, CancelNotif (an AllocRequest was sent), PUT_FAILED. */
static void expect_proto(struct fx *f, const struct pd_tx_submit *bad)
{
	struct pd_tx_submit s = *bad;
	const struct fx_ev *e;

	assert_int_equal(fx_submit(f, &s), -EPROTO);
	e = fx_last(f, EV_AGENT);
	assert_non_null(e);
	assert_int_equal(e->status, -EPROTO);
	assert_int_equal(fx_count(f, EV_AGENT), 1);
	assert_int_equal(fx_count(f, EV_CANCEL), 1);
	assert_int_equal(fx_count(f, EV_PROXY), 0);
	fx_all_freed(f);
	fx_ok(f);
}

static void test_submit_inconsistent(void **state)
{
	struct pd_tx_submit bad[7];
	unsigned i;

	(void)state;
	for (i = 0; i < PD_ARRAY_SIZE(bad); i++)
		bad[i] = fx_sub(&RQ, 1, 0, NULL);
	bad[0].peer = RQ.peer + 1;
	bad[1].world_size = 2;
	bad[2].total_chunks = RQ.total + 1;
	bad[3].agent = RQ.agent + 1;
	bad[4].n = 4;                          /* 1 + 4 > total 4 */
	bad[5].is_last = 1;                    /* 1 + 1 < total 4 */
	bad[6].n = 2;                          /* after the last batch, below */
	for (i = 0; i < PD_ARRAY_SIZE(bad); i++) {
		struct fx *f = fx_new(8, 0);

		assert_int_equal(fx_put(f, &RQ, 1, 0), 0);
		if (i == 6)
			assert_int_equal(fx_put(f, &RQ, 3, 1), 0);
		expect_proto(f, &bad[i]);
		fx_free(f);
	}
}

/* A first batch of more chunks than declared: the request fails at once;
 * its Reserve told the peer about it, so a CancelNotif withdraws that. */
static void test_submit_first_batch_over_total(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ;

	q.total = 2;
	assert_int_equal(fx_put(f, &q, 3, 0), -EPROTO);
	assert_int_equal(fx_count(f, EV_RESERVE), 1);
	assert_int_equal(fx_count(f, EV_ADMITTED), 1);
	assert_int_equal(fx_count(f, EV_ALLOC), 0);
	assert_int_equal(fx_count(f, EV_CANCEL), 1);
	assert_true(fx_index(f, EV_CANCEL, 0) > fx_index(f, EV_ADMITTED, 0));
	assert_int_equal(fx_last(f, EV_AGENT)->status, -EPROTO);
	assert_int_equal(fx_put(f, &q, 1, 0), -ECANCELED);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

static void test_resp_negative(void **state)
{
	struct fx *f = *state;
	int32_t remote[2] = { 1, 2 }, dup[2] = { 0, 0 };
	struct pd_tx_resp m = { .peer = RQ.peer, .seq = 999, .n = 2, .remote = remote };
	uint64_t seq;

	assert_int_equal(pd_tx_alloc_resp(NULL, &m, 0), -EINVAL);
	assert_int_equal(pd_tx_alloc_resp(f->tx, NULL, 0), -EINVAL);
	m.remote = NULL;
	assert_int_equal(pd_tx_alloc_resp(f->tx, &m, 0), -EINVAL);
	m.remote = remote;
	m.nalready = 1;
	assert_int_equal(pd_tx_alloc_resp(f->tx, &m, 0), -EINVAL);
	m.nalready = 0;
	assert_int_equal(fx_stats(f).stale_responses, 0);
	assert_int_equal(pd_tx_alloc_resp(f->tx, &m, 0), -ENOENT);   /* unknown seq */
	assert_int_equal(fx_stats(f).stale_responses, 1);
	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	seq = fx_last_seq(f);
	m.seq = seq;
	m.peer = RQ.peer + 1;
	assert_int_equal(pd_tx_alloc_resp(f->tx, &m, 0), -ENOENT);   /* another peer */
	assert_int_equal(fx_stats(f).stale_responses, 2);
	assert_int_equal(fx_resp_full(f, seq, 0, dup, 2), -EPROTO);  /* repeated position */
	assert_int_equal(fx_last(f, EV_AGENT)->status, -EPROTO);
	assert_int_equal(fx_grant(f, seq), -ENOENT);                 /* the batch is gone */
	assert_int_equal(fx_stats(f).stale_responses, 3);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* A response whose n differs from the batch, or an already_sent position
 * out of range, fails the request with -EPROTO. */
static void test_resp_mismatch(void **state)
{
	int32_t remote[3] = { 1, 2, 3 }, out[1] = { 2 }, neg[1] = { -1 };
	struct pd_tx_resp m = { .peer = RQ.peer, .remote = remote };
	unsigned i;

	(void)state;
	for (i = 0; i < 4; i++) {
		struct fx *f = fx_new(8, 0);

		assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
		m.seq = fx_last_seq(f);
		m.n = i == 0 ? 3 : i == 1 ? 1 : 2;
		m.nalready = i >= 2;
		m.already_sent = i == 2 ? out : neg;
		assert_int_equal(pd_tx_alloc_resp(f->tx, &m, 0), -EPROTO);
		assert_int_equal(fx_count(f, EV_WRITE), 0);
		assert_int_equal(fx_last(f, EV_AGENT)->status, -EPROTO);
		assert_int_equal(fx_count(f, EV_CANCEL), 1);
		assert_int_equal(fx_stats(f).requests_failed, 1);
		fx_all_freed(f);
		fx_idle(f);
		fx_ok(f);
		fx_free(f);
	}
}

static void test_write_done_negative(void **state)
{
	struct fx *f = *state;
	uint64_t seq;

	assert_int_equal(pd_tx_write_done(NULL, 1, 0, 0), -EINVAL);
	assert_int_equal(fx_done(f, 12345, 0), -ENOENT);
	assert_int_equal(fx_put(f, &RQ, 2, 0), 0);
	seq = fx_last_seq(f);
	assert_int_equal(fx_done(f, seq, 0), -ENOENT);   /* no write posted yet */
	assert_int_equal(fx_grant(f, seq), 0);
	assert_int_equal(fx_grant(f, seq), -ENOENT);     /* second response */
	assert_int_equal(fx_done(f, seq, 0), 0);
	assert_int_equal(fx_done(f, seq, 0), -ENOENT);   /* already completed */
	assert_int_equal(fx_count(f, EV_PUT), 1);
	fx_ok(f);
}

static void test_other_entry_negative(void **state)
{
	struct fx *f = *state;
	char big[PD_REQ_ID_MAX + 1];

	memset(big, 'x', sizeof(big));
	assert_int_equal(pd_tx_cancel(NULL, (const uint8_t *)"a", 1, 0, 0), -EINVAL);
	assert_int_equal(pd_tx_cancel(f->tx, NULL, 1, 0, 0), -EINVAL);
	assert_int_equal(pd_tx_cancel(f->tx, (const uint8_t *)"a", 0, 0, 0), -EINVAL);
	assert_int_equal(pd_tx_cancel(f->tx, (const uint8_t *)big, sizeof(big), 0, 0), -EINVAL);
	assert_int_equal(pd_tx_cancel(f->tx, (const uint8_t *)"a", 1, 0, 0), 0);
	assert_int_equal(pd_tx_agent_gone(NULL, 1, 0), -EINVAL);
	assert_int_equal(pd_tx_peer_failed(NULL, 1, -EIO, 0), -EINVAL);
	assert_int_equal(pd_tx_peer_failed(f->tx, 1, 0, 0), -EINVAL);
	assert_int_equal(pd_tx_peer_failed(f->tx, 1, EIO, 0), -EINVAL);
	assert_int_equal(pd_tx_tick(NULL, 0), -EINVAL);
	assert_int_equal(pd_tx_tick(f->tx, 0), 0);
	assert_int_equal(f->nev, 0);
}

/* ---- completion --------------------------------------------------------------- */

/* The request (q) completed: one ProxyNotif and one PUT_DONE, status 0,
 * with `chunks` chunks, ProxyNotif first; nothing else afterwards. */
static void expect_done(const struct fx *f, const struct fx_req *q, uint32_t chunks)
{
	const struct fx_ev *p = fx_last(f, EV_PROXY), *a = fx_last(f, EV_AGENT);

	assert_int_equal(fx_count(f, EV_PROXY), 1);
	assert_int_equal(fx_count(f, EV_AGENT), 1);
	assert_int_equal(fx_count(f, EV_CANCEL), 0);
	assert_true(p < a);
	assert_string_equal(p->req, q->id);
	assert_int_equal(p->status, 0);
	assert_int_equal(p->chunks, chunks);
	assert_int_equal(p->rank, q->rank);
	assert_int_equal(a->status, 0);
	assert_int_equal(a->agent, q->agent);
	fx_all_freed(f);
	fx_ok(f);
}

/* 64 chunks in 8 batches, all sent before any answer; the last batch's
 * writes finish first, the first batch's last: only that one completes. */
static void test_64_chunks_complete_after_last_write_out_of_order(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ;
	uint64_t seq[8];
	int i;

	q.total = 64;
	for (i = 0; i < 8; i++) {
		assert_int_equal(fx_put(f, &q, 8, i == 7), 0);
		seq[i] = fx_last_seq(f);
		/* One per-engine counter from 1; the Reserve took seq 1. */
		assert_int_equal(seq[i], (uint64_t)i + 2);
	}
	assert_int_equal(fx_reserve_seq(f), 1);
	for (i = 7; i >= 0; i--)
		assert_int_equal(fx_grant(f, seq[i]), 0);
	assert_int_equal(fx_stats(f).writes_in_flight, 8);
	for (i = 7; i >= 1; i--)
		assert_int_equal(fx_done(f, seq[i], 0), 0);
	assert_int_equal(fx_count(f, EV_PROXY), 0);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_count(f, EV_PUT), 7);
	assert_int_equal(fx_done(f, seq[0], 0), 0);
	expect_done(f, &q, 64);
	assert_int_equal(fx_stats(f).chunks, 64);
	assert_int_equal(fx_stats(f).batches, 8);
	assert_int_equal(fx_stats(f).requests_done, 1);
	assert_int_equal(fx_stats(f).tombstones, 1);
	fx_idle(f);
}

static void test_zero_chunk_last_batch_completes(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ;
	uint64_t seq;

	q.total = 2;
	assert_int_equal(fx_put(f, &q, 2, 0), 0);
	seq = fx_last_seq(f);
	assert_int_equal(fx_grant(f, seq), 0);
	assert_int_equal(fx_done(f, seq, 0), 0);
	assert_int_equal(fx_count(f, EV_PROXY), 0);      /* last batch not seen yet */
	assert_int_equal(fx_put(f, &q, 0, 1), 0);
	assert_int_equal(fx_count(f, EV_ALLOC), 1);      /* it sends nothing */
	expect_done(f, &q, 2);
	fx_idle(f);
}

/* A prompt shorter than a chunk: total 0 (admitted at once, nothing to
 * reserve), one empty last batch: ADMITTED, ProxyNotif, PUT_DONE only. */
static void test_empty_request_completes(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ;

	q.total = 0;
	assert_int_equal(fx_put(f, &q, 0, 1), 0);
	assert_int_equal(f->nev, 3);
	assert_int_equal(f->ev[0].type, EV_ADMITTED);
	expect_done(f, &q, 0);
	fx_idle(f);
}

static void test_already_sent_not_written_but_completed(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ;
	int32_t already[2] = { 3, 1 };
	const struct fx_ev *w;
	uint64_t seq;

	assert_int_equal(fx_put(f, &q, 4, 1), 0);
	seq = fx_last_seq(f);
	assert_int_equal(fx_resp_full(f, seq, 0, already, 2), 0);
	w = fx_last(f, EV_WRITE);
	assert_non_null(w);
	assert_int_equal(w->n, 4);
	assert_int_equal(w->nwrite, 2);
	assert_int_equal(fx_done(f, seq, 0), 0);
	assert_int_equal(fx_last(f, EV_PUT)->n, 2);      /* only the written indexes */
	expect_done(f, &q, 4);
	assert_int_equal(fx_stats(f).chunks, 4);
}

/* Every chunk already at the receiver: no write, the batch completes. */
static void test_all_already_sent_completes_without_write(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ;
	int32_t already[4] = { 0, 1, 2, 3 };

	assert_int_equal(fx_put(f, &q, 4, 1), 0);
	assert_int_equal(fx_resp_full(f, fx_last_seq(f), 0, already, 4), 0);
	assert_int_equal(fx_count(f, EV_WRITE), 0);
	assert_int_equal(fx_count(f, EV_PUT), 0);
	expect_done(f, &q, 4);
	fx_idle(f);
}

/* 4 requests x 4 batches to one peer, all out before any answer; answers
 * and completions in reverse order: nothing is serialised per peer. */
static void test_many_batches_one_peer_reverse_order(void **state)
{
	struct fx *f = *state;
	static const char *ids[4] = { "r0", "r1", "r2", "r3" };
	struct fx_req q[4];
	uint64_t seq[16];
	int i, k = 0;

	for (i = 0; i < 4; i++) {
		q[i] = RQ;
		q[i].id = ids[i];
		q[i].total = 8;
	}
	for (k = 0; k < 16; k++) {
		assert_int_equal(fx_put(f, &q[k % 4], 2, k >= 12), 0);
		seq[k] = fx_last_seq(f);
	}
	assert_int_equal(fx_stats(f).live_batches, 16);
	for (k = 15; k >= 0; k--)
		assert_int_equal(fx_grant(f, seq[k]), 0);
	assert_int_equal(fx_stats(f).writes_in_flight, 16);
	for (k = 15; k >= 0; k--)
		assert_int_equal(fx_done(f, seq[k], 0), 0);
	assert_int_equal(fx_count(f, EV_PROXY), 4);
	assert_int_equal(fx_count(f, EV_AGENT), 4);
	assert_int_equal(fx_stats(f).requests_done, 4);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

static void test_two_ranks_each_get_proxy_notif(void **state)
{
	struct fx *f = *state;
	struct fx_req r0 = RQ, r1 = RQ;
	uint64_t s0, s1;

	r0.world = r1.world = 2;
	r1.rank = 1;
	r1.agent = RQ.agent + 1;
	assert_int_equal(fx_put(f, &r0, 4, 1), 0);
	s0 = fx_last_seq(f);
	assert_int_equal(fx_put(f, &r1, 4, 1), 0);
	s1 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	assert_int_equal(fx_grant(f, s0), 0);
	assert_int_equal(fx_done(f, s1, 0), 0);
	assert_int_equal(fx_count(f, EV_PROXY), 1);
	assert_int_equal(fx_last(f, EV_PROXY)->rank, 1);
	assert_int_equal(fx_last(f, EV_AGENT)->agent, r1.agent);
	assert_int_equal(fx_done(f, s0, 0), 0);
	assert_int_equal(fx_count(f, EV_PROXY), 2);
	assert_int_equal(fx_last(f, EV_PROXY)->rank, 0);
	assert_int_equal(fx_last(f, EV_AGENT)->agent, r0.agent);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

/* A batch of a completed request: -EPROTO, staging freed, no new event. */
/* The batch that ends a request ends it (the agent's PUT_DONE, the
 * ProxyNotif) before its PutDone goes out, and that PutDone still names
 * the batch (its view outlives the batch); an earlier batch's PutDone
 * goes out as it completes, the agent told nothing yet. */
static void test_last_batch_tells_agent_before_put_done(void **state)
{
	static const struct fx_req q = { "req-o", 0, 1, 4, 7, 3 };
	struct fx *f = *state;
	uint32_t at, agent, put;
	uint64_t s1, s2;

	assert_int_equal(fx_put(f, &q, 2, 0), 0);
	s1 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s1), 0);
	assert_int_equal(fx_done(f, s1, 0), 0);
	assert_int_equal(fx_count(f, EV_PUT), 1);
	assert_int_equal(fx_count(f, EV_AGENT), 0);
	assert_int_equal(fx_put(f, &q, 2, 1), 0);
	s2 = fx_last_seq(f);
	assert_int_equal(fx_grant(f, s2), 0);
	at = f->nev;
	assert_int_equal(fx_done(f, s2, 0), 0);
	agent = fx_index(f, EV_AGENT, at);
	put = fx_index(f, EV_PUT, at);
	assert_true(agent < put && put < f->nev);
	assert_true(fx_index(f, EV_PROXY, at) < put);
	assert_int_equal(f->ev[agent].status, 0);
	assert_int_equal(f->ev[agent].chunks, 4);
	assert_int_equal(f->ev[put].seq, s2);
	assert_int_equal(f->ev[put].n, 2);
	assert_string_equal(f->ev[put].req, "req-o");
	assert_int_equal(fx_count(f, EV_PUT), 2);
	fx_all_freed(f);
	fx_idle(f);
	fx_ok(f);
}

static void test_batch_after_completion_refused(void **state)
{
	struct fx *f = *state;
	struct fx_req q = RQ;

	q.total = 1;
	assert_int_equal(fx_put(f, &q, 1, 1), 0);
	assert_int_equal(fx_grant(f, fx_last_seq(f)), 0);
	assert_int_equal(fx_done(f, fx_last_seq(f), 0), 0);
	assert_int_equal(fx_put(f, &q, 1, 1), -EPROTO);
	expect_done(f, &q, 1);
	assert_int_equal(fx_stats(f).refused, 1);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, fx_setup, fx_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_create_negative),
		T(test_submit_negative),
		cmocka_unit_test(test_submit_busy),
		T(test_submit_after_cancel),
		cmocka_unit_test(test_submit_inconsistent),
		T(test_submit_first_batch_over_total),
		T(test_resp_negative),
		cmocka_unit_test(test_resp_mismatch),
		T(test_write_done_negative),
		T(test_other_entry_negative),
		T(test_64_chunks_complete_after_last_write_out_of_order),
		T(test_zero_chunk_last_batch_completes),
		T(test_empty_request_completes),
		T(test_already_sent_not_written_but_completed),
		T(test_all_already_sent_completes_without_write),
		T(test_many_batches_one_peer_reverse_order),
		T(test_two_ranks_each_get_proxy_notif),
		T(test_batch_after_completion_refused),
		T(test_last_batch_tells_agent_before_put_done),
	};

	return cmocka_run_group_tests_name("tx", tests, NULL, NULL);
}
