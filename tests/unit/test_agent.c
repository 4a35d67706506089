/* SPDX-License-Identifier: MIT */
/*
 * libpdagent against the broker's agent module, across real processes
 * (agent_fixture.h): attach, declare, alloc, put, cancel, and what a dead
 * broker or a dead or misbehaving agent leaves.
 */
#include <sys/eventfd.h>

#include "agent_fixture.h"

/* ---- tests -------------------------------------------------------------------------- */

static void test_attach_errors(void **state)
{
	struct fx *f = *state;
	struct pd_agent_opts o;
	struct pd_agent *a = NULL;

	pd_agent_opts_init(&o, sizeof(o));
	o.broker = "no-such-broker";
	o.rundir = f->dir;
	o.attach_timeout_ms = 100;
	assert_int_equal(pd_agent_attach(&o, &a), -ENOENT);
	o.broker = f->name;
	o.flags = 0x80;
	assert_int_equal(pd_agent_attach(&o, &a), -EINVAL);
	o.flags = 0;
	o.roles = 0;
	assert_int_equal(pd_agent_attach(&o, &a), -EINVAL);
	o.roles = PD_AGENT_SEND;
	o.tp_rank = 2; /* of tp_size 2: at once, not the broker's -EPROTO */
	o.tp_size = 2;
	assert_int_equal(pd_agent_attach(&o, &a), -EINVAL);
	o.tp_size = 0;
	o.tp_rank = 0;
	assert_int_equal(pd_agent_attach(&o, &a), -EINVAL);
	assert_null(a);
	pd_agent_detach(NULL);
}

static void test_put_validation(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	pd_slot_ref r[2];
	struct pd_chunk c = { .len = 16, .klen = 1, .key = "k" };
	struct pd_batch b = { .req_id = "r", .endpoint = "tcp://127.0.0.1:1", .chunks = &c,
			      .n = 1, .total_chunks = 1, .world_size = 1, .last = 1 };
	struct pd_batch bad;

	admitted(a, "r", 1);
	assert_int_equal(pd_alloc(a, "r", 2, r, 1000), 0);
	c.slot = r[0] + (1ull << 32); /* a generation that is not the loan's */
	assert_int_equal(pd_put(a, &b), -ESTALE);
	c.slot = r[0];
	bad = b, bad.endpoint = "";
	assert_int_equal(pd_put(a, &bad), -EINVAL);
	bad = b, bad.n = 0, bad.last = 0;
	assert_int_equal(pd_put(a, &bad), -EINVAL);
	bad = b, bad.rank = 1;
	assert_int_equal(pd_put(a, &bad), -EINVAL);
	bad = b, bad.reserved[sizeof(bad.reserved) - 1] = 1; /* a field this version lacks */
	assert_int_equal(pd_put(a, &bad), -EINVAL);
	c.reserved[0] = 1;
	assert_int_equal(pd_put(a, &b), -EINVAL);
	c.reserved[0] = 0;
	c.klen = 0;
	assert_int_equal(pd_put(a, &b), -EINVAL);
	c.klen = 1, c.len = SLOT + 1;
	assert_int_equal(pd_put(a, &b), -EINVAL);
	assert_int_equal(pd_slot_release(a, r, 2), 0);
	assert_int_equal(pd_slot_release(a, r, 2), -ESTALE);
	assert_int_equal(f->x->puts, 0);
	pd_agent_detach(a);
}

static void test_put_reaches_the_broker_and_completes(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	struct pd_chunk c[2] = { { .len = 100, .klen = 2, .key = "k0" },
				 { .len = SLOT, .klen = 2, .key = "k1" } };
	struct pd_batch b = { .req_id = "req-1", .endpoint = "tcp://127.0.0.1:1", .chunks = c,
			      .n = 2, .total_chunks = 2, .world_size = 1, .last = 1 };
	struct pd_event ev;
	pd_slot_ref r[2];

	assert_int_equal(pd_slot_size(a), SLOT);
	admitted(a, "req-1", 2);
	assert_int_equal(pd_alloc(a, "req-1", 2, r, 1000), 0);
	for (uint32_t i = 0; i < 2; i++) {
		c[i].slot = r[i];
		fill(a, r[i], i + 1, c[i].len);
	}
	assert_int_equal(pd_put(a, &b), 0);
	memset(&ev, 0xa5, sizeof(ev));
	assert_int_equal(pd_next_event(a, &ev, 5000), 0);
	assert_int_equal(ev.type, PD_EV_ADMITTED);
	assert_int_equal(ev.chunks, 2);
	assert_true(pd_ag_zeroed(ev.reserved, sizeof(ev.reserved))); /* written, as 0 */
	assert_int_equal(pd_next_event(a, &ev, 5000), 0);
	assert_int_equal(ev.type, PD_EV_PUT_DONE);
	assert_int_equal(ev.chunks, 2);
	assert_string_equal(ev.req_id, "req-1");
	assert_null(pd_slot_data(a, r[0])); /* the loan ended at pd_put */
	assert_int_equal(f->x->bad, 0);
	assert_int_equal(pd_next_event(a, &ev, 50), -ETIMEDOUT);
	pd_agent_detach(a);
	assert_true(wait_count(&f->x->detached, 1, 2000));
}

