/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport, connections: the sending side's peers (rdma_cm address
 * and route resolution, RC QPs, connect), the receiving side's listener and
 * accepted QPs, and the failure and teardown of a peer.
 *
 * Sending side, per QP of a peer, driven by rdma_cm events on the data
 * thread:
 *   pd_rdma_connect: rdma_create_id, rdma_resolve_addr  (owner)
 *   ADDR_RESOLVED  -> same device? ack timeout, rdma_resolve_route
 *   ROUTE_RESOLVED -> the peer's CQ (first QP), rdma_create_qp, rdma_connect
 *   ESTABLISHED    -> QP up; all up: post what is pending
 *   anything that ends the QP (errors, REJECTED, DISCONNECTED, ...) fails
 *   the peer, and so does the connect deadline.
 * Event handlers only record a failure; the data thread reaps failed peers
 * after it has acked every event (rdma_destroy_id waits for unacked ones).
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_err.h"
#include "pd_rdma_int.h"
#include "pd_time.h"

/* ---- private data ------------------------------------------------------------------------ */

static void put_le16(uint8_t *b, uint16_t v)
{
	v = htole16(v);
	memcpy(b, &v, sizeof(v));
}

static void put_le32(uint8_t *b, uint32_t v)
{
	v = htole32(v);
	memcpy(b, &v, sizeof(v));
}

static uint32_t get_le32(const uint8_t *b)
{
	uint32_t v;

	memcpy(&v, b, sizeof(v));
	return le32toh(v);
}

static uint16_t get_le16(const uint8_t *b)
{
	uint16_t v;

	memcpy(&v, b, sizeof(v));
	return le16toh(v);
}

static void req_encode(uint8_t b[PD_RDMA_CM_REQ_LEN], uint16_t qp, uint32_t nqps, uint64_t token)
{
	uint64_t t = htole64(token);

	put_le32(b, PD_RDMA_CM_MAGIC);
	put_le16(b + 4, PD_RDMA_CM_VERSION);
	put_le16(b + 6, qp);
	put_le32(b + 8, nqps);
	put_le32(b + 12, 0);
	memcpy(b + 16, &t, sizeof(t));
}

/* @return 0 and *token, or -EPROTO. Every length checked before a read. */
static int req_decode(const void *priv, uint32_t len, uint64_t *token)
{
	const uint8_t *b = priv;
	uint64_t t;

	if (!b || len < PD_RDMA_CM_REQ_LEN || get_le32(b) != PD_RDMA_CM_MAGIC ||
	    get_le16(b + 4) != PD_RDMA_CM_VERSION)
		return -EPROTO;
	memcpy(&t, b + 16, sizeof(t));
	*token = le64toh(t);
	return 0;
}

static void rej_encode(uint8_t b[PD_RDMA_CM_REJ_LEN], int status)
{
	put_le32(b, PD_RDMA_CM_MAGIC);
	put_le16(b + 4, PD_RDMA_CM_VERSION);
	put_le16(b + 6, 0);
	put_le32(b + 8, (uint32_t)status);
}

/* A reject's status, when it is ours and sane; else -ECONNREFUSED. */
static int rej_decode(const void *priv, uint32_t len)
{
	const uint8_t *b = priv;
	int32_t st;

	if (!b || len < PD_RDMA_CM_REJ_LEN || get_le32(b) != PD_RDMA_CM_MAGIC ||
	    get_le16(b + 4) != PD_RDMA_CM_VERSION)
		return -ECONNREFUSED;
	st = (int32_t)get_le32(b + 8);
	return st < 0 && st >= -4095 ? st : -ECONNREFUSED;
}

/* ---- peer failure and teardown ------------------------------------------------------------- */

void pd_rdma_peer_fail(struct pd_rdma *r, struct pd_rdma_peer *p, int err)
{
	int fresh, failed;

	pd_lock(&p->lock);
	fresh = pd_rdma_peer_fail_locked(p, err);
	failed = (int)p->failed; /* maybe already recorded by a WC, not reaped yet */
	err = p->err;
	pd_unlock(&p->lock);
	if (fresh)
		PD_LOG_RL(WARN, rdma, "peer %u failed: %s", p->id, strerror(-err));
	if (failed)
		atomic_store_explicit(&r->need_reap, 1, memory_order_release);
}

/* QPs first: once ibv_destroy_qp returns the device reads none of our
 * staging slots any more, and only then may their writes complete. */
