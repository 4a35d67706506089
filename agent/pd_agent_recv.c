/* SPDX-License-Identifier: MIT */
/* libpdagent, receive side: wait for a request, look chunks up, release. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_agent_int.h"

static int recv_side(const struct pd_agent *a)
{
	return a && a->shm.has_recv;
}

static uint64_t next_user(struct pd_agent *a)
{
	uint64_t u;

	(void)pthread_mutex_lock(&a->lock);
	u = a->next_user++;
	(void)pthread_mutex_unlock(&a->lock);
	return u;
}

/* Submit a request-scoped op and wait for its answer. */
static int ask(struct pd_agent *a, uint32_t op, const char *req_id, uint32_t timeout_ms,
	       struct pd_cqe *answer)
{
	struct pd_sqe e = { .op = op };
	int rc;

	if (ag_req_copy(e.u.req.req_id, &e.u.req.req_id_len, req_id) < 0)
		return -EINVAL;
	e.user = next_user(a);
	rc = ag_submit(a, &e, 1);
	return rc < 0 ? rc : ag_wait_mail(a, e.user, answer, timeout_ms);
}

int pd_recv_wait(struct pd_agent *a, const char *req_id, uint32_t timeout_ms,
		 struct pd_recv_info *info)
{
	struct pd_cqe c;
	int rc;

	if (!recv_side(a) || !info)
		return -EINVAL;
	rc = ask(a, PD_SQ_RECV_WAIT, req_id, timeout_ms, &c);
	if (rc < 0)
		return rc;
	info->chunks = c.chunks;
	info->status = c.status;
	return 0;
}

static int remember_pin(struct pd_agent *a, const void *key, uint32_t klen, uint64_t tag)
{
	struct ag_pin *p;

	(void)pthread_mutex_lock(&a->lock);
	if (a->npins == a->pins_cap) {
		uint32_t cap = a->pins_cap ? 2 * a->pins_cap : 64;

		p = realloc(a->pins, cap * sizeof(*p));
		if (!p) {
			(void)pthread_mutex_unlock(&a->lock);
			return -ENOMEM;
		}
		a->pins = p;
		a->pins_cap = cap;
	}
	p = &a->pins[a->npins++];
	p->req_tag = tag;
	p->klen = (uint8_t)klen;
	memcpy(p->key, key, klen);
	(void)pthread_mutex_unlock(&a->lock);
	return 0;
}

int pd_recv_lookup(struct pd_agent *a, const void *key, uint32_t klen, const void **ptr,
		   uint32_t *len)
{
	struct pd_index_val v;
	const void *data;
	int rc;

	if (!recv_side(a) || !key || klen == 0 || klen > PD_KEY_MAX || !ptr || !len)
		return -EINVAL;
	rc = pd_index_pin(&a->shm.index, key, klen, &v);
	if (rc < 0)
		return rc;
	data = v.state == PD_INDEX_COMMITTED ?
	       pd_pool_data(&a->shm.recv, PD_SLOT_REF(v.slot, v.gen)) : NULL;
	if (!data || v.len > a->shm.recv.slot_size ||
	    remember_pin(a, key, klen, v.req) < 0) {
		(void)pd_index_unpin(&a->shm.index, key, klen);
		return data ? -ENOMEM : -ENOENT;
	}
	*ptr = data;
	*len = v.len;
	return 0;
}

/* Drop this agent's pins on the request's chunks. */
static void unpin_request(struct pd_agent *a, uint64_t tag)
{
	uint32_t i = 0;

	(void)pthread_mutex_lock(&a->lock);
	while (i < a->npins) {
		if (a->pins[i].req_tag != tag) {
			i++;
			continue;
		}
		(void)pd_index_unpin(&a->shm.index, a->pins[i].key, a->pins[i].klen);
		a->pins[i] = a->pins[--a->npins];
	}
	(void)pthread_mutex_unlock(&a->lock);
}

int pd_recv_release(struct pd_agent *a, const char *req_id)
{
	struct pd_cqe c;
	int rc;

	if (!recv_side(a))
		return -EINVAL;
	rc = ask(a, PD_SQ_RECV_RELEASE, req_id, 5000, &c);
	if (rc < 0)
		return rc;
	/* The broker freed what no one pins; our pinned slots go when we unpin. */
	unpin_request(a, c.req_tag);
	return c.status;
}
