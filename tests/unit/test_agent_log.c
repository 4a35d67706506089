/* SPDX-License-Identifier: MIT */
/*
 * libpdagent against the broker's agent module, across real processes
 * (agent_fixture.h): the options' ABI, the log callback, and receive waits.
 */
#include "agent_fixture.h"

/* A caller built before log_fn existed: its opts_size stops before it.
 * What lies past its struct (garbage here) is never read: a log_fn read
 * from it would be called at the attach's first line, and crash. */
static void test_attach_takes_an_older_smaller_opts_size(void **state)
{
	const size_t old = offsetof(struct pd_agent_opts, log_fn);
	struct fx *f = *state;
	union {
		struct pd_agent_opts o;
		uint8_t raw[sizeof(struct pd_agent_opts) + 16];
	} u;
	struct pd_agent *a = NULL;

	memset(&u, 0xa5, sizeof(u));
	pd_agent_opts_init(&u.o, old);
	assert_int_equal(u.o.opts_size, old);
	u.o.broker = f->name;
	u.o.rundir = f->dir;
	assert_int_equal(pd_agent_attach(&u.o, &a), 0);
	assert_true(wait_count(&f->x->attached, 1, 2000));
	pd_agent_detach(a);
	a = NULL;
	u.o.opts_size = offsetof(struct pd_agent_opts, flags); /* flags is mandatory */
	assert_int_equal(pd_agent_attach(&u.o, &a), -EINVAL);
	/* A newer caller's larger struct: what this library lacks must be 0. */
	pd_agent_opts_init(&u.o, sizeof(u));
	u.o.broker = f->name;
	u.o.rundir = f->dir;
	u.raw[sizeof(u) - 1] = 1;
	assert_int_equal(pd_agent_attach(&u.o, &a), -EINVAL);
	u.raw[sizeof(u) - 1] = 0;
	assert_int_equal(pd_agent_attach(&u.o, &a), 0);
	pd_agent_detach(a);
}

#define MAX_LINES 32

struct lines {
	int n;
	int level[MAX_LINES];
	char msg[MAX_LINES][160];
};

static void keep_line(void *ctx, int level, const char *msg)
{
	struct lines *l = ctx;

	if (l->n == MAX_LINES)
		return;
	l->level[l->n] = level;
	(void)snprintf(l->msg[l->n], sizeof(l->msg[0]), "%s", msg);
	l->n++;
}

/* The level of the first line that starts with prefix; 0: none. */
static int line_level(const struct lines *l, const char *prefix)
{
	for (int i = 0; i < l->n; i++)
		if (!strncmp(l->msg[i], prefix, strlen(prefix)))
			return l->level[i];
	return 0;
}

/* A process that dies holding the agent's send pool (its mutex in shm). */
static int die_holding_the_pool(void *arg)
{
	struct pd_agent *a = arg;

	return pd_pool_lock(a->shm.send, 99, pd_deadline_ms(1000)) < 0 ? 1 : 0;
}

/* What the core logs while it serves an agent's call (here: the slot pool
 * repaired after a process died holding it, inside pd_alloc) reaches that
 * agent's log function, with public levels; so do the agent's own lines,
 * from the attach on (opts.log_fn). A line logged outside the agent's
 * calls is not the agent's; NULL turns the function off. */
static void test_log_fn_gets_the_cores_lines(void **state)
{
	struct fx *f = *state;
	struct lines l = { 0 };
	struct pd_agent_opts o;
	struct pd_agent *a = NULL;
	pd_slot_ref r[1];
	int n;

	pd_agent_opts_init(&o, sizeof(o));
	o.broker = f->name;
	o.rundir = f->dir;
	o.log_fn = keep_line;
	o.log_ctx = &l;
	assert_int_equal(pd_agent_attach(&o, &a), 0);
	assert_int_equal(line_level(&l, "agent: attaching to "), PD_LOG_DEBUG);
	assert_int_equal(line_level(&l, "agent: attached as agent "), PD_LOG_DEBUG);
	admitted(a, "c", 1);
	assert_int_equal(pd_test_wait(pd_test_fork(die_holding_the_pool, a), 2000), 0);
	assert_int_equal(pd_alloc(a, "c", 1, r, 1000), 0);
	assert_int_equal(line_level(&l, "slot: pool repaired after holder pid "), PD_LOG_WARN);
	assert_int_equal(line_level(&l, "shm: mutex holder died; state repaired"), PD_LOG_WARN);
	for (int i = 0; i < l.n; i++)
		assert_in_range(l.level[i], PD_LOG_ERR, PD_LOG_DEBUG);
	n = l.n;
	PD_LOG(WARN, shm, "not the agent's"); /* no agent call on this thread */
	assert_int_equal(l.n, n);
	pd_agent_set_log_fn(a, NULL, NULL);
	assert_int_equal(pd_slot_release(a, r, 1), 0);
	assert_int_equal(pd_test_wait(pd_test_fork(die_holding_the_pool, a), 2000), 0);
	assert_int_equal(pd_alloc(a, "c", 1, r, 1000), 0); /* repaired again, unheard */
	assert_int_equal(l.n, n);
	pd_agent_set_log_fn(a, keep_line, &l);
	pd_agent_detach(a);
	assert_int_equal(line_level(&l, "agent: detaching agent "), PD_LOG_DEBUG);
}

/* timeout_ms 0 does not wait for the request, but the broker's answer
 * comes: a complete request reads 0, one that is not -ETIMEDOUT; the ask
 * the broker keeps has a deadline (its 0 would mean none). */
static void test_recv_wait_with_timeout_zero_asks_once(void **state)
{
	struct fx *f = *state;
	struct pd_agent *a = attach(f);
	struct pd_recv_info info;

	memset(&info, 0xa5, sizeof(info));
	assert_int_equal(pd_recv_wait(a, "ready-1", 0, &info), 0);
	assert_int_equal(info.status, 0);
	assert_int_equal(info.chunks, 3);
	assert_true(pd_ag_zeroed(info.reserved, sizeof(info.reserved)));
	assert_int_not_equal(f->x->wait_arg, 0);
	assert_int_equal(pd_recv_wait(a, "later", 0, &info), -ETIMEDOUT);
	assert_int_equal(pd_recv_wait(a, "ready-2", 2000, &info), 0);
	assert_int_equal(f->x->wait_arg, 2000);
	assert_int_equal(f->x->bad, 0);
	pd_agent_detach(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_attach_takes_an_older_smaller_opts_size),
		T(test_log_fn_gets_the_cores_lines),
		T(test_recv_wait_with_timeout_zero_asks_once),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
