/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_RDMA_FAKE_H
#define PD_TESTS_UNIT_RDMA_FAKE_H

/*
 * A fake of the verbs and rdma_cm calls the RDMA transport makes (struct
 * pd_rdma_verbs), for tests/unit/test_rdma.c. It exists to inject faults
 * on demand (a work completion error, a failed post, a rejected or silent
 * connect, an async QP error) and to watch what the transport does (chain
 * lengths, which WRs are signalled, send-queue and CQ occupancy). It is
 * not evidence that the transport works on real verbs: tests/rdma/ runs it
 * against SoftRoCE for that.
 *
 * The model, as small as the transport needs:
 *  - two devices, "fake0" (every address but 10.0.0.2 and 192.0.2.1) and
 *    "fake1" (10.0.0.2); 192.0.2.1 has no device;
 *  - memory regions with distinct lkeys/rkeys; an RDMA WRITE is checked
 *    against them (rkey, REMOTE_WRITE, bounds; lkey and bounds unless
 *    inline) and then really copies bytes in this process;
 *  - an RC send queue per QP with max_send_wr slots: a WR holds its slot
 *    from the post until a polled completion covers it (its own, or a
 *    later signalled WR's), exactly as hardware frees them, and a post
 *    beyond that fails with ENOMEM and is counted (sq_overflow);
 *  - WRs execute at post time, or later (hold mode) when the test calls
 *    fk_release(); a failed WR puts the QP in error and every later WR
 *    completes with IBV_WC_WR_FLUSH_ERR; errors always make a CQE,
 *    successes only when signalled; CQ capacity is the cqe asked for
 *    (overflows counted);
 *  - completion channels, rdma_cm channels and the async fd are eventfds
 *    readable while their queue is not empty;
 *  - rdma_cm: resolve_addr -> ADDR_RESOLVED, resolve_route ->
 *    ROUTE_RESOLVED, connect -> ESTABLISHED (or REJECTED / nothing, as
 *    told); accept -> ESTABLISHED; tests inject CONNECT_REQUEST,
 *    DISCONNECTED and async events.
 * Everything is under one mutex: the transport calls in from two threads.
 * Nothing here calls cmocka (the data thread must not): problems are
 * counted and the test asserts on the counters.
 */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pd_rdma_int.h"

#define FK_Q      4096u
#define FK_MAXQP  64u
#define FK_MAXMR  16u
#define FK_LOG    4096u

struct fk_evq {
	int fd;
	void *item[FK_Q];
	uint32_t head, n;
};

struct fk_wr {
	uint64_t wr_id, src, raddr;
	uint32_t len, lkey, rkey;
	int sig, inl;
};

struct fk_cq;

struct fk_qp {
	struct ibv_qp qp;              /* first: the transport sees this */
	struct fk_cq *cq;
	struct rdma_cm_id *id;
	struct fk_wr *sq;
	uint32_t cap, head, n, nexec;  /* n: WRs holding a slot; nexec of them executed */
	uint32_t unsig_run;            /* unsignalled WRs in a row */
	int err;
};

struct fk_cq {
	struct ibv_cq cq;              /* first */
	struct ibv_wc *wc;
	struct fk_qp **wcqp;
	uint32_t cap, head, n;
	int armed;
	uint64_t events, acked;
};

struct fk_mr {
	struct ibv_mr mr;              /* first */
	int access, live;
};

struct fk_cmev {
	struct rdma_cm_event ev;       /* first */
	uint8_t priv[64];
};

struct fk_chain {
	uint32_t qpn, n, last_sig, sig;
};

