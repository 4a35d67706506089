/* SPDX-License-Identifier: MIT */
/*
 * libpdagent against the broker's agent module, across real processes: a
 * minimal broker (segment, loop, agents; batches checked and completed at
 * once) runs in a child; the test process is the agent.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include <pdkv/agent.h>

#include "pd_agent_int.h" /* to send what the API never would */
#include "pd_agents.h"
#include "pd_test.h"
#include "pd_time.h"

#define SLOTS 8u
#define SLOT  4096u

struct shared {                 /* between the broker child and the test */
	_Atomic uint32_t ready, stop, attached, detached, puts, cancels, bad;
	_Atomic uint32_t declares;
	_Atomic uint32_t admit;     /* the test says: admit the held declaration */
	_Atomic uint32_t wait_arg;  /* the last PD_SQ_RECV_WAIT's broker-side timeout */
};

struct fx {
	char dir[64], name[64];
	struct shared *x;
	pid_t broker;
};

struct harness {
	struct pd_shm shm;
	struct pd_loop *loop;
	struct pd_agents *ag;
	struct shared *x;
	struct pd_cqe held;         /* a "wait-*" declaration, admitted when x->admit */
	uint32_t held_agent;        /* 0: none */
};

/* ---- the broker child ---------------------------------------------------------- */

static int check_put(struct harness *h, const struct pd_sqe *e, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++) {
		const struct pd_sqe_chunk *c = &e[i].u.chunk;
		const uint8_t *d = pd_pool_data(&h->shm.send, c->slot);

		if (e[i].op != PD_SQ_CHUNK || !d || c->len > SLOT)
			return -EPROTO;
		for (uint32_t k = 0; k < c->len; k++)
			if (d[k] != (uint8_t)(i + k))
				return -EPROTO;
		if (pd_pool_set_state(&h->shm.send, &c->slot, 1, 0, PD_SLOT_QUEUED) < 0 ||
		    pd_pool_free(&h->shm.send, &c->slot, 1) < 0)
			return -EPROTO;
	}
	return 0;
}

/* Declarations: "wait-*" is held until the test says admit, "no-*" is
 * refused (-E2BIG), anything else admitted at once. */
static int on_declare(struct harness *h, uint32_t id, const struct pd_sqe *e)
{
	const struct pd_sqe_put *p = &e->u.put;
	struct pd_cqe c = { .type = PD_CQ_ADMITTED, .chunks = p->total_chunks,
			    .rank = p->rank, .req_id_len = p->req_id_len };

	h->x->declares++;
	memcpy(c.req_id, p->req_id, c.req_id_len);
	if (c.req_id_len > 5 && !memcmp(c.req_id, "wait-", 5) && !h->held_agent) {
		h->held = c;
		h->held_agent = id;
		return 0;
	}
	if (c.req_id_len > 3 && !memcmp(c.req_id, "no-", 3)) {
		c.type = PD_CQ_PUT_FAILED;
		c.status = -E2BIG;
	}
	return pd_agents_complete(h->ag, id, &c) < 0 ? -EPROTO : 0;
}

/* Receive waits: "ready-*" is complete (3 chunks), anything else expires
 * at once (-ETIME), as the broker answers an ask whose deadline passed. */
static int on_recv_wait(struct harness *h, uint32_t id, const struct pd_sqe *e)
{
	const struct pd_sqe_req *q = &e->u.req;
	struct pd_cqe c = { .type = PD_CQ_RECV, .user = e->user, .req_id_len = q->req_id_len };
	int ready = q->req_id_len > 6 && !memcmp(q->req_id, "ready-", 6);

	h->x->wait_arg = e->arg;
	memcpy(c.req_id, q->req_id, c.req_id_len);
	c.status = ready ? 0 : -ETIME;
	c.chunks = ready ? 3 : 0;
	return pd_agents_complete(h->ag, id, &c) < 0 ? -EPROTO : 0;
}

static int on_sqes(void *ctx, uint32_t id, const struct pd_sqe *e, uint32_t n)
{
	struct harness *h = ctx;
	struct pd_cqe c = { .type = PD_CQ_PUT_DONE, .user = e->user, .chunks = n - 1 };

	if (e->op == PD_SQ_RECV_WAIT)
		return on_recv_wait(h, id, e);
	if (e->op == PD_SQ_CANCEL) {
		h->x->cancels++;
		return 0;
	}
	if (e->op == PD_SQ_DECLARE)
		return on_declare(h, id, e);
	if (e->op != PD_SQ_PUT || check_put(h, e, n) < 0) {
		h->x->bad++;
		return -EPROTO;
	}
	h->x->puts++;
	c.req_id_len = e->u.put.req_id_len;
	memcpy(c.req_id, e->u.put.req_id, c.req_id_len);
	return pd_agents_complete(h->ag, id, &c) < 0 ? -EPROTO : 0;
}

static void on_attach(void *ctx, uint32_t id, const struct pd_agent_slot *s)
{
	(void)id, (void)s;
	((struct harness *)ctx)->x->attached++;
}

static void on_detach(void *ctx, uint32_t id)
{
	struct harness *h = ctx;

	(void)pd_pool_reclaim(&h->shm.send, id);
	h->x->detached++;
}

static const struct pd_agents_ops hops = {
	.on_sqes = on_sqes, .on_attach = on_attach, .on_detach = on_detach,
};

static void h_before(void *ctx)
{
	pd_agents_before_sleep(((struct harness *)ctx)->ag);
}

