/* SPDX-License-Identifier: MIT */
/*
 * shm transport: the instance, its copy pool, completion queue (pd_cplq.h)
 * and data threads. Peers are in pd_shmx_peer.c, the segment mapping in
 * pd_shmx_map.c. The thread helpers are the TCP transport's (signals
 * blocked in data threads).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_pages.h"
#include "pd_shmx_int.h"
#include "pd_sys.h"

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

/* ---- completions ---------------------------------------------------------------- */

/* Counted under the lock: a completion polled is counted. */
void pd_shmx_cq_push_locked(struct pd_shmx *s, struct pd_shmx_node *n)
{
	if (n->c.kind == PD_CPL_PEER) {
		PD_SHMX_STAT_INC(s, peer_failures, 1);
	} else if (n->c.status == 0) {
		PD_SHMX_STAT_INC(s, copies_ok, 1);
		PD_SHMX_STAT_INC(s, bytes, n->len);
	} else {
		PD_SHMX_STAT_INC(s, copies_failed, 1);
	}
	pd_cplq_add_locked(&s->cq, &n->c);
}

void pd_shmx_peer_settle_locked(struct pd_shmx *s, struct pd_shmx_peer *p)
{
	int rc;

	if (p->failed && p->outstanding == 0 && p->peer_cpl) {
		p->peer_cpl->c.status = p->err;
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

	n->c.status = p->err; /* a copy of a failing peer: may or may not have landed */
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

int pd_shmx_poll(struct pd_shmx *s, struct pd_cpl *c, uint32_t max)
{
	return s ? pd_cplq_poll(&s->cq, c, max) : -EINVAL;
}

int pd_shmx_event_fd(const struct pd_shmx *s)
{
	return s ? s->cq.fd : -EINVAL;
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
	int prefault;

	pd_shmx_lock(s);
	while ((n = next_work_locked(s))) {
		struct pd_shmx_peer *p = n->p;

		if (p->err) { /* failed since it was queued: never started */
			pd_shmx_copy_done_locked(s, n);
			continue;
		}
		p->running++;
		prefault = !p->prefaulted;
		p->prefaulted = 1;
		pd_shmx_unlock(s);
		if (prefault) /* the whole arena's page tables, once, not a fault a page */
			(void)pd_pages_populate(p->arena, p->map_len, 1);
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
		pd_thread_join(s->thr[--s->nthr]);
}

static int threads_start(struct pd_shmx *s)
{
	int rc = 0;

	s->thr = calloc(s->o.threads, sizeof(*s->thr));
	if (!s->thr)
		return -ENOMEM;
	while (s->nthr < s->o.threads && rc == 0) {
		rc = pd_thread_start(&s->thr[s->nthr], worker_main, s);
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
		pd_shmx_fifo_append(&s->cq.free, &s->nodes[i]);
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
	if (!s->peers)
		goto out_free;
	rc = pd_cplq_init(&s->cq, &s->lock);
	if (rc < 0)
		goto out_free;
	rc = pool_init(s);
	if (rc < 0)
		goto out_fini_cq;
	rc = sync_init(s);
	if (rc < 0)
		goto out_fini_cq;
	rc = threads_start(s);
	if (rc < 0)
		goto out_fini_sync;
	*out = s;
	return 0;

out_fini_sync:
	sync_fini(s);
out_fini_cq:
	pd_cplq_fini(&s->cq);
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
	pd_cplq_fini(&s->cq);
	sync_fini(s);
	free(s->thr);
	free(s->nodes);
	free(s->peers);
	free(s);
}