static void test_alloc_times_out_and_cancel_sticks(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	pd_slot_ref r[SLOTS + 1];
	uint64_t t0;

	admitted(a, "x", SLOTS);
	admitted(a, "y", 1);
	assert_int_equal(pd_alloc(a, "x", SLOTS + 1, r, 10), -E2BIG);
	assert_int_equal(pd_alloc(a, "x", SLOTS, r, 1000), 0);
	t0 = pd_now_ns();
	assert_int_equal(pd_alloc(a, "y", 1, r + SLOTS, 100), -ETIMEDOUT);
	assert_true(pd_now_ns() - t0 >= 100 * PD_NS_PER_MS);
	assert_int_equal(pd_cancel(a, "z"), 0);
	assert_int_equal(pd_alloc(a, "z", 1, r + SLOTS, 1000), -ECANCELED);
	assert_true(wait_count(&f->x->cancels, 1, 2000));
	pd_agent_detach(a); /* its 8 loaned slots go back */
	a = attach(f);
	admitted(a, "w", SLOTS);
	assert_int_equal(pd_alloc(a, "w", SLOTS, r, 1000), 0);
	pd_agent_detach(a);
}

static int kill_later(void *arg)
{
	(void)usleep(300 * 1000);
	return kill(*(pid_t *)arg, SIGKILL) == 0 ? 0 : 1;
}

static void test_declare_validation(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	struct pd_decl d = { .req_id = "v", .endpoint = "tcp://127.0.0.1:1", .total_chunks = 1,
			     .world_size = 1 };
	struct pd_decl bad;
	pd_slot_ref r[1];

	assert_int_equal(pd_declare(NULL, &d), -EINVAL);
	assert_int_equal(pd_declare(a, NULL), -EINVAL);
	bad = d, bad.req_id = "";
	assert_int_equal(pd_declare(a, &bad), -EINVAL);
	bad = d, bad.endpoint = NULL;
	assert_int_equal(pd_declare(a, &bad), -EINVAL);
	bad = d, bad.world_size = 0;
	assert_int_equal(pd_declare(a, &bad), -EINVAL);
	bad = d, bad.rank = 1;
	assert_int_equal(pd_declare(a, &bad), -EINVAL);
	bad = d, bad.world_size = PD_WORLD_MAX + 1;
	assert_int_equal(pd_declare(a, &bad), -EINVAL);
	bad = d, bad.flags = 1;
	assert_int_equal(pd_declare(a, &bad), -EINVAL);
	bad = d, bad.reserved[0] = 1; /* a field this version lacks */
	assert_int_equal(pd_declare(a, &bad), -EINVAL);
	assert_int_equal(f->x->declares, 0);
	assert_int_equal(pd_req_state(a, "v", NULL), -ENOENT);
	assert_int_equal(pd_alloc(a, "v", 1, r, 0), -ENOENT); /* never declared: nothing */
	assert_int_equal(pd_declare(a, &d), 0);
	assert_int_equal(pd_declare(a, &d), -EEXIST);
	d.rank = 1, d.world_size = 2; /* another rank of it, from this agent too */
	assert_int_equal(pd_declare(a, &d), 0);
	assert_true(wait_count(&f->x->declares, 2, 2000));
	pd_agent_detach(a);
}

/* Not admitted: pd_alloc takes nothing, -EAGAIN at once or after its wait;
 * admitted later: the waiting pd_alloc gets its slots; the event and the
 * state say so; a completed request takes no more. */
