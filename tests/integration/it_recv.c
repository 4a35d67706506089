/* SPDX-License-Identifier: MIT */
/* The decode side under a worker that polls: waits that time out, answers
 * that come late, and releases that must free slots for the next request. */
#include "it_fixture.h"
#include "pd_agent_int.h"
#include "pd_broker_int.h"

/* A decode worker that polls pd_recv_wait() with a short timeout before
 * each request arrives: the late answers of its abandoned waits must not
 * fill its mailbox (which would make every later wait time out). */
static void test_polling_waits_keep_working(void **state)
{
	struct it *t = it_start(8, 8);
	struct pd_recv_info info;
	char req[32];

	(void)state;
	for (int i = 0; i < 600; i++) {
		(void)snprintf(req, sizeof(req), "poll-%d", i);
		assert_int_equal(pd_recv_wait(t->da, req, 1, &info), -ETIMEDOUT);
		assert_int_equal(it_put(t, req, 0, 1, 1), 0);
		it_expect_event(t, req, PD_EV_PUT_DONE);
		assert_int_equal(pd_recv_wait(t->da, req, IT_WAIT_MS, &info), 0);
		assert_int_equal(info.status, 0);
		assert_int_equal(pd_recv_release(t->da, req), 0);
	}
	it_stop(t, 0);
}

/* Decode agents the broker still holds waits for, from its statistics. */
static uint64_t waiters(const struct pd_test_broker *b)
{
	struct pd_segment seg;
	struct pd_shm s;
	struct pd_stats *st = calloc(1, sizeof(*st));
	uint64_t v = UINT64_MAX;

	assert_non_null(st);
	assert_int_equal(pd_segment_attach(b->name, PD_SEG_RDONLY, 1000, &seg, NULL, 0), 0);
	assert_int_equal(pd_layout_open(&seg, &s, NULL, 0), 0);
	assert_int_equal(pd_stats_snapshot(s.stats, st), 0);
	assert_int_equal(pd_stats_find(st, "recv_waiters", &v), 0);
	pd_layout_close(&s);
	free(st);
	return v;
}

/* Waits for requests that never come end with the waiter's timeout on the
 * broker side too: the broker answers them (-ETIMEDOUT) instead of keeping
 * them until the agent detaches, and the agent drops those answers. */
static void test_waits_for_absent_requests_expire(void **state)
{
	struct it *t = it_start(8, 8);
	struct pd_recv_info info;
	char req[32];

	(void)state;
	for (int i = 0; i < 400; i++) {
		(void)snprintf(req, sizeof(req), "absent-%d", i);
		assert_int_equal(pd_recv_wait(t->da, req, 1, &info), -ETIMEDOUT);
	}
	/* The broker expires them on its ticks (every 100 ms); bounded wait. */
	for (int i = 0; i < 100 && waiters(&t->d) != 0; i++)
		(void)nanosleep(&(struct timespec){ 0, 50 * 1000 * 1000 }, NULL);
	assert_int_equal(waiters(&t->d), 0);
	assert_int_equal(it_put(t, "after", 0, 2, 2), 0);
	it_verify(t, "after", 2);
	assert_int_equal(pd_recv_release(t->da, "after"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 8), 8);
	it_stop(t, 0);
}

/* Submit n recv waits with no deadline (arg 0, which libpdagent never
 * sends) for requests that never come, as a rogue agent may. */
static void raw_waits(struct pd_agent *a, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct pd_sqe e = { .op = PD_SQ_RECV_WAIT, .user = 1u << 30 | i };
		uint64_t deadline = pd_deadline_ms(IT_WAIT_MS);
		int rc;

		e.u.req.req_id_len = (uint8_t)snprintf((char *)e.u.req.req_id, PD_REQ_ID_MAX,
						       "never-%u", i);
		while ((rc = pd_ag_submit(a, &e, 1)) == -EAGAIN && pd_now_ns() < deadline)
			(void)nanosleep(&(struct timespec){ 0, 1000 * 1000 }, NULL);
		assert_int_equal(rc, 0);
	}
}