static void peer_destroy_verbs(struct pd_rdma *r, struct pd_rdma_peer *p)
{
	for (uint32_t i = 0; i < p->nqps; i++) {
		struct pd_rdma_qp *q = &p->qp[i];

		if (q->qp) {
			if (q->connecting)
				(void)r->v->disconnect(q->id); /* DREQ: the receiver lets go */
			r->v->destroy_qp(q->id);
			q->qp = NULL;
		}
	}
	for (uint32_t i = 0; i < p->nqps; i++) {
		if (p->qp[i].id)
			r->v->destroy_id(p->qp[i].id);
		p->qp[i].id = NULL;
	}
	if (p->cq)
		r->v->destroy_cq(p->cq);
	p->cq = NULL;
}

void pd_rdma_peer_reap(struct pd_rdma *r, struct pd_rdma_peer *p)
{
	struct pd_cplq_fifo done = { 0 };

	if (p->reaped)
		return;
	p->reaped = 1;
	p->deadline_ns = 0;
	pd_lock(&p->lock);
	if (!p->err)
		p->err = -ECONNABORTED; /* requested end: no peer completion */
	pd_unlock(&p->lock);
	peer_destroy_verbs(r, p);
	pd_lock(&p->lock);
	pd_rdma_peer_collect(p, &done);
	pd_unlock(&p->lock);
	pd_rdma_cq_push(r, &done);
}

/* ---- sending side: events ------------------------------------------------------------------ */

/* The event's own errno when it carries one, else @dflt. */
static int ev_errno(const struct rdma_cm_event *ev, int dflt)
{
	return ev->status < 0 && ev->status >= -4095 ? ev->status : dflt;
}

static int on_addr_resolved(struct pd_rdma *r, struct pd_rdma_qp *q)
{
	int rc;

	if (q->id->verbs != r->ctx)
		return -EXDEV; /* the route leads to another device than our MRs' */
	rc = r->v->set_ack_timeout(q->id, (uint8_t)r->o.ack_timeout);
	if (rc < 0)
		PD_LOG_RL(WARN, rdma, "rdma_set_option(ACK_TIMEOUT): %d (default kept)", rc);
	return r->v->resolve_route(q->id, (int)r->o.connect_timeout_ms);
}

static int peer_cq_open(struct pd_rdma *r, struct pd_rdma_peer *p)
{
	int rc;

	if (p->cq)
		return 0;
	/* Room for a completion of every WR of every QP: errors complete
	 * unsignalled WRs too. */
	rc = r->v->create_cq(r->ctx, (int)(p->nqps * r->o.sq_depth), p, r->comp, &p->cq);
	if (rc < 0)
		return rc;
	return r->v->req_notify_cq(p->cq);
}

static int qp_open(struct pd_rdma *r, struct pd_rdma_qp *q)
{
	struct ibv_qp_init_attr a = {
		.qp_context = &q->hdr,
		.send_cq = q->p->cq,
		.recv_cq = q->p->cq,
		.cap = { .max_send_wr = r->o.sq_depth, .max_recv_wr = 1, .max_send_sge = 1,
			 .max_recv_sge = 1, .max_inline_data = r->o.max_inline },
		.qp_type = IBV_QPT_RC,
	};
	int rc = r->v->create_qp(q->id, r->pd, &a);

	if (rc < 0 && a.cap.max_inline_data) { /* the device may do no inline at all */
		a.cap.max_inline_data = 0;
		rc = r->v->create_qp(q->id, r->pd, &a);
	}
	if (rc < 0)
		return rc;
	q->qp = q->id->qp;
	pd_lock(&q->p->lock);
	q->inl = a.cap.max_inline_data < r->o.max_inline ? a.cap.max_inline_data : r->o.max_inline;
	pd_unlock(&q->p->lock);
	return 0;
}

static int on_route_resolved(struct pd_rdma *r, struct pd_rdma_qp *q)
{
	uint8_t priv[PD_RDMA_CM_REQ_LEN];
	struct rdma_conn_param cp = {
		.private_data = priv,
		.private_data_len = sizeof(priv),
		.responder_resources = 1,
		.initiator_depth = 1,
		/* 6, not 7: rxe treats a retry count of 7 as "retry
		 * forever", and a dead receiver would never be noticed. */
		.retry_count = 6,
		.rnr_retry_count = 7,
	};
	int rc;

	rc = peer_cq_open(r, q->p);
	if (rc == 0)
		rc = qp_open(r, q);
	if (rc < 0)
		return rc;
	req_encode(priv, (uint16_t)q->idx, q->p->nqps, q->p->rem.token);
	rc = r->v->connect(q->id, &cp);
	q->connecting = rc == 0;
	return rc;
}

