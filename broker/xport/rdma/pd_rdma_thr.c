/* SPDX-License-Identifier: MIT */
/*
 * RDMA transport, the data thread. It sleeps in poll() on four fds: the
 * wake eventfd, the rdma_cm event channel, the completion channel and the
 * device's async event fd; with a timeout only while a connect deadline is
 * pending. Each wake-up, under r->lock: rdma_cm events, CQ events (drained
 * to empty), async events, deadlines, then the reaping of failed peers,
 * once every event has been acked.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_rdma_int.h"
#include "pd_time.h"

#define PD_RDMA_WC_BATCH   32
#define PD_RDMA_BACKOFF_MS 10

/* ---- completions ----------------------------------------------------------------------- */

/* Poll @p's CQ until empty; complete what the WCs cover; post what now fits. */
static void cq_drain(struct pd_rdma *r, struct pd_rdma_peer *p)
{
	struct ibv_wc wc[PD_RDMA_WC_BATCH];
	struct pd_cplq_fifo done = { 0 };
	int n, err = 0;

	do {
		n = r->v->poll_cq(p->cq, PD_RDMA_WC_BATCH, wc);
		if (n < 0) {
			err = n;
			break;
		}
		PD_RDMA_STAT_INC(r, wcs, (uint64_t)n);
		pd_lock(&p->lock);
		for (int i = 0; i < n; i++) {
			int rc = pd_rdma_wc_apply(p, &wc[i], &done);

			if (rc < 0) {
				PD_RDMA_STAT_INC(r, wc_errors, 1);
				err = err ? err : rc;
			}
		}
		pd_unlock(&p->lock);
	} while (n == PD_RDMA_WC_BATCH);
	pd_lock(&p->lock);
	if (!err)
		err = pd_rdma_sched(p);
	pd_unlock(&p->lock);
	pd_rdma_cq_push(r, &done);
	if (err)
		pd_rdma_peer_fail(r, p, err);
}

/* A channel that is readable but cannot be read would make poll() spin:
 * log it and let the thread back off a little (see thread_main). */
static int channel_error(struct pd_rdma *r, const char *what, int rc)
{
	if (rc == -EAGAIN || rc == -EINTR)
		return 0;
	PD_LOG_RL(ERR, rdma, "%s: %s", what, strerror(-rc));
	r->backoff = 1;
	return 1;
}

static void cq_events(struct pd_rdma *r)
{
	struct ibv_cq *cq;
	void *ctx;
	int rc;

	while ((rc = r->v->get_cq_event(r->comp, &cq, &ctx)) == 0) {
		struct pd_rdma_peer *p = ctx;
		int arm;

		PD_RDMA_STAT_INC(r, cq_events, 1);
		r->v->ack_cq_events(cq, 1);
		if (!p || p->cq != cq)
			continue;
		/* Re-arm before draining: a WC that lands after the drain
		 * raises a new event. */
		arm = r->v->req_notify_cq(cq);
		if (arm < 0)
			pd_rdma_peer_fail(r, p, arm);
		cq_drain(r, p);
	}
	(void)channel_error(r, "ibv_get_cq_event", rc);
}

/* ---- rdma_cm events -------------------------------------------------------------------- */

static void cm_events(struct pd_rdma *r)
{
	struct rdma_cm_event *ev;
	int rc;

	while ((rc = r->v->get_cm_event(r->cm, &ev)) == 0) {
		struct rdma_cm_id *dead = pd_rdma_cm_event(r, ev);

		r->v->ack_cm_event(ev);
		if (dead)
			r->v->destroy_id(dead);
	}
	(void)channel_error(r, "rdma_get_cm_event", rc);
}

/* ---- async events ---------------------------------------------------------------------- */

static struct pd_rdma_peer *qp_peer(struct ibv_qp *qp)
{
	struct pd_rdma_ctx *c = qp ? qp->qp_context : NULL;

	if (!c || c->type != PD_RDMA_CTX_QP)
		return NULL;
	return pd_container_of(c, struct pd_rdma_qp, hdr)->p;
}

static void fail_all(struct pd_rdma *r, int err)
{
	for (uint32_t i = 0; i < r->o.max_peers; i++) {
		if (r->peers[i] && !r->peers[i]->reaped)
			pd_rdma_peer_fail(r, r->peers[i], err);
	}
}

