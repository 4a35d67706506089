/* SPDX-License-Identifier: MIT */
/*
 * TCP transport: the instance, its write pool and completion queue
 * (pd_cplq.h).
 * Peers and lanes are in pd_tcp_tx.c, the listener in pd_tcp_rx.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_tcp_int.h"
#include "pd_time.h"

void pd_tcp_opts_init(struct pd_tcp_opts *o)
{
	*o = (struct pd_tcp_opts){
		.lanes = 2,
		.max_peers = 16,
		.queue_depth = 1024,
		.window = 32,
		.max_frame = 64u << 20,
		.max_conns = 256,
		.connect_timeout_ms = 5000,
		.hello_timeout_ms = 2000,
		.max_pending = 64,
		.io_timeout_ms = 10000,
	};
}

static int in_range(uint32_t v, uint32_t lo, uint32_t hi)
{
	return v >= lo && v <= hi;
}

static int opts_valid(const struct pd_tcp_opts *o)
{
	const struct pd_tcp_ops *ops = o->ops;

	if (o->flags || !in_range(o->lanes, 1, PD_TCP_MAX_LANES) ||
	    !in_range(o->max_peers, 1, PD_TCP_MAX_PEERS) ||
	    !in_range(o->queue_depth, 1, PD_TCP_MAX_DEPTH) ||
	    !in_range(o->window, 1, PD_TCP_MAX_WINDOW) ||
	    !in_range(o->max_frame, 1, PD_TCP_MAX_FRAME_LIMIT) ||
	    !in_range(o->max_conns, 1, PD_TCP_MAX_CONNS) || o->connect_timeout_ms == 0 ||
	    o->io_timeout_ms == 0)
		return 0;
	return !ops || (ops->accept_peer && ops->claim && ops->landed);
}

/* One node per write a peer may have outstanding, plus its peer completion. */
static int pool_init(struct pd_tcp *t)
{
	uint64_t n = (uint64_t)t->o.max_peers * (t->o.queue_depth + 1u);

	t->nodes = calloc(n, sizeof(*t->nodes));
	if (!t->nodes)
		return -ENOMEM;
	t->nnodes = (uint32_t)n;
	for (uint32_t i = 0; i < t->nnodes; i++)
		pd_tcp_fifo_append(&t->cq.free, &t->nodes[i]);
	return 0;
}

/* The event fd: an epoll of the completion eventfd and, while the owner
 * waits for a direct frame's ACK, that lane's socket (pd_tcp_direct.c). */
static int ep_open(struct pd_tcp *t)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	int rc = t->ep = pd_sys_rc(epoll_create1(EPOLL_CLOEXEC));

	if (rc < 0)
		return rc;
	rc = pd_sys_rc(epoll_ctl(t->ep, EPOLL_CTL_ADD, t->cq.fd, &ev));
	if (rc < 0)
		(void)close(t->ep);
	return rc;
}

static int fds_open(struct pd_tcp *t)
{
	int rc;

	rc = t->stop_fd = pd_efd_create();
	if (rc < 0)
		return rc;
	rc = t->reap_fd = pd_efd_create();
	if (rc < 0)
		goto out_close_stop;
	rc = ep_open(t);
	if (rc < 0)
		goto out_close_reap;
	return 0;

out_close_reap:
	(void)close(t->reap_fd);
out_close_stop:
	(void)close(t->stop_fd);
	return rc;
}

static void fds_close(struct pd_tcp *t)
{
	(void)close(t->ep);
	(void)close(t->reap_fd);
	(void)close(t->stop_fd);
}

int pd_tcp_create(const struct pd_tcp_opts *o, struct pd_tcp **out)
{
	struct pd_tcp *t;
	int rc = -ENOMEM;

	if (!o || !out || !opts_valid(o))
		return -EINVAL;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->o = *o;
	if (!t->o.hello_timeout_ms)
		t->o.hello_timeout_ms = 2000;
	if (!t->o.max_pending)
		t->o.max_pending = 64;
	t->lfd = t->stop_fd = t->reap_fd = t->ep = -1;
	t->peers = calloc(o->max_peers, sizeof(*t->peers));
	if (!t->peers)
		goto out_free;
	rc = pd_cplq_init(&t->cq, &t->cq_lock);
	if (rc < 0)
		goto out_free_peers;
	rc = pool_init(t);
	if (rc < 0)
		goto out_fini_cq;
	rc = pd_pthread_rc(pthread_mutex_init(&t->cq_lock, NULL));
	if (rc < 0)
		goto out_free_nodes;
	rc = pd_pthread_rc(pthread_mutex_init(&t->conns_lock, NULL));
	if (rc < 0)
		goto out_destroy_lock;
	rc = fds_open(t);
	if (rc < 0)
		goto out_destroy_conns_lock;
	*out = t;
	return 0;

out_destroy_conns_lock:
	(void)pthread_mutex_destroy(&t->conns_lock);
out_destroy_lock:
	(void)pthread_mutex_destroy(&t->cq_lock);
out_free_nodes:
	free(t->nodes);
out_fini_cq:
	pd_cplq_fini(&t->cq);
out_free_peers:
	free(t->peers);
out_free:
	free(t);
	return rc;
}