static int on_established(struct pd_rdma *r, struct pd_rdma_qp *q)
{
	struct pd_rdma_peer *p = q->p;
	int rc = 0;

	pd_lock(&p->lock);
	if (!q->up) {
		q->up = 1;
		p->nup++;
	}
	if (p->nup == p->nqps) {
		p->deadline_ns = 0;
		PD_RDMA_STAT_INC(r, connects, 1);
		rc = pd_rdma_sched(p);
	}
	pd_unlock(&p->lock);
	return rc;
}

static int qp_event(struct pd_rdma *r, struct pd_rdma_qp *q, const struct rdma_cm_event *ev)
{
	switch (ev->event) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		return on_addr_resolved(r, q);
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		return on_route_resolved(r, q);
	case RDMA_CM_EVENT_ESTABLISHED:
		return on_established(r, q);
	case RDMA_CM_EVENT_REJECTED:
		return rej_decode(ev->param.conn.private_data, ev->param.conn.private_data_len);
	case RDMA_CM_EVENT_ADDR_ERROR:
		return ev_errno(ev, -EHOSTUNREACH);
	case RDMA_CM_EVENT_ROUTE_ERROR:
		return ev_errno(ev, -ENETUNREACH);
	case RDMA_CM_EVENT_UNREACHABLE:
		return ev_errno(ev, -EHOSTUNREACH);
	case RDMA_CM_EVENT_CONNECT_ERROR:
		return ev_errno(ev, -ECONNREFUSED);
	case RDMA_CM_EVENT_DISCONNECTED:
		return -ECONNRESET;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		return -ENODEV;
	default:
		return 0; /* TIMEWAIT_EXIT, ADDR_CHANGE, ... */
	}
}

/* ---- receiving side ----------------------------------------------------------------------- */

static int rx_cq_open(struct pd_rdma *r)
{
	if (r->rx_cq)
		return 0;
	/* Accepted QPs post nothing: a CQ is required, never armed. */
	return r->v->create_cq(r->ctx, 1, NULL, NULL, &r->rx_cq);
}

static int conn_open(struct pd_rdma *r, struct rdma_cm_id *id, uint32_t peer)
{
	struct ibv_qp_init_attr a = {
		.send_cq = r->rx_cq,
		.recv_cq = r->rx_cq,
		.cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1,
				      .rnr_retry_count = 7 };
	struct pd_rdma_conn *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	*c = (struct pd_rdma_conn){ .hdr.type = PD_RDMA_CTX_CONN, .id = id, .peer = peer };
	a.qp_context = &c->hdr;
	id->context = &c->hdr;
	rc = r->v->create_qp(id, r->pd, &a);
	if (rc < 0)
		goto out_free;
	c->qp = id->qp;
	rc = r->v->accept(id, &cp);
	if (rc < 0)
		goto out_destroy_qp;
	c->next = r->conns; /* under r->lock, as every CM event (pd_rdma_fence() walks it) */
	r->conns = c;
	r->nconns++;
	return 0;

out_destroy_qp:
	r->v->destroy_qp(id);
out_free:
	id->context = &r->listen_ctx;
	free(c);
	return rc;
}

static int conn_judge(struct pd_rdma *r, const struct rdma_cm_event *ev, uint32_t *peer)
{
	uint64_t token = 0;
	int rc;

	if (req_decode(ev->param.conn.private_data, ev->param.conn.private_data_len, &token) < 0)
		return -EPROTO;
	if (ev->id->verbs != r->ctx || !r->recv_mr)
		return -EXDEV;
	if (r->stopping)
		return -ESHUTDOWN;
	if (r->nconns >= r->o.max_conns)
		return -EBUSY;
	*peer = 0;
	if (!r->o.ops || !r->o.ops->accept_peer)
		return 0;
	rc = r->o.ops->accept_peer(r->o.ctx, token, peer);
	return rc < 0 && rc >= -4095 ? rc : rc ? -EACCES : 0;
}

static struct rdma_cm_id *on_connect_request(struct pd_rdma *r, struct rdma_cm_event *ev)
{
	uint8_t rej[PD_RDMA_CM_REJ_LEN];
	uint32_t peer = 0;
	int rc;

