/* SPDX-License-Identifier: MIT */
/* Receiver engine: commits, READY, and the end of requests (release,
 * rollback, tombstones), plus the work loop that runs after every event. */
#include <errno.h>
#include <stdlib.h>

#include "pd_log.h"
#include "pd_rx_int.h"

static void work_remove(struct pd_rx *rx, struct rx_req *r)
{
	if (r->in_work == WORK_ADMITTED)
		TAILQ_REMOVE(&rx->admitted, r, work);
	else if (r->in_work == WORK_DOOMED)
		TAILQ_REMOVE(&rx->doomed, r, work);
	r->in_work = WORK_NONE;
}

void pd_rx_doom(struct pd_rx *rx, struct rx_req *r, int32_t err)
{
	if (r->in_work == WORK_DOOMED || r->state == RX_TOMB)
		return;
	work_remove(rx, r);
	r->doom_err = err;
	r->in_work = WORK_DOOMED;
	TAILQ_INSERT_TAIL(&rx->doomed, r, work);
}

void pd_rx_check_ready(struct pd_rx *rx, struct rx_req *r, uint64_t now_ns)
{
	struct pd_rx_req_view v;

	if (r->state != RX_ACTIVE || r->in_work == WORK_DOOMED || r->nchunks != r->need ||
	    r->committed != r->need)
		return;
	r->state = RX_READY;
	pd_stats_hist_add(&rx->xfer_hist, now_ns > r->adm.admitted_ns ?
					  now_ns - r->adm.admitted_ns : 0);
	pd_admit_finish(&rx->adm, &r->adm); /* fully drawn: gives back nothing */
	rx->st.ready++;
	pd_rx_touch(rx, r, now_ns); /* recv-ttl now counts time unconsumed */
	pd_rx_view(r, &v);
	rx->o.ops->ready(rx->o.ctx, &v);
}

void pd_rx_commit(struct pd_rx *rx, struct rx_chunk *c, uint64_t now_ns)
{
	struct rx_pin *p;

	(void)pd_index_commit(rx->o.index, c->key, c->klen, c->len);
	(void)pd_pool_set_state(rx->o.pool, &c->ref, 1, rx->o.owner, PD_SLOT_COMMITTED);
	c->state = CHUNK_COMMITTED;
	rx->st.committed++;
	c->writer->committed++;
	while ((p = LIST_FIRST(&c->pinners))) {
		LIST_REMOVE(p, link);
		p->req->committed++;
		pd_rx_check_ready(rx, p->req, now_ns);
		free(p);
	}
	pd_rx_check_ready(rx, c->writer, now_ns);
}

/* ---- dropping what a request holds ------------------------------------------ */

/* Remove the chunk's index entry, the one of its slot and generation (the
 * key may have been granted again since, even while this one is retired).
 * 0, or -EBUSY while a decode agent's hazard names it. */
static int index_drop(struct pd_rx *rx, const struct rx_chunk *c)
{
	int rc;

	if (!c->klen)
		return 0; /* granted with the admission, never bound: not in the index */
	rc = pd_index_remove_chunk(rx->o.index, c->key, c->klen, PD_SLOT_REF_IDX(c->ref),
				   PD_SLOT_REF_GEN(c->ref));

	return rc == -EBUSY ? -EBUSY : 0;
}

void pd_rx_free_slot(struct pd_rx *rx, struct rx_chunk *c)
{
	(void)pd_pool_free(rx->o.pool, &c->ref, 1);
	pd_admit_slots_freed(&rx->adm, 1);
	c->state = CHUNK_FREE;
	c->writer = NULL;
}

static void free_chunk(struct pd_rx *rx, struct rx_chunk *c)
{
	if (index_drop(rx, c) == -EBUSY) {
		/* A decode agent still reads it: keep the slot until it lets go. */
		c->state = CHUNK_ZOMBIE;
		rx->nzombies++;
		return;
	}
	pd_rx_free_slot(rx, c);
}

void pd_rx_reap_zombies(struct pd_rx *rx)
{
	for (uint32_t i = 0; rx->nzombies && i < rx->nslots; i++) {
		struct rx_chunk *c = &rx->chunks[i];

		if (c->state == CHUNK_ZOMBIE && index_drop(rx, c) == 0) {
			rx->nzombies--;
			pd_rx_free_slot(rx, c);
		}
	}
}

