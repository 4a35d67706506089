/* SPDX-License-Identifier: MIT */
/* libpdagent, receive side: wait for a request, look chunks up, release. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_agent_ext.h"
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

/* Submit a request-scoped op (arg: PD_SQ_RECV_WAIT's broker-side timeout)
 * and wait at most timeout_ms for its answer. */
static int ask(struct pd_agent *a, uint32_t op, const char *req_id, uint32_t arg,
	       uint32_t timeout_ms, struct pd_cqe *answer)
{
	struct pd_sqe e = { .op = op, .arg = arg };
	int rc;

	if (pd_ag_req_copy(e.u.req.req_id, &e.u.req.req_id_len, req_id) < 0)
		return -EINVAL;
	e.user = next_user(a);
	rc = pd_ag_submit(a, &e, 1);
	return rc < 0 ? rc : pd_ag_wait_mail(a, e.user, answer, timeout_ms);
}

int pd_recv_wait(struct pd_agent *a, const char *req_id, uint32_t timeout_ms,
		 struct pd_recv_info *info)
{
	return pd_ag_recv_wait_tag(a, req_id, timeout_ms, info, NULL);
}

int pd_ag_recv_wait_tag(struct pd_agent *a, const char *req_id, uint32_t timeout_ms,
			struct pd_recv_info *info, uint64_t *req_tag)
{
	struct pd_cqe c;
	int rc;
	AG_LOG_SCOPE(a);

	if (!recv_side(a) || !info)
		return -EINVAL;
	/* 0, do not wait: the broker answers at once for a request complete or
	 * failed, else expires the ask (1 ms) at its next tick. Its arg 0
	 * would mean "no deadline". */
	rc = timeout_ms ? ask(a, PD_SQ_RECV_WAIT, req_id, timeout_ms, timeout_ms, &c) :
			  ask(a, PD_SQ_RECV_WAIT, req_id, 1, AG_ASK_MS, &c);
	if (rc < 0)
		return rc;
	if (c.status == -ETIME) /* the broker expired the wait: our timeout, seen first there */
		return -ETIMEDOUT;
	if (c.status == -EUSERS) /* the broker refused the wait: too many at once */
		return -EUSERS;
	memset(info, 0, sizeof(*info));
	info->chunks = c.chunks;
	info->status = c.status;
	if (req_tag)
		*req_tag = c.req_tag;
	return 0;
}

/* ---- pins and their journal ------------------------------------------------------- */

int pd_ag_journal_init(struct pd_agent *a)
{
	uint32_t n = pd_layout_pins_count(&a->shm);

	if (!a->shm.has_recv || n == 0)
		return 0; /* no journal (an older broker): every lookup gets -ENOSPC */
	a->journal = pd_layout_pins(&a->shm, a->id - 1);
	if (!a->journal)
		return -EPROTO;
	a->free_cells = malloc((size_t)n * sizeof(*a->free_cells));
	if (!a->free_cells)
		return -ENOMEM;
	a->njournal = n;
	/* The broker emptied the journal before admitting us; a cell that is
	 * not empty anyway is left alone (pd_index_pin would refuse it). */
	for (uint32_t i = n; i-- > 0;)
		if (atomic_load_explicit(&a->journal[i], memory_order_relaxed) == 0)
			a->free_cells[a->nfree_cells++] = i;
	return 0;
}

/* A cell goes back on the stack only when empty: one still holding a
 * hazard (its unpin failed) stays out of use until the broker empties it. */
static void put_cell_locked(struct pd_agent *a, uint32_t cell)
{
	if (atomic_load_explicit(&a->journal[cell], memory_order_relaxed) == 0)
		a->free_cells[a->nfree_cells++] = cell;
}

/* A free journal cell, with room to remember its pin: the cell number;
 * -ENOSPC none free; -ENOMEM. */
static int reserve_cell(struct pd_agent *a)
{
	uint32_t taken;
	int rc = 0;

	(void)pthread_mutex_lock(&a->lock);
	taken = a->njournal - a->nfree_cells + 1; /* at most one pin per taken cell */
	if (a->nfree_cells == 0) {
		rc = -ENOSPC;
	} else if (taken > a->pins_cap) {
		uint32_t cap = a->pins_cap ? 2 * a->pins_cap : 64;
		struct ag_pin *p;

		cap = cap < taken ? taken : cap > a->njournal ? a->njournal : cap;
		p = realloc(a->pins, (size_t)cap * sizeof(*p));
		if (p) {
			a->pins = p;
			a->pins_cap = cap;
		}
		rc = p ? 0 : -ENOMEM;
	}
	if (rc == 0)
		rc = (int)a->free_cells[--a->nfree_cells];
	(void)pthread_mutex_unlock(&a->lock);
	return rc;
}

