/* SPDX-License-Identifier: MIT */
/*
 * Sender request engine (pd_tx.h): the object, lookups, batches, submit,
 * AllocResponses and write completions. How requests end is in
 * pd_tx_end.c.
 *
 * Lookups are red-black trees: (req_id, rank) -> request and seq -> batch,
 * O(log n). Deadlines are FIFO lists (timeouts are constant, so insertion
 * order is deadline order): pd_tx_tick() costs O(expired).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pd_log.h"
#include "pd_tx_int.h"

/* ---- lookups ---------------------------------------------------------------- */

/* By req_id length, then bytes, then rank: the ranks of one req_id are adjacent. */
static int req_cmp(const struct pd_tx_req *a, const struct pd_tx_req *b)
{
	int c;

	if (a->req_id_len != b->req_id_len)
		return a->req_id_len < b->req_id_len ? -1 : 1;
	c = memcmp(a->req_id, b->req_id, a->req_id_len);
	if (c)
		return c;
	return (a->rank > b->rank) - (a->rank < b->rank);
}

static int batch_cmp(const struct pd_tx_batch *a, const struct pd_tx_batch *b)
{
	return (a->seq > b->seq) - (a->seq < b->seq);
}

#define __unused __attribute__((unused)) /* see pd_tree.h */
RB_GENERATE_STATIC(pd_tx_req_tree, pd_tx_req, node, req_cmp)
RB_GENERATE_STATIC(pd_tx_batch_tree, pd_tx_batch, node, batch_cmp)
#undef __unused

static void req_key(struct pd_tx_req *k, const uint8_t *id, uint32_t len, uint32_t rank)
{
	k->req_id_len = (uint8_t)len;
	memcpy(k->req_id, id, len);
	k->rank = rank;
}

struct pd_tx_req *pd_tx_req_find(struct pd_tx *tx, const uint8_t *id, uint32_t len,
				 uint32_t rank)
{
	struct pd_tx_req k;

	req_key(&k, id, len, rank);
	return RB_FIND(pd_tx_req_tree, &tx->reqs, &k);
}

struct pd_tx_req *pd_tx_req_first(struct pd_tx *tx, const uint8_t *id, uint32_t len)
{
	struct pd_tx_req k, *r;

	req_key(&k, id, len, 0);
	r = RB_NFIND(pd_tx_req_tree, &tx->reqs, &k);
	if (!r || r->req_id_len != len || memcmp(r->req_id, id, len))
		return NULL;
	return r;
}

struct pd_tx_req *pd_tx_req_next(struct pd_tx *tx, struct pd_tx_req *r)
{
	struct pd_tx_req *n = RB_NEXT(pd_tx_req_tree, &tx->reqs, r);

	(void)tx;
	if (!n || n->req_id_len != r->req_id_len || memcmp(n->req_id, r->req_id, r->req_id_len))
		return NULL;
	return n;
}

static struct pd_tx_batch *batch_find(struct pd_tx *tx, uint64_t seq)
{
	struct pd_tx_batch k;

	k.seq = seq;
	return RB_FIND(pd_tx_batch_tree, &tx->batches, &k);
}

/* ---- small helpers ------------------------------------------------------------ */

uint64_t pd_tx_deadline(uint64_t now_ns, uint64_t after_ns)
{
	return now_ns > UINT64_MAX - after_ns ? UINT64_MAX : now_ns + after_ns;
}

void pd_tx_result(const struct pd_tx_req *r, struct pd_tx_result *out)
{
	*out = (struct pd_tx_result){
		.agent = r->agent, .peer = r->peer,
		.req_id = r->req_id, .req_id_len = r->req_id_len,
		.rank = r->rank, .world_size = r->world_size,
		.status = r->status, .chunks = r->completed, .bytes = r->bytes,
	};
}

