/* SPDX-License-Identifier: MIT */
/*
 * Authority over requests and fair shares, on real brokers, with a
 * stranger played over the real control plane (pd_fake_peer.h) beside a
 * legitimate prefill broker whose every byte is verified: a stranger's
 * CancelNotif and batches for another peer's request are refused and
 * counted, the request goes on; every CancelNotif is acknowledged; a flood
 * of requests is bounded by the per-peer caps while the legitimate peer
 * moves its requests and never sees the decode broker go down; a pool held
 * and never written is preempted for the starved peer.
 */
#include <zmq.h>

#include "it_fixture.h"
#include "pd_fake_peer.h"
#include "pd_wire.h"

/* Heartbeats of 5 s: the stranger, which sends none, stays up meanwhile. */
static struct it *start_with(const char *const *d_extra)
{
	return it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 16,
						.heartbeat = "5s", .d_extra = d_extra });
}

static void stranger_open(struct pd_fake_peer *f, const struct it *t)
{
	memset(f, 0, sizeof(*f));
	pd_fake_open(f, t->d.ctrl, NULL, "another-host", IT_SLOT, NULL);
}

/* An AllocRequest of one key for chunk `chunk` of req (total chunks, rank 0 of 1). */
static void send_alloc(struct pd_fake_peer *f, uint64_t seq, const char *req, uint32_t chunk,
		       uint32_t total)
{
	char key[48];
	struct pd_bytes k;
	uint32_t len = it_len(chunk);
	struct pd_msg m = { .type = PD_MSG_ALLOC_REQ };

	it_key(key, sizeof(key), req, chunk);
	k = pd_fake_str(key);
	m.u.alloc_req = (struct pd_msg_alloc_req){ .seq = seq, .has_seq = 1,
						   .req_id = pd_fake_str(req), .nkeys = 1,
						   .keys = &k, .lens = &len, .total_chunks = total,
						   .world_size = 1, .is_last_batch = chunk + 1 == total };
	pd_fake_send(f, &m);
}

static void send_cancel(struct pd_fake_peer *f, const char *req)
{
	struct pd_msg m = { .type = PD_MSG_CANCEL };

	m.u.cancel = (struct pd_msg_cancel){ .req_id = pd_fake_str(req) };
	pd_fake_send(f, &m);
}

/* The answer to the AllocRequest seq: its err. */
static int32_t alloc_answer(struct pd_fake_peer *f, uint64_t seq)
{
	struct pd_msg m;

	for (;;) {
		pd_fake_recv(f, PD_MSG_ALLOC_RESP, &m);
		if (m.u.alloc_resp.has_seq && m.u.alloc_resp.seq == seq)
			return m.u.alloc_resp.err;
	}
}

/* A CancelNotif's acknowledgement: an empty AllocResponse, no seq. */
static void expect_cancel_ack(struct pd_fake_peer *f)
{
	struct pd_msg m;

	pd_fake_recv(f, PD_MSG_ALLOC_RESP, &m);
	assert_int_equal(m.u.alloc_resp.has_seq, 0);
	assert_int_equal(m.u.alloc_resp.n, 0);
}

/* A stranger tries its hand at a request of the prefill broker, half
 * written; then the request completes, every byte right. */
static void against_a_live_request(void (*try)(struct it *t, struct pd_fake_peer *s))
{
	struct it *t = start_with(NULL);
	struct pd_fake_peer s;

	stranger_open(&s, t);
	it_half_put(t, "victim");
	try(t, &s);
	it_half_finish(t, "victim");
	pd_fake_close(&s);
	it_stop(t, 0);
}

/* Its cancel: refused, counted, acknowledged. */
static void cancel_it(struct it *t, struct pd_fake_peer *s)
{
	send_cancel(s, "victim");
	expect_cancel_ack(s);
	assert_int_equal(it_wait_stat(&t->d, "rx.rejected_foreign", 1), 1);
	assert_int_equal(it_stat(&t->d, "rx.cancelled"), 0);
}

/* A batch for the rank the prefill broker holds, and one with other
 * totals: both refused -EPERM and counted, no protocol error. */
static void break_it(struct it *t, struct pd_fake_peer *s)
{
	send_alloc(s, 7, "victim", 2, 4);
	assert_int_equal(alloc_answer(s, 7), -EPERM);
	send_alloc(s, 8, "victim", 0, 9);
	assert_int_equal(alloc_answer(s, 8), -EPERM);
	assert_int_equal(it_wait_stat(&t->d, "rx.rejected_foreign", 2), 2);
	assert_int_equal(it_stat(&t->d, "rx.proto_errors"), 0);
}

static void test_strangers_cancel_refused(void **state)
{
	(void)state;
	against_a_live_request(cancel_it);
}

static void test_strangers_batches_refused(void **state)
{
	(void)state;
	against_a_live_request(break_it);
}

/* A peer cancelling its own request is obeyed and acknowledged (a sender
 * may wait for the acknowledgement before it reuses anything). */
