/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_CTRL_FIXTURE_H
#define PD_TESTS_UNIT_CTRL_FIXTURE_H

/*
 * Control plane test nodes. A node is one pd_ctrl on its own pd_loop, run
 * by its own thread for the node's whole life (pd_loop_run is one-shot, and
 * a ctrl's sockets belong to one thread): the main thread asks it to do
 * things through a mailbox (an eventfd in its loop) and waits, bounded, for
 * the answer; the ctrl's callbacks append events that the main thread
 * waits for, bounded. cmocka asserts stay in the main thread.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <cmocka.h>

#include "pd_ctrl.h"
#include "pd_loop.h"
#include "pd_time.h"
#include "pd_wire.h"

#define FX_EV_MAX   2048u
#define FX_CALL_MS  3000u   /* a command never takes longer */

#define FX_EV_MSG   1u
#define FX_EV_UP    2u
#define FX_EV_DOWN  3u
#define FX_EV_ALIAS 4u
#define FX_EV_SECRETS 5u
#define FX_EV_EVICTED 6u

struct fx_ev {
	uint32_t kind;
	uint32_t peer;
	int err;               /* DOWN */
	uint32_t type;         /* MSG: PD_MSG_* */
	uint64_t seq;          /* MSG: seq of AllocRequest/AllocResponse/Error */
	int32_t code;          /* MSG: Error code */
	uint32_t aux;          /* ALIAS: the canonical id */
	uint64_t epoch;        /* UP */
	uint64_t accept, present; /* UP, SECRETS: the session's data secrets */
	uint64_t t_ns;
	char name[64];         /* UP: the peer's name; MSG: req_id */
};

struct fx_node;
typedef int fx_cmd_fn(struct fx_node *n, void *arg);

struct fx_node {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int cmd_fd;
	fx_cmd_fn *cmd;        /* under mu */
	void *arg;
	int rc, done, started, create_rc;
	/* the node thread's */
	struct pd_loop *loop;
	struct pd_ctrl *ctrl;
	struct pd_ctrl_opts o;
	char name[32], bind[256], proxy[256];
	char endpoint[PD_CTRL_ENDPOINT_MAX];
	/* under mu */
	struct fx_ev ev[FX_EV_MAX];
	uint32_t nev;
};

static inline void fx_push(struct fx_node *n, const struct fx_ev *e)
{
	pthread_mutex_lock(&n->mu);
	if (n->nev < FX_EV_MAX)
		n->ev[n->nev++] = *e;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
}

static inline void fx_copy_name(char *dst, size_t cap, const struct pd_bytes *b)
{
	size_t k = b->len < cap - 1 ? b->len : cap - 1;

	memcpy(dst, b->p, k);
	dst[k] = '\0';
}

static inline void fx_on_msg(void *ctx, uint32_t peer, const struct pd_msg *m)
{
	struct fx_ev e = { .kind = FX_EV_MSG, .peer = peer, .type = m->type, .t_ns = pd_now_ns() };

	if (m->type == PD_MSG_ALLOC_REQ) {
		e.seq = m->u.alloc_req.seq;
		fx_copy_name(e.name, sizeof(e.name), &m->u.alloc_req.req_id);
	} else if (m->type == PD_MSG_ALLOC_RESP) {
		e.seq = m->u.alloc_resp.seq;
	} else if (m->type == PD_MSG_ERROR) {
		e.seq = m->u.error.seq;
		e.code = m->u.error.code;
	}
	fx_push(ctx, &e);
}

static inline void fx_on_up(void *ctx, uint32_t peer, const struct pd_msg_hello *h,
			    const struct pd_ctrl_secrets *s)
{
	struct fx_ev e = { .kind = FX_EV_UP, .peer = peer, .epoch = h->epoch, .t_ns = pd_now_ns(),
			   .accept = s->accept, .present = s->present };

	fx_copy_name(e.name, sizeof(e.name), &h->name);
	fx_push(ctx, &e);
}

static inline void fx_on_down(void *ctx, uint32_t peer, int err)
{
	struct fx_ev e = { .kind = FX_EV_DOWN, .peer = peer, .err = err, .t_ns = pd_now_ns() };

	fx_push(ctx, &e);
}

