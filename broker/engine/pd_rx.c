/* SPDX-License-Identifier: MIT */
/* Receiver engine: lifetime, lookup, the event entry points, deadlines. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_log.h"
#include "pd_rx_int.h"

static int req_cmp(const struct rx_req *a, const struct rx_req *b)
{
	uint32_t n = a->id_len < b->id_len ? a->id_len : b->id_len;
	int c = memcmp(a->id, b->id, n);

	if (c)
		return c;
	return a->id_len < b->id_len ? -1 : a->id_len > b->id_len;
}

#define __unused __attribute__((unused)) /* see pd_tree.h */
RB_GENERATE_STATIC(rx_tree, rx_req, by_id, req_cmp)
#undef __unused

struct rx_req *pd_rx_find(struct pd_rx *rx, const uint8_t *id, uint32_t len)
{
	struct rx_req key;

	if (len == 0 || len > PD_REQ_ID_MAX)
		return NULL;
	key.id_len = len;
	memcpy(key.id, id, len);
	return RB_FIND(rx_tree, &rx->by_id, &key);
}

void pd_rx_tree_add(struct pd_rx *rx, struct rx_req *r)
{
	RB_INSERT(rx_tree, &rx->by_id, r);
	r->in_tree = 1;
}

void pd_rx_touch(struct pd_rx *rx, struct rx_req *r, uint64_t now_ns)
{
	r->last_ns = now_ns;
	if (r->on_live)
		TAILQ_REMOVE(&rx->live, r, order);
	TAILQ_INSERT_TAIL(&rx->live, r, order);
	r->on_live = 1;
}

void pd_rx_view(const struct rx_req *r, struct pd_rx_req_view *v)
{
	*v = (struct pd_rx_req_view){ .req_id = r->id, .req_id_len = r->id_len, .tag = r->tag,
				      .need = r->need, .committed = r->committed,
				      .admitted = r->adm.was_admitted };
}

static int scratch_alloc(struct pd_rx *rx)
{
	rx->remote = calloc(PD_RX_MAX_BATCH, sizeof(*rx->remote));
	rx->already = calloc(PD_RX_MAX_BATCH, sizeof(*rx->already));
	rx->fresh = calloc(PD_RX_MAX_BATCH, sizeof(*rx->fresh));
	rx->refs = calloc(PD_RX_MAX_BATCH, sizeof(*rx->refs));
	return rx->remote && rx->already && rx->fresh && rx->refs ? 0 : -ENOMEM;
}

static int opts_ok(const struct pd_rx_opts *o)
{
	return o && o->pool && o->index && o->ops && o->ops->reply && o->ops->ready &&
	       o->ops->failed && o->max_requests > 0;
}

int pd_rx_create(const struct pd_rx_opts *o, struct pd_rx **out)
{
	struct pd_rx *rx;
	int rc;

	if (!opts_ok(o) || !out)
		return -EINVAL;
	rx = calloc(1, sizeof(*rx));
	if (!rx)
		return -ENOMEM;
	rx->o = *o;
	rx->nslots = o->pool->nslots;
	rx->next_tag = 1;
	RB_INIT(&rx->by_id);
	TAILQ_INIT(&rx->live);
	TAILQ_INIT(&rx->tombs);
	TAILQ_INIT(&rx->admitted);
	TAILQ_INIT(&rx->doomed);
	TAILQ_INIT(&rx->all);
	rc = pd_admit_init(&rx->adm, rx->nslots, o->admission_timeout_ns);
	rx->chunks = calloc(rx->nslots, sizeof(*rx->chunks));
	if (rc == 0 && (!rx->chunks || scratch_alloc(rx) < 0 || pd_rx_share_init(rx) < 0))
		rc = -ENOMEM;
	if (rc < 0) {
		pd_rx_destroy(rx);
		return rc;
	}
	*out = rx;
	return 0;
}

