/* SPDX-License-Identifier: MIT */
/*
 * shm transport: the instance, its copy pool, completion queue and data
 * threads. Peers are in pd_shmx_peer.c, the segment mapping in
 * pd_shmx_map.c. The eventfd and thread helpers are the TCP transport's
 * (signals blocked in data threads, non-blocking close-on-exec eventfds).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_shmx_int.h"
#include "pd_tcp_int.h"

void pd_shmx_opts_init(struct pd_shmx_opts *o)
{
	*o = (struct pd_shmx_opts){ .threads = 2, .max_peers = 16, .queue_depth = 1024 };
}

static int opts_valid(const struct pd_shmx_opts *o)
{
	return !o->flags && o->threads >= 1 && o->threads <= PD_SHMX_MAX_THREADS &&
	       o->max_peers >= 1 && o->max_peers <= PD_SHMX_MAX_PEERS && o->queue_depth >= 1 &&
	       o->queue_depth <= PD_SHMX_MAX_DEPTH;
}

/* ---- fifos, completions ------------------------------------------------------- */

void pd_shmx_fifo_append(struct pd_shmx_fifo *f, struct pd_shmx_node *n)
{
	n->next = NULL;
	if (f->tail)
		f->tail->next = n;
	else
		f->head = n;
	f->tail = n;
	f->n++;
}

struct pd_shmx_node *pd_shmx_fifo_pop(struct pd_shmx_fifo *f)
{
	struct pd_shmx_node *n = f->head;

	if (!n)
		return NULL;
	f->head = n->next;
	if (!f->head)
		f->tail = NULL;
	f->n--;
	n->next = NULL;
	return n;
}

/* The eventfd goes readable on the empty -> not empty edge only. Counted
 * under the lock: a completion polled is counted. */
void pd_shmx_cq_push_locked(struct pd_shmx *s, struct pd_shmx_node *n)
{
	if (n->kind == PD_SHMX_CPL_PEER) {
		PD_SHMX_STAT_INC(s, peer_failures, 1);
	} else if (n->status == 0) {
		PD_SHMX_STAT_INC(s, copies_ok, 1);
		PD_SHMX_STAT_INC(s, bytes, n->len);
	} else {
		PD_SHMX_STAT_INC(s, copies_failed, 1);
	}
	if (s->cq.n == 0)
		pd_tcp_efd_signal(s->cpl_fd);
	pd_shmx_fifo_append(&s->cq, n);
}

void pd_shmx_peer_settle_locked(struct pd_shmx *s, struct pd_shmx_peer *p)
{
	int rc;

	if (p->failed && p->outstanding == 0 && p->peer_cpl) {
		p->peer_cpl->status = p->err;
		pd_shmx_cq_push_locked(s, p->peer_cpl);
		p->peer_cpl = NULL;
	}
	if (p->halting && p->running == 0) {
		rc = pthread_cond_broadcast(&s->idle_cv);
		PD_ASSERT(rc == 0);
	}
}

void pd_shmx_copy_done_locked(struct pd_shmx *s, struct pd_shmx_node *n)
{
	struct pd_shmx_peer *p = n->p;

	n->status = p->err; /* a copy of a failing peer: may or may not have landed */
	n->p = NULL;
	p->outstanding--;
	pd_shmx_cq_push_locked(s, n);
	pd_shmx_peer_settle_locked(s, p);
}

void pd_shmx_wake_locked(struct pd_shmx *s, uint32_t n)
{
	int rc = 0;

	if (s->nidle == 0)
		return;
	if (n >= s->nidle)
		rc = pthread_cond_broadcast(&s->work_cv);
	else
		while (n-- && rc == 0)
			rc = pthread_cond_signal(&s->work_cv);
	PD_ASSERT(rc == 0);
}

int pd_shmx_poll(struct pd_shmx *s, struct pd_shmx_cpl *c, uint32_t max)
{
	uint32_t i = 0;

	if (!s || (!c && max))
		return -EINVAL;
	if (max > INT_MAX)
		max = INT_MAX;
	pd_shmx_lock(s);
	for (; i < max && s->cq.n; i++) {
		struct pd_shmx_node *n = pd_shmx_fifo_pop(&s->cq);

		c[i] = (struct pd_shmx_cpl){ .cookie = n->cookie, .peer = n->peer,
					     .status = n->status, .kind = n->kind };
		pd_shmx_fifo_append(&s->free, n);
	}
	/* Readable exactly while cq is not empty: reset on the last one. */
	if (i && !s->cq.n)
		pd_tcp_efd_drain(s->cpl_fd);
	pd_shmx_unlock(s);
	return (int)i;
}

int pd_shmx_event_fd(const struct pd_shmx *s)
{
	return s ? s->cpl_fd : -EINVAL;
}

void pd_shmx_get_stats(const struct pd_shmx *s, struct pd_shmx_stats *out)
{
	if (!out)
		return;
	if (!s) {
		memset(out, 0, sizeof(*out));
		return;
	}
#define PD_SHMX_STAT_COPY(n) out->n = pd_stat_get(&s->st.n);
	PD_SHMX_STAT_FIELDS(PD_SHMX_STAT_COPY)
#undef PD_SHMX_STAT_COPY
}

