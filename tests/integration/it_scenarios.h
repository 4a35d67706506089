/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_INTEGRATION_IT_SCENARIOS_H
#define PD_TESTS_INTEGRATION_IT_SCENARIOS_H

/*
 * Scenarios that run over each data transport: it_transfer.c, it_faults.c
 * and it_death.c run them over TCP (the default), it_shm.c over shm. Each
 * ends with the proof that the bytes went the transport's way, where the
 * transport has one: shm's own counters, and no TCP frame sent or
 * received. TCP, the default and the fallback, has nothing else to be told
 * by: nothing more is checked for it.
 */
#include "it_fixture.h"

/* A data transport, as the scenarios use it. */
struct it_xport {
	const char *transport;           /* every broker's --transport; NULL: the default */
	const char *sent_stat;           /* a sender's counter of the chunks moved this way;
					  * NULL: no proof (TCP) */
	const char *connects_stat;       /* a sender's counter of peers connected this way */
	uint32_t restart_gap_ms;         /* a quick restart comes this long after the kill */
};

/* TCP, the default: nothing to prove. shm: a quick restart leaves the
 * sender's tick (100 ms) a few ticks to see the dead broker's segment. */
#define IT_XPORT_TCP { .transport = NULL }
#define IT_XPORT_SHM                                                                 \
	{ .transport = "shm,tcp", .sent_stat = "shm.copies_ok",                       \
	  .connects_stat = "shm.connects", .restart_gap_ms = 300 }

static inline struct it *it_xstart(const struct it_xport *x, uint32_t send_slots,
				   uint32_t recv_slots, uint32_t nprefill, const char *heartbeat)
{
	return it_start_opts(&(struct it_opts){ .send_slots = send_slots,
						.recv_slots = recv_slots, .nprefill = nprefill,
						.transport = x->transport,
						.heartbeat = heartbeat });
}

/* The sender p moved at least chunks chunks x's way, and no TCP frame. */
static inline void it_expect_sent(const struct it_xport *x, const struct pd_test_broker *p,
				  uint64_t chunks)
{
	if (!x->sent_stat)
		return;
	assert_true(it_wait_stat(p, x->sent_stat, chunks) >= chunks);
	assert_int_equal(it_stat(p, "tcp.frames_tx"), 0);
}

/* The receiver d counts bytes received, though no TCP frame brought them. */
static inline void it_expect_received(const struct it_xport *x, const struct pd_test_broker *d,
				      uint64_t bytes)
{
	if (!x->sent_stat)
		return;
	assert_int_equal(it_wait_stat(d, "bytes_recv", bytes), bytes);
	assert_int_equal(it_stat(d, "tcp.frames_rx"), 0);
}

/* Payload bytes of chunks [0, n) of one request. */
static inline uint64_t it_bytes(uint32_t n)
{
	uint64_t bytes = 0;

	for (uint32_t i = 0; i < n; i++)
		bytes += it_len(i);
	return bytes;
}

/* ---- transfers ---------------------------------------------------------------------- */

/* 2P1D (t from it_xstart(x, 16, 20, 2, ...)): recv pool 20, A=10 from one
 * prefill broker, B=10 from another:
 * both are admitted without waiting (READY before anything is released),
 * every byte checked at the decode agent, every slot free at the end. */
static inline void it_scn_2p1d_on(struct it *t, const struct it_xport *x)
{
	assert_int_equal(it_put_from(t, t->pa, "A", 0, 10, 10), 0);
	assert_int_equal(it_put_from(t, t->pa2, "B", 0, 10, 10), 0);
	(void)it_expect_event_from(t->pa, "A", PD_EV_PUT_DONE);
	(void)it_expect_event_from(t->pa2, "B", PD_EV_PUT_DONE);
	it_verify(t, "A", 10);
	it_verify(t, "B", 10);
	it_expect_sent(x, &t->p, 10);
	it_expect_sent(x, &t->p2, 10);
	it_expect_received(x, &t->d, 2 * it_bytes(10));
	assert_int_equal(pd_recv_release(t->da, "A"), 0);
	assert_int_equal(pd_recv_release(t->da, "B"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 20), 20);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
}

static inline void it_scn_2p1d(const struct it_xport *x)
{
	struct it *t = it_xstart(x, 16, 20, 2, NULL);

	it_scn_2p1d_on(t, x);
	it_stop(t, 0);
}

/* The seed's scenario, driven as one chunked-prefill engine thread drives
 * it: recv pool 10, A and B of 8 chunks in batches of 4, both declared when
 * scheduled, staged interleaved A1 B1 A2 B2. A is admitted; B waits for
 * admission, and its pd_alloc takes nothing and never blocks the engine
 * (-EAGAIN, with or without a wait), so A's second batch goes out and A
 * completes. Once A is released, B is admitted and completes. */