void pd_rx_req_free(struct pd_rx *rx, struct rx_req *r)
{
	struct rx_held *h;

	while ((h = STAILQ_FIRST(&r->held))) {
		STAILQ_REMOVE_HEAD(&r->held, link);
		rx->held_bytes -= h->bytes;
		free(h);
	}
	if (r->in_tree)
		RB_REMOVE(rx_tree, &rx->by_id, r);
	TAILQ_REMOVE(&rx->all, r, all);
	pd_rx_share_free(rx, r);
	free(r->chunks);
	free(r->rank_seen);
	free(r);
	rx->nreq--;
}

void pd_rx_destroy(struct pd_rx *rx)
{
	struct rx_req *r;

	if (!rx)
		return;
	while ((r = TAILQ_FIRST(&rx->all)))
		pd_rx_req_free(rx, r);
	for (uint32_t i = 0; rx->chunks && i < rx->nslots; i++) {
		struct rx_pin *p;

		while ((p = LIST_FIRST(&rx->chunks[i].pinners))) {
			LIST_REMOVE(p, link);
			free(p);
		}
	}
	free(rx->chunks);
	free(rx->remote);
	free(rx->already);
	free(rx->fresh);
	free(rx->refs);
	free(rx->peers);
	free(rx);
}

/* ---- events ------------------------------------------------------------------ */

static int id_is(const struct rx_req *r, const uint8_t *id, uint32_t len)
{
	return r->id_len == len && (len == 0 || memcmp(r->id, id, len) == 0);
}

int pd_rx_slot_granted(const struct pd_rx *rx, uint32_t peer, const uint8_t *id, uint32_t len,
		       int32_t slot, int keyed)
{
	const struct rx_chunk *c;

	if (slot < 0 || (uint32_t)slot >= rx->nslots)
		return 0;
	c = &rx->chunks[slot];
	return c->state == CHUNK_GRANTED && c->writer && c->peer == peer &&
	       id_is(c->writer, id, len) && (c->klen != 0) == (keyed != 0);
}

int pd_rx_put_done_refused(struct pd_rx *rx, const uint8_t *id, uint32_t len, uint64_t now_ns)
{
	struct rx_req *r = pd_rx_find(rx, id, len);

	if (!r || r->state == RX_TOMB) {
		rx->st.late_putdone++;
		return -ENOENT;
	}
	rx->st.proto_errors++;
	pd_rx_doom(rx, r, -EPROTO);
	pd_rx_settle(rx, now_ns);
	return -EPROTO;
}

int pd_rx_put_done(struct pd_rx *rx, uint32_t peer, const uint8_t *req_id, uint32_t len,
		   const int32_t *slots, uint32_t n, uint64_t now_ns)
{
	if (!rx || (n && !slots) || (len && !req_id) || len > PD_REQ_ID_MAX)
		return -EINVAL;
	/* Every slot granted, unwritten, to this peer for this request (with
	 * its key: a slot granted with the admission needs pd_rx_bind()). */
	for (uint32_t i = 0; i < n; i++)
		if (!pd_rx_slot_granted(rx, peer, req_id, len, slots[i], 1))
			return pd_rx_put_done_refused(rx, req_id, len, now_ns);
	for (uint32_t i = 0; i < n; i++) {
		struct rx_chunk *c = &rx->chunks[slots[i]];

		if (c->state != CHUNK_GRANTED)
			continue; /* named twice in this PutDone: committed already */
		pd_rx_touch(rx, c->writer, now_ns);
		pd_rx_commit(rx, c, now_ns);
	}
	pd_rx_settle(rx, now_ns);
	return 0;
}

int pd_rx_cancel(struct pd_rx *rx, const uint8_t *req_id, uint32_t len, uint64_t now_ns)
{
	return pd_rx_cancel_from(rx, PD_RX_ANY_PEER, req_id, len, now_ns);
}

int pd_rx_cancel_from(struct pd_rx *rx, uint32_t peer, const uint8_t *req_id, uint32_t len,
		      uint64_t now_ns)
{
	struct rx_req *r = rx ? pd_rx_find(rx, req_id, len) : NULL;

	if (!r || r->state == RX_TOMB)
		return 0;
	if (peer != PD_RX_ANY_PEER && !pd_rx_req_from(r, peer)) {
		rx->st.rejected_foreign++; /* not its to cancel */
		return -EPERM;
	}
	pd_rx_doom(rx, r, -ECANCELED);
	pd_rx_settle(rx, now_ns);
	return 1;
}

