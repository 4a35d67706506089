/* SPDX-License-Identifier: MIT */
/*
 * shm transport, owner side: peers (connect, disconnect, check) and post.
 * A peer's copies run on the instance's data threads (pd_shmx.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "pd_err.h"
#include "pd_shmx_int.h"

static struct pd_shmx_peer **peer_find(struct pd_shmx *s, uint32_t id)
{
	for (uint32_t i = 0; i < s->o.max_peers; i++)
		if (s->peers[i] && s->peers[i]->id == id)
			return &s->peers[i];
	return NULL;
}

static struct pd_shmx_peer **peer_free_entry(struct pd_shmx *s)
{
	for (uint32_t i = 0; i < s->o.max_peers; i++)
		if (!s->peers[i])
			return &s->peers[i];
	return NULL;
}

/* The peer and its reserved peer completion (so a failure can always be told). */
static int peer_alloc(struct pd_shmx *s, uint32_t id, struct pd_shmx_peer **out)
{
	struct pd_shmx_peer *p = calloc(1, sizeof(*p));
	struct pd_shmx_node *n;

	if (!p)
		return -ENOMEM;
	pd_shmx_lock(s);
	n = pd_shmx_fifo_pop(&s->cq.free);
	pd_shmx_unlock(s);
	if (!n) {
		free(p);
		return -EAGAIN;
	}
	*n = (struct pd_shmx_node){ .c = { .kind = PD_CPL_PEER, .peer = id } };
	*p = (struct pd_shmx_peer){ .s = s, .id = id, .peer_cpl = n };
	*out = p;
	return 0;
}

static void peer_free(struct pd_shmx_peer *p)
{
	struct pd_shmx *s = p->s;

	if (p->peer_cpl) {
		pd_shmx_lock(s);
		pd_shmx_fifo_append(&s->cq.free, p->peer_cpl);
		pd_shmx_unlock(s);
	}
	pd_shmx_unmap(p);
	free(p);
}

int pd_shmx_connect(struct pd_shmx *s, uint32_t peer, const struct pd_shmx_target *t,
		    char *err, size_t errlen)
{
	struct pd_shmx_peer **entry = NULL, *p = NULL;
	int rc;

	if (!s || !t || !t->name || !t->slot_size || !t->recv_slots)
		rc = -EINVAL;
	else if (s->stopped)
		rc = -ESHUTDOWN;
	else if (peer_find(s, peer))
		rc = -EEXIST;
	else if (!(entry = peer_free_entry(s)))
		rc = -ENOBUFS;
	else
		rc = peer_alloc(s, peer, &p);
	if (rc < 0) {
		pd_err_set(err, errlen, "shm transport: %s", pd_strerror(rc));
		return rc;
	}
	PD_ASSERT(p); /* for gcc -O1's flow analysis: set whenever rc == 0 */
	rc = pd_shmx_map(p, t, err, errlen);
	if (rc < 0) {
		PD_SHMX_STAT_INC(s, connects_refused, 1);
		peer_free(p);
		return rc;
	}
	PD_SHMX_STAT_INC(s, connects, 1);
	*entry = p;
	return 0;
}

/* p fails with err (the first error stays): its queued copies complete
 * now, its running ones when their memcpy ends. */
static void peer_abort_locked(struct pd_shmx *s, struct pd_shmx_peer *p, int err)
{
	struct pd_cplq_fifo keep = { 0 };
	struct pd_shmx_node *n;

	if (!p->err)
		p->err = err;
	while ((n = pd_shmx_fifo_pop(&s->work))) {
		if (n->p == p)
			pd_shmx_copy_done_locked(s, n);
		else
			pd_shmx_fifo_append(&keep, n);
	}
	s->work = keep;
	pd_shmx_peer_settle_locked(s, p);
}

int pd_shmx_disconnect(struct pd_shmx *s, uint32_t peer)
{
	struct pd_shmx_peer **entry, *p;

	if (!s)
		return -EINVAL;
	entry = peer_find(s, peer);
	if (!entry)
		return -ENOENT;
	p = *entry;
	pd_shmx_lock(s);
	p->halting = 1;
	peer_abort_locked(s, p, -ECONNABORTED);
	while (p->running) {
		int rc = pthread_cond_wait(&s->idle_cv, &s->lock); /* a memcpy always ends */

		PD_ASSERT(rc == 0);
	}
	PD_ASSERT(p->outstanding == 0);
	pd_shmx_unlock(s);
	peer_free(p); /* unmaps: no copy of p is left to write there */
	*entry = NULL;
	return 0;
}

void pd_shmx_peers_stop(struct pd_shmx *s)
{
	for (uint32_t i = 0; i < s->o.max_peers; i++)
		if (s->peers[i])
			(void)pd_shmx_disconnect(s, s->peers[i]->id);
}

int pd_shmx_check(struct pd_shmx *s)
{
	int failed = 0;

	if (!s)
		return -EINVAL;
	for (uint32_t i = 0; i < s->o.max_peers; i++) {
		struct pd_shmx_peer *p = s->peers[i];
		int fresh;

		/* err is written by this thread only: no lock to read it */
		if (!p || p->err || pd_shmx_alive(p) != 0) /* 1: alive; < 0: cannot tell */
			continue;
		pd_shmx_lock(s);
		fresh = !p->err;
		if (fresh) {
			p->failed = 1;
			peer_abort_locked(s, p, -ECONNRESET);
		}
		pd_shmx_unlock(s);
		if (fresh) {
			PD_LOG(WARN, shm, "peer %u: broker %s died, or its segment is gone or "
			       "replaced", p->id, p->name);
			failed++;
		}
	}
	return failed;
}

/* ---- post ---------------------------------------------------------------------- */

/* Bounds against the peer's mapped geometry: nothing outside its arena. */
static int xfers_valid(const struct pd_shmx_peer *p, const struct pd_xfer *x, uint32_t n)
{
	if (n > p->s->o.queue_depth)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		if (x[i].slot >= p->nslots || x[i].len > p->slot_size || (x[i].len && !x[i].src))
			return 0;
	return 1;
}

static void post_locked(struct pd_shmx *s, struct pd_shmx_peer *p, const struct pd_xfer *x,
			uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct pd_shmx_node *node = pd_shmx_fifo_pop(&s->cq.free);

		*node = (struct pd_shmx_node){
			.c = { .cookie = x[i].cookie, .peer = p->id, .kind = PD_CPL_WRITE },
			.p = p, .dst = p->arena + (uint64_t)x[i].slot * p->slot_size,
			.src = x[i].src, .len = x[i].len,
		};
		pd_shmx_fifo_append(&s->work, node);
	}
	p->outstanding += n;
	pd_shmx_wake_locked(s, n);
}

int pd_shmx_post(struct pd_shmx *s, uint32_t peer, const struct pd_xfer *x, uint32_t n)
{
	struct pd_shmx_peer **entry;
	int rc = (int)n;

	if (!s || (!x && n))
		return -EINVAL;
	entry = peer_find(s, peer);
	if (!entry)
		return -ENOENT;
	if (n == 0)
		return 0;
	if (!xfers_valid(*entry, x, n))
		return -EINVAL;
	pd_shmx_lock(s);
	if ((*entry)->err)
		rc = -ENOTCONN;
	else if ((*entry)->outstanding + n > s->o.queue_depth || s->cq.free.n < n)
		rc = -EAGAIN;
	else
		post_locked(s, *entry, x, n);
	pd_shmx_unlock(s);
	return rc;
}
