/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_RDMA_FAKE_CM_H
#define PD_TESTS_UNIT_RDMA_FAKE_CM_H

/*
 * The fake's rdma_cm (the model is described in rdma_fake.h): event
 * channels, ids, address and route resolution, connect / accept / reject,
 * and what a test calls to play the peer (fk_inject_conn_request,
 * fk_inject_cm). Then the whole table (fk_verbs) and the per-test
 * fk_reset() / fk_all_freed().
 */
#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_rdma_int.h"
#include "rdma_fake.h"
#include "rdma_fake_qp.h"

/* ---- rdma_cm ------------------------------------------------------------------------------- */

struct fk_cmev {
	struct rdma_cm_event ev;       /* first */
	uint8_t priv[64];
};

struct fk_cmch {
	struct rdma_event_channel ch;  /* first */
	struct fk_evq q;
};

static inline int fk_create_event_channel(struct rdma_event_channel **out)
{
	struct fk_cmch *c = calloc(1, sizeof(*c));

	if (!c || fkq_init(&c->q) < 0) {
		free(c);
		return -ENOMEM;
	}
	c->ch.fd = c->q.fd;
	fk_lock();
	fk.live_cmch++;
	fk_unlock();
	*out = &c->ch;
	return 0;
}

static inline void fk_free_ev(void *it)
{
	free(it);
}

static inline int fk_any(void *it, const void *arg)
{
	(void)it;
	(void)arg;
	return 1;
}

static inline void fk_destroy_event_channel(struct rdma_event_channel *ch)
{
	struct fk_cmch *c = (struct fk_cmch *)ch;

	fk_lock();
	fkq_filter(&c->q, fk_any, NULL, fk_free_ev);
	fk.live_cmch--;
	fk_unlock();
	(void)close(c->q.fd);
	free(c);
}

/* fk.lock held */
static inline struct fk_cmev *fk_cm_push(struct rdma_cm_id *id, enum rdma_cm_event_type t,
					 int status, const void *priv, uint8_t len)
{
	struct fk_cmev *e = calloc(1, sizeof(*e));

	if (!e)
		abort();
	e->ev.id = id;
	e->ev.event = t;
	e->ev.status = status;
	if (priv && len) {
		memcpy(e->priv, priv, len < sizeof(e->priv) ? len : sizeof(e->priv));
		e->ev.param.conn.private_data = e->priv;
		e->ev.param.conn.private_data_len = len;
	}
	fkq_push(&((struct fk_cmch *)id->channel)->q, e);
	return e;
}

static inline int fk_create_id(struct rdma_event_channel *ch, void *ctx, struct rdma_cm_id **out)
{
	struct rdma_cm_id *id = calloc(1, sizeof(*id));

	if (!id)
		return -ENOMEM;
	id->channel = ch;
	id->context = ctx;
	id->ps = RDMA_PS_TCP;
	fk_lock();
	fk.live_id++;
	fk_unlock();
	*out = id;
	return 0;
}

static inline int fk_ev_of(void *it, const void *arg)
{
	return ((struct fk_cmev *)it)->ev.id == arg;
}

static inline void fk_destroy_id(struct rdma_cm_id *id)
{
	fk_lock();
	fkq_filter(&((struct fk_cmch *)id->channel)->q, fk_ev_of, id, fk_free_ev);
	fk.live_id--;
	fk_unlock();
	free(id);
}

static inline struct ibv_context *fk_ctx_of(const struct sockaddr *a, int *none)
{
	const struct sockaddr_in *a4 = (const struct sockaddr_in *)a;
	uint32_t ip = a->sa_family == AF_INET ? ntohl(a4->sin_addr.s_addr) : 0;

	*none = ip == 0xc0000201u; /* 192.0.2.1 */
	return ip == 0x0a000002u ? &fk.ctx[1] : &fk.ctx[0];
}

static inline int fk_bind_addr(struct rdma_cm_id *id, struct sockaddr *a)
{
	struct sockaddr_in *src = (struct sockaddr_in *)&id->route.addr.src_addr;
	int none = 0;
	struct ibv_context *ctx = fk_ctx_of(a, &none);

	if (none)
		return -EADDRNOTAVAIL;
	memcpy(src, a, a->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) :
		  sizeof(struct sockaddr_in));
	if (a->sa_family == AF_INET && !src->sin_port)
		src->sin_port = htons(18515);
	id->verbs = ctx;
	return 0;
}

static inline int fk_listen(struct rdma_cm_id *id, int backlog)
{
	(void)id;
	(void)backlog;
	return 0;
}