/* Has every rank of a group of nranks released r (rank's included)? */
static int group_done(struct rx_req *r, uint32_t rank, uint32_t nranks)
{
	uint64_t all;

	if (nranks <= 1 || nranks > PD_RX_RELEASE_RANKS || rank >= nranks)
		return 1;
	all = nranks == 64 ? UINT64_MAX : (UINT64_C(1) << nranks) - 1;
	r->released_ranks |= UINT64_C(1) << rank;
	return (r->released_ranks & all) == all;
}

int pd_rx_release(struct pd_rx *rx, const uint8_t *req_id, uint32_t len, uint32_t rank,
		  uint32_t nranks, uint64_t now_ns)
{
	struct rx_req *r = rx ? pd_rx_find(rx, req_id, len) : NULL;

	if (!r || r->state == RX_TOMB)
		return -ENOENT;
	if (r->state != RX_READY || r->in_work == WORK_DOOMED)
		return -EBUSY;
	if (!group_done(r, rank, nranks)) {
		rx->st.release_waits++;
		r->last_ns = now_ns; /* progress: the idle drop counts from here */
		return 0;
	}
	rx->st.released++;
	pd_rx_end(rx, r, now_ns);
	pd_rx_settle(rx, now_ns);
	return 0;
}

int pd_rx_req_from(const struct rx_req *r, uint32_t peer)
{
	const struct rx_held *h;

	for (uint32_t k = 0; k < r->world_size; k++)
		if (r->rank_peer[k] == peer + 1)
			return 1;
	STAILQ_FOREACH(h, &r->held, link)
		if (h->a.peer == peer)
			return 1;
	return 0;
}

int pd_rx_peer_failed(struct pd_rx *rx, uint32_t peer, uint64_t now_ns)
{
	struct rx_req *r;
	int n = 0;

	if (!rx)
		return -EINVAL;
	TAILQ_FOREACH(r, &rx->all, all) {
		/* A READY request has every byte: the decode side may still use it. */
		if (r->state != RX_TOMB && r->state != RX_READY && pd_rx_req_from(r, peer)) {
			pd_rx_doom(rx, r, -ENOTCONN);
			n++;
		}
	}
	pd_rx_settle(rx, now_ns);
	return n;
}

/* ---- deadlines ---------------------------------------------------------------- */

static void on_expire(void *ctx, struct pd_adm_entry *e)
{
	pd_rx_doom(ctx, pd_container_of(e, struct rx_req, adm), -ETIMEDOUT);
}

/* Live requests are kept least recently active first. */
static int expire_ttl(struct pd_rx *rx, uint64_t now_ns)
{
	struct rx_req *r;
	int n = 0;

	TAILQ_FOREACH(r, &rx->live, order) {
		if (now_ns < r->last_ns || now_ns - r->last_ns < rx->o.ttl_ns ||
		    n == (int)PD_RX_TICK_BUDGET)
			break;
		if (r->in_work != WORK_DOOMED) {
			rx->st.ttl_reclaimed++;
			pd_rx_doom(rx, r, -ETIMEDOUT);
			n++;
		}
	}
	return n;
}

static void expire_tombs(struct pd_rx *rx, uint64_t now_ns)
{
	struct rx_req *r;

	for (uint32_t n = 0; n < PD_RX_TICK_BUDGET && (r = TAILQ_FIRST(&rx->tombs)) &&
			    now_ns >= r->last_ns && now_ns - r->last_ns >= rx->o.tombstone_ns; n++) {
		TAILQ_REMOVE(&rx->tombs, r, order);
		rx->ntombs--;
		pd_rx_req_free(rx, r);
	}
}

void pd_rx_reap(struct pd_rx *rx, uint64_t now_ns)
{
	if (!rx || !rx->nzombies)
		return;
	pd_rx_reap_zombies(rx);
	pd_rx_settle(rx, now_ns); /* reaped slots may admit waiters */
}

