/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_AGENT_FIXTURE_H
#define PD_TESTS_UNIT_AGENT_FIXTURE_H

/*
 * libpdagent against the broker's agent module, across real processes: a
 * minimal broker (segment, loop, agents; batches checked and completed at
 * once) runs in a child; the test process is the agent. Used by
 * test_agent.c and test_agent_log.c.
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

static inline int check_put(struct harness *h, const struct pd_sqe *e, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++) {
		const struct pd_sqe_chunk *c = &e[i].u.chunk;
		const uint8_t *d = pd_pool_data(h->shm.send, c->slot);

		if (e[i].op != PD_SQ_CHUNK || !d || c->len > SLOT)
			return -EPROTO;
		for (uint32_t k = 0; k < c->len; k++)
			if (d[k] != (uint8_t)(i + k))
				return -EPROTO;
		if (pd_pool_set_state(h->shm.send, &c->slot, 1, 0, PD_SLOT_QUEUED) < 0 ||
		    pd_pool_free(h->shm.send, &c->slot, 1) < 0)
			return -EPROTO;
	}
	return 0;
}

/* Declarations: "wait-*" is held until the test says admit, "no-*" is
 * refused (-E2BIG), anything else admitted at once. */
static inline int on_declare(struct harness *h, uint32_t id, const struct pd_sqe *e)
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
static inline int on_recv_wait(struct harness *h, uint32_t id, const struct pd_sqe *e)
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

static inline int on_sqes(void *ctx, uint32_t id, const struct pd_sqe *e, uint32_t n)
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

static inline void on_attach(void *ctx, uint32_t id, const struct pd_agent_slot *s)
{
	(void)id, (void)s;
	((struct harness *)ctx)->x->attached++;
}

static inline void on_detach(void *ctx, uint32_t id)
{
	struct harness *h = ctx;

	(void)pd_pool_reclaim(h->shm.send, id);
	h->x->detached++;
}

static const struct pd_agents_ops hops = {
	.on_sqes = on_sqes, .on_attach = on_attach, .on_detach = on_detach,
};

static inline void h_before(void *ctx)
{
	pd_agents_before_sleep(((struct harness *)ctx)->ag);
}

static inline void h_tick(void *ctx)
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

static inline int harness_setup(struct harness *h, const struct fx *f)
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

static inline int broker_main(void *arg)
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

static inline int setup(void **state)
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

static inline int teardown(void **state)
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

static inline struct pd_agent *attach(struct fx *f)
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

static inline int wait_count(_Atomic uint32_t *c, uint32_t want, uint32_t ms)
{
	uint64_t deadline = pd_deadline_ms(ms);

	while (*c < want && pd_now_ns() < deadline)
		(void)usleep(1000);
	return *c >= want;
}

static inline int declare(struct pd_agent *a, const char *req, uint32_t total)
{
	struct pd_decl d = { .req_id = req, .endpoint = "tcp://127.0.0.1:1",
			     .total_chunks = total, .world_size = 1 };

	return pd_declare(a, &d);
}

/* Declared and admitted (the harness admits at once). */
static inline void admitted(struct pd_agent *a, const char *req, uint32_t total)
{
	uint64_t deadline = pd_deadline_ms(2000);

	assert_int_equal(declare(a, req, total), 0);
	while (pd_req_state(a, req, NULL) == PD_REQ_DECLARED && pd_now_ns() < deadline)
		(void)usleep(1000);
	assert_int_equal(pd_req_state(a, req, NULL), PD_REQ_ADMITTED);
}

/* The next event that is not an admission. */
static inline int next_end(struct pd_agent *a, struct pd_event *ev, uint32_t ms)
{
	int rc;

	while ((rc = pd_next_event(a, ev, ms)) == 0 && ev->type == PD_EV_ADMITTED)
		;
	return rc;
}

static inline void fill(struct pd_agent *a, pd_slot_ref ref, uint32_t i, uint32_t len)
{
	uint8_t *d = pd_slot_data(a, ref);

	assert_non_null(d);
	for (uint32_t k = 0; k < len; k++)
		d[k] = (uint8_t)(i + k);
}


#endif