	rc = conn_judge(r, ev, &peer);
	if (rc == 0)
		rc = rx_cq_open(r);
	if (rc == 0)
		rc = conn_open(r, ev->id, peer);
	if (rc == 0)
		return NULL;
	PD_RDMA_STAT_INC(r, rejects, 1);
	PD_LOG_RL(WARN, rdma, "connect request refused: %s", strerror(-rc));
	rej_encode(rej, rc);
	(void)r->v->reject(ev->id, rej, sizeof(rej));
	return ev->id; /* ours to destroy, once the event is acked */
}

static void conn_unlink(struct pd_rdma *r, struct pd_rdma_conn *c)
{
	for (struct pd_rdma_conn **pp = &r->conns; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			r->nconns--;
			return;
		}
	}
}

static void conn_close(struct pd_rdma *r, struct pd_rdma_conn *c)
{
	if (c->qp)
		r->v->destroy_qp(c->id);
	c->qp = NULL;
	PD_RDMA_STAT_INC(r, conns_closed, 1);
}

static struct rdma_cm_id *conn_event(struct pd_rdma *r, struct pd_rdma_conn *c,
				     const struct rdma_cm_event *ev)
{
	struct rdma_cm_id *id = c->id;

	switch (ev->event) {
	case RDMA_CM_EVENT_ESTABLISHED:
		c->est = 1;
		PD_RDMA_STAT_INC(r, accepts, 1);
		return NULL;
	case RDMA_CM_EVENT_DISCONNECTED:
	case RDMA_CM_EVENT_CONNECT_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_REJECTED:
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		conn_close(r, c);
		conn_unlink(r, c);
		free(c);
		return id;
	default:
		return NULL;
	}
}

void pd_rdma_conns_close(struct pd_rdma *r)
{
	struct pd_rdma_conn *c;

	while ((c = r->conns)) {
		r->conns = c->next;
		conn_close(r, c);
		r->v->destroy_id(c->id);
		free(c);
	}
	r->nconns = 0;
}

int pd_rdma_fence(struct pd_rdma *r, int (*stale)(void *arg, uint32_t peer), void *arg)
{
	int n = 0;

	if (!r || !stale)
		return -EINVAL;
	pd_lock(&r->lock);
	for (struct pd_rdma_conn *c = r->conns; c; c = c->next) {
		if (c->qp && stale(arg, c->peer)) {
			r->v->destroy_qp(c->id); /* its writes fail at our NIC from now on */
			c->qp = NULL;
			n++;
		}
	}
	pd_unlock(&r->lock);
	PD_RDMA_STAT_INC(r, conns_fenced, (uint64_t)n);
	return n;
}

void pd_rdma_debug_kill_conns(struct pd_rdma *r)
{
	pd_lock(&r->lock);
	for (struct pd_rdma_conn *c = r->conns; c; c = c->next) {
		if (c->qp)
			r->v->destroy_qp(c->id);
		c->qp = NULL;
	}
	pd_unlock(&r->lock);
}

/* ---- dispatch ------------------------------------------------------------------------------ */

struct rdma_cm_id *pd_rdma_cm_event(struct pd_rdma *r, struct rdma_cm_event *ev)
{
	struct pd_rdma_ctx *c = ev->id ? ev->id->context : NULL;
	struct pd_rdma_qp *q;
	int rc;

	if (!c || !ev->id)
		return NULL;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST)
		return on_connect_request(r, ev);
	switch (c->type) {
	case PD_RDMA_CTX_QP:
		q = pd_container_of(c, struct pd_rdma_qp, hdr);
		rc = qp_event(r, q, ev);
		if (rc < 0)
			pd_rdma_peer_fail(r, q->p, rc);
		return NULL;
	case PD_RDMA_CTX_CONN:
		return conn_event(r, pd_container_of(c, struct pd_rdma_conn, hdr), ev);
	default:
		PD_LOG_RL(WARN, rdma, "listener event %s", rdma_event_str(ev->event));
		return NULL;
	}
}

/* ---- listen ------------------------------------------------------------------------------- */

static int listen_port(const struct rdma_cm_id *id)
{
	const struct sockaddr *sa = (const struct sockaddr *)&id->route.addr.src_addr;

	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return 0;
}

