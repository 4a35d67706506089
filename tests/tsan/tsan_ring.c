/* SPDX-License-Identifier: MIT */
/*
 * The ordering test of tests/unit/test_ring.c with two threads in one
 * process, so that TSan checks the ring's acquire/release pairs (it cannot
 * see synchronisation between processes). Threads never call cmocka: they
 * store their result, and the main thread asserts after joining them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>

#include "pd_ring.h"
#include "pd_ring_stream.h"
#include "pd_test.h"

#define ENTRIES    2000000ull
#define RING_COUNT 1024u
#define BATCH      32u
#define TIMEOUT_MS 120000u /* both threads give up after it: join is bounded */

static void *side_main(void *arg)
{
	(void)stream_side_run(arg);
	return NULL;
}

static void test_threads_in_order(void **state)
{
	size_t len = (size_t)pd_ring_memsize(RING_COUNT, 8);
	struct pd_ring *r = pd_test_shared_alloc(len);
	struct stream s;
	struct stream_side prod = { .run = stream_produce, .s = &s, .r = r, .len = len };
	struct stream_side cons = { .run = stream_consume, .s = &s, .r = r, .len = len };
	pthread_t tp, tc;

	(void)state;
	assert_non_null(r);
	assert_int_equal(pd_ring_init(r, len, RING_COUNT, 8), 0);
	stream_init(&s, ENTRIES, BATCH, 0, -1, TIMEOUT_MS);
	assert_int_equal(pthread_create(&tc, NULL, side_main, &cons), 0);
	if (pthread_create(&tp, NULL, side_main, &prod) != 0) {
		(void)stream_fail(&s, -EAGAIN); /* the consumer stops */
		(void)pthread_join(tc, NULL);
		fail_msg("pthread_create(producer)");
	}
	assert_int_equal(pthread_join(tp, NULL), 0);
	assert_int_equal(pthread_join(tc, NULL), 0);
	if (cons.rc == -EILSEQ)
		print_error("entry %llu: got %#llx\n", (unsigned long long)cons.st.done,
			    (unsigned long long)cons.st.bad);
	assert_int_equal(prod.rc, 0);
	assert_int_equal(cons.rc, 0);
	assert_int_equal(prod.st.done, ENTRIES);
	assert_int_equal(cons.st.done, ENTRIES);
	pd_test_shared_free(r, len);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_threads_in_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