void pd_tx_batch_view(const struct pd_tx_batch *b, struct pd_tx_batch_view *v)
{
	const struct pd_tx_req *r = b->req;

	*v = (struct pd_tx_batch_view){
		.seq = b->seq, .peer = r->peer,
		.req_id = r->req_id, .req_id_len = r->req_id_len,
		.rank = r->rank, .world_size = r->world_size,
		.total_chunks = r->total, .is_last = b->is_last,
		.n = b->n, .chunks = b->chunks, .remote = b->remote, .gens = b->gens,
		.grants = b->asked, .bind = b->bind,
	};
}

/* Return the staging slots of n chunks to the send pool. */
static void free_staging(struct pd_tx *tx, const struct pd_tx_chunk *c, uint32_t n)
{
	uint32_t i;

	if (!n)
		return;
	for (i = 0; i < n; i++)
		tx->refs[i] = c[i].slot;
	tx->ops.free_slots(tx->ctx, tx->refs, n);
}

/* ---- object ------------------------------------------------------------------- */

static int ops_valid(const struct pd_tx_ops *ops)
{
	return ops && ops->send_alloc && ops->send_reserve && ops->admitted && ops->write &&
	       ops->free_slots && ops->put_done && ops->cancel_notif && ops->proxy_notif &&
	       ops->agent_event && ops->wake_alloc;
}

int pd_tx_create(const struct pd_tx_opts *o, struct pd_tx **out)
{
	struct pd_tx *tx;

	if (!o || !out || !ops_valid(o->ops) || !o->max_requests || o->notify_failures > 1)
		return -EINVAL;
	tx = calloc(1, sizeof(*tx));
	if (!tx)
		return -ENOMEM;
	tx->ops = *o->ops;
	tx->ctx = o->ctx;
	tx->max_requests = o->max_requests;
	tx->notify_failures = o->notify_failures;
	tx->admit_grants = o->admit_grants < PD_TX_MAX_BATCH ? o->admit_grants : PD_TX_MAX_BATCH;
	tx->alloc_timeout_ns = o->alloc_timeout_ns;
	tx->tombstone_ns = o->tombstone_ns;
	tx->next_seq = 1;
	RB_INIT(&tx->reqs);
	RB_INIT(&tx->batches);
	TAILQ_INIT(&tx->live);
	TAILQ_INIT(&tx->tombs);
	TAILQ_INIT(&tx->waiting);
	TAILQ_INIT(&tx->admitting);
	*out = tx;
	return 0;
}

static void destroy_list(struct pd_tx *tx, struct pd_tx_req_list *l)
{
	struct pd_tx_req *r;
	struct pd_tx_batch *b;

	while ((r = TAILQ_FIRST(l))) {
		while ((b = TAILQ_FIRST(&r->batches))) {
			TAILQ_REMOVE(&r->batches, b, req_link);
			free(b);
		}
		TAILQ_REMOVE(l, r, link);
		RB_REMOVE(pd_tx_req_tree, &tx->reqs, r);
		pd_tx_req_grants_drop(r);
		free(r);
	}
}

void pd_tx_destroy(struct pd_tx *tx)
{
	if (!tx)
		return;
	destroy_list(tx, &tx->live);
	destroy_list(tx, &tx->tombs);
	free(tx);
}

void pd_tx_get_stats(const struct pd_tx *tx, struct pd_tx_stats *out)
{
	if (!out)
		return;
	if (!tx) {
		memset(out, 0, sizeof(*out));
		return;
	}
	*out = tx->st;
}

/* ---- requests and batches ---------------------------------------------------- */

struct pd_tx_req *pd_tx_req_new(struct pd_tx *tx, const struct pd_tx_declare *d,
				uint64_t now_ns)
{
	struct pd_tx_req *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	req_key(r, d->req_id, d->req_id_len, d->rank);
	TAILQ_INIT(&r->batches);
	r->state = PD_TXR_LIVE;
	r->agent = d->agent;
	r->peer = d->peer;
	r->world_size = d->world_size;
	r->total = d->total_chunks;
	r->tag = d->tag;
	r->start_ns = now_ns;
	RB_INSERT(pd_tx_req_tree, &tx->reqs, r);
	TAILQ_INSERT_TAIL(&tx->live, r, link);
	tx->nreqs++;
	tx->st.live_requests++;
	return r;
}

