/* SPDX-License-Identifier: MIT */
/*
 * The agent's table of declared requests and its staging gate
 * (agent/pd_reqtab.c): pure data, tested directly. Bad arguments and
 * unknown ids first, then one rank's life (declared -> admitted -> done or
 * failed), several ranks of one request, undeclare, and the bounded table
 * (the oldest ended entry evicted when full, -EBUSY when every entry is
 * live).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "pd_reqtab.h"

#define ID(s) (const uint8_t *)(s), (uint32_t)strlen(s)

static int setup(void **state)
{
	static struct pd_reqtab t;

	pd_reqtab_init(&t, 0);
	*state = &t;
	return 0;
}

static int teardown(void **state)
{
	pd_reqtab_fini(*state);
	return 0;
}

/* State of id, and its status (poisoned first, so a forgotten write shows). */
static int state_of(const struct pd_reqtab *t, const char *id, int32_t *status)
{
	*status = 12345;
	return pd_reqtab_state(t, ID(id), status);
}

static void expect_state(const struct pd_reqtab *t, const char *id, int state, int32_t status,
			 int gate)
{
	int32_t st;

	assert_int_equal(state_of(t, id, &st), state);
	if (state >= 0)
		assert_int_equal(st, status);
	assert_int_equal(pd_reqtab_gate(t, ID(id)), gate);
}

/* ---- negative -------------------------------------------------------------------- */

static void test_declare_negative(void **state)
{
	struct pd_reqtab *t = *state;
	char big[PD_REQ_ID_MAX + 1];

	memset(big, 'x', sizeof(big));
	assert_int_equal(pd_reqtab_declare(t, ID("r"), PD_REQTAB_RANKS), -EINVAL);
	assert_int_equal(pd_reqtab_declare(t, NULL, 1, 0), -EINVAL);
	assert_int_equal(pd_reqtab_declare(t, (const uint8_t *)"r", 0, 0), -EINVAL);
	assert_int_equal(pd_reqtab_declare(t, (const uint8_t *)big, sizeof(big), 0), -EINVAL);
	assert_int_equal(t->n, 0);
	assert_int_equal(t->max, PD_REQTAB_MAX);                  /* max 0: the default */
	expect_state(t, "r", -ENOENT, 0, -ENOENT);
	assert_int_equal(pd_reqtab_declare(t, (const uint8_t *)big, PD_REQ_ID_MAX, 0), 0);
	assert_int_equal(pd_reqtab_declare(t, ID("r"), PD_REQTAB_RANKS - 1), 0);
	assert_int_equal(t->n, 2);
}

static void test_declare_twice_eexist(void **state)
{
	struct pd_reqtab *t = *state;

	assert_int_equal(pd_reqtab_declare(t, ID("r"), 0), 0);
	assert_int_equal(pd_reqtab_declare(t, ID("r"), 0), -EEXIST);
	pd_reqtab_admitted(t, ID("r"), 0);
	assert_int_equal(pd_reqtab_declare(t, ID("r"), 0), -EEXIST);
	pd_reqtab_ended(t, ID("r"), 0, 0);
	assert_int_equal(pd_reqtab_declare(t, ID("r"), 0), -EEXIST);   /* ended: still known */
	assert_int_equal(pd_reqtab_declare(t, ID("r"), 1), 0);         /* another rank */
	assert_int_equal(pd_reqtab_declare(t, ID("r2"), 0), 0);        /* another id */
	assert_int_equal(t->n, 2);
}

/* Events for ids, ranks or entries the table does not know change nothing. */
static void test_unknown_ignored(void **state)
{
	struct pd_reqtab *t = *state;

	pd_reqtab_admitted(t, ID("nobody"), 0);
	pd_reqtab_ended(t, ID("nobody"), 0, -EIO);
	pd_reqtab_undeclare(t, ID("nobody"), 0);
	pd_reqtab_admitted(t, NULL, 0, 0);
	pd_reqtab_ended(t, (const uint8_t *)"x", 0, 0, -EIO);
	assert_int_equal(t->n, 0);
	expect_state(t, "nobody", -ENOENT, 0, -ENOENT);
	assert_int_equal(pd_reqtab_state(t, NULL, 1, NULL), -ENOENT);
	assert_int_equal(pd_reqtab_gate(t, (const uint8_t *)"nobody", 0), -ENOENT);

	assert_int_equal(pd_reqtab_declare(t, ID("r"), 2), 0);
	pd_reqtab_admitted(t, ID("r"), 1);                         /* a rank not declared */
	pd_reqtab_admitted(t, ID("r"), PD_REQTAB_RANKS);
	pd_reqtab_ended(t, ID("r"), 3, -EIO);
	pd_reqtab_ended(t, ID("r"), 1000, -EIO);
	pd_reqtab_undeclare(t, ID("r"), 1);
	pd_reqtab_undeclare(t, ID("r"), PD_REQTAB_RANKS + 5);
	pd_reqtab_admitted(t, ID("r2"), 2);                        /* a prefix's neighbour */
	expect_state(t, "r", PD_REQTAB_DECLARED, 0, -EAGAIN);
	assert_int_equal(t->n, 1);
	assert_int_equal(t->nended, 0);
	assert_int_equal(pd_reqtab_state(t, ID("r"), NULL), PD_REQTAB_DECLARED); /* status optional */
}