static int listen_open(struct pd_rdma *r, struct sockaddr_storage *ss)
{
	struct rdma_cm_id *id;
	int rc;

	rc = r->v->create_id(r->cm, &r->listen_ctx, &id);
	if (rc < 0)
		return rc;
	rc = r->v->bind_addr(id, (struct sockaddr *)ss);
	if (rc == 0 && id->verbs && id->verbs != r->ctx)
		rc = -EXDEV;
	if (rc == 0)
		rc = r->v->listen(id, 128);
	if (rc < 0) {
		r->v->destroy_id(id);
		return rc;
	}
	r->listen_id = id;
	atomic_store_explicit(&r->port, listen_port(id), memory_order_relaxed);
	return 0;
}

int pd_rdma_listen(struct pd_rdma *r, const char *host, uint16_t port)
{
	struct sockaddr_storage ss;
	int rc;

	if (!r || !host || !r->recv_mr || pd_rdma_addr_parse(host, port, &ss) < 0)
		return -EINVAL;
	if (r->stopped)
		return -ESHUTDOWN;
	pd_lock(&r->lock);
	rc = r->listen_id ? -EBUSY : listen_open(r, &ss);
	pd_unlock(&r->lock);
	if (rc == 0)
		PD_LOG(INFO, rdma, "listening on %s port %d (%s)", host, pd_rdma_port(r), r->dev);
	return rc;
}

/* ---- connect / disconnect ------------------------------------------------------------------- */

static int remote_valid(const struct pd_rdma_remote *rem)
{
	if (!rem->nslots || !rem->slot_size)
		return 0;
	/* the last slot's end must be addressable */
	return rem->slot_size <= (UINT64_MAX - rem->base) / rem->nslots;
}

static void peer_free(struct pd_rdma *r, struct pd_rdma_peer *p)
{
	struct pd_cplq_fifo f = { 0 };

	if (p->peer_cpl) {
		pd_rdma_fifo_append(&f, p->peer_cpl);
		pd_rdma_pool_put(r, &f);
	}
	for (uint32_t i = 0; i < p->nqps; i++) {
		free(p->qp[i].wr);
		free(p->qp[i].sge);
	}
	(void)pthread_cond_destroy(&p->drained);
	(void)pthread_mutex_destroy(&p->lock);
	free(p);
}