void pd_tx_req_free(struct pd_tx *tx, struct pd_tx_req *r)
{
	PD_ASSERT(TAILQ_EMPTY(&r->batches));
	RB_REMOVE(pd_tx_req_tree, &tx->reqs, r);
	tx->nreqs--;
	pd_tx_req_grants_drop(r);
	free(r);
}

struct pd_tx_req *pd_tx_req_tomb_new(struct pd_tx *tx, const uint8_t *id, uint32_t len,
				     uint32_t rank, uint64_t tomb_deadline)
{
	struct pd_tx_req *r;

	if (tx->nreqs >= tx->max_requests || !(r = calloc(1, sizeof(*r))))
		return NULL;
	req_key(r, id, len, rank);
	TAILQ_INIT(&r->batches);
	r->state = PD_TXR_TOMB;
	r->status = -ECANCELED;
	r->cancelled = 1;
	r->tomb_deadline = tomb_deadline;
	RB_INSERT(pd_tx_req_tree, &tx->reqs, r);
	TAILQ_INSERT_TAIL(&tx->tombs, r, link);
	tx->nreqs++;
	tx->st.tombstones++;
	return r;
}

/* Undo pd_tx_req_new() (a fresh request that could not be started). */
void pd_tx_req_unnew(struct pd_tx *tx, struct pd_tx_req *r)
{
	TAILQ_REMOVE(&tx->live, r, link);
	tx->st.live_requests--;
	pd_tx_req_free(tx, r);
}

/* A batch of n chunks (copied from c), or a Reserve (reserve = 1, n = 0):
 * seq assigned, linked to r, waiting for its answer until deadline. */
struct pd_tx_batch *pd_tx_batch_new(struct pd_tx *tx, struct pd_tx_req *r,
				    const struct pd_tx_chunk *c, uint32_t n, uint64_t deadline)
{
	size_t sz = sizeof(struct pd_tx_batch) +
		    (size_t)n * (sizeof(*c) + sizeof(int32_t) + sizeof(uint32_t));
	struct pd_tx_batch *b = malloc(sz);
	uint32_t i;

	if (!b)
		return NULL;
	memset(b, 0, sizeof(*b));
	if (n)
		memcpy(b->chunks, c, (size_t)n * sizeof(*c));
	b->remote = (int32_t *)(void *)(b->chunks + n);
	b->gens = (uint32_t *)(void *)(b->remote + n);
	memset(b->gens, 0, (size_t)n * sizeof(*b->gens));
	for (i = 0; i < n; i++)
		b->bytes += c[i].len;
	b->req = r;
	b->seq = tx->next_seq++;
	b->n = n;
	b->state = PD_TXB_WAIT;
	b->deadline = deadline;
	RB_INSERT(pd_tx_batch_tree, &tx->batches, b);
	TAILQ_INSERT_TAIL(&r->batches, b, req_link);
	return b;
}

/* A batch of the chunks of s from position first on, for an AllocRequest. */
static struct pd_tx_batch *batch_new(struct pd_tx *tx, struct pd_tx_req *r,
				     const struct pd_tx_submit *s, uint32_t first, uint64_t now_ns)
{
	uint64_t deadline = tx->alloc_timeout_ns ? pd_tx_deadline(now_ns, tx->alloc_timeout_ns) :
						   UINT64_MAX;
	struct pd_tx_batch *b = pd_tx_batch_new(tx, r, s->chunks + first, s->n - first, deadline);

	if (!b)
		return NULL;
	b->is_last = s->is_last;
	TAILQ_INSERT_TAIL(&tx->waiting, b, wait_link);
	tx->st.live_batches++;
	return b;
}