/* ---- one rank --------------------------------------------------------------------- */

static void test_one_rank_done(void **state)
{
	struct pd_reqtab *t = *state;

	assert_int_equal(pd_reqtab_declare(t, ID("r"), 0), 0);
	expect_state(t, "r", PD_REQTAB_DECLARED, 0, -EAGAIN);
	pd_reqtab_admitted(t, ID("r"), 0);
	expect_state(t, "r", PD_REQTAB_ADMITTED, 0, 0);
	pd_reqtab_admitted(t, ID("r"), 0);                          /* twice: harmless */
	expect_state(t, "r", PD_REQTAB_ADMITTED, 0, 0);
	pd_reqtab_ended(t, ID("r"), 0, 0);
	expect_state(t, "r", PD_REQTAB_DONE, 0, -EALREADY);
	assert_int_equal(t->nended, 1);
	pd_reqtab_ended(t, ID("r"), 0, -EIO);                       /* ended twice: the first counts */
	expect_state(t, "r", PD_REQTAB_DONE, 0, -EALREADY);
	assert_int_equal(t->nended, 1);
	pd_reqtab_undeclare(t, ID("r"), 0);                         /* ended: not undone */
	expect_state(t, "r", PD_REQTAB_DONE, 0, -EALREADY);
}

/* Failed after admission, or before it (refused, timed out): FAILED with
 * that status; the gate says -ECANCELED. */
static void test_one_rank_failed(void **state)
{
	struct pd_reqtab *t = *state;

	assert_int_equal(pd_reqtab_declare(t, ID("a"), 0), 0);
	pd_reqtab_admitted(t, ID("a"), 0);
	pd_reqtab_ended(t, ID("a"), 0, -ECANCELED);
	expect_state(t, "a", PD_REQTAB_FAILED, -ECANCELED, -ECANCELED);
	assert_int_equal(pd_reqtab_declare(t, ID("b"), 3), 0);
	pd_reqtab_ended(t, ID("b"), 3, -ETIMEDOUT);
	expect_state(t, "b", PD_REQTAB_FAILED, -ETIMEDOUT, -ECANCELED);
	pd_reqtab_admitted(t, ID("b"), 3);                          /* late: still failed */
	expect_state(t, "b", PD_REQTAB_FAILED, -ETIMEDOUT, -ECANCELED);
	assert_int_equal(t->nended, 2);
}

/* ---- several ranks ------------------------------------------------------------------ */

/* Admitted only once every declared rank is; a rank that completed counts
 * as admitted; DONE once all ended; the first failure sticks. */