struct fk {
	pthread_mutex_t lock;
	struct ibv_context ctx[2];
	struct ibv_context *devs[3];
	struct fk_evq async[2];
	struct fk_mr mr[FK_MAXMR];
	uint32_t nmr_slots;
	struct fk_qp *qps[FK_MAXQP];
	/* fault knobs (set by the test, read under the lock) */
	int fail_reg_mr;               /* -errno for the next reg_mr */
	int fail_post_err;             /* -errno for the next post_send ... */
	uint32_t fail_post_at;         /* ... at this WR of its chain */
	uint64_t fail_nth;             /* the nth executed WR (1-based) fails ... */
	enum ibv_wc_status fail_status;/* ... with this status */
	int hold;                      /* WRs wait for fk_release() */
	int reject_status;             /* connect -> REJECTED with this status (our private data) */
	int reject_raw;                /* connect -> REJECTED without private data */
	int no_establish;              /* connect -> no event at all */
	int addr_error;                /* resolve_addr -> ADDR_ERROR */
	int route_dev1;                /* resolve_addr picks fake1 */
	int no_inline;                 /* create_qp with inline data fails (-EINVAL) */
	uint32_t max_inline;           /* inline bytes a QP grants */
	int cm_get_err;                /* -errno for the next get_cm_event with an event queued */
	/* what happened */
	int live_pd, live_mr, live_chan, live_cq, live_qp, live_id, live_cmch, devs_held;
	uint64_t executed, post_calls, wrs, sig, inl, sq_overflow, cq_overflow, bad_chain;
	uint64_t max_sq_used, max_unsig_run, unacked_at_destroy, connects, accepts, rejects;
	int last_reject;
	uint8_t last_req[64];
	uint32_t last_req_len;
	uint8_t ack_timeout;
	struct fk_chain chain[FK_LOG];
	uint32_t nchain;
};

static struct fk fk;

static void fk_lock(void)
{
	(void)pthread_mutex_lock(&fk.lock);
}

static void fk_unlock(void)
{
	(void)pthread_mutex_unlock(&fk.lock);
}

/* ---- event queues ------------------------------------------------------------------- */

static int fkq_init(struct fk_evq *q)
{
	q->head = q->n = 0;
	q->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return q->fd < 0 ? -errno : 0;
}

static void fkq_push(struct fk_evq *q, void *it)
{
	uint64_t one = 1;

	if (q->n == FK_Q)
		abort(); /* a test bug, not a transport one */
	q->item[(q->head + q->n) % FK_Q] = it;
	if (q->n++ == 0 && write(q->fd, &one, sizeof(one)) < 0)
		abort();
}

static void *fkq_pop(struct fk_evq *q)
{
	uint64_t v;
	void *it;

	if (!q->n)
		return NULL;
	it = q->item[q->head];
	q->head = (q->head + 1) % FK_Q;
	if (--q->n == 0 && read(q->fd, &v, sizeof(v)) < 0)
		abort();
	return it;
}

/* Drop the items @drop says so of (freeing them is the caller's business). */
static void fkq_filter(struct fk_evq *q, int (*drop)(void *it, const void *arg), const void *arg,
		       void (*release)(void *it))
{
	uint32_t n = q->n;

	for (uint32_t i = 0; i < n; i++) {
		void *it = fkq_pop(q);

		if (!it)
			break;
		if (drop(it, arg)) {
			if (release)
				release(it);
		} else {
			fkq_push(q, it);
		}
	}
}

/* ---- devices, PD, MR ------------------------------------------------------------------- */

static int fk_get_devices(struct ibv_context ***list, int *n)
{
	fk_lock();
	fk.devs_held++;
	fk_unlock();
	*list = fk.devs;
	*n = 2;
	return 0;
}

static void fk_free_devices(struct ibv_context **list)
{
	(void)list;
	fk_lock();
	fk.devs_held--;
	fk_unlock();
}

static const char *fk_dev_name(struct ibv_context *ctx)
{
	return ctx == &fk.ctx[0] ? "fake0" : "fake1";
}

static int fk_alloc_pd(struct ibv_context *ctx, struct ibv_pd **out)
{
	struct ibv_pd *pd = calloc(1, sizeof(*pd));

	if (!pd)
		return -ENOMEM;
	pd->context = ctx;
	fk_lock();
	fk.live_pd++;
	fk_unlock();
	*out = pd;
	return 0;
}

static void fk_dealloc_pd(struct ibv_pd *pd)
{
	fk_lock();
	fk.live_pd--;
	fk_unlock();
	free(pd);
}

static int fk_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, struct ibv_mr **out)
{
	int rc = 0;

	fk_lock();
	if (fk.fail_reg_mr) {
		rc = fk.fail_reg_mr;
		fk.fail_reg_mr = 0;
	} else if (fk.nmr_slots == FK_MAXMR) {
		rc = -ENOMEM;
	} else {
		struct fk_mr *m = &fk.mr[fk.nmr_slots];

		m->mr = (struct ibv_mr){ .context = pd->context, .pd = pd, .addr = addr,
					 .length = len, .lkey = 0x100u + fk.nmr_slots,
					 .rkey = 0x5000u + fk.nmr_slots * 0x11u };
		m->access = access;
		m->live = 1;
		fk.nmr_slots++;
		fk.live_mr++;
		*out = &m->mr;
	}
	fk_unlock();
	return rc;
}