static inline void fx_on_alias(void *ctx, uint32_t alias, uint32_t peer)
{
	struct fx_ev e = { .kind = FX_EV_ALIAS, .peer = alias, .aux = peer, .t_ns = pd_now_ns() };

	fx_push(ctx, &e);
}

static inline void fx_on_secrets(void *ctx, uint32_t peer, const struct pd_ctrl_secrets *s)
{
	struct fx_ev e = { .kind = FX_EV_SECRETS, .peer = peer, .accept = s->accept,
			   .present = s->present, .t_ns = pd_now_ns() };

	fx_push(ctx, &e);
}

static inline void fx_on_evicted(void *ctx, uint32_t peer)
{
	struct fx_ev e = { .kind = FX_EV_EVICTED, .peer = peer, .t_ns = pd_now_ns() };

	fx_push(ctx, &e);
}

static const struct pd_ctrl_ops fx_ops = {
	.on_msg = fx_on_msg, .on_peer_up = fx_on_up, .on_peer_down = fx_on_down,
	.on_peer_alias = fx_on_alias, .on_peer_secrets = fx_on_secrets,
	.on_peer_evicted = fx_on_evicted,
};

static inline void fx_on_tick(void *ctx)
{
	struct fx_node *n = ctx;

	pd_ctrl_tick(n->ctrl, pd_now_ns());
}

/* Mailbox: run the main thread's command here, on the node thread. */
static inline void fx_on_cmd(void *ctx, uint32_t events)
{
	struct fx_node *n = ctx;
	fx_cmd_fn *fn;
	uint64_t v;
	int rc;

	(void)events;
	if (read(n->cmd_fd, &v, sizeof(v)) < 0)
		return;
	pthread_mutex_lock(&n->mu);
	fn = n->cmd;
	pthread_mutex_unlock(&n->mu);
	if (!fn)
		return;
	rc = fn(n, n->arg);
	pthread_mutex_lock(&n->mu);
	n->cmd = NULL;
	n->rc = rc;
	n->done = 1;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
}

static inline void fx_started(struct fx_node *n, int rc)
{
	pthread_mutex_lock(&n->mu);
	n->create_rc = rc;
	n->started = 1;
	pthread_cond_broadcast(&n->cv);
	pthread_mutex_unlock(&n->mu);
}

static inline int fx_setup_loop(struct fx_node *n)
{
	uint64_t tick = n->o.heartbeat_ns / 5;
	struct pd_loop_opts lo = { .tick_ns = tick < 5 * PD_NS_PER_MS ? 5 * PD_NS_PER_MS : tick,
				   .on_tick = fx_on_tick, .ctx = n };
	int rc = pd_loop_create(&lo, &n->loop);

	if (rc < 0)
		return rc;
	n->cmd_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (n->cmd_fd < 0)
		return -errno;
	return pd_loop_add(n->loop, n->cmd_fd, EPOLLIN, fx_on_cmd, n);
}

static inline void *fx_thread(void *arg)
{
	struct fx_node *n = arg;
	int rc = fx_setup_loop(n);

	n->o.loop = n->loop;
	if (rc == 0)
		rc = pd_ctrl_create(&n->o, &n->ctrl);
	if (rc == 0)
		snprintf(n->endpoint, sizeof(n->endpoint), "%s", pd_ctrl_endpoint(n->ctrl));
	fx_started(n, rc);
	if (rc == 0)
		(void)pd_loop_run(n->loop);
	pd_ctrl_destroy(n->ctrl);
	n->ctrl = NULL;
	if (n->cmd_fd >= 0)
		close(n->cmd_fd);
	pd_loop_destroy(n->loop);
	return NULL;
}

static inline void fx_wait_locked(struct fx_node *n, const int *flag, uint64_t deadline)
{
	struct timespec ts = pd_ns_to_ts(deadline);

	while (!*flag && pd_now_ns() < deadline)
		(void)pthread_cond_timedwait(&n->cv, &n->mu, &ts);
}

