/* SPDX-License-Identifier: MIT */
/* pdbroker: what agents submit (batches, cancels, receive-side questions). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_broker_int.h"
#include "pd_log.h"
#include "pd_time.h"


/* A failure of a PUT or DECLARE entry e that the engine does not report itself. */
static void complete(struct pd_broker *b, uint32_t agent, const struct pd_sqe *e, int32_t status)
{
	const struct pd_sqe_put *p = &e->u.put;
	uint32_t len = p->req_id_len <= PD_REQ_ID_MAX ? p->req_id_len : 0;
	struct pd_cqe c = { .type = PD_CQ_PUT_FAILED, .status = status, .user = e->user,
			    .req_id_len = (uint8_t)len, .rank = p->rank };

	memcpy(c.req_id, p->req_id, len);
	if (pd_agents_complete(b->agents, agent, &c) < 0)
		PD_LOG_RL(WARN, ctl, "agent %u: completion lost", agent);
}

/* ---- PUT ------------------------------------------------------------------------- */

static int chunk_ok(uint32_t agent, const struct pd_pool *pool, const struct pd_sqe *e)
{
	const struct pd_sqe_chunk *c = &e->u.chunk;
	struct pd_slot_desc d;

	/* Only a slot of the agent's own send pool: the pool's bounds refuse
	 * any other pool's. */
	return e->op == PD_SQ_CHUNK && c->klen >= 1 && c->klen <= PD_KEY_MAX &&
	       c->len <= pool->slot_size &&
	       pd_pool_desc_get(pool, PD_SLOT_REF_IDX(c->slot), &d) == 0 &&
	       d.gen == PD_SLOT_REF_GEN(c->slot) && d.owner == agent &&
	       atomic_load_explicit(&d.state, memory_order_relaxed) == PD_SLOT_LOANED;
}

static int put_ok(const struct pd_broker *b, uint32_t agent, const struct pd_pool *pool,
		  const struct pd_sqe *e, uint32_t n)
{
	const struct pd_sqe_put *p = &e->u.put;

	if (!b->tx || !pool || p->n != n - 1 || p->req_id_len == 0 ||
	    p->req_id_len > PD_REQ_ID_MAX || p->endpoint_len == 0 ||
	    p->endpoint_len > PD_ENDPOINT_MAX)
		return -EINVAL;
	for (uint32_t i = 1; i < n; i++)
		if (!chunk_ok(agent, pool, &e[i]))
			return -ESTALE;
	return 0;
}

/* The broker takes the slots: QUEUED, owned by the broker. */
static int take_slots(struct pd_broker *b, struct pd_pool *pool, const struct pd_sqe *e,
		      uint32_t n, struct pd_tx_chunk *ch, pd_slot_ref *refs)
{
	int rc;

	for (uint32_t i = 1; i < n; i++) {
		const struct pd_sqe_chunk *c = &e[i].u.chunk;

		ch[i - 1] = (struct pd_tx_chunk){ .slot = c->slot, .len = c->len,
						  .klen = (uint8_t)c->klen };
		memcpy(ch[i - 1].key, c->key, c->klen);
		refs[i - 1] = c->slot;
	}
	rc = pd_pool_set_state(pool, refs, n - 1, BROKER_OWNER, PD_SLOT_QUEUED);
	if (rc == 0)
		pd_broker_send_took(b, refs, n - 1);
	return rc;
}

static int submit_put(struct pd_broker *b, uint32_t agent, const struct pd_sqe *e, uint32_t n,
		      struct pd_tx_chunk *ch, pd_slot_ref *refs)
{
	const struct pd_sqe_put *p = &e->u.put;
	struct pd_tx_submit s = { .agent = agent, .req_id = p->req_id,
				  .req_id_len = p->req_id_len, .rank = p->rank,
				  .world_size = p->world_size, .total_chunks = p->total_chunks,
				  .is_last = p->last, .n = n - 1, .chunks = ch };
	int rc = pd_broker_peer_of(b, p->endpoint, p->endpoint_len, &s.peer);

	s.tag = pd_req_tag(p->req_id, p->req_id_len);
	if (rc < 0 || (rc = pd_tx_submit(b->tx, &s, pd_now_ns())) == -EINVAL || rc == -ENOMEM) {
		pd_broker_free_slots(b, refs, n - 1); /* the engine did not take them */
		return rc;
	}
	/* The engine took the slots (and freed them if it refused the batch);
	 * it reports failures of requests it holds itself. */
	return rc == -EBUSY || rc == -ENOENT ? rc : 0;
}

static int on_put(struct pd_broker *b, uint32_t agent, const struct pd_sqe *e, uint32_t n)
{
	struct pd_tx_chunk *ch = b->sc_chunks;
	pd_slot_ref *refs = b->sc_refs;
	struct pd_pool *pool = pd_broker_send_pool_of(b, agent);
	int rc = n > PD_PUT_MAX_CHUNKS + 1 ? -EINVAL : put_ok(b, agent, pool, e, n);

	if (rc == 0) {
		rc = take_slots(b, pool, e, n, ch, refs);
		if (rc < 0 && rc != -ESTALE && rc != -EINVAL) /* the pool's lock not to be had */
			pd_broker_free_slots(b, refs, n - 1);  /* as soon as it is */
	}
	if (rc == 0)
		rc = submit_put(b, agent, e, n, ch, refs);
	if (rc < 0)
		complete(b, agent, e, rc);
	return 0;
}