static void test_several_ranks(void **state)
{
	struct pd_reqtab *t = *state;

	assert_int_equal(pd_reqtab_declare(t, ID("g"), 0), 0);
	assert_int_equal(pd_reqtab_declare(t, ID("g"), 2), 0);
	assert_int_equal(t->n, 1);                                  /* one entry per id */
	pd_reqtab_admitted(t, ID("g"), 2);
	expect_state(t, "g", PD_REQTAB_DECLARED, 0, -EAGAIN);
	pd_reqtab_admitted(t, ID("g"), 0);
	expect_state(t, "g", PD_REQTAB_ADMITTED, 0, 0);
	pd_reqtab_ended(t, ID("g"), 2, 0);
	expect_state(t, "g", PD_REQTAB_ADMITTED, 0, 0);
	assert_int_equal(pd_reqtab_declare(t, ID("g"), 1), 0);     /* a third, not admitted */
	expect_state(t, "g", PD_REQTAB_DECLARED, 0, -EAGAIN);
	pd_reqtab_admitted(t, ID("g"), 1);
	expect_state(t, "g", PD_REQTAB_ADMITTED, 0, 0);
	pd_reqtab_ended(t, ID("g"), 0, 0);
	pd_reqtab_ended(t, ID("g"), 1, 0);
	expect_state(t, "g", PD_REQTAB_DONE, 0, -EALREADY);
	assert_int_equal(t->nended, 1);

	assert_int_equal(pd_reqtab_declare(t, ID("f"), 0), 0);
	assert_int_equal(pd_reqtab_declare(t, ID("f"), 1), 0);
	assert_int_equal(pd_reqtab_declare(t, ID("f"), 63), 0);
	pd_reqtab_admitted(t, ID("f"), 0);
	pd_reqtab_admitted(t, ID("f"), 1);
	pd_reqtab_admitted(t, ID("f"), 63);
	pd_reqtab_ended(t, ID("f"), 1, -EIO);                       /* others still live */
	expect_state(t, "f", PD_REQTAB_FAILED, -EIO, -ECANCELED);
	pd_reqtab_ended(t, ID("f"), 0, -ECANCELED);
	pd_reqtab_ended(t, ID("f"), 63, 0);
	expect_state(t, "f", PD_REQTAB_FAILED, -EIO, -ECANCELED);
	assert_int_equal(t->nended, 2);
}

/* ---- undeclare ------------------------------------------------------------------------ */

/* Forgetting the only rank frees the entry; forgetting one of several
 * leaves the others; forgetting the last live one of an entry whose other
 * ranks ended makes it an ended (evictable) entry. */
static void test_undeclare(void **state)
{
	struct pd_reqtab *t = *state;

	assert_int_equal(pd_reqtab_declare(t, ID("u"), 0), 0);
	pd_reqtab_undeclare(t, ID("u"), 0);
	expect_state(t, "u", -ENOENT, 0, -ENOENT);
	assert_int_equal(t->n, 0);
	assert_int_equal(pd_reqtab_declare(t, ID("u"), 0), 0);     /* as if never declared */

	assert_int_equal(pd_reqtab_declare(t, ID("v"), 0), 0);
	assert_int_equal(pd_reqtab_declare(t, ID("v"), 1), 0);
	pd_reqtab_admitted(t, ID("v"), 0);
	pd_reqtab_admitted(t, ID("v"), 1);
	pd_reqtab_undeclare(t, ID("v"), 1);
	expect_state(t, "v", PD_REQTAB_ADMITTED, 0, 0);
	assert_int_equal(pd_reqtab_declare(t, ID("v"), 1), 0);     /* forgotten: new again */
	expect_state(t, "v", PD_REQTAB_DECLARED, 0, -EAGAIN);       /* its admission too */
	pd_reqtab_ended(t, ID("v"), 0, 0);
	assert_int_equal(t->nended, 0);
	pd_reqtab_undeclare(t, ID("v"), 1);
	expect_state(t, "v", PD_REQTAB_DONE, 0, -EALREADY);
	assert_int_equal(t->nended, 1);
	assert_int_equal(t->n, 2);
}

/* ---- a bounded table ---------------------------------------------------------------- */

/* Full: a new id takes the place of the oldest ended entry (by the time it
 * ended, not declared); with every entry live, -EBUSY; a new rank of a
 * known id needs no place. */
static void test_eviction_oldest_ended(void **state)
{
	struct pd_reqtab t;

	(void)state;
	pd_reqtab_init(&t, 3);
	assert_int_equal(pd_reqtab_declare(&t, ID("a"), 0), 0);
	assert_int_equal(pd_reqtab_declare(&t, ID("b"), 0), 0);
	assert_int_equal(pd_reqtab_declare(&t, ID("c"), 0), 0);
	assert_int_equal(pd_reqtab_declare(&t, ID("d"), 0), -EBUSY);
	assert_int_equal(pd_reqtab_declare(&t, ID("a"), 1), 0);      /* no new entry */
	pd_reqtab_ended(&t, ID("b"), 0, -EIO);                       /* b ends first */
	pd_reqtab_ended(&t, ID("a"), 0, 0);
	pd_reqtab_ended(&t, ID("a"), 1, 0);
	assert_int_equal(t.nended, 2);
	assert_int_equal(pd_reqtab_declare(&t, ID("d"), 0), 0);      /* evicts b */
	expect_state(&t, "b", -ENOENT, 0, -ENOENT);
	expect_state(&t, "a", PD_REQTAB_DONE, 0, -EALREADY);
	assert_int_equal(pd_reqtab_declare(&t, ID("e"), 0), 0);      /* evicts a */
	expect_state(&t, "a", -ENOENT, 0, -ENOENT);
	assert_int_equal(t.n, 3);
	assert_int_equal(t.nended, 0);
	assert_int_equal(pd_reqtab_declare(&t, ID("f"), 0), -EBUSY); /* c, d, e live */
	expect_state(&t, "f", -ENOENT, 0, -ENOENT);
	expect_state(&t, "c", PD_REQTAB_DECLARED, 0, -EAGAIN);
	pd_reqtab_fini(&t);
	assert_int_equal(t.n, 0);
}

