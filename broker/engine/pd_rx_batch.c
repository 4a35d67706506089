/* SPDX-License-Identifier: MIT */
/* Receiver engine: AllocRequests (admission, held batches, slot grants, dedup),
 * and the grants a Reserve's admitting answer carries. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_log.h"
#include "pd_rx_int.h"

static void reply_err(struct pd_rx *rx, const struct pd_rx_alloc *a, int32_t err)
{
	rx->o.ops->reply(rx->o.ctx, a->peer, a->seq, err, NULL, 0, NULL, 0);
}

static int alloc_ok(const struct pd_rx_alloc *a)
{
	if (!a || (a->req_id_len && !a->req_id) || a->req_id_len > PD_REQ_ID_MAX ||
	    a->nkeys > PD_RX_MAX_BATCH || (a->nkeys && !a->keys) || a->world_size == 0 ||
	    a->world_size > PD_RX_MAX_RANKS || a->rank >= a->world_size)
		return 0;
	if (a->reserve && (!a->req_id_len || a->nkeys || a->is_last || !a->total_chunks ||
			   a->grants > a->total_chunks || a->grants > PD_RX_MAX_BATCH))
		return 0;
	if (!a->reserve && a->grants)
		return 0;
	for (uint32_t i = 0; i < a->nkeys; i++)
		if (a->keys[i].len == 0 || a->keys[i].len > PD_KEY_MAX || !a->keys[i].p)
			return 0;
	return 1;
}

static struct rx_req *new_req(struct pd_rx *rx, const struct pd_rx_alloc *a, uint32_t total,
			      uint32_t world_size)
{
	uint64_t need = (uint64_t)total * world_size;
	struct rx_req *r;

	if (need > UINT32_MAX)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return NULL;
	r->chunks = calloc(need ? need : 1, sizeof(*r->chunks));
	r->rank_seen = calloc(2 * (size_t)world_size, sizeof(*r->rank_seen));
	if (!r->chunks || !r->rank_seen) {
		free(r->chunks);
		free(r->rank_seen);
		free(r);
		return NULL;
	}
	r->rank_peer = r->rank_seen + world_size;
	STAILQ_INIT(&r->held);
	r->tag = rx->next_tag++;
	r->world_size = world_size;
	r->total = total;
	r->need = (uint32_t)need;
	r->id_len = a->req_id_len;
	r->anon = a->req_id_len == 0;
	memcpy(r->id, a->req_id, a->req_id_len);
	TAILQ_INSERT_TAIL(&rx->all, r, all);
	rx->nreq++;
	pd_rx_share_add(rx, r, a->peer);
	if (!r->anon)
		pd_rx_tree_add(rx, r);
	return r;
}

/* A request's first batch: admission of the whole gang. */
static int start_req(struct pd_rx *rx, const struct pd_rx_alloc *a, uint64_t now_ns)
{
	uint32_t total = a->req_id_len ? a->total_chunks : a->nkeys;
	uint32_t ws = a->req_id_len ? a->world_size : 1;
	struct rx_req *r;
	int rc;

	if (total == 0) {
		rx->st.rejected_zero++;
		reply_err(rx, a, a->req_id_len ? -EINVAL : 0);
		return 0;
	}
	if ((uint64_t)total * ws > rx->nslots) {
		rx->st.rejected_big++;
		reply_err(rx, a, -E2BIG);
		return 0;
	}
	if (pd_rx_share_check(rx, a->peer, total * ws) < 0) {
		reply_err(rx, a, -EBUSY);
		return 0;
	}
	if (rx->nreq >= rx->o.max_requests || !(r = new_req(rx, a, total, ws))) {
		rx->st.rejected_busy++;
		reply_err(rx, a, -EBUSY);
		return 0;
	}
	rc = pd_admit_request_flow(&rx->adm, &r->adm, r->need, pd_rx_share_finish(rx, a->peer),
				   now_ns);
	if (rc == 1) {
		r->state = RX_WAITING;
		rc = pd_rx_hold(rx, r, a);
		return rc < 0 ? 0 : 1;
	}
	PD_ASSERT(rc == 0);
	r->state = RX_ACTIVE;
	pd_rx_share_admitted(rx, r);
	pd_rx_touch(rx, r, now_ns);
	return pd_rx_run_batch(rx, r, a, now_ns);
}