static void h_tick(void *ctx)
{
	struct harness *h = ctx;

	pd_agents_tick(h->ag, pd_now_ns());
	if (h->x->admit && h->held_agent) {
		(void)pd_agents_complete(h->ag, h->held_agent, &h->held);
		h->held_agent = 0;
	}
	if (h->x->stop)
		pd_loop_stop(h->loop);
}

static int harness_setup(struct harness *h, const struct fx *f)
{
	struct pd_layout_opts lo = { .name = f->name, .send_slots = SLOTS, .recv_slots = SLOTS,
				     .slot_size = SLOT, .max_agents = 4, .sq_entries = 64,
				     .cq_entries = 32, .epoch = 1 };
	struct pd_loop_opts o = { .tick_ns = 20 * PD_NS_PER_MS, .on_tick = h_tick,
				  .before_sleep = h_before, .ctx = h };
	struct pd_agents_opts ao = { .loop = NULL, .ops = &hops, .ctx = h, .epoch = 1,
				     .group = (gid_t)-1 };
	char path[160];

	(void)snprintf(path, sizeof(path), "%s/%s.sock", f->dir, f->name);
	if (pd_layout_create(&lo, &h->shm, NULL, 0) < 0 || pd_loop_create(&o, &h->loop) < 0)
		return -1;
	ao.shm = &h->shm;
	ao.loop = h->loop;
	ao.sock_path = path;
	if (pd_agents_create(&ao, &h->ag, NULL, 0) < 0)
		return -1;
	pd_segment_publish(&h->shm.seg);
	return 0;
}

static int broker_main(void *arg)
{
	const struct fx *f = arg;
	struct harness h = { .x = f->x };

	if (harness_setup(&h, f) < 0)
		return 10;
	h.x->ready = 1;
	if (pd_loop_run(h.loop) < 0)
		return 11;
	pd_agents_destroy(h.ag);
	pd_loop_destroy(h.loop);
	pd_layout_close(&h.shm);
	return 0;
}

/* ---- fixture ---------------------------------------------------------------------- */

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));
	uint64_t deadline = pd_deadline_ms(5000);

	(void)snprintf(f->dir, sizeof(f->dir), "/tmp/pdkv-agent-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	pd_test_name(f->name, sizeof(f->name), "agent");
	f->x = pd_test_shared_alloc(sizeof(*f->x));
	f->broker = pd_test_fork(broker_main, f);
	while (!f->x->ready && pd_now_ns() < deadline)
		(void)usleep(1000);
	*state = f;
	return f->x->ready ? 0 : -1;
}

static int teardown(void **state)
{
	struct fx *f = *state;
	char path[160];

	f->x->stop = 1;
	if (f->broker > 0)
		(void)pd_test_wait(f->broker, 5000);
	(void)snprintf(path, sizeof(path), "%s/%s.sock", f->dir, f->name);
	(void)unlink(path);
	(void)rmdir(f->dir);
	(void)pd_segment_unlink(f->name);
	pd_test_shared_free(f->x, sizeof(*f->x));
	free(f);
	return 0;
}

static struct pd_agent *attach(struct fx *f)
{
	struct pd_agent_opts o;
	struct pd_agent *a = NULL;

	pd_agent_opts_init(&o, sizeof(o));
	o.broker = f->name;
	o.rundir = f->dir;
	o.attach_timeout_ms = 2000;
	assert_int_equal(pd_agent_attach(&o, &a), 0);
	return a;
}

static int wait_count(_Atomic uint32_t *c, uint32_t want, uint32_t ms)
{
	uint64_t deadline = pd_deadline_ms(ms);

	while (*c < want && pd_now_ns() < deadline)
		(void)usleep(1000);
	return *c >= want;
}

static int declare(struct pd_agent *a, const char *req, uint32_t total)
{
	struct pd_decl d = { .req_id = req, .endpoint = "tcp://127.0.0.1:1",
			     .total_chunks = total, .world_size = 1 };

	return pd_declare(a, &d);
}

/* Declared and admitted (the harness admits at once). */
static void admitted(struct pd_agent *a, const char *req, uint32_t total)
{
	uint64_t deadline = pd_deadline_ms(2000);

	assert_int_equal(declare(a, req, total), 0);
	while (pd_req_state(a, req, NULL) == PD_REQ_DECLARED && pd_now_ns() < deadline)
		(void)usleep(1000);
	assert_int_equal(pd_req_state(a, req, NULL), PD_REQ_ADMITTED);
}

/* The next event that is not an admission. */
static int next_end(struct pd_agent *a, struct pd_event *ev, uint32_t ms)
{
	int rc;

	while ((rc = pd_next_event(a, ev, ms)) == 0 && ev->type == PD_EV_ADMITTED)
		;
	return rc;
}

static void fill(struct pd_agent *a, pd_slot_ref ref, uint32_t i, uint32_t len)
{
	uint8_t *d = pd_slot_data(a, ref);

	assert_non_null(d);
	for (uint32_t k = 0; k < len; k++)
		d[k] = (uint8_t)(i + k);
}

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

/* ---- ABI and logging ------------------------------------------------------------- */

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

	return pd_pool_lock(&a->shm.send, 99, pd_deadline_ms(1000)) < 0 ? 1 : 0;
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
		T(test_attach_takes_an_older_smaller_opts_size),
		T(test_log_fn_gets_the_cores_lines),
		T(test_recv_wait_with_timeout_zero_asks_once),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
