/* SPDX-License-Identifier: MIT */
/* Admission accounting: the invariant is checked after every step. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pd_admit.h"

#define CAP 10u

struct log {
	struct pd_adm_entry *seen[16];
	uint32_t n;
};

static void record(void *ctx, struct pd_adm_entry *e)
{
	struct log *l = ctx;

	l->seen[l->n++] = e;
}

static void ok(const struct pd_admit *a)
{
	assert_true(pd_admit_ok(a));
}

static void test_init_rejects_bad_args(void **state)
{
	struct pd_admit a;

	(void)state;
	assert_int_equal(pd_admit_init(NULL, CAP, 1), -EINVAL);
	assert_int_equal(pd_admit_init(&a, 0, 1), -EINVAL);
}

static void test_request_rejects_zero_big_and_busy_entries(void **state)
{
	struct pd_admit a;
	struct pd_adm_entry e = { 0 };

	(void)state;
	assert_int_equal(pd_admit_init(&a, CAP, 100), 0);
	assert_int_equal(pd_admit_request(&a, &e, 0, 0), -EINVAL);
	assert_int_equal(pd_admit_request(&a, &e, CAP + 1, 0), -E2BIG);
	assert_int_equal(pd_admit_request(&a, NULL, 1, 0), -EINVAL);
	assert_int_equal(a.stats.rejected_zero, 1);
	assert_int_equal(a.stats.rejected_big, 1);
	assert_int_equal(pd_admit_request(&a, &e, 2, 0), 0);
	assert_int_equal(pd_admit_request(&a, &e, 2, 0), -EINVAL); /* already admitted */
	ok(&a);
}

static void test_use_is_bounded_by_the_reservation(void **state)
{
	struct pd_admit a;
	struct pd_adm_entry e = { 0 }, idle = { 0 };

	(void)state;
	assert_int_equal(pd_admit_init(&a, CAP, 100), 0);
	assert_int_equal(pd_admit_use(&a, &idle, 1, 0), -EINVAL);
	assert_int_equal(pd_admit_request(&a, &e, 4, 0), 0);
	assert_int_equal(pd_admit_use(&a, &e, 3, 0), 0);
	ok(&a);
	assert_int_equal(pd_admit_use(&a, &e, 1, 1), -EOVERFLOW);
	assert_int_equal(pd_admit_use(&a, &e, 0, 1), 0); /* a dedup: no slot */
	assert_int_equal(a.free, CAP - 3);
	assert_int_equal(a.outstanding, 0);
	pd_admit_finish(&a, &e);
	pd_admit_finish(&a, &e); /* idempotent */
	pd_admit_slots_freed(&a, 3);
	assert_int_equal(a.free, CAP);
	ok(&a);
}

/* Unused reservation goes back at finish; the waiter behind gets in. */
static void test_finish_returns_unused_and_pump_admits_in_order(void **state)
{
	struct pd_admit a;
	struct pd_adm_entry big = { 0 }, w1 = { 0 }, w2 = { 0 };
	struct log l = { 0 };

	(void)state;
	assert_int_equal(pd_admit_init(&a, CAP, 100), 0);
	assert_int_equal(pd_admit_request(&a, &big, 8, 0), 0);
	assert_int_equal(pd_admit_use(&a, &big, 2, 0), 0);
	assert_int_equal(pd_admit_request(&a, &w1, 5, 1), 1);
	assert_int_equal(pd_admit_request(&a, &w2, 1, 2), 1); /* fits, but FIFO */
	assert_int_equal(pd_admit_pump(&a, 3, record, &l), 0);
	pd_admit_finish(&a, &big); /* 6 unused back; 2 slots still held */
	ok(&a);
	assert_int_equal(pd_admit_pump(&a, 10, record, &l), 2);
	assert_ptr_equal(l.seen[0], &w1);
	assert_ptr_equal(l.seen[1], &w2);
	assert_int_equal(a.stats.wait_ns, 9 + 8);
	assert_int_equal(a.stats.wait_max_ns, 9);
	ok(&a);
}

static void test_expire_removes_oldest_waiters_first(void **state)
{
	struct pd_admit a;
	struct pd_adm_entry full = { 0 }, w1 = { 0 }, w2 = { 0 };
	struct log l = { 0 };

	(void)state;
	assert_int_equal(pd_admit_init(&a, CAP, 100), 0);
	assert_int_equal(pd_admit_request(&a, &full, CAP, 0), 0);
	assert_int_equal(pd_admit_request(&a, &w1, 1, 10), 1);
	assert_int_equal(pd_admit_request(&a, &w2, 1, 50), 1);
	assert_int_equal(pd_admit_next_deadline(&a), 110);
	assert_int_equal(pd_admit_expire(&a, 109, UINT32_MAX, record, &l), 0);
	assert_int_equal(pd_admit_expire(&a, 110, UINT32_MAX, record, &l), 1);
	assert_ptr_equal(l.seen[0], &w1);
	assert_int_equal(w1.state, PD_ADM_NONE);
	assert_int_equal(pd_admit_next_deadline(&a), 150);
	pd_admit_finish(&a, &w2); /* a cancelled waiter leaves the queue */
	assert_int_equal(a.nwaiting, 0);
	assert_int_equal(pd_admit_next_deadline(&a), UINT64_MAX);
	assert_int_equal(a.stats.timed_out, 1);
	ok(&a);
}