struct fx_node_cfg {
	const char *name;
	const char *bind;      /* NULL: tcp://127.0.0.1:0 */
	const char *proxy;
	uint64_t epoch;
	uint32_t hb_ms;        /* 0: 50 */
	uint32_t queue_max;
	uint32_t sndhwm;
	uint32_t max_peers;    /* 0: the default */
	uint32_t evict_ms;     /* 0: never evict */
	const struct pd_ctrl_keys *keys; /* CURVE; NULL: none */
	const struct pd_ctrl_ops *ops;   /* NULL: fx_ops (ctx is the node either way) */
};

/* Start a node; NULL on failure (create_rc says why, in *rc). */
static inline struct fx_node *fx_node_start(const struct fx_node_cfg *cfg, int *rc)
{
	struct fx_node *n = calloc(1, sizeof(*n));
	pthread_condattr_t ca;

	assert_non_null(n);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&n->cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&n->mu, NULL);
	n->cmd_fd = -1;
	snprintf(n->name, sizeof(n->name), "%s", cfg->name);
	snprintf(n->bind, sizeof(n->bind), "%s", cfg->bind ? cfg->bind : "tcp://127.0.0.1:0");
	snprintf(n->proxy, sizeof(n->proxy), "%s", cfg->proxy ? cfg->proxy : "");
	n->o = (struct pd_ctrl_opts){
		.ops = cfg->ops ? cfg->ops : &fx_ops, .ctx = n, .bind = n->bind, .proxy = n->proxy, .name = n->name,
		.epoch = cfg->epoch ? cfg->epoch : 1, .slot_size = 65536, .recv_slots = 64,
		.nxports = 1, .xport = { "tcp" }, .addr = { "127.0.0.1:9" },
		.heartbeat_ns = (cfg->hb_ms ? cfg->hb_ms : 50) * PD_NS_PER_MS,
		.queue_max = cfg->queue_max, .sndhwm = cfg->sndhwm,
		.max_peers = cfg->max_peers, .evict_ns = cfg->evict_ms * PD_NS_PER_MS,
		.keys = cfg->keys,
	};
	assert_int_equal(pthread_create(&n->th, NULL, fx_thread, n), 0);
	pthread_mutex_lock(&n->mu);
	fx_wait_locked(n, &n->started, pd_deadline_ms(FX_CALL_MS));
	*rc = n->started ? n->create_rc : -ETIMEDOUT;
	pthread_mutex_unlock(&n->mu);
	if (*rc == 0)
		return n;
	assert_int_equal(pthread_join(n->th, NULL), 0);
	free(n);
	return NULL;
}

/* Run fn(n, arg) on the node's thread; its return value. */
static inline int fx_call(struct fx_node *n, fx_cmd_fn *fn, void *arg)
{
	uint64_t one = 1;
	int rc;

	pthread_mutex_lock(&n->mu);
	n->cmd = fn;
	n->arg = arg;
	n->done = 0;
	pthread_mutex_unlock(&n->mu);
	assert_int_equal(write(n->cmd_fd, &one, sizeof(one)), sizeof(one));
	pthread_mutex_lock(&n->mu);
	fx_wait_locked(n, &n->done, pd_deadline_ms(FX_CALL_MS));
	rc = n->done ? n->rc : -ETIMEDOUT;
	pthread_mutex_unlock(&n->mu);
	if (rc == -ETIMEDOUT && !n->done)
		fail_msg("node %s did not answer a command", n->name);
	return rc;
}

static inline int fx_cmd_stop(struct fx_node *n, void *arg)
{
	(void)arg;
	pd_loop_stop(n->loop);
	return 0;
}

/* Stop the node: its ctrl is destroyed on its thread. */
static inline void fx_node_stop(struct fx_node *n)
{
	if (!n)
		return;
	(void)fx_call(n, fx_cmd_stop, NULL);
	assert_int_equal(pthread_join(n->th, NULL), 0);
	pthread_cond_destroy(&n->cv);
	pthread_mutex_destroy(&n->mu);
	free(n);
}

/* Which events to count: 0 fields match anything. */
struct fx_match {
	uint32_t kind, peer, type;
	int err;
};

static inline int fx_is(const struct fx_ev *e, const struct fx_match *m)
{
	return e->kind == m->kind && (!m->peer || e->peer == m->peer) &&
	       (!m->type || e->type == m->type) && (!m->err || e->err == m->err);
}

