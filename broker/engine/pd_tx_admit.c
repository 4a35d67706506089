/* SPDX-License-Identifier: MIT */
/*
 * Sender request engine (pd_tx.h): how requests start. A request is
 * declared before any of it is staged; its Reserve goes to the peer at
 * once, so admission overlaps the prefill's compute, and only an admitted
 * request takes batches (pd_tx.c refuses the others). The Reserve is a
 * batch of no chunks on its own deadline list (declarations may carry
 * deadlines of their own, so the list is kept sorted). Its answer may
 * carry grants for the rank's first chunks (pd_tx.h), kept with the
 * request until its batches use them or it ends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_log.h"
#include "pd_tx_int.h"

static int declare_valid(const struct pd_tx_declare *d)
{
	return d && d->req_id && d->req_id_len && d->req_id_len <= PD_REQ_ID_MAX &&
	       d->world_size && d->rank < d->world_size;
}

/* A rank declared after its request was cancelled: refused, and (once: a
 * tombstone of the rank remembers it) its agent told, as for any other
 * rank of the request. */
static int refuse_unseen(struct pd_tx *tx, const struct pd_tx_declare *d, uint64_t now_ns)
{
	struct pd_tx_result res = { .agent = d->agent, .peer = d->peer, .req_id = d->req_id,
				    .req_id_len = d->req_id_len, .rank = d->rank,
				    .world_size = d->world_size, .status = -ECANCELED };

	tx->st.refused++;
	if (!pd_tx_req_tomb_new(tx, d->req_id, d->req_id_len, d->rank,
				pd_tx_deadline(now_ns, tx->tombstone_ns)))
		return -ECANCELED; /* no room to remember: told again next time */
	if (tx->notify_failures)
		tx->ops.proxy_notif(tx->ctx, &res);
	tx->ops.agent_event(tx->ctx, &res);
	tx->st.requests_cancelled++;
	return -ECANCELED;
}

/* Put Reserve b on tx->admitting, kept in deadline order (walked from the
 * tail: most declarations use the same timeout, so this is O(1)). */
static void admitting_insert(struct pd_tx *tx, struct pd_tx_batch *b)
{
	struct pd_tx_batch *p = TAILQ_LAST(&tx->admitting, pd_tx_batch_list);

	while (p && p->deadline > b->deadline)
		p = TAILQ_PREV(p, pd_tx_batch_list, wait_link);
	if (p)
		TAILQ_INSERT_AFTER(&tx->admitting, p, b, wait_link);
	else
		TAILQ_INSERT_HEAD(&tx->admitting, b, wait_link);
	tx->st.admitting++;
}

static void admit(struct pd_tx *tx, struct pd_tx_req *r)
{
	struct pd_tx_result res;

	r->admit = PD_TXA_OK;
	tx->st.admitted++;
	pd_tx_result(r, &res);
	res.chunks = r->total;
	tx->ops.admitted(tx->ctx, &res);
}

int pd_tx_declare(struct pd_tx *tx, const struct pd_tx_declare *d, uint64_t now_ns)
{
	uint64_t after = d && d->timeout_ns ? d->timeout_ns : tx ? tx->alloc_timeout_ns : 0;
	struct pd_tx_batch_view v;
	struct pd_tx_batch *b;
	struct pd_tx_req *r;

	if (!tx || !declare_valid(d))
		return -EINVAL;
	if (pd_tx_req_find(tx, d->req_id, d->req_id_len, d->rank))
		return -EEXIST;
	if (pd_tx_req_find(tx, d->req_id, d->req_id_len, PD_TX_ANY_RANK))
		return refuse_unseen(tx, d, now_ns);
	if (tx->nreqs >= tx->max_requests)
		return -EBUSY;
	r = pd_tx_req_new(tx, d, now_ns);
	if (!r)
		return -ENOMEM;
	tx->st.declared++;
	if (d->total_chunks == 0) { /* nothing to send: nothing to reserve */
		admit(tx, r);
		return 0;
	}
	b = pd_tx_batch_new(tx, r, NULL, 0, after ? pd_tx_deadline(now_ns, after) : UINT64_MAX);
	if (!b) {
		pd_tx_req_unnew(tx, r);
		return -ENOMEM;
	}
	b->reserve = 1;
	b->asked = d->total_chunks < tx->admit_grants ? d->total_chunks : tx->admit_grants;
	admitting_insert(tx, b);
	r->admit = PD_TXA_WAIT;
	r->alloc_sent = 1; /* a CancelNotif now withdraws the reservation */
	pd_tx_batch_view(b, &v);
	tx->ops.send_reserve(tx->ctx, &v);
	return 0;
}

/* The grants an admitting answer carries: at most what was asked, every
 * one a slot. 0, -EPROTO, or -ENOMEM (then the request cannot use them). */
