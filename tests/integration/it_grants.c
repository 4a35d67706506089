/* SPDX-License-Identifier: MIT */
/*
 * Grants with the admission, on real brokers (--admit-grants): the answer
 * that admits a declared request carries slots for its first chunks, so a
 * batch they cover goes out with no AllocRequest, and its PutDone binds
 * the keys. Checked here, each against the rule it names:
 *   - a 1-chunk request takes one control round trip (the Reserve) and its
 *     write: no AllocRequest is sent or received (tcp and shm), every byte
 *     verified at the decode agent;
 *   - admitted with grants then cancelled before its batch: the grants
 *     come back to the receiver's pool and nothing is written;
 *   - a batch of more chunks than the grants still works (split);
 *   - a sender that asks none (--admit-grants 0, what an older pdkv sends)
 *     is served as before;
 *   - a stranger holding grants cannot commit them without the bytes, or
 *     with a length other than the one that landed, nor commit a keyless
 *     grant with a plain PutDone; a bind of what landed commits it.
 */
#include "it_stranger.h"

#define SLOTS 16u

static struct it *start(const char *transport, const char *const *p_extra)
{
	return it_start_opts(&(struct it_opts){ .send_slots = SLOTS, .recv_slots = SLOTS,
						.transport = transport, .p_extra = p_extra });
}

/* n requests of one chunk, each declared then staged at once, verified. */
static void one_chunk_requests(struct it *t, uint32_t n)
{
	it_move(t, "one.", n, 1);
}

/* The control messages of n 1-chunk requests: n Reserves and n PutDones,
 * no AllocRequest either side; every chunk bound at the receiver. */
static void expect_no_alloc_requests(struct it *t, uint32_t n)
{
	assert_int_equal(it_wait_stat(&t->d, "rx.bound", n), n);
	assert_int_equal(it_wait_stat(&t->p, "tx.pregranted", n), n);
	assert_int_equal(it_stat(&t->p, "tx.batches"), 0);
	assert_int_equal(it_stat(&t->d, "rx.batches"), 0);
	assert_int_equal(it_stat(&t->d, "rx.reserves"), n);
	assert_int_equal(it_stat(&t->d, "rx.pregranted"), n);
	assert_int_equal(it_wait_free(&t->p, 0, SLOTS), SLOTS);
	assert_int_equal(it_wait_free(&t->d, 1, SLOTS), SLOTS);
}

static void test_one_chunk_needs_no_alloc_request_tcp(void **state)
{
	struct it *t = start(NULL, NULL);

	(void)state;
	one_chunk_requests(t, 20);
	expect_no_alloc_requests(t, 20);
	it_stop(t, 0);
}

static void test_one_chunk_needs_no_alloc_request_shm(void **state)
{
	struct it *t = start("shm,tcp", NULL);
	char xport[64], why[256];

	(void)state;
	one_chunk_requests(t, 20);
	expect_no_alloc_requests(t, 20);
	it_peer_xport(&t->p, xport, why, sizeof(xport));
	assert_string_equal(xport, "shm");
	it_stop(t, 0);
}

/* Admitted with its grants held at the receiver, then cancelled before
 * any batch: the grants come back, no byte is written, the decode side
 * sees it cancelled; the next request goes through. */
static void test_cancel_after_admission_gives_grants_back(void **state)
{
	struct it *t = start(NULL, NULL);
	struct pd_recv_info info;

	(void)state;
	assert_int_equal(it_declare_on(t, t->pa, "C", 4), 0);
	assert_int_equal(it_wait_admission(t->pa, "C"), PD_REQ_ADMITTED);
	assert_int_equal(it_wait_free(&t->d, 1, SLOTS - 4), SLOTS - 4); /* its 4 grants */
	assert_int_equal(pd_cancel(t->pa, "C"), 0);
	assert_int_equal(it_expect_event_from(t->pa, "C", PD_EV_PUT_FAILED), -ECANCELED);
	assert_int_equal(it_wait_free(&t->d, 1, SLOTS), SLOTS);
	assert_int_equal(pd_recv_wait(t->da, "C", IT_WAIT_MS, &info), 0);
	assert_int_equal(info.status, -ECANCELED);
	assert_int_equal(it_wait_stat(&t->p, "tx.requests_cancelled", 1), 1);
	assert_int_equal(it_stat(&t->p, "tx.pregranted"), 0);
	assert_int_equal(it_wait_stat(&t->d, "rx.cancelled", 1), 1);
	assert_int_equal(it_stat(&t->d, "bytes_recv"), 0);
	one_chunk_requests(t, 1);
	it_stop(t, 0);
}

/* Two grants, a request of 6 chunks in batches of 5 and 1: the first
 * batch is split (2 on the grants, 3 by AllocRequest), the second needs
 * its own; every byte arrives. */
static void test_batch_longer_than_grants(void **state)
{
	static const char *const two[] = { "--admit-grants", "2", NULL };
	struct it *t = start(NULL, two);

	(void)state;
	assert_int_equal(it_put(t, "L", 0, 5, 6), 0);
	assert_int_equal(it_put(t, "L", 5, 1, 6), 0);
	it_expect_event(t, "L", PD_EV_PUT_DONE);
	it_verify(t, "L", 6);
	assert_int_equal(pd_recv_release(t->da, "L"), 0);
	assert_int_equal(it_wait_stat(&t->p, "tx.batches", 2), 2);
	assert_int_equal(it_stat(&t->p, "tx.pregranted"), 1);
	assert_int_equal(it_wait_stat(&t->d, "rx.bound", 2), 2);
	assert_int_equal(it_wait_free(&t->d, 1, SLOTS), SLOTS);
	it_stop(t, 0);
}