/* The rank is taken: by a batch that ran or by one held for admission. */
static int rank_taken(const struct rx_req *r, uint32_t rank)
{
	const struct rx_held *h;

	if (r->rank_peer[rank])
		return 1;
	STAILQ_FOREACH(h, &r->held, link)
		if (h->a.rank == rank)
			return 1;
	return 0;
}

/* A batch of a peer that is not part of r and that does not fit it (a rank
 * another peer took, other totals): only a peer of the request may change
 * its fate, so it is refused, r untouched. A peer may still join with a
 * rank nobody took yet. */
static int foreign(const struct rx_req *r, const struct pd_rx_alloc *a)
{
	if (r->anon || pd_rx_req_from(r, a->peer))
		return 0;
	return a->world_size != r->world_size || a->total_chunks != r->total ||
	       a->rank >= r->world_size || rank_taken(r, a->rank);
}

int pd_rx_alloc(struct pd_rx *rx, const struct pd_rx_alloc *a, uint64_t now_ns)
{
	struct rx_req *r;
	int rc;

	if (!rx || !alloc_ok(a)) {
		if (rx && a)
			reply_err(rx, a, -EINVAL);
		return -EINVAL;
	}
	if (a->reserve)
		rx->st.reserves++;
	else
		rx->st.batches++;
	r = pd_rx_find(rx, a->req_id, a->req_id_len);
	if (!r) {
		rc = start_req(rx, a, now_ns);
	} else if (r->state != RX_TOMB && foreign(r, a)) {
		rx->st.rejected_foreign++;
		reply_err(rx, a, -EPERM);
		return 0;
	} else if (r->state == RX_TOMB) {
		rx->st.rejected_tomb++;
		reply_err(rx, a, -ECANCELED);
		rc = 0;
	} else if (r->state == RX_WAITING) {
		rc = pd_rx_hold(rx, r, a) < 0 ? 0 : 1;
	} else {
		rc = pd_rx_run_batch(rx, r, a, now_ns);
	}
	pd_rx_settle(rx, now_ns);
	return rc;
}

int pd_rx_reserve(struct pd_rx *rx, const struct pd_rx_reserve *q, uint64_t now_ns)
{
	struct pd_rx_alloc a;

	if (!q)
		return -EINVAL;
	a = (struct pd_rx_alloc){ .peer = q->peer, .seq = q->seq, .req_id = q->req_id,
				  .req_id_len = q->req_id_len, .total_chunks = q->total_chunks,
				  .world_size = q->world_size, .rank = q->rank, .reserve = 1,
				  .grants = q->grants };
	return pd_rx_alloc(rx, &a, now_ns);
}

/* ---- holding batches while waiting -------------------------------------- */

static size_t held_size(const struct pd_rx_alloc *a)
{
	size_t n = sizeof(struct rx_held) + a->nkeys * (sizeof(struct pd_rx_key) + sizeof(uint32_t));

	for (uint32_t i = 0; i < a->nkeys; i++)
		n += a->keys[i].len;
	return n;
}

int pd_rx_hold(struct pd_rx *rx, struct rx_req *r, const struct pd_rx_alloc *a)
{
	size_t bytes = held_size(a);
	struct rx_held *h;
	uint32_t *lens;
	uint8_t *p;

	if (rx->held_bytes + bytes > rx->o.max_held_bytes || !(h = malloc(bytes))) {
		rx->st.rejected_busy++;
		reply_err(rx, a, -EBUSY);
		pd_rx_doom(rx, r, -EBUSY); /* a lost batch breaks the request */
		return -EBUSY;
	}
	h->bytes = bytes;
	h->a = *a;
	lens = (uint32_t *)(h->keys + a->nkeys);
	p = (uint8_t *)(lens + a->nkeys);
	for (uint32_t i = 0; i < a->nkeys; i++) {
		memcpy(p, a->keys[i].p, a->keys[i].len);
		h->keys[i] = (struct pd_rx_key){ .p = p, .len = a->keys[i].len };
		lens[i] = a->lens ? a->lens[i] : 0;
		p += a->keys[i].len;
	}
	h->a.keys = h->keys;
	h->a.lens = a->lens ? lens : NULL;
	h->a.req_id = r->id;
	STAILQ_INSERT_TAIL(&r->held, h, link);
	rx->held_bytes += bytes;
	return 0;
}

