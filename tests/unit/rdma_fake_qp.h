/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_RDMA_FAKE_QP_H
#define PD_TESTS_UNIT_RDMA_FAKE_QP_H

/*
 * The fake's QPs, its post_send and its async events, and what a test calls
 * to drive them: fk_release() (hold mode), fk_inject_wc() and
 * fk_inject_async(). The model is described in rdma_fake.h; the table that
 * hands these to the transport (fk_verbs) is in rdma_fake_cm.h.
 */
#include <stdlib.h>

#include "pd_rdma_int.h"
#include "rdma_fake.h"

/* ---- QP ------------------------------------------------------------------------------------- */

static inline int fk_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *a)
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

static inline void fk_destroy_qp(struct rdma_cm_id *id)
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

/* ---- post ------------------------------------------------------------------------------ */

static inline void fk_chain_log(struct fk_qp *q, uint32_t n, int last_sig, uint32_t sig)
{
	if (fk.nchain < FK_LOG)
		fk.chain[fk.nchain++] = (struct fk_chain){ .qpn = q->qp.qp_num, .n = n,
							   .last_sig = (uint32_t)last_sig,
							   .sig = sig };
}

/* fk.lock held: queue one WR, or say why the device refuses it. */
static inline int fk_queue_wr(struct fk_qp *q, const struct ibv_send_wr *w)
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

static inline int fk_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
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

/* ---- test controls of the send queue --------------------------------------------------- */

/* A completion the transport never asked for (a provider gone wrong). */
static inline void fk_inject_wc(struct ibv_qp *qp, uint64_t wr_id)
{
	struct fk_qp *q = (struct fk_qp *)qp;
	struct fk_wr w = { .wr_id = wr_id };

	fk_lock();
	fk_cqe(q, &w, IBV_WC_SUCCESS);
	fk_unlock();
}

/* Hold mode: run every WR posted so far. */
static inline void fk_release(void)
{
	fk_lock();
	for (uint32_t i = 0; i < FK_MAXQP; i++) {
		if (fk.qps[i])
			fk_run_qp(fk.qps[i]);
	}
	fk_unlock();
}

/* ---- async events ------------------------------------------------------------------------ */

static inline int fk_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
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

static inline void fk_ack_async_event(struct ibv_async_event *ev)
{
	(void)ev;
}

/* Raise an async event on fake0 (element: the QP, CQ or nothing). */
static inline void fk_inject_async(enum ibv_event_type t, struct ibv_qp *qp, struct ibv_cq *cq)
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

#endif
