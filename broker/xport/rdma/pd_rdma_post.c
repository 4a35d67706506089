/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport, the data path: bounds and address translation, chains of
 * RDMA WRITE work requests with selective signalling, and work completions
 * mapped back to the writes (cookies) they cover.
 *
 * Send-queue accounting, per QP: a WR takes a send-queue slot from its
 * post until a polled work completion covers it: its own if it was
 * signalled, else the next signalled WR's (an RC send queue completes in
 * order). The in-flight FIFO holds exactly those WRs, so its length is the
 * number of slots in use and a chain is never longer than the room left:
 * the send queue cannot overflow. The last WR of every chain is signalled,
 * so the FIFO's tail is always covered by a completion to come.
 */
#include <errno.h>

#include "pd_rdma_int.h"

int pd_rdma_xfer_check(const struct pd_rdma *r, const struct pd_rdma_remote *rem,
		       const struct pd_xfer *x)
{
	uintptr_t base = (uintptr_t)r->o.send_base, src = (uintptr_t)x->src;
	uint64_t off;

	if (x->slot >= rem->nslots || x->len > rem->slot_size)
		return -EINVAL;
	if (!x->len)
		return 0;
	if (!x->src || !r->send_mr || src < base)
		return -EINVAL;
	off = (uint64_t)(src - base);
	if (off > r->o.send_len || x->len > r->o.send_len - off)
		return -EINVAL;
	return 0;
}

int pd_rdma_wc_errno(enum ibv_wc_status s)
{
	switch (s) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_REM_ACCESS_ERR:
		return -EACCES;         /* bad rkey, or outside the peer's MR */
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ETIMEDOUT;      /* the peer (its QP) stopped answering */
	case IBV_WC_WR_FLUSH_ERR:
		return -ECONNABORTED;   /* the QP went to the error state */
	case IBV_WC_LOC_LEN_ERR:
		return -EMSGSIZE;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
		return -EFAULT;         /* our lkey / send arena */
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_OP_ERR:
		return -EREMOTEIO;
	default:
		return -EIO;
	}
}

int pd_rdma_peer_fail_locked(struct pd_rdma_peer *p, int err)
{
	if (p->err)
		return 0;
	p->err = err;
	p->failed = 1;
	PD_ASSERT(pthread_cond_broadcast(&p->drained) == 0);
	return 1;
}

/* ---- chains ------------------------------------------------------------------------------ */

/* Fill WR j of the chain for node @n. Signalled when it is the last of the
 * chain or signal_interval WRs would otherwise have gone unsignalled. */
static void wr_build(struct pd_rdma_peer *p, struct pd_rdma_qp *q, struct pd_rdma_node *n,
		     uint32_t j, int last)
{
	const struct pd_rdma *r = p->r;
	struct ibv_send_wr *w = &q->wr[j];
	struct ibv_sge *sge = &q->sge[j];

	n->seq = q->next_seq++;
	*sge = (struct ibv_sge){ .addr = (uintptr_t)n->x.src, .length = n->x.len,
				 .lkey = r->send_mr->lkey };
	*w = (struct ibv_send_wr){
		.wr_id = pd_rdma_wr_id(q->idx, n->seq),
		.next = last ? NULL : w + 1,
		.sg_list = sge,
		.num_sge = n->x.len ? 1 : 0,
		.opcode = IBV_WR_RDMA_WRITE,
	};
	w->wr.rdma.remote_addr = pd_rdma_slot_addr(&p->rem, n->x.slot);
	w->wr.rdma.rkey = p->rem.rkey;
	if (n->x.len && n->x.len <= q->inl)
		w->send_flags |= IBV_SEND_INLINE;
	if (last || q->unsig + 1 >= r->o.signal_interval) {
		w->send_flags |= IBV_SEND_SIGNALED;
		q->unsig = 0;
	} else {
		q->unsig++;
	}
}