static inline int fk_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
				  int timeout_ms)
{
	(void)src;
	(void)dst;
	(void)timeout_ms;
	fk_lock();
	id->verbs = fk.route_dev1 ? &fk.ctx[1] : &fk.ctx[0];
	if (fk.addr_error)
		(void)fk_cm_push(id, RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH, NULL, 0);
	else
		(void)fk_cm_push(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	fk_unlock();
	return 0;
}

static inline int fk_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	(void)timeout_ms;
	fk_lock();
	(void)fk_cm_push(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	fk_unlock();
	return 0;
}

static inline int fk_set_ack_timeout(struct rdma_cm_id *id, uint8_t timeout)
{
	(void)id;
	fk_lock();
	fk.ack_timeout = timeout;
	fk_unlock();
	return 0;
}

static inline int fk_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	uint8_t rej[PD_RDMA_CM_REJ_LEN] = { 0 };

	fk_lock();
	fk.connects++;
	fk.last_req_len = p->private_data_len;
	memcpy(fk.last_req, p->private_data,
	       p->private_data_len < sizeof(fk.last_req) ? p->private_data_len : sizeof(fk.last_req));
	if (fk.reject_status) {
		uint32_t v[3] = { htole32(PD_RDMA_CM_MAGIC), htole32(PD_RDMA_CM_VERSION),
				  htole32((uint32_t)fk.reject_status) };

		memcpy(rej, v, sizeof(rej));
		(void)fk_cm_push(id, RDMA_CM_EVENT_REJECTED, 28, rej, sizeof(rej));
	} else if (fk.reject_raw) {
		(void)fk_cm_push(id, RDMA_CM_EVENT_REJECTED, 8, NULL, 0);
	} else if (!fk.no_establish) {
		(void)fk_cm_push(id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
	}
	fk_unlock();
	return 0;
}

static inline int fk_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	(void)p;
	fk_lock();
	fk.accepts++;
	(void)fk_cm_push(id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
	fk_unlock();
	return 0;
}

static inline int fk_reject(struct rdma_cm_id *id, const void *priv, uint8_t len)
{
	int32_t st = 0;

	(void)id;
	if (priv && len >= PD_RDMA_CM_REJ_LEN)
		memcpy(&st, (const uint8_t *)priv + 8, sizeof(st));
	fk_lock();
	fk.rejects++;
	fk.last_reject = (int)le32toh((uint32_t)st);
	fk_unlock();
	return 0;
}

static inline int fk_disconnect(struct rdma_cm_id *id)
{
	(void)id;
	return 0;
}

static inline int fk_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **ev)
{
	struct fk_cmev *e;

	int rc = 0;

	fk_lock();
	if (fk.cm_get_err && ((struct fk_cmch *)ch)->q.n) {
		rc = fk.cm_get_err; /* the event stays queued */
		fk.cm_get_err = 0;
		e = NULL;
	} else {
		e = fkq_pop(&((struct fk_cmch *)ch)->q);
	}
	fk_unlock();
	if (rc < 0)
		return rc;
	if (!e)
		return -EAGAIN;
	*ev = &e->ev;
	return 0;
}

static inline void fk_ack_cm_event(struct rdma_cm_event *ev)
{
	free(ev);
}

/* A peer asks to connect to @listen_id with this private data; returns
 * the new id (the transport owns it from here). */
static inline struct rdma_cm_id *fk_inject_conn_request(struct rdma_cm_id *listen_id,
							const void *priv, uint8_t len)
{
	struct rdma_cm_id *id = NULL;

	if (fk_create_id(listen_id->channel, listen_id->context, &id) < 0)
		abort();
	id->verbs = listen_id->verbs ? listen_id->verbs : &fk.ctx[0];
	fk_lock();
	fk_cm_push(id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, priv, len)->ev.listen_id = listen_id;
	fk_unlock();
	return id;
}

static inline void fk_inject_cm(struct rdma_cm_id *id, enum rdma_cm_event_type t)
{
	fk_lock();
	(void)fk_cm_push(id, t, 0, NULL, 0);
	fk_unlock();
}

static const struct pd_rdma_verbs fk_verbs = {
	.get_devices = fk_get_devices,
	.free_devices = fk_free_devices,
	.dev_name = fk_dev_name,
	.alloc_pd = fk_alloc_pd,
	.dealloc_pd = fk_dealloc_pd,
	.reg_mr = fk_reg_mr,
	.dereg_mr = fk_dereg_mr,
	.create_comp_channel = fk_create_comp_channel,
	.destroy_comp_channel = fk_destroy_comp_channel,
	.create_cq = fk_create_cq,
	.destroy_cq = fk_destroy_cq,
	.req_notify_cq = fk_req_notify_cq,
	.get_cq_event = fk_get_cq_event,
	.ack_cq_events = fk_ack_cq_events,
	.poll_cq = fk_poll_cq,
	.post_send = fk_post_send,
	.get_async_event = fk_get_async_event,
	.ack_async_event = fk_ack_async_event,
	.create_event_channel = fk_create_event_channel,
	.destroy_event_channel = fk_destroy_event_channel,
	.create_id = fk_create_id,
	.destroy_id = fk_destroy_id,
	.bind_addr = fk_bind_addr,
	.listen = fk_listen,
	.resolve_addr = fk_resolve_addr,
	.resolve_route = fk_resolve_route,
	.set_ack_timeout = fk_set_ack_timeout,
	.create_qp = fk_create_qp,
	.destroy_qp = fk_destroy_qp,
	.connect = fk_connect,
	.accept = fk_accept,
	.reject = fk_reject,
	.disconnect = fk_disconnect,
	.get_cm_event = fk_get_cm_event,
	.ack_cm_event = fk_ack_cm_event,
};

/* Fresh state before each test (the previous instance is destroyed). */
static inline int fk_reset(void)
{
	for (int i = 0; i < 2; i++) {
		if (fk.async[i].fd > 0) {
			fkq_filter(&fk.async[i], fk_any, NULL, fk_free_ev);
			(void)close(fk.async[i].fd);
		}
	}
	memset(&fk, 0, sizeof(fk));
	if (pthread_mutex_init(&fk.lock, NULL) != 0)
		return -1;
	for (int i = 0; i < 2; i++) {
		if (fkq_init(&fk.async[i]) < 0)
			return -1;
		fk.ctx[i].async_fd = fk.async[i].fd;
		fk.devs[i] = &fk.ctx[i];
	}
	fk.max_inline = 64;
	return 0;
}

/* Every verbs object the transport made is gone. */
static inline int fk_all_freed(void)
{
	return !fk.live_pd && !fk.live_mr && !fk.live_chan && !fk.live_cq && !fk.live_qp &&
	       !fk.live_id && !fk.live_cmch && !fk.devs_held;
}

#endif
