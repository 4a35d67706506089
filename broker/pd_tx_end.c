/* SPDX-License-Identifier: MIT */
/*
 * Sender request engine (pd_tx.h): how requests end. A request ends once,
 * done or failed, and then stays tombstoned for tombstone_ns:
 *
 *   LIVE --(completed == total, last seen)--> TOMB: ProxyNotif + PUT_DONE
 *   LIVE --abort--> ABORTING --(no write in flight)--> TOMB: CancelNotif
 *        (unless the peer failed or it never sent anything), failure
 *        ProxyNotif (notify_failures), PUT_FAILED (unless the agent is gone)
 *
 * Aborting frees at once the staging of every batch without a write in
 * flight; the others keep theirs until their pd_tx_write_done().
 */
#include <errno.h>
#include <string.h>

#include "pd_log.h"
#include "pd_tx_int.h"

static void entomb(struct pd_tx *tx, struct pd_tx_req *r, uint64_t now_ns)
{
	PD_ASSERT(TAILQ_EMPTY(&r->batches) && !r->inflight);
	TAILQ_REMOVE(&tx->live, r, link);
	r->state = PD_TXR_TOMB;
	r->tomb_deadline = pd_tx_deadline(now_ns, tx->tombstone_ns);
	TAILQ_INSERT_TAIL(&tx->tombs, r, link);
	tx->st.live_requests--;
	tx->st.tombstones++;
}

static void finish_done(struct pd_tx *tx, struct pd_tx_req *r, uint64_t now_ns)
{
	struct pd_tx_result res;

	pd_tx_result(r, &res);
	tx->ops.proxy_notif(tx->ctx, &res);
	tx->ops.agent_event(tx->ctx, &res);
	tx->st.requests_done++;
	pd_stats_hist_add(&tx->req_hist, now_ns > r->start_ns ? now_ns - r->start_ns : 0);
	entomb(tx, r, now_ns);
}

static void finish_failed(struct pd_tx *tx, struct pd_tx_req *r, uint64_t now_ns)
{
	struct pd_tx_result res;

	pd_tx_result(r, &res);
	if (r->alloc_sent && !r->peer_failed)
		tx->ops.cancel_notif(tx->ctx, r->peer, r->req_id, r->req_id_len, r->rank);
	if (tx->notify_failures)
		tx->ops.proxy_notif(tx->ctx, &res);
	if (!r->agent_gone)
		tx->ops.agent_event(tx->ctx, &res);
	if (r->cancelled)
		tx->st.requests_cancelled++;
	else
		tx->st.requests_failed++;
	entomb(tx, r, now_ns);
}

void pd_tx_req_settle(struct pd_tx *tx, struct pd_tx_req *r, uint64_t now_ns)
{
	if (r->state == PD_TXR_LIVE && r->last_seen && r->completed == r->total)
		finish_done(tx, r, now_ns);
	else if (r->state == PD_TXR_ABORTING && !r->inflight)
		finish_failed(tx, r, now_ns);
}

/* Drop every batch of r that has no write in flight (its staging freed). */
static void drop_unposted(struct pd_tx *tx, struct pd_tx_req *r)
{
	struct pd_tx_batch *b, *next;

	for (b = TAILQ_FIRST(&r->batches); b; b = next) {
		next = TAILQ_NEXT(b, req_link);
		if (b->state != PD_TXB_WRITING)
			pd_tx_batch_drop(tx, b);
	}
}

int pd_tx_req_abort(struct pd_tx *tx, struct pd_tx_req *r, int err, uint32_t why,
		    uint64_t now_ns)
{
	if (why == PD_TX_WHY_AGENT)
		r->agent_gone = 1;
	if (why == PD_TX_WHY_PEER)
		r->peer_failed = 1;
	if (r->state != PD_TXR_LIVE)
		return 0;
	PD_ASSERT(err < 0);
	r->state = PD_TXR_ABORTING;
	r->status = err;
	r->cancelled = why == PD_TX_WHY_CANCEL || why == PD_TX_WHY_AGENT;
	tx->ops.wake_alloc(tx->ctx, r->tag);
	drop_unposted(tx, r);
	pd_tx_req_settle(tx, r, now_ns);
	return 1;
}

/* ---- entry points -------------------------------------------------------------- */

int pd_tx_cancel(struct pd_tx *tx, const uint8_t *req_id, uint32_t len, uint32_t rank,
		 uint64_t now_ns)
{
	struct pd_tx_req *r;
	int n = 0;

	if (!tx || !req_id || !len || len > PD_REQ_ID_MAX)
		return -EINVAL;
	if (rank != PD_TX_ANY_RANK) {
		r = pd_tx_req_find(tx, req_id, len, rank);
		return r ? pd_tx_req_abort(tx, r, -ECANCELED, PD_TX_WHY_CANCEL, now_ns) : 0;
	}
	/* Aborting never removes a request from the tree: the walk is safe. */
	for (r = pd_tx_req_first(tx, req_id, len); r; r = pd_tx_req_next(tx, r))
		n += pd_tx_req_abort(tx, r, -ECANCELED, PD_TX_WHY_CANCEL, now_ns);
	return n;
}

/* Abort every live or aborting request whose agent (or peer) is who. A scan:
 * agents and peers are lost rarely, and only requests not ended are walked. */
static int abort_all(struct pd_tx *tx, uint32_t who, int err, uint32_t why, uint64_t now_ns)
{
	struct pd_tx_req *r, *next;
	int n = 0;

	for (r = TAILQ_FIRST(&tx->live); r; r = next) {
		next = TAILQ_NEXT(r, link);       /* r may move to tx->tombs */
		if ((why == PD_TX_WHY_AGENT ? r->agent : r->peer) == who)
			n += pd_tx_req_abort(tx, r, err, why, now_ns);
	}
	return n;
}

int pd_tx_agent_gone(struct pd_tx *tx, uint32_t agent, uint64_t now_ns)
{
	if (!tx)
		return -EINVAL;
	return abort_all(tx, agent, -ECANCELED, PD_TX_WHY_AGENT, now_ns);
}

int pd_tx_peer_failed(struct pd_tx *tx, uint32_t peer, int err, uint64_t now_ns)
{
	if (!tx || err >= 0)
		return -EINVAL;
	return abort_all(tx, peer, err, PD_TX_WHY_PEER, now_ns);
}

int pd_tx_tick(struct pd_tx *tx, uint64_t now_ns)
{
	struct pd_tx_batch *b;
	struct pd_tx_req *r;
	int n = 0;

	if (!tx)
		return -EINVAL;
	/* Waiting batches belong to LIVE requests: each abort drops at least b. */
	while ((b = TAILQ_FIRST(&tx->waiting)) && b->deadline <= now_ns) {
		int one = pd_tx_req_abort(tx, b->req, -ETIMEDOUT, PD_TX_WHY_FAIL, now_ns);

		PD_ASSERT(one == 1);
		n++;
	}
	while ((r = TAILQ_FIRST(&tx->tombs)) && r->tomb_deadline <= now_ns) {
		TAILQ_REMOVE(&tx->tombs, r, link);
		tx->st.tombstones--;
		pd_tx_req_free(tx, r);
	}
	return n;
}