/* b out of every list of tx and its request, not yet freed. */
static void batch_unlink(struct pd_tx *tx, struct pd_tx_batch *b)
{
	PD_ASSERT(b->state != PD_TXB_WRITING);
	if (b->state == PD_TXB_WAIT)
		TAILQ_REMOVE(b->reserve ? &tx->admitting : &tx->waiting, b, wait_link);
	RB_REMOVE(pd_tx_batch_tree, &tx->batches, b);
	TAILQ_REMOVE(&b->req->batches, b, req_link);
	if (b->reserve)
		tx->st.admitting--;
	else
		tx->st.live_batches--;
}

/* Unlink and free b; its staging must have been returned. */
void pd_tx_batch_del(struct pd_tx *tx, struct pd_tx_batch *b)
{
	batch_unlink(tx, b);
	free(b);
}

void pd_tx_batch_drop(struct pd_tx *tx, struct pd_tx_batch *b)
{
	PD_ASSERT(b->state != PD_TXB_WRITING);
	free_staging(tx, b->chunks, b->n);
	pd_tx_batch_del(tx, b);
}

/* ---- submit ------------------------------------------------------------------ */

static int submit_valid(const struct pd_tx_submit *s)
{
	uint32_t i;

	if (!s || !s->req_id || !s->req_id_len || s->req_id_len > PD_REQ_ID_MAX)
		return 0;
	if (!s->world_size || s->rank >= s->world_size || s->is_last > 1)
		return 0;
	if (s->n > PD_TX_MAX_BATCH || (s->n && !s->chunks) || (!s->n && !s->is_last))
		return 0;
	for (i = 0; i < s->n; i++)
		if (!s->chunks[i].klen)
			return 0;
	return 1;
}

/* Does s belong to r as its next batch? */
static int submit_fits(const struct pd_tx_req *r, const struct pd_tx_submit *s)
{
	if (r->agent != s->agent || r->peer != s->peer || r->world_size != s->world_size ||
	    r->total != s->total_chunks || r->last_seen)
		return 0;
	if (s->n > r->total - r->submitted)
		return 0;
	return !s->is_last || r->submitted + s->n == r->total;
}

/* Refuse s: its staging goes back to the pool. */
static int refuse(struct pd_tx *tx, const struct pd_tx_submit *s, int err)
{
	free_staging(tx, s->chunks, s->n);
	tx->st.refused++;
	return err;
}

/* The batch's chunks on the request's grants of the admission (g, the
 * first ng of them) and the rest (b, through an AllocRequest). */
static int accept(struct pd_tx *tx, struct pd_tx_req *r, const struct pd_tx_submit *s,
		  uint64_t now_ns)
{
	uint32_t ng = r->npg - r->pg_used < s->n ? r->npg - r->pg_used : s->n;
	struct pd_tx_batch *g = NULL, *b = NULL;
	struct pd_tx_batch_view v;

	if (ng && !(g = pd_tx_grant_batch(tx, r, s->chunks, ng)))
		return -ENOMEM;
	if (s->n > ng && !(b = batch_new(tx, r, s, ng, now_ns))) {
		if (g)
			pd_tx_batch_del(tx, g);
		return -ENOMEM;
	}
	if (g)
		g->is_last = s->is_last && !b;
	r->pg_used += ng;
	r->tag = s->tag;
	if (!r->first_ns)
		r->first_ns = now_ns;
	r->submitted += s->n;
	r->last_seen = (uint8_t)s->is_last;
	if (!g && !b) {
		pd_tx_req_settle(tx, r, now_ns);
		return 0;
	}
	if (g) { /* a write that fails at once aborts r, which drops b */
		tx->st.pregranted++;
		pd_tx_batch_post(tx, g, now_ns);
	}
	if (!b || r->state != PD_TXR_LIVE)
		return 0;
	r->alloc_sent = 1;
	tx->st.batches++;
	pd_tx_batch_view(b, &v);
	tx->ops.send_alloc(tx->ctx, &v);
	return 0;
}

