/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport: the instance (device, protection domain, memory regions,
 * channels), its write pool and completion queue. The data path is in
 * pd_rdma_post.c, connections in pd_rdma_cm.c, the data thread in
 * pd_rdma_thr.c.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_rdma_int.h"

void pd_rdma_opts_init(struct pd_rdma_opts *o)
{
	*o = (struct pd_rdma_opts){
		.qps = 2,
		.max_peers = 16,
		.queue_depth = 1024,
		.sq_depth = 128,
		.max_inline = 64,
		.signal_interval = 16,
		.max_conns = 256,
		.connect_timeout_ms = 5000,
		.ack_timeout = 14,
	};
}

static int in_range(uint32_t v, uint32_t lo, uint32_t hi)
{
	return v >= lo && v <= hi;
}

static int opts_valid(const struct pd_rdma_opts *o)
{
	if (o->flags || (!o->dev && !o->addr) || (!o->recv_base && !o->send_base))
		return 0;
	if ((o->recv_base && !o->recv_len) || (o->send_base && !o->send_len))
		return 0;
	return in_range(o->qps, 1, PD_RDMA_MAX_QPS) &&
	       in_range(o->max_peers, 1, PD_RDMA_MAX_PEERS) &&
	       in_range(o->queue_depth, 1, PD_RDMA_MAX_DEPTH) &&
	       in_range(o->sq_depth, 2, PD_RDMA_MAX_SQ) &&
	       o->max_inline <= PD_RDMA_MAX_INLINE &&
	       in_range(o->signal_interval, 1, o->sq_depth) &&
	       in_range(o->max_conns, 1, PD_RDMA_MAX_CONNS) && o->connect_timeout_ms &&
	       in_range(o->ack_timeout, 1, 31);
}

/* ---- fifo, pool and completion queue ---------------------------------------------- */

/* One node per write a peer may have outstanding, plus its peer completion. */
static int pool_init(struct pd_rdma *r)
{
	uint64_t n = (uint64_t)r->o.max_peers * (r->o.queue_depth + 1u);

	r->nodes = calloc(n, sizeof(*r->nodes));
	if (!r->nodes)
		return -ENOMEM;
	r->nnodes = (uint32_t)n;
	return 0;
}

/* After pd_cplq_init(), which starts with empty lists. */
static void pool_fill(struct pd_rdma *r)
{
	for (uint32_t i = 0; i < r->nnodes; i++)
		pd_rdma_fifo_append(&r->cq.free, &r->nodes[i]);
}

int pd_rdma_pool_get(struct pd_rdma *r, uint32_t n, struct pd_cplq_fifo *out)
{
	int rc = -EAGAIN;

	pd_lock(&r->cq_lock);
	if (r->cq.free.n >= n) {
		for (uint32_t i = 0; i < n; i++)
			pd_cplq_fifo_append(out, pd_cplq_fifo_pop(&r->cq.free));
		rc = 0;
	}
	pd_unlock(&r->cq_lock);
	return rc;
}

void pd_rdma_pool_put(struct pd_rdma *r, struct pd_cplq_fifo *f)
{
	pd_lock(&r->cq_lock);
	pd_cplq_fifo_splice(&r->cq.free, f);
	pd_unlock(&r->cq_lock);
}

void pd_rdma_wake(struct pd_rdma *r)
{
	pd_efd_signal(r->wake_fd);
}

/* Queue completions (status and kind set); counted under the lock, so a
 * completion polled is counted. */
void pd_rdma_cq_push(struct pd_rdma *r, struct pd_cplq_fifo *f)
{
	uint64_t ok = 0, failed = 0, peer = 0, bytes = 0;

	if (!f->n)
		return;
	for (struct pd_cplq_node *c = f->head; c; c = c->next) {
		if (c->kind == PD_CPL_PEER) {
			peer++;
		} else if (c->status == 0) {
			ok++;
			bytes += pd_rdma_node_of(c)->x.len;
		} else {
			failed++;
		}
	}
	pd_lock(&r->cq_lock);
	pd_cplq_push_locked(&r->cq, f);
	PD_RDMA_STAT_INC(r, writes_ok, ok);
	PD_RDMA_STAT_INC(r, writes_failed, failed);
	PD_RDMA_STAT_INC(r, bytes_ok, bytes);
	PD_RDMA_STAT_INC(r, peer_failures, peer);
	pd_unlock(&r->cq_lock);
}