static void chain_count(struct pd_rdma *r, const struct ibv_send_wr *w)
{
	uint64_t n = 0, inl = 0, sig = 0;

	for (; w; w = w->next) {
		n++;
		inl += !!(w->send_flags & IBV_SEND_INLINE);
		sig += !!(w->send_flags & IBV_SEND_SIGNALED);
	}
	PD_RDMA_STAT_INC(r, wrs_posted, n);
	PD_RDMA_STAT_INC(r, wrs_inline, inl);
	PD_RDMA_STAT_INC(r, wrs_signalled, sig);
	PD_RDMA_STAT_INC(r, post_calls, 1);
}

/* Post the first k pending writes on @q as one chain. On failure the WRs
 * stay in the in-flight FIFO whether the device took them or not: the
 * caller fails the peer, whose teardown destroys the QP before anything is
 * completed. */
static int chain_post(struct pd_rdma_peer *p, struct pd_rdma_qp *q, uint32_t k)
{
	struct pd_rdma *r = p->r;
	struct ibv_send_wr *bad = NULL;
	int rc;

	for (uint32_t j = 0; j < k; j++) {
		struct pd_rdma_node *n = pd_rdma_fifo_pop(&p->pending);

		wr_build(p, q, n, j, j + 1 == k);
		pd_rdma_fifo_append(&q->inflight, n);
	}
	p->inflight += k;
	rc = r->v->post_send(q->qp, q->wr, &bad);
	if (rc < 0) {
		PD_RDMA_STAT_INC(r, post_errors, 1);
		PD_LOG_RL(ERR, rdma, "peer %u qp %u: ibv_post_send of %u WRs: %d", p->id, q->idx,
			  k, rc);
		return rc;
	}
	chain_count(r, q->wr);
	return 0;
}

int pd_rdma_sched(struct pd_rdma_peer *p)
{
	const uint32_t nq = p->nqps, depth = p->r->o.sq_depth;
	int rc = 0;

	PD_ASSERT(nq > 0);
	if (p->err || p->nup < nq || !p->pending.n)
		return 0;
	/* Spread over the QPs: each takes its share of what is left, as far
	 * as its send queue has room; the next call starts one QP further. */
	for (uint32_t left = nq; left && p->pending.n && rc == 0; left--) {
		struct pd_rdma_qp *q = &p->qp[(p->rr + nq - left) % nq];
		uint32_t share = (p->pending.n + left - 1) / left;
		uint32_t room = depth - q->inflight.n;
		uint32_t k = share < room ? share : room;

		if (k)
			rc = chain_post(p, q, k);
	}
	p->rr = (p->rr + 1) % nq;
	if (rc == 0 && p->pending.n)
		PD_RDMA_STAT_INC(p->r, sq_waits, 1);
	return rc;
}

/* ---- completions ------------------------------------------------------------------------- */

int pd_rdma_wc_apply(struct pd_rdma_peer *p, const struct ibv_wc *wc, struct pd_cplq_fifo *done)
{
	uint32_t idx = (uint32_t)(wc->wr_id >> PD_RDMA_WRID_SEQ_BITS);
	uint64_t seq = wc->wr_id & PD_RDMA_WRID_SEQ_MASK;
	int st = pd_rdma_wc_errno(wc->status);
	struct pd_rdma_qp *q;

	if (idx >= p->nqps || !p->qp[idx].inflight.n ||
	    seq < pd_rdma_node_of(p->qp[idx].inflight.head)->seq || seq >= p->qp[idx].next_seq) {
		/* Not a WR of ours in flight: our own bookkeeping is broken,
		 * or the provider is. Fail the peer rather than guess. */
		PD_LOG_RL(ERR, rdma, "peer %u: work completion for unknown wr_id 0x%llx", p->id,
			  (unsigned long long)wc->wr_id);
		st = st ? st : -EPROTO;
		(void)pd_rdma_peer_fail_locked(p, st);
		return p->err;
	}
	if (st) {
		PD_LOG_RL(ERR, rdma, "peer %u qp %u: %s (vendor error 0x%x)", p->id, idx,
			  ibv_wc_status_str(wc->status), wc->vendor_err);
		(void)pd_rdma_peer_fail_locked(p, st);
		st = p->err; /* every write of a failed peer gets the first error */
	}
	q = &p->qp[idx];
	while (q->inflight.n && pd_rdma_node_of(q->inflight.head)->seq <= seq) {
		struct pd_rdma_node *n = pd_rdma_fifo_pop(&q->inflight);

		n->c.status = st;
		n->c.kind = PD_CPL_WRITE;
		pd_rdma_fifo_append(done, n);
		p->inflight--;
		p->outstanding--;
	}
	if (!p->inflight)
		PD_ASSERT(pthread_cond_broadcast(&p->drained) == 0);
	return st;
}