/* The broker keeps at most 1024 recv waits per agent: the rest are
 * refused (-EUSERS from pd_recv_wait(), counted), and the waits go with
 * the agent. A wait without a deadline lasts the --recv-ttl. */
static void test_recv_waits_are_capped(void **state)
{
	static const char *const extra[] = { "--recv-ttl", "2s", NULL };
	struct it *t = it_start_opts(&(struct it_opts){ .send_slots = 8, .recv_slots = 8,
							.d_extra = extra });
	struct pd_agent *rogue = it_attach(&t->d, PD_AGENT_RECV);
	struct pd_recv_info info;

	(void)state;
	raw_waits(rogue, PD_RECV_WAITS_MAX + 76);
	assert_int_equal(it_wait_stat(&t->d, "recv_waits_refused", 76), 76);
	assert_int_equal(waiters(&t->d), PD_RECV_WAITS_MAX);
	assert_int_equal(pd_recv_wait(rogue, "one-more", 1000, &info), -EUSERS);
	assert_int_equal(pd_recv_wait(t->da, "other-agent", 1, &info), -ETIMEDOUT);
	pd_agent_detach(rogue);
	for (int i = 0; i < 100 && waiters(&t->d) != 0; i++)
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	assert_int_equal(waiters(&t->d), 0);
	rogue = it_attach(&t->d, PD_AGENT_RECV);
	raw_waits(rogue, 3);
	for (int i = 0; i < 100 && waiters(&t->d) != 3; i++)
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	assert_int_equal(waiters(&t->d), 3);
	for (int i = 0; i < 200 && waiters(&t->d) != 0; i++) /* the recv-ttl, 2 s */
		(void)nanosleep(&(struct timespec){ 0, 20 * 1000 * 1000 }, NULL);
	assert_int_equal(waiters(&t->d), 0);
	pd_agent_detach(rogue);
	it_stop(t, 0);
}

/* A decode group: two agents attached as ranks 0 and 1 of tp 2 read one
 * request. Rank 0's release takes nothing from rank 1, which still finds
 * and verifies every chunk; rank 1's release frees the slots. */
static void test_decode_group_release_waits_for_every_rank(void **state)
{
	struct it *t = it_start(8, 8);
	struct pd_agent *rank[2];
	struct pd_recv_info info;

	(void)state;
	for (uint32_t r = 0; r < 2; r++) {
		struct pd_agent_opts o;

		pd_agent_opts_init(&o, sizeof(o));
		o.broker = t->d.name;
		o.rundir = t->d.rundir;
		o.roles = PD_AGENT_RECV;
		o.tp_rank = r;
		o.tp_size = 2;
		assert_int_equal(pd_agent_attach(&o, &rank[r]), 0);
	}
	assert_int_equal(it_put(t, "group", 0, 4, 4), 0);
	it_expect_event(t, "group", PD_EV_PUT_DONE);
	assert_int_equal(pd_recv_wait(rank[0], "group", IT_WAIT_MS, &info), 0);
	assert_int_equal(info.status, 0);
	assert_int_equal(pd_recv_release(rank[0], "group"), 0);
	assert_int_equal(it_wait_stat(&t->d, "rx.release_waits", 1), 1);
	assert_int_equal(it_free_slots(&t->d, 1), 4);
	pd_agent_detach(t->da);
	t->da = rank[1]; /* it_verify reads through t->da */
	it_verify(t, "group", 4);
	assert_int_equal(pd_recv_release(rank[1], "group"), 0);
	assert_int_equal(it_wait_free(&t->d, 1, 8), 8);
	assert_int_equal(it_wait_stat(&t->d, "rx.released", 1), 1);
	pd_agent_detach(rank[0]);
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_polling_waits_keep_working),
		cmocka_unit_test(test_waits_for_absent_requests_expire),
		cmocka_unit_test(test_recv_waits_are_capped),
		cmocka_unit_test(test_decode_group_release_waits_for_every_rank),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