/* An ended entry a new rank reopens is live again: not evicted until it
 * ends again (then it is the newest ended one). */
static void test_reopened_entry_not_evicted(void **state)
{
	struct pd_reqtab t;

	(void)state;
	pd_reqtab_init(&t, 3);
	assert_int_equal(pd_reqtab_declare(&t, ID("a"), 0), 0);
	assert_int_equal(pd_reqtab_declare(&t, ID("b"), 0), 0);
	assert_int_equal(pd_reqtab_declare(&t, ID("c"), 0), 0);
	pd_reqtab_ended(&t, ID("a"), 0, 0);
	pd_reqtab_ended(&t, ID("b"), 0, 0);
	assert_int_equal(pd_reqtab_declare(&t, ID("a"), 1), 0);      /* reopens a */
	assert_int_equal(t.nended, 1);
	expect_state(&t, "a", PD_REQTAB_DECLARED, 0, -EAGAIN);
	assert_int_equal(pd_reqtab_declare(&t, ID("d"), 0), 0);      /* evicts b, not a */
	expect_state(&t, "b", -ENOENT, 0, -ENOENT);
	expect_state(&t, "a", PD_REQTAB_DECLARED, 0, -EAGAIN);
	assert_int_equal(pd_reqtab_declare(&t, ID("e"), 0), -EBUSY);
	pd_reqtab_ended(&t, ID("a"), 1, -ECANCELED);
	expect_state(&t, "a", PD_REQTAB_FAILED, -ECANCELED, -ECANCELED);
	assert_int_equal(pd_reqtab_declare(&t, ID("e"), 0), 0);      /* now a goes */
	expect_state(&t, "a", -ENOENT, 0, -ENOENT);
	pd_reqtab_fini(&t);
}

/* Many entries through a small table: it never holds more than max, and
 * every evicted one was ended (the live ones all still answer). */
static void test_churn_bounded(void **state)
{
	struct pd_reqtab t;
	char id[16];

	(void)state;
	pd_reqtab_init(&t, 8);
	for (uint32_t i = 0; i < 1000; i++) {
		(void)snprintf(id, sizeof(id), "q%u", i);
		assert_int_equal(pd_reqtab_declare(&t, ID(id), i % 4), 0);
		assert_true(t.n <= 8);
		if (i >= 4) {     /* the one declared 4 before ends: 4 stay live */
			(void)snprintf(id, sizeof(id), "q%u", i - 4);
			pd_reqtab_admitted(&t, ID(id), (i - 4) % 4);
			pd_reqtab_ended(&t, ID(id), (i - 4) % 4, 0);
		}
	}
	for (uint32_t i = 996; i < 1000; i++) {
		(void)snprintf(id, sizeof(id), "q%u", i);
		expect_state(&t, id, PD_REQTAB_DECLARED, 0, -EAGAIN);
	}
	expect_state(&t, "q995", PD_REQTAB_DONE, 0, -EALREADY);
	expect_state(&t, "q0", -ENOENT, 0, -ENOENT);
	assert_int_equal(t.n, 8);
	assert_int_equal(t.nended, 4);
	pd_reqtab_fini(&t);
	assert_int_equal(t.n, 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_declare_negative),
		T(test_declare_twice_eexist),
		T(test_unknown_ignored),
		T(test_one_rank_done),
		T(test_one_rank_failed),
		T(test_several_ranks),
		T(test_undeclare),
		cmocka_unit_test(test_eviction_oldest_ended),
		cmocka_unit_test(test_reopened_entry_not_evicted),
		cmocka_unit_test(test_churn_bounded),
	};

	return cmocka_run_group_tests_name("reqtab", tests, NULL, NULL);
}