static void fk_dereg_mr(struct ibv_mr *mr)
{
	fk_lock();
	((struct fk_mr *)mr)->live = 0;
	fk.live_mr--;
	fk_unlock();
}

static const struct fk_mr *fk_mr_find(uint32_t key, int remote, uint64_t addr, uint32_t len)
{
	for (uint32_t i = 0; i < fk.nmr_slots; i++) {
		const struct fk_mr *m = &fk.mr[i];
		uint64_t base = (uint64_t)(uintptr_t)m->mr.addr;

		if (!m->live || (remote ? m->mr.rkey : m->mr.lkey) != key)
			continue;
		if (remote && !(m->access & IBV_ACCESS_REMOTE_WRITE))
			return NULL;
		if (addr < base || addr - base > m->mr.length || len > m->mr.length - (addr - base))
			return NULL;
		return m;
	}
	return NULL;
}

/* ---- completion channel, CQ ------------------------------------------------------------- */

struct fk_chan {
	struct ibv_comp_channel ch;    /* first */
	struct fk_evq q;
};

static int fk_create_comp_channel(struct ibv_context *ctx, struct ibv_comp_channel **out)
{
	struct fk_chan *c = calloc(1, sizeof(*c));

	if (!c || fkq_init(&c->q) < 0) {
		free(c);
		return -ENOMEM;
	}
	c->ch.context = ctx;
	c->ch.fd = c->q.fd;
	fk_lock();
	fk.live_chan++;
	fk_unlock();
	*out = &c->ch;
	return 0;
}

static void fk_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct fk_chan *c = (struct fk_chan *)ch;

	fk_lock();
	fk.live_chan--;
	fk_unlock();
	(void)close(c->q.fd);
	free(c);
}

static int fk_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx,
			struct ibv_comp_channel *ch, struct ibv_cq **out)
{
	struct fk_cq *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->cap = (uint32_t)cqe;
	c->wc = calloc(c->cap, sizeof(*c->wc));
	c->wcqp = calloc(c->cap, sizeof(*c->wcqp));
	if (!c->wc || !c->wcqp) {
		free(c->wc);
		free(c->wcqp);
		free(c);
		return -ENOMEM;
	}
	c->cq = (struct ibv_cq){ .context = ctx, .channel = ch, .cq_context = cq_ctx, .cqe = cqe };
	fk_lock();
	fk.live_cq++;
	fk_unlock();
	*out = &c->cq;
	return 0;
}

static int fk_same(void *it, const void *arg)
{
	return it == arg;
}

static void fk_destroy_cq(struct ibv_cq *cq)
{
	struct fk_cq *c = (struct fk_cq *)cq;

	fk_lock();
	if (cq->channel)
		fkq_filter(&((struct fk_chan *)cq->channel)->q, fk_same, cq, NULL);
	if (c->events != c->acked)
		fk.unacked_at_destroy++;
	fk.live_cq--;
	fk_unlock();
	free(c->wc);
	free(c->wcqp);
	free(c);
}

static int fk_req_notify_cq(struct ibv_cq *cq)
{
	fk_lock();
	((struct fk_cq *)cq)->armed = 1;
	fk_unlock();
	return 0;
}

static int fk_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx)
{
	struct fk_cq *c;

	fk_lock();
	c = fkq_pop(&((struct fk_chan *)ch)->q);
	if (c) {
		c->events++;
		*cq = &c->cq;
		*cq_ctx = c->cq.cq_context;
	}
	fk_unlock();
	return c ? 0 : -EAGAIN;
}

static void fk_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	fk_lock();
	((struct fk_cq *)cq)->acked += n;
	fk_unlock();
}

/* fk.lock held */
static void fk_cqe(struct fk_qp *q, const struct fk_wr *w, enum ibv_wc_status st)
{
	struct fk_cq *c = q->cq;

	if (c->n == c->cap) {
		fk.cq_overflow++;
		return;
	}
	c->wc[(c->head + c->n) % c->cap] = (struct ibv_wc){
		.wr_id = w->wr_id, .status = st, .opcode = IBV_WC_RDMA_WRITE,
		.qp_num = q->qp.qp_num, .byte_len = w->len };
	c->wcqp[(c->head + c->n) % c->cap] = q;
	c->n++;
	if (c->armed && c->cq.channel) {
		c->armed = 0;
		fkq_push(&((struct fk_chan *)c->cq.channel)->q, c);
	}
}

