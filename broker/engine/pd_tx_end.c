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
 *
 * The ranks of one request (same req_id, same peer) share its fate at the
 * receiver, which rolls the whole request back on the first CancelNotif.
 * So any rank's abort (a cancel, a lost agent, a failure) aborts every rank
 * of the request here, dropping their batches still waiting for grants;
 * CancelNotifs go out only once no rank of the request has a write in
 * flight (a write landing after the rollback could land in a slot already
 * granted to another request); a cancel also reaches ranks that already
 * completed (the receiver still waits for the others), and it is
 * remembered for ranks not seen yet.
 */
#include <errno.h>
#include <stdlib.h>
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
	uint64_t t0 = r->first_ns ? r->first_ns : r->start_ns;

	pd_tx_result(r, &res);
	tx->ops.proxy_notif(tx->ctx, &res);
	tx->ops.agent_event(tx->ctx, &res);
	tx->st.requests_done++;
	pd_stats_hist_add(&tx->req_hist, now_ns > t0 ? now_ns - t0 : 0);
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

/* Ranks of r's request (not the remembered cancel of unseen ranks). */
#define FOREACH_SIBLING(tx, r, s)                                                   \
	for ((s) = pd_tx_req_first((tx), (r)->req_id, (r)->req_id_len); (s);         \
	     (s) = pd_tx_req_next((tx), (s)))                                       \
		if ((s)->rank != PD_TX_ANY_RANK && (s)->peer == (r)->peer)

static int siblings_writing(struct pd_tx *tx, const struct pd_tx_req *r)
{
	struct pd_tx_req *s;

	FOREACH_SIBLING(tx, r, s)
		if (s->inflight)
			return 1;
	return 0;
}

/* The last rank of the request to drain (aborted or not) finishes every
 * aborted one. */
static void finish_aborted(struct pd_tx *tx, struct pd_tx_req *r, uint64_t now_ns)
{
	struct pd_tx_req *s;

	if (siblings_writing(tx, r))
		return;
	FOREACH_SIBLING(tx, r, s) {
		if (s->state == PD_TXR_ABORTING) {
			finish_failed(tx, s, now_ns); /* stays in the tree: the walk goes on */
		} else if (s->cancel_late == 1) {
			s->cancel_late = 2;
			tx->ops.cancel_notif(tx->ctx, s->peer, s->req_id, s->req_id_len, s->rank);
		}
	}
}

void pd_tx_req_end_done(struct pd_tx *tx, struct pd_tx_req *r, uint64_t now_ns)
{
	if (r->state == PD_TXR_LIVE && r->last_seen && r->completed == r->total)
		finish_done(tx, r, now_ns);
}

void pd_tx_req_settle(struct pd_tx *tx, struct pd_tx_req *r, uint64_t now_ns)
{
	pd_tx_req_end_done(tx, r, now_ns);
	if (!r->inflight) /* r may have been the last rank writing */
		finish_aborted(tx, r, now_ns);
}

static void abort_siblings(struct pd_tx *tx, struct pd_tx_req *r, int err, uint32_t why,
			   uint64_t now_ns)
{
	struct pd_tx_req *s;

	FOREACH_SIBLING(tx, r, s) {
		/* Ranks of another agent get PUT_FAILED -ECANCELED; ranks of the
		 * same gone agent stay silent. */
		uint32_t w = why == PD_TX_WHY_AGENT && s->agent != r->agent ? PD_TX_WHY_CANCEL : why;

		if (s != r && s->state == PD_TXR_LIVE)
			(void)pd_tx_req_abort(tx, s, err, w, now_ns);
	}
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
	pd_tx_req_grants_drop(r); /* the receiver takes them back with the rollback */
	drop_unposted(tx, r);
	/* Any end but success dooms the whole request: the receiver rolls it
	 * back on the first CancelNotif, so the other ranks go too. Their
	 * batches still waiting for grants are dropped (a grant arriving after
	 * the rollback must never be written: the slot may be another
	 * request's by then), their writes in flight finish first. A failed
	 * peer takes every request to it anyway. */
	if (why != PD_TX_WHY_PEER)
		abort_siblings(tx, r, err, why, now_ns);
	pd_tx_req_settle(tx, r, now_ns);
	return 1;
}

/* ---- entry points -------------------------------------------------------------- */

/* Ranks that completed before the cancel: the receiver still holds their
 * chunks and waits for the others, so tell it too, unless every rank of
 * the request completed (then there is nothing left to cancel). */
