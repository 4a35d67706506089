/* SPDX-License-Identifier: MIT */
/* Real prefill -> decode transfers between pdbroker processes over TCP. */
#include <time.h>

#include "it_scenarios.h"

static const struct it_xport tcp = IT_XPORT_TCP;

static void release_all(struct it *t, const char *req)
{
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

/* 1P1D: 64 chunks in 8 batches, every byte verified, pools full again. */
static void test_1p1d_64_chunks_in_8_batches(void **state)
{
	struct it *t = it_start(16, 64);

	(void)state;
	for (uint32_t b = 0; b < 8; b++)
		assert_int_equal(it_put(t, "req-a", b * 8, 8, 64), 0);
	it_expect_event(t, "req-a", PD_EV_PUT_DONE);
	it_verify(t, "req-a", 64);
	release_all(t, "req-a");
	assert_int_equal(it_wait_free(&t->d, 1, 64), 64);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	it_stop(t, 0);
}

/* The seed's scenario: recv pool 10, A and B of 8 chunks in batches of 4,
 * interleaved: B is admitted only once A is released; both complete. */
static void test_seed_interleaved_batches_both_complete(void **state)
{
	(void)state;
	it_scn_seed(&tcp);
}

/* One sender, recv pool 10: A=8 in two batches, B=8 scheduled between
 * them. B cannot be admitted while A holds its reservation, so its one
 * batch waits in the engine (pd_alloc: -EAGAIN), not in staging; A's
 * second batch goes out, and B follows A's release. */
static void test_one_sender_b_between_a_batches(void **state)
{
	struct it *t = it_start(24, 10);
	pd_slot_ref r[8];

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 4, 8), 0);
	assert_int_equal(it_declare_on(t, t->pa, "B", 8), 0);
	assert_int_equal(pd_alloc(t->pa, "B", 8, r, 100), -EAGAIN);
	assert_int_equal(it_put(t, "A", 4, 4, 8), 0);
	it_expect_event(t, "A", PD_EV_PUT_DONE);
	it_verify(t, "A", 8);
	release_all(t, "A");
	assert_int_equal(it_stage(t, t->pa, "B", 0, 8, 8, IT_WAIT_MS), 0);
	it_expect_event(t, "B", PD_EV_PUT_DONE);
	it_verify(t, "B", 8);
	release_all(t, "B");
	assert_int_equal(it_wait_free(&t->d, 1, 10), 10);
	it_stop(t, 0);
}

/* 2P1D: recv pool 20, A=10 from one prefill broker, B=10 from another:
 * both are admitted without waiting (READY before anything is released). */
static void test_2p1d_both_admitted_at_once(void **state)
{
	(void)state;
	it_scn_2p1d(&tcp);
}

/* The data plane over IPv6: --data [::1]:0 on the decode broker (one
 * host:port parser everywhere: the flag, the bind, the Hello address the
 * sender dials). */
static void test_ipv6_data_plane(void **state)
{
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 16,
							.d_data = "[::1]:0" });
	char x[128], why[128];

	(void)state;
	assert_int_equal(it_put(t, "v6", 0, 4, 4), 0);
	it_expect_event(t, "v6", PD_EV_PUT_DONE);
	it_verify(t, "v6", 4);
	release_all(t, "v6");
	it_peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "tcp");
	assert_true(it_wait_stat(&t->d, "tcp.frames_rx", 4) >= 4);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_1p1d_64_chunks_in_8_batches),
		cmocka_unit_test(test_seed_interleaved_batches_both_complete),
		cmocka_unit_test(test_one_sender_b_between_a_batches),
		cmocka_unit_test(test_2p1d_both_admitted_at_once),
		cmocka_unit_test(test_ipv6_data_plane),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