static inline void it_scn_seed(const struct it_xport *x)
{
	struct it *t = it_xstart(x, 16, 10, 1, NULL);
	struct pd_recv_info info;
	pd_slot_ref r[4];

	assert_int_equal(it_declare_on(t, t->pa, "A", 8), 0);
	assert_int_equal(it_declare_on(t, t->pa, "B", 8), 0);
	assert_int_equal(it_wait_admission(t->pa, "A"), PD_REQ_ADMITTED);
	assert_int_equal(it_stage(t, t->pa, "A", 0, 4, 8, 0), 0);          /* A1 */
	assert_int_equal(pd_alloc(t->pa, "B", 4, r, 0), -EAGAIN);          /* B1 */
	assert_int_equal(pd_alloc(t->pa, "B", 4, r, 200), -EAGAIN);        /* nor with a wait */
	assert_int_equal(it_stage(t, t->pa, "A", 4, 4, 8, IT_WAIT_MS), 0); /* A2 */
	assert_int_equal(pd_alloc(t->pa, "B", 4, r, 0), -EAGAIN);          /* B2 */
	it_expect_event(t, "A", PD_EV_PUT_DONE);
	it_verify(t, "A", 8);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16); /* B never took staging */
	assert_int_equal(pd_req_state(t->pa, "B", NULL), PD_REQ_DECLARED);
	assert_int_equal(pd_recv_wait(t->da, "B", 300, &info), -ETIMEDOUT); /* not admitted */
	assert_int_equal(pd_recv_release(t->da, "A"), 0);
	assert_int_equal(it_wait_admission(t->pa, "B"), PD_REQ_ADMITTED);
	assert_int_equal(it_stage(t, t->pa, "B", 0, 4, 8, 0), 0);
	assert_int_equal(it_stage(t, t->pa, "B", 4, 4, 8, IT_WAIT_MS), 0);
	it_expect_event(t, "B", PD_EV_PUT_DONE);
	assert_int_equal(pd_req_state(t->pa, "B", NULL), PD_REQ_DONE);
	it_verify(t, "B", 8);
	assert_int_equal(pd_recv_release(t->da, "B"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 10), 10);
	it_expect_sent(x, &t->p, 16);
	it_expect_received(x, &t->d, 2 * it_bytes(8));
	it_stop(t, 0);
}

/* ---- aborts and deaths ---------------------------------------------------------------- */

/* Cancel between batches: PUT_FAILED(-ECANCELED), the receiver frees
 * everything, a later batch of the request is refused; both sides free all. */
static inline void it_scn_cancel_between_batches(const struct it_xport *x)
{
	struct it *t = it_xstart(x, 16, 16, 1, NULL);
	struct pd_recv_info info;
	pd_slot_ref r[1];

	assert_int_equal(it_put(t, "C", 0, 4, 8), 0);
	if (x->sent_stat) /* the first batch moved, for the proof to count it */
		assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(pd_cancel(t->pa, "C"), 0);
	assert_int_equal(it_expect_event_from(t->pa, "C", PD_EV_PUT_FAILED), -ECANCELED);
	assert_int_equal(pd_alloc(t->pa, "C", 1, r, 100), -ECANCELED);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(pd_recv_wait(t->da, "C", 2000, &info), 0);
	assert_int_equal(info.status, -ECANCELED);
	it_expect_sent(x, &t->p, 4);
	it_stop(t, 0);
}

/* In a child: a prefill agent that dies holding 3 loans, with a batch queued. */
static inline int it_agent_dies_mid_request(void *arg)
{
	struct it *t = arg;
	struct pd_agent *a;
	pd_slot_ref r[3];

	if (pd_test_agent_attach(&t->p, 0, &a) < 0)
		return 1;
	t->pa = a; /* in this process only */
	if (it_put(t, "K", 0, 4, 8) < 0 || pd_alloc(a, "K", 3, r, 1000) < 0)
		return 2;
	(void)raise(SIGKILL); /* holding 3 loans, with a batch queued */
	return 3;
}

/* A prefill agent SIGKILLed holding loans and with a batch in flight: the
 * broker reclaims everything, the receiver's side is rolled back, and the
 * broker still serves. */
static inline void it_scn_killed_prefill_agent(const struct it_xport *x)
{
	struct it *t = it_xstart(x, 16, 16, 1, NULL);

	assert_int_equal(pd_test_wait(pd_test_fork(it_agent_dies_mid_request, t), 10000),
			 128 + SIGKILL);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_int_equal(it_put(t, "L", 0, 2, 2), 0);
	it_expect_event(t, "L", PD_EV_PUT_DONE);
	it_verify(t, "L", 2);
	assert_int_equal(pd_recv_release(t->da, "L"), 0);
	it_expect_sent(x, &t->p, 2);
	it_stop(t, 0);
}

/* The decode broker restarted faster than the silence deadline (3 x 2 s):
 * the sender sees the old one gone (its data lanes drop; its segment is
 * gone), says Hello again at once and holds new requests for the new
 * session, so the first request after the restart succeeds, and goes the
 * transport's way again. */
static inline void it_scn_decode_restarted_quickly(const struct it_xport *x)
{
	struct it *t = it_xstart(x, 16, 64, 1, "2s");

	assert_int_equal(it_put(t, "A", 0, 2, 2), 0);
	assert_int_equal(it_expect_event_from(t->pa, "A", PD_EV_PUT_DONE), 0);
	pd_agent_detach(t->da);
	t->da = NULL;
	it_kill(&t->d);
	if (x->restart_gap_ms)
		(void)nanosleep(&(struct timespec){ x->restart_gap_ms / 1000,
						    (long)(x->restart_gap_ms % 1000) * 1000000 },
				NULL);
	it_restart_decode(t);
	assert_int_equal(it_put(t, "B", 0, 2, 2), 0);
	assert_int_equal(it_expect_event_from(t->pa, "B", PD_EV_PUT_DONE), 0);
	it_verify(t, "B", 2);
	assert_int_equal(pd_recv_release(t->da, "B"), 0);
	if (x->connects_stat)
		assert_int_equal(it_wait_stat(&t->p, x->connects_stat, 2), 2);
	it_stop(t, 0);
}

#endif