/* A sender that asks for no grants is served with AllocRequests, as a
 * pdkv from before them is. */
static void test_sender_asking_none(void **state)
{
	static const char *const none[] = { "--admit-grants", "0", NULL };
	struct it *t = start(NULL, none);

	(void)state;
	one_chunk_requests(t, 3);
	assert_int_equal(it_wait_stat(&t->p, "tx.batches", 3), 3);
	assert_int_equal(it_stat(&t->p, "tx.pregranted"), 0);
	assert_int_equal(it_wait_stat(&t->d, "rx.batches", 3), 3);
	assert_int_equal(it_stat(&t->d, "rx.pregranted"), 0);
	it_stop(t, 0);
}

/* ---- a stranger with grants ----------------------------------------------------------- */

/* Reserve req (one chunk) asking one grant: its slot and generation. */
static void reserve_one(struct it_stranger *p, const char *req, uint64_t seq, int32_t *slot,
			uint32_t *gen)
{
	struct pd_msg m = { .type = PD_MSG_RESERVE };

	m.u.reserve = (struct pd_msg_reserve){ .seq = seq, .req_id = pd_fake_str(req),
					       .total_chunks = 1, .world_size = 1, .grants = 1 };
	pd_fake_send(&p->f, &m);
	pd_fake_recv(&p->f, PD_MSG_ALLOC_RESP, &m);
	assert_int_equal(m.u.alloc_resp.err, 0);
	assert_int_equal(m.u.alloc_resp.n, 1);
	assert_non_null(m.u.alloc_resp.remote_gens);
	*slot = m.u.alloc_resp.remote_indexes[0];
	*gen = m.u.alloc_resp.remote_gens[0];
}

/* PutDone of (slot, gen) for req: with the chunk's key and len when key. */
static void put_done(struct it_stranger *p, const char *req, int32_t slot, uint32_t gen,
		     const char *key, uint32_t len)
{
	struct pd_msg m = { .type = PD_MSG_PUT_DONE };
	struct pd_bytes k = pd_fake_str(key ? key : "");

	m.u.put_done = (struct pd_msg_put_done){ .seq = 9, .req_id = pd_fake_str(req), .n = 1,
						 .indexes = &slot, .gens = &gen,
						 .keys = key ? &k : NULL, .lens = key ? &len : NULL };
	pd_fake_send(&p->f, &m);
}

/* Fails (never READY) at the decode side, its slot free again. */
static void expect_rolled_back(struct it *t, const char *req)
{
	struct pd_recv_info info;

	assert_int_equal(pd_recv_wait(t->da, req, IT_WAIT_MS, &info), 0);
	assert_true(info.status < 0);
	assert_int_equal(it_wait_free(&t->d, 1, SLOTS), SLOTS);
}

static void test_stranger_cannot_commit_grants_unwritten(void **state)
{
	struct it *t = start(NULL, NULL);
	uint64_t refused = it_stat(&t->d, "data.refused_writes");
	struct pd_recv_info info;
	const uint8_t *d;
	struct it_stranger p;
	int32_t slot;
	uint32_t gen, len;

	(void)state;
	it_stranger_open(&p, t);
	/* A bind that names bytes which never arrived (a TCP-only peer). */
	reserve_one(&p, "N", 1, &slot, &gen);
	put_done(&p, "N", slot, gen, "N/0", 4096);
	expect_rolled_back(t, "N");
	assert_true(it_wait_stat(&t->d, "data.refused_writes", refused + 1) >= refused + 1);
	/* A plain PutDone (no key) of a grant that did land. */
	reserve_one(&p, "P", 2, &slot, &gen);
	assert_int_equal(it_stranger_write(&p, slot, gen), 0);
	put_done(&p, "P", slot, gen, NULL, 0);
	expect_rolled_back(t, "P");
	/* A bind with another length than the write's. */
	reserve_one(&p, "W", 3, &slot, &gen);
	assert_int_equal(it_stranger_write(&p, slot, gen), 0);
	put_done(&p, "W", slot, gen, "W/0", 4095);
	expect_rolled_back(t, "W");
	/* What landed, bound as it landed: committed, found by its key. */
	reserve_one(&p, "K", 4, &slot, &gen);
	assert_int_equal(it_stranger_write(&p, slot, gen), 0);
	put_done(&p, "K", slot, gen, "K/0", 4096);
	assert_int_equal(pd_recv_wait(t->da, "K", IT_WAIT_MS, &info), 0);
	assert_int_equal(info.status, 0);
	assert_int_equal(pd_recv_lookup(t->da, "K/0", 3, (const void **)&d, &len), 0);
	assert_int_equal(len, 4096);
	assert_int_equal(d[0], 0xee);
	assert_int_equal(pd_recv_release(t->da, "K"), 0);
	pd_fake_close(&p.f);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stranger_cannot_commit_grants_unwritten),
		cmocka_unit_test(test_cancel_after_admission_gives_grants_back),
		cmocka_unit_test(test_one_chunk_needs_no_alloc_request_tcp),
		cmocka_unit_test(test_one_chunk_needs_no_alloc_request_shm),
		cmocka_unit_test(test_batch_longer_than_grants),
		cmocka_unit_test(test_sender_asking_none),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