/* One flow's backlog does not hold another flow back: A holds the whole
 * pool and queues 8 more; B's two, asked last, are admitted first when
 * slots come back (A was already served 10 slots); within a flow, FIFO.
 * Expiry still goes by age, not by admission order. */
static void test_flows_admitted_fairly(void **state)
{
	struct pd_admit a;
	struct pd_adm_entry hold = { 0 }, qa[8], qb[2];
	uint64_t fa = 0, fb = 0;
	struct log l = { .n = 0 };

	(void)state;
	memset(qa, 0, sizeof(qa));
	memset(qb, 0, sizeof(qb));
	assert_int_equal(pd_admit_init(&a, CAP, 100), 0);
	assert_int_equal(pd_admit_request_flow(&a, &hold, CAP, &fa, 0), 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(pd_admit_request_flow(&a, &qa[i], 2, &fa, 1), 1);
	assert_int_equal(pd_admit_request_flow(&a, &qb[0], 2, &fb, 2), 1);
	assert_int_equal(pd_admit_request_flow(&a, &qb[1], 2, &fb, 2), 1);
	assert_ptr_equal(pd_admit_oldest(&a), &qa[0]);
	assert_int_equal(pd_admit_use(&a, &hold, CAP, 0), 0);
	pd_admit_slots_freed(&a, CAP);
	pd_admit_finish(&a, &hold);
	assert_int_equal(pd_admit_pump(&a, 3, record, &l), 5);
	ok(&a);
	/* tags: A 10, 12, ... (its first 10 slots were served); B 0, 2 */
	assert_ptr_equal(l.seen[0], &qb[0]);
	assert_ptr_equal(l.seen[1], &qb[1]);
	assert_ptr_equal(l.seen[2], &qa[0]);
	assert_ptr_equal(l.seen[3], &qa[1]);
	assert_ptr_equal(l.seen[4], &qa[2]);
	assert_int_equal(a.nwaiting, 5);
	l.n = 0;
	assert_int_equal(pd_admit_expire(&a, 101, 2, record, &l), 2); /* by age, at most 2 */
	assert_ptr_equal(l.seen[0], &qa[3]);
	assert_ptr_equal(l.seen[1], &qa[4]);
	assert_int_equal(a.nwaiting, 3);
	for (int i = 0; i < 8; i++)
		pd_admit_finish(&a, &qa[i]);
	pd_admit_finish(&a, &qb[0]);
	pd_admit_finish(&a, &qb[1]);
	assert_int_equal(a.nwaiting, 0);
	assert_int_equal(a.outstanding, 0);
	ok(&a);
}

/* A new flow's request is admitted at once when no waiting request is
 * before it, even while another flow's backlog waits. */
static void test_new_flow_admitted_at_once_ahead_of_a_backlog(void **state)
{
	struct pd_admit a;
	struct pd_adm_entry big = { 0 }, q[3], b = { 0 };
	uint64_t fa = 0, fb = 0;

	(void)state;
	memset(q, 0, sizeof(q));
	assert_int_equal(pd_admit_init(&a, CAP, 100), 0);
	assert_int_equal(pd_admit_request_flow(&a, &big, 6, &fa, 0), 0);
	for (int i = 0; i < 3; i++) /* tags 6, 11, 16: none fits (4 free) */
		assert_int_equal(pd_admit_request_flow(&a, &q[i], 5, &fa, 0), 1);
	assert_int_equal(pd_admit_request_flow(&a, &b, 4, &fb, 0), 0); /* tag 0 */
	assert_int_equal(a.nwaiting, 3);
	assert_int_equal(pd_admit_request(&a, &(struct pd_adm_entry){ 0 }, 0, 0), -EINVAL);
	pd_admit_finish(&a, &b);
	for (int i = 0; i < 3; i++)
		pd_admit_finish(&a, &q[i]);
	pd_admit_finish(&a, &big);
	assert_int_equal(a.outstanding, 0);
	ok(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_rejects_bad_args),
		cmocka_unit_test(test_request_rejects_zero_big_and_busy_entries),
		cmocka_unit_test(test_use_is_bounded_by_the_reservation),
		cmocka_unit_test(test_finish_returns_unused_and_pump_admits_in_order),
		cmocka_unit_test(test_expire_removes_oldest_waiters_first),
		cmocka_unit_test(test_flows_admitted_fairly),
		cmocka_unit_test(test_new_flow_admitted_at_once_ahead_of_a_backlog),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