/* ---- DECLARE ---------------------------------------------------------------------- */

static int declare_ok(const struct pd_sqe *e)
{
	const struct pd_sqe_put *p = &e->u.put;

	return p->n == 0 && p->last == 0 && p->req_id_len >= 1 && p->req_id_len <= PD_REQ_ID_MAX &&
	       p->endpoint_len >= 1 && p->endpoint_len <= PD_ENDPOINT_MAX && p->world_size >= 1 &&
	       p->world_size <= PD_RX_MAX_RANKS && p->rank < p->world_size;
}

/* A request declared before staging: its Reserve goes out now. Failures the
 * engine does not report itself end the agent's request here. */
static void on_declare(struct pd_broker *b, uint32_t agent, const struct pd_sqe *e)
{
	const struct pd_sqe_put *p = &e->u.put;
	struct pd_tx_declare d = { .agent = agent, .req_id = p->req_id,
				   .req_id_len = p->req_id_len, .rank = p->rank,
				   .world_size = p->world_size, .total_chunks = p->total_chunks,
				   .timeout_ns = (uint64_t)e->arg * PD_NS_PER_MS };
	int rc = b->tx ? pd_broker_peer_of(b, p->endpoint, p->endpoint_len, &d.peer) : -EINVAL;

	d.tag = pd_req_tag(p->req_id, p->req_id_len);
	if (rc == 0)
		rc = pd_tx_declare(b->tx, &d, pd_now_ns());
	if (rc < 0 && rc != -ECANCELED)
		complete(b, agent, e, rc);
}

/* ---- cancel and the receive side ------------------------------------------------ */

static int req_ok(const struct pd_sqe *e)
{
	return e->u.req.req_id_len >= 1 && e->u.req.req_id_len <= PD_REQ_ID_MAX;
}

static void on_cancel(struct pd_broker *b, uint32_t agent, const struct pd_sqe *e)
{
	uint32_t rank = b->shm.agents->slot[agent - 1].tp_rank;

	if (b->tx)
		(void)pd_tx_cancel(b->tx, e->u.req.req_id, e->u.req.req_id_len, rank,
				   pd_now_ns());
}

static void forget(struct pd_broker *b, struct waiter *w)
{
	b->nwaits[w->agent]--;
	LIST_REMOVE(w, link);
	free(w);
}

/* Answer one waiting agent and forget the wait. */
static void answer(struct pd_broker *b, struct waiter *w, int32_t status, uint32_t chunks,
		   uint64_t tag)
{
	struct pd_cqe c = { .type = PD_CQ_RECV, .status = status, .chunks = chunks,
			    .req_tag = tag, .user = w->user, .req_id_len = w->req_len };

	memcpy(c.req_id, w->req, w->req_len);
	(void)pd_agents_complete(b->agents, w->agent, &c);
	forget(b, w);
}

/* Answer every agent waiting for this request. */
void pd_broker_recv_answer(struct pd_broker *b, const uint8_t *req, uint32_t len, int32_t status,
			uint32_t chunks, uint64_t tag)
{
	struct waiter *w, *next;

	for (w = LIST_FIRST(&b->waiters); w; w = next) {
		next = LIST_NEXT(w, link);
		if (w->req_len == len && !memcmp(w->req, req, len))
			answer(b, w, status, chunks, tag);
	}
}