int pd_rdma_poll(struct pd_rdma *r, struct pd_cpl *c, uint32_t max)
{
	return r ? pd_cplq_poll(&r->cq, c, max) : -EINVAL;
}

/* ---- small helpers ----------------------------------------------------------------- */

int pd_rdma_addr_parse(const char *host, uint16_t port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons(port);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		return 0;
	}
	return -EINVAL;
}

struct pd_rdma_peer *pd_rdma_peer_find(const struct pd_rdma *r, uint32_t id, uint32_t *slot)
{
	for (uint32_t i = 0; i < r->o.max_peers; i++) {
		if (r->peers[i] && r->peers[i]->id == id) {
			if (slot)
				*slot = i;
			return r->peers[i];
		}
	}
	return NULL;
}

static int fd_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0)
		return -errno;
	return pd_sys_rc(fcntl(fd, F_SETFL, fl | O_NONBLOCK));
}

/* ---- device, PD, MRs ------------------------------------------------------------------ */

/* The device owning opts.addr: bind a throwaway id to it (no event). */
static int dev_by_addr(struct pd_rdma *r, struct ibv_context **out)
{
	struct rdma_cm_id *id;
	int rc;

	rc = r->v->create_id(r->cm, NULL, &id);
	if (rc < 0)
		return rc;
	rc = r->v->bind_addr(id, (struct sockaddr *)&r->src);
	if (rc == 0 && !id->verbs)
		rc = -ENODEV;
	if (rc == 0)
		*out = id->verbs;
	r->v->destroy_id(id);
	return rc == -EADDRNOTAVAIL ? -ENODEV : rc;
}

static int dev_open(struct pd_rdma *r, const char *dev)
{
	struct ibv_context *want = NULL;
	int n = 0, rc;

	rc = r->v->get_devices(&r->devs, &n);
	if (rc < 0)
		return rc;
	if (!dev) {
		rc = dev_by_addr(r, &want);
		if (rc < 0)
			return rc;
	}
	for (int i = 0; i < n && !r->ctx; i++) {
		const char *name = r->v->dev_name(r->devs[i]);

		if (dev ? name && !strcmp(name, dev) : r->devs[i] == want)
			r->ctx = r->devs[i];
	}
	if (!r->ctx)
		return -ENODEV;
	if (dev && r->has_src) { /* both given: they must agree */
		rc = dev_by_addr(r, &want);
		if (rc < 0 || want != r->ctx)
			return rc < 0 ? rc : -EXDEV;
	}
	(void)snprintf(r->dev, sizeof(r->dev), "%s", r->v->dev_name(r->ctx));
	return 0;
}

static int mrs_register(struct pd_rdma *r)
{
	int rc;

	if (r->o.recv_base) {
		rc = r->v->reg_mr(r->pd, r->o.recv_base, r->o.recv_len,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &r->recv_mr);
		if (rc < 0)
			return rc;
	}
	if (r->o.send_base) {
		/* Only ever the source of our writes: local read access, which
		 * every MR has. The cast drops const for the verbs prototype;
		 * nothing writes through it. */
		rc = r->v->reg_mr(r->pd, (void *)(uintptr_t)r->o.send_base, r->o.send_len, 0,
				  &r->send_mr);
		if (rc < 0) {
			if (r->recv_mr)
				r->v->dereg_mr(r->recv_mr);
			r->recv_mr = NULL;
			return rc;
		}
	}
	return 0;
}