static inline uint32_t fx_count_locked(const struct fx_node *n, const struct fx_match *m)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < n->nev; i++)
		k += (uint32_t)fx_is(&n->ev[i], m);
	return k;
}

static inline uint32_t fx_count(struct fx_node *n, struct fx_match m)
{
	uint32_t k;

	pthread_mutex_lock(&n->mu);
	k = fx_count_locked(n, &m);
	pthread_mutex_unlock(&n->mu);
	return k;
}

/* Wait (at most ms) until `want` events match; the count reached. */
static inline uint32_t fx_wait(struct fx_node *n, struct fx_match m, uint32_t want, uint32_t ms)
{
	uint64_t deadline = pd_deadline_ms(ms);
	struct timespec ts = pd_ns_to_ts(deadline);
	uint32_t k;

	pthread_mutex_lock(&n->mu);
	while ((k = fx_count_locked(n, &m)) < want && pd_now_ns() < deadline)
		(void)pthread_cond_timedwait(&n->cv, &n->mu, &ts);
	pthread_mutex_unlock(&n->mu);
	return k;
}

/* The i-th event (from 0) matching m; fails the test when there is none. */
static inline struct fx_ev fx_nth(struct fx_node *n, struct fx_match m, uint32_t i)
{
	struct fx_ev e = { 0 };
	int found = 0;

	pthread_mutex_lock(&n->mu);
	for (uint32_t j = 0; j < n->nev && !found; j++) {
		if (fx_is(&n->ev[j], &m) && i-- == 0) {
			e = n->ev[j];
			found = 1;
		}
	}
	pthread_mutex_unlock(&n->mu);
	if (!found)
		fail_msg("node %s: no such event", n->name);
	return e;
}

/* ---- commands ------------------------------------------------------------ */

struct fx_peer_arg {
	const char *ep;
	uint32_t id;
};

static inline int fx_cmd_peer(struct fx_node *n, void *arg)
{
	struct fx_peer_arg *a = arg;

	return pd_ctrl_peer(n->ctrl, a->ep, &a->id);
}

/* pd_ctrl_peer on the node; asserts success; the id. */
static inline uint32_t fx_peer(struct fx_node *n, const char *ep)
{
	struct fx_peer_arg a = { .ep = ep };

	assert_int_equal(fx_call(n, fx_cmd_peer, &a), 0);
	assert_true(a.id >= 1);
	return a.id;
}

struct fx_send_arg {
	uint32_t peer;
	uint32_t n;
	const struct pd_msg *m;  /* n messages */
	int rc[8];
};

static inline int fx_cmd_send(struct fx_node *n, void *arg)
{
	struct fx_send_arg *a = arg;

	for (uint32_t i = 0; i < a->n; i++)
		a->rc[i] = pd_ctrl_send(n->ctrl, a->peer, &a->m[i]);
	return a->rc[0];
}

static inline int fx_send(struct fx_node *n, uint32_t peer, const struct pd_msg *m)
{
	struct fx_send_arg a = { .peer = peer, .n = 1, .m = m };

	return fx_call(n, fx_cmd_send, &a);
}

static inline int fx_cmd_stats(struct fx_node *n, void *arg)
{
	pd_ctrl_stats(n->ctrl, arg);
	return 0;
}

static inline struct pd_ctrl_stats fx_stats(struct fx_node *n)
{
	struct pd_ctrl_stats st;

	memset(&st, 0xff, sizeof(st));
	assert_int_equal(fx_call(n, fx_cmd_stats, &st), 0);
	return st;
}

struct fx_info_arg {
	uint32_t peer;
	struct pd_ctrl_peer_info info;
	char name[64];
};

static inline int fx_cmd_info(struct fx_node *n, void *arg)
{
	struct fx_info_arg *a = arg;
	int rc = pd_ctrl_peer_info(n->ctrl, a->peer, &a->info);

	if (rc == 0 && a->info.hello)
		fx_copy_name(a->name, sizeof(a->name), &a->info.hello->name);
	a->info.hello = NULL;  /* valid on the node thread only */
	return rc;
}