static int add_waiter(struct pd_broker *b, uint32_t agent, const struct pd_sqe *e)
{
	struct waiter *w;

	if (agent > PD_MAX_AGENTS || b->nwaits[agent] >= PD_RECV_WAITS_MAX) {
		b->recv_waits_refused++;
		PD_LOG_RL(WARN, ctl, "agent %u: over %u recv waits at once: refused (-EUSERS; "
			  "%llu so far)", agent, PD_RECV_WAITS_MAX,
			  (unsigned long long)b->recv_waits_refused);
		return -EUSERS; /* never a request's status: the agent returns it */
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	b->nwaits[agent]++;
	w->agent = agent;
	w->user = e->user;
	w->deadline = pd_now_ns() + (e->arg ? (uint64_t)e->arg * PD_NS_PER_MS : b->cfg.recv_ttl_ns);
	w->req_len = e->u.req.req_id_len;
	memcpy(w->req, e->u.req.req_id, w->req_len);
	LIST_INSERT_HEAD(&b->waiters, w, link);
	return 0;
}

static void on_recv_wait(struct pd_broker *b, uint32_t agent, const struct pd_sqe *e)
{
	const struct pd_sqe_req *q = &e->u.req;
	struct pd_rx_req_view v = { 0 };
	int32_t status = 0;
	uint32_t st = b->rx ? pd_rx_state(b->rx, q->req_id, q->req_id_len, &v, &status) :
			      PD_RX_ENDED;
	struct pd_cqe c = { .type = PD_CQ_RECV, .user = e->user, .req_tag = v.tag,
			    .chunks = v.need, .req_id_len = q->req_id_len };

	memcpy(c.req_id, q->req_id, q->req_id_len);
	if (st == PD_RX_READY || st == PD_RX_ENDED) {
		c.status = !b->rx ? -EINVAL : st == PD_RX_READY ? 0 :
			   status ? status : -ENOENT; /* released already */
		(void)pd_agents_complete(b->agents, agent, &c);
	} else if ((c.status = add_waiter(b, agent, e)) < 0) {
		(void)pd_agents_complete(b->agents, agent, &c);
	}
}

static void on_recv_release(struct pd_broker *b, uint32_t agent, const struct pd_sqe *e)
{
	const struct pd_sqe_req *q = &e->u.req;
	struct pd_rx_req_view v = { 0 };
	struct pd_cqe c = { .type = PD_CQ_RELEASED, .user = e->user,
			    .req_id_len = q->req_id_len };

	memcpy(c.req_id, q->req_id, q->req_id_len);
	if (!b->rx) {
		c.status = -EINVAL;
	} else {
		(void)pd_rx_state(b->rx, q->req_id, q->req_id_len, &v, NULL);
		c.req_tag = v.tag;
		uint32_t rank = 0, size = 1;

		(void)pd_agents_tp(b->agents, agent, &rank, &size);
		c.status = pd_rx_release(b->rx, q->req_id, q->req_id_len, rank, size, pd_now_ns());
	}
	(void)pd_agents_complete(b->agents, agent, &c);
}

static int on_sqes(void *ctx, uint32_t agent, const struct pd_sqe *e, uint32_t n)
{
	struct pd_broker *b = ctx;

	switch (e->op) {
	case PD_SQ_PUT:
		return on_put(b, agent, e, n);
	case PD_SQ_DECLARE:
		if (!declare_ok(e))
			return -EPROTO;
		on_declare(b, agent, e);
		return 0;
	case PD_SQ_CANCEL:
		if (!req_ok(e))
			return -EPROTO;
		on_cancel(b, agent, e);
		return 0;
	case PD_SQ_PINS_DROPPED:
		pd_rx_reap(b->rx, pd_now_ns());
		return 0;
	case PD_SQ_RECV_WAIT:
		if (!req_ok(e))
			return -EPROTO;
		on_recv_wait(b, agent, e);
		return 0;
	case PD_SQ_RECV_RELEASE:
		if (!req_ok(e))
			return -EPROTO;
		on_recv_release(b, agent, e);
		return 0;
	default:
		return -EPROTO;
	}
}

static void on_attach(void *ctx, uint32_t agent, const struct pd_agent_slot *s)
{
	struct pd_broker *b = ctx;

	(void)s;
	pd_stat_set(&b->shm.seg.hdr->stats[PD_STAT_AGENTS], pd_agents_count(b->agents));
	(void)agent;
}

/* Waits whose caller gave up: answer -ETIME (not a request's status: the
 * agent takes it as its own timeout, or drops it) so they do not pile up. */
void pd_broker_waiters_expire(struct pd_broker *b, uint64_t now)
{
	struct waiter *w, *next;

	for (w = LIST_FIRST(&b->waiters); w; w = next) {
		next = LIST_NEXT(w, link);
		if (now >= w->deadline)
			answer(b, w, -ETIME, 0, 0);
	}
}

/* Agent's requests are aborted, its recv waits dropped. */
static void end_requests(struct pd_broker *b, uint32_t agent)
{
	struct waiter *w, *next;

	if (b->tx)
		(void)pd_tx_agent_gone(b->tx, agent, pd_now_ns());
	for (w = LIST_FIRST(&b->waiters); w; w = next) {
		next = LIST_NEXT(w, link);
		if (w->agent == agent)
			forget(b, w);
	}
}

/* Fenced (a lease broke): its requests end; its loans wait for on_detach. */
static void on_fence(void *ctx, uint32_t agent)
{
	end_requests(ctx, agent);
}

/* The agent is gone: its loans come back, its requests are aborted. */
static void on_detach(void *ctx, uint32_t agent)
{
	struct pd_broker *b = ctx;

	if (b->shm.has_send && pd_broker_send_reclaim(b, agent, NULL) < 0)
		pd_broker_reclaim_later(b, agent);
	pd_broker_send_detached(b, agent);
	end_requests(b, agent);
	pd_stat_add(&b->shm.seg.hdr->stats[PD_STAT_AGENTS_RECLAIMED], 1);
	pd_stat_set(&b->shm.seg.hdr->stats[PD_STAT_AGENTS], pd_agents_count(b->agents));
}

const struct pd_agents_ops pd_broker_agent_ops = {
	.on_sqes = on_sqes, .on_attach = on_attach, .on_detach = on_detach, .on_fence = on_fence,
};