void pd_rx_run_held(struct pd_rx *rx, struct rx_req *r, uint64_t now_ns)
{
	struct rx_held *h;

	/* READY too: a batch of no keys (the last one) may follow the batch
	 * whose pinned chunks made it READY at once. */
	while ((r->state == RX_ACTIVE || r->state == RX_READY) && !r->in_work &&
	       (h = STAILQ_FIRST(&r->held))) {
		STAILQ_REMOVE_HEAD(&r->held, link);
		rx->held_bytes -= h->bytes;
		(void)pd_rx_run_batch(rx, r, &h->a, now_ns);
		free(h);
	}
}

/* ---- granting ------------------------------------------------------------- */

/* The batch agrees with what the request's earlier batches declared. */
static int batch_fits(const struct rx_req *r, const struct pd_rx_alloc *a)
{
	uint32_t seen;

	if (r->anon)
		return 1;
	if (a->world_size != r->world_size || a->total_chunks != r->total)
		return 0;
	if (r->rank_peer[a->rank] && r->rank_peer[a->rank] != a->peer + 1)
		return 0;
	if (r->rank_last & (1ull << a->rank))
		return 0; /* a batch after the rank's last one */
	seen = r->rank_seen[a->rank];
	if (a->reserve) /* once per rank, before its batches */
		return !(r->rank_resv & (1ull << a->rank)) && !r->rank_peer[a->rank];
	if ((uint64_t)seen + a->nkeys > r->total)
		return 0; /* more chunks than declared */
	return !a->is_last || seen + a->nkeys == r->total;
}

/* Hold a chunk another request granted: its slot is already counted, so
 * this draws on the reservation without a slot (draw 0: r drew for it
 * already, with a slot of its own it gives back). */
int pd_rx_pin_chunk(struct pd_rx *rx, struct rx_req *r, uint32_t slot, int draw)
{
	struct rx_chunk *c = &rx->chunks[slot];
	struct rx_pin *p;
	int rc = draw ? pd_admit_use(&rx->adm, &r->adm, 0, 1) : 0;

	if (rc < 0)
		return -EPROTO;
	if (c->state == CHUNK_GRANTED) {
		p = malloc(sizeof(*p));
		if (!p)
			return -ENOMEM;
		p->req = r;
		LIST_INSERT_HEAD(&c->pinners, p, link);
	} else {
		r->committed++;
	}
	c->refs++;
	r->chunks[r->nchunks++] = slot;
	return 0;
}

/* Sort the batch's keys into already present (pinned now) and fresh.
 * @return fresh count, or -EPROTO / -ENOMEM. */
static int dedup_pass(struct pd_rx *rx, struct rx_req *r, const struct pd_rx_alloc *a,
		      uint32_t *nalready)
{
	uint32_t nfresh = 0;
	int rc;

	*nalready = 0;
	for (uint32_t i = 0; i < a->nkeys; i++) {
		struct pd_index_val v;
		struct rx_chunk *c;

		if (pd_index_lookup(rx->o.index, a->keys[i].p, a->keys[i].len, &v) < 0) {
			rx->fresh[nfresh++] = i;
			continue;
		}
		if (v.req == r->tag)
			return -EPROTO; /* a key twice in one request */
		c = v.slot < rx->nslots ? &rx->chunks[v.slot] : NULL;
		if (!c || c->state == CHUNK_FREE || c->state == CHUNK_ZOMBIE)
			return -EBUSY; /* an old copy decode agents still read */
		rc = pd_rx_pin_chunk(rx, r, v.slot, 1);
		if (rc < 0)
			return rc;
		rx->remote[i] = (int32_t)v.slot;
		rx->already[(*nalready)++] = (int32_t)i;
	}
	return (int)nfresh;
}

/* Slot ref granted to r for chunk pos of a: held by r from here on (its
 * rollback frees it), published in the index under its key, or, granted
 * with the admission (a Reserve), keyless until a PutDone binds it. */