static void cancel_completed(struct pd_tx *tx, const uint8_t *req_id, uint32_t len,
			     uint64_t now_ns)
{
	struct pd_tx_req *r;
	uint32_t done = 0, world = 0, open = 0;

	for (r = pd_tx_req_first(tx, req_id, len); r; r = pd_tx_req_next(tx, r)) {
		if (r->rank == PD_TX_ANY_RANK)
			continue;
		world = r->world_size;
		done += r->state == PD_TXR_TOMB && r->status == 0;
		open += r->state != PD_TXR_TOMB;
	}
	if (done == 0 || (done == world && !open))
		return;
	for (r = pd_tx_req_first(tx, req_id, len); r; r = pd_tx_req_next(tx, r)) {
		if (r->rank == PD_TX_ANY_RANK || r->state != PD_TXR_TOMB || r->status ||
		    !r->alloc_sent || r->peer_failed || r->cancel_late)
			continue;
		r->cancel_late = 1; /* sent by finish_aborted() once no rank writes */
		finish_aborted(tx, r, now_ns);
	}
}

/* A cancel aborts every rank of the request here (they share its fate at
 * the receiver), reaches ranks that completed, and is remembered for ranks
 * not seen yet. The rank argument only says who asked. */
int pd_tx_cancel(struct pd_tx *tx, const uint8_t *req_id, uint32_t len, uint32_t rank,
		 uint64_t now_ns)
{
	struct pd_tx_req *r;
	int n = 0;

	(void)rank;
	if (!tx || !req_id || !len || len > PD_REQ_ID_MAX)
		return -EINVAL;
	for (r = pd_tx_req_first(tx, req_id, len); r; r = pd_tx_req_next(tx, r))
		n += r->state == PD_TXR_LIVE;
	/* Aborting never removes a request from the tree: the walk is safe.
	 * One abort takes the other ranks of its peer along. */
	for (r = pd_tx_req_first(tx, req_id, len); r; r = pd_tx_req_next(tx, r))
		(void)pd_tx_req_abort(tx, r, -ECANCELED, PD_TX_WHY_CANCEL, now_ns);
	cancel_completed(tx, req_id, len, now_ns);
	if (!pd_tx_req_find(tx, req_id, len, PD_TX_ANY_RANK))
		(void)pd_tx_req_tomb_new(tx, req_id, len, PD_TX_ANY_RANK,
					 pd_tx_deadline(now_ns, tx->tombstone_ns));
	return n;
}

static int is_who(const struct pd_tx_req *r, uint32_t who, uint32_t why)
{
	return (why == PD_TX_WHY_AGENT ? r->agent : r->peer) == who;
}

/* Abort every live or aborting request whose agent (or peer) is who. A scan:
 * agents and peers are lost rarely, and only requests not ended are walked.
 * An abort may end other requests (ranks of the same request), so the
 * matches are collected first; without memory for that, the walk restarts
 * after each abort. */
static int abort_all(struct pd_tx *tx, uint32_t who, int err, uint32_t why, uint64_t now_ns)
{
	struct pd_tx_req *r, **v;
	uint32_t n = 0, k = 0;
	int aborted = 0;

	TAILQ_FOREACH(r, &tx->live, link)
		n += is_who(r, who, why);
	v = n ? calloc(n, sizeof(*v)) : NULL;
	if (!v) {
		int again = 1;

		while (again) {
			again = 0;
			TAILQ_FOREACH(r, &tx->live, link) {
				if (is_who(r, who, why) && pd_tx_req_abort(tx, r, err, why, now_ns)) {
					aborted++;
					again = 1;
					break;
				}
			}
		}
		return aborted;
	}
	TAILQ_FOREACH(r, &tx->live, link)
		if (k < n && is_who(r, who, why))
			v[k++] = r;
	for (uint32_t i = 0; i < k; i++) /* none is freed meanwhile: ended ones are tombs */
		aborted += pd_tx_req_abort(tx, v[i], err, why, now_ns);
	free(v);
	return aborted;
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
	n += pd_tx_admit_expire(tx, now_ns);
	while ((r = TAILQ_FIRST(&tx->tombs)) && r->tomb_deadline <= now_ns) {
		TAILQ_REMOVE(&tx->tombs, r, link);
		tx->st.tombstones--;
		pd_tx_req_free(tx, r);
	}
	return n;
}
