/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_RDMA_FAKE_H
#define PD_TESTS_UNIT_RDMA_FAKE_H

/*
 * A fake of the verbs and rdma_cm calls the RDMA transport makes (struct
 * pd_rdma_verbs), for tests/unit/test_rdma*.c. It exists to inject faults
 * on demand (a work completion error, a failed post, a rejected or silent
 * connect, an async QP error) and to watch what the transport does (chain
 * lengths, which WRs are signalled, send-queue and CQ occupancy). It is
 * not evidence that the transport works on real verbs: tests/rdma/ runs it
 * against SoftRoCE for that.
 *
 * In three headers, each including the one before: this one (the state,
 * event queues, devices, PD, MRs, CQs, how a WR runs and completes),
 * rdma_fake_qp.h (QPs, post_send, async events, fk_release) and
 * rdma_fake_cm.h (rdma_cm, the table fk_verbs, fk_reset, fk_all_freed).
 * The tests' own fixture is rdma_fixture.h.
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

static inline void fk_lock(void)
{
	(void)pthread_mutex_lock(&fk.lock);
}

static inline void fk_unlock(void)
{
	(void)pthread_mutex_unlock(&fk.lock);
}

/* ---- event queues ------------------------------------------------------------------- */

static inline int fkq_init(struct fk_evq *q)
{
	q->head = q->n = 0;
	q->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	return q->fd < 0 ? -errno : 0;
}

static inline void fkq_push(struct fk_evq *q, void *it)
{
	uint64_t one = 1;

	if (q->n == FK_Q)
		abort(); /* a test bug, not a transport one */
	q->item[(q->head + q->n) % FK_Q] = it;
	if (q->n++ == 0 && write(q->fd, &one, sizeof(one)) < 0)
		abort();
}

static inline void *fkq_pop(struct fk_evq *q)
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
static inline void fkq_filter(struct fk_evq *q, int (*drop)(void *it, const void *arg),
			      const void *arg, void (*release)(void *it))
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

static inline int fk_get_devices(struct ibv_context ***list, int *n)
{
	fk_lock();
	fk.devs_held++;
	fk_unlock();
	*list = fk.devs;
	*n = 2;
	return 0;
}

static inline void fk_free_devices(struct ibv_context **list)
{
	(void)list;
	fk_lock();
	fk.devs_held--;
	fk_unlock();
}

static inline const char *fk_dev_name(struct ibv_context *ctx)
{
	return ctx == &fk.ctx[0] ? "fake0" : "fake1";
}

static inline int fk_alloc_pd(struct ibv_context *ctx, struct ibv_pd **out)
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

static inline void fk_dealloc_pd(struct ibv_pd *pd)
{
	fk_lock();
	fk.live_pd--;
	fk_unlock();
	free(pd);
}

static inline int fk_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access,
			    struct ibv_mr **out)
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

static inline void fk_dereg_mr(struct ibv_mr *mr)
{
	fk_lock();
	((struct fk_mr *)mr)->live = 0;
	fk.live_mr--;
	fk_unlock();
}

static inline const struct fk_mr *fk_mr_find(uint32_t key, int remote, uint64_t addr, uint32_t len)
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

static inline int fk_create_comp_channel(struct ibv_context *ctx, struct ibv_comp_channel **out)
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

static inline void fk_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	struct fk_chan *c = (struct fk_chan *)ch;

	fk_lock();
	fk.live_chan--;
	fk_unlock();
	(void)close(c->q.fd);
	free(c);
}

static inline int fk_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx,
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

static inline int fk_same(void *it, const void *arg)
{
	return it == arg;
}

static inline void fk_destroy_cq(struct ibv_cq *cq)
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

static inline int fk_req_notify_cq(struct ibv_cq *cq)
{
	fk_lock();
	((struct fk_cq *)cq)->armed = 1;
	fk_unlock();
	return 0;
}

static inline int fk_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_ctx)
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

static inline void fk_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	fk_lock();
	((struct fk_cq *)cq)->acked += n;
	fk_unlock();
}

/* fk.lock held */
static inline void fk_cqe(struct fk_qp *q, const struct fk_wr *w, enum ibv_wc_status st)
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
static inline void fk_exec(struct fk_qp *q, const struct fk_wr *w)
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

static inline void fk_run_qp(struct fk_qp *q)
{
	while (q->nexec < q->n)
		fk_exec(q, &q->sq[(q->head + q->nexec++) % q->cap]);
}

/* A polled CQE frees the send-queue slots of its WR and every earlier one. */
static inline void fk_retire(struct fk_qp *q, uint64_t wr_id)
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

static inline int fk_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
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

#endif
