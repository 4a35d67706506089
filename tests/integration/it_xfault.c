/* SPDX-License-Identifier: MIT */
/*
 * Data-plane faults between real pdbroker processes, injected by the
 * fault-injecting transport (PDKV_XPORT_FAULT wraps the sender's
 * transports): a transfer refused at post, and one that goes out a byte
 * short. Each fails its request on both sides with nothing left held and
 * no wrong byte handed to the decoder; the next request goes through. A
 * short write into a slot granted with the admission (no length known at
 * the write) is caught at its PutDone instead: the receiver refuses it and
 * fails the request, the sender (whose write did go out) is not told.
 */
#include <stdlib.h>

#include "it_scenarios.h"

/* Brokers started with the fault spec in their environment, the prefill
 * broker with these flags too (NULL: none). */
static struct it *start_faulty_with(const char *spec, const char *const *p_extra)
{
	struct it *t;

	assert_int_equal(setenv("PDKV_XPORT_FAULT", spec, 1), 0);
	t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 16,
					     .p_extra = p_extra });
	assert_int_equal(unsetenv("PDKV_XPORT_FAULT"), 0);
	return t;
}

static struct it *start_faulty(const char *spec)
{
	return start_faulty_with(spec, NULL);
}

/* The request failed where it was sent and where it was going. */
static int32_t failed_both_sides(struct it *t, const char *req)
{
	struct pd_recv_info info;
	int32_t st = it_expect_event_from(t->pa, req, PD_EV_PUT_FAILED);

	assert_true(st < 0);
	assert_int_equal(pd_recv_wait(t->da, req, IT_WAIT_MS, &info), 0);
	assert_true(info.status < 0); /* never READY */
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	return st;
}

/* And the data plane still serves. */
static void next_one_goes_through(struct it *t)
{
	char req[32];

	assert_true(it_put_until_done(t, "next", req, sizeof(req)) >= 0);
	it_verify(t, req, 2);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

/* The 3rd transfer is refused as it is posted: the request fails -EIO. */
static void test_refused_post_fails_the_request(void **state)
{
	struct it *t = start_faulty("fail_nth=3");

	(void)state;
	assert_int_equal(it_put(t, "A", 0, 2, 4), 0);
	assert_int_equal(it_put(t, "A", 2, 2, 4), 0);
	assert_int_equal(failed_both_sides(t, "A"), -EIO);
	next_one_goes_through(t);
	it_stop(t, 0);
}

/* The 2nd transfer goes out one byte short of the length granted for it
 * (its AllocRequest said it: no grants with the admission): the receiver
 * refuses it (no stale tail is ever committed), the data lane drops, the
 * request fails; a new session carries the next one. */
static void test_short_write_is_refused(void **state)
{
	static const char *const no_grants[] = { "--admit-grants", "0", NULL };
	struct it *t = start_faulty_with("short_nth=2", no_grants);

	(void)state;
	assert_int_equal(it_put(t, "S", 0, 4, 4), 0);
	(void)failed_both_sides(t, "S");
	next_one_goes_through(t);
	it_stop(t, 0);
}

/* The same into a slot granted with the admission (the default): the
 * write lands with the length it has, and the PutDone that names the
 * chunk's real length is refused: nothing is committed, the decode side
 * sees the request fail, every slot comes back, the next one goes through. */
static void test_short_write_on_admission_grants(void **state)
{
	struct it *t = start_faulty("short_nth=2");
	struct pd_recv_info info;

	(void)state;
	assert_int_equal(it_put(t, "S", 0, 4, 4), 0);
	assert_int_equal(pd_recv_wait(t->da, "S", IT_WAIT_MS, &info), 0);
	assert_true(info.status < 0); /* never READY */
	assert_true(it_wait_stat(&t->d, "data.refused_writes", 1) >= 1);
	assert_int_equal(it_stat(&t->p, "tx.batches"), 0); /* it needed no AllocRequest */
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	assert_int_equal(it_wait_free(&t->d, 1, 16), 16);
	next_one_goes_through(t);
	it_stop(t, 0);
}

/* A spec the broker cannot read: it refuses to start, saying why. */
static void test_bad_spec_refused_at_start(void **state)
{
	struct pd_test_broker b;
	const char *args[] = { "--send-slots", "4", "--recv-slots", "4", "--slot-size", "64K",
			       NULL };

	(void)state;
	assert_int_equal(setenv("PDKV_XPORT_FAULT", "explode=1", 1), 0);
	assert_true(pd_test_broker_start(&b, "itX", args) < 0);
	assert_int_equal(unsetenv("PDKV_XPORT_FAULT"), 0);
	assert_int_equal(pd_test_wait(b.pid, 5000), 1);
	b.pid = 0;
	(void)pd_test_broker_stop(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused_post_fails_the_request),
		cmocka_unit_test(test_short_write_is_refused),
		cmocka_unit_test(test_short_write_on_admission_grants),
		cmocka_unit_test(test_bad_spec_refused_at_start),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
