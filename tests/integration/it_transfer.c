/* SPDX-License-Identifier: MIT */
/* Real prefill -> decode transfers between pdbroker processes over TCP. */
#include <unistd.h>

#include "it_fixture.h"

/* 1P1D: 64 chunks in 8 batches, every byte verified, pools full again. */
static void test_1p1d_64_chunks_in_8_batches(void **state)
{
	struct it *t = it_start(16, 64);
	uint64_t deadline;

	(void)state;
	for (uint32_t b = 0; b < 8; b++)
		assert_int_equal(it_put(t, "req-a", b * 8, 8, 64), 0);
	it_expect_event(t, "req-a", PD_EV_PUT_DONE);
	it_verify(t, "req-a", 64);
	assert_int_equal(pd_recv_release(t->da, "req-a"), 0);
	deadline = pd_deadline_ms(2000);
	while (it_free_slots(&t->d, 1) != 64 && pd_now_ns() < deadline)
		(void)usleep(10000);
	assert_int_equal(it_free_slots(&t->d, 1), 64);
	assert_int_equal(it_free_slots(&t->p, 0), 16);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_1p1d_64_chunks_in_8_batches),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