static void test_alloc_waits_for_admission_holding_nothing(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	struct pd_chunk c = { .len = 8, .klen = 1, .key = "k" };
	struct pd_batch b = { .req_id = "wait-1", .endpoint = "tcp://127.0.0.1:1", .chunks = &c,
			      .n = 1, .total_chunks = 1, .world_size = 1, .last = 1 };
	pd_slot_ref r[SLOTS];
	struct pd_event ev;
	uint64_t t0;

	assert_int_equal(declare(a, "wait-1", 1), 0);
	assert_true(wait_count(&f->x->declares, 1, 2000));
	assert_int_equal(pd_req_state(a, "wait-1", NULL), PD_REQ_DECLARED);
	t0 = pd_now_ns();
	assert_int_equal(pd_alloc(a, "wait-1", 1, r, 0), -EAGAIN);
	assert_true(pd_now_ns() - t0 < 50 * PD_NS_PER_MS);
	assert_int_equal(pd_alloc(a, "wait-1", 1, r, 150), -EAGAIN);
	assert_true(pd_now_ns() - t0 >= 150 * PD_NS_PER_MS);
	admitted(a, "all", SLOTS); /* the waits took nothing: every slot is there */
	assert_int_equal(pd_alloc(a, "all", SLOTS, r, 0), 0);
	assert_int_equal(pd_slot_release(a, r, SLOTS), 0);
	f->x->admit = 1;
	assert_int_equal(pd_alloc(a, "wait-1", 1, r, 5000), 0);
	assert_int_equal(pd_req_state(a, "wait-1", NULL), PD_REQ_ADMITTED);
	assert_int_equal(pd_next_event(a, &ev, 0), 0);
	assert_int_equal(ev.type, PD_EV_ADMITTED);
	assert_string_equal(ev.req_id, "all");
	assert_int_equal(pd_next_event(a, &ev, 0), 0);
	assert_int_equal(ev.type, PD_EV_ADMITTED);
	assert_string_equal(ev.req_id, "wait-1");
	assert_int_equal(ev.chunks, 1);
	c.slot = r[0];
	fill(a, r[0], 1, c.len);
	assert_int_equal(pd_put(a, &b), 0);
	assert_int_equal(pd_next_event(a, &ev, 5000), 0);
	assert_int_equal(ev.type, PD_EV_PUT_DONE);
	assert_int_equal(pd_req_state(a, "wait-1", NULL), PD_REQ_DONE);
	assert_int_equal(pd_alloc(a, "wait-1", 1, r, 0), -EALREADY);
	assert_int_equal(declare(a, "wait-1", 1), -EEXIST);
	pd_agent_detach(a);
}

static int readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

/* An engine that polls pd_agent_fd() (and reads events with timeout 0) is
 * woken by the admission, with no library call waiting; reading clears it. */
static void test_agent_fd_wakes_a_poller(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	int fd = pd_agent_fd(a);
	struct pd_event ev;

	assert_true(fd >= 0);
	assert_int_equal(pd_agent_fd(NULL), -EINVAL);
	assert_int_equal(declare(a, "wait-fd", 1), 0);
	assert_true(wait_count(&f->x->declares, 1, 2000));
	assert_int_equal(pd_next_event(a, &ev, 0), -ETIMEDOUT);
	assert_false(readable(fd, 100));
	f->x->admit = 1;
	assert_true(readable(fd, 2000));
	assert_int_equal(pd_next_event(a, &ev, 0), 0);
	assert_int_equal(ev.type, PD_EV_ADMITTED);
	assert_int_equal(pd_next_event(a, &ev, 0), -ETIMEDOUT);
	assert_false(readable(fd, 0));
	/* A bell rung for a completion already read (the broker rings after it
	 * writes the ring, so a reader can drain before the ring): a look that
	 * finds the ring empty may leave it, pd_next_event() must not, or a
	 * poller spins. */
	assert_int_equal(eventfd_write(fd, 1), 0);
	assert_int_equal(pd_req_state(a, "wait-fd", NULL), PD_REQ_ADMITTED);
	assert_int_equal(pd_next_event(a, &ev, 0), -ETIMEDOUT);
	assert_false(readable(fd, 0));
	pd_agent_detach(a);
}

/* A refused declaration: the request fails; pd_alloc gets -ECANCELED, the
 * state and the event carry the reason. */
static void test_refused_declaration(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	struct pd_event ev;
	pd_slot_ref r[1];
	int32_t st = 0;

	assert_int_equal(declare(a, "no-room", 100), 0);
	assert_int_equal(pd_alloc(a, "no-room", 1, r, 2000), -ECANCELED);
	assert_int_equal(pd_req_state(a, "no-room", &st), PD_REQ_FAILED);
	assert_int_equal(st, -E2BIG);
	assert_int_equal(pd_next_event(a, &ev, 1000), 0);
	assert_int_equal(ev.type, PD_EV_PUT_FAILED);
	assert_int_equal(ev.status, -E2BIG);
	assert_string_equal(ev.req_id, "no-room");
	pd_agent_detach(a);
}