/* The lookup is over: remember its pin, or give the cell back. */
static void settle_cell(struct pd_agent *a, uint32_t cell, int pinned, uint64_t rec,
			uint64_t tag)
{
	struct ag_pin *p;

	(void)pthread_mutex_lock(&a->lock);
	if (!pinned) {
		put_cell_locked(a, cell);
	} else {
		p = &a->pins[a->npins++]; /* reserve_cell() made room */
		p->req_tag = tag;
		p->cell = cell;
		p->rec = rec;
	}
	(void)pthread_mutex_unlock(&a->lock);
}

int pd_recv_lookup(struct pd_agent *a, const void *key, uint32_t klen, const void **ptr,
		   uint32_t *len)
{
	return pd_ag_recv_lookup_tag(a, key, klen, ptr, len, NULL);
}

int pd_ag_recv_lookup_tag(struct pd_agent *a, const void *key, uint32_t klen,
			  const void **ptr, uint32_t *len, uint64_t *req_tag)
{
	struct pd_index_val v;
	const void *data = NULL;
	int cell, rc;
	AG_LOG_SCOPE(a);

	if (!recv_side(a) || !key || klen == 0 || klen > PD_KEY_MAX || !ptr || !len)
		return -EINVAL;
	/* Seen gone by any call (no syscall here: lookups are the hot path):
	 * a pin now would be in a journal nobody reads, never released; nor
	 * does a fenced agent pin again (the broker dropped its pins). */
	if (atomic_load(&a->gone) || pd_ag_fenced(a) ||
	    atomic_load_explicit(&a->shm.seg.hdr->state, memory_order_acquire) == PD_SHM_DEAD)
		return -ENOTCONN;
	cell = reserve_cell(a);
	if (cell < 0)
		return cell;
	rc = pd_index_pin(&a->shm.index, key, klen, &v, &a->journal[cell]);
	if (rc == -EAGAIN)
		rc = -ENOENT; /* the entry kept changing: not (yet) here for us */
	if (rc == 0 && v.len <= a->shm.recv.slot_size)
		data = pd_pool_data(&a->shm.recv, PD_SLOT_REF(v.slot, v.gen));
	if (rc == 0 && !data) {
		(void)pd_index_unpin(&a->journal[cell], v.hazard);
		rc = -ENOENT;
	}
	settle_cell(a, (uint32_t)cell, rc == 0, rc == 0 ? v.hazard : 0, rc == 0 ? v.req : 0);
	if (rc < 0)
		return rc;
	*ptr = data;
	*len = v.len;
	if (req_tag)
		*req_tag = v.req;
	return 0;
}

/* Drop one pin (clear its hazard), a->lock held. */
static void unpin_locked(struct pd_agent *a, const struct ag_pin *p)
{
	(void)pd_index_unpin(&a->journal[p->cell], p->rec);
	put_cell_locked(a, p->cell);
}

/* Drop this agent's pins on the request's chunks. */
/* @return pins dropped. */
static uint32_t unpin_request(struct pd_agent *a, uint64_t tag)
{
	uint32_t i = 0, n = 0;

	(void)pthread_mutex_lock(&a->lock);
	while (i < a->npins) {
		if (a->pins[i].req_tag != tag) {
			i++;
			continue;
		}
		unpin_locked(a, &a->pins[i]);
		a->pins[i] = a->pins[--a->npins];
		n++;
	}
	(void)pthread_mutex_unlock(&a->lock);
	return n;
}

/* Detach: drop every pin while the broker lives. Once it is gone (dead,
 * stopping, or it dropped us) our journal is its to empty: touching the
 * cells then could meet a new agent's records in the same slot. */
void pd_ag_unpin_all(struct pd_agent *a)
{
	int live = pd_ag_check_broker(a) == 0;

	(void)pthread_mutex_lock(&a->lock);
	for (uint32_t i = 0; live && i < a->npins; i++)
		unpin_locked(a, &a->pins[i]);
	a->npins = 0;
	(void)pthread_mutex_unlock(&a->lock);
}

int pd_recv_release(struct pd_agent *a, const char *req_id)
{
	return pd_ag_recv_release_tag(a, req_id, NULL);
}

int pd_ag_recv_release_tag(struct pd_agent *a, const char *req_id, uint64_t *req_tag)
{
	struct pd_cqe c;
	int rc;
	AG_LOG_SCOPE(a);

	if (!recv_side(a))
		return -EINVAL;
	rc = ask(a, PD_SQ_RECV_RELEASE, req_id, 0, AG_ASK_MS, &c);
	if (rc < 0)
		return rc;
	if (req_tag)
		*req_tag = c.req_tag;
	/* The broker freed what no one pins; our pinned slots go when we
	 * unpin, and telling it lets it free them now, not at its next tick. */
	if (unpin_request(a, c.req_tag)) {
		struct pd_sqe d = { .op = PD_SQ_PINS_DROPPED };

		(void)pd_ag_submit(a, &d, 1);
	}
	return c.status;
}