static int publish(struct pd_rx *rx, struct rx_req *r, const struct pd_rx_alloc *a,
		   uint32_t pos, pd_slot_ref ref)
{
	uint32_t slot = PD_SLOT_REF_IDX(ref);
	struct rx_chunk *c = &rx->chunks[slot];
	struct pd_index_val v = { .req = r->tag, .slot = slot, .gen = PD_SLOT_REF_GEN(ref),
				  .len = a->lens ? a->lens[pos] : 0, .state = PD_INDEX_PENDING };
	int rc;

	if (c->state != CHUNK_FREE) { /* handed out twice: the shared copy lies */
		(void)pd_rx_scrub(rx, "a slot in use was handed out");
		return -EIO;
	}
	/* Cannot overflow: batch_fits() bounds the request's chunks by need. */
	rc = pd_admit_use(&rx->adm, &r->adm, 1, 0);
	PD_ASSERT(rc == 0);
	c->writer = r;
	c->ref = ref;
	c->refs = 1;
	c->state = CHUNK_GRANTED;
	c->peer = a->peer;
	r->chunks[r->nchunks++] = slot; /* held from here on: rollback frees it */
	rx->remote[pos] = (int32_t)slot;
	c->len = 0;
	c->klen = 0;
	if (a->reserve)
		return 0;
	c->len = v.len;
	c->klen = (uint8_t)a->keys[pos].len;
	memcpy(c->key, a->keys[pos].p, c->klen);
	rc = pd_index_insert(rx->o.index, c->key, c->klen, &v);
	return rc == -EEXIST ? -EPROTO : rc; /* the same key twice in the batch */
}

static int grant_fresh(struct pd_rx *rx, struct rx_req *r, const struct pd_rx_alloc *a,
		       uint32_t nfresh)
{
	struct pd_pool_who who = { .owner = rx->o.owner, .pid = pd_self_pid(), .tag = r->tag,
				   .state = PD_SLOT_GRANTED };
	int rc;

	if (nfresh == 0)
		return 0;
	rc = pd_pool_alloc(rx->o.pool, &who, nfresh, 0, rx->refs);
	if (rc < 0)
		return rc;
	for (uint32_t i = 0; i < nfresh; i++) {
		rc = publish(rx, r, a, rx->fresh[i], rx->refs[i]);
		if (rc < 0) {
			/* Slots after i were never held by the request: free them here
			 * (after a repair they are free already: nothing to do). */
			if (i + 1 < nfresh && rc != -EIO)
				(void)pd_pool_free(rx->o.pool, rx->refs + i + 1, nfresh - i - 1);
			return rc;
		}
	}
	return 0;
}

/* The positions of a Reserve's grants, all fresh. */
static int keyless_pass(struct pd_rx *rx, const struct pd_rx_alloc *a, uint32_t *nalready)
{
	*nalready = 0;
	for (uint32_t i = 0; i < a->grants; i++)
		rx->fresh[i] = i;
	return (int)a->grants;
}

int pd_rx_run_batch(struct pd_rx *rx, struct rx_req *r, const struct pd_rx_alloc *a,
		 uint64_t now_ns)
{
	uint32_t nalready, nchunks = a->reserve ? a->grants : a->nkeys;
	int nfresh, rc;

	if (!batch_fits(r, a)) {
		rx->st.proto_errors++;
		reply_err(rx, a, -EPROTO);
		pd_rx_doom(rx, r, -EPROTO);
		return 0;
	}
	nfresh = a->reserve ? keyless_pass(rx, a, &nalready) : dedup_pass(rx, r, a, &nalready);
	rc = nfresh < 0 ? nfresh : grant_fresh(rx, r, a, (uint32_t)nfresh);
	if (rc < 0) {
		rx->st.grant_errors += rc != -EPROTO;
		rx->st.proto_errors += rc == -EPROTO;
		reply_err(rx, a, rc);
		pd_rx_doom(rx, r, rc);
		return 0;
	}
	rx->st.granted += (uint32_t)nfresh;
	rx->st.pregranted += a->reserve ? (uint32_t)nfresh : 0;
	rx->st.deduped += nalready;
	if (r->anon) {
		r->rank_peer[0] = a->peer + 1; /* one batch, one peer */
	} else {
		r->rank_seen[a->rank] += nchunks; /* a Reserve's grants: its first chunks */
		r->rank_peer[a->rank] = a->peer + 1;
		if (a->is_last)
			r->rank_last |= 1ull << a->rank;
		if (a->reserve)
			r->rank_resv |= 1ull << a->rank;
	}
	rx->o.ops->reply(rx->o.ctx, a->peer, a->seq, 0, rx->remote, nchunks, rx->already,
			 nalready);
	pd_rx_touch(rx, r, now_ns);
	pd_rx_check_ready(rx, r, now_ns);
	return 0;
}