/* fk.lock held: one WR of @q's send queue runs. */
static void fk_exec(struct fk_qp *q, const struct fk_wr *w)
{
	enum ibv_wc_status st = IBV_WC_SUCCESS;

	fk.executed++;
	if (q->err)
		st = IBV_WC_WR_FLUSH_ERR;
	else if (fk.fail_nth && fk.executed == fk.fail_nth)
		st = fk.fail_status;
	else if (!fk_mr_find(w->rkey, 1, w->raddr, w->len))
		st = IBV_WC_REM_ACCESS_ERR;
	else if (!w->inl && w->len && !fk_mr_find(w->lkey, 0, w->src, w->len))
		st = IBV_WC_LOC_PROT_ERR;
	if (st == IBV_WC_SUCCESS && w->len)
		memcpy((void *)(uintptr_t)w->raddr, (const void *)(uintptr_t)w->src, w->len);
	if (st != IBV_WC_SUCCESS)
		q->err = 1;
	if (st != IBV_WC_SUCCESS || w->sig)
		fk_cqe(q, w, st);
}

static void fk_run_qp(struct fk_qp *q)
{
	while (q->nexec < q->n)
		fk_exec(q, &q->sq[(q->head + q->nexec++) % q->cap]);
}

/* A completion the transport never asked for (a provider gone wrong). */
static void fk_inject_wc(struct ibv_qp *qp, uint64_t wr_id)
{
	struct fk_qp *q = (struct fk_qp *)qp;
	struct fk_wr w = { .wr_id = wr_id };

	fk_lock();
	fk_cqe(q, &w, IBV_WC_SUCCESS);
	fk_unlock();
}

/* Hold mode: run every WR posted so far. */
static void fk_release(void)
{
	fk_lock();
	for (uint32_t i = 0; i < FK_MAXQP; i++) {
		if (fk.qps[i])
			fk_run_qp(fk.qps[i]);
	}
	fk_unlock();
}

/* A polled CQE frees the send-queue slots of its WR and every earlier one. */
static void fk_retire(struct fk_qp *q, uint64_t wr_id)
{
	int known = 0;

	for (uint32_t i = 0; i < q->nexec && !known; i++)
		known = q->sq[(q->head + i) % q->cap].wr_id == wr_id;
	if (!known) {
		fk.bad_chain++; /* a CQE for a WR not in the send queue */
		return;
	}
	while (q->n) {
		uint64_t id = q->sq[q->head].wr_id;

		q->head = (q->head + 1) % q->cap;
		q->n--;
		q->nexec--;
		if (id == wr_id)
			return;
	}
	fk.bad_chain++; /* a CQE for a WR not in the send queue */
}

static int fk_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fk_cq *c = (struct fk_cq *)cq;
	int i = 0;

	fk_lock();
	for (; i < n && c->n; i++) {
		wc[i] = c->wc[c->head];
		fk_retire(c->wcqp[c->head], wc[i].wr_id);
		c->head = (c->head + 1) % c->cap;
		c->n--;
	}
	fk_unlock();
	return i;
}

/* ---- post ------------------------------------------------------------------------------ */

static void fk_chain_log(struct fk_qp *q, uint32_t n, int last_sig, uint32_t sig)
{
	if (fk.nchain < FK_LOG)
		fk.chain[fk.nchain++] = (struct fk_chain){ .qpn = q->qp.qp_num, .n = n,
							   .last_sig = (uint32_t)last_sig,
							   .sig = sig };
}