int pd_tx_submit(struct pd_tx *tx, const struct pd_tx_submit *s, uint64_t now_ns)
{
	struct pd_tx_req *r;

	if (!tx || !submit_valid(s))
		return -EINVAL;
	r = pd_tx_req_find(tx, s->req_id, s->req_id_len, s->rank);
	if (!r)
		return refuse(tx, s, -ENOENT); /* never declared: no staging without admission */
	if (r->state != PD_TXR_LIVE) {
		/* Ended: a completed request refuses as a protocol error. */
		return refuse(tx, s, r->state == PD_TXR_TOMB && !r->status ? -EPROTO : -ECANCELED);
	}
	if (r->admit != PD_TXA_OK || !submit_fits(r, s)) {
		refuse(tx, s, -EPROTO);
		pd_tx_req_abort(tx, r, -EPROTO, PD_TX_WHY_FAIL, now_ns);
		return -EPROTO;
	}
	return accept(tx, r, s, now_ns);
}

/* ---- AllocResponse ------------------------------------------------------------ */

#define SKIP_MARK INT32_MIN

/* Copy the remote indexes of m into b, -1 at already_sent positions.
 * @return 0; -EPROTO mismatch; -ENOBUFS a failed index. */
static int map_remote(struct pd_tx_batch *b, const struct pd_tx_resp *m)
{
	uint32_t i, bad = 0;

	if (m->n != b->n || m->nalready > b->n)
		return -EPROTO;
	for (i = 0; i < b->n; i++) {
		b->remote[i] = m->remote[i] < 0 ? -1 : m->remote[i];
		b->gens[i] = m->gens ? m->gens[i] : 0;
	}
	for (i = 0; i < m->nalready; i++) {
		int32_t p = m->already_sent[i];

		if (p < 0 || (uint32_t)p >= b->n || b->remote[p] == SKIP_MARK)
			return -EPROTO;
		b->remote[p] = SKIP_MARK;
	}
	b->nwrite = 0;
	for (i = 0; i < b->n; i++) {
		if (b->remote[i] == SKIP_MARK)
			b->remote[i] = -1;
		else if (b->remote[i] < 0)
			bad = 1;
		else
			b->nwrite++;
	}
	return bad ? -ENOBUFS : 0;
}

/* All chunks of b are at the receiver: staging back, PutDone, count. A
 * batch that ends its request ends it first (the agent's PUT_DONE, the
 * ProxyNotif), then sends its PutDone: the agent's wake-up does not queue
 * behind the control plane's send and the wake-up of its I/O thread. What
 * the PutDone may settle for sibling ranks (their aborts) comes after it,
 * as before. The receiver commits nothing before the PutDone comes, and
 * the PutDone leaves in this same turn. */
static void batch_complete(struct pd_tx *tx, struct pd_tx_batch *b, uint64_t now_ns)
{
	struct pd_tx_req *r = b->req;
	struct pd_tx_batch_view v;
	uint32_t i, k = 0;

	for (i = 0; i < b->n; i++)
		if (b->remote[i] >= 0)
			tx->idx[k++] = b->remote[i];
	free_staging(tx, b->chunks, b->n);
	r->completed += b->n;
	r->bytes += b->bytes;
	tx->st.chunks += b->n;
	tx->st.bytes += b->bytes;
	pd_tx_batch_view(b, &v);
	batch_unlink(tx, b);
	pd_tx_req_end_done(tx, r, now_ns); /* r stays, a tombstone */
	if (k)
		tx->ops.put_done(tx->ctx, &v, tx->idx, k);
	pd_tx_req_settle(tx, r, now_ns);
	free(b);
}

void pd_tx_batch_post(struct pd_tx *tx, struct pd_tx_batch *b, uint64_t now_ns)
{
	struct pd_tx_req *r = b->req;
	struct pd_tx_batch_view v;
	int rc;

	b->state = PD_TXB_IDLE;
	if (!b->nwrite) {
		batch_complete(tx, b, now_ns);
		return;
	}
	b->state = PD_TXB_WRITING;
	r->inflight++;
	tx->st.writes_in_flight++;
	pd_tx_batch_view(b, &v);
	rc = tx->ops.write(tx->ctx, &v);
	if (rc >= 0)
		return;
	b->state = PD_TXB_IDLE;            /* nothing posted: abort drops it */
	r->inflight--;
	tx->st.writes_in_flight--;
	pd_tx_req_abort(tx, r, rc, PD_TX_WHY_FAIL, now_ns);
}

