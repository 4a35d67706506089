/* SPDX-License-Identifier: MIT */
/*
 * A data transport's completion queue: see pd_cplq.h. The eventfd and lock
 * helpers are the TCP transport's.
 */
#include <errno.h>
#include <limits.h>
#include <unistd.h>

#include "pd_cplq.h"
#include "pd_sys.h"

/* ---- FIFOs ------------------------------------------------------------------------ */

void pd_cplq_fifo_append(struct pd_cplq_fifo *f, struct pd_cplq_node *n)
{
	n->next = NULL;
	if (f->tail)
		f->tail->next = n;
	else
		f->head = n;
	f->tail = n;
	f->n++;
}

struct pd_cplq_node *pd_cplq_fifo_pop(struct pd_cplq_fifo *f)
{
	struct pd_cplq_node *n = f->head;

	if (!n)
		return NULL;
	f->head = n->next;
	if (!f->head)
		f->tail = NULL;
	f->n--;
	n->next = NULL;
	return n;
}

void pd_cplq_fifo_splice(struct pd_cplq_fifo *dst, struct pd_cplq_fifo *src)
{
	if (!src->head)
		return;
	if (dst->tail)
		dst->tail->next = src->head;
	else
		dst->head = src->head;
	dst->tail = src->tail;
	dst->n += src->n;
	*src = (struct pd_cplq_fifo){ 0 };
}

/* ---- the queue ---------------------------------------------------------------------- */

int pd_cplq_init(struct pd_cplq *q, pthread_mutex_t *lock)
{
	int fd = pd_efd_create();

	if (fd < 0)
		return fd;
	*q = (struct pd_cplq){ .lock = lock, .fd = fd };
	return 0;
}

void pd_cplq_fini(struct pd_cplq *q)
{
	(void)close(q->fd);
	q->fd = -1;
}

/* The eventfd goes readable on the empty -> not empty edge only: one
 * write per batch, not per completion. */
void pd_cplq_push_locked(struct pd_cplq *q, struct pd_cplq_fifo *f)
{
	int was_empty = q->done.n == 0;

	if (!f->n)
		return;
	pd_cplq_fifo_splice(&q->done, f);
	if (was_empty)
		pd_efd_signal(q->fd);
}

void pd_cplq_add_locked(struct pd_cplq *q, struct pd_cplq_node *n)
{
	struct pd_cplq_fifo one = { 0 };

	pd_cplq_fifo_append(&one, n);
	pd_cplq_push_locked(q, &one);
}

int pd_cplq_poll(struct pd_cplq *q, struct pd_cpl *c, uint32_t max)
{
	uint32_t i = 0;

	if (!c && max)
		return -EINVAL;
	if (max > INT_MAX)
		max = INT_MAX;
	pd_lock(q->lock);
	for (; i < max && q->done.n; i++) {
		struct pd_cplq_node *n = pd_cplq_fifo_pop(&q->done);

		c[i] = (struct pd_cpl){ .cookie = n->cookie, .peer = n->peer, .status = n->status,
					.kind = n->kind };
		pd_cplq_fifo_append(&q->free, n);
	}
	/* Readable exactly while done is not empty: reset on the last one. */
	if (i && !q->done.n)
		pd_efd_drain(q->fd);
	pd_unlock(q->lock);
	return (int)i;
}