/* fk.lock held: queue one WR, or say why the device refuses it. */
static int fk_queue_wr(struct fk_qp *q, const struct ibv_send_wr *w)
{
	int inl = !!(w->send_flags & IBV_SEND_INLINE), sig = !!(w->send_flags & IBV_SEND_SIGNALED);
	const struct ibv_sge *s = w->num_sge ? w->sg_list : NULL;

	if (q->n == q->cap) {
		fk.sq_overflow++;
		return -ENOMEM;
	}
	if (w->opcode != IBV_WR_RDMA_WRITE || w->num_sge > 1 ||
	    (inl && s && s->length > fk.max_inline))
		return -EINVAL;
	q->sq[(q->head + q->n++) % q->cap] = (struct fk_wr){
		.wr_id = w->wr_id, .src = s ? s->addr : 0, .len = s ? s->length : 0,
		.lkey = s ? s->lkey : 0, .raddr = w->wr.rdma.remote_addr,
		.rkey = w->wr.rdma.rkey, .sig = sig, .inl = inl };
	q->unsig_run = sig ? 0 : q->unsig_run + 1;
	if (q->unsig_run > fk.max_unsig_run)
		fk.max_unsig_run = q->unsig_run;
	if (q->n > fk.max_sq_used)
		fk.max_sq_used = q->n;
	fk.wrs++;
	fk.sig += (uint64_t)sig;
	fk.inl += (uint64_t)inl;
	return 0;
}

static int fk_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fk_qp *q = (struct fk_qp *)qp;
	uint32_t n = 0, sig = 0;
	int rc = 0, last_sig = 0;

	fk_lock();
	fk.post_calls++;
	for (struct ibv_send_wr *w = wr; w; w = w->next, n++) {
		if (fk.fail_post_err && n == fk.fail_post_at) {
			rc = fk.fail_post_err;
			fk.fail_post_err = 0;
		} else {
			rc = fk_queue_wr(q, w);
		}
		if (rc < 0) {
			*bad = w;
			break;
		}
		last_sig = !!(w->send_flags & IBV_SEND_SIGNALED);
		sig += (uint32_t)last_sig;
	}
	if (rc == 0) {
		fk_chain_log(q, n, last_sig, sig);
		if (!last_sig)
			fk.bad_chain++;
	}
	if (!fk.hold)
		fk_run_qp(q);
	fk_unlock();
	return rc;
}

/* ---- async events ------------------------------------------------------------------------ */

static int fk_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
	struct ibv_async_event *e;

	fk_lock();
	e = fkq_pop(&fk.async[ctx == &fk.ctx[0] ? 0 : 1]);
	fk_unlock();
	if (!e)
		return -EAGAIN;
	*ev = *e;
	free(e);
	return 0;
}

static void fk_ack_async_event(struct ibv_async_event *ev)
{
	(void)ev;
}

/* Raise an async event on fake0 (element: the QP, CQ or nothing). */
static void fk_inject_async(enum ibv_event_type t, struct ibv_qp *qp, struct ibv_cq *cq)
{
	struct ibv_async_event *e = calloc(1, sizeof(*e));

	if (!e)
		abort();
	e->event_type = t;
	if (qp)
		e->element.qp = qp;
	else if (cq)
		e->element.cq = cq;
	fk_lock();
	fkq_push(&fk.async[0], e);
	fk_unlock();
}

/* ---- rdma_cm ------------------------------------------------------------------------------- */

struct fk_cmch {
	struct rdma_event_channel ch;  /* first */
	struct fk_evq q;
};

static int fk_create_event_channel(struct rdma_event_channel **out)
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

static void fk_free_ev(void *it)
{
	free(it);
}

static int fk_any(void *it, const void *arg)
{
	(void)it;
	(void)arg;
	return 1;
}

static void fk_destroy_event_channel(struct rdma_event_channel *ch)
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
static struct fk_cmev *fk_cm_push(struct rdma_cm_id *id, enum rdma_cm_event_type t, int status,
				  const void *priv, uint8_t len)
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

static int fk_create_id(struct rdma_event_channel *ch, void *ctx, struct rdma_cm_id **out)
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

static int fk_ev_of(void *it, const void *arg)
{
	return ((struct fk_cmev *)it)->ev.id == arg;
}

static void fk_destroy_id(struct rdma_cm_id *id)
{
	fk_lock();
	fkq_filter(&((struct fk_cmch *)id->channel)->q, fk_ev_of, id, fk_free_ev);
	fk.live_id--;
	fk_unlock();
	free(id);
}

static struct ibv_context *fk_ctx_of(const struct sockaddr *a, int *none)
{
	const struct sockaddr_in *a4 = (const struct sockaddr_in *)a;
	uint32_t ip = a->sa_family == AF_INET ? ntohl(a4->sin_addr.s_addr) : 0;