/* ---- data threads -------------------------------------------------------------- */

/* The next copy, sleeping while there is none; NULL once told to quit. */
static struct pd_shmx_node *next_work_locked(struct pd_shmx *s)
{
	while (!s->work.n && !s->quit) {
		int rc;

		s->nidle++;
		rc = pthread_cond_wait(&s->work_cv, &s->lock); /* no timeout: idle is free */
		PD_ASSERT(rc == 0);
		s->nidle--;
		PD_SHMX_STAT_INC(s, wakeups, 1);
	}
	return s->work.n ? pd_shmx_fifo_pop(&s->work) : NULL;
}

static void *worker_main(void *arg)
{
	struct pd_shmx *s = arg;
	struct pd_shmx_node *n;

	pd_shmx_lock(s);
	while ((n = next_work_locked(s))) {
		struct pd_shmx_peer *p = n->p;

		if (p->err) { /* failed since it was queued: never started */
			pd_shmx_copy_done_locked(s, n);
			continue;
		}
		p->running++;
		pd_shmx_unlock(s);
		if (n->len)
			memcpy(n->dst, n->src, n->len); /* bounds checked at post */
		pd_shmx_lock(s);
		p->running--;
		pd_shmx_copy_done_locked(s, n);
	}
	pd_shmx_unlock(s);
	return NULL;
}

static void threads_stop(struct pd_shmx *s)
{
	int rc;

	pd_shmx_lock(s);
	s->quit = 1;
	rc = pthread_cond_broadcast(&s->work_cv);
	PD_ASSERT(rc == 0);
	pd_shmx_unlock(s);
	while (s->nthr)
		pd_tcp_thread_join(s->thr[--s->nthr]);
}

static int threads_start(struct pd_shmx *s)
{
	int rc = 0;

	s->thr = calloc(s->o.threads, sizeof(*s->thr));
	if (!s->thr)
		return -ENOMEM;
	while (s->nthr < s->o.threads && rc == 0) {
		rc = pd_tcp_thread_start(&s->thr[s->nthr], worker_main, s);
		if (rc == 0)
			s->nthr++;
	}
	if (rc < 0)
		threads_stop(s);
	return rc;
}

/* ---- instance ----------------------------------------------------------------- */

/* One node per copy a peer may have outstanding, plus its peer completion. */
static int pool_init(struct pd_shmx *s)
{
	uint64_t n = (uint64_t)s->o.max_peers * (s->o.queue_depth + 1u);

	s->nodes = calloc(n, sizeof(*s->nodes));
	if (!s->nodes)
		return -ENOMEM;
	s->nnodes = (uint32_t)n;
	for (uint32_t i = 0; i < s->nnodes; i++)
		pd_shmx_fifo_append(&s->free, &s->nodes[i]);
	return 0;
}

static int sync_init(struct pd_shmx *s)
{
	int rc = pd_pthread_rc(pthread_mutex_init(&s->lock, NULL));

	if (rc < 0)
		return rc;
	rc = pd_pthread_rc(pthread_cond_init(&s->work_cv, NULL));
	if (rc < 0)
		goto out_destroy_lock;
	rc = pd_pthread_rc(pthread_cond_init(&s->idle_cv, NULL));
	if (rc < 0)
		goto out_destroy_work;
	return 0;

out_destroy_work:
	(void)pthread_cond_destroy(&s->work_cv);
out_destroy_lock:
	(void)pthread_mutex_destroy(&s->lock);
	return rc;
}

static void sync_fini(struct pd_shmx *s)
{
	(void)pthread_cond_destroy(&s->idle_cv);
	(void)pthread_cond_destroy(&s->work_cv);
	(void)pthread_mutex_destroy(&s->lock);
}

int pd_shmx_create(const struct pd_shmx_opts *o, struct pd_shmx **out)
{
	struct pd_shmx *s;
	int rc = -ENOMEM;

	if (!o || !out || !opts_valid(o))
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->o = *o;
	s->peers = calloc(o->max_peers, sizeof(*s->peers));
	if (!s->peers || pool_init(s) < 0)
		goto out_free;
	rc = sync_init(s);
	if (rc < 0)
		goto out_free;
	rc = s->cpl_fd = pd_tcp_eventfd();
	if (rc < 0)
		goto out_fini_sync;
	rc = threads_start(s);
	if (rc < 0)
		goto out_close_fd;
	*out = s;
	return 0;

out_close_fd:
	(void)close(s->cpl_fd);
out_fini_sync:
	sync_fini(s);
out_free:
	free(s->thr);
	free(s->nodes);
	free(s->peers);
	free(s);
	return rc;
}

void pd_shmx_stop(struct pd_shmx *s)
{
	if (!s || s->stopped)
		return;
	s->stopped = 1;
	pd_shmx_peers_stop(s);
	threads_stop(s);
}

void pd_shmx_destroy(struct pd_shmx *s)
{
	if (!s)
		return;
	pd_shmx_stop(s);
	(void)close(s->cpl_fd);
	sync_fini(s);
	free(s->thr);
	free(s->nodes);
	free(s->peers);
	free(s);
}