void pd_tcp_stop(struct pd_tcp *t)
{
	if (!t || t->stopped)
		return;
	t->stopped = 1;
	pd_tcp_peers_stop(t);
	pd_tcp_rx_stop(t);
}

void pd_tcp_destroy(struct pd_tcp *t)
{
	if (!t)
		return;
	pd_tcp_stop(t);
	fds_close(t);
	pd_cplq_fini(&t->cq);
	(void)pthread_mutex_destroy(&t->cq_lock);
	(void)pthread_mutex_destroy(&t->conns_lock);
	free(t->nodes);
	free(t->peers);
	free(t);
}

/* ---- write pool and completion queue ----------------------------------------- */

int pd_tcp_pool_get(struct pd_tcp *t, uint32_t n, struct pd_cplq_fifo *out)
{
	int rc = -EAGAIN;

	pd_lock(&t->cq_lock);
	if (t->cq.free.n >= n) {
		for (uint32_t i = 0; i < n; i++)
			pd_cplq_fifo_append(out, pd_cplq_fifo_pop(&t->cq.free));
		rc = 0;
	}
	pd_unlock(&t->cq_lock);
	return rc;
}

void pd_tcp_pool_put(struct pd_tcp *t, struct pd_cplq_fifo *f)
{
	pd_lock(&t->cq_lock);
	pd_cplq_fifo_splice(&t->cq.free, f);
	pd_unlock(&t->cq_lock);
}

/* Queue completions (status and kind set). Counted under the lock: a
 * completion polled is counted, and a counted one can be polled. */
void pd_tcp_cq_push(struct pd_tcp *t, struct pd_cplq_fifo *f)
{
	uint64_t ok = 0, failed = 0, peer = 0;

	if (!f->n)
		return;
	for (const struct pd_cplq_node *n = f->head; n; n = n->next) {
		if (n->kind == PD_CPL_PEER)
			peer++;
		else if (n->status == 0)
			ok++;
		else
			failed++;
	}
	pd_lock(&t->cq_lock);
	pd_cplq_push_locked(&t->cq, f);
	PD_TCP_STAT_INC(t, writes_ok, ok);
	PD_TCP_STAT_INC(t, writes_failed, failed);
	PD_TCP_STAT_INC(t, peer_failures, peer);
	pd_unlock(&t->cq_lock);
}

int pd_tcp_poll(struct pd_tcp *t, struct pd_cpl *c, uint32_t max)
{
	if (!t)
		return -EINVAL;
	pd_tcp_direct_poll(t);
	return pd_cplq_poll(&t->cq, c, max);
}

int pd_tcp_event_fd(const struct pd_tcp *t)
{
	return t ? t->ep : -EINVAL;
}

int pd_tcp_port(const struct pd_tcp *t)
{
	int port;

	if (!t)
		return -EINVAL;
	port = atomic_load_explicit(&t->port, memory_order_relaxed);
	return port ? port : -ENOTCONN;
}

void pd_tcp_get_stats(const struct pd_tcp *t, struct pd_tcp_stats *out)
{
	if (!out)
		return;
	if (!t) {
		memset(out, 0, sizeof(*out));
		return;
	}
#define PD_TCP_STAT_COPY(n) out->n = pd_stat_get(&t->st.n);
	PD_TCP_STAT_FIELDS(PD_TCP_STAT_COPY)
#undef PD_TCP_STAT_COPY
}

/* At most one per-connection log line per second per instance; any thread. */
int pd_tcp_log_ok(struct pd_tcp *t)
{
	uint64_t now = pd_now_ns();
	uint64_t last = atomic_load_explicit(&t->log_last_ns, memory_order_relaxed);

	if (last && now - last < PD_NS_PER_S)
		return 0;
	return atomic_compare_exchange_strong_explicit(&t->log_last_ns, &last, now,
						       memory_order_relaxed,
						       memory_order_relaxed);
}