int pd_tx_alloc_resp(struct pd_tx *tx, const struct pd_tx_resp *m, uint64_t now_ns)
{
	struct pd_tx_batch *b;
	int rc;

	if (!tx || !m || (m->n && !m->remote) || (m->nalready && !m->already_sent))
		return -EINVAL;
	b = batch_find(tx, m->seq);
	if (!b || b->req->peer != m->peer || b->state != PD_TXB_WAIT) {
		tx->st.stale_responses++;
		return -ENOENT;
	}
	if (m->err) {
		pd_tx_req_abort(tx, b->req, m->err < 0 ? m->err : -EPROTO, PD_TX_WHY_FAIL, now_ns);
		return 0;
	}
	if (b->reserve)
		return pd_tx_reserve_done(tx, b, m, now_ns);
	rc = map_remote(b, m);
	if (rc) {
		pd_tx_req_abort(tx, b->req, rc, PD_TX_WHY_FAIL, now_ns);
		return rc == -EPROTO ? rc : 0;
	}
	TAILQ_REMOVE(&tx->waiting, b, wait_link);
	pd_tx_batch_post(tx, b, now_ns);
	return 0;
}

/* ---- write completion --------------------------------------------------------- */

int pd_tx_write_done(struct pd_tx *tx, uint64_t seq, int rc, uint64_t now_ns)
{
	struct pd_tx_batch *b;
	struct pd_tx_req *r;

	if (!tx)
		return -EINVAL;
	b = batch_find(tx, seq);
	if (!b || b->state != PD_TXB_WRITING)
		return -ENOENT;
	r = b->req;
	b->state = PD_TXB_IDLE;
	PD_ASSERT(r->inflight > 0);
	r->inflight--;
	tx->st.writes_in_flight--;
	if (!rc && r->state == PD_TXR_LIVE) {
		batch_complete(tx, b, now_ns);
		return 0;
	}
	pd_tx_batch_drop(tx, b);
	if (rc && r->state == PD_TXR_LIVE)
		pd_tx_req_abort(tx, r, rc < 0 ? rc : -EIO, PD_TX_WHY_FAIL, now_ns);
	else
		pd_tx_req_settle(tx, r, now_ns);
	return 0;
}

const struct pd_stat_hist *pd_tx_req_hist(const struct pd_tx *tx)
{
	return &tx->req_hist;
}

static uint32_t info_state(const struct pd_tx_req *r)
{
	const struct pd_tx_batch *b;

	if (r->state == PD_TXR_ABORTING)
		return PD_TX_INFO_DRAINING;
	if (r->admit == PD_TXA_WAIT)
		return PD_TX_INFO_DECLARED;
	if (r->inflight)
		return PD_TX_INFO_WRITING;
	TAILQ_FOREACH(b, &r->batches, req_link)
		if (b->state == PD_TXB_WAIT)
			return PD_TX_INFO_ALLOCATING;
	return PD_TX_INFO_IDLE;
}

void pd_tx_foreach(const struct pd_tx *tx, void (*fn)(void *ctx, const struct pd_tx_info *i),
		   void *ctx)
{
	const struct pd_tx_req *r;
	struct pd_tx_info i;

	TAILQ_FOREACH(r, &tx->live, link) {
		i = (struct pd_tx_info){ .req_id = r->req_id, .req_id_len = r->req_id_len,
					 .rank = r->rank, .peer = r->peer,
					 .state = info_state(r), .total = r->total,
					 .completed = r->completed, .start_ns = r->start_ns };
		fn(ctx, &i);
	}
}