static void async_event(struct pd_rdma *r, const struct ibv_async_event *ev)
{
	struct pd_rdma_peer *p = NULL;

	switch (ev->event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_PATH_MIG_ERR:
		p = qp_peer(ev->element.qp);
		break;
	case IBV_EVENT_CQ_ERR:
		p = ev->element.cq ? ev->element.cq->cq_context : NULL;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		PD_LOG_RL(ERR, rdma, "device %s: fatal error", r->dev);
		fail_all(r, -ENODEV);
		return;
	default:
		return;
	}
	PD_LOG_RL(WARN, rdma, "async event: %s", ibv_event_type_str(ev->event_type));
	if (p && !p->reaped)
		pd_rdma_peer_fail(r, p, -EIO);
}

static void async_events(struct pd_rdma *r)
{
	struct ibv_async_event ev;
	int rc;

	while ((rc = r->v->get_async_event(r->ctx, &ev)) == 0) {
		PD_RDMA_STAT_INC(r, async_events, 1);
		async_event(r, &ev);
		r->v->ack_async_event(&ev);
	}
	(void)channel_error(r, "ibv_get_async_event", rc);
}

/* ---- deadlines, reaping -------------------------------------------------------------------- */

/* Fail peers past their connect deadline; @return the poll() timeout until
 * the next one (-1: none). */
static int deadlines(struct pd_rdma *r)
{
	uint64_t now = pd_now_ns(), next = 0;

	for (uint32_t i = 0; i < r->o.max_peers; i++) {
		struct pd_rdma_peer *p = r->peers[i];

		if (!p || !p->deadline_ns || p->reaped)
			continue;
		if (now >= p->deadline_ns) {
			p->deadline_ns = 0;
			pd_rdma_peer_fail(r, p, -ETIMEDOUT);
		} else if (!next || p->deadline_ns < next) {
			next = p->deadline_ns;
		}
	}
	if (!next)
		return -1;
	next = (next - now + PD_NS_PER_MS - 1) / PD_NS_PER_MS;
	return next > INT_MAX ? INT_MAX : (int)next;
}

static void reap_failed(struct pd_rdma *r)
{
	if (!atomic_exchange_explicit(&r->need_reap, 0, memory_order_acq_rel))
		return;
	for (uint32_t i = 0; i < r->o.max_peers; i++) {
		struct pd_rdma_peer *p = r->peers[i];
		int failed;

		if (!p || p->reaped)
			continue;
		pd_lock(&p->lock);
		failed = p->failed;
		pd_unlock(&p->lock);
		if (failed)
			pd_rdma_peer_reap(r, p);
	}
}

/* ---- the thread ------------------------------------------------------------------------------ */

/* One turn under r->lock. @return the next poll timeout, or INT_MIN to stop. */
static int turn(struct pd_rdma *r)
{
	int ms;

	pd_lock(&r->lock);
	if (r->stopping) {
		pd_unlock(&r->lock);
		return INT_MIN;
	}
	cm_events(r);
	cq_events(r);
	async_events(r);
	ms = deadlines(r);
	reap_failed(r);
	pd_unlock(&r->lock);
	return ms;
}

static void *thread_main(void *arg)
{
	struct pd_rdma *r = arg;
	struct pollfd pfd[4] = {
		{ .fd = r->wake_fd, .events = POLLIN },
		{ .fd = r->cm->fd, .events = POLLIN },
		{ .fd = r->comp->fd, .events = POLLIN },
		{ .fd = r->ctx->async_fd, .events = POLLIN },
	};
	int ms;

	while ((ms = turn(r)) != INT_MIN) {
		int rc;

		if (r->backoff) { /* never spin on a broken channel */
			r->backoff = 0;
			(void)poll(NULL, 0, PD_RDMA_BACKOFF_MS);
		}
		rc = poll(pfd, PD_ARRAY_SIZE(pfd), ms);
		if (rc < 0 && errno != EINTR) {
			PD_LOG_RL(ERR, rdma, "poll: %s", strerror(errno));
			r->backoff = 1;
		}
		if (pfd[0].revents)
			pd_efd_drain(r->wake_fd);
	}
	return NULL;
}

int pd_rdma_thread_start(struct pd_rdma *r)
{
	int rc = pd_thread_start(&r->thr, thread_main, r);

	r->started = rc == 0;
	return rc;
}

void pd_rdma_thread_stop(struct pd_rdma *r)
{
	if (!r->started)
		return;
	pd_lock(&r->lock);
	r->stopping = 1;
	pd_unlock(&r->lock);
	pd_rdma_wake(r);
	pd_thread_join(r->thr);
	r->started = 0;
}