static int grants_take(struct pd_tx_req *r, const struct pd_tx_batch *b,
		       const struct pd_tx_resp *m)
{
	if (m->nalready || m->n > b->asked)
		return -EPROTO;
	for (uint32_t i = 0; i < m->n; i++)
		if (m->remote[i] < 0)
			return -EPROTO;
	if (!m->n)
		return 0;
	r->pg_remote = malloc((size_t)m->n * (sizeof(*r->pg_remote) + sizeof(*r->pg_gens)));
	if (!r->pg_remote)
		return -ENOMEM;
	r->pg_gens = (uint32_t *)(void *)(r->pg_remote + m->n);
	memcpy(r->pg_remote, m->remote, (size_t)m->n * sizeof(*r->pg_remote));
	for (uint32_t i = 0; i < m->n; i++)
		r->pg_gens[i] = m->gens ? m->gens[i] : 0;
	r->npg = m->n;
	r->pg_used = 0;
	return 0;
}

int pd_tx_reserve_done(struct pd_tx *tx, struct pd_tx_batch *b, const struct pd_tx_resp *m,
		       uint64_t now_ns)
{
	struct pd_tx_req *r = b->req;
	int rc = grants_take(r, b, m);

	if (rc < 0) {
		pd_tx_req_abort(tx, r, rc, PD_TX_WHY_FAIL, now_ns);
		return rc == -EPROTO ? rc : 0;
	}
	pd_tx_batch_del(tx, b);
	admit(tx, r);
	return 0;
}

void pd_tx_req_grants_drop(struct pd_tx_req *r)
{
	free(r->pg_remote);
	r->pg_remote = NULL;
	r->pg_gens = NULL;
	r->npg = r->pg_used = 0;
}

struct pd_tx_batch *pd_tx_grant_batch(struct pd_tx *tx, struct pd_tx_req *r,
				      const struct pd_tx_chunk *c, uint32_t n)
{
	struct pd_tx_batch *b;

	PD_ASSERT(n && n <= r->npg - r->pg_used);
	b = pd_tx_batch_new(tx, r, c, n, UINT64_MAX);
	if (!b)
		return NULL;
	b->state = PD_TXB_IDLE; /* on no wait list: nothing to wait for */
	b->bind = 1;
	memcpy(b->remote, r->pg_remote + r->pg_used, (size_t)n * sizeof(*b->remote));
	memcpy(b->gens, r->pg_gens + r->pg_used, (size_t)n * sizeof(*b->gens));
	b->nwrite = n;
	tx->st.live_batches++;
	return b;
}

int pd_tx_admit_expire(struct pd_tx *tx, uint64_t now_ns)
{
	struct pd_tx_batch *b;
	int n = 0;

	/* A Reserve waiting belongs to a LIVE request: each abort drops b. */
	while ((b = TAILQ_FIRST(&tx->admitting)) && b->deadline <= now_ns) {
		int one = pd_tx_req_abort(tx, b->req, -ETIMEDOUT, PD_TX_WHY_FAIL, now_ns);

		PD_ASSERT(one == 1);
		n++;
	}
	return n;
}

/* One live request's batches: only an admitted request has chunks; one
 * not admitted has exactly its Reserve. */
static int req_check(const struct pd_tx_req *r, uint64_t *batches, uint64_t *reserves)
{
	const struct pd_tx_batch *b;
	uint32_t nres = 0, nchunks = 0;

	TAILQ_FOREACH(b, &r->batches, req_link) {
		if (b->req != r || (b->reserve && b->n))
			return -EPROTO;
		nres += b->reserve;
		nchunks += b->n;
		*batches += !b->reserve;
	}
	*reserves += nres;
	if (r->state == PD_TXR_LIVE && r->admit == PD_TXA_WAIT)
		return nres == 1 && nchunks == 0 ? 0 : -EPROTO;
	return nres == 0 && (r->admit == PD_TXA_OK || nchunks == 0) ? 0 : -EPROTO;
}

int pd_tx_check(const struct pd_tx *tx)
{
	const struct pd_tx_req *r;
	uint64_t batches = 0, reserves = 0, live = 0;

	if (!tx)
		return -EINVAL;
	TAILQ_FOREACH(r, &tx->live, link) {
		if (r->state == PD_TXR_TOMB || req_check(r, &batches, &reserves) < 0)
			return -EPROTO;
		live++;
	}
	TAILQ_FOREACH(r, &tx->tombs, link)
		if (r->state != PD_TXR_TOMB || !TAILQ_EMPTY(&r->batches))
			return -EPROTO;
	if (batches != tx->st.live_batches || reserves != tx->st.admitting ||
	    live != tx->st.live_requests)
		return -EPROTO;
	return 0;
}