static void mrs_deregister(struct pd_rdma *r)
{
	if (r->send_mr)
		r->v->dereg_mr(r->send_mr);
	if (r->recv_mr)
		r->v->dereg_mr(r->recv_mr);
	r->send_mr = r->recv_mr = NULL;
}

/* Channels the data thread sleeps on: all non-blocking. */
static int channels_open(struct pd_rdma *r)
{
	int rc;

	rc = r->v->create_comp_channel(r->ctx, &r->comp);
	if (rc < 0)
		return rc;
	rc = fd_nonblock(r->comp->fd);
	if (rc == 0)
		rc = fd_nonblock(r->ctx->async_fd);
	if (rc < 0) {
		r->v->destroy_comp_channel(r->comp);
		r->comp = NULL;
	}
	return rc;
}

/* Everything verbs: cm channel, device, PD, MRs, completion channel. */
static int verbs_open(struct pd_rdma *r, const char *dev)
{
	int rc;

	rc = r->v->create_event_channel(&r->cm);
	if (rc < 0)
		return rc;
	rc = fd_nonblock(r->cm->fd);
	if (rc < 0)
		goto out_destroy_cm;
	rc = dev_open(r, dev);
	if (rc < 0)
		goto out_free_devs;
	rc = r->v->alloc_pd(r->ctx, &r->pd);
	if (rc < 0)
		goto out_free_devs;
	rc = mrs_register(r);
	if (rc < 0)
		goto out_dealloc_pd;
	rc = channels_open(r);
	if (rc < 0)
		goto out_dereg;
	return 0;

out_dereg:
	mrs_deregister(r);
out_dealloc_pd:
	r->v->dealloc_pd(r->pd);
out_free_devs:
	if (r->devs)
		r->v->free_devices(r->devs);
out_destroy_cm:
	r->v->destroy_event_channel(r->cm);
	return rc;
}

static void verbs_close(struct pd_rdma *r)
{
	r->v->destroy_comp_channel(r->comp);
	mrs_deregister(r);
	r->v->dealloc_pd(r->pd);
	r->v->free_devices(r->devs);
	r->v->destroy_event_channel(r->cm);
}

/* ---- create / destroy ------------------------------------------------------------------ */

static int fds_open(struct pd_rdma *r)
{
	int rc = pd_cplq_init(&r->cq, &r->cq_lock);

	if (rc < 0)
		return rc;
	pool_fill(r);
	r->wake_fd = pd_efd_create();
	if (r->wake_fd < 0) {
		rc = r->wake_fd;
		pd_cplq_fini(&r->cq);
	}
	return rc;
}

static int locks_init(struct pd_rdma *r)
{
	int rc = pd_pthread_rc(pthread_mutex_init(&r->lock, NULL));

	if (rc < 0)
		return rc;
	rc = pd_pthread_rc(pthread_mutex_init(&r->cq_lock, NULL));
	if (rc < 0)
		(void)pthread_mutex_destroy(&r->lock);
	return rc;
}

static void locks_destroy(struct pd_rdma *r)
{
	(void)pthread_mutex_destroy(&r->cq_lock);
	(void)pthread_mutex_destroy(&r->lock);
}

static int instance_alloc(const struct pd_rdma_opts *o, const struct pd_rdma_verbs *v,
			  struct pd_rdma **out)
{
	struct pd_rdma *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->o = *o;
	r->o.dev = r->o.addr = NULL; /* borrowed for the call only */
	r->v = v;
	r->wake_fd = -1;
	r->listen_ctx.type = PD_RDMA_CTX_LISTEN;
	if (o->addr && pd_rdma_addr_parse(o->addr, 0, &r->src) < 0) {
		free(r);
		return -EINVAL;
	}
	r->has_src = o->addr != NULL;
	r->peers = calloc(o->max_peers, sizeof(*r->peers));
	if (!r->peers) {
		free(r);
		return -ENOMEM;
	}
	*out = r;
	return 0;
}

int pd_rdma_create_verbs(const struct pd_rdma_opts *o, const struct pd_rdma_verbs *v,
			 struct pd_rdma **out)
{
	struct pd_rdma *r;
	int rc;