static void test_own_cancel_acknowledged(void **state)
{
	struct it *t = start_with(NULL);
	struct pd_fake_peer f;

	(void)state;
	stranger_open(&f, t);
	send_alloc(&f, 1, "mine", 0, 2);
	assert_int_equal(alloc_answer(&f, 1), 0);
	send_cancel(&f, "mine");
	expect_cancel_ack(&f);
	assert_int_equal(it_wait_stat(&t->d, "rx.cancelled", 1), 1);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	assert_int_equal(it_stat(&t->d, "rx.rejected_foreign"), 0);
	pd_fake_close(&f);
	it_stop(t, 0);
}

/* The legitimate peer moves n requests of 4 chunks, every byte verified. */
static void legit_moves(struct it *t, uint32_t n)
{
	it_move(t, "legit", n, 4);
}

/* 2000 requests from a stranger, pipelined, with --peer-max-reserved 8:
 * the first 8 are granted and held, the rest refused -EBUSY and counted;
 * the legitimate peer meanwhile moves 10 requests and never sees D down. */
static void test_request_flood_bounded_by_reserved_cap(void **state)
{
	static const char *const x[] = { "--peer-max-reserved", "8", NULL };
	struct it *t = start_with(x);
	struct pd_fake_peer s;
	uint32_t ok = 0, busy = 0;
	char req[32];

	(void)state;
	stranger_open(&s, t);
	for (uint64_t i = 1; i <= 2000; i++) {
		(void)snprintf(req, sizeof(req), "flood%llu", (unsigned long long)i);
		send_alloc(&s, i, req, 0, 1);
	}
	for (uint64_t i = 1; i <= 2000; i++) {
		int32_t err = alloc_answer(&s, i);

		ok += err == 0;
		busy += err == -EBUSY;
	}
	assert_int_equal(ok, 8);
	assert_int_equal(busy, 1992);
	assert_int_equal(it_wait_stat(&t->d, "rx.rejected_peer_slots", 1992), 1992);
	legit_moves(t, 10);
	assert_int_equal(it_stat(&t->p, "ctrl.peers_down"), 0);
	pd_fake_close(&s);
	it_stop(t, 0);
}

/* A stranger's requests cancelled at once leave tombstones, which count
 * against its --peer-max-requests 100: past them it is refused -EBUSY and
 * counted, while the legitimate peer still gets in. */
static void test_tombstones_count_against_the_peer(void **state)
{
	static const char *const x[] = { "--peer-max-requests", "100", NULL };
	struct it *t = start_with(x);
	struct pd_fake_peer s;
	uint32_t ok = 0, busy = 0;
	char req[32];

	(void)state;
	stranger_open(&s, t);
	for (uint64_t i = 1; i <= 300; i++) {
		int32_t err;

		(void)snprintf(req, sizeof(req), "t%llu", (unsigned long long)i);
		send_alloc(&s, i, req, 0, 1);
		err = alloc_answer(&s, i);
		ok += err == 0;
		busy += err == -EBUSY;
		send_cancel(&s, req);
		expect_cancel_ack(&s);
	}
	assert_int_equal(ok, 100);
	assert_int_equal(busy, 200);
	assert_int_equal(it_wait_stat(&t->d, "rx.rejected_peer_requests", 200), 200);
	legit_moves(t, 3);
	pd_fake_close(&s);
	it_stop(t, 0);
}

/* A stranger takes the whole pool (16 one-chunk requests, granted) and
 * never writes: once the prefill broker's request has waited 1 s and the
 * stranger's have sat idle for --preempt-idle (1 s here), enough of them
 * fail -EBUSY, and the legitimate requests move, every byte verified. */
static void test_held_pool_preempted(void **state)
{
	static const char *const x[] = { "--preempt-idle", "1s", NULL };
	struct it *t = start_with(x);
	struct pd_fake_peer s;
	char req[32];

	(void)state;
	stranger_open(&s, t);
	for (uint64_t i = 1; i <= 16; i++) {
		(void)snprintf(req, sizeof(req), "hold%llu", (unsigned long long)i);
		send_alloc(&s, i, req, 0, 1);
		assert_int_equal(alloc_answer(&s, i), 0);
	}
	assert_int_equal(it_wait_free(&t->d, 1, 0), 0);
	legit_moves(t, 3);
	assert_int_equal(it_wait_stat(&t->d, "rx.preempted", 4), 4);
	assert_int_equal(it_stat(&t->d, "ctrl.peers_down"), 0);  /* not the stranger's end */
	pd_fake_close(&s);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strangers_cancel_refused),
		cmocka_unit_test(test_strangers_batches_refused),
		cmocka_unit_test(test_own_cancel_acknowledged),
		cmocka_unit_test(test_request_flood_bounded_by_reserved_cap),
		cmocka_unit_test(test_tombstones_count_against_the_peer),
		cmocka_unit_test(test_held_pool_preempted),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