/* The broker dies while pd_alloc waits for an admission: -ENOTCONN soon. */
static void test_broker_death_wakes_an_admission_wait(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	pd_slot_ref r[1];
	pid_t killer;
	uint64_t t0;

	assert_int_equal(declare(a, "wait-2", 1), 0);
	killer = pd_test_fork(kill_later, &f->broker);
	t0 = pd_now_ns();
	assert_int_equal(pd_alloc(a, "wait-2", 1, r, 10000), -ENOTCONN);
	assert_true(pd_now_ns() - t0 < 1500 * PD_NS_PER_MS);
	assert_int_equal(pd_test_wait(killer, 2000), 0);
	assert_int_equal(pd_test_wait(f->broker, 2000), 128 + SIGKILL);
	f->broker = -1;
	assert_int_equal(pd_req_state(a, "wait-2", NULL), -ENOTCONN);
	pd_agent_detach(a);
}

/* A child's agent: attached, request req declared with n chunks, n slots
 * loaned into r. NULL on failure. */
static struct pd_agent *child_loans(struct fx *f, const char *req, uint32_t n, pd_slot_ref *r)
{
	struct pd_agent_opts o;
	struct pd_agent *a;

	pd_agent_opts_init(&o, sizeof(o));
	o.broker = f->name;
	o.rundir = f->dir;
	if (pd_agent_attach(&o, &a) < 0)
		return NULL;
	if (declare(a, req, n) < 0 || pd_alloc(a, req, n, r, 1000) < 0) {
		pd_agent_detach(a);
		return NULL;
	}
	return a;
}

static int agent_dies_holding(void *arg)
{
	pd_slot_ref r[3];

	if (!child_loans(arg, "d", 3, r))
		return 1;
	(void)raise(SIGKILL);
	return 2;
}

static void test_dead_agent_slots_come_back(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a;
	pd_slot_ref r[SLOTS];

	assert_int_equal(pd_test_wait(pd_test_fork(agent_dies_holding, f), 5000),
			 128 + SIGKILL);
	assert_true(wait_count(&f->x->detached, 1, 2000));
	a = attach(f);
	admitted(a, "all", SLOTS);
	assert_int_equal(pd_alloc(a, "all", SLOTS, r, 1000), 0);
	pd_agent_detach(a);
}

/* Child: loan two slots, then submit what the API never would. */
static int agent_sends_garbage(void *arg)
{
	struct pd_sqe e = { .op = 99 };
	struct pd_agent *a;
	pd_slot_ref r[2];

	a = child_loans(arg, "g", 2, r);
	if (!a || pd_ag_submit(a, &e, 1) < 0)
		return 1;
	(void)pause(); /* until the broker fences it */
	return 2;
}

/* A submission the broker cannot parse fences the agent: killed (its
 * memory is corrupt, and it could still write the staging it holds), its
 * loans back once it is gone. */
static void test_garbage_submission_fences_the_agent(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a;
	pd_slot_ref all[SLOTS];

	assert_int_equal(pd_test_wait(pd_test_fork(agent_sends_garbage, f), 5000),
			 128 + SIGKILL);
	assert_true(wait_count(&f->x->detached, 1, 2000));
	assert_int_equal(f->x->bad, 1);
	a = attach(f);
	admitted(a, "h", SLOTS);
	assert_int_equal(pd_alloc(a, "h", SLOTS, all, 1000), 0); /* every loan came back */
	pd_agent_detach(a);
}

static void test_broker_death_wakes_a_blocked_alloc(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	struct pd_event ev;
	pd_slot_ref r[SLOTS + 1];
	pid_t killer;
	uint64_t t0;

	admitted(a, "x", SLOTS);
	admitted(a, "y", 1);
	assert_int_equal(pd_alloc(a, "x", SLOTS, r, 1000), 0);
	killer = pd_test_fork(kill_later, &f->broker);
	t0 = pd_now_ns();
	assert_int_equal(pd_alloc(a, "y", 1, r + SLOTS, 10000), -ENOTCONN); /* in the pool */
	assert_true(pd_now_ns() - t0 < 1500 * PD_NS_PER_MS);
	assert_int_equal(pd_test_wait(killer, 2000), 0);
	assert_int_equal(pd_test_wait(f->broker, 2000), 128 + SIGKILL);
	f->broker = -1;
	assert_int_equal(next_end(a, &ev, 1000), -ENOTCONN);
	assert_int_equal(pd_cancel(a, "y"), -ENOTCONN);
	pd_agent_detach(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_attach_errors),
		T(test_put_validation),
		T(test_put_reaches_the_broker_and_completes),
		T(test_alloc_times_out_and_cancel_sticks),
		T(test_declare_validation),
		T(test_alloc_waits_for_admission_holding_nothing),
		T(test_refused_declaration),
		T(test_agent_fd_wakes_a_poller),
		T(test_broker_death_wakes_an_admission_wait),
		T(test_dead_agent_slots_come_back),
		T(test_garbage_submission_fences_the_agent),
		T(test_broker_death_wakes_a_blocked_alloc),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