int pd_rx_tick(struct pd_rx *rx, uint64_t now_ns)
{
	int n;

	if (!rx)
		return -EINVAL;
	n = (int)pd_admit_expire(&rx->adm, now_ns, PD_RX_TICK_BUDGET, on_expire, rx);
	n += expire_ttl(rx, now_ns);
	pd_rx_settle(rx, now_ns);
	expire_tombs(rx, now_ns);
	n += (int)pd_rx_share_preempt(rx, now_ns);
	pd_rx_scrub_tick(rx);
	pd_rx_settle(rx, now_ns);
	pd_rx_reap_zombies(rx);
	pd_rx_settle(rx, now_ns); /* reaped slots may admit waiters */
	return n;
}

/* ---- introspection ------------------------------------------------------------ */

void pd_rx_get_stats(const struct pd_rx *rx, struct pd_rx_stats *out)
{
	*out = rx->st;
	out->waiting_requests = rx->adm.nwaiting;
	out->live_requests = rx->nreq - rx->ntombs;
}

uint32_t pd_rx_state(struct pd_rx *rx, const uint8_t *req_id, uint32_t len,
		     struct pd_rx_req_view *v, int32_t *status)
{
	static const uint32_t map[] = { [RX_WAITING] = PD_RX_WAITING, [RX_ACTIVE] = PD_RX_ACTIVE,
					 [RX_READY] = PD_RX_READY, [RX_TOMB] = PD_RX_ENDED };
	struct rx_req *r = rx ? pd_rx_find(rx, req_id, len) : NULL;

	if (!r || r->state > RX_TOMB || !map[r->state])
		return PD_RX_UNKNOWN;
	if (v)
		pd_rx_view(r, v);
	if (status)
		*status = r->end_err;
	return map[r->state];
}

uint32_t pd_rx_slot_gen(const struct pd_rx *rx, uint32_t slot)
{
	return rx && slot < rx->nslots ? PD_SLOT_REF_GEN(rx->chunks[slot].ref) : 0;
}

const struct pd_admit *pd_rx_admit(const struct pd_rx *rx)
{
	return &rx->adm;
}

/* Chunks in use and the references requests hold must agree with the
 * pool, the admission accounting and each other. */
int pd_rx_check(const struct pd_rx *rx)
{
	uint64_t used = 0, refs = 0, held = 0;
	const struct rx_req *r;

	if (!pd_admit_ok(&rx->adm))
		return -EPROTO;
	for (uint32_t i = 0; i < rx->nslots; i++) {
		used += rx->chunks[i].state != CHUNK_FREE;
		refs += rx->chunks[i].refs;
	}
	TAILQ_FOREACH(r, &rx->all, all) {
		held += r->nchunks;
		if (r->state == RX_TOMB && r->nchunks)
			return -EPROTO;
		if (r->nchunks > r->need || r->committed > r->nchunks)
			return -EPROTO;
	}
	if (used != rx->nslots - pd_pool_nfree(rx->o.pool) ||
	    used != (uint64_t)rx->adm.capacity - rx->adm.free || refs != held)
		return -EPROTO;
	return 0;
}

const struct pd_stat_hist *pd_rx_wait_hist(const struct pd_rx *rx)
{
	return &rx->adm.wait_hist;
}

const struct pd_stat_hist *pd_rx_xfer_hist(const struct pd_rx *rx)
{
	return &rx->xfer_hist;
}

void pd_rx_foreach(const struct pd_rx *rx, void (*fn)(void *ctx, const struct pd_rx_info *i),
		   void *ctx)
{
	static const uint32_t pub[] = { [RX_WAITING] = PD_RX_WAITING,
					[RX_ACTIVE] = PD_RX_ACTIVE, [RX_READY] = PD_RX_READY };
	const struct rx_req *r;
	struct pd_rx_info i;

	TAILQ_FOREACH(r, &rx->all, all) {
		if (r->state == RX_TOMB || r->state >= PD_ARRAY_SIZE(pub))
			continue;
		i = (struct pd_rx_info){ .req_id = r->id, .req_id_len = r->id_len,
					 .state = pub[r->state], .need = r->need,
					 .committed = r->committed, .since_ns = r->adm.since_ns,
					 .peer = r->rank_peer && r->rank_peer[0] ?
						 r->rank_peer[0] - 1 : UINT32_MAX };
		fn(ctx, &i);
	}
}