static void unpin(struct rx_chunk *c, struct rx_req *r)
{
	struct rx_pin *p;

	LIST_FOREACH(p, &c->pinners, link) {
		if (p->req == r) {
			LIST_REMOVE(p, link);
			free(p);
			return;
		}
	}
}

/* The writer goes away before writing: whoever pinned the chunk fails too
 * (keeping its reference until its own rollback), and the key leaves the
 * index so that no one else pins bytes that will never come. */
static void orphan(struct pd_rx *rx, struct rx_chunk *c)
{
	struct rx_pin *p;

	while ((p = LIST_FIRST(&c->pinners))) {
		LIST_REMOVE(p, link);
		pd_rx_doom(rx, p->req, -EPIPE);
		free(p);
	}
	(void)index_drop(rx, c);
}

static void drop_chunks(struct pd_rx *rx, struct rx_req *r)
{
	for (uint32_t i = 0; i < r->nchunks; i++) {
		struct rx_chunk *c = &rx->chunks[r->chunks[i]];

		if (c->writer == r) {
			if (c->state == CHUNK_GRANTED)
				orphan(rx, c);
			c->writer = NULL;
		} else if (c->state == CHUNK_GRANTED) {
			unpin(c, r);
		}
		PD_ASSERT(c->refs > 0);
		if (--c->refs == 0)
			free_chunk(rx, c);
	}
	r->nchunks = 0;
	r->committed = 0;
}

/* ---- ending requests --------------------------------------------------------- */

static void refuse_held(struct pd_rx *rx, struct rx_req *r, int32_t err)
{
	struct rx_held *h;

	while ((h = STAILQ_FIRST(&r->held))) {
		STAILQ_REMOVE_HEAD(&r->held, link);
		rx->held_bytes -= h->bytes;
		rx->o.ops->reply(rx->o.ctx, h->a.peer, h->a.seq, err, NULL, 0, NULL, 0);
		free(h);
	}
}

/* Everything the request holds goes back; it becomes a tombstone (an
 * anonymous one is simply freed). */
void pd_rx_end(struct pd_rx *rx, struct rx_req *r, uint64_t now_ns)
{
	work_remove(rx, r);
	drop_chunks(rx, r);
	refuse_held(rx, r, -ECANCELED);
	pd_admit_finish(&rx->adm, &r->adm);
	pd_rx_share_end(rx, r);
	if (r->on_live) {
		TAILQ_REMOVE(&rx->live, r, order);
		r->on_live = 0;
	}
	if (r->anon) {
		pd_rx_req_free(rx, r);
		return;
	}
	r->state = RX_TOMB;
	r->last_ns = now_ns;
	TAILQ_INSERT_TAIL(&rx->tombs, r, order);
	rx->ntombs++;
}

static void rollback(struct pd_rx *rx, struct rx_req *r, uint64_t now_ns)
{
	struct pd_rx_req_view v;
	int32_t err = r->doom_err;

	if (err == -ECANCELED)
		rx->st.cancelled++;
	else
		rx->st.failed++;
	pd_rx_view(r, &v);
	rx->o.ops->failed(rx->o.ctx, &v, err);
	refuse_held(rx, r, err);
	r->end_err = err; /* kept by the tombstone */
	pd_rx_end(rx, r, now_ns);
}

static void on_admit(void *ctx, struct pd_adm_entry *e)
{
	struct pd_rx *rx = ctx;
	struct rx_req *r = pd_container_of(e, struct rx_req, adm);

	r->in_work = WORK_ADMITTED;
	TAILQ_INSERT_TAIL(&rx->admitted, r, work);
	pd_rx_share_admitted(rx, r);
}

/* After every event: roll back the doomed (which frees capacity), admit
 * whoever now fits, run their held batches (which may doom more), until
 * nothing moves. Nothing here recurses. */
void pd_rx_settle(struct pd_rx *rx, uint64_t now_ns)
{
	struct rx_req *r;

	for (;;) {
		if ((r = TAILQ_FIRST(&rx->doomed))) {
			work_remove(rx, r);
			rollback(rx, r, now_ns);
			continue;
		}
		(void)pd_admit_pump(&rx->adm, now_ns, on_admit, rx);
		if ((r = TAILQ_FIRST(&rx->admitted))) {
			work_remove(rx, r);
			r->state = RX_ACTIVE;
			pd_rx_touch(rx, r, now_ns);
			pd_rx_run_held(rx, r, now_ns);
			continue;
		}
		return;
	}
}
