/* SPDX-License-Identifier: MIT */
/*
 * A broker in a pid namespace of its own, as in a container beside the
 * workers' containers: it sees its agents' pids as 0 (SO_PEERCRED), and a
 * peer broker of the host cannot reach its files through /proc. Its agents
 * still attach and move data; one past its lease is fenced without a kill
 * (the broker cannot name it) and keeps its loans while it may still write
 * them; a same-host peer of the host's namespace moves data over shm. Not
 * root: the brokers run in a user namespace too.
 */
#include <unistd.h>

#include "it_fixture.h"

static int pidns_or_skip(void)
{
	if (pd_test_pidns_ok())
		return 1;
	skip();
	return 0;
}

static void put_and_verify(struct it *t, const char *req, uint32_t n)
{
	assert_int_equal(it_put(t, req, 0, n, n), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, n);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

/* An agent the prefill broker cannot see holds 4 loans past --loan-timeout:
 * fenced (its calls fail -ENOTCONN) and not killed; its loans stay out
 * while it is attached, as nobody's they would go to others while it can
 * still write them, and come back at its detach. */
static void test_unseen_agent_past_its_lease_is_fenced_and_keeps_its_loans(void **state)
{
	static const char *const lease[] = { "--loan-timeout", "1s", NULL };
	struct it *t;
	struct pd_agent *a;
	pd_slot_ref r[4];

	(void)state;
	if (!pidns_or_skip())
		return;
	t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 64,
					      .p_extra = lease, .p_pidns = 1 });
	put_and_verify(t, "A", 4); /* agents it cannot see attach and move data */
	a = it_attach(&t->p, PD_AGENT_SEND);
	assert_int_equal(it_declare_on(t, a, "hog", 4), 0);
	assert_int_equal(it_wait_admission(a, "hog"), PD_REQ_ADMITTED);
	assert_int_equal(pd_alloc(a, "hog", 4, r, IT_WAIT_MS), 0);
	assert_int_equal(it_wait_stat(&t->p, "agents.fenced", 1), 1);
	assert_true(pd_test_broker_log_has(&t->p, "cannot kill it"));
	assert_true(pd_test_broker_log_has(&t->p, "(pid 0 here: not visible, "));
	assert_int_equal(pd_alloc(a, "hog", 1, r, 100), -ENOTCONN);
	assert_int_equal(it_free_slots(&t->p, 0), 12);
	assert_int_equal(it_stat(&t->p, "pool.send.loans_orphaned"), 0);
	pd_agent_detach(a);
	assert_int_equal(it_wait_free(&t->p, 0, 16), 16);
	put_and_verify(t, "B", 4);
	it_stop(t, 0);
}

/* Between a broker in a pid namespace of its own and one of the host, shm
 * works while the arenas are files of their own (no hugetlb pages: they are
 * opened by name, not through /proc; it_hugetlb has the other case). */
static void test_shm_across_pid_namespaces_with_named_arenas(void **state)
{
	static const char *const off[] = { "--hugepages", "off", NULL };
	struct it *t;
	char x[128], why[256];
	uint64_t n;

	(void)state;
	if (!pidns_or_skip())
		return;
	t = it_start_opts(&(struct it_opts){ .send_slots = 16, .recv_slots = 16,
					      .transport = "shm", .d_pidns = 1,
					      .p_extra = off, .d_extra = off });
	put_and_verify(t, "A", 2);
	it_peer_xport(&t->p, x, why, sizeof(x));
	assert_string_equal(x, "shm");
	n = it_wait_stat(&t->p, "shm.copies_ok", 2); /* published at the next tick */
	assert_true(n >= 2 && n != UINT64_MAX);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unseen_agent_past_its_lease_is_fenced_and_keeps_its_loans),
		cmocka_unit_test(test_shm_across_pid_namespaces_with_named_arenas),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