	*none = ip == 0xc0000201u; /* 192.0.2.1 */
	return ip == 0x0a000002u ? &fk.ctx[1] : &fk.ctx[0];
}

static int fk_bind_addr(struct rdma_cm_id *id, struct sockaddr *a)
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

static int fk_listen(struct rdma_cm_id *id, int backlog)
{
	(void)id;
	(void)backlog;
	return 0;
}

static int fk_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
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

static int fk_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	(void)timeout_ms;
	fk_lock();
	(void)fk_cm_push(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	fk_unlock();
	return 0;
}

static int fk_set_ack_timeout(struct rdma_cm_id *id, uint8_t timeout)
{
	(void)id;
	fk_lock();
	fk.ack_timeout = timeout;
	fk_unlock();
	return 0;
}

static int fk_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct fk_qp *q;
	uint32_t slot = FK_MAXQP;
	int rc = 0;

	fk_lock();
	if (fk.no_inline && a->cap.max_inline_data)
		rc = -EINVAL;
	for (uint32_t i = 0; i < FK_MAXQP && rc == 0; i++) {
		if (!fk.qps[i]) {
			slot = i;
			break;
		}
	}
	fk_unlock();
	if (rc < 0 || slot == FK_MAXQP)
		return rc < 0 ? rc : -ENOMEM;
	q = calloc(1, sizeof(*q));
	if (!q || !(q->sq = calloc(a->cap.max_send_wr, sizeof(*q->sq)))) {
		free(q);
		return -ENOMEM;
	}
	q->cap = a->cap.max_send_wr;
	q->cq = (struct fk_cq *)a->send_cq;
	q->id = id;
	q->qp = (struct ibv_qp){ .context = pd->context, .qp_context = a->qp_context, .pd = pd,
				 .send_cq = a->send_cq, .recv_cq = a->recv_cq,
				 .qp_num = 0x100u + slot, .qp_type = IBV_QPT_RC };
	if (a->cap.max_inline_data > fk.max_inline)
		a->cap.max_inline_data = fk.max_inline;
	fk_lock();
	fk.qps[slot] = q;
	fk.live_qp++;
	fk_unlock();
	id->qp = &q->qp;
	return 0;
}

static void fk_destroy_qp(struct rdma_cm_id *id)
{
	struct fk_qp *q = (struct fk_qp *)id->qp;
	struct fk_cq *c = q->cq;

	fk_lock();
	fk.qps[q->qp.qp_num - 0x100u] = NULL;
	/* its CQEs leave the CQ with it */
	for (uint32_t i = 0, n = c->n; i < n; i++) {
		uint32_t at = c->head;
		struct ibv_wc w = c->wc[at];
		struct fk_qp *o = c->wcqp[at];

		c->head = (c->head + 1) % c->cap;
		c->n--;
		if (o != q) {
			c->wc[(c->head + c->n) % c->cap] = w;
			c->wcqp[(c->head + c->n) % c->cap] = o;
			c->n++;
		}
	}
	fk.live_qp--;
	fk_unlock();
	id->qp = NULL;
	free(q->sq);
	free(q);
}

static int fk_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
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

static int fk_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	(void)p;
	fk_lock();
	fk.accepts++;
	(void)fk_cm_push(id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
	fk_unlock();
	return 0;
}

static int fk_reject(struct rdma_cm_id *id, const void *priv, uint8_t len)
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

static int fk_disconnect(struct rdma_cm_id *id)
{
	(void)id;
	return 0;
}

static int fk_get_cm_event(struct rdma_event_channel *ch, struct rdma_cm_event **ev)
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

static void fk_ack_cm_event(struct rdma_cm_event *ev)
{
	free(ev);
}

/* A peer asks to connect to @listen_id with this private data; returns
 * the new id (the transport owns it from here). */
static struct rdma_cm_id *fk_inject_conn_request(struct rdma_cm_id *listen_id, const void *priv,
						 uint8_t len)
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

static void fk_inject_cm(struct rdma_cm_id *id, enum rdma_cm_event_type t)
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
static int fk_reset(void)
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
static int fk_all_freed(void)
{
	return !fk.live_pd && !fk.live_mr && !fk.live_chan && !fk.live_cq && !fk.live_qp &&
	       !fk.live_id && !fk.live_cmch && !fk.devs_held;
}

#endif