static int peer_sync_init(struct pd_rdma_peer *p)
{
	pthread_condattr_t ca;
	int rc;

	rc = pd_pthread_rc(pthread_condattr_init(&ca));
	if (rc < 0)
		return rc;
	rc = pd_pthread_rc(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
	if (rc == 0)
		rc = pd_pthread_rc(pthread_cond_init(&p->drained, &ca));
	(void)pthread_condattr_destroy(&ca);
	if (rc < 0)
		return rc;
	rc = pd_pthread_rc(pthread_mutex_init(&p->lock, NULL));
	if (rc < 0)
		(void)pthread_cond_destroy(&p->drained);
	return rc;
}

static int peer_alloc(struct pd_rdma *r, uint32_t id, const struct pd_rdma_remote *rem,
		      struct pd_rdma_peer **out)
{
	struct pd_cplq_fifo f = { 0 };
	struct pd_rdma_peer *p;
	int rc;

	p = calloc(1, sizeof(*p) + r->o.qps * sizeof(p->qp[0]));
	if (!p)
		return -ENOMEM;
	*p = (struct pd_rdma_peer){ .r = r, .id = id, .nqps = r->o.qps, .rem = *rem };
	rc = peer_sync_init(p);
	if (rc < 0) {
		free(p);
		return rc;
	}
	for (uint32_t i = 0; i < p->nqps; i++) {
		struct pd_rdma_qp *q = &p->qp[i];

		*q = (struct pd_rdma_qp){ .hdr.type = PD_RDMA_CTX_QP, .p = p, .idx = i };
		q->wr = calloc(r->o.sq_depth, sizeof(*q->wr));
		q->sge = calloc(r->o.sq_depth, sizeof(*q->sge));
		if (!q->wr || !q->sge)
			rc = -ENOMEM;
	}
	if (rc == 0)
		rc = pd_rdma_pool_get(r, 1, &f);
	p->peer_cpl = pd_rdma_node_of(f.head);
	if (p->peer_cpl)
		*p->peer_cpl = (struct pd_rdma_node){ .c = { .peer = id, .kind = PD_CPL_PEER } };
	if (rc < 0) {
		peer_free(r, p);
		return rc;
	}
	*out = p;
	return 0;
}

/* r->lock: one id per QP, address resolution started (events follow). */
static int peer_start(struct pd_rdma *r, struct pd_rdma_peer *p)
{
	struct sockaddr *src = r->has_src ? (struct sockaddr *)&r->src : NULL;
	int rc = 0;

	for (uint32_t i = 0; i < p->nqps && rc == 0; i++) {
		struct pd_rdma_qp *q = &p->qp[i];

		rc = r->v->create_id(r->cm, &q->hdr, &q->id);
		if (rc == 0)
			rc = r->v->resolve_addr(q->id, src, (struct sockaddr *)&p->dst,
						(int)r->o.connect_timeout_ms);
	}
	if (rc < 0) {
		for (uint32_t i = 0; i < p->nqps; i++) {
			if (p->qp[i].id)
				r->v->destroy_id(p->qp[i].id);
			p->qp[i].id = NULL;
		}
		return rc;
	}
	p->deadline_ns = pd_deadline_ms(r->o.connect_timeout_ms);
	return 0;
}

static int free_slot(const struct pd_rdma *r, uint32_t *slot)
{
	for (uint32_t i = 0; i < r->o.max_peers; i++) {
		if (!r->peers[i]) {
			*slot = i;
			return 0;
		}
	}
	return -ENOBUFS;
}

int pd_rdma_connect(struct pd_rdma *r, uint32_t peer, const char *host, uint16_t port,
		    const struct pd_rdma_remote *rem)
{
	struct sockaddr_storage dst;
	struct pd_rdma_peer *p = NULL;
	uint32_t slot = 0;
	int rc;

	if (!r || !host || !rem || !port || !r->send_mr || !remote_valid(rem) ||
	    pd_rdma_addr_parse(host, port, &dst) < 0)
		return -EINVAL;
	if (r->stopped)
		return -ESHUTDOWN;
	if (pd_rdma_peer_find(r, peer, NULL))
		return -EEXIST;
	rc = free_slot(r, &slot);
	if (rc == 0)
		rc = peer_alloc(r, peer, rem, &p);
	if (rc != 0 || !p)
		return rc ? rc : -ENOMEM;
	p->dst = dst;
	pd_lock(&r->lock);
	rc = peer_start(r, p);
	if (rc == 0)
		r->peers[slot] = p;
	pd_unlock(&r->lock);
	if (rc < 0) {
		peer_free(r, p);
		return rc;
	}
	pd_rdma_wake(r); /* its deadline bounds the data thread's sleep */
	return 0;
}

/* No new writes; the unposted ones end now, the posted ones may finish
 * (bounded by connect_timeout_ms). */
static void peer_drain(struct pd_rdma *r, struct pd_rdma_peer *p)
{
	struct pd_cplq_fifo done = { 0 };
	struct timespec ts = pd_ns_to_ts(pd_deadline_ms(r->o.connect_timeout_ms));
	int rc = 0;

	pd_lock(&p->lock);
	p->closing = 1;
	if (!p->err && p->pending.n) {
		struct pd_rdma_node *n;

		while ((n = pd_rdma_fifo_pop(&p->pending))) {
			n->c.status = -ECONNABORTED;
			n->c.kind = PD_CPL_WRITE;
			pd_rdma_fifo_append(&done, n);
			p->outstanding--;
		}
	}
	while (p->inflight && !p->err && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&p->drained, &p->lock, &ts);
	pd_unlock(&p->lock);
	pd_rdma_cq_push(r, &done);
}

static void peer_remove(struct pd_rdma *r, uint32_t slot)
{
	struct pd_rdma_peer *p = r->peers[slot];

	pd_lock(&r->lock);
	pd_rdma_peer_reap(r, p);
	r->peers[slot] = NULL;
	pd_unlock(&r->lock);
	peer_free(r, p);
}

int pd_rdma_disconnect(struct pd_rdma *r, uint32_t peer)
{
	struct pd_rdma_peer *p;
	uint32_t slot = 0;

	if (!r)
		return -EINVAL;
	p = pd_rdma_peer_find(r, peer, &slot);
	if (!p)
		return -ENOENT;
	peer_drain(r, p);
	peer_remove(r, slot);
	return 0;
}

/* pd_rdma_stop: no drain, every write still out is aborted. */
void pd_rdma_peers_abort(struct pd_rdma *r)
{
	for (uint32_t i = 0; i < r->o.max_peers; i++) {
		if (r->peers[i])
			peer_remove(r, i);
	}
}