/* ---- messages --------------------------------------------------------------- */

static const struct pd_bytes fx_key = { (const uint8_t *)"key-0", 5 };

static inline struct pd_msg fx_alloc_req(uint64_t seq, const char *req_id)
{
	struct pd_msg m = { .type = PD_MSG_ALLOC_REQ };

	m.u.alloc_req = (struct pd_msg_alloc_req){
		.seq = seq, .has_seq = 1,
		.req_id = { (const uint8_t *)req_id, (uint32_t)strlen(req_id) },
		.nkeys = 1, .keys = &fx_key, .total_chunks = 1, .world_size = 1,
		.is_last_batch = 1,
	};
	return m;
}

static const int32_t fx_remote[1] = { 3 };

static inline struct pd_msg fx_alloc_resp(uint64_t seq)
{
	struct pd_msg m = { .type = PD_MSG_ALLOC_RESP };

	m.u.alloc_resp = (struct pd_msg_alloc_resp){ .seq = seq, .has_seq = 1, .n = 1,
						     .remote_indexes = fx_remote };
	return m;
}

/* ---- a raw ZeroMQ DEALER (main thread), to send what pd_ctrl never would --- */

struct fx_raw {
	void *ctx;
	void *sock;
};

static inline void fx_raw_open(struct fx_raw *r, const char *endpoint)
{
	int zero = 0;

	r->ctx = zmq_ctx_new();
	assert_non_null(r->ctx);
	r->sock = zmq_socket(r->ctx, ZMQ_DEALER);
	assert_non_null(r->sock);
	assert_int_equal(zmq_setsockopt(r->sock, ZMQ_LINGER, &zero, sizeof(zero)), 0);
	assert_int_equal(zmq_connect(r->sock, endpoint), 0);
}

static inline void fx_raw_close(struct fx_raw *r)
{
	assert_int_equal(zmq_close(r->sock), 0);
	assert_int_equal(zmq_ctx_term(r->ctx), 0);
}

/* Send frames (nframes of them, given as pointer/length pairs). */
static inline void fx_raw_frames(struct fx_raw *r, uint32_t nframes, const void *const *p,
				 const size_t *len)
{
	for (uint32_t i = 0; i < nframes; i++) {
		int more = i + 1 < nframes ? ZMQ_SNDMORE : 0;

		assert_int_equal(zmq_send(r->sock, p[i], len[i], more), (int)len[i]);
	}
}

/* ["", payload] */
static inline void fx_raw_send(struct fx_raw *r, const void *payload, size_t len)
{
	const void *p[2] = { "", payload };
	size_t l[2] = { 0, len };

	fx_raw_frames(r, 2, p, l);
}

static inline void fx_raw_send_msg(struct fx_raw *r, const struct pd_msg *m)
{
	struct pd_wire_buf b;

	pd_wire_buf_init(&b);
	assert_int_equal(pd_wire_encode(m, &b), 0);
	fx_raw_send(r, b.data, b.len);
	pd_wire_buf_fini(&b);
}

/* Receive the next ["", payload] that is not a Heartbeat within ms, decoded
 * into *m (borrowing from d). */
static inline void fx_raw_recv(struct fx_raw *r, struct pd_wire_dec *d, struct pd_msg *m,
			       uint32_t ms)
{
	uint64_t deadline = pd_deadline_ms(ms);
	static char buf[65536];

	do {
		zmq_pollitem_t it = { .socket = r->sock, .events = ZMQ_POLLIN };
		uint64_t now = pd_now_ns();
		long left = now < deadline ? (long)((deadline - now) / PD_NS_PER_MS) : 0;
		int n;

		assert_int_equal(zmq_poll(&it, 1, left), 1);
		assert_int_equal(zmq_recv(r->sock, buf, sizeof(buf), 0), 0);  /* delimiter */
		n = zmq_recv(r->sock, buf, sizeof(buf), 0);
		assert_true(n > 0 && n < (int)sizeof(buf));
		assert_int_equal(pd_wire_decode(d, buf, (size_t)n, m, NULL, 0), 0);
	} while (m->type == PD_MSG_HEARTBEAT);
}

#endif