	if (!o || !v || !out || !opts_valid(o))
		return -EINVAL;
	rc = instance_alloc(o, v, &r);
	if (rc < 0)
		return rc;
	rc = pool_init(r);
	if (rc < 0)
		goto out_free;
	rc = locks_init(r);
	if (rc < 0)
		goto out_free_nodes;
	rc = fds_open(r);
	if (rc < 0)
		goto out_destroy_locks;
	rc = verbs_open(r, o->dev);
	if (rc < 0)
		goto out_close_fds;
	rc = pd_rdma_thread_start(r);
	if (rc < 0)
		goto out_close_verbs;
	PD_LOG(INFO, rdma, "device %s: recv arena %llu bytes (rkey 0x%x), send arena %llu bytes",
	       r->dev, (unsigned long long)o->recv_len, r->recv_mr ? r->recv_mr->rkey : 0,
	       (unsigned long long)o->send_len);
	*out = r;
	return 0;

out_close_verbs:
	verbs_close(r);
out_close_fds:
	(void)close(r->wake_fd);
	pd_cplq_fini(&r->cq);
out_destroy_locks:
	locks_destroy(r);
out_free_nodes:
	free(r->nodes);
out_free:
	free(r->peers);
	free(r);
	return rc;
}

int pd_rdma_create(const struct pd_rdma_opts *o, struct pd_rdma **out)
{
	return pd_rdma_create_verbs(o, &pd_rdma_verbs_real, out);
}

static void listener_close(struct pd_rdma *r)
{
	if (r->listen_id)
		r->v->destroy_id(r->listen_id);
	r->listen_id = NULL;
	atomic_store_explicit(&r->port, 0, memory_order_relaxed);
}

void pd_rdma_stop(struct pd_rdma *r)
{
	if (!r || r->stopped)
		return;
	r->stopped = 1;
	pd_rdma_peers_abort(r);
	pd_rdma_thread_stop(r);
	/* The data thread is gone: nothing else touches the cm side now. */
	pd_rdma_conns_close(r);
	listener_close(r);
	if (r->rx_cq)
		r->v->destroy_cq(r->rx_cq);
	r->rx_cq = NULL;
}

void pd_rdma_destroy(struct pd_rdma *r)
{
	if (!r)
		return;
	pd_rdma_stop(r);
	verbs_close(r);
	(void)close(r->wake_fd);
	pd_cplq_fini(&r->cq);
	locks_destroy(r);
	free(r->nodes);
	free(r->peers);
	free(r);
}

/* ---- accessors ------------------------------------------------------------------------- */

int pd_rdma_event_fd(const struct pd_rdma *r)
{
	return r ? r->cq.fd : -EINVAL;
}

int pd_rdma_port(const struct pd_rdma *r)
{
	int port;

	if (!r)
		return -EINVAL;
	port = atomic_load_explicit(&r->port, memory_order_relaxed);
	return port ? port : -ENOTCONN;
}

int pd_rdma_local_info(const struct pd_rdma *r, struct pd_rdma_local *out)
{
	if (!r || !out)
		return -EINVAL;
	*out = (struct pd_rdma_local){
		.base = r->recv_mr ? (uint64_t)(uintptr_t)r->o.recv_base : 0,
		.len = r->recv_mr ? r->o.recv_len : 0,
		.rkey = r->recv_mr ? r->recv_mr->rkey : 0,
	};
	memcpy(out->dev, r->dev, sizeof(out->dev));
	return 0;
}

void pd_rdma_get_stats(const struct pd_rdma *r, struct pd_rdma_stats *out)
{
	if (!out)
		return;
	if (!r) {
		memset(out, 0, sizeof(*out));
		return;
	}
#define PD_RDMA_STAT_COPY(n) out->n = pd_stat_get(&r->st.n);
	PD_RDMA_STAT_FIELDS(PD_RDMA_STAT_COPY)
#undef PD_RDMA_STAT_COPY
}
