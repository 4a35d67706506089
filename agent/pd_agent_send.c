/* SPDX-License-Identifier: MIT */
/* libpdagent, send side: loans, batches, cancels, events. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_agent_int.h"
#include "pd_time.h"

int pd_alloc(struct pd_agent *a, const char *req_id, uint32_t n, pd_slot_ref *slots,
	     uint32_t timeout_ms)
{
	size_t len = req_id ? strnlen(req_id, PD_REQ_ID_MAX + 1) : 0;
	uint64_t deadline = pd_deadline_ms(timeout_ms) | 1; /* never 0: "do not wait" */
	struct pd_pool_who who;
	int rc;
	AG_LOG_SCOPE(a);

	if (!pd_ag_sends(a) || !slots || n == 0 || len == 0 || len > PD_REQ_ID_MAX)
		return -EINVAL;
	if (pd_ag_check_broker(a) < 0)
		return -ENOTCONN;
	who = (struct pd_pool_who){ .owner = a->id, .pid = (int32_t)getpid(),
				    .tag = pd_ag_tag(req_id, (uint32_t)len), .state = PD_SLOT_LOANED,
				    .check = pd_ag_check_broker, .check_ctx = a };
	if (pd_ag_is_cancelled(a, who.tag))
		return -ECANCELED;
	/* Admission first, holding nothing; then the staging, FIFO. */
	rc = pd_ag_wait_admitted(a, (const uint8_t *)req_id, (uint32_t)len, deadline);
	if (rc < 0)
		return rc;
	rc = pd_pool_alloc(a->shm.send, &who, n, deadline, slots);
	if (rc == 0 && pd_ag_is_cancelled(a, who.tag)) {
		(void)pd_pool_free(a->shm.send, slots, n); /* cancelled meanwhile */
		rc = -ECANCELED;
	}
	return rc == -ENOBUFS ? -ETIMEDOUT : rc;
}

static int decl_ok(const struct pd_agent *a, const struct pd_decl *d)
{
	size_t ep = d && d->endpoint ? strnlen(d->endpoint, PD_ENDPOINT_MAX + 1) : 0;

	return pd_ag_sends(a) && d && ep && ep <= PD_ENDPOINT_MAX && !d->flags &&
	       d->world_size >= 1 && d->world_size <= PD_WORLD_MAX && d->rank < d->world_size &&
	       pd_ag_zeroed(d->reserved, sizeof(d->reserved));
}

int pd_declare(struct pd_agent *a, const struct pd_decl *d)
{
	struct pd_sqe e = { .op = PD_SQ_DECLARE };
	struct pd_sqe_put *p = &e.u.put;
	int rc;
	AG_LOG_SCOPE(a);

	if (!decl_ok(a, d) || pd_ag_req_copy(p->req_id, &p->req_id_len, d->req_id) < 0)
		return -EINVAL;
	if (pd_ag_check_broker(a) < 0)
		return -ENOTCONN;
	e.arg = d->timeout_ms;
	p->total_chunks = d->total_chunks;
	p->world_size = d->world_size;
	p->rank = d->rank;
	p->endpoint_len = (uint8_t)strlen(d->endpoint);
	memcpy(p->endpoint, d->endpoint, p->endpoint_len);
	(void)pthread_mutex_lock(&a->lock);
	rc = pd_reqtab_declare(&a->reqs, p->req_id, p->req_id_len, d->rank);
	(void)pthread_mutex_unlock(&a->lock);
	if (rc < 0)
		return rc;
	rc = pd_ag_submit(a, &e, 1);
	if (rc < 0) { /* never reached the broker */
		(void)pthread_mutex_lock(&a->lock);
		pd_reqtab_undeclare(&a->reqs, p->req_id, p->req_id_len, d->rank);
		(void)pthread_mutex_unlock(&a->lock);
	}
	return rc;
}

int pd_req_state(struct pd_agent *a, const char *req_id, int32_t *status)
{
	uint8_t id[PD_REQ_ID_MAX], len;
	int rc;
	AG_LOG_SCOPE(a);

	if (!pd_ag_sends(a) || pd_ag_req_copy(id, &len, req_id) < 0)
		return -EINVAL;
	if (pd_ag_check_broker(a) < 0)
		return -ENOTCONN;
	pd_ag_poll(a, 1);
	(void)pthread_mutex_lock(&a->lock);
	rc = pd_reqtab_state(&a->reqs, id, len, status);
	(void)pthread_mutex_unlock(&a->lock);
	return rc;
}

/* Loaned to this agent, at the generation the caller holds. */
static int loaned(struct pd_agent *a, pd_slot_ref ref)
{
	struct pd_slot_desc d;

	return pd_pool_desc_get(a->shm.send, PD_SLOT_REF_IDX(ref), &d) == 0 &&
	       d.gen == PD_SLOT_REF_GEN(ref) && d.owner == a->id &&
	       atomic_load_explicit(&d.state, memory_order_relaxed) == PD_SLOT_LOANED;
}

void *pd_slot_data(struct pd_agent *a, pd_slot_ref slot)
{
	return pd_ag_sends(a) && loaned(a, slot) ? pd_pool_data(a->shm.send, slot) : NULL;
}

int pd_slot_release(struct pd_agent *a, const pd_slot_ref *slots, uint32_t n)
{
	AG_LOG_SCOPE(a);

	if (!pd_ag_sends(a) || (n && !slots))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!loaned(a, slots[i]))
			return -ESTALE;
	return pd_pool_free(a->shm.send, slots, n);
}