static void fifo_fail(struct pd_rdma_peer *p, struct pd_cplq_fifo *f, struct pd_cplq_fifo *done)
{
	struct pd_rdma_node *n;

	while ((n = pd_rdma_fifo_pop(f))) {
		n->c.status = p->err;
		n->c.kind = PD_CPL_WRITE;
		pd_rdma_fifo_append(done, n);
		p->outstanding--;
	}
}

void pd_rdma_peer_collect(struct pd_rdma_peer *p, struct pd_cplq_fifo *done)
{
	PD_ASSERT(p->err);
	for (uint32_t i = 0; i < p->nqps; i++)
		fifo_fail(p, &p->qp[i].inflight, done);
	p->inflight = 0;
	fifo_fail(p, &p->pending, done);
	PD_ASSERT(p->outstanding == 0);
	if (p->failed && p->peer_cpl) {
		p->peer_cpl->c.status = p->err;
		p->peer_cpl->c.kind = PD_CPL_PEER;
		pd_rdma_fifo_append(done, p->peer_cpl);
		p->peer_cpl = NULL;
	}
	PD_ASSERT(pthread_cond_broadcast(&p->drained) == 0);
}

/* ---- pd_rdma_post ------------------------------------------------------------------------ */

static int post_checks(const struct pd_rdma *r, const struct pd_rdma_peer *p,
		       const struct pd_xfer *x, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		int rc = pd_rdma_xfer_check(r, &p->rem, &x[i]);

		if (rc < 0)
			return rc;
	}
	return 0;
}

/* p->lock: accept @f's writes (already filled) or say why not. */
static int post_accept(struct pd_rdma_peer *p, struct pd_cplq_fifo *f, int *failed)
{
	int rc;

	if (p->err || p->closing)
		return -ENOTCONN;
	if (p->outstanding + f->n > p->r->o.queue_depth)
		return -EAGAIN;
	p->outstanding += f->n;
	pd_cplq_fifo_splice(&p->pending, f);
	rc = pd_rdma_sched(p);
	if (rc < 0)
		*failed = pd_rdma_peer_fail_locked(p, rc);
	return 0;
}

int pd_rdma_post(struct pd_rdma *r, uint32_t peer, const struct pd_xfer *x, uint32_t n)
{
	struct pd_cplq_fifo f = { 0 };
	struct pd_rdma_peer *p;
	int rc, failed = 0;
	uint32_t i = 0;

	if (!r || (!x && n))
		return -EINVAL;
	if (r->stopped)
		return -ESHUTDOWN;
	p = pd_rdma_peer_find(r, peer, NULL);
	if (!p)
		return -ENOENT;
	if (n > r->o.queue_depth)
		return -EINVAL;
	rc = post_checks(r, p, x, n);
	if (rc < 0 || n == 0)
		return rc;
	rc = pd_rdma_pool_get(r, n, &f);
	if (rc < 0)
		return rc;
	for (struct pd_cplq_node *c = f.head; c; c = c->next, i++) {
		struct pd_rdma_node *nd = pd_rdma_node_of(c);

		nd->x = x[i];
		nd->c.cookie = x[i].cookie;
		nd->c.peer = peer;
	}
	pd_lock(&p->lock);
	rc = post_accept(p, &f, &failed);
	pd_unlock(&p->lock);
	if (rc < 0) {
		pd_rdma_pool_put(r, &f);
		return rc;
	}
	if (failed) { /* the data thread tears the peer down */
		atomic_store_explicit(&r->need_reap, 1, memory_order_release);
		pd_rdma_wake(r);
	}
	return (int)n;
}