/* ---- pd_put -------------------------------------------------------------------- */

static int batch_ok(struct pd_agent *a, const struct pd_batch *b)
{
	size_t ep = b->endpoint ? strnlen(b->endpoint, PD_ENDPOINT_MAX + 1) : 0;

	if (ep == 0 || ep > PD_ENDPOINT_MAX || (b->n && !b->chunks) || b->world_size == 0 ||
	    !pd_ag_zeroed(b->reserved, sizeof(b->reserved)) ||
	    b->rank >= b->world_size || b->n > b->total_chunks || (b->n == 0 && !b->last) ||
	    b->n > PD_PUT_MAX_CHUNKS || b->n + 1 > a->shm.sq_entries)
		return -EINVAL;
	for (uint32_t i = 0; i < b->n; i++) {
		const struct pd_chunk *c = &b->chunks[i];

		if (!c->key || c->klen == 0 || c->klen > PD_KEY_MAX ||
		    c->len > a->shm.send->slot_size || !pd_ag_zeroed(c->reserved, sizeof(c->reserved)))
			return -EINVAL;
		if (!loaned(a, c->slot))
			return -ESTALE;
	}
	return 0;
}

static int grow_buf(struct pd_agent *a, uint32_t n)
{
	struct pd_sqe *p;

	if (a->sqbuf_cap >= n)
		return 0;
	p = realloc(a->sqbuf, n * sizeof(*p));
	if (!p)
		return -ENOMEM;
	a->sqbuf = p;
	a->sqbuf_cap = n;
	return 0;
}

static void fill_put(struct pd_sqe *e, const struct pd_batch *b)
{
	struct pd_sqe_put *p = &e[0].u.put;

	memset(e, 0, (b->n + 1) * sizeof(*e));
	e[0].op = PD_SQ_PUT;
	*p = (struct pd_sqe_put){ .n = b->n, .total_chunks = b->total_chunks,
				  .world_size = b->world_size, .rank = b->rank,
				  .last = b->last ? 1 : 0 };
	(void)pd_ag_req_copy(p->req_id, &p->req_id_len, b->req_id);
	p->endpoint_len = (uint8_t)strlen(b->endpoint);
	memcpy(p->endpoint, b->endpoint, p->endpoint_len);
	for (uint32_t i = 0; i < b->n; i++) {
		struct pd_sqe_chunk *c = &e[i + 1].u.chunk;

		e[i + 1].op = PD_SQ_CHUNK;
		c->slot = b->chunks[i].slot;
		c->len = b->chunks[i].len;
		c->klen = b->chunks[i].klen;
		memcpy(c->key, b->chunks[i].key, c->klen);
	}
}

int pd_put(struct pd_agent *a, const struct pd_batch *b)
{
	uint8_t tmp[PD_REQ_ID_MAX], tlen;
	int rc;
	AG_LOG_SCOPE(a);

	if (!pd_ag_sends(a) || !b || pd_ag_req_copy(tmp, &tlen, b->req_id) < 0)
		return -EINVAL;
	rc = batch_ok(a, b);
	if (rc < 0)
		return rc;
	if (pd_ag_check_broker(a) < 0)
		return -ENOTCONN;
	/* Built and submitted under sq_lock: one producer at a time. */
	(void)pthread_mutex_lock(&a->sq_lock);
	rc = grow_buf(a, b->n + 1);
	if (rc == 0) {
		fill_put(a->sqbuf, b);
		rc = pd_ag_submit_locked(a, a->sqbuf, b->n + 1);
	}
	(void)pthread_mutex_unlock(&a->sq_lock);
	return rc;
}

int pd_cancel(struct pd_agent *a, const char *req_id)
{
	struct pd_sqe e = { .op = PD_SQ_CANCEL };
	uint64_t deadline = pd_deadline_ms(1000);
	int rc;
	AG_LOG_SCOPE(a);

	if (!a || pd_ag_req_copy(e.u.req.req_id, &e.u.req.req_id_len, req_id) < 0)
		return -EINVAL;
	pd_ag_mark_cancelled(a, pd_ag_tag(e.u.req.req_id, e.u.req.req_id_len));
	if (pd_ag_sends(a))
		(void)pd_pool_cancel(a->shm.send, pd_ag_tag(e.u.req.req_id, e.u.req.req_id_len));
	/* A cancel must reach the broker: wait (bounded) for ring room. */
	while ((rc = pd_ag_submit(a, &e, 1)) == -EAGAIN && pd_now_ns() < deadline)
		(void)usleep(1000);
	return rc;
}

int pd_next_event(struct pd_agent *a, struct pd_event *ev, uint32_t timeout_ms)
{
	struct pd_cqe c;
	int rc;
	AG_LOG_SCOPE(a);

	if (!a || !ev)
		return -EINVAL;
	rc = pd_ag_wait_event(a, &c, timeout_ms);
	if (rc < 0)
		return rc;
	memset(ev, 0, sizeof(*ev));
	ev->type = c.type == PD_CQ_PUT_DONE ? PD_EV_PUT_DONE :
		   c.type == PD_CQ_ADMITTED ? PD_EV_ADMITTED : PD_EV_PUT_FAILED;
	ev->status = c.status;
	ev->chunks = c.chunks;
	ev->bytes = c.bytes;
	memcpy(ev->req_id, c.req_id, c.req_id_len < sizeof(ev->req_id) ? c.req_id_len : 0);
	return 0;
}
